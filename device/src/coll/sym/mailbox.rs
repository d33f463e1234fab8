//! The LL and Lamport kernels, generic over the line protocol ([`LineProto`]): one-shot
//! all-reduce, all-gather and reduce-scatter through the scratch mailbox, no barrier.
//!
//! Mailbox slot `(buffer, s)` of rank `r`'s copy is written only by rank `s`; line `i` of a
//! slot carries chunk `i` of the payload and is written, on every rank, by global thread
//! `i mod threads` (and read by the same thread index on the receiving rank).
//!
//! 1. publish: thread `t` loads its chunks of this rank's input and stores each as one line
//!    into slot `(buffer, me)` of every peer's copy (peers in a rotated order, which spreads
//!    the traffic over the links): the whole input for the all-reduce and the all-gather,
//!    block `q` to peer `q` for the reduce-scatter;
//! 2. collect: for each of its lines, poll this rank's own slot of every peer in rank order
//!    (this rank's own share from its input), then reduce (all-reduce, reduce-scatter:
//!    every rank combines the same values in the same order, so results are bit-identical)
//!    or store the chunk into the peer's block of the output (all-gather).
//!
//! In place is safe for all three: peers read only the mailbox, and a thread reads its own
//! input chunks before it stores the output chunks of the same index.

use super::barrier::sync;
use super::chunk::{self, chunk_lanes};
use super::line::{put_line, LineProto};
use super::SymCtx;
use crate::abi::{sym_epochs, SYM_FLAG_LL_RESET, SYM_KIND_REDUCE_SCATTER};
use crate::arch;
use crate::ops::elem::{get_lane, set_lane};
use crate::ops::{Elem, Reduce};
use crate::prims::wait::WaitError;

/// Poll line `l` of this rank's mailbox (written by `peer`) until it is a complete line of
/// this op, consume it and return its payload; `None` after recording the error on abort or
/// timeout.
///
/// # Safety
/// `l` must be a valid, 16-byte aligned line of this rank's mailbox, read by this thread
/// only in this op.
#[inline(always)]
pub unsafe fn wait_line<P: LineProto>(c: &SymCtx, p: &P, l: *mut [u32; 4], peer: u32) -> Option<[u32; 4]> {
    let mut spins: u32 = 0;
    let mut total: u32 = 0;
    let mut start: u64 = 0;
    loop {
        let v = arch::load_v4_volatile(l);
        if let Some(d) = p.decode(v) {
            p.consumed(l);
            return Some(d);
        }
        spins += 1;
        total = total.saturating_add(1);
        arch::spin_backoff(total);
        if spins >= arch::SPINS_PER_CHECK || cfg!(not(target_arch = "nvptx64")) {
            spins = 0;
            if let Err(e) = c.waiter.check_abort() {
                c.wait_failed(peer, e);
                return None;
            }
            let now = arch::globaltimer() | 1;
            if start == 0 {
                start = now;
            } else if c.waiter.timeout_ns != 0 && now.wrapping_sub(start) > c.waiter.timeout_ns {
                // The last tag words seen (LL: an older tag; Lamport: the sentinel).
                let last = (v[1] as u64) << 32 | v[3] as u64;
                c.wait_failed(peer, WaitError::Timeout { last });
                return None;
            }
        }
    }
}

/// LL only: when the op carries [`SYM_FLAG_LL_RESET`] (new tag generation), clear this
/// rank's mailbox between two barriers: after the first, no peer still writes for an older
/// op; before the second, nobody writes for this one. Thread `t` clears the lines of index
/// `t mod threads`, which only the same thread index of the peers writes, in the same
/// block, after its block passed the second barrier. Returns whether the op may go on.
///
/// # Safety
/// As [`super::sym_ll`].
#[inline(always)]
pub unsafe fn ll_reset(c: &SymCtx) -> bool {
    if c.a.flags & SYM_FLAG_LL_RESET == 0 {
        return true;
    }
    let (entry, exit) = sym_epochs(c.a.seq);
    if !sync(c, entry) {
        return false;
    }
    let gt = c.ctx.global_thread() as u64;
    let nt = c.ctx.global_threads() as u64;
    let mut b = 0;
    while b < 2 {
        let mut s = 0;
        while s < c.n {
            let mut i = gt;
            while i < c.a.slot_lines as u64 {
                put_line(c.line_of(c.me, b, s, i), [0; 4]);
                i += nt;
            }
            s += 1;
        }
        b += 1;
    }
    sync(c, exit)
}

