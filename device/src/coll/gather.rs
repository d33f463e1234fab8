//! Gather across ranks that can load and store each other's buffers: every rank's `send`
//! (`count` elements) into block `rank` of root's `recv` (`nranks * count`); the other
//! ranks' `recv` is neither read nor written (as in NCCL, it is significant only at root).
//!
//! Algorithm (gather by stores): rank `r` loads its own input once and stores it into block
//! `r` of root's output. Every input byte is read once and root's output written once; each
//! rank moves `1/nranks` of the data, and remote traffic is stores only.
//!
//! Barriers: the entry barrier publishes root's output address and the fingerprints (root's
//! output is free to write after it); the exit barrier makes every rank's stores into root's
//! output visible before root completes.
//!
//! In place at root (`send == recv + root * count * size`): root's input already is block
//! `root` of its output, so root copies nothing. Block `r` of root's output is written only
//! by rank `r`, and nobody reads root's input but root, so nothing is overwritten before it
//! is read.
//!
//! A pure byte copy: dtype only sizes the buffers, so one kernel serves every data type.

use crate::abi::{CollArgs, DataType, SyncLine};
use crate::coll::frame::peer_addr;
use crate::coll::reduce_copy::{Addrs, Field};

/// The copy of a gather for this rank: `(source, destination, lo, hi)` in bytes.
///
/// # Safety
/// `lines` must hold the `nranks` lines published at this call's entry barrier;
/// `a.root < nranks`.
#[inline(always)]
pub(crate) unsafe fn plan(a: &CollArgs, lines: *const SyncLine) -> (Addrs, Addrs, u64, u64) {
    let r = a.comm.rank;
    let bytes = a.count * DataType::from_u32(a.dtype).map_or(0, |d| d.size()) as u64;
    let off = r as u64 * bytes;
    let dst = peer_addr(lines, a.root, Field::Recv) + off;
    // In place at root: the block already holds the input.
    let hi = if r == a.root && a.send == dst { 0 } else { bytes };
    (Addrs::one(a.send), Addrs::one(dst), 0, hi)
}
