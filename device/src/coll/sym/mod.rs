//! Symmetric collective kernels: all-reduce (one-shot, two-shot), all-gather and
//! reduce-scatter over buffers in registered windows, where a peer's copy of a buffer is
//! reached by pointer arithmetic ([`crate::api::abi::WindowDesc`]), with a comm-owned
//! scratch window for barrier and mailbox lines. Arguments: [`crate::abi::SymArgs`]; scratch
//! layout and sizing: [`crate::abi::sym_scratch_bytes`].
//!
//! No device state: everything that changes from op to op (barrier epochs, the LL parity
//! and tag, the Lamport buffer) derives from the op's sequence number `seq`, which the host
//! counts per communicator. Every rank launches the same grid for an op (lines and barrier
//! lines are matched by thread and block index across ranks).
//!
//! # Protocols
//! - **Simple** ([`simple`]): plain (weak) 16-byte loads and stores over the window buffers
//!   themselves, bracketed by two barriers on the scratch barrier lines ([`barrier`]): the
//!   entry barrier says every peer entered the op (its input is ready, its output is no
//!   longer used by an earlier op), the exit barrier says every peer finished its loads from
//!   my input and its stores into my output. For large sizes.
//! - **LL** ([`line::Ll`]): an epoch-tagged, double-buffered mailbox. Each 16-byte line
//!   carries 8 data bytes and the op's tag twice (the line format of [`crate::prims::ll`]),
//!   written with one 16-byte store into the peer's copy of the scratch; the reader spins on
//!   its own copy until both tags equal the op's tag. No flag, no barrier, no reset per op.
//! - **Lamport** ([`line::LamportFull`], [`line::LamportSplit`]): lines pre-filled with a
//!   sentinel that data cannot contain; writers store data with 16-byte stores, the reader
//!   spins on its own copy until no sentinel remains, then writes the sentinel back into the
//!   line it consumed. Three buffers rotate by `seq % 3`. Floats carry 16 data bytes per
//!   line (twice LL's density); other types carry 8 data bytes and a tag, like LL.
//!
//! LL and Lamport run every kind in [`mailbox`] (one-shot all-reduce, all-gather,
//! reduce-scatter) and [`two_shot`] (the two-shot all-reduce: a reduce-scatter by pushes into
//! the owners' mailboxes, then an all-gather of the reduced blocks by pushes, in one op). The
//! grouped kernels ([`grouped`], `SYM_FLAG_GROUPED`) run the same mailbox protocol for the
//! one-shot all-reduce and reduce-scatter with `Sum` and the all-gather, their readers
//! polling a line's peers four at a time.
//!
//! # The dependency every op provides
//! In every kernel here, every rank receives something from every other rank that the
//! sender produced after it started the op (Simple: the entry barrier arrival; LL and
//! Lamport: every rank's lines reach every other rank: the one-shot all-reduce and the
//! all-gather send the whole input, the reduce-scatter sends one block to each peer; and in
//! every LL and Lamport op global thread 0 sends its header line to every peer and takes
//! every peer's, whatever the count. The two-shot all-reduce relies on the headers alone:
//! with fewer lines than ranks some blocks are empty, and a rank may send a peer no data
//! line in either phase). Kernels of one rank run in stream order, so when rank `s` has
//! finished op `k`, every rank `r` has at least started op `k` and therefore finished op
//! `k - 1`, all its reads of its mailbox included. The buffer-reuse arguments below rest on
//! this alone, so the protocols and kinds can be mixed freely on one communicator (ops of
//! every protocol advance the same `seq`).
//!
//! # LL: why two buffers and the tag are enough
//! Op `seq` uses half `seq & 1` and tag [`crate::abi::sym_ll_tag`] (odd, never the 0 of
//! fresh memory, unique over the `2^31` ops of one generation). A writer `s` stores into
//! reader `r`'s half `p` for op `k` only after finishing op `k - 1`, so after `r` finished
//! op `k - 2`, the last op before `k` that used half `p`: lines are never overwritten
//! before they were read. A line left by an older op (also by a larger op, whose extra lines
//! the current op does not rewrite) has another tag, so it is never taken for the current
//! op's. The two-shot all-reduce writes both its phases into the op's half: the reduced
//! blocks of its second phase into lines `[nb, 2 nb)` of the slots, disjoint from the first
//! phase's `[0, nb)` ([`two_shot`]), so within the op no line is written twice either (every
//! line of slot `(p, s)` has one writer, rank `s`, and one write per op). Tags repeat only
//! after `2^31` ops: the first LL op of a new generation carries
//! [`crate::abi::SYM_FLAG_LL_RESET`] and clears this rank's mailbox between two barriers
//! (every peer finished the earlier ops before the first, nobody writes before the second).
//!
//! # Lamport: invariant, rotation, re-poisoning
//! Invariant: between ops, every line of every Lamport buffer of every rank holds the
//! sentinel. The init kernel establishes it once; an op keeps it, because every line a peer
//! writes into my copy is read by exactly one of my threads, which writes the sentinel back
//! into that line right after reading it (so the buffer is clean again when the op ends,
//! whatever the sizes of the ops before and after, and whatever protocols ran in between;
//! no previous-size argument and no reset pass are needed). Op `k` uses buffer `k % 3`.
//! A writer `s` stores into `r`'s buffer `k % 3` for op `k` only after finishing op `k - 1`,
//! hence after `r` finished op `k - 2`, hence after `r` re-poisoned everything op `k - 3`
//! (the last op using that buffer) wrote: the re-poisoning never races a writer of a later
//! op, and a reader never sees data of an older op (it was overwritten by the sentinel
//! first). Two buffers would satisfy this argument; the third gives one op of slack and
//! keeps the rotation of the design references (TensorRT-LLM, NCCL's `nccl_ubx`). The
//! two-shot all-reduce keeps the invariant with both phases in buffer `k % 3`: phase-one
//! lines `[0, nb)` and phase-two lines `[nb, 2 nb)` of a slot are each written at most once
//! per op, and each written line is read (and re-poisoned) by exactly one thread of the
//! owner of the mailbox, under the same condition the writer used (its chunk exists). That
//! the phase-two lines are stored only after the writer polled its own mailbox changes
//! nothing above: they are lines of op `k` in buffer `k % 3` like the first phase's, stored
//! in the kernel of op `k` like every store of the op (the ordering argument below holds
//! for them unchanged). (`device/tests/lamport_model.rs`
//! explores one-shot and two-shot ops mixed, sparse ones whose blocks are mostly empty
//! included.)
//!
//! # Memory ordering
//! - Payload and tag travel in one 16-byte store (`st.volatile.v4.u32`, relaxed at system
//!   scope) and are polled with one 16-byte load (`ld.volatile.v4.u32`): a complete line is
//!   complete data, no acquire is needed. Only 8-byte halves are assumed to land whole (as
//!   NCCL's LL assumes); the formats are chosen so that a half or a word still holding the
//!   sentinel or an old tag is detected (see [`line`]). On the host the words are stored
//!   first to last with release and loaded last to first with acquire (`crate::arch::host`).
//! - Lamport re-poisoning against the next writer: no fence in the kernel. Reader `r` stores
//!   the sentinel into a line of buffer `k % 3` during op `k - 3`; writer `s` stores its data
//!   for op `k` into that line. `s` does so only after finishing op `k - 1`, in which it polled
//!   a line `r` stored during op `k - 1` (the dependency every op provides). The chain is:
//!   `r`'s sentinel store (kernel of op `k - 3`), a kernel boundary of `r`'s stream, `r`'s
//!   line store (op `k - 1`), `s`'s relaxed poll that observes it (kernel of op `k - 1`), a
//!   kernel boundary of `s`'s stream, `s`'s data store (op `k`). Both ends of the observation
//!   lie in kernels other than the stores they order, so the two kernel boundaries are the
//!   two fences of the fence-to-fence pattern, through morally strong (volatile) accesses,
//!   and the sentinel is ordered before the data in the line's coherence order. A kernel
//!   boundary is as strong as that: a grid completes only once its memory operations are
//!   performed, which is what lets a later kernel on any SM, a copy engine or the host see
//!   them (CUDA's stream order; `griddepcontrol.wait` gives the same under programmatic
//!   dependent launch, see below), and a later kernel's stores are not issued before it
//!   starts. (Until 2026-12-07 every Lamport kernel also executed `fence.acq_rel` at entry
//!   for this ordering: about 950 cycles, 0.48 us per op on an H100, for nothing the kernel
//!   boundaries did not already give. The header lines follow the same argument, written
//!   by global thread 0 and re-poisoned by it.)
//! - Simple barriers: `fence.acq_rel.sys` + `st.release.sys.u64` arrive, `ld.acquire.sys.u64`
//!   wait, extended to the block by `bar.sync` (see [`barrier`]).
//! - Scope: system scope as written above; GPU scope (`fence.acq_rel.gpu`, `.gpu` release and
//!   acquire) when the host sets [`crate::abi::SYM_FLAG_ONE_DEVICE`] (every rank on this
//!   device: the threads that touch the lines are all on it, so the same arguments hold).
//! - Stream order under programmatic dependent launch ([`crate::abi::SYM_FLAG_EARLY_NEXT`]):
//!   every kernel here first executes `griddepcontrol.wait`, which returns once the previous
//!   kernel of the stream has completed and its memory operations are visible, the same
//!   guarantee an ordinary launch boundary gives; only then does it touch memory. So "kernels
//!   of one rank run in stream order" above holds for such launches too. The early trigger
//!   (`griddepcontrol.launch_dependents`) comes after that wait: at most the running op and
//!   the next, waiting one are resident per stream.
//! - Every wait polls the abort flag and a deadline (every [`crate::arch::SPINS_PER_CHECK`]
//!   spins on the GPU, every spin on the host) and records the first error of the rank in
//!   its `ErrorRecord`, naming the peer it waited for, the block and `seq` (as `epoch`).

