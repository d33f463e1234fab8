//! Layouts shared by host and device, and between ranks. All `#[repr(C)]`, with
//! compile-time size/align asserts; user-facing and kernel-argument structs begin with a
//! [`Header`] (size + version) so that a reader can tell which layout a writer used.
//!
//! Versioning rule: fields are only ever appended; `version` bumps with each append; a
//! reader accepts `size`/`version` up to its own and treats missing trailing fields as
//! their defaults; a writer newer than the reader is rejected with a version error.

use rustacuda_core::DeviceCopy;

/// Version of the layouts in this module.
pub const ABI_VERSION: u32 = 3;

/// Upper bound on blocks per rank in one collective launch (sizes the sync inboxes).
pub const MAX_BLOCKS: usize = 64;

/// Upper bound on ranks of one communicator reachable by loads/stores (one node).
pub const MAX_LOCAL_RANKS: usize = 64;

/// NCCL's `ncclDataType_t`, same values.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    I8 = 0,
    U8 = 1,
    I32 = 2,
    U32 = 3,
    I64 = 4,
    U64 = 5,
    F16 = 6,
    F32 = 7,
    F64 = 8,
    Bf16 = 9,
    F8E4M3 = 10,
    F8E5M2 = 11,
}

impl DataType {
    /// Every data type, in NCCL's order.
    pub const ALL: [DataType; 12] = [
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::F16,
        DataType::F32,
        DataType::F64,
        DataType::Bf16,
        DataType::F8E4M3,
        DataType::F8E5M2,
    ];

    /// From NCCL's integer value. A `match`, not an index into [`Self::ALL`]: on the device an
    /// index compiles to a load from a table in global memory, one more dependent round trip
    /// before a kernel can branch on the value.
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => DataType::I8,
            1 => DataType::U8,
            2 => DataType::I32,
            3 => DataType::U32,
            4 => DataType::I64,
            5 => DataType::U64,
            6 => DataType::F16,
            7 => DataType::F32,
            8 => DataType::F64,
            9 => DataType::Bf16,
            10 => DataType::F8E4M3,
            11 => DataType::F8E5M2,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 | DataType::F8E4M3 | DataType::F8E5M2 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    /// True for the floating-point types.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16
                | DataType::F32
                | DataType::F64
                | DataType::Bf16
                | DataType::F8E4M3
                | DataType::F8E5M2
        )
    }

    /// Short lowercase name (`bf16`, `f8e4m3`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
            DataType::F16 => "f16",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::Bf16 => "bf16",
            DataType::F8E4M3 => "f8e4m3",
            DataType::F8E5M2 => "f8e5m2",
        }
    }
}

/// Reduction operator; the first five have NCCL's `ncclRedOp_t` values.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedOp {
    Sum = 0,
    Prod = 1,
    Max = 2,
    Min = 3,
    Avg = 4,
    /// Sum of `scalar * x` (NCCL's `ncclRedOpCreatePreMulSum`).
    PreMulSum = 5,
}

impl RedOp {
    /// Every operator.
    pub const ALL: [RedOp; 6] = [
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Max,
        RedOp::Min,
        RedOp::Avg,
        RedOp::PreMulSum,
    ];

    /// From the integer value above.
    pub const fn from_u32(v: u32) -> Option<Self> {
        // A `match` for the reason given at `DataType::from_u32`.
        Some(match v {
            0 => RedOp::Sum,
            1 => RedOp::Prod,
            2 => RedOp::Max,
            3 => RedOp::Min,
            4 => RedOp::Avg,
            5 => RedOp::PreMulSum,
            _ => return None,
        })
    }

    /// Short lowercase name.
    pub const fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Avg => "avg",
            RedOp::PreMulSum => "premulsum",
        }
    }
}

/// First fields of every versioned struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// `size_of` the struct as the writer knew it.
    pub size: u32,
    /// [`ABI_VERSION`] of the writer.
    pub version: u32,
}

impl Header {
    /// The header for a `T` written by this build.
    pub const fn of<T>() -> Self {
        Header {
            size: core::mem::size_of::<T>() as u32,
            version: ABI_VERSION,
        }
    }
}

