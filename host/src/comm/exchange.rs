//! What the rest of the crate may use of a communicator's host side (its control channel,
//! its abort flags, its job secret), for collective host work outside `comm` such as window
//! registration (`crate::window`). Exchanges are collective, bounded by the bootstrap
//! timeout and cut short by [`Comm::abort`].

use std::time::Duration;

use super::Comm;
use crate::abort::AbortFlag;
use crate::error::Result;

impl Comm {
    /// Every rank's `blob`, in rank order (see `Control::all_gather`).
    pub(crate) fn host_all_gather(&self, op: &'static str, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.control
            .all_gather(op, self.rank, self.nranks, blob, self.control.abort_flag())
    }

    /// Returns once every rank called it.
    pub(crate) fn host_barrier(&self, op: &'static str) -> Result<()> {
        self.control
            .barrier(op, self.rank, self.nranks, self.control.abort_flag())
    }

    /// The flag [`Comm::abort`] raises for host waits.
    pub(crate) fn host_abort_flag(&self) -> &AbortFlag {
        self.control.abort_flag()
    }

    /// The deadline of one host exchange.
    pub(crate) fn host_timeout(&self) -> Duration {
        self.control.timeout()
    }

    /// The job's secret when ranks may live in other processes (`init_rank` communicators).
    pub(crate) fn job_secret(&self) -> Option<[u8; 16]> {
        self.control.secret()
    }

    /// The device-visible abort flag (`*const u32`, non-zero = abort).
    pub(crate) fn device_abort_flag(&self) -> u64 {
        self.group.abort.dev
    }

    /// The communicator's per-rank window list (`crate::window`).
    pub(crate) fn windows(&self) -> &crate::window::CommWindows {
        &self.windows
    }
}

impl Comm {
    /// Wait for the work of every stream this rank launched on (before its memory is
    /// unmapped).
    pub(crate) fn sync_launched(&self) -> Result<()> {
        self.sync_streams()
    }
}
