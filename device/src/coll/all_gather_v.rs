//! All-gather-v across ranks that can load and store each other's buffers: rank `r`'s `send`
//! (`counts[r]` elements) into every rank's `recv` at element `displs[r]`. The parts of the
//! outputs no block covers are not written.
//!
//! Every rank knows `counts` and `displs` on the host (they must be equal on all ranks; their
//! hash is in the fingerprint, so a disagreement is a mismatch). The kernel needs only this
//! rank's own: `CollArgs::count` is `counts[rank]` and `CollArgs::displ` is `displs[rank]`,
//! and the peers' output bases come from the inbox lines. So no per-call table lives in
//! device memory (which would need care to stay stream-ordered for back-to-back calls).
//!
//! Algorithm (all-gather by stores, as [`super::all_gather`]): rank `r` loads its own input
//! once and stores it at `displs[r]` of every rank's output. Every input byte is read once
//! and every covered output byte written once (the host rejects overlapping blocks, whose
//! result would depend on the order of stores of different ranks).
//!
//! Barriers: the entry barrier publishes the output addresses and fingerprints; the exit
//! barrier makes every rank's stores into my output visible before I complete.
//!
//! In place (`send == recv + displs[rank] * size`): rank `r`'s input already is its block of
//! its output, so the copy onto itself is skipped (with more than `FAN + 1` ranks it is done
//! anyway: storing the bytes just loaded, by the thread that loaded them, is harmless).
//! Blocks do not overlap, so no rank overwrites another's input before it is read.
//!
//! A pure byte copy: dtype only sizes the buffers, so one kernel serves every data type.

use crate::abi::{CollArgs, DataType, SyncLine};
use crate::coll::frame::addrs_except;
use crate::coll::reduce_copy::{Addrs, Field};

/// The copy of an all-gather-v for this rank: `(source, destinations, lo, hi)` in bytes.
///
/// # Safety
/// `lines` must hold the `nranks` lines published at this call's entry barrier.
#[inline(always)]
pub(crate) unsafe fn plan(a: &CollArgs, lines: *const SyncLine) -> (Addrs, Addrs, u64, u64) {
    let n = a.comm.nranks;
    let r = a.comm.rank;
    let size = DataType::from_u32(a.dtype).map_or(0, |d| d.size()) as u64;
    let off = a.displ * size;
    let dsts = if a.send == a.recv + off {
        addrs_except(lines, n, Field::Recv, off, r)
    } else {
        Addrs::from_lines_at(lines, n, Field::Recv, off)
    };
    (Addrs::one(a.send), dsts, 0, a.count * size)
}