/// One rank's view of its communicator, as a kernel needs it. Addresses are device
/// addresses (host addresses on the CPU backend) valid in this rank's address space.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CommArgs {
    pub header: Header,
    pub rank: u32,
    pub nranks: u32,
    /// `*const u64` to `nranks` inbox base addresses: entry `q` is rank `q`'s [`SyncLine`]
    /// inbox as addressable by this rank. Inbox layout: `[MAX_BLOCKS][nranks] SyncLine`,
    /// line `(b, s)` written only by block `b` of rank `s`.
    pub inboxes: u64,
    /// `*const u32`, host-written, non-zero = abort every wait.
    pub abort_flag: u64,
    /// `*mut ErrorRecord` of this rank.
    pub error: u64,
    /// Give up a wait after this many nanoseconds (0 = never; not recommended).
    pub timeout_ns: u64,
}

/// A barrier/exchange line in a rank's inbox: the writer stores `send`, `recv`,
/// `fingerprint` with weak stores, then `epoch` with `st.release.sys`; the reader acquires
/// `epoch` and then reads the rest. 32 bytes, one sector.
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncLine {
    pub epoch: u64,
    pub send: u64,
    pub recv: u64,
    pub fingerprint: u64,
}

/// Where a kernel reports the first error of its rank. Lives in memory the host can read
/// while kernels run (mapped pinned memory on the GPU backend).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorRecord {
    /// One of the `ERR_*` codes; 0 = no error. Set once (first error wins).
    pub code: u32,
    /// The rank that reported.
    pub rank: u32,
    /// The peer it was waiting for or disagreed with (`u32::MAX` if none).
    pub peer: u32,
    /// The block that reported.
    pub block: u32,
    /// The epoch it was waiting for.
    pub epoch: u64,
    /// For mismatches: the peer's fingerprint; for timeouts: the last value seen.
    pub detail: u64,
}

/// No error.
pub const ERR_NONE: u32 = 0;
/// A wait for a peer passed the timeout.
pub const ERR_TIMEOUT: u32 = 1;
/// The communicator's abort flag was raised.
pub const ERR_ABORTED: u32 = 2;
/// A peer called a different operation (fingerprints differ).
pub const ERR_MISMATCH: u32 = 3;

/// Algorithms of the load/store all-reduce.
pub const ALGO_ONE_SHOT: u32 = 0;
/// Reduce-scatter by loads and all-gather by stores, fused ("two-shot").
pub const ALGO_TWO_SHOT: u32 = 1;
/// The LL protocol: every rank stores its input as flagged lines into every peer's inbox,
/// each reduces what arrived in its own (`crate::coll::all_reduce_ll`).
pub const ALGO_LL: u32 = 2;

/// [`AllReduceArgs::ll_flags`] bit: clear this rank's LL region (between two barriers)
/// before the exchange, because the LL flag generation changed (see `crate::prims::ll`).
pub const LL_FLAG_RESET: u32 = 1;

/// Arguments of the all-reduce kernels, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllReduceArgs {
    pub header: Header,
    pub comm: CommArgs,
    /// This rank's input and output addresses (equal for in-place).
    pub send: u64,
    pub recv: u64,
    /// Elements per rank.
    pub count: u64,
    /// [`DataType`] value.
    pub dtype: u32,
    /// [`RedOp`] value.
    pub op: u32,
    /// `ALGO_*`.
    pub algo: u32,
    pub _pad: u32,
    /// Barrier epoch base: this operation's entry barrier uses `epoch + 1`, exit `epoch + 2`.
    pub epoch: u64,
    /// PreMulSum scalar: the little-endian bytes of one element of `dtype`.
    pub scalar: u64,
    /// Must be equal on all ranks (collective, count, dtype, op, algorithm).
    pub fingerprint: u64,
    /// [`ALGO_LL`] only: data lines per (parity, source) of the LL region
    /// (`prims::layout::ll_lines` of the communicator's LL capacity). Appended in
    /// [`ABI_VERSION`] 3; 0 otherwise.
    pub ll_lines: u32,
    /// [`ALGO_LL`] only: `LL_FLAG_*` bits. Appended in [`ABI_VERSION`] 3.
    pub ll_flags: u32,
    /// Staged calls (communicators spanning processes): this rank's own user input and
    /// output, which its kernel uses for its own share instead of the published `send` and
    /// `recv` (the staging buffers peers reach). 0 = not staged (use `send` and `recv`).
    /// Appended in [`ABI_VERSION`] 3.
    pub local_send: u64,
    pub local_recv: u64,
}

