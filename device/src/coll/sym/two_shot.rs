//! The two-shot all-reduce in the LL and Lamport forms ([`LineProto`]): a reduce-scatter by
//! pushes, then an all-gather by pushes, through the mailbox of [`super::mailbox`], no
//! barrier.
//!
//! The payload's `L` lines (chunks of `P::DATA` bytes, [`super::chunk`]) are cut into `n`
//! blocks of `nb` = [`sym_two_shot_block_lines`] lines: rank `q` owns payload lines
//! `[q nb, min((q + 1) nb, L))` (whole lines, so no chunk straddles two blocks; the trailing
//! blocks may be short or empty; every rank computes the same cut from the op's arguments).
//! Line `j` of every block is handled by global thread `j mod threads` on every rank. Slot
//! `(buffer, s)` of rank `r`'s copy is written only by rank `s`: its data lines `[0, nb)`
//! carry block `r` of `s`'s input, lines `[nb, 2 nb)` the reduced block `s`
//! ([`sym_two_shot_lines`] `= 2 nb` must fit the slot).
//!
//! 1. scatter: thread `t` loads, for each of its `j` and each peer `q` (rotated order), chunk
//!    `q nb + j` of this rank's input and stores it as line `j` of slot `(buffer, me)` in
//!    `q`'s mailbox;
//! 2. reduce: for each of its `j` in this rank's block, it polls line `j` of every peer's
//!    slot in its own mailbox and reduces in rank order with its own chunk `me nb + j` (only
//!    the owner reduces a block, so every rank ends with the owner's bits), stores the result
//!    into chunk `me nb + j` of its output and as line `nb + j` of slot `(buffer, me)` into
//!    every peer's mailbox;
//! 3. gather: for each of its `j` and each peer `q` whose block has line `j`, it polls line
//!    `nb + j` of slot `(buffer, q)` in its own mailbox and stores it into chunk `q nb + j`
//!    of its output.
//!
//! Waits are the mailbox's bounded polls (abort flag, error record, timeout naming the
//! peer). Phases 1 and 3 store everything before they wait, and a phase-3 line needs only
//! its writer's phase 2, which needs only phase-1 lines: no cycle.
//!
//! Check: global thread 0 publishes the op's header line and takes every peer's header
//! ([`super::mailbox`]'s check, `sym_fingerprint` includes the kind: a one-shot and a
//! two-shot call are a mismatch) before its first phase-3 wait: with its first phase-2 line
//! when this rank's block has one, alone otherwise. Before phase 3 because a phase-3 line of
//! `q` also depends on the ranks `q` waits for: a rank must see a mismatching peer's header
//! itself rather than wait for a line that another rank's mismatch stopped.
//!
//! Lamport: a line is written iff its chunk exists (`q nb + j < L`), and read under the same
//! condition by exactly one thread of its reader, which re-poisons it: the invariant of
//! [`super`] holds. Results are sent too, not only inputs, so they go through
//! [`LineProto::canon`] before they are stored anywhere (a reduction can produce the
//! sentinel pattern, e.g. by quieting a signalling NaN); the owner stores the same
//! canonical bits into its own output.
//!
//! In place is safe: peers read only the mailbox, and chunk `i` of the input is read
//! (phase 1 or 2) and chunk `i` of the output written (phase 2 or 3) by the same thread,
//! all of its phase-1 reads before its first write.

use super::chunk::{self, chunk_lanes};
use super::line::{put_line, LineProto};
use super::mailbox::{check_headers_alone, publish_header, rotated, wait_line, wait_line_checked};
use super::SymCtx;
use crate::abi::{sym_header_line, sym_two_shot_block_lines, sym_two_shot_lines};
use crate::ops::elem::{get_lane, set_lane};
use crate::ops::{Elem, Reduce};

/// The two-shot all-reduce with operator `O`.
///
/// # Safety
/// As [`super::sym_ll`] / [`super::sym_lamport`].
#[inline(always)]
pub unsafe fn all_reduce<T: Elem, O: Reduce<T>, P: LineProto>(c: &SymCtx, op: &O, p: &P) {
    let a = c.a;
    let size = core::mem::size_of::<T>() as u64;
    let bytes = a.count * size;
    if sym_two_shot_lines(a.count, size, c.n, P::DATA) > sym_header_line(a.slot_lines as u64) {
        c.bad_arg(bytes);
        return;
    }
    let nlines = bytes.div_ceil(P::DATA);
    let nb = sym_two_shot_block_lines(a.count, size, c.n, P::DATA);
    let (send, recv, buf) = (c.send_of(c.me, 0), c.recv_of(c.me, 0), p.buffer());
    let gt = c.ctx.global_thread() as u64;
    let nt = c.ctx.global_threads() as u64;

    let checks = gt == 0 && c.n > 1;
    if checks {
        publish_header(c, p);
    }
    // 1. scatter: block q of the input to its owner.
    let mut j = gt;
    while j < nb {
        let mut k = 1;
        while k < c.n {
            let q = rotated(c, k);
            let i = q as u64 * nb + j;
            if i < nlines {
                let d = p.canon(chunk::load::<T>(P::DATA, send, i, bytes));
                put_line(c.line_of(q, buf, c.me, j), p.encode(d));
            }
            k += 1;
        }
        j += nt;
    }

    // 2. reduce this rank's block, send the result to everyone.
    let mine = c.me as u64 * nb;
    let nl = chunk_lanes::<T>(P::DATA);
    let mut j = gt;
    while j < nb && mine + j < nlines {
        let mut acc = [op.first(T::from_le_u64(0)); 16];
        let mut q = 0;
        while q < c.n {
            let d = if q == c.me {
                p.canon(chunk::load::<T>(P::DATA, send, mine + j, bytes))
            } else {
                let l = c.line_of(c.me, buf, q, j);
                match wait_line_checked(c, p, l, q, checks && j == gt) {
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
        let out = p.canon(out);
        chunk::store::<T>(P::DATA, recv, mine + j, bytes, out);
        let line = p.encode(out);
        let mut k = 1;
        while k < c.n {
            put_line(c.line_of(rotated(c, k), buf, c.me, nb + j), line);
            k += 1;
        }
        j += nt;
    }
    // Thread 0 took no phase-2 line (this rank's block is empty): the headers alone.
    if checks && mine >= nlines && !check_headers_alone(c, p) {
        return;
    }

    // 3. gather the other blocks.
    let mut j = gt;
    while j < nb {
        let mut k = 1;
        while k < c.n {
            let q = rotated(c, k);
            let i = q as u64 * nb + j;
            if i < nlines {
                match wait_line(c, p, c.line_of(c.me, buf, q, nb + j), q) {
                    Some(d) => chunk::store::<T>(P::DATA, recv, i, bytes, d),
                    None => return,
                }
            }
            k += 1;
        }
        j += nt;
    }
}
