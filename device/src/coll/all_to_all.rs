//! All-to-all across ranks that can load and store each other's buffers: block `q` of rank
//! `r`'s `send` (`count` elements per block, `nranks` blocks) into block `r` of rank `q`'s
//! `recv` (also `nranks * count`).
//!
//! Algorithm (all-to-all by stores, "push"): rank `r` loads block `q` of its own input and
//! stores it into block `r` of rank `q`'s output, for every `q`, in the order
//! `q = r, r + 1, ..., r - 1` (mod `nranks`) so that the ranks start on different
//! destinations rather than all storing into rank 0 first. Every input byte is read once
//! (locally) and every output byte written once; each rank moves `1/nranks` of the data, and
//! remote traffic is stores only (which need no round trip), like the all-gather.
//!
//! Barriers: the entry barrier publishes the output addresses and fingerprints (every output
//! is free to write after it); the exit barrier makes every rank's stores into my output
//! visible before I complete. Nobody reads my input but me.
//!
//! In place is not allowed (as in NCCL: block `q` of my input would be overwritten by rank
//! `q`'s block before I have sent it); the host rejects `send == recv`.
//!
//! A pure byte copy: dtype only sizes the buffers, so one kernel serves every data type.

use crate::abi::{CollArgs, DataType, SyncLine};
use crate::coll::frame::peer_addr;
use crate::coll::reduce_copy::{Addrs, Field};

/// Copies this rank makes: one per rank.
#[inline(always)]
pub(crate) fn steps(a: &CollArgs) -> u32 {
    a.comm.nranks
}

/// Copy `k` (of [`steps`]) of an all-to-all for this rank: `(source, destination, lo, hi)`
/// in bytes.
///
/// # Safety
/// `lines` must hold the `nranks` lines published at this call's entry barrier; `k < nranks`.
#[inline(always)]
pub(crate) unsafe fn plan(a: &CollArgs, lines: *const SyncLine, k: u32) -> (Addrs, Addrs, u64, u64) {
    let n = a.comm.nranks;
    let r = a.comm.rank;
    let bytes = a.count * DataType::from_u32(a.dtype).map_or(0, |d| d.size()) as u64;
    // `r + k < 2 * nranks <= 2 * MAX_LOCAL_RANKS`: no overflow; `n > 0` after the entry.
    let q = if r + k >= n { r + k - n } else { r + k };
    let src = Addrs::one(a.send + q as u64 * bytes);
    let dst = Addrs::one(peer_addr(lines, q, Field::Recv) + r as u64 * bytes);
    (src, dst, 0, bytes)
}