/// Arguments of the broadcast, reduce, all-gather, reduce-scatter, all-to-all, gather,
/// scatter and all-gather-v kernels, passed by value. One layout for all: `coll` says which
/// one runs.
///
/// Layout (byte offsets): header 0, comm 8, send 56, recv 64, count 72, dtype 80, op 84,
/// coll 88, root 92, epoch 96, scalar 104, fingerprint 112, displ 120 (appended in
/// [`ABI_VERSION`] 2); 128 bytes, 8-byte aligned (no padding needed).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollArgs {
    pub header: Header,
    pub comm: CommArgs,
    /// This rank's input and output addresses (see each collective for in-place forms).
    pub send: u64,
    pub recv: u64,
    /// Elements, as NCCL's API counts them: broadcast and reduce `count`, all-gather
    /// `sendcount` (the output holds `nranks * count`), reduce-scatter `recvcount` (the input
    /// holds `nranks * count`), all-to-all, gather and scatter the count of one block (the
    /// blocked buffers hold `nranks * count`); all-gather-v this rank's own count
    /// (`counts[rank]`, different on every rank).
    pub count: u64,
    /// [`DataType`] value.
    pub dtype: u32,
    /// [`RedOp`] value (reduce and reduce-scatter; 0 for the others).
    pub op: u32,
    /// `COLL_*` id: which collective.
    pub coll: u32,
    /// Root rank (broadcast, reduce, gather and scatter; 0 for the others).
    pub root: u32,
    /// Barrier epoch base: entry barrier at `epoch + 1`, exit at `epoch + 2`.
    pub epoch: u64,
    /// PreMulSum scalar: the little-endian bytes of one element of `dtype`.
    pub scalar: u64,
    /// Must be equal on all ranks: [`coll_fingerprint`] of (coll, count, dtype, op, root);
    /// for all-gather-v, of (coll, [`counts_hash`] of counts and displacements, dtype, 0, 0).
    pub fingerprint: u64,
    /// All-gather-v: this rank's displacement (`displs[rank]`, in elements) in every rank's
    /// output; 0 for the others (and when absent: written by a version 1 host).
    pub displ: u64,
}

const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<Header>() == 8);
    assert!(size_of::<CommArgs>() == 48 && align_of::<CommArgs>() == 8);
    assert!(size_of::<SyncLine>() == 32 && align_of::<SyncLine>() == 32);
    assert!(size_of::<ErrorRecord>() == 32);
    assert!(size_of::<AllReduceArgs>() == 144 && align_of::<AllReduceArgs>() == 8);
    assert!(size_of::<CollArgs>() == 128 && align_of::<CollArgs>() == 8);
};

// SAFETY: plain-old-data structs of integers, valid for any bit pattern, no pointers that
// the device would dereference in the host's address space (addresses are u64 values).
unsafe impl DeviceCopy for Header {}
// SAFETY: as above.
unsafe impl DeviceCopy for CommArgs {}
// SAFETY: as above.
unsafe impl DeviceCopy for SyncLine {}
// SAFETY: as above.
unsafe impl DeviceCopy for ErrorRecord {}
// SAFETY: as above.
unsafe impl DeviceCopy for AllReduceArgs {}
// SAFETY: as above.
unsafe impl DeviceCopy for CollArgs {}

/// Fingerprint of a collective call: equal on every rank for matching calls, and decodable
/// ([`FingerprintFields::of`]), so that a rank that sees a peer's fingerprint differ from its
/// own can say what the peer called. Exact rather than hashed where it fits:
///
/// ```text
///  63    60 59   56 55 53  52  51        40 39                                0
/// +--------+-------+-----+---+------------+-----------------------------------+
/// |  coll  | dtype | op  | P |    tag     |               count               |
/// +--------+-------+-----+---+------------+-----------------------------------+
/// ```
///
/// `coll` is the `COLL_*` id (never 0, so a fingerprint is never 0), `P` is 0 for a call.
/// `tag` is the all-reduce's algorithm or the root of a rooted collective, and `count` the
/// element count (an all-gather-v: the hash of its counts and displacements); each is folded
/// (xor of its chunks) when it does not fit its field, so calls that differ only beyond the
/// field are not told apart (that weakens mismatch detection, never correctness). A piece of
/// a call that runs as several operations has its own fingerprint
/// ([`piece_fingerprint`], `P` = 1).
pub const fn fingerprint(coll: u32, count: u64, dtype: u32, op: u32, algo: u32) -> u64 {
    ((coll as u64 & 0xF) << 60)
        | ((dtype as u64 & 0xF) << 56)
        | ((op as u64 & 0x7) << 53)
        | (fold(algo as u64, 12) << 40)
        | fold(count, 40)
}

