//! Scatter across ranks that can load and store each other's buffers: block `rank` of root's
//! `send` (`nranks * count` elements) into every rank's `recv` (`count`); the other ranks'
//! `send` is not read (as in NCCL, it is significant only at root).
//!
//! Algorithm (scatter by loads): rank `r` loads block `r` of root's input and stores it into
//! its own output. Every input byte is read once and every output byte written once; each
//! rank moves `1/nranks` of the data, and remote traffic is loads only (each rank pulls its
//! block; a push by root alone would leave the other ranks' threads idle).
//!
//! Barriers: the entry barrier publishes root's input address and the fingerprints (and
//! orders root's input before the loads); the exit barrier keeps root's input alive until
//! nobody reads it.
//!
//! In place at root (`recv == send + root * count * size`): root's output already is block
//! `root` of its input, so root copies nothing. Block `r` of root's input is read only by
//! rank `r`, and the only output inside root's input is root's own, so no load sees a
//! store of this call.
//!
//! A pure byte copy: dtype only sizes the buffers, so one kernel serves every data type.

use crate::abi::{CollArgs, DataType, SyncLine};
use crate::coll::frame::peer_addr;
use crate::coll::reduce_copy::{Addrs, Field};

/// The copy of a scatter for this rank: `(source, destination, lo, hi)` in bytes.
///
/// # Safety
/// `lines` must hold the `nranks` lines published at this call's entry barrier;
/// `a.root < nranks`.
#[inline(always)]
pub(crate) unsafe fn plan(a: &CollArgs, lines: *const SyncLine) -> (Addrs, Addrs, u64, u64) {
    let r = a.comm.rank;
    let bytes = a.count * DataType::from_u32(a.dtype).map_or(0, |d| d.size()) as u64;
    let src = peer_addr(lines, a.root, Field::Send) + r as u64 * bytes;
    // In place at root: the output already holds the block.
    let hi = if r == a.root && a.recv == src { 0 } else { bytes };
    (Addrs::one(src), Addrs::one(a.recv), 0, hi)
}
