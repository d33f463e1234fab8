//! The inbox barrier: a flag barrier between the ranks of a communicator that also carries
//! each rank's buffer addresses and the operation's fingerprint.
//!
//! # Protocol
//! Every rank `q` owns an inbox `[MAX_BLOCKS][nranks]` of [`SyncLine`]s. Line `(b, s)` of
//! rank `q`'s inbox is written only by block `b` of rank `s`. Blocks are matched by index
//! across ranks: every rank launches the same grid for the same call, and block `b` of every
//! rank works on the same part of the data.
//!
//! `arrive(e, payload)` by block `b` of rank `s`: `sync_threads` (the block's earlier stores
//! are done), then thread `t < nranks` stores `payload` into line `(b, s)` of rank `t`'s
//! inbox with weak stores, `fence.acq_rel.sys`, and `epoch = e` with `st.release.sys`.
//!
//! `wait(e)`: thread `t < nranks` spins on line `(b, t)` of its own inbox with
//! `ld.acquire.sys` until `epoch >= e` (rolling compare), then `sync_threads`. After that,
//! every thread of the block may read the payloads and the data the peers wrote before they
//! arrived (release/acquire at system scope, extended to the block by `bar.sync`).
//!
//! Reuse: two barriers per operation, entry at `base + 1` with a payload and exit at
//! `base + 2` without one (its arrival stores only the epoch, never the payload, because a
//! peer may overtake: it can arrive at the exit while this rank still reads the entry
//! payload). A payload is rewritten only by the next operation's entry arrival, which its
//! writer makes after passing this operation's exit barrier, which needs the reader's exit
//! arrival, made after the reader finished with the payload. So a payload read between
//! `wait(base + 1)` and the reader's own exit arrival is the one of this operation.
//!
//! Epochs are 64-bit and grow by 2 per operation: they do not wrap in practice, and the
//! rolling compare keeps them correct if they did.

use crate::abi::{CommArgs, SyncLine, MAX_BLOCKS};
use crate::arch;
use crate::exec::ExecCtx;
use crate::prims::wait::{report_error, Waiter};

/// Address of line `(block, src)` of the inbox at `inbox`.
#[inline(always)]
pub fn line_addr(inbox: u64, nranks: u32, block: u32, src: u32) -> *mut SyncLine {
    debug_assert!((block as usize) < MAX_BLOCKS);
    (inbox as *mut SyncLine).wrapping_add(block as usize * nranks as usize + src as usize)
}

pub use crate::prims::layout::inbox_bytes;

/// The inbox base address of rank `q`, as seen by this rank.
///
/// # Safety
/// `comm.inboxes` must point to `nranks` valid addresses.
#[inline(always)]
pub unsafe fn inbox_of(comm: &CommArgs, q: u32) -> u64 {
    arch::load_u64((comm.inboxes as *const u64).add(q as usize))
}

/// The delta to add to an address rank `q` published to reach it from this rank (see
/// [`crate::prims::layout`]; 0 for ranks in this process).
///
/// # Safety
/// `comm.inboxes` must point to a full table (`2 * nranks` entries).
#[inline(always)]
pub unsafe fn delta_of(comm: &CommArgs, q: u32) -> u64 {
    arch::load_u64((comm.inboxes as *const u64).add((comm.nranks + q) as usize))
}

/// What an arrival publishes besides its epoch.
#[derive(Clone, Copy, Debug)]
pub struct Payload {
    pub send: u64,
    pub recv: u64,
    pub fingerprint: u64,
}

/// Arrive at barrier epoch `epoch`, publishing `payload` if given. An arrival without a
/// payload leaves the line's payload as it is: peers may still be reading it (the exit
/// arrival of a call can overtake a slow peer's reading of the entry payload).
///
/// # Safety
/// Called by every thread of the block; `comm` must describe valid inboxes.
#[inline]
pub unsafe fn arrive(ctx: &ExecCtx, comm: &CommArgs, epoch: u64, payload: Option<Payload>) {
    ctx.sync_threads();
    let mut t = ctx.thread;
    while t < comm.nranks {
        let line = line_addr(inbox_of(comm, t), comm.nranks, ctx.block, comm.rank);
        if let Some(p) = payload {
            arch::store_u64(core::ptr::addr_of_mut!((*line).send), p.send);
            arch::store_u64(core::ptr::addr_of_mut!((*line).recv), p.recv);
            arch::store_u64(core::ptr::addr_of_mut!((*line).fingerprint), p.fingerprint);
        }
        arch::fence_acq_rel_sys();
        arch::store_release_sys_u64(core::ptr::addr_of_mut!((*line).epoch), epoch);
        t += ctx.block_dim;
    }
}