pub mod barrier;
mod chunk;
mod ctx;
pub mod grouped;
pub mod line;
pub mod mailbox;
pub mod simple;
pub mod timeline;
pub mod two_shot;

pub use ctx::SymCtx;

use crate::abi::{
    sym_grouped_kernel_runs, sym_line_data, sym_ll_generation, sym_sum_kernel_runs, MAX_BLOCKS,
    SYM_FLAG_EARLY_NEXT, SYM_FLAG_LL_RESET,
};
use crate::abi::{
    SymArgs, SymInitArgs, SYM_KIND_ALL_GATHER, SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_KIND_ALL_REDUCE_TWO_SHOT,
    SYM_KIND_REDUCE_SCATTER, SYM_PROTO_LAMPORT, SYM_PROTO_LL, SYM_PROTO_SIMPLE,
};
use crate::arch;
use crate::exec::ExecCtx;
use crate::ops::{with_op, Elem, OpBody, Reduce, Sum};
use crate::prims::epoch;
use crate::prims::wait::error_code;
use line::{lamport_full, LamportFull, LamportSplit, LineProto, Ll, POISON};
use timeline::Mark;

/// The Simple kernels of element type `T` (every kind).
///
/// # Safety
/// `a` must describe valid windows (every rank's copy of `send`, `recv` mapped at the
/// described addresses, large enough for the kind and count) and a scratch area of the
/// Simple layout; every rank launches the same grid.
#[inline(always)]
pub unsafe fn sym_simple<T: Elem>(ctx: &ExecCtx, a: &SymArgs) {
    stream_order(a);
    let (at, failed) = enter(ctx, a, false);
    if !failed {
        sym_simple_at::<T>(ctx, &at);
    }
    seq_end(ctx, &at);
}

