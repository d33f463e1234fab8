//! All-reduce by the LL protocol, for small messages (see [`crate::prims::ll`] for the line
//! format, the flags, the double buffering and the memory-ordering argument).
//!
//! One pass, no barrier wait in the common case:
//! 1. publish: arrive at the entry epoch with this call's fingerprint (no wait: only so that
//!    a peer running a barrier-framed operation instead reports the mismatch); store the
//!    fingerprint as the header line and this rank's input as LL lines (8 bytes each) into
//!    slot `(parity, rank)` of every peer's inbox;
//! 2. collect: poll this rank's own inbox until every peer's header carries this flag (and
//!    this fingerprint: a different one is a mismatch, reported with the peer), then, for
//!    each of this thread's lines, take rank 0's, rank 1's, ... data in that fixed order (this
//!    rank's own from its input) and reduce: every rank combines the same values in the same
//!    order, so every rank produces bit-identical results.
//!
//! Line `i` (bytes `[8i, 8i + 8)` of the input) is written and read by global thread
//! `i mod threads` on every rank; the reset path (`LL_FLAG_RESET`) clears exactly the lines
//! a thread's same-index peers will write, between two barriers, so it relies on every rank
//! launching the same grid (as every collective here does).
//!
//! In place is safe: peers never read this rank's buffers (only its inbox), and each thread
//! reads its own input line before it stores the same output line.
//!
//! Every wait polls the abort flag and a deadline; errors are recorded as by the other
//! kernels (first error of the rank wins, naming the peer, the block and the entry epoch).

use crate::abi::{AllReduceArgs, SyncLine, ERR_MISMATCH, LL_FLAG_RESET};
use crate::arch;
use crate::exec::ExecCtx;
use crate::ops::{with_op, Elem, OpBody, Reduce};
use crate::prims::barrier::{arrive, inbox_of, line_addr, wait, wait_payload, Payload};
use crate::prims::ll::{self, LlWaitError, LINE_DATA};
use crate::prims::wait::{failed_before, report_error, WaitError, Waiter};

/// The LL all-reduce kernel body for element type `T` (dispatches on the operator).
///
/// # Safety
/// `a` must describe valid buffers of `count` elements on this rank, a valid communicator
/// whose inboxes hold LL regions of `a.ll_lines` data lines per slot, and be launched with
/// the same grid on every rank.
#[inline(always)]
pub unsafe fn all_reduce_ll<T: Elem>(ctx: &ExecCtx, a: &AllReduceArgs) {
    let base = crate::prims::epoch::begin(ctx, &a.comm);
    let mut at = *a;
    at.epoch = base;
    if crate::prims::epoch::ll_reset(ctx, &a.comm, ll::generation_of(base)) {
        at.ll_flags |= LL_FLAG_RESET;
    }
    all_reduce_ll_at::<T>(ctx, &at);
    crate::prims::epoch::end(ctx, &a.comm, base);
}

/// The body of [`all_reduce_ll`], on the epoch base the device keeps (`crate::prims::epoch`).
#[inline(always)]
unsafe fn all_reduce_ll_at<T: Elem>(ctx: &ExecCtx, a: &AllReduceArgs) {
    struct Body<'a>(&'a ExecCtx, &'a AllReduceArgs);
    impl<T: Elem> OpBody<T> for Body<'_> {
        #[inline(always)]
        unsafe fn run<O: Reduce<T>>(self, op: O) {
            run::<T, O>(self.0, self.1, op)
        }
    }
    if !with_op::<T, _>(a.op, a.comm.nranks, a.scalar, Body(ctx, a)) {
        bad_arg(ctx, a, a.op as u64)
    }
}

/// Report an argument the host should have rejected, as a mismatch without a peer.
#[inline(always)]
unsafe fn bad_arg(ctx: &ExecCtx, a: &AllReduceArgs, detail: u64) {
    if ctx.thread == 0 {
        report_error(
            a.comm.error,
            ERR_MISMATCH,
            a.comm.rank,
            u32::MAX,
            ctx.block,
            a.epoch + 1,
            detail,
        );
    }
}

