//! The LL and Lamport kernels, generic over the line protocol ([`LineProto`]): one-shot
//! all-reduce, all-gather and reduce-scatter through the scratch mailbox, no barrier (the
//! two-shot all-reduce, built from the same pieces: [`super::two_shot`]).
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
//!    (the grouped kernels: [`GROUP`] peers at once, [`super::grouped`]; this rank's own
//!    share from its input), then reduce (all-reduce, reduce-scatter:
//!    every rank combines the same values in the same order, so results are bit-identical)
//!    or store the chunk into the peer's block of the output (all-gather).
//!
//! 3. check: global thread 0 also stores this op's header line ([`sym_fingerprint`]:
//!    collective, count, type, operator, protocol) into the header line of slot
//!    `(buffer, me)` of every peer, and polls each peer's header together with its first
//!    data line (one round trip for both). A header with another fingerprint is recorded as
//!    a mismatch naming the peer and both calls ([`crate::abi::SYM_MISMATCH_FLAG`]); every
//!    other waiter of the rank stops at its next abort check once an error is recorded, and
//!    later launches on the failed communicator do nothing (`super::enter`). Without the
//!    check, a rank with the smaller count would finish with wrong data and leave lines in
//!    its mailbox that nobody consumed, and its peers would wait until their timeout.
//!
//! In place is safe for all three: peers read only the mailbox, and a thread reads its own
//! input chunks before it stores the output chunks of the same index.

use super::barrier::sync;
use super::chunk::{self, chunk_lanes};
use super::grouped::{self, wait_lines, Group, GROUP};
use super::line::{put_line, LineProto};
use super::timeline::{self, Mark};
use super::SymCtx;
use crate::abi::{
    sym_epochs, sym_header_fingerprint, sym_header_line, sym_header_words, ERR_MISMATCH, SYM_ERROR_FLAG,
    SYM_FLAG_LL_RESET, SYM_MISMATCH_FLAG,
};
use crate::arch;
use crate::ops::elem::{get_lane, set_lane};
use crate::ops::{Elem, Reduce};
use crate::prims::wait::{report_error, Checked, Waiter};

/// The bounded part of a mailbox poll loop, shared by every line wait: back-off, and every
/// [`arch::SPINS_PER_CHECK`] spins (every spin on the host) the abort flag, this rank's
/// error record, and the deadline ([`poll_check`], out of line).
#[derive(Default)]
pub(super) struct Poll {
    spins: u32,
    pub(super) total: u32,
    start: u64,
}

impl Poll {
    /// After an unsuccessful spin waiting for `peer`: whether to give up (abort or timeout
    /// recorded here naming the peer and the op's fingerprint; or an error a sibling thread
    /// recorded).
    ///
    /// # Safety
    /// `c.a.error` must be a valid record or 0.
    #[inline(always)]
    pub(super) unsafe fn gave_up(&mut self, c: &SymCtx, peer: u32) -> bool {
        self.spins += 1;
        self.total = self.total.saturating_add(1);
        arch::spin_backoff(self.total);
        if self.spins < arch::SPINS_PER_CHECK && cfg!(target_arch = "nvptx64") {
            return false;
        }
        self.spins = 0;
        let a = c.a;
        self.start = poll_check(
            c.waiter,
            a.error,
            self.start,
            c.me,
            peer,
            c.ctx.block | SYM_ERROR_FLAG,
            a.seq,
            c.fingerprint(),
        );
        self.start == 0
    }
}

/// The checks of [`Poll::gave_up`], every [`arch::SPINS_PER_CHECK`] spins
/// ([`Waiter::check`]: the abort flag, this rank's error record, the deadline counted from
/// `start`, 0 at the first check). Returns the start to keep, or 0 after giving up: an abort
/// or a timeout, recorded here naming `peer`, or an error a sibling thread recorded (its
/// error is the op's, and this line may never come). Out of line and cold, so that the
/// polling loops stay a few instructions long (see [`report_error`]).
///
/// # Safety
/// `rec` must be a valid record or 0.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn poll_check(
    waiter: Waiter,
    rec: u64,
    start: u64,
    me: u32,
    peer: u32,
    block: u32,
    seq: u64,
    fp: u64,
) -> u64 {
    match waiter.check(rec, start, 0) {
        Checked::Go { start } => start,
        Checked::Recorded => 0,
        Checked::Failed(e) => {
            report_error(rec, e.code(), me, peer, block, seq, fp);
            0
        }
    }
}