/// The body of [`sym_simple`], on the sequence number in effect.
#[inline(always)]
unsafe fn sym_simple_at<T: Elem>(ctx: &ExecCtx, a: &SymArgs) {
    let c = SymCtx::of(ctx, a);
    if !c.runs(SYM_PROTO_SIMPLE) {
        return;
    }
    if a.kind == SYM_KIND_ALL_GATHER {
        return simple::all_gather::<T>(&c);
    }
    struct Body<'a>(&'a SymCtx<'a>);
    impl<T: Elem> OpBody<T> for Body<'_> {
        #[inline(always)]
        unsafe fn run<O: Reduce<T>>(self, op: O) {
            simple::reduce_kind::<T, O>(self.0, &op)
        }
    }
    if !with_op::<T, _>(a.op, c.n, a.scalar, Body(&c)) {
        c.bad_arg(a.op as u64);
    }
}

/// The LL kernels of element type `T` (one-shot and two-shot all-reduce, all-gather,
/// reduce-scatter; kind and operator are run-time arguments).
///
/// # Safety
/// As [`sym_simple`], with a scratch area of the LL layout (`send` and `recv` are only
/// accessed in this rank's copy).
#[inline(always)]
pub unsafe fn sym_ll<T: Elem>(ctx: &ExecCtx, a: &SymArgs) {
    sym_mailbox::<T, false, false, false>(ctx, a)
}