/// Elements of `T` in one line's 8 data bytes.
#[inline(always)]
const fn lanes<T>() -> u64 {
    LINE_DATA / core::mem::size_of::<T>() as u64
}

/// Line `i` of the buffer at `base` holding `bytes` bytes, as 8 little-endian bytes (zero
/// past the end): one 8-byte load when aligned and whole, else element by element.
#[inline(always)]
unsafe fn load_line<T: Elem>(base: u64, i: u64, bytes: u64) -> u64 {
    let off = i * LINE_DATA;
    let addr = base + off;
    if off + LINE_DATA <= bytes && addr.is_multiple_of(LINE_DATA) {
        return arch::load_u64(addr as *const u64);
    }
    let size = core::mem::size_of::<T>() as u64;
    let mut d = 0u64;
    let mut l = 0;
    while l < lanes::<T>() {
        let o = off + l * size;
        if o < bytes {
            d |= T::load((base + o) as *const T).to_le_u64() << (l * size * 8);
        }
        l += 1;
    }
    d
}

/// Store the 8 bytes `d` as line `i` of the buffer at `base` holding `bytes` bytes (nothing
/// past the end).
#[inline(always)]
unsafe fn store_line<T: Elem>(base: u64, i: u64, bytes: u64, d: u64) {
    let off = i * LINE_DATA;
    let addr = base + off;
    if off + LINE_DATA <= bytes && addr.is_multiple_of(LINE_DATA) {
        arch::store_u64(addr as *mut u64, d);
        return;
    }
    let size = core::mem::size_of::<T>() as u64;
    let mut l = 0;
    while l < lanes::<T>() {
        let o = off + l * size;
        if o < bytes {
            T::store((base + o) as *mut T, T::from_le_u64(d >> (l * size * 8)));
        }
        l += 1;
    }
}

/// `Some(fingerprint)` if peer `q`'s block `block` arrived at this operation's entry epoch
/// with another fingerprint (it runs a different, barrier-framed operation).
#[inline(always)]
unsafe fn other_call(a: &AllReduceArgs, block: u32, q: u32) -> Option<u64> {
    let comm = &a.comm;
    let l = line_addr(inbox_of(comm, comm.rank), comm.nranks, block, q) as *const SyncLine;
    if arch::load_acquire_sys_u64(core::ptr::addr_of!((*l).epoch)) != a.epoch + 1 {
        return None;
    }
    let theirs = arch::load_u64(core::ptr::addr_of!((*l).fingerprint));
    (theirs != a.fingerprint).then_some(theirs)
}

