//! Arguments and scratch layout of the symmetric kernels (`crate::coll::sym`): collectives
//! over buffers in registered windows, where peer `q`'s copy of a window byte is reached by
//! pointer arithmetic ([`WindowDesc`]: `local + (q - rank) * stride + offset`, wrapping).
//!
//! # `SymArgs` layout (byte offsets, 256 bytes, 8-byte aligned, no implicit padding)
//! ```text
//!   0 header          Header {size, version}
//!   8 kind            u32  SYM_KIND_*
//!  12 proto           u32  SYM_PROTO_*
//!  16 send            WindowDesc (48)   the input's window (Simple reads peers' copies)
//!  64 recv            WindowDesc (48)   the output's window (Simple writes peers' copies)
//! 112 scratch         WindowDesc (48)   comm-owned window: barrier lines, LL/Lamport lines
//! 160 send_offset     u64  byte offset of the input in `send`
//! 168 recv_offset     u64  byte offset of the output in `recv`
//! 176 scratch_offset  u64  byte offset of this protocol's scratch area in `scratch`
//! 184 count           u64  elements, as NCCL counts them (see `count`)
//! 192 dtype           u32  DataType value
//! 196 op              u32  RedOp value
//! 200 scalar          u64  PreMulSum scalar (little-endian bytes of one element)
//! 208 seq             u64  the op's sequence number on this communicator (see `seq`)
//! 216 abort_flag      u64  *const u32, host-written, non-zero = abort every wait
//! 224 timeout_ns      u64  give up a wait after this long (0 = never)
//! 232 error           u64  *mut ErrorRecord of this rank
//! 240 slot_lines      u32  16-byte lines per (buffer, source) slot of the area
//! 244 flags           u32  SYM_FLAG_*
//! 248 state           u64  *mut u64: this rank's sequence slots (see `state`), 0 = use `seq`
//! ```
//!
//! # Scratch area of one protocol (at `scratch_offset` in every rank's scratch copy)
//! ```text
//! 0                        barrier lines  [MAX_BLOCKS][nranks] u64, line (b, s) written
//!                                         only by block b of rank s (epochs), then
//!                                         [MAX_BLOCKS][nranks] u64 fingerprints
//! sym_lines_offset(n)      mailbox lines  LL: [2 parities][nranks sources][slot_lines]
//!                                         Lamport: [3 buffers][nranks sources][slot_lines]
//!                                         (line slot_lines - 1 of a slot: its header)
//! sym_scratch_bytes(..)    end
//! ```
//! Every rank uses the same offsets (they depend on `nranks` and the capacity only). The
//! area starts zeroed. An LL area needs nothing more. A Lamport area must be poisoned once
//! before its first use: every rank runs the init kernel (`oxccl_sym_lamport_init`, CPU:
//! `kernels::sym_lamport_init_dispatch`) on its own copy, waits for it, and then the ranks
//! meet at a host barrier (so that no peer stores data before the poison landed). A Simple
//! area is only barrier lines.

use rustacuda_core::DeviceCopy;

use super::{Header, MAX_BLOCKS};
use crate::api::abi::WindowDesc;

/// All-reduce, one-shot: every rank reads (Simple) or receives (LL, Lamport) every rank's
/// whole input and reduces all of it. `count` = elements per rank.
pub const SYM_KIND_ALL_REDUCE_ONE_SHOT: u32 = 0;
/// All-reduce, two-shot: rank `r` owns chunk `r` of the payload; it reduces chunk `r` of
/// every rank's input and every rank's output gets the result. Simple pulls the chunks from
/// the peers' inputs and pushes the result into their outputs; LL and Lamport push the
/// chunks into the owner's mailbox and the result into every rank's mailbox (chunks of
/// [`sym_two_shot_block_lines`] lines, [`sym_two_shot_lines`] lines of a slot).
pub const SYM_KIND_ALL_REDUCE_TWO_SHOT: u32 = 1;
/// All-gather by pushes: every rank stores its input into block `rank` of every rank's
/// output. `count` = elements of each rank's input (the output holds `nranks * count`).
pub const SYM_KIND_ALL_GATHER: u32 = 2;
/// Reduce-scatter by pull-reduce: rank `r` reduces block `r` of every rank's input into its
/// output. `count` = elements of the output (the input holds `nranks * count`).
pub const SYM_KIND_REDUCE_SCATTER: u32 = 3;

