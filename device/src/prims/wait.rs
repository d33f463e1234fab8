//! Bounded waits: every spin loop in oxccl goes through [`Waiter`], which polls the
//! communicator's abort flag and a deadline every [`crate::arch::SPINS_PER_CHECK`] spins
//! (release builds too) and turns a hang into an error code.

use crate::abi::{ErrorRecord, ERR_ABORTED, ERR_TIMEOUT};
use crate::arch;

/// Why a wait gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The abort flag was raised.
    Aborted,
    /// The deadline passed; carries the last value seen.
    Timeout { last: u64 },
}

impl WaitError {
    /// The `ERR_*` code.
    pub fn code(self) -> u32 {
        match self {
            WaitError::Aborted => ERR_ABORTED,
            WaitError::Timeout { .. } => ERR_TIMEOUT,
        }
    }
}

/// Abort and timeout policy of one wait.
#[derive(Clone, Copy, Debug)]
pub struct Waiter {
    /// `*const u32` abort flag (0 = none).
    pub abort_flag: u64,
    /// Nanoseconds; 0 = no deadline.
    pub timeout_ns: u64,
}

impl Waiter {
    /// Returns `Err` if the abort flag is raised.
    #[inline]
    pub fn check_abort(&self) -> Result<(), WaitError> {
        // SAFETY: the host gives a valid, aligned, host-written flag address (or 0).
        if self.abort_flag != 0 && unsafe { arch::load_volatile_u32(self.abort_flag as *const u32) } != 0 {
            return Err(WaitError::Aborted);
        }
        Ok(())
    }

    /// Spin until `(*p).wrapping_sub(target) as i64 >= 0` (a rolling `>=`), with an acquire
    /// load at system scope; returns the value seen.
    ///
    /// # Safety
    /// `p` must be a valid, 8-byte aligned flag written with release stores by peers.
    #[inline]
    pub unsafe fn wait_geq_acquire_sys(&self, p: *const u64, target: u64) -> Result<u64, WaitError> {
        // SAFETY: caller contract: `p` is a valid, aligned flag.
        unsafe { Self::seen(self.wait_geq_with(p, target, 0, |p| arch::load_acquire_sys_u64(p))) }
    }

    /// As [`Self::wait_geq_acquire_sys`], or at GPU scope when `gpu` (as
    /// [`Self::wait_geq_acquire_gpu`]), that also stops, with `Ok(None)`, once an error is
    /// recorded in `rec` (checked with the abort flag): a waiter whose own peer is fine gives
    /// up when another thread of its rank found the operation failed (a mismatch, say), since
    /// what it waits for may never come: a block that starts after its rank failed does no
    /// work, so the peer's block that waits for it would otherwise wait until its timeout.
    ///
    /// # Safety
    /// As [`Self::wait_geq_acquire_sys`]; `rec` is a valid, aligned `ErrorRecord` address or 0.
    #[inline(always)]
    pub unsafe fn wait_geq_acquire_unless_recorded(
        &self,
        p: *const u64,
        target: u64,
        gpu: bool,
        rec: u64,
    ) -> Result<Option<u64>, WaitError> {
        // SAFETY: caller contract: `p` is a valid, aligned flag, `rec` a record or 0.
        unsafe {
            if gpu {
                self.wait_geq_with(p, target, rec, |p| arch::load_acquire_gpu_u64(p))
            } else {
                self.wait_geq_with(p, target, rec, |p| arch::load_acquire_sys_u64(p))
            }
        }
    }

    /// As [`Self::wait_geq_acquire_sys`] with the acquire load at GPU scope (every writer runs
    /// on this device).
    ///
    /// # Safety
    /// As [`Self::wait_geq_acquire_sys`].
    #[inline]
    pub unsafe fn wait_geq_acquire_gpu(&self, p: *const u64, target: u64) -> Result<u64, WaitError> {
        // SAFETY: caller contract: `p` is a valid, aligned flag.
        unsafe { Self::seen(self.wait_geq_with(p, target, 0, |p| arch::load_acquire_gpu_u64(p))) }
    }