#[inline(always)]
unsafe fn run<T: Elem, O: Reduce<T>>(ctx: &ExecCtx, a: &AllReduceArgs, op: O) {
    let comm = &a.comm;
    let n = comm.nranks;
    let me = comm.rank;
    if n == 0 || failed_before(comm.error, a.epoch) {
        return;
    }
    let size = core::mem::size_of::<T>() as u64;
    // The host sizes calls to the region; a larger one would overrun peers' slots.
    if a.count > a.ll_lines as u64 * LINE_DATA / size {
        bad_arg(ctx, a, a.count);
        return;
    }
    let bytes = a.count * size;
    let entry = a.epoch + 1;
    arrive(
        ctx,
        comm,
        entry,
        Some(Payload {
            send: a.send,
            recv: a.recv,
            fingerprint: a.fingerprint,
        }),
    );
    let (lines, flag, parity) = (a.ll_lines, ll::flag_of(a.epoch), ll::parity_of(a.epoch));
    let my_inbox = inbox_of(comm, me);
    let gt = ctx.global_thread() as u64;
    let nt = ctx.global_threads() as u64;

    if a.ll_flags & LL_FLAG_RESET != 0 {
        // New flag generation: wait for every peer (none still writes into this region for
        // an earlier operation), check the call matches, clear the lines this thread's
        // same-index peers write, and meet again before anyone writes.
        if !wait_payload(ctx, comm, entry) {
            return;
        }
        let mut q = 0;
        while q < n {
            if let Some(fp) = other_call(a, ctx.block, q) {
                if ctx.thread == 0 {
                    report_error(comm.error, ERR_MISMATCH, me, q, ctx.block, entry, fp);
                }
                return;
            }
            q += 1;
        }
        // The thread that writes the headers into this rank's inbox (`nt` is never 0: the
        // check keeps a division-by-zero panic path out of the PTX).
        let header_thread = if nt == 0 { u64::MAX } else { me as u64 % nt };
        let mut p = 0;
        while p < 2 {
            let mut s = 0;
            while s < n {
                if gt == header_thread {
                    ll::put(ll::line_ptr(my_inbox, n, lines, p, s, 0), 0, 0);
                }
                let mut i = gt;
                while i < lines as u64 {
                    ll::put(ll::line_ptr(my_inbox, n, lines, p, s, 1 + i), 0, 0);
                    i += nt;
                }
                s += 1;
            }
            p += 1;
        }
        arrive(ctx, comm, a.epoch + 2, None);
        if !wait(ctx, comm, a.epoch + 2) {
            return;
        }
    }

    // 1. Publish: the header into peer `p`'s inbox by thread `p mod nt`, line `i` by thread
    //    `i mod nt`, peers in a rotated order (spreads the traffic over the links).
    let nlines = bytes.div_ceil(LINE_DATA);
    let mut p = gt;
    while p < n as u64 {
        if p as u32 != me {
            let dst = ll::line_ptr(inbox_of(comm, p as u32), n, lines, parity, me, 0);
            ll::put(dst, a.fingerprint, flag);
        }
        p += nt;
    }
    let mut i = gt;
    while i < nlines {
        let d = load_line::<T>(a.send, i, bytes);
        let mut k = 1;
        while k < n {
            let mut q = me + k;
            if q >= n {
                q -= n;
            }
            ll::put(
                ll::line_ptr(inbox_of(comm, q), n, lines, parity, me, 1 + i),
                d,
                flag,
            );
            k += 1;
        }
        i += nt;
    }
    if gt >= nlines {
        return;
    }

    // 2. Collect.
    let waiter = Waiter {
        abort_flag: comm.abort_flag,
        timeout_ns: comm.timeout_ns,
    };
    let block = ctx.block;
    let fail = |q: u32, e: LlWaitError| {
        let (code, detail) = match e {
            LlWaitError::Mismatch(fp) => (ERR_MISMATCH, fp),
            LlWaitError::Wait(w @ WaitError::Timeout { last }) => (w.code(), last),
            LlWaitError::Wait(w) => (w.code(), 0),
        };
        report_error(comm.error, code, me, q, block, entry, detail);
    };
    let mut q = 0;
    while q < n {
        if q != me {
            let h = ll::line_ptr(my_inbox, n, lines, parity, q, 0);
            match ll::wait_line(&waiter, h, flag, || other_call(a, block, q)) {
                Ok(fp) if fp == a.fingerprint => {}
                Ok(fp) => return fail(q, LlWaitError::Mismatch(fp)),
                Err(e) => return fail(q, e),
            }
        }
        q += 1;
    }
    let nl = lanes::<T>();
    let mut i = gt;
    while i < nlines {
        let mut acc = [op.first(T::from_le_u64(0)); 8];
        let mut q = 0;
        while q < n {
            let d = if q == me {
                load_line::<T>(a.send, i, bytes)
            } else {
                let src = ll::line_ptr(my_inbox, n, lines, parity, q, 1 + i);
                match ll::wait_line(&waiter, src, flag, || other_call(a, block, q)) {
                    Ok(d) => d,
                    Err(e) => return fail(q, e),
                }
            };
            let mut l = 0;
            while l < nl {
                let x = T::from_le_u64(d >> (l * size * 8));
                acc[l as usize] = if q == 0 {
                    op.first(x)
                } else {
                    op.combine(acc[l as usize], x)
                };
                l += 1;
            }
            q += 1;
        }
        let mut out = 0u64;
        let mut l = 0;
        while l < nl {
            out |= op.finish(acc[l as usize]).to_le_u64() << (l * size * 8);
            l += 1;
        }
        store_line::<T>(a.recv, i, bytes, out);
        i += nt;
    }
}
