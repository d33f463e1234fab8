//! All-reduce across ranks that can load and store each other's buffers.
//!
//! Two algorithms, both with two inbox barriers per call (see [`crate::prims::barrier`]):
//! - **one-shot** (small sizes): every rank loads all elements from every rank's input,
//!   reduces, and stores into its own output. `n` loads per output element, no remote stores.
//! - **two-shot** (large sizes): rank `r` owns chunk `r`; it loads that chunk from every
//!   rank's input (reduce-scatter by loads) and stores the result into every rank's output
//!   (all-gather by stores), fused in one pass. Every input byte is read once and every
//!   output byte written once, the fewest bytes an all-reduce can move.
//!
//! Phases: entry barrier (publishes each rank's addresses and the call's fingerprint; after
//! it, every input is ready), the data pass, exit barrier (every store into my output has
//! landed and no peer still reads my input, so the call may complete).
//!
//! In place: two-shot is safe in place (only rank `r` touches chunk `r` of any buffer, and
//! reads an element before writing it). One-shot is not (a rank would overwrite its input
//! while peers read it), so when any rank's input equals its output, all ranks, seeing the
//! same published addresses, switch to two-shot together.
//!
//! Fingerprints: every rank compares its fingerprint (collective, count, dtype, op,
//! algorithm) with every peer's; a mismatch is reported with the peer's rank and the call
//! does nothing rather than reading out of bounds.

use crate::abi::{AllReduceArgs, SyncLine, ALGO_ONE_SHOT, ERR_MISMATCH};
use crate::coll::reduce_copy::{reduce_copy, Addrs, Field};
use crate::exec::ExecCtx;
use crate::ops::{with_op, Elem, OpBody, Reduce};
use crate::prims::barrier::{arrive, inbox_of, line_addr, wait, wait_payload_local, Payload};
use crate::prims::wait::{failed_before, report_error};

/// Two-shot: the elements `[lo, hi)` rank `rank` of `n` owns of a `count`-element call with
/// `elem_bytes`-byte elements (chunks of whole 16-byte vectors). The host's staged path cuts
/// its copies with the same function.
#[inline(always)]
pub const fn two_shot_range(count: u64, n: u32, rank: u32, elem_bytes: u64) -> (u64, u64) {
    let vec = 16 / elem_bytes;
    let n = if n == 0 { 1 } else { n as u64 };
    let chunk = count.div_ceil(n).div_ceil(vec) * vec;
    let lo = chunk * rank as u64;
    let lo = if lo < count { lo } else { count };
    let hi = lo + chunk;
    (lo, if hi < count { hi } else { count })
}

/// The all-reduce kernel body for element type `T` (dispatches on the operator).
///
/// # Safety
/// `a` must describe valid buffers of `count` elements on every rank and a valid comm.
#[inline(always)]
pub unsafe fn all_reduce<T: Elem>(ctx: &ExecCtx, a: &AllReduceArgs) {
    let base = crate::prims::epoch::begin(ctx, &a.comm);
    let mut at = *a;
    at.epoch = base;
    all_reduce_at::<T>(ctx, &at);
    crate::prims::epoch::end(ctx, &a.comm, base);
}

/// The body of [`all_reduce`], on the epoch base the device keeps (`crate::prims::epoch`).
#[inline(always)]
unsafe fn all_reduce_at<T: Elem>(ctx: &ExecCtx, a: &AllReduceArgs) {
    struct Body<'a>(&'a ExecCtx, &'a AllReduceArgs);
    impl<T: Elem> OpBody<T> for Body<'_> {
        #[inline(always)]
        unsafe fn run<O: Reduce<T>>(self, op: O) {
            run::<T, O>(self.0, self.1, op)
        }
    }
    if !with_op::<T, _>(a.op, a.comm.nranks, a.scalar, Body(ctx, a)) {
        // The host validates the operator; a bad value is a fingerprint-level mismatch.
        report_error(
            a.comm.error,
            ERR_MISMATCH,
            a.comm.rank,
            u32::MAX,
            ctx.block,
            a.epoch,
            a.op as u64,
        )
    }
}

#[inline(always)]
unsafe fn run<T: Elem, O: Reduce<T>>(ctx: &ExecCtx, a: &AllReduceArgs, op: O) {
    let comm = &a.comm;
    let n = comm.nranks;
    if n == 0 || failed_before(comm.error, a.epoch) {
        return;
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
    let staged = a.local_send != 0;
    let local = if staged {
        Some((a.local_send, a.local_recv))
    } else {
        None
    };
    if !wait_payload_local(ctx, comm, a.epoch + 1, local) {
        return;
    }
    let lines = line_addr(inbox_of(comm, comm.rank), n, ctx.block, 0) as *const SyncLine;

    // Check fingerprints and look for in-place ranks (same answer on every rank).
    let mut any_in_place = false;
    let mut bad_peer = u32::MAX;
    let mut bad_fp = 0;
    let mut q = 0;
    while q < n {
        let l = lines.add(q as usize);
        let fp = crate::arch::load_u64(core::ptr::addr_of!((*l).fingerprint));
        let s = crate::arch::load_u64(core::ptr::addr_of!((*l).send));
        let r = crate::arch::load_u64(core::ptr::addr_of!((*l).recv));
        if fp != a.fingerprint && bad_peer == u32::MAX {
            bad_peer = q;
            bad_fp = fp;
        }
        // Staged calls: peers see staging buffers (never in place); this rank's own line
        // holds its user buffers, which only it touches, so its being in place is safe for
        // both algorithms and must not change the choice (peers cannot see it).
        any_in_place |= s == r && !staged;
        q += 1;
    }
    if bad_peer != u32::MAX {
        if ctx.thread == 0 {
            report_error(
                comm.error,
                ERR_MISMATCH,
                comm.rank,
                bad_peer,
                ctx.block,
                a.epoch + 1,
                bad_fp,
            );
        }
        return;
    }

    let srcs = Addrs::from_lines(lines, n, Field::Send);
    let (dsts, lo, hi) = if a.algo == ALGO_ONE_SHOT && !any_in_place {
        (Addrs::one(if staged { a.local_recv } else { a.recv }), 0, a.count)
    } else {
        let (lo, hi) = two_shot_range(a.count, n, comm.rank, core::mem::size_of::<T>() as u64);
        (Addrs::from_lines(lines, n, Field::Recv), lo, hi)
    };
    reduce_copy::<T, O>(ctx, &op, &srcs, &dsts, lo, hi);

    arrive(ctx, comm, a.epoch + 2, None);
    wait(ctx, comm, a.epoch + 2);
}