/// Wait until every peer's block arrived at `epoch`. On abort or timeout the error is
/// recorded (naming the peer) and `false` is returned by every thread of the block (the
/// answer is this block's own: another block's failure does not change it).
///
/// # Safety
/// Called by every thread of the block; `comm` must describe valid inboxes and record.
#[inline]
pub unsafe fn wait(ctx: &ExecCtx, comm: &CommArgs, epoch: u64) -> bool {
    let waiter = Waiter {
        abort_flag: comm.abort_flag,
        timeout_ns: comm.timeout_ns,
    };
    let my_inbox = inbox_of(comm, comm.rank);
    let mut failed = false;
    let mut t = ctx.thread;
    while t < comm.nranks {
        let line = line_addr(my_inbox, comm.nranks, ctx.block, t);
        if let Err(e) = waiter.wait_geq_acquire_sys(core::ptr::addr_of!((*line).epoch), epoch) {
            let last = match e {
                crate::prims::wait::WaitError::Timeout { last } => last,
                crate::prims::wait::WaitError::Aborted => 0,
            };
            report_error(comm.error, e.code(), comm.rank, t, ctx.block, epoch, last);
            failed = true;
            break;
        }
        t += ctx.block_dim;
    }
    !ctx.sync_threads_or(failed)
}

/// [`wait`] for an arrival with a payload, then translate the published addresses into this
/// rank's address space: thread `t` adds [`delta_of`] `t` to the `send` and `recv` of line
/// `(block, t)` of its own inbox (skipped when the delta is 0, as for every rank of this
/// process). The line is rewritten only by its peer's next entry arrival, which comes after
/// this rank's exit arrival of the same operation, so the translated values stay put while
/// they are used; the block barrier that ends [`wait`] publishes them to the block.
///
/// # Safety
/// As [`wait`]; the arrival at `epoch` must carry a payload.
#[inline]
pub unsafe fn wait_payload(ctx: &ExecCtx, comm: &CommArgs, epoch: u64) -> bool {
    wait_payload_local(ctx, comm, epoch, None)
}

/// As [`wait_payload`]; with `local = Some((send, recv))`, this rank's own line then holds
/// those addresses instead of the ones it published (a staged call's own user buffers,
/// which only this rank uses; its peers use the published staging buffers). Only this
/// rank reads its own inbox, so the rewrite is private to the call.
///
/// Always inlined: it sits on the entry path of every classic kernel, where a call would
/// add an ABI round of parameter passing (LLVM's own choice flipped to a call once the wait
/// checks moved into [`crate::prims::wait::Waiter::check`]).
///
/// # Safety
/// As [`wait_payload`].
#[inline(always)]
pub unsafe fn wait_payload_local(
    ctx: &ExecCtx,
    comm: &CommArgs,
    epoch: u64,
    local: Option<(u64, u64)>,
) -> bool {
    let waiter = Waiter {
        abort_flag: comm.abort_flag,
        timeout_ns: comm.timeout_ns,
    };
    let my_inbox = inbox_of(comm, comm.rank);
    let mut failed = false;
    let mut t = ctx.thread;
    while t < comm.nranks {
        let line = line_addr(my_inbox, comm.nranks, ctx.block, t);
        if let Err(e) = waiter.wait_geq_acquire_sys(core::ptr::addr_of!((*line).epoch), epoch) {
            let last = match e {
                crate::prims::wait::WaitError::Timeout { last } => last,
                crate::prims::wait::WaitError::Aborted => 0,
            };
            report_error(comm.error, e.code(), comm.rank, t, ctx.block, epoch, last);
            failed = true;
            break;
        }
        let d = delta_of(comm, t);
        if let (Some((ls, lr)), true) = (local, t == comm.rank) {
            arch::store_u64(core::ptr::addr_of_mut!((*line).send), ls);
            arch::store_u64(core::ptr::addr_of_mut!((*line).recv), lr);
        } else if d != 0 {
            let s = core::ptr::addr_of_mut!((*line).send);
            let r = core::ptr::addr_of_mut!((*line).recv);
            arch::store_u64(s, arch::load_u64(s).wrapping_add(d));
            arch::store_u64(r, arch::load_u64(r).wrapping_add(d));
        }
        t += ctx.block_dim;
    }
    !ctx.sync_threads_or(failed)
}

/// The payload peer `q`'s block published (valid after a successful [`wait`]).
///
/// # Safety
/// After [`wait`] returned true for the epoch of this payload.
#[inline(always)]
pub unsafe fn peer_line(ctx: &ExecCtx, comm: &CommArgs, q: u32) -> SyncLine {
    let line = line_addr(inbox_of(comm, comm.rank), comm.nranks, ctx.block, q);
    SyncLine {
        epoch: 0,
        send: arch::load_u64(core::ptr::addr_of!((*line).send)),
        recv: arch::load_u64(core::ptr::addr_of!((*line).recv)),
        fingerprint: arch::load_u64(core::ptr::addr_of!((*line).fingerprint)),
    }
}
