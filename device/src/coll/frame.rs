//! The frame shared by the broadcast, reduce, all-gather and reduce-scatter kernels: the entry
//! barrier with its fingerprint check, and the exit barrier (see [`crate::prims::barrier`]).
//!
//! - [`enter`]: skip the call if an earlier operation of this rank failed (sticky error,
//!   exactly as the all-reduce does), arrive at `epoch + 1` publishing this rank's `send`,
//!   `recv` and fingerprint, wait for every peer, and compare every peer's fingerprint with
//!   ours. After it, every peer's input is ready and its addresses can be read from the inbox
//!   lines; on a failure (abort, timeout, mismatch) the error is recorded and the call does
//!   nothing more (no loads or stores through addresses of a call the peers did not make).
//! - [`exit`]: arrive at `epoch + 2` without a payload and wait: every store into this rank's
//!   output has landed and no peer still reads this rank's input, so the call may complete.

use crate::abi::{CollArgs, SyncLine, ERR_MISMATCH};
use crate::arch;
use crate::coll::reduce_copy::{Addrs, Field, FAN};
use crate::exec::ExecCtx;
use crate::prims::barrier::{arrive, inbox_of, line_addr, wait, wait_payload, Payload};
use crate::prims::wait::{failed_before, report_error};

/// The entry barrier and fingerprint check. Returns this block's inbox lines (one per rank,
/// holding the peers' published addresses) when the call may go on.
///
/// # Safety
/// Called by every thread of the block; `a.comm` must describe valid inboxes and record.
#[inline(always)]
pub unsafe fn enter(ctx: &ExecCtx, a: &CollArgs) -> Option<*const SyncLine> {
    let comm = &a.comm;
    let n = comm.nranks;
    if n == 0 || failed_before(comm.error, a.epoch) {
        return None;
    }
    arrive(
        ctx,
        comm,
        a.epoch + 1,
        Some(Payload {
            send: a.send,
            recv: a.recv,
            fingerprint: a.fingerprint,
        }),
    );
    if !wait_payload(ctx, comm, a.epoch + 1) {
        return None;
    }
    let lines = line_addr(inbox_of(comm, comm.rank), n, ctx.block, 0) as *const SyncLine;
    let mut q = 0;
    while q < n {
        let l = lines.add(q as usize);
        let fp = arch::load_u64(core::ptr::addr_of!((*l).fingerprint));
        if fp != a.fingerprint {
            if ctx.thread == 0 {
                report_error(comm.error, ERR_MISMATCH, comm.rank, q, ctx.block, a.epoch + 1, fp);
            }
            return None;
        }
        q += 1;
    }
    Some(lines)
}

/// The exit barrier.
///
/// # Safety
/// Called by every thread of the block after a successful [`enter`] of the same call.
#[inline(always)]
pub unsafe fn exit(ctx: &ExecCtx, a: &CollArgs) {
    arrive(ctx, &a.comm, a.epoch + 2, None);
    wait(ctx, &a.comm, a.epoch + 2);
}

/// Report an argument the host should have rejected (an unknown collective or operator) as
/// a mismatch without a peer, like the all-reduce does for an unknown operator.
///
/// # Safety
/// `a.comm.error` must be a valid record.
#[inline(always)]
pub unsafe fn report_bad_arg(ctx: &ExecCtx, a: &CollArgs, value: u32) {
    if ctx.thread == 0 {
        report_error(
            a.comm.error,
            ERR_MISMATCH,
            a.comm.rank,
            u32::MAX,
            ctx.block,
            a.epoch + 1,
            value as u64,
        );
    }
}

/// Rank `q`'s published `field` address.
///
/// # Safety
/// `lines` must point to published lines of at least `q + 1` ranks.
#[inline(always)]
pub unsafe fn peer_addr(lines: *const SyncLine, q: u32, field: Field) -> u64 {
    let l = lines.add(q as usize);
    match field {
        Field::Send => arch::load_u64(core::ptr::addr_of!((*l).send)),
        Field::Recv => arch::load_u64(core::ptr::addr_of!((*l).recv)),
    }
}

/// The `field` addresses of every rank but `skip`, each advanced by `offset` bytes, when they
/// fit in registers (`n - 1 <= FAN`); otherwise every rank's, `skip` included (callers use
/// this only where touching `skip`'s buffer too is harmless, merely wasted bandwidth).
///
/// # Safety
/// `lines` must point to `n` published lines; `skip < n`.
#[inline(always)]
pub unsafe fn addrs_except(lines: *const SyncLine, n: u32, field: Field, offset: u64, skip: u32) -> Addrs {
    if n - 1 > FAN as u32 {
        return Addrs::from_lines_at(lines, n, field, offset);
    }
    let mut out = Addrs::from_lines_at(lines, 0, field, offset);
    out.n = n - 1;
    // Constant indices into `first` (unrolled), so it stays in registers.
    let mut i = 0;
    while i < FAN {
        let q = if (i as u32) < skip { i as u32 } else { i as u32 + 1 };
        if q < n {
            out.first[i] = peer_addr(lines, q, field) + offset;
        }
        i += 1;
    }
    out
}

/// `[lo, hi)` of chunk `r` when `total` elements are cut into `n` chunks whose starts are
/// multiples of `align` elements (16-byte vectors stay aligned); trailing chunks may be
/// short or empty. `n == 0` gives an empty range (callers never pass it, but the check keeps
/// a division-by-zero panic path out of the PTX: `nranks` is re-read from the kernel
/// arguments after the barrier's asm, so the compiler cannot reuse [`enter`]'s check).
#[inline(always)]
pub fn chunk(total: u64, n: u32, r: u32, align: u64) -> (u64, u64) {
    if n == 0 {
        return (0, 0);
    }
    let size = total.div_ceil(n as u64).div_ceil(align) * align;
    let lo = (size * r as u64).min(total);
    (lo, (lo + size).min(total))
}
