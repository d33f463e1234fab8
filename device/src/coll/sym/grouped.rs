//! Grouped polling for the grouped mailbox kernels (`oxccl_sym_ll_grouped_<type>`,
//! `oxccl_sym_lamport_grouped_<type>`; [`crate::abi::sym_grouped_kernel_runs`]): a thread
//! polls the lines of index `i` of up to [`GROUP`] peers at once instead of one peer after
//! the other.
//!
//! Each round of [`wait_lines`] issues a load of every line of the group still missing
//! before it decodes any, so a group costs about one round trip to this rank's own mailbox
//! (some 700 cycles on an H100) instead of one per peer. That pays from about seven ranks
//! in one process: on an H200 with eight ranks sharing it, 0.3-0.8 us off the small
//! all-reduce, 0.9-1.3 off the all-gather and 1.0-1.5 off the reduce-scatter
//! (`benches/results/2026-12-07-grouped-h200.md`). Elsewhere it costs: the longer loop on
//! the executed path loses 0.3-0.4 us on 2 ranks, and 0.8-1.1 us on 8 ranks across
//! processes (each process fetching its own copy of the code, most likely); and inside the
//! general kernels, the grouped code's registers (about 157 against 94) cost Lamport 10-13%
//! at 128-256 KiB whichever path ran (`benches/results/2026-12-07-groups-h100.md`). Hence
//! kernels of their own, which the host launches only where they gain
//! (`crate::abi::SYM_FLAG_GROUPED`), so that every other launch keeps the
//! one-peer-at-a-time kernels' code and registers.
//!
//! The protocol is the mailbox's ([`super::mailbox`]): the same lines, the same publish
//! side, the same header check; only the order of the reader's polls differs (peers in rank
//! order, a group at a time), so ranks running grouped and ungrouped kernels for the same
//! op still meet. Global thread 0 polls each peer's header line in the same rounds as its
//! first data lines, and takes a peer's data line only after that peer's header matched: a
//! mismatch is still caught before any data of it is used.

use super::line::LineProto;
use super::mailbox::{header_matches, header_of, Poll};
use super::timeline;
use super::SymCtx;
use crate::arch;

/// Peers polled at once by [`wait_lines`]. Eight spill: ptxas needs 255 registers for the
/// f16 and bf16 Lamport kernels (the builder refuses spills in hot kernels).
pub const GROUP: usize = 4;

/// The lines of index `i` that ranks `base .. base + GROUP` wrote into this rank's mailbox,
/// and their header lines: entry `k` at `line + k * step` and `head + k * step` (slots of
/// consecutive writers are `step` apart). Addresses, not arrays of pointers, so that nothing
/// of it needs local memory (an array of pointers took a 56-byte stack frame).
pub struct Group {
    line: u64,
    head: u64,
    step: u64,
    base: u32,
    /// The entries that are peers (bit `k` for rank `base + k`): below `n`, this rank left out.
    pub peers: u32,
}

impl Group {
    /// The group of ranks `base .. base + GROUP`, lines of index `i` of the op's buffer.
    #[inline(always)]
    pub fn of<P: LineProto>(c: &SymCtx, p: &P, base: u32, i: u64) -> Self {
        let mut peers = 0u32;
        let mut k = 0;
        while k < GROUP as u32 {
            let q = base + k;
            if q < c.n && q != c.me {
                peers |= 1 << k;
            }
            k += 1;
        }
        Group {
            line: c.line_of(c.me, p.buffer(), base, i) as u64,
            head: header_of(c, c.me, p.buffer(), base) as u64,
            step: c.slot_bytes(),
            base,
            peers,
        }
    }

    #[inline(always)]
    fn line(&self, k: usize) -> *mut [u32; 4] {
        self.line.wrapping_add(k as u64 * self.step) as *mut [u32; 4]
    }

    #[inline(always)]
    fn head(&self, k: usize) -> *mut [u32; 4] {
        self.head.wrapping_add(k as u64 * self.step) as *mut [u32; 4]
    }

    /// The rank of entry `k`.
    #[inline(always)]
    pub fn rank(&self, k: usize) -> u32 {
        self.base + k as u32
    }
}

/// Poll the group's data lines for every entry in `data` and its header lines for every
/// entry in `head` (global thread 0's first lines; 0 for every other thread, which then
/// loads no header), all at once: each round issues a load of every line still missing
/// before it decodes any. Each line is consumed as it completes; a header is compared with
/// this op's fingerprint (a mismatch recorded), and a peer's data line is taken only after
/// its header. One loop for every thread of a warp, headers or not, so that the warp does
/// not diverge into two polling loops. Returns the payloads (entries not in `data` are
/// zero), or `None` after a mismatch, an abort or a timeout (recorded, naming a peer still
/// missing).
///
/// # Safety
/// Each line in `data` and each header in `head` must be a valid, 16-byte aligned line of
/// this rank's mailbox, read by this thread only in this op.
#[inline(always)]
pub unsafe fn wait_lines<P: LineProto>(
    c: &SymCtx,
    p: &P,
    g: &Group,
    mut data: u32,
    mut head: u32,
) -> Option<[[u32; 4]; GROUP]> {
    // Line `k`'s last load while it is missing, its payload once taken (one array for both:
    // every line is live in registers once, whatever the round).
    let mut v = [[0u32; 4]; GROUP];
    let mut poll = Poll::default();
    loop {
        let mut h = [[0u32; 4]; GROUP];
        let mut k = 0;
        while k < GROUP {
            if head & (1 << k) != 0 {
                h[k] = arch::load_v4_volatile(g.head(k));
            }
            if data & (1 << k) != 0 {
                v[k] = arch::load_v4_volatile(g.line(k));
            }
            k += 1;
        }
        let mut missing = 0u32;
        let mut k = 0;
        while k < GROUP {
            if head & (1 << k) != 0 {
                match p.decode_header(h[k]) {
                    Some(hd) => {
                        p.consumed(g.head(k));
                        if !header_matches(c, g.rank(k), hd) {
                            return None;
                        }
                        head &= !(1 << k);
                    }
                    None => missing = g.rank(k),
                }
            }
            if data & (1 << k) != 0 && head & (1 << k) == 0 {
                match p.decode(v[k]) {
                    Some(d) => {
                        p.consumed(g.line(k));
                        v[k] = d;
                        data &= !(1 << k);
                    }
                    None => missing = g.rank(k),
                }
            }
            k += 1;
        }
        if data | head == 0 {
            timeline::polls(c.ctx.global_thread() as u64, c.me, poll.total);
            return Some(v);
        }
        if poll.gave_up(c, missing) {
            return None;
        }
    }
}

/// Global thread 0, when it had no data line to poll (an op of no elements, or none in its
/// part): take every peer's header, [`GROUP`] peers at a time. Returns whether all matched.
///
/// # Safety
/// As [`super::sym_ll`].
#[inline(always)]
pub unsafe fn check_headers<P: LineProto>(c: &SymCtx, p: &P) -> bool {
    let mut base = 0;
    while base < c.n {
        // Line 0 stands in for the data lines, none of which is polled.
        let g = Group::of(c, p, base, 0);
        if g.peers != 0 && wait_lines(c, p, &g, 0, g.peers).is_none() {
            return false;
        }
        base += GROUP as u32;
    }
    true
}