/// Poll line `l` of this rank's mailbox (written by `peer`) until it is a complete line of
/// this op, consume it and return its payload; `None` after recording the error on abort or
/// timeout.
///
/// # Safety
/// `l` must be a valid, 16-byte aligned line of this rank's mailbox, read by this thread
/// only in this op.
#[inline(always)]
pub unsafe fn wait_line<P: LineProto>(c: &SymCtx, p: &P, l: *mut [u32; 4], peer: u32) -> Option<[u32; 4]> {
    wait_line_as::<P, false>(c, p, l, peer)
}

/// [`wait_line`] for a data line (`HEADER` false) or a header line ([`LineProto::decode_header`]).
///
/// # Safety
/// As [`wait_line`].
#[inline(always)]
unsafe fn wait_line_as<P: LineProto, const HEADER: bool>(
    c: &SymCtx,
    p: &P,
    l: *mut [u32; 4],
    peer: u32,
) -> Option<[u32; 4]> {
    let mut poll = Poll::default();
    loop {
        let v = arch::load_v4_volatile(l);
        let got = if HEADER { p.decode_header(v) } else { p.decode(v) };
        if let Some(d) = got {
            p.consumed(l);
            return Some(d);
        }
        if poll.gave_up(c, peer) {
            return None;
        }
    }
}

/// The header line of slot `(buffer, src)` in rank `q`'s mailbox.
#[inline(always)]
pub(super) fn header_of(c: &SymCtx, q: u32, buffer: u64, src: u32) -> *mut [u32; 4] {
    c.line_of(q, buffer, src, sym_header_line(c.a.slot_lines as u64))
}

/// This op's fingerprint ([`sym_fingerprint`]).
#[inline(always)]
fn fingerprint(c: &SymCtx) -> u64 {
    c.fingerprint()
}

/// Global thread 0 only: store this op's header line into slot `(buffer, me)` of every
/// peer's mailbox (ordered after the sentinel stores of earlier ops like the data lines:
/// the memory-ordering section of `super`).
///
/// # Safety
/// As [`super::sym_ll`].
#[inline(always)]
pub(super) unsafe fn publish_header<P: LineProto>(c: &SymCtx, p: &P) {
    let h = p.encode_header(sym_header_words(fingerprint(c)));
    let mut k = 1;
    while k < c.n {
        put_line(header_of(c, rotated(c, k), p.buffer(), c.me), h);
        k += 1;
    }
}

/// Whether a header's payload carries this op's fingerprint; records the mismatch if not.
///
/// # Safety
/// As [`super::sym_ll`].
#[inline(always)]
pub(super) unsafe fn header_matches(c: &SymCtx, peer: u32, h: [u32; 4]) -> bool {
    let theirs = sym_header_fingerprint(h);
    // 43 bits: the header's 48 carry it whole (the ABI tests check the round trip).
    let ours = fingerprint(c);
    if theirs == ours {
        return true;
    }
    let block = c.ctx.block | SYM_MISMATCH_FLAG;
    report_error(c.a.error, ERR_MISMATCH, c.me, peer, block, ours, theirs);
    false
}