/// The LL one-shot all-reduce with `Sum` alone ([`sym_sum_kernel_runs`]): what [`sym_ll`]
/// runs for these arguments, in a kernel of its own.
///
/// # Safety
/// As [`sym_ll`].
#[inline(always)]
pub unsafe fn sym_ll_sum<T: Elem>(ctx: &ExecCtx, a: &SymArgs) {
    sym_mailbox::<T, false, true, false>(ctx, a)
}

/// The Lamport kernels of element type `T` (one-shot and two-shot all-reduce, all-gather,
/// reduce-scatter; kind and operator are run-time arguments): 16 data bytes per line for
/// the float types, 8 for the others.
///
/// # Safety
/// As [`sym_ll`], with a scratch area of the Lamport layout, poisoned once by
/// [`sym_lamport_init`] before its first use.
#[inline(always)]
pub unsafe fn sym_lamport<T: Elem>(ctx: &ExecCtx, a: &SymArgs) {
    sym_mailbox::<T, true, false, false>(ctx, a)
}

/// The Lamport one-shot all-reduce with `Sum` alone ([`sym_sum_kernel_runs`]), in a kernel
/// of its own.
///
/// # Safety
/// As [`sym_lamport`].
#[inline(always)]
pub unsafe fn sym_lamport_sum<T: Elem>(ctx: &ExecCtx, a: &SymArgs) {
    sym_mailbox::<T, true, true, false>(ctx, a)
}

/// The grouped LL kernels ([`sym_grouped_kernel_runs`]: the one-shot all-reduce and the
/// reduce-scatter with `Sum`, and the all-gather, polling a line's peers [`grouped::GROUP`]
/// at a time).
///
/// # Safety
/// As [`sym_ll`].
#[inline(always)]
pub unsafe fn sym_ll_grouped<T: Elem>(ctx: &ExecCtx, a: &SymArgs) {
    sym_mailbox::<T, false, false, true>(ctx, a)
}

/// The grouped Lamport kernels (as [`sym_ll_grouped`]).
///
/// # Safety
/// As [`sym_lamport`].
#[inline(always)]
pub unsafe fn sym_lamport_grouped<T: Elem>(ctx: &ExecCtx, a: &SymArgs) {
    sym_mailbox::<T, true, false, true>(ctx, a)
}