/// Plain loads and stores over the window buffers, bracketed by barriers.
pub const SYM_PROTO_SIMPLE: u32 = 0;
/// Epoch-tagged, double-buffered mailbox lines in scratch (8 data bytes per line).
pub const SYM_PROTO_LL: u32 = 1;
/// Sentinel-poisoned, triple-buffered lines in scratch (16 or 8 data bytes per line).
pub const SYM_PROTO_LAMPORT: u32 = 2;

/// Whether a launch of protocol `proto`, kind `kind` and operator `op` ([`super::RedOp`])
/// runs on the kernels that hold the one-shot all-reduce with `Sum` alone
/// (`oxccl_sym_ll_sum_<type>`, `oxccl_sym_lamport_sum_<type>`) rather than the general LL
/// and Lamport kernels: the common small all-reduce, on a kernel whose hot path is short.
/// The host launches them exactly then; they check it and report any other arguments.
pub const fn sym_sum_kernel_runs(proto: u32, kind: u32, op: u32) -> bool {
    (proto == SYM_PROTO_LL || proto == SYM_PROTO_LAMPORT)
        && kind == SYM_KIND_ALL_REDUCE_ONE_SHOT
        && op == super::RedOp::Sum as u32
}

/// Whether a launch of protocol `proto`, kind `kind`, operator `op` and flags `flags` runs
/// on the grouped mailbox kernels (`oxccl_sym_ll_grouped_<type>`,
/// `oxccl_sym_lamport_grouped_<type>`): the host asked for them ([`SYM_FLAG_GROUPED`]), and
/// the launch is one they hold: the one-shot all-reduce or the reduce-scatter with `Sum`,
/// or the all-gather (any operator: it reduces nothing). Checked before
/// [`sym_sum_kernel_runs`]. The host launches them exactly then; they check it and report
/// any other arguments.
pub const fn sym_grouped_kernel_runs(proto: u32, kind: u32, op: u32, flags: u32) -> bool {
    (proto == SYM_PROTO_LL || proto == SYM_PROTO_LAMPORT)
        && flags & SYM_FLAG_GROUPED != 0
        && (kind == SYM_KIND_ALL_GATHER
            || ((kind == SYM_KIND_ALL_REDUCE_ONE_SHOT || kind == SYM_KIND_REDUCE_SCATTER)
                && op == super::RedOp::Sum as u32))
}

/// [`SymArgs::flags`]: clear this rank's LL mailbox between two barriers before the op,
/// because its tag generation ([`sym_ll_generation`]) differs from the one of the
/// communicator's previous LL op (see [`sym_ll_needs_reset`]).
pub const SYM_FLAG_LL_RESET: u32 = 1;
/// Every rank of the collective runs on this rank's device (ranks sharing one GPU, in one
/// process or in several under MPS): the kernels order their barrier and Lamport accesses
/// at GPU scope (`fence.acq_rel.gpu`, `st.release.gpu`, `ld.acquire.gpu`) instead of system
/// scope, which is enough because every thread that reads or writes the scratch area runs on
/// the same device. Without it (peers on other GPUs) they use system scope.
pub const SYM_FLAG_ONE_DEVICE: u32 = 2;
/// Programmatic dependent launch: the host launched this kernel with programmatic stream
/// serialization, so the driver may schedule it while the previous kernel of its stream still
/// runs. Every symmetric kernel starts with `griddepcontrol.wait` (the previous kernel has
/// completed and its memory operations are visible; a no-op for an ordinary launch), so the
/// op still runs in stream order. With this flag it then executes
/// `griddepcontrol.launch_dependents`, letting the next such launch of its stream be
/// scheduled while it runs. The host sets the flag only for grids of at most half the blocks
/// per rank that fit on the device, so that the next op's waiting blocks and this op's fit
/// together and never keep a peer rank's blocks of this op from becoming resident; and the
/// trigger comes after the wait, so that at most one waiting grid per stream is resident.
pub const SYM_FLAG_EARLY_NEXT: u32 = 4;
/// Run on the grouped mailbox kernels where they hold the launch
/// ([`sym_grouped_kernel_runs`]): the reader polls a line's peers four at a time instead of
/// one after the other, which pays from about seven ranks (the host's choice,
/// `OXCCL_SYM_GROUPED`). The lines, the publish side and the header check are the same, so
/// ranks that differ in this flag still meet. Ignored by every other kernel.
pub const SYM_FLAG_GROUPED: u32 = 8;