/// [`wait_line`], and with `header` (global thread 0's first poll of `peer`) that peer's
/// header line too, both loads in flight at once, so the check adds no round trip. The
/// header is consumed and compared first; the data is taken only after it matched. `None`
/// after a mismatch (recorded here), an abort or a timeout.
///
/// One loop for both cases, so that the threads of a warp poll their lines together: with a
/// loop of its own for the header case, thread 0's warp diverged into two polling loops,
/// which the warp runs one after the other or interleaved at the scheduler's will. (The
/// header is a flag the loop changes, not an invariant the compiler could unswitch on.)
///
/// # Safety
/// As [`wait_line`]; with `header`, for the header line too.
#[inline(always)]
pub(super) unsafe fn wait_line_checked<P: LineProto>(
    c: &SymCtx,
    p: &P,
    l: *mut [u32; 4],
    peer: u32,
    header: bool,
) -> Option<[u32; 4]> {
    let h = header_of(c, c.me, p.buffer(), peer);
    let mut header_ok = !header;
    let mut poll = Poll::default();
    loop {
        let v = arch::load_v4_volatile(l);
        if !header_ok {
            if let Some(hd) = p.decode_header(arch::load_v4_volatile(h)) {
                p.consumed(h);
                if !header_matches(c, peer, hd) {
                    return None;
                }
                header_ok = true;
            }
        }
        if header_ok {
            if let Some(d) = p.decode(v) {
                p.consumed(l);
                if header {
                    timeline::polls(c.ctx.global_thread() as u64, c.me, poll.total);
                }
                return Some(d);
            }
        }
        if poll.gave_up(c, peer) {
            return None;
        }
    }
}

/// Global thread 0, when it had no data line to poll (an op of no elements): take every
/// peer's header alone. Returns whether all matched.
///
/// # Safety
/// As [`super::sym_ll`].
#[inline(always)]
pub(super) unsafe fn check_headers_alone<P: LineProto>(c: &SymCtx, p: &P) -> bool {
    let mut q = 0;
    while q < c.n {
        if q != c.me {
            match wait_line_as::<P, true>(c, p, header_of(c, c.me, p.buffer(), q), q) {
                Some(h) if header_matches(c, q, h) => {}
                _ => return false,
            }
        }
        q += 1;
    }
    true
}

/// LL only: when the op carries [`SYM_FLAG_LL_RESET`] (new tag generation), clear this
/// rank's mailbox between two barriers: after the first, no peer still writes for an older
/// op; before the second, nobody writes for this one. Thread `t` clears the lines of index
/// `t mod threads`, which only the same thread index of the peers writes, in the same
/// block, after its block passed the second barrier; global thread 0 clears the header
/// lines, which only global thread 0 of the peers writes. Returns whether the op may go on.
///
/// # Safety
/// As [`super::sym_ll`].
#[inline(always)]
pub unsafe fn ll_reset(c: &SymCtx) -> bool {
    if c.a.flags & SYM_FLAG_LL_RESET == 0 {
        return true;
    }
    let (entry, exit) = sym_epochs(c.a.seq);
    if !sync(c, entry, 0) {
        return false;
    }
    let gt = c.ctx.global_thread() as u64;
    let nt = c.ctx.global_threads() as u64;
    let header = sym_header_line(c.a.slot_lines as u64);
    let mut b = 0;
    while b < 2 {
        let mut s = 0;
        while s < c.n {
            let mut i = gt;
            while i < header {
                put_line(c.line_of(c.me, b, s, i), [0; 4]);
                i += nt;
            }
            // The header line is written by global thread 0 of the peers (block 0), so it is
            // cleared by global thread 0 here: before block 0's exit barrier, which those
            // writers pass first. (Cleared by its `i mod threads` thread in another block, it
            // could wipe a header that was already written.)
            if gt == 0 {
                put_line(header_of(c, c.me, b, s), [0; 4]);
            }
            s += 1;
        }
        b += 1;
    }
    sync(c, exit, 0)
}

/// Chunks of `bytes` payload bytes, or `None` (reported) if they do not fit a slot.
#[inline(always)]
unsafe fn lines_of<P: LineProto>(c: &SymCtx, bytes: u64) -> Option<u64> {
    let n = bytes.div_ceil(P::DATA);
    if n > sym_header_line(c.a.slot_lines as u64) {
        c.bad_arg(bytes);
        return None;
    }
    Some(n)
}