/// An LL (`LAMPORT` false) or Lamport kernel; with `SUM_ONLY`, one that holds the one-shot
/// all-reduce with `Sum` alone. The common small all-reduce then runs a kernel about a
/// twelfth of the general one's size, with no run-time dispatch on kind and operator: on an
/// H100 its graph-replayed op is 0.2-0.3 us shorter on 1 and 2 ranks, and the phase
/// timeline ([`timeline`]) puts the gain in the argument checks and dispatch and in the
/// publish phase (`benches/results/2026-12-07-phases-h100.md`). With `GROUPED` (and not
/// `SUM_ONLY`), one that holds the launches of [`sym_grouped_kernel_runs`], polling a
/// line's peers a group at a time ([`grouped`]).
///
/// # Safety
/// As [`sym_ll`] / [`sym_lamport`].
#[inline(always)]
unsafe fn sym_mailbox<T: Elem, const LAMPORT: bool, const SUM_ONLY: bool, const GROUPED: bool>(
    ctx: &ExecCtx,
    a: &SymArgs,
) {
    let t0 = timeline::now();
    warm::<T, LAMPORT>(ctx, a);
    stream_order(a);
    let t1 = timeline::now();
    let first = if SUM_ONLY || (GROUPED && a.kind == SYM_KIND_ALL_REDUCE_ONE_SHOT) {
        first_chunk::<T, LAMPORT>(ctx, a)
    } else {
        None
    };
    let proto = if LAMPORT { SYM_PROTO_LAMPORT } else { SYM_PROTO_LL };
    let e = enter_load(ctx, a, !LAMPORT);
    // Everything the body derives from the arguments alone, and their checks, while the
    // entry loads are in flight: the barrier that follows waits for the error record, and
    // whatever the source places after it waits with it.
    let c = SymCtx::of(ctx, &e.at);
    let fault = match c.fault(proto) {
        None if SUM_ONLY && !sym_sum_kernel_runs(a.proto, a.kind, a.op) => {
            Some(((a.kind as u64) << 32) | a.op as u64)
        }
        None if GROUPED && !sym_grouped_kernel_runs(a.proto, a.kind, a.op, a.flags) => {
            Some(((a.kind as u64) << 32) | a.op as u64)
        }
        f => f,
    };
    let failed = enter_sync(ctx, &e, fault.is_some());
    let (gt, me) = (ctx.global_thread() as u64, a.scratch.rank);
    timeline::record(gt, me, Mark::Entry, t0);
    timeline::record(gt, me, Mark::Waited, t1);
    timeline::mark(gt, me, Mark::Entered);
    if !failed {
        sym_mailbox_at::<T, LAMPORT, SUM_ONLY, GROUPED>(&c, first);
    } else if let (Some(detail), 0) = (fault, e.err) {
        // Arguments the host should have rejected (and no earlier error to keep).
        c.bad_arg(detail);
    }
    seq_end(ctx, &e.at);
    timeline::end(gt, me, e.at.seq, a.count);
}