/// Chunks of `bytes` payload bytes, or `None` (reported) if they do not fit a slot.
#[inline(always)]
unsafe fn lines_of<P: LineProto>(c: &SymCtx, bytes: u64) -> Option<u64> {
    let n = bytes.div_ceil(P::DATA);
    if n > c.a.slot_lines as u64 {
        c.bad_arg(bytes);
        return None;
    }
    Some(n)
}

/// Peer `k` of the rotation that starts after this rank (`k` in `1..n`).
#[inline(always)]
fn rotated(c: &SymCtx, k: u32) -> u32 {
    let q = c.me + k;
    if q >= c.n {
        q - c.n
    } else {
        q
    }
}

/// The one-shot all-reduce and the reduce-scatter with operator `O`.
///
/// # Safety
/// As [`super::sym_ll`] / [`super::sym_lamport`].
#[inline(always)]
pub unsafe fn reduce_kind<T: Elem, O: Reduce<T>, P: LineProto>(c: &SymCtx, op: &O, p: &P) {
    let a = c.a;
    let bytes = a.count * core::mem::size_of::<T>() as u64;
    let Some(nlines) = lines_of::<P>(c, bytes) else {
        return;
    };
    let rs = a.kind == SYM_KIND_REDUCE_SCATTER;
    let (send, recv, buf) = (c.send_of(c.me, 0), c.recv_of(c.me, 0), p.buffer());
    let gt = c.ctx.global_thread() as u64;
    let nt = c.ctx.global_threads() as u64;

    p.begin(c.gpu_scope);
    let mut i = gt;
    while i < nlines {
        if rs {
            let mut k = 1;
            while k < c.n {
                let q = rotated(c, k);
                let d = p.canon(chunk::load::<T>(P::DATA, send + q as u64 * bytes, i, bytes));
                put_line(c.line_of(q, buf, c.me, i), p.encode(d));
                k += 1;
            }
        } else {
            let line = p.encode(p.canon(chunk::load::<T>(P::DATA, send, i, bytes)));
            let mut k = 1;
            while k < c.n {
                put_line(c.line_of(rotated(c, k), buf, c.me, i), line);
                k += 1;
            }
        }
        i += nt;
    }

    let own = if rs { send + c.me as u64 * bytes } else { send };
    let nl = chunk_lanes::<T>(P::DATA);
    let mut i = gt;
    while i < nlines {
        let mut acc = [op.first(T::from_le_u64(0)); 16];
        let mut q = 0;
        while q < c.n {
            let d = if q == c.me {
                p.canon(chunk::load::<T>(P::DATA, own, i, bytes))
            } else {
                match wait_line(c, p, c.line_of(c.me, buf, q, i), q) {
                    Some(d) => d,
                    None => return,
                }
            };
            let mut l = 0;
            while l < nl {
                let x = get_lane::<T>(&d, l);
                acc[l] = if q == 0 {
                    op.first(x)
                } else {
                    op.combine(acc[l], x)
                };
                l += 1;
            }
            q += 1;
        }
        let mut out = [0u32; 4];
        let mut l = 0;
        while l < nl {
            set_lane::<T>(&mut out, l, op.finish(acc[l]));
            l += 1;
        }
        chunk::store::<T>(P::DATA, recv, i, bytes, out);
        i += nt;
    }
}

/// The all-gather.
///
/// # Safety
/// As [`super::sym_ll`] / [`super::sym_lamport`].
#[inline(always)]
pub unsafe fn all_gather<T: Elem, P: LineProto>(c: &SymCtx, p: &P) {
    let a = c.a;
    let bytes = a.count * core::mem::size_of::<T>() as u64;
    let Some(nlines) = lines_of::<P>(c, bytes) else {
        return;
    };
    let (send, recv, buf) = (c.send_of(c.me, 0), c.recv_of(c.me, 0), p.buffer());
    let gt = c.ctx.global_thread() as u64;
    let nt = c.ctx.global_threads() as u64;

    p.begin(c.gpu_scope);
    let mut i = gt;
    while i < nlines {
        let d = p.canon(chunk::load::<T>(P::DATA, send, i, bytes));
        let line = p.encode(d);
        let mut k = 1;
        while k < c.n {
            put_line(c.line_of(rotated(c, k), buf, c.me, i), line);
            k += 1;
        }
        chunk::store::<T>(P::DATA, recv + c.me as u64 * bytes, i, bytes, d);
        i += nt;
    }

    let mut i = gt;
    while i < nlines {
        let mut k = 1;
        while k < c.n {
            let q = rotated(c, k);
            match wait_line(c, p, c.line_of(c.me, buf, q, i), q) {
                Some(d) => chunk::store::<T>(P::DATA, recv + q as u64 * bytes, i, bytes, d),
                None => return,
            }
            k += 1;
        }
        i += nt;
    }
}