    /// As [`Self::wait_geq_acquire_sys`] with a relaxed load at system scope: the wait
    /// orders nothing by itself (the caller adds a fence where it needs one).
    ///
    /// # Safety
    /// `p` must be a valid, 8-byte aligned flag written with atomic stores by peers.
    #[inline]
    pub unsafe fn wait_geq_relaxed_sys(&self, p: *const u64, target: u64) -> Result<u64, WaitError> {
        // SAFETY: caller contract: `p` is a valid, aligned flag.
        unsafe { Self::seen(self.wait_geq_with(p, target, 0, |p| arch::load_relaxed_sys_u64(p))) }
    }

    /// The value of a wait without an error record to watch (`rec` 0, so never `None`).
    #[inline(always)]
    fn seen(r: Result<Option<u64>, WaitError>) -> Result<u64, WaitError> {
        r.map(|v| v.unwrap_or(0))
    }

    /// The loop behind the `wait_geq_*` functions, with the poll `load`; `Ok(None)` when an
    /// error got recorded in `rec` (0: none watched).
    ///
    /// # Safety
    /// `load(p)` must be sound to call (as the public callers' contracts make it); `rec` is
    /// a valid, aligned `ErrorRecord` address or 0.
    #[inline(always)]
    unsafe fn wait_geq_with(
        &self,
        p: *const u64,
        target: u64,
        rec: u64,
        load: impl Fn(*const u64) -> u64,
    ) -> Result<Option<u64>, WaitError> {
        let mut spins: u32 = 0;
        let mut total: u32 = 0;
        let mut start: u64 = 0;
        loop {
            let v = load(p);
            if (v.wrapping_sub(target) as i64) >= 0 {
                return Ok(Some(v));
            }
            spins += 1;
            total = total.saturating_add(1);
            arch::spin_backoff(total);
            if spins >= arch::SPINS_PER_CHECK || cfg!(not(target_arch = "nvptx64")) {
                spins = 0;
                // SAFETY: caller contract: `rec` is a valid record or 0.
                match unsafe { self.check(rec, start, v) } {
                    Checked::Go { start: s } => start = s,
                    Checked::Recorded => return Ok(None),
                    Checked::Failed(e) => return Err(e),
                }
            }
        }
    }

    /// The checks a wait makes every [`arch::SPINS_PER_CHECK`] spins (every spin on the host):
    /// the abort flag, the error record `rec` (0: none watched), and the deadline, counted
    /// from `start` (0: this is the first check, which starts it). `last`: the value the wait
    /// saw last, for the timeout's report. Shared by [`Self::wait_geq_with`] and the mailbox
    /// line polls (`crate::coll::sym::mailbox`).
    ///
    /// # Safety
    /// `rec` is a valid, aligned `ErrorRecord` address or 0.
    #[inline(always)]
    pub unsafe fn check(&self, rec: u64, start: u64, last: u64) -> Checked {
        if let Err(e) = self.check_abort() {
            return Checked::Failed(e);
        }
        // SAFETY: caller contract.
        if unsafe { error_recorded(rec) } {
            return Checked::Recorded;
        }
        // Never 0, so that 0 keeps meaning "not started".
        let now = arch::globaltimer() | 1;
        if start == 0 {
            Checked::Go { start: now }
        } else if self.timeout_ns != 0 && now.wrapping_sub(start) > self.timeout_ns {
            Checked::Failed(WaitError::Timeout { last })
        } else {
            Checked::Go { start }
        }
    }
}

/// What [`Waiter::check`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// Keep waiting; the deadline counts from `start`.
    Go { start: u64 },
    /// An error is recorded for this rank (by another thread, say): what the wait waits
    /// for may never come.
    Recorded,
    /// Aborted, or past the deadline.
    Failed(WaitError),
}

