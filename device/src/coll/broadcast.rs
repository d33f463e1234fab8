//! Broadcast across ranks that can load and store each other's buffers: root's `send`
//! (`count` elements) into every rank's `recv`.
//!
//! Algorithm (scatter by loads, all-gather by stores, fused): the bytes are cut into `nranks`
//! 16-byte aligned chunks; rank `r` loads chunk `r` of root's input once and stores it into
//! every rank's output. Every input byte is read once and every output byte written once,
//! and the work is spread over every rank's threads (rather than every rank copying the
//! whole input into its own output, which reads root's input `nranks` times).
//!
//! Barriers: the entry barrier publishes addresses and fingerprints (and orders root's input
//! before the loads); the exit barrier makes every rank's stores into every output visible
//! before any rank completes, and keeps root's input alive until nobody reads it.
//!
//! In place (`send == recv` at root): only rank `r` touches chunk `r` of root's buffer, and
//! the thread that stores a byte there loaded it first (it stores back what it read). The
//! other ranks' `send` is never read, as in NCCL.
//!
//! A pure byte copy: dtype only sizes the buffers, so one kernel serves every data type.

use crate::abi::{CollArgs, DataType, SyncLine};
use crate::coll::frame::{chunk, peer_addr};
use crate::coll::reduce_copy::{Addrs, Field};

/// The copy of a broadcast for this rank: `(source, destinations, lo, hi)` in bytes.
///
/// # Safety
/// `lines` must hold the `nranks` lines published at this call's entry barrier.
#[inline(always)]
pub(crate) unsafe fn plan(a: &CollArgs, lines: *const SyncLine) -> (Addrs, Addrs, u64, u64) {
    let n = a.comm.nranks;
    let size = DataType::from_u32(a.dtype).map_or(0, |d| d.size()) as u64;
    let (lo, hi) = chunk(a.count * size, n, a.comm.rank, 16);
    let src = Addrs::one(peer_addr(lines, a.root, Field::Send));
    (src, Addrs::from_lines(lines, n, Field::Recv), lo, hi)
}