/// Arguments of the symmetric kernels, passed by value (layout in the module doc).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymArgs {
    pub header: Header,
    /// `SYM_KIND_*`.
    pub kind: u32,
    /// `SYM_PROTO_*`.
    pub proto: u32,
    /// The input's window. Simple reads peers' copies at `send_offset`; LL and Lamport only
    /// read this rank's own copy (`send.local + send_offset`), so for them any buffer will
    /// do (a descriptor with `local` set and `stride` 0).
    pub send: WindowDesc,
    /// The output's window (same rules as `send`).
    pub recv: WindowDesc,
    /// The communicator's scratch window; `scratch.rank` / `scratch.nranks` are this rank
    /// and the rank count of the collective.
    pub scratch: WindowDesc,
    pub send_offset: u64,
    pub recv_offset: u64,
    /// Offset of this protocol's area (layout in the module doc).
    pub scratch_offset: u64,
    /// Elements: all-reduce per rank, all-gather per input, reduce-scatter per output.
    pub count: u64,
    /// [`super::DataType`] value.
    pub dtype: u32,
    /// [`super::RedOp`] value (ignored by the all-gather).
    pub op: u32,
    /// PreMulSum scalar: the little-endian bytes of one element of `dtype`.
    pub scalar: u64,
    /// The op's sequence number: the host counts every symmetric op of the communicator
    /// (0, 1, 2, ...; the same on every rank). Barrier epochs (`2 seq + 1`, `2 seq + 2`),
    /// the LL parity and tag and the Lamport buffer (`seq % 3`) derive from it.
    pub seq: u64,
    pub abort_flag: u64,
    pub timeout_ns: u64,
    pub error: u64,
    /// LL and Lamport: lines per (buffer, source) slot, [`sym_slot_lines`] of the area's
    /// capacity (the last is the slot's header line). Ops whose per-rank payload needs more
    /// than `slot_lines - 1` lines (the two-shot all-reduce: [`sym_two_shot_lines`]) are
    /// refused.
    pub slot_lines: u32,
    /// `SYM_FLAG_*`.
    pub flags: u32,
    /// This rank's sequence slots in device memory, local to the rank (`SYM_STATE_BYTES`,
    /// zeroed at creation): `[MAX_BLOCKS]` sequence numbers, then `[MAX_BLOCKS]` LL
    /// generations (`crate::prims::epoch`'s protocol with a step of 1). When set, the kernel
    /// takes `seq` from there and decides `SYM_FLAG_LL_RESET` itself, so that a launch
    /// replayed from a CUDA graph (same arguments) still runs as the next op; `seq` and the
    /// reset flag given here are then ignored. 0 = take them from these arguments (tests).
    pub state: u64,
}

/// Bytes of a rank's sequence slots ([`SymArgs::state`]).
pub const SYM_STATE_BYTES: usize = 2 * MAX_BLOCKS * 8;

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<SymArgs>() == 256 && align_of::<SymArgs>() == 8);
    assert!(offset_of!(SymArgs, state) == 248);
    assert!(offset_of!(SymArgs, send) == 16 && offset_of!(SymArgs, recv) == 64);
    assert!(offset_of!(SymArgs, scratch) == 112 && offset_of!(SymArgs, send_offset) == 160);
    assert!(offset_of!(SymArgs, count) == 184 && offset_of!(SymArgs, dtype) == 192);
    assert!(offset_of!(SymArgs, seq) == 208 && offset_of!(SymArgs, error) == 232);
    assert!(offset_of!(SymArgs, slot_lines) == 240 && offset_of!(SymArgs, flags) == 244);
};

