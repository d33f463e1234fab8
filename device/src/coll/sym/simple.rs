//! The Simple symmetric kernels: plain 16-byte loads and stores straight over the peers'
//! copies of the window buffers (the inner loop of [`crate::coll::reduce_copy`]: several
//! vectors in flight per thread, every source of a vector loaded before the first use),
//! between an entry and an exit barrier ([`super::barrier`]). Every rank must pass the same
//! windows and offsets (the peers' copies are reached at this rank's): the entry barrier
//! checks it ([`crate::abi::sym_placement`]) before any peer's memory is touched.
//!
//! - all-reduce one-shot: rank `r` loads every element from every rank's input, reduces and
//!   stores into its own output (`n` loads per output element, no remote stores). In place
//!   (input and output the same bytes of the same window, the same answer on every rank
//!   since windows and offsets are symmetric) it runs the two-shot instead: a one-shot rank
//!   would overwrite its input while peers still read it.
//! - all-reduce two-shot: rank `r` owns chunk `r` ([`two_shot_range`], whole vectors); it
//!   loads chunk `r` of every rank's input, reduces, and stores the result into chunk `r` of
//!   every rank's output: every payload byte is loaded once and stored once per rank it
//!   reaches, the fewest an all-reduce can move; safe in place (only rank `r` touches chunk
//!   `r`, and each element is read before it is written).
//! - all-gather (push): rank `r` stores its input into block `r` of every rank's output.
//! - reduce-scatter (pull-reduce): rank `r` loads block `r` of every rank's input, reduces,
//!   stores into its own output.

use super::barrier::{sync, sync_checked};
use super::SymCtx;
use crate::abi::{
    sym_epochs, sym_placement, SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_KIND_ALL_REDUCE_TWO_SHOT,
    SYM_KIND_REDUCE_SCATTER,
};
use crate::coll::all_reduce::two_shot_range;
use crate::coll::reduce_copy::{reduce_copy, Addrs};
use crate::ops::{Elem, Reduce, Sum};

/// The same byte `off` of every rank's copy of the input.
#[inline(always)]
fn all_send(c: &SymCtx, off: u64) -> Addrs {
    Addrs::window(c.send_of(0, off), c.a.send.stride, c.n)
}

/// The same byte `off` of every rank's copy of the output.
#[inline(always)]
fn all_recv(c: &SymCtx, off: u64) -> Addrs {
    Addrs::window(c.recv_of(0, off), c.a.recv.stride, c.n)
}

/// Entry barrier, the pass `reduce_copy(srcs -> dsts, [lo, hi))`, exit barrier. Plain code
/// rather than a closure: closures are not always inlined into the kernel, and an outlined
/// pass costs a call and a local stack frame.
#[inline(always)]
unsafe fn framed<T: Elem, O: Reduce<T>>(c: &SymCtx, op: &O, srcs: &Addrs, dsts: &Addrs, lo: u64, hi: u64) {
    let (entry, exit) = sym_epochs(c.a.seq);
    let a = c.a;
    // What the op is and where its buffers lie: a rank whose window or offsets differ is
    // caught here, before this pass touches any peer's copy (`sym_placement`).
    let fp = c.fingerprint() | sym_placement(a.send.serial, a.send_offset, a.recv.serial, a.recv_offset);
    if !sync_checked(c, entry, fp) {
        return;
    }
    reduce_copy::<T, O>(c.ctx, op, srcs, dsts, lo, hi);
    sync(c, exit, fp);
}

/// The all-reduces and the reduce-scatter with operator `O`.
///
/// # Safety
/// As [`super::sym_simple`].
#[inline(always)]
pub unsafe fn reduce_kind<T: Elem, O: Reduce<T>>(c: &SymCtx, op: &O) {
    let a = c.a;
    let size = core::mem::size_of::<T>() as u64;
    let in_place = a.send.local.wrapping_add(a.send_offset) == a.recv.local.wrapping_add(a.recv_offset);
    let (srcs, dsts, lo, hi) = match a.kind {
        SYM_KIND_ALL_REDUCE_ONE_SHOT if !in_place => {
            (all_send(c, 0), Addrs::one(c.recv_of(c.me, 0)), 0, a.count)
        }
        SYM_KIND_ALL_REDUCE_ONE_SHOT | SYM_KIND_ALL_REDUCE_TWO_SHOT => {
            let (lo, hi) = two_shot_range(a.count, c.n, c.me, size);
            (all_send(c, 0), all_recv(c, 0), lo, hi)
        }
        SYM_KIND_REDUCE_SCATTER => (
            all_send(c, c.me as u64 * a.count * size),
            Addrs::one(c.recv_of(c.me, 0)),
            0,
            a.count,
        ),
        k => return c.bad_arg(k as u64),
    };
    framed::<T, O>(c, op, &srcs, &dsts, lo, hi)
}

/// The all-gather (a byte copy whatever `T`).
///
/// # Safety
/// As [`super::sym_simple`].
#[inline(always)]
pub unsafe fn all_gather<T: Elem>(c: &SymCtx) {
    let bytes = c.a.count * core::mem::size_of::<T>() as u64;
    let src = Addrs::one(c.send_of(c.me, 0));
    let dsts = all_recv(c, c.me as u64 * bytes);
    framed::<u8, Sum>(c, &Sum, &src, &dsts, 0, bytes)
}
