//! Reduce-scatter across ranks that can load and store each other's buffers: rank `r`'s
//! `recv` (`count` elements) is the reduction of block `r` of every rank's `send`
//! (`nranks * count` elements).
//!
//! Algorithm (reduce-scatter by loads): rank `r` loads block `r` from every rank's input,
//! reduces in rank order and stores into its own output. Every input byte is read once and
//! every output byte written once, with no remote stores.
//!
//! Barriers: the entry barrier publishes the input addresses and fingerprints (every input
//! is ready after it); the exit barrier keeps every input alive until nobody reads it.
//!
//! In place (`recv == send + rank * count * size`): rank `r`'s output is block `r` of its
//! input, which only rank `r` reads (peer `q` reads block `q`), and the thread that stores
//! an element loaded it (from every input) first.

use crate::abi::{CollArgs, SyncLine};
use crate::coll::reduce_copy::{Addrs, Field};
use crate::ops::Elem;

/// The reduction of a reduce-scatter for this rank: `(sources, destination, lo, hi)` in
/// elements.
///
/// # Safety
/// `lines` must hold the `nranks` lines published at this call's entry barrier.
#[inline(always)]
pub(crate) unsafe fn plan<T: Elem>(a: &CollArgs, lines: *const SyncLine) -> (Addrs, Addrs, u64, u64) {
    let off = a.comm.rank as u64 * a.count * core::mem::size_of::<T>() as u64;
    let srcs = Addrs::from_lines_at(lines, a.comm.nranks, Field::Send, off);
    (srcs, Addrs::one(a.recv), 0, a.count)
}
