//! LSA barrier sessions (NCCL's `ncclLsaBarrierSession`, unicast form): the ranks of the LSA
//! team meet, each with one [`Coop`] (a thread, a warp or a block), over lines in the
//! resource window of [`DevComm`].
//!
//! # Layout
//! Barrier `b` of `lsa_barrier_count` is `lsa_size` u64 lines at
//! `resource.local + lsa_barrier_offset + 8 * (b * lsa_size + s)` in every rank's copy of
//! the resource window; line `(b, s)` of rank `q`'s copy is written only by LSA rank `s`
//! and read only by `q`. This rank's epoch of barrier `b` is persisted between kernels at
//! `resource.local + lsa_epoch_offset + 8 * b` (local only). The host zeroes both.
//!
//! # Protocol
//! - [`LsaBarrierSession::new`]: every thread of the coop loads the persisted epoch `e`.
//! - `arrive(order)`: `e += 1`; the coop meets ([`Coop::sync`]); then coop thread `t`
//!   stores `e` into line `(b, me)` of LSA peers `t, t + size, ...` (its own copy
//!   included): `st.release.sys` when `order` releases, else `st.relaxed.sys`.
//! - `wait(order)`: coop thread `t` polls line `(b, t)`, `(b, t + size)`, ... of its own copy
//!   until the value is `>= e` (rolling compare: `(v - e) as i64 >= 0`), with
//!   `ld.acquire.sys` when `order` acquires, else `ld.relaxed.sys`; then the coop meets
//!   again (and agrees on success: [`Coop::sync_any`] of the failure bit).
//! - [`LsaBarrierSession::end`] (or drop; every thread of the coop): coop thread 0 stores
//!   `e` back, then the coop meets ([`Coop::sync`], as NCCL's session destructor), so that
//!   the next session on the same barrier continues from it: the next kernel's (stream
//!   order), and also a next session of the same coop in the same kernel, whose `new` in
//!   the other coop threads would otherwise load the old epoch before thread 0's store
//!   (those threads would then store an older epoch into the peers' lines and take old lines
//!   for the new barrier).
//!
//! One line per (barrier, peer) suffices: values only grow, and peer `s` cannot store
//! `e + 2` into my line before I stored `e + 1` into its own (its wait at `e + 1` needs my
//! arrival), so a line is at most one epoch ahead of my wait, and `>=` accepts it.
//!
//! # Memory ordering (what pairs with what)
//! - A releasing arrive (`Release`, `AcqRel`) pairs with an acquiring wait (`Acquire`,
//!   `AcqRel`) of every peer: the arriving coop's writes before `arrive` (of every one of its
//!   threads: `bar.sync` orders them before thread `t`'s `st.release.sys`, and release is
//!   cumulative) happen before every read of the waiting coop after `wait` (thread `t`'s
//!   `ld.acquire.sys` that sees the epoch, then `bar.sync` for the rest of the coop). This
//!   is the "write your peers' buffers, barrier, read your own" pattern.
//! - `Relaxed` orders nothing but execution: every coop thread of every LSA rank has
//!   reached `arrive` before any passes `wait`. `Acquire` alone pairs with an earlier
//!   releasing arrive (or a `fence.acq_rel.sys`) of the peers; `Release` alone with a later
//!   acquire (for example the next barrier's).
//! - Scope is always `.sys`: ranks may sit on different GPUs of the node.
//! - On the host target (CPU backend), the same functions use `core` atomics with the
//!   matching `Ordering` (`Release` stores, `Acquire` loads, `Relaxed` otherwise).
//!
//! # Aborts and timeouts
//! Every poll checks [`DevComm::abort_flag`] and [`DevComm::timeout_ns`] (or the timeout
//! given to [`LsaBarrierSession::wait_timeout`]) every [`crate::arch::SPINS_PER_CHECK`]
//! spins, like every other wait of oxccl ([`crate::prims::wait::Waiter`]). A failed wait
//! makes the session failed (sticky: its peers are now out of step), which `wait`/`sync`
//! report by [`LsaBarrierSession::error`] and the `try_*` forms by `Err`.

