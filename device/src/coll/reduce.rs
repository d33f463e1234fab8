//! Reduce across ranks that can load and store each other's buffers: the reduction of every
//! rank's `send` (`count` elements) into root's `recv`; the other ranks' `recv` is not
//! touched.
//!
//! Algorithm (reduce-scatter by loads, gather by stores, fused): the elements are cut into
//! `nranks` chunks whose starts are 16-byte vector aligned; rank `r` loads chunk `r` from
//! every rank's input, reduces (in rank order, like the all-reduce, so results are
//! bit-identical to it) and stores the result into chunk `r` of root's output. Every input
//! byte is read once, root's output written once, and the work is spread over every rank.
//!
//! Barriers: the entry barrier publishes addresses and fingerprints (every input is ready
//! after it); the exit barrier makes the stores into root's output visible before root
//! completes, and keeps every input alive until nobody reads it.
//!
//! In place at root (`send == recv`): only rank `r` touches chunk `r` of root's buffer, and
//! the thread that stores an element loaded it (from every input) first.

use crate::abi::{CollArgs, SyncLine};
use crate::coll::frame::{chunk, peer_addr};
use crate::coll::reduce_copy::{Addrs, Field};
use crate::ops::elem::lanes;
use crate::ops::Elem;

/// The reduction of a reduce for this rank: `(sources, destination, lo, hi)` in elements.
///
/// # Safety
/// `lines` must hold the `nranks` lines published at this call's entry barrier.
#[inline(always)]
pub(crate) unsafe fn plan<T: Elem>(a: &CollArgs, lines: *const SyncLine) -> (Addrs, Addrs, u64, u64) {
    let n = a.comm.nranks;
    let (lo, hi) = chunk(a.count, n, a.comm.rank, lanes::<T>() as u64);
    let dst = Addrs::one(peer_addr(lines, a.root, Field::Recv));
    (Addrs::from_lines(lines, n, Field::Send), dst, lo, hi)
}