// SAFETY: plain-old-data of integers (addresses as u64 values), valid for any bit pattern.
unsafe impl DeviceCopy for SymArgs {}

/// Bytes of one mailbox line.
pub const SYM_LINE_BYTES: u64 = 16;

/// LL and Lamport buffers per area.
pub const fn sym_buffers(proto: u32) -> u64 {
    match proto {
        SYM_PROTO_LL => 2,
        SYM_PROTO_LAMPORT => 3,
        _ => 0,
    }
}

/// Lines per (buffer, source) slot for a capacity of `max_bytes` per rank and op (the
/// all-reduce's input, the all-gather's input, the reduce-scatter's output): 8 data bytes
/// per line, the densest format's worst case (LL lines and the split Lamport lines), plus
/// the slot's header line (its last, [`sym_header_line`]). The two-shot all-reduce needs
/// [`sym_two_shot_lines`] data lines instead (about `2 / nranks` of the one-shot's).
pub const fn sym_slot_lines(max_bytes: u64) -> u64 {
    max_bytes.div_ceil(8) + 1
}

/// Index of the header line in a slot of `slot_lines` lines: the last one. Data lines are
/// `0 .. slot_lines - 1`.
pub const fn sym_header_line(slot_lines: u64) -> u64 {
    slot_lines.saturating_sub(1)
}

/// Lines of each rank's block in the LL or Lamport two-shot all-reduce of `count` elements
/// of `size` bytes on `nranks` ranks, `data` payload bytes per line: the payload's lines
/// (chunks of `data` bytes, the last one short) cut into `nranks` blocks of this many lines,
/// rank `q` owning lines `[q * b, (q + 1) * b)` of the payload (the trailing blocks may be
/// short or empty). Whole lines, so no line straddles two blocks; the same on every rank.
pub const fn sym_two_shot_block_lines(count: u64, size: u64, nranks: u32, data: u64) -> u64 {
    let data = if data == 0 { 1 } else { data };
    let n = if nranks == 0 { 1 } else { nranks as u64 };
    count.saturating_mul(size).div_ceil(data).div_ceil(n)
}

/// Data lines of a slot that the LL or Lamport two-shot all-reduce uses (arguments as
/// [`sym_two_shot_block_lines`]): the block a rank sends to its owner, then the reduced
/// block the owner sends to every rank. It runs when this is at most the slot's data lines
/// (`sym_header_line(slot_lines)`); the host checks this before it chooses the kernel, the
/// kernel reports a bad argument otherwise.
pub const fn sym_two_shot_lines(count: u64, size: u64, nranks: u32, data: u64) -> u64 {
    sym_two_shot_block_lines(count, size, nranks, data).saturating_mul(2)
}

/// The fingerprint of a symmetric op, exact rather than hashed: the low 32 bits of `count`,
/// then `dtype` (4 bits), `op` (3), `kind` (2) and `proto` (2), 43 bits in all. Ranks that
/// disagree on any of them in the same op report a mismatch instead of exchanging lines of
/// different shapes. (Counts that agree modulo 2^32 are not told apart; the mailbox
/// protocols refuse such sizes anyway.) Cheap on purpose: shifts and ors only, computed by
/// the kernel from its arguments.
pub const fn sym_fingerprint(kind: u32, proto: u32, dtype: u32, op: u32, count: u64) -> u64 {
    (count & 0xFFFF_FFFF)
        | ((dtype as u64 & 0xF) << 32)
        | ((op as u64 & 0x7) << 36)
        | ((kind as u64 & 0x3) << 39)
        | ((proto as u64 & 0x3) << 41)
}