/// Under programmatic dependent launch ([`SYM_FLAG_EARLY_NEXT`]), before
/// `griddepcontrol.wait`, while the previous op of the stream may still run: read every word
/// of the arguments (so their constant-bank lines are fetched during the wait), and prefetch
/// into L2 the lines this thread touches first (the error record, its block's sequence slot,
/// its first input chunk, and its first line in its own mailbox and in the next peer's, in
/// buffer 0), so that their address translations and fills are done by the time the wait
/// returns. A prefetch reads nothing the kernel uses and orders nothing, so it is sound
/// before the wait; every address is checked to lie in its buffer first. Nothing for an
/// ordinary launch, whose wait returns at once.
///
/// # Safety
/// As [`sym_ll`].
#[inline(always)]
unsafe fn warm<T: Elem, const LAMPORT: bool>(ctx: &ExecCtx, a: &SymArgs) {
    if a.flags & SYM_FLAG_EARLY_NEXT == 0 {
        return;
    }
    // Every word of the arguments, read here: ptxas compiles the argument loads into
    // constant-bank operands read at their first use, and a first use of a bank line after
    // the wait paid its fetch inside the op (H100, 2 ranks, 8-256 B: 0.12-0.20 us less with
    // this; `benches/results/2026-12-07-header-h100.md`). `a.error` is the communicator's
    // error record, always allocated by the host.
    {
        let w = a as *const SymArgs as *const u64;
        let mut x = 0u64;
        let mut i = 0;
        while i < core::mem::size_of::<SymArgs>() / 8 {
            x ^= core::ptr::read(w.add(i));
            i += 1;
        }
        arch::need(x, a.error);
    }
    let proto = if LAMPORT { SYM_PROTO_LAMPORT } else { SYM_PROTO_LL };
    if a.error != 0 {
        arch::prefetch_l2(a.error);
    }
    if a.state != 0 {
        arch::prefetch_l2(a.state + (ctx.block as u64 % MAX_BLOCKS as u64) * 8);
    }
    let c = SymCtx::of(ctx, a);
    if c.fault(proto).is_some() {
        return;
    }
    let data = sym_line_data(proto, T::DTYPE);
    let gt = ctx.global_thread() as u64;
    let bytes = a.count.wrapping_mul(core::mem::size_of::<T>() as u64);
    if a.send.rank == c.me && gt.saturating_mul(data) < bytes {
        arch::prefetch_l2(ctx::peer_addr(&a.send, c.me, a.send_offset) + gt * data);
    }
    if c.n > 1 && gt < crate::abi::sym_header_line(a.slot_lines as u64) {
        let q = mailbox::rotated(&c, 1);
        arch::prefetch_l2(c.line_of(c.me, 0, q, gt) as u64);
        arch::prefetch_l2(c.line_of(q, 0, c.me, gt) as u64);
    }
}

/// The Sum kernels' first input load: this thread's first chunk of the one-shot
/// all-reduce's input (chunk `global thread`, the chunk [`mailbox::reduce_kind`] loads
/// first), loaded before [`enter`] so that its round trip overlaps the entry's instead of
/// following it (on an H100 a load that hits L2 takes about 700 cycles right after
/// `griddepcontrol.wait`). Reading the input needs only stream order, which
/// [`stream_order`] gave; nothing of the input depends on the sequence number. `None` when
/// this thread has no chunk, or when the send window is not this rank's own copy (an
/// argument error, left to the checks after `enter`). Any kind's input holds at least
/// `count` elements, so the load stays inside this rank's input whatever the kind.
///
/// # Safety
/// As [`sym_ll`].
#[inline(always)]
unsafe fn first_chunk<T: Elem, const LAMPORT: bool>(ctx: &ExecCtx, a: &SymArgs) -> Option<[u32; 4]> {
    let data = sym_line_data(if LAMPORT { SYM_PROTO_LAMPORT } else { SYM_PROTO_LL }, T::DTYPE);
    let gt = ctx.global_thread() as u64;
    let bytes = a.count.wrapping_mul(core::mem::size_of::<T>() as u64);
    if a.send.rank != a.scratch.rank || gt.saturating_mul(data) >= bytes {
        return None;
    }
    let send = ctx::peer_addr(&a.send, a.send.rank, a.send_offset);
    Some(chunk::load::<T>(data, send, gt, bytes))
}

/// The body of [`sym_mailbox`], on the sequence number in effect, its arguments checked
/// ([`SymCtx::fault`]; `first`: the chunk [`first_chunk`] loaded, if any).
#[inline(always)]
unsafe fn sym_mailbox_at<T: Elem, const LAMPORT: bool, const SUM_ONLY: bool, const GROUPED: bool>(
    c: &SymCtx,
    first: Option<[u32; 4]>,
) {
    let seq = c.a.seq;
    if LAMPORT {
        if lamport_full::<T>() {
            run_mailbox::<T, LamportFull<T>, SUM_ONLY, GROUPED>(c, LamportFull::of(seq), first);
        } else {
            run_mailbox::<T, LamportSplit, SUM_ONLY, GROUPED>(c, LamportSplit::of(seq), first);
        }
    } else if mailbox::ll_reset(c) {
        run_mailbox::<T, Ll, SUM_ONLY, GROUPED>(c, Ll::of(seq), first);
    }
}

