//! Layout of one rank's inbox allocation: the memory its peers write into. On a
//! communicator whose ranks live in several processes this allocation is part of the rank's
//! shared segment, mapped by every peer, so everything peers must store into lives here.
//!
//! ```text
//! offset 0              barrier lines   [MAX_BLOCKS][nranks] SyncLine   (prims::barrier)
//! p2p_offset(n)         p2p mailboxes   p2p_bytes(n)                    (send/recv)
//! epochs_offset(n)      epoch slots     EPOCH_BYTES (local only)            (prims::epoch)
//! ll_offset(n)          LL lines        ll_bytes(n, ll_max)             (prims::ll)
//! inbox_bytes(n, ll_max) end
//! ```
//!
//! Every region starts on a 4096-byte boundary. Each region's size is a function of the rank
//! count and of the LL capacity `ll_max` (bytes per rank of one LL operation, the setting
//! `OXCCL_LL_MAX_BYTES`, checked equal on every rank at init), so every rank computes the
//! same layout for every peer.
//!
//! LL region: `[2 parities][nranks sources][ll_lines(ll_max) + 1 lines]` of 16-byte lines;
//! line 0 of each (parity, source) is the header, lines `1..` carry 8 data bytes each (see
//! `crate::prims::ll`).
//!
//! The communicator's address table (`CommArgs::inboxes`) holds `2 * nranks` u64s: entries
//! `[0, n)` are the ranks' inbox bases as addressable by this rank, entries `[n, 2n)` the
//! deltas to add (wrapping) to an address rank `q` published (a buffer in `q`'s address
//! space) to get the same byte in this rank's (0 when `q` is in this process).

use crate::abi::{P2pMailbox, SyncLine, MAX_BLOCKS};

const ALIGN: usize = 4096;

const fn round_up(x: usize) -> usize {
    x.div_ceil(ALIGN) * ALIGN
}

/// Bytes of the barrier lines.
pub const fn barrier_bytes(nranks: u32) -> usize {
    MAX_BLOCKS * nranks as usize * core::mem::size_of::<SyncLine>()
}

/// Offset of the p2p mailboxes.
pub const fn p2p_offset(nranks: u32) -> usize {
    round_up(barrier_bytes(nranks))
}

/// Bytes of the p2p mailboxes: one [`P2pMailbox`] per peer (this rank included), indexed by
/// the peer's rank.
pub const fn p2p_bytes(nranks: u32) -> usize {
    nranks as usize * core::mem::size_of::<P2pMailbox>()
}

/// Address of the mailbox for `peer` in the inbox at `inbox` of an `nranks` communicator.
#[inline(always)]
pub fn mailbox_addr(inbox: u64, nranks: u32, peer: u32) -> *mut P2pMailbox {
    let off = p2p_offset(nranks) + peer as usize * core::mem::size_of::<P2pMailbox>();
    inbox.wrapping_add(off as u64) as *mut P2pMailbox
}

/// Offset of the epoch slots (`crate::prims::epoch`): written and read only by the owner.
pub const fn epochs_offset(nranks: u32) -> usize {
    p2p_offset(nranks) + round_up(p2p_bytes(nranks))
}

/// Bytes of the epoch slots: `MAX_BLOCKS` epoch bases, then `MAX_BLOCKS` LL generations.
pub const EPOCH_BYTES: usize = 2 * MAX_BLOCKS * 8;

/// Offset of the LL lines.
pub const fn ll_offset(nranks: u32) -> usize {
    epochs_offset(nranks) + round_up(EPOCH_BYTES)
}

/// Data lines per (parity, source) of the LL region for a capacity of `ll_max` bytes per
/// rank (8 data bytes per 16-byte line).
pub const fn ll_lines(ll_max: usize) -> usize {
    ll_max.div_ceil(8)
}

/// Bytes of the LL lines: two parities, one slot per source rank, each a header line and
/// [`ll_lines`] data lines of 16 bytes.
pub const fn ll_bytes(nranks: u32, ll_max: usize) -> usize {
    2 * nranks as usize * (ll_lines(ll_max) + 1) * 16
}

/// Bytes of one rank's inbox allocation.
pub const fn inbox_bytes(nranks: u32, ll_max: usize) -> usize {
    ll_offset(nranks) + round_up(ll_bytes(nranks, ll_max))
}

/// Bytes of the address table of an `nranks` communicator (inbox bases, then deltas).
pub const fn table_bytes(nranks: u32) -> usize {
    16 * nranks as usize
}