/// The fingerprint of piece `piece` of a call whose fingerprint is `call`, with `salt` (what
/// else the piece depends on, e.g. its algorithm): the call's collective, type and operator
/// (so the piece still says what was called), `P` = 1, the piece index (folded to 12 bits)
/// as the tag, and 40 bits of a hash of the call's fingerprint, the whole index and the salt
/// as the count field.
pub const fn piece_fingerprint(call: u64, piece: u64, salt: u64) -> u64 {
    let mut h = fnv1a_u64(FNV_OFFSET, call);
    h = fnv1a_u64(h, piece);
    h = fnv1a_u64(h, salt);
    (call & (0xFFF << 52)) | (1 << 52) | (fold(piece, 12) << 40) | (h & ((1 << 40) - 1))
}

/// `v` folded into `bits` bits: the xor of its `bits`-wide chunks.
const fn fold(mut v: u64, bits: u32) -> u64 {
    let mask = (1u64 << bits) - 1;
    let mut out = 0;
    while v != 0 {
        out ^= v & mask;
        v >>= bits;
    }
    out
}

/// The fields of a [`fingerprint`] or [`piece_fingerprint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FingerprintFields {
    /// `COLL_*` id.
    pub coll: u32,
    /// [`DataType`] value.
    pub dtype: u32,
    /// [`RedOp`] value.
    pub op: u32,
    /// `Some(index)` (folded to 12 bits) for a piece of a larger call.
    pub piece: Option<u32>,
    /// The algorithm or root (folded to 12 bits); 0 for a piece.
    pub tag: u32,
    /// The count (folded to 40 bits); for a piece, a hash.
    pub count: u64,
}