/// Programmatic dependent launch ([`SYM_FLAG_EARLY_NEXT`]): wait until the previous kernel
/// of the stream has completed and its stores are visible (immediate for an ordinary
/// launch), then, when the host asked for it, let the next kernel of the stream be
/// scheduled. First thing in every symmetric kernel, before any memory access.
#[inline(always)]
fn stream_order(a: &SymArgs) {
    arch::grid_dependency_wait();
    if a.flags & SYM_FLAG_EARLY_NEXT != 0 {
        arch::launch_dependents();
    }
}

/// Entry of every symmetric kernel, after [`stream_order`]: the arguments the launch runs
/// with, and whether an error is recorded for this rank, decided once for the block (a
/// failed communicator does no more symmetric work: sticky, like NCCL's async error and the
/// classic kernels' `failed_before`; its mailboxes may hold lines of the failed op, since a
/// mismatch leaves lines nobody consumed, so running on would misread them).
///
/// [`enter_load`] then [`enter_sync`]; between the two a kernel may derive what it needs
/// from its arguments, so that this work overlaps the loads' round trip. Pair with
/// [`seq_end`]. Plain functions rather than a closure around the body: closures are not
/// always inlined into the kernel.
///
/// # Safety
/// As [`enter_load`].
#[inline(always)]
unsafe fn enter(ctx: &ExecCtx, a: &SymArgs, ll: bool) -> (SymArgs, bool) {
    let e = enter_load(ctx, a, ll);
    let failed = enter_sync(ctx, &e, false);
    (e.at, failed)
}

/// What [`enter_load`] loaded: the arguments the launch runs with, and this thread's load
/// of the error record's code word.
struct Entry {
    at: SymArgs,
    err: u32,
    /// LL launches with sequence slots: where to record the tag generation, and its value.
    generation: Option<(*mut u64, u64)>,
}

/// The loads of [`enter`], one round trip for all of them: the error record, and, when
/// `a.state` is set, the sequence number (and, with `ll`, the LL reset decision) from the
/// rank's sequence slots (`crate::prims::epoch`'s protocol, one step per launch), so that a
/// replayed launch runs as the next op. Nothing here waits for a value: the loads' results
/// are first tested by [`enter_sync`] (the error) and by the body (the sequence number).
///
/// # Safety
/// `a.error` is 0 or a valid record; `a.state` is 0 or this rank's
/// [`crate::abi::SYM_STATE_BYTES`] of zero-initialised slots, used by one stream's launches
/// only; called by every thread of the block, followed by [`enter_sync`].
#[inline(always)]
unsafe fn enter_load(ctx: &ExecCtx, a: &SymArgs, ll: bool) -> Entry {
    let err = error_code(a.error);
    let mut at = *a;
    let mut generation = None;
    if a.state != 0 {
        let slots = a.state as *mut u64;
        // LL resets follow the device's count; Lamport areas carry no LL tags.
        at.flags &= !SYM_FLAG_LL_RESET;
        if ll && a.proto == SYM_PROTO_LL {
            let gens = slots.wrapping_add(MAX_BLOCKS);
            let (seq, old) = epoch::peek_with_generation_at(ctx, slots, gens);
            let g = sym_ll_generation(seq);
            at.seq = seq;
            if old != g {
                at.flags |= SYM_FLAG_LL_RESET;
            }
            generation = Some((gens, g));
        } else {
            at.seq = epoch::peek_at(ctx, slots);
        }
    }
    Entry { at, err, generation }
}