use super::abi::DevComm;
use super::coop::Coop;
use super::error::DevError;
use crate::arch;
use crate::prims::wait::Waiter;

/// Memory order of a barrier operation (NCCL's `cuda::memory_order` argument; values as
/// `cuda::std::memory_order`: relaxed 0, acquire 2, release 3, acq_rel 4).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemOrder {
    Relaxed = 0,
    Acquire = 2,
    Release = 3,
    AcqRel = 4,
}

impl MemOrder {
    /// From a `cuda::std::memory_order` value; `consume` (1) acts as acquire, `seq_cst` (5)
    /// and unknown values as acq_rel (the strongest this API offers).
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Self {
        match v {
            0 => MemOrder::Relaxed,
            1 | 2 => MemOrder::Acquire,
            3 => MemOrder::Release,
            _ => MemOrder::AcqRel,
        }
    }

    /// Whether an arrive with this order releases.
    #[inline(always)]
    pub const fn releases(self) -> bool {
        matches!(self, MemOrder::Release | MemOrder::AcqRel)
    }

    /// Whether a wait with this order acquires.
    #[inline(always)]
    pub const fn acquires(self) -> bool {
        matches!(self, MemOrder::Acquire | MemOrder::AcqRel)
    }
}

/// One coop's use of LSA barrier `index` in one kernel (see the module doc).
#[derive(Debug)]
pub struct LsaBarrierSession<C: Coop> {
    coop: C,
    /// Address of line `(index, 0)` of this rank's copy.
    lines: u64,
    /// Distance between consecutive LSA ranks' copies of the resource window.
    stride: u64,
    /// Where the epoch persists between kernels.
    epoch_at: u64,
    /// The epoch of the last arrival.
    epoch: u64,
    abort_flag: u64,
    timeout_ns: u64,
    lsa_rank: u32,
    lsa_size: u32,
    /// 0, or the `ERR_*` code of the first failed wait.
    failed: u32,
}

impl<C: Coop> LsaBarrierSession<C> {
    /// Start using barrier `index` of `comm` with `coop` (every thread of the coop calls it):
    /// loads the persisted epoch.
    ///
    /// # Safety
    /// `comm` must describe a live resource window holding `comm.lsa_barrier_count`
    /// barriers laid out as in the module doc, mapped for every LSA peer, and a valid abort
    /// flag address (or 0); `index < comm.lsa_barrier_count`; no other coop uses barrier
    /// `index` of this rank at the same time.
    #[inline]
    pub unsafe fn new(coop: C, comm: &DevComm, index: u32) -> Self {
        let res = &comm.resource;
        let lines = res
            .local
            .wrapping_add(comm.lsa_barrier_offset)
            .wrapping_add(8 * index as u64 * comm.lsa_size as u64);
        let epoch_at = res
            .local
            .wrapping_add(comm.lsa_epoch_offset)
            .wrapping_add(8 * index as u64);
        // SAFETY: caller contract: the epoch slot is in this rank's resource window.
        let epoch = unsafe { arch::load_u64(epoch_at as *const u64) };
        LsaBarrierSession {
            coop,
            lines,
            stride: res.stride,
            epoch_at,
            epoch,
            abort_flag: comm.abort_flag,
            timeout_ns: comm.timeout_ns,
            lsa_rank: comm.lsa_rank,
            lsa_size: comm.lsa_size,
            failed: 0,
        }
    }

    /// The coop this session runs on.
    #[inline(always)]
    pub fn coop(&self) -> &C {
        &self.coop
    }

    /// The epoch of the last arrival (the persisted one before the first).
    #[inline(always)]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The first failure of a wait of this session, if any (sticky).
    #[inline(always)]
    pub fn error(&self) -> Option<DevError> {
        DevError::from_code(self.failed)
    }

    /// Line `(index, s)` of LSA rank `q`'s copy.
    #[inline(always)]
    fn line(&self, q: u32, s: u32) -> *mut u64 {
        let delta = (q as i64 - self.lsa_rank as i64) as u64;
        self.lines
            .wrapping_add(delta.wrapping_mul(self.stride))
            .wrapping_add(8 * s as u64) as *mut u64
    }