/// Bits of a Simple kernel's barrier fingerprint above [`sym_fingerprint`]'s 43: a hash of
/// where its buffers lie (the send and receive windows' serials and this op's offsets in
/// them). The Simple kernels load and store peers' copies at this rank's window and offsets,
/// so every rank must pass the same window and offsets (NCCL's contract for
/// collective-symmetric windows); a rank that did not is caught at the entry barrier, before
/// any peer's memory is touched, as a mismatch ([`SYM_MISMATCH_FLAG`]) instead of reading or
/// writing the wrong bytes. Ranks that differ in any of the four are told apart except with
/// probability 2^-21.
pub const fn sym_placement(send_serial: u32, send_offset: u64, recv_serial: u32, recv_offset: u64) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (send_serial as u64) | ((recv_serial as u64) << 32);
    h = (h.wrapping_mul(K) ^ send_offset).wrapping_mul(K);
    h = (h ^ recv_offset.rotate_left(29)).wrapping_mul(K);
    (h >> SYM_FINGERPRINT_BITS) << SYM_FINGERPRINT_BITS
}

/// Bits of [`sym_fingerprint`].
pub const SYM_FINGERPRINT_BITS: u32 = 43;

/// Set in [`super::ErrorRecord::block`] by a symmetric kernel that found a peer's header
/// with another fingerprint: the record's `epoch` then holds this rank's fingerprint and
/// `detail` the peer's (both [`sym_fingerprint`]s, with [`sym_placement`] bits from the
/// Simple kernels), so the host can say what each called.
pub const SYM_MISMATCH_FLAG: u32 = 1 << 30;

/// Set in [`super::ErrorRecord::block`] by every other error a symmetric kernel records (a
/// timeout, an abort, a refused argument): the record's `epoch` then holds the op's
/// sequence number ([`SymArgs::seq`], not a barrier epoch of the classic collectives), and
/// for a timeout or an abort `detail` holds the op's [`sym_fingerprint`] (for a refused
/// argument, the value refused), so the host can name the operation that failed.
pub const SYM_ERROR_FLAG: u32 = 1 << 29;

/// The payload words of a header line carrying fingerprint `fp`: its 48 low bits as four
/// 12-bit lanes, one per 16-bit half of words 0 and 1 (words 2 and 3 repeat them, for the
/// full Lamport lines). Every 16-bit half is below `0x1000`, so no half is a 16-bit Lamport
/// lane sentinel and no word is the 32-bit one: the words are what every line format
/// carries unchanged (`canon` is the identity on them).
pub const fn sym_header_words(fp: u64) -> [u32; 4] {
    let l = [
        (fp & 0xFFF) as u32,
        ((fp >> 12) & 0xFFF) as u32,
        ((fp >> 24) & 0xFFF) as u32,
        ((fp >> 36) & 0xFFF) as u32,
    ];
    let w0 = l[0] | l[1] << 16;
    let w1 = l[2] | l[3] << 16;
    [w0, w1, w0, w1]
}

/// The fingerprint a header line's payload words carry (inverse of [`sym_header_words`] on
/// the 48 bits it keeps).
pub const fn sym_header_fingerprint(w: [u32; 4]) -> u64 {
    (w[0] & 0xFFF) as u64
        | (((w[0] >> 16) & 0xFFF) as u64) << 12
        | ((w[1] & 0xFFF) as u64) << 24
        | (((w[1] >> 16) & 0xFFF) as u64) << 36
}

/// Bytes of the barrier lines of an area: `[MAX_BLOCKS][nranks]` u64 epochs, then as many
/// u64 fingerprints (`crate::coll::sym::barrier`).
pub const fn sym_barrier_bytes(nranks: u32) -> u64 {
    (MAX_BLOCKS as u64) * nranks as u64 * 8 * 2
}

/// Offset of the mailbox lines in an area (after the barrier lines, 4096-aligned).
pub const fn sym_lines_offset(nranks: u32) -> u64 {
    sym_barrier_bytes(nranks).div_ceil(4096) * 4096
}

