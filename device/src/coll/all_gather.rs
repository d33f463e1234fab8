//! All-gather across ranks that can load and store each other's buffers: every rank's
//! `send` (`count` elements) into block `rank` of every rank's `recv` (`nranks * count`).
//!
//! Algorithm (all-gather by stores): rank `r` loads its own input once and stores it into
//! block `r` of every rank's output. Every input byte is read once and every output byte
//! written once; each rank moves `1/nranks` of the data.
//!
//! Barriers: the entry barrier publishes the output addresses and fingerprints; the exit
//! barrier makes every rank's stores into my output visible before I complete.
//!
//! In place (`send == recv + rank * count * size`): rank `r`'s input already is block `r` of
//! its output, so the copy onto itself is skipped (with more than `FAN + 1` ranks it is
//! done anyway: storing the bytes just loaded, by the thread that loaded them, is harmless).
//! Block `r` of any output is written only by rank `r`, and nobody else reads rank `r`'s
//! input, so no rank overwrites data another still needs.
//!
//! A pure byte copy: dtype only sizes the buffers, so one kernel serves every data type.

use crate::abi::{CollArgs, DataType, SyncLine};
use crate::coll::frame::addrs_except;
use crate::coll::reduce_copy::{Addrs, Field};

/// The copy of an all-gather for this rank: `(source, destinations, lo, hi)` in bytes.
///
/// # Safety
/// `lines` must hold the `nranks` lines published at this call's entry barrier.
#[inline(always)]
pub(crate) unsafe fn plan(a: &CollArgs, lines: *const SyncLine) -> (Addrs, Addrs, u64, u64) {
    let n = a.comm.nranks;
    let r = a.comm.rank;
    let bytes = a.count * DataType::from_u32(a.dtype).map_or(0, |d| d.size()) as u64;
    let off = r as u64 * bytes;
    let dsts = if a.send == a.recv + off {
        addrs_except(lines, n, Field::Recv, off, r)
    } else {
        Addrs::from_lines_at(lines, n, Field::Recv, off)
    };
    (Addrs::one(a.send), dsts, 0, bytes)
}