    /// Arrive: bump the epoch and store it into this rank's line of every LSA peer
    /// (released at system scope when `order` releases).
    #[inline]
    pub fn arrive(&mut self, order: MemOrder) {
        self.epoch = self.epoch.wrapping_add(1);
        self.coop.sync();
        let mut q = self.coop.thread_rank();
        while q < self.lsa_size {
            let p = self.line(q, self.lsa_rank);
            // SAFETY: `new`'s contract: line (index, me) of every LSA peer's copy is mapped
            // and written only by this rank.
            unsafe {
                if order.releases() {
                    arch::store_release_sys_u64(p, self.epoch);
                } else {
                    arch::store_relaxed_sys_u64(p, self.epoch);
                }
            }
            q += self.coop.size();
        }
    }

    /// Wait until every LSA peer arrived at this session's epoch (acquired at system scope
    /// when `order` acquires), giving up after `timeout_ns` (0 = never) or on abort.
    /// Every thread of the coop returns the same answer.
    #[inline]
    pub fn wait_timeout(&mut self, order: MemOrder, timeout_ns: u64) -> Result<(), DevError> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        let waiter = Waiter {
            abort_flag: self.abort_flag,
            timeout_ns,
        };
        let mut err: Option<DevError> = None;
        let mut s = self.coop.thread_rank();
        while s < self.lsa_size {
            let p = self.line(self.lsa_rank, s) as *const u64;
            // SAFETY: `new`'s contract: line (index, s) of this rank's copy is mapped and
            // written by peer `s` only, atomically; the abort flag is valid or 0.
            let r = unsafe {
                if order.acquires() {
                    waiter.wait_geq_acquire_sys(p, self.epoch)
                } else {
                    waiter.wait_geq_relaxed_sys(p, self.epoch)
                }
            };
            if let Err(e) = r {
                err = Some(e.into());
                break;
            }
            s += self.coop.size();
        }
        if !self.coop.sync_any(err.is_some()) {
            return Ok(());
        }
        // Agree on which error: aborted if any thread saw the abort flag.
        let e = if self.coop.sync_any(err == Some(DevError::Aborted)) {
            DevError::Aborted
        } else {
            DevError::Timeout
        };
        self.failed = e.code();
        Err(e)
    }

    /// [`Self::wait_timeout`] with the communicator's timeout.
    #[inline]
    pub fn try_wait(&mut self, order: MemOrder) -> Result<(), DevError> {
        self.wait_timeout(order, self.timeout_ns)
    }

    /// Wait as [`Self::try_wait`]; a failure is kept in [`Self::error`] and returned by
    /// every later wait of this session.
    #[inline]
    pub fn wait(&mut self, order: MemOrder) {
        let _ = self.try_wait(order);
    }

    /// Arrive, then wait (NCCL's `sync`), with the communicator's timeout.
    #[inline]
    pub fn try_sync(&mut self, order: MemOrder) -> Result<(), DevError> {
        self.arrive(order);
        self.try_wait(order)
    }

    /// [`Self::try_sync`], the failure kept in [`Self::error`].
    #[inline]
    pub fn sync(&mut self, order: MemOrder) {
        let _ = self.try_sync(order);
    }

    /// End the session: persist the epoch for the next session on this barrier, in this
    /// kernel or the next (also done on drop). Every thread of the coop calls it.
    #[inline]
    pub fn end(self) {}

    /// Store the epoch back (coop thread 0), then meet, so that no coop thread can start a
    /// next session on this barrier before the store.
    #[inline(always)]
    fn persist(&self) {
        if self.coop.thread_rank() == 0 {
            // SAFETY: `new`'s contract: the epoch slot is in this rank's resource window,
            // used by this session's coop only.
            unsafe { arch::store_u64(self.epoch_at as *mut u64, self.epoch) };
        }
        self.coop.sync();
    }
}

impl<C: Coop> Drop for LsaBarrierSession<C> {
    #[inline]
    fn drop(&mut self) {
        self.persist();
    }
}