/// Peer `k` of the rotation that starts after this rank (`k` in `1..n`).
#[inline(always)]
pub(super) fn rotated(c: &SymCtx, k: u32) -> u32 {
    let q = c.me + k;
    if q >= c.n {
        q - c.n
    } else {
        q
    }
}

/// The one-shot all-reduce (`rs` false) and the reduce-scatter (`rs` true) with operator
/// `O`. `loaded`: the all-reduce's chunk `global thread` of this rank's input, already
/// loaded (raw, before [`LineProto::canon`]), or `None` to load it here. `GROUPED`: poll a
/// line's peers [`GROUP`] at a time ([`super::grouped`]), else one after the other.
///
/// # Safety
/// As [`super::sym_ll`] / [`super::sym_lamport`]; `loaded`, if given, holds what
/// [`chunk::load`] returns for that chunk.
#[inline(always)]
pub unsafe fn reduce_kind<T: Elem, O: Reduce<T>, P: LineProto, const GROUPED: bool>(
    c: &SymCtx,
    op: &O,
    p: &P,
    rs: bool,
    loaded: Option<[u32; 4]>,
) {
    let a = c.a;
    let bytes = a.count * core::mem::size_of::<T>() as u64;
    let Some(nlines) = lines_of::<P>(c, bytes) else {
        return;
    };
    let (send, recv, buf) = (c.send_of(c.me, 0), c.recv_of(c.me, 0), p.buffer());
    let gt = c.ctx.global_thread() as u64;
    let nt = c.ctx.global_threads() as u64;

    timeline::mark(gt, c.me, Mark::Dispatched);
    let checks = gt == 0 && c.n > 1;
    if checks {
        publish_header(c, p);
    }
    timeline::mark(gt, c.me, Mark::Header);
    // The all-reduce's first own chunk, kept from the publish loop for the collect loop (a
    // small op has one line per thread: no second load, no second address computation).
    let mut first = [0u32; 4];
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
            let raw = match loaded {
                Some(x) if i == gt => x,
                _ => chunk::load::<T>(P::DATA, send, i, bytes),
            };
            let d = p.canon(raw);
            if i == gt {
                first = d;
            }
            let line = p.encode(d);
            let mut k = 1;
            while k < c.n {
                put_line(c.line_of(rotated(c, k), buf, c.me, i), line);
                k += 1;
            }
        }
        i += nt;
    }

    timeline::mark(gt, c.me, Mark::Published);
    let own = if rs { send + c.me as u64 * bytes } else { send };
    let nl = chunk_lanes::<T>(P::DATA);
    // This rank's own share of line `i`: the all-reduce's first from the publish loop.
    let kept = if rs { None } else { Some(first) };
    let mut i = gt;
    while i < nlines {
        let mut acc = [op.first(T::from_le_u64(0)); 16];
        if GROUPED {
            let mut base = 0;
            while base < c.n {
                let g = Group::of(c, p, base, i);
                let head = if checks && i == gt { g.peers } else { 0 };
                let got = if g.peers != 0 {
                    match wait_lines(c, p, &g, g.peers, head) {
                        Some(x) => x,
                        None => return,
                    }
                } else {
                    [[0u32; 4]; GROUP]
                };
                let mut k = 0;
                while k < GROUP {
                    let q = g.rank(k);
                    if q < c.n {
                        let d = if q == c.me {
                            own_share::<T, P>(p, own, i, bytes, gt, kept)
                        } else {
                            got[k]
                        };
                        fold::<T, O>(op, &mut acc, q, &d, nl);
                    }
                    k += 1;
                }
                base += GROUP as u32;
            }
        } else {
            let mut q = 0;
            while q < c.n {
                let d = if q == c.me {
                    own_share::<T, P>(p, own, i, bytes, gt, kept)
                } else {
                    let l = c.line_of(c.me, buf, q, i);
                    match wait_line_checked(c, p, l, q, checks && i == gt) {
                        Some(d) => d,
                        None => return,
                    }
                };
                fold::<T, O>(op, &mut acc, q, &d, nl);
                q += 1;
            }
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
    timeline::mark(gt, c.me, Mark::Collected);
    if checks && nlines == 0 {
        headers_alone::<P, GROUPED>(c, p);
    }
}

/// Rank `q`'s share `d` of a line folded into the accumulators of its `nl` lanes (ranks in
/// order: rank 0's share starts them).
#[inline(always)]
fn fold<T: Elem, O: Reduce<T>>(op: &O, acc: &mut [T::Acc; 16], q: u32, d: &[u32; 4], nl: usize) {
    let mut l = 0;
    while l < nl {
        let x = get_lane::<T>(d, l);
        acc[l] = if q == 0 {
            op.first(x)
        } else {
            op.combine(acc[l], x)
        };
        l += 1;
    }
}

/// This rank's own share of line `i` from `own`: `kept` for the thread's first line
/// (`i == gt`) where the publish loop kept it, else loaded.
///
/// # Safety
/// As [`chunk::load`].
#[inline(always)]
unsafe fn own_share<T: Elem, P: LineProto>(
    p: &P,
    own: u64,
    i: u64,
    bytes: u64,
    gt: u64,
    kept: Option<[u32; 4]>,
) -> [u32; 4] {
    match kept {
        Some(d) if i == gt => d,
        _ => p.canon(chunk::load::<T>(P::DATA, own, i, bytes)),
    }
}

/// [`check_headers_alone`], or with `GROUPED` [`grouped::check_headers`].
///
/// # Safety
/// As [`super::sym_ll`].
#[inline(always)]
unsafe fn headers_alone<P: LineProto, const GROUPED: bool>(c: &SymCtx, p: &P) -> bool {
    if GROUPED {
        grouped::check_headers(c, p)
    } else {
        check_headers_alone(c, p)
    }
}

/// The all-gather (`GROUPED`: as in [`reduce_kind`]).
///
/// # Safety
/// As [`super::sym_ll`] / [`super::sym_lamport`].
#[inline(always)]
pub unsafe fn all_gather<T: Elem, P: LineProto, const GROUPED: bool>(c: &SymCtx, p: &P) {
    let a = c.a;
    let bytes = a.count * core::mem::size_of::<T>() as u64;
    let Some(nlines) = lines_of::<P>(c, bytes) else {
        return;
    };
    let (send, recv, buf) = (c.send_of(c.me, 0), c.recv_of(c.me, 0), p.buffer());
    let gt = c.ctx.global_thread() as u64;
    let nt = c.ctx.global_threads() as u64;

    let checks = gt == 0 && c.n > 1;
    if checks {
        publish_header(c, p);
    }
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
        if GROUPED {
            let mut base = 0;
            while base < c.n {
                let g = Group::of(c, p, base, i);
                let head = if checks && i == gt { g.peers } else { 0 };
                if g.peers != 0 {
                    let Some(got) = wait_lines(c, p, &g, g.peers, head) else {
                        return;
                    };
                    let mut k = 0;
                    while k < GROUP {
                        if g.peers & (1 << k) != 0 {
                            let q = g.rank(k);
                            chunk::store::<T>(P::DATA, recv + q as u64 * bytes, i, bytes, got[k]);
                        }
                        k += 1;
                    }
                }
                base += GROUP as u32;
            }
        } else {
            let mut k = 1;
            while k < c.n {
                let q = rotated(c, k);
                let l = c.line_of(c.me, buf, q, i);
                match wait_line_checked(c, p, l, q, checks && i == gt) {
                    Some(d) => chunk::store::<T>(P::DATA, recv + q as u64 * bytes, i, bytes, d),
                    None => return,
                }
                k += 1;
            }
        }
        i += nt;
    }
    if checks && nlines == 0 {
        headers_alone::<P, GROUPED>(c, p);
    }
}