impl FingerprintFields {
    /// Decodes `fp`.
    pub const fn of(fp: u64) -> Self {
        let piece = (fp >> 52) & 1 == 1;
        let tag = ((fp >> 40) & 0xFFF) as u32;
        FingerprintFields {
            coll: (fp >> 60) as u32,
            dtype: ((fp >> 56) & 0xF) as u32,
            op: ((fp >> 53) & 0x7) as u32,
            piece: if piece { Some(tag) } else { None },
            tag: if piece { 0 } else { tag },
            count: fp & ((1 << 40) - 1),
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// One FNV-1a step over the 8 little-endian bytes of `v`.
const fn fnv1a_u64(mut h: u64, v: u64) -> u64 {
    let mut b = 0;
    while b < 8 {
        h ^= (v >> (8 * b)) & 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
        b += 1;
    }
    h
}

/// Fingerprint of a call of one of the [`CollArgs`] collectives: the root takes the place of
/// the all-reduce's algorithm (the collective ids differ, so the two never collide by
/// construction).
pub const fn coll_fingerprint(coll: u32, count: u64, dtype: u32, op: u32, root: u32) -> u64 {
    fingerprint(coll, count, dtype, op, root)
}

/// Hash of an all-gather-v's counts and displacements (elements, one of each per rank),
/// used in its fingerprint in place of the count: ranks that disagree on any of them (or on
/// their number) report a mismatch. FNV-1a over the length and every value; collisions only
/// weaken mismatch detection.
pub fn counts_hash(counts: &[usize], displs: &[usize]) -> u64 {
    let mut h = fnv1a_u64(fnv1a_u64(FNV_OFFSET, counts.len() as u64), displs.len() as u64);
    for (&c, &d) in counts.iter().zip(displs) {
        h = fnv1a_u64(fnv1a_u64(h, c as u64), d as u64);
    }
    h
}

/// Collective ids used in fingerprints (and [`CollArgs::coll`]).
pub const COLL_ALL_REDUCE: u32 = 1;
/// Broadcast: root's input to every rank's output.
pub const COLL_BROADCAST: u32 = 2;
/// Reduce: the reduction of every rank's input into root's output.
pub const COLL_REDUCE: u32 = 3;
/// All-gather: every rank's input, concatenated in rank order, into every rank's output.
pub const COLL_ALL_GATHER: u32 = 4;
/// Reduce-scatter: block `r` of the reduction of every rank's input into rank `r`'s output.
pub const COLL_REDUCE_SCATTER: u32 = 5;
/// All-to-all: block `q` of rank `r`'s input into block `r` of rank `q`'s output.
pub const COLL_ALL_TO_ALL: u32 = 6;
/// Gather: every rank's input, concatenated in rank order, into root's output.
pub const COLL_GATHER: u32 = 7;
/// Scatter: block `r` of root's input into rank `r`'s output.
pub const COLL_SCATTER: u32 = 8;
/// All-gather-v: rank `r`'s input (`counts[r]` elements) into every rank's output at
/// element `displs[r]`.
pub const COLL_ALL_GATHER_V: u32 = 9;

mod p2p;
pub use p2p::*;

mod sym;
pub use sym::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_decode_to_the_call_and_differ_for_different_calls() {
        let mut seen = std::collections::HashSet::new();
        for coll in [COLL_ALL_REDUCE, COLL_BROADCAST, COLL_ALL_GATHER_V] {
            for d in DataType::ALL {
                for op in RedOp::ALL {
                    for tag in [0u32, 1, 2, 4095] {
                        for count in [0u64, 1, 7, (1 << 40) - 1] {
                            let fp = fingerprint(coll, count, d as u32, op as u32, tag);
                            assert_ne!(fp, 0);
                            assert!(seen.insert(fp), "{coll} {d:?} {op:?} {tag} {count}");
                            let f = FingerprintFields::of(fp);
                            assert_eq!(
                                (f.coll, f.dtype, f.op, f.piece, f.tag, f.count),
                                (coll, d as u32, op as u32, None, tag, count)
                            );
                            // A piece keeps what was called and is never the call itself.
                            let p = piece_fingerprint(fp, 5000, 9);
                            let g = FingerprintFields::of(p);
                            assert_eq!(
                                (g.coll, g.dtype, g.op, g.piece),
                                (coll, d as u32, op as u32, Some((5000 & 0xFFF) ^ (5000 >> 12)))
                            );
                            assert_ne!(p, fp);
                            assert_ne!(p, piece_fingerprint(fp, 5001, 9));
                            assert_ne!(p, piece_fingerprint(fp, 5000, 10));
                        }
                    }
                }
            }
        }
        // Values past a field fold rather than truncate: the high bits still count.
        assert_ne!(fingerprint(1, 5, 7, 0, 0), fingerprint(1, 5 + (1 << 40), 7, 0, 0));
        assert_ne!(fingerprint(2, 5, 7, 0, 1), fingerprint(2, 5, 7, 0, 1 + (1 << 12)));
    }

    #[test]
    fn from_u32_matches_every_value_and_rejects_the_rest() {
        for d in DataType::ALL {
            assert_eq!(DataType::from_u32(d as u32), Some(d));
        }
        assert_eq!(DataType::from_u32(DataType::ALL.len() as u32), None);
        assert_eq!(DataType::from_u32(u32::MAX), None);
        for o in RedOp::ALL {
            assert_eq!(RedOp::from_u32(o as u32), Some(o));
        }
        assert_eq!(RedOp::from_u32(RedOp::ALL.len() as u32), None);
        assert_eq!(RedOp::from_u32(u32::MAX), None);
    }

    #[test]
    fn sym_header_words_carry_the_fingerprint_and_never_look_poisoned() {
        let mut seen = std::collections::HashSet::new();
        for kind in 0..3 {
            for proto in 1..3 {
                for dt in DataType::ALL {
                    for op in RedOp::ALL {
                        for count in [0u64, 1, 7, 65530, 32256, 0xFFFA_FFFA, u32::MAX as u64] {
                            let fp = sym_fingerprint(kind, proto, dt as u32, op as u32, count);
                            assert!(seen.insert(fp), "fingerprints differ for different calls");
                            let w = sym_header_words(fp);
                            assert_eq!(sym_header_fingerprint(w), fp);
                            for x in w {
                                assert_ne!(x, 0xFFFA_FFFA);
                                assert!(x & 0xFFFF < 0x1000 && x >> 16 < 0x1000);
                            }
                        }
                    }
                }
            }
        }
        // Counts are compared modulo 2^32 only.
        assert_eq!(
            sym_fingerprint(0, 1, 7, 0, 5),
            sym_fingerprint(0, 1, 7, 0, 5 + (1 << 32))
        );
    }

    #[test]
    fn lamport_buffer_is_seq_mod_3() {
        let edges = [
            0,
            1,
            2,
            3,
            u32::MAX as u64,
            1 << 32,
            (1 << 32) + 1,
            u64::MAX,
            u64::MAX - 1,
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for seq in edges.into_iter().chain((0..10_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })) {
            assert_eq!(sym_lamport_buffer(seq), seq % 3, "seq {seq}");
        }
    }
}