/// Bytes of the scratch area that `kind` in protocol `proto` needs on an `nranks`
/// communicator for ops of up to `max_bytes` per rank (see [`sym_slot_lines`]; every kind
/// of a protocol shares its area); 0 for an unknown kind or protocol.
pub const fn sym_scratch_bytes(kind: u32, proto: u32, nranks: u32, max_bytes: u64) -> u64 {
    if kind > SYM_KIND_REDUCE_SCATTER || proto > SYM_PROTO_LAMPORT {
        return 0;
    }
    let lines = sym_buffers(proto) * nranks as u64 * sym_slot_lines(max_bytes) * SYM_LINE_BYTES;
    sym_lines_offset(nranks) + lines
}

/// LL tag of op `seq`: odd (never the 0 of fresh memory), unique among the `2^31`
/// consecutive ops of one generation.
#[inline(always)]
pub const fn sym_ll_tag(seq: u64) -> u32 {
    ((seq as u32) << 1) | 1
}

/// LL generation of op `seq`: tags repeat only across generations.
#[inline(always)]
pub const fn sym_ll_generation(seq: u64) -> u64 {
    seq >> 31
}

/// Whether the LL op `seq` must carry [`SYM_FLAG_LL_RESET`], given the sequence number of
/// the communicator's previous LL op on the same area (`None` if there was none: the area
/// is still zeroed).
pub const fn sym_ll_needs_reset(prev_ll_seq: Option<u64>, seq: u64) -> bool {
    match prev_ll_seq {
        Some(p) => sym_ll_generation(p) != sym_ll_generation(seq),
        None => false,
    }
}

/// The LL parity (mailbox half) of op `seq`.
#[inline(always)]
pub const fn sym_ll_parity(seq: u64) -> u64 {
    seq & 1
}

/// The Lamport buffer of op `seq`.
#[inline(always)]
pub const fn sym_lamport_buffer(seq: u64) -> u64 {
    // `seq % 3` in 32-bit arithmetic (2^32 = 1 mod 3, so seq = hi + lo mod 3): a 64-bit
    // remainder is a dozen emulated instructions on the GPU, in front of every address.
    (((seq >> 32) as u32 % 3 + seq as u32 % 3) % 3) as u64
}

/// Payload bytes per mailbox line of protocol `proto` (`SYM_PROTO_LL` or `SYM_PROTO_LAMPORT`)
/// for `dtype`: 16 for Lamport's full lines (`f16`, `bf16`, `f32`, `f64`, whose free NaN
/// pattern is the sentinel), 8 otherwise (LL and split Lamport lines carry a tag).
pub const fn sym_line_data(proto: u32, dtype: super::DataType) -> u64 {
    use super::DataType as D;
    let full = matches!(dtype, D::F16 | D::Bf16 | D::F32 | D::F64);
    if proto == SYM_PROTO_LAMPORT && full {
        16
    } else {
        8
    }
}

/// Barrier epochs of op `seq`: entry and exit.
#[inline(always)]
pub const fn sym_epochs(seq: u64) -> (u64, u64) {
    (
        seq.wrapping_mul(2).wrapping_add(1),
        seq.wrapping_mul(2).wrapping_add(2),
    )
}

/// Arguments of the Lamport init kernel: poison `lines` 16-byte lines at `base` (a rank's
/// own copy of a Lamport area's mailbox lines: `scratch.local + scratch_offset +
/// sym_lines_offset(nranks)`, `3 * nranks * slot_lines` lines).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymInitArgs {
    pub header: Header,
    pub base: u64,
    pub lines: u64,
}

const _: () = assert!(core::mem::size_of::<SymInitArgs>() == 24);

// SAFETY: plain-old-data of integers.
unsafe impl DeviceCopy for SymInitArgs {}

impl SymInitArgs {
    /// The init arguments for the Lamport area at `offset` in the scratch window `w`,
    /// of `slot_lines` lines per slot.
    pub fn for_area(w: &WindowDesc, offset: u64, slot_lines: u64) -> Self {
        SymInitArgs {
            header: Header::of::<SymInitArgs>(),
            base: w.local + offset + sym_lines_offset(w.nranks),
            lines: 3 * w.nranks as u64 * slot_lines,
        }
    }
}
