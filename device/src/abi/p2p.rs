//! Layouts of point-to-point transfers (send/recv): the kernel arguments of one group launch
//! ([`P2pArgs`], a list of [`P2pOp`]s passed by value) and the per-peer mailbox every rank
//! keeps in its inbox ([`P2pMailbox`], see `crate::coll::p2p` for the protocol).

use super::{CommArgs, Header};
use rustacuda_core::DeviceCopy;

/// Most operations one p2p launch carries (the host cuts larger groups into several launches,
/// see `oxccl::p2p::plan`).
pub const P2P_MAX_OPS: usize = 64;

/// Most blocks one send may use (direct mode).
pub const P2P_MAX_LANES: u32 = 16;

/// [`P2pOp::meta`] bit: the operation is a receive (else a send).
pub const P2P_META_RECV: u32 = 1 << 8;

/// [`P2pArgs::mode`]: peers load and store each other's buffers (one address space).
pub const P2P_DIRECT: u32 = 0;
/// [`P2pArgs::mode`]: data moves through the senders' staging halves (ranks in several
/// processes).
pub const P2P_STAGED: u32 = 1;

/// Set in [`super::ErrorRecord::block`] by a p2p kernel; bits 16..31 then hold the low 15
/// bits of [`P2pArgs::serial`] and bits 0..16 the index of the operation in the launch.
pub const P2P_ERROR_FLAG: u32 = 1 << 31;

/// What a sender adds to (direct) or stores in (staged) the receiver's
/// [`P2pMailbox::done_count`] when the two sides posted different operations: larger than
/// any wait target, so the receiver stops waiting and compares the postings.
pub const P2P_MISMATCH_MARK: u64 = 1 << 62;

/// One send or receive of a launch, as this rank posted it.
///
/// Layout: addr 0, count 8, seq 16, peer 24, meta 28; 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct P2pOp {
    /// This rank's buffer (the source of a send, the destination of a receive).
    pub addr: u64,
    /// Elements.
    pub count: u64,
    /// Sequence number of this operation among this rank's sends to `peer` (or receives from
    /// `peer`), from 1: the `k`-th send from `a` to `b` matches the `k`-th receive of `b`
    /// from `a`.
    pub seq: u64,
    /// The other rank.
    pub peer: u32,
    /// Bits 0..8: the [`super::DataType`] value; bit 8: [`P2P_META_RECV`]; bits 16..32: the
    /// blocks ("lanes") the operation uses (at least 1; receives and staged sends use 1).
    pub meta: u32,
}

impl P2pOp {
    /// The `meta` word of an operation.
    pub const fn meta_of(dtype: u32, recv: bool, lanes: u32) -> u32 {
        (dtype & 0xff) | if recv { P2P_META_RECV } else { 0 } | (lanes << 16)
    }

    /// The data type value.
    pub const fn dtype(&self) -> u32 {
        self.meta & 0xff
    }

    /// Whether this is a receive.
    pub const fn is_recv(&self) -> bool {
        self.meta & P2P_META_RECV != 0
    }

    /// Blocks this operation uses (at least 1).
    pub const fn lanes(&self) -> u32 {
        let l = self.meta >> 16;
        if l == 0 {
            1
        } else {
            l
        }
    }

    /// What the matching side must have posted: [`p2p_posting`] of count and dtype.
    pub const fn posting(&self) -> u64 {
        p2p_posting(self.count, self.dtype())
    }
}

/// The posting word of an operation of `count` elements of data type `dtype`: `count << 8 |
/// dtype`, plus 1 << 63 so that it is never 0 (a mailbox not yet written). Counts must be
/// below 2^55 (the host rejects larger ones).
pub const fn p2p_posting(count: u64, dtype: u32) -> u64 {
    (1 << 63) | (count << 8) | (dtype as u64 & 0xff)
}

/// (count, dtype) of a posting word.
pub const fn p2p_unposting(posting: u64) -> (u64, u32) {
    ((posting & !(1 << 63)) >> 8, (posting & 0xff) as u32)
}

/// Arguments of the p2p kernel: this rank's operations of one group launch, passed by value.
///
/// Layout (byte offsets): header 0, comm 8, nops 56, mode 60, stage_offset 64, slot_bytes 72,
/// epoch 80, serial 88, _pad 92, ops 96 (`P2P_MAX_OPS` x 32); 2144 bytes, 8-byte aligned.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2pArgs {
    pub header: Header,
    pub comm: CommArgs,
    /// Operations in `ops` (the rest are ignored).
    pub nops: u32,
    /// [`P2P_DIRECT`] or [`P2P_STAGED`].
    pub mode: u32,
    /// Staged mode: byte offset of the staging input half in every rank's segment (whose base
    /// is the rank's inbox).
    pub stage_offset: u64,
    /// Staged mode: bytes of the staging slot a sender keeps for each receiver (slot `q` at
    /// `stage_offset + q * slot_bytes`); a multiple of 32.
    pub slot_bytes: u64,
    /// This rank's collective epoch counter when the operations were issued: errors are
    /// recorded at this epoch (so the next collective sees them as earlier, sticky ones), and
    /// errors recorded before it (below it) make the launch do nothing.
    pub epoch: u64,
    /// This rank's serial number of the launch (names the launch in error records).
    pub serial: u32,
    pub _pad: u32,
    pub ops: [P2pOp; P2P_MAX_OPS],
}

/// One rank's mailbox for one peer, in the p2p region of the rank's inbox
/// (`crate::prims::layout::p2p_offset`, one per peer, indexed by the peer's rank). Three
/// 32-byte lines, each with one writer:
/// - `ready_*`: written by the peer as the receiver of this rank's sends;
/// - `done_*`: written by the peer as the sender of this rank's receives (`done_count` is
///   reset by this rank before it announces a receive);
/// - `recv_seq`: written by this rank: the last receive from the peer it completed.
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default)]
pub struct P2pMailbox {
    /// Sequence number of the receive the peer announced (release store, last).
    pub ready_seq: u64,
    /// Direct mode: the peer's receive buffer.
    pub ready_addr: u64,
    /// The peer's posting ([`p2p_posting`]).
    pub ready_posted: u64,
    /// Staged mode: chunks the peer has copied out of this rank's staging slot.
    pub ready_consumed: u64,
    /// Direct mode: bytes stored into this rank's receive buffer plus 1 (atomic adds by the
    /// sending blocks); staged mode: 1 once the posting is published, then 2 + the chunks
    /// the peer has staged.
    pub done_count: u64,
    /// The peer's posting for the current receive.
    pub done_posted: u64,
    pub _done_pad: [u64; 2],
    /// Sequence number of the last receive from the peer this rank completed.
    pub recv_seq: u64,
    pub _own_pad: [u64; 3],
}

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<P2pOp>() == 32 && align_of::<P2pOp>() == 8);
    assert!(offset_of!(P2pArgs, ops) == 96);
    assert!(size_of::<P2pArgs>() == 96 + 32 * P2P_MAX_OPS && align_of::<P2pArgs>() == 8);
    assert!(size_of::<P2pMailbox>() == 96 && align_of::<P2pMailbox>() == 32);
    assert!(offset_of!(P2pMailbox, done_count) == 32 && offset_of!(P2pMailbox, recv_seq) == 64);
};

// SAFETY: plain-old-data structs of integers, valid for any bit pattern (addresses are u64
// values).
unsafe impl DeviceCopy for P2pOp {}
// SAFETY: as above.
unsafe impl DeviceCopy for P2pArgs {}
// SAFETY: as above.
unsafe impl DeviceCopy for P2pMailbox {}