/// Record the first error of this rank (first writer wins; later ones are dropped).
///
/// Out of line and cold: every kernel has several call sites, all on error paths, and
/// inlined they put the atomics and stores in among the hot instructions (with the poll
/// checks out of line too, `oxccl_sym_lamport_f32` went from 16.5k to 13.5k SASS lines).
///
/// # Safety
/// `rec` must be a valid, aligned `ErrorRecord` address shared by the rank's threads.
#[cold]
#[inline(never)]
pub unsafe fn report_error(rec: u64, code: u32, rank: u32, peer: u32, block: u32, epoch: u64, detail: u64) {
    if rec == 0 {
        return;
    }
    let r = rec as *mut ErrorRecord;
    let code_p = core::ptr::addr_of_mut!((*r).code);
    if arch::atomic_cas_acq_rel_sys_u32(code_p, 0, u32::MAX) == 0 {
        arch::store_volatile_u32(core::ptr::addr_of_mut!((*r).rank), rank);
        arch::store_volatile_u32(core::ptr::addr_of_mut!((*r).peer), peer);
        arch::store_volatile_u32(core::ptr::addr_of_mut!((*r).block), block);
        arch::store_volatile_u64(core::ptr::addr_of_mut!((*r).epoch), epoch);
        arch::store_volatile_u64(core::ptr::addr_of_mut!((*r).detail), detail);
        arch::store_release_sys_u32(code_p, code);
    }
}

/// [`report_error`] of a wait that gave up: the abort, or the timeout with the last value
/// seen as the detail.
///
/// # Safety
/// As [`report_error`], or `rec` 0.
#[inline(always)]
pub unsafe fn report_wait_error(rec: u64, e: WaitError, rank: u32, peer: u32, block: u32, epoch: u64) {
    let last = match e {
        WaitError::Timeout { last } => last,
        WaitError::Aborted => 0,
    };
    report_error(rec, e.code(), rank, peer, block, epoch, last);
}

/// True if any error is recorded (or being recorded) for this rank: a waiter whose own peer
/// is fine stops anyway once a sibling thread reported, e.g. a mismatch, rather than waiting
/// for lines that will never come until its timeout. For slow paths (the record may live in
/// host memory).
///
/// # Safety
/// `rec` must be a valid, aligned `ErrorRecord` address or 0.
#[inline(always)]
pub unsafe fn error_recorded(rec: u64) -> bool {
    error_code(rec) != 0
}

/// The code word of this rank's error record (0: none; `u32::MAX`: being written), one
/// volatile load whose value the caller tests later, so that the load overlaps others.
///
/// # Safety
/// As [`error_recorded`].
#[inline(always)]
pub unsafe fn error_code(rec: u64) -> u32 {
    if rec == 0 {
        return 0;
    }
    arch::load_volatile_u32(core::ptr::addr_of!((*(rec as *const ErrorRecord)).code))
}

/// True if an error was recorded for this rank by an earlier operation, i.e. at an epoch
/// `<= before` (sticky, like NCCL's async error: a failed communicator does no more work).
///
/// Errors of the current operation (epochs `> before`) do not count: every block of a rank
/// must take part in the current operation's barriers even if a sibling block already
/// failed in it, or peers would wait for the missing block until their timeout.
///
/// # Safety
/// `rec` must be a valid, aligned `ErrorRecord` address or 0.
#[inline]
pub unsafe fn failed_before(rec: u64, before: u64) -> bool {
    if rec == 0 {
        return false;
    }
    let r = rec as *const ErrorRecord;
    let mut spins = 0u32;
    loop {
        match arch::load_acquire_sys_u32(core::ptr::addr_of!((*r).code)) {
            0 => return false,
            // Being written by another block of this rank: a few stores away.
            u32::MAX if spins < 1 << 20 => {
                spins += 1;
                arch::spin_backoff(spins);
            }
            _ => return arch::load_volatile_u64(core::ptr::addr_of!((*r).epoch)) <= before,
        }
    }
}