/// The block barrier of [`enter`]: whether any thread of the block saw an error recorded,
/// or has `fault` (arguments it cannot run, decided from the arguments alone). The one
/// or-barrier is also the barrier of the slot protocol (every thread's slot load before
/// any thread's store of the next values: [`epoch::peek_at`]).
///
/// # Safety
/// As [`enter_load`], with what it returned.
#[inline(always)]
unsafe fn enter_sync(ctx: &ExecCtx, e: &Entry, fault: bool) -> bool {
    let failed = ctx.sync_threads_or(e.err != 0 || fault);
    if let Some((gens, g)) = e.generation {
        epoch::set_generation_at(ctx, gens, g);
    }
    failed
}

/// Advance the sequence slots past this launch (after [`enter`]'s arguments ran).
///
/// # Safety
/// As [`enter`].
#[inline(always)]
unsafe fn seq_end(ctx: &ExecCtx, at: &SymArgs) {
    if at.state != 0 {
        epoch::end_at(ctx, at.state as *mut u64, at.seq, 1);
    }
}

#[inline(always)]
unsafe fn run_mailbox<T: Elem, P: LineProto, const SUM_ONLY: bool, const GROUPED: bool>(
    c: &SymCtx,
    p: P,
    first: Option<[u32; 4]>,
) {
    let a = c.a;
    if SUM_ONLY {
        return mailbox::reduce_kind::<T, Sum, P, false>(c, &Sum, &p, false, first);
    }
    if GROUPED {
        // The kinds of `sym_grouped_kernel_runs`, checked at entry.
        return match a.kind {
            SYM_KIND_ALL_GATHER => mailbox::all_gather::<T, P, true>(c, &p),
            SYM_KIND_REDUCE_SCATTER => mailbox::reduce_kind::<T, Sum, P, true>(c, &Sum, &p, true, None),
            _ => mailbox::reduce_kind::<T, Sum, P, true>(c, &Sum, &p, false, first),
        };
    }
    match a.kind {
        SYM_KIND_ALL_GATHER => mailbox::all_gather::<T, P, false>(c, &p),
        SYM_KIND_ALL_REDUCE_ONE_SHOT | SYM_KIND_ALL_REDUCE_TWO_SHOT | SYM_KIND_REDUCE_SCATTER => {
            struct Body<'a, P>(&'a SymCtx<'a>, &'a P);
            impl<T: Elem, P: LineProto> OpBody<T> for Body<'_, P> {
                #[inline(always)]
                unsafe fn run<O: Reduce<T>>(self, op: O) {
                    if self.0.a.kind == SYM_KIND_ALL_REDUCE_TWO_SHOT {
                        two_shot::all_reduce::<T, O, P>(self.0, &op, self.1)
                    } else {
                        let rs = self.0.a.kind == SYM_KIND_REDUCE_SCATTER;
                        mailbox::reduce_kind::<T, O, P, false>(self.0, &op, self.1, rs, None)
                    }
                }
            }
            if !with_op::<T, _>(a.op, c.n, a.scalar, Body(c, &p)) {
                c.bad_arg(a.op as u64);
            }
        }
        k => c.bad_arg(k as u64),
    }
}

/// The Lamport init kernel: write the sentinel into every line of `a` (a rank's own copy
/// of a Lamport area's lines), spread over the grid.
///
/// # Safety
/// `a.base` must be valid for `a.lines` 16-byte aligned lines that no kernel uses now.
#[inline(always)]
pub unsafe fn sym_lamport_init(ctx: &ExecCtx, a: &SymInitArgs) {
    let gt = ctx.global_thread() as u64;
    let nt = ctx.global_threads() as u64;
    let mut i = gt;
    while i < a.lines {
        arch::store_v4_volatile((a.base + i * 16) as *mut [u32; 4], POISON);
        i += nt;
    }
    // The host waits for the kernel and then meets its peers; the fence makes the poison
    // visible at system scope before the kernel completes.
    arch::fence_acq_rel_sys();
}
