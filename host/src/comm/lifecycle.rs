//! The end of a communicator's life: [`Comm::finalize`], [`Comm::destroy`] and `Drop`, and
//! the checks the launch paths make (finalized? which stream?).
//!
//! NCCL's contract: finalize completes the rank's outstanding operations and, since every
//! rank finalizes, is collective in effect; after it only destroy is valid. Here finalize
//! waits for the streams this rank launched on, then meets the other ranks on the control
//! channel, so that once it returns no kernel of any rank touches any inbox any more (ranks
//! of `init_rank` communicators own their inboxes, which peers write to). Destroy (or drop)
//! waits for this rank's streams too, then frees what no other rank of the group holds.

use std::sync::atomic::Ordering;

use super::Comm;
use crate::backend::Stream;
use crate::error::{Error, Result};

impl Comm {
    /// Fails with [`Error::Finalized`] once [`Comm::finalize`] was called; records `stream`
    /// as one this rank launches on. Every launch path calls it first.
    pub(crate) fn check_launch(&self, op: &'static str, stream: &Stream) -> Result<()> {
        self.check_live(op)?;
        self.streams.note(stream);
        Ok(())
    }

    /// Fails with [`Error::Finalized`] once [`Comm::finalize`] was called.
    pub(crate) fn check_live(&self, op: &'static str) -> Result<()> {
        if self.finalized.load(Ordering::Acquire) {
            return Err(Error::Finalized { op, rank: self.rank });
        }
        Ok(())
    }

    /// Whether [`Comm::finalize`] was called.
    pub fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::Acquire)
    }

    /// Waits for the work of every stream this rank launched on (those the user still
    /// holds); the first error wins.
    pub(super) fn sync_streams(&self) -> Result<()> {
        let mut first = None;
        for s in self.streams.live() {
            if let Err(e) = self.group.backend.synchronize(&s) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// NCCL's `ncclCommFinalize`: wait until this rank's launched operations completed, then
    /// meet every other rank (they finalize too, each from its own thread when several ranks
    /// live in this process; the wait is bounded by the bootstrap timeout and cut short by
    /// [`Comm::abort`]), then report the first device error of this rank, if any. Afterwards every collective and split fails with [`Error::Finalized`]; only
    /// [`Comm::destroy`] (or dropping) remains. Finalizing twice is an error.
    pub fn finalize(&self) -> Result<()> {
        const OP: &str = "finalize";
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Err(Error::Finalized {
                op: OP,
                rank: self.rank,
            });
        }
        let _span = tracing::info_span!(target: "oxccl::init", "finalize", rank = self.rank).entered();
        let synced = self.sync_streams();
        let met = self
            .control
            .barrier(OP, self.rank, self.nranks, self.control.abort_flag());
        synced?;
        met?;
        self.async_error()
    }

    /// NCCL's `ncclCommDestroy`: waits for this rank's launched work (not the other ranks':
    /// call [`Comm::finalize`] first for that), frees this rank's share of the resources
    /// (everything once the group's last rank is gone) and returns the pending device error
    /// of this rank, if any, or the error of that wait.
    pub fn destroy(self) -> Result<()> {
        let synced = self.sync_streams();
        let pending = self.async_error();
        drop(self);
        synced.and(pending)
    }
}

/// Dropping waits for this rank's launched work, like [`Comm::destroy`] (the kernels use the
/// memory freed with the group); it never panics and reports nothing (use `destroy` for
/// the error). Abort first to cut a wait for a rank that never comes short.
impl Drop for Comm {
    fn drop(&mut self) {
        // Send/recv operations still pending in a group must not launch on freed memory.
        self.p2p.closed.store(true, Ordering::Release);
        if let Err(e) = self.sync_streams() {
            tracing::warn!(target: "oxccl::init", rank = self.rank, "dropping a communicator: {e}");
        }
    }
}
