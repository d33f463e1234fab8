//! Operation epochs kept in device memory, so that a kernel replayed from a CUDA graph (the
//! same arguments every time) still gets a fresh epoch per operation.
//!
//! # Where
//! The epoch region of each rank's inbox ([`crate::prims::layout::epochs_offset`]), written
//! and read only by that rank's own kernels: `[MAX_BLOCKS]` u64 epoch bases, then
//! `[MAX_BLOCKS]` u64 LL flag generations (`crate::prims::ll`). Fresh inboxes are zeroed:
//! the first operation's base is 0, the host's first epoch.
//!
//! # Protocol (per block `b` of a launch)
//! - [`begin`]: every thread loads slot `b` (`ld.volatile`), then `bar.sync`: no thread of
//!   the block can see the value [`end`] stores later.
//! - the kernel body runs with that base as its epoch (barriers at `base + 1`, `base + 2`).
//! - [`end`]: thread 0 stores `base + 2` into slot `b`; the threads of block 0 also into every
//!   slot from `grid_dim` up (one slot per thread), which no block of this launch reads. So every launch advances
//!   all `MAX_BLOCKS` slots by 2 and the slots stay equal: every block of the next launch,
//!   whatever its grid, starts from the same base, and it is the host's epoch for that
//!   launch (`Comm::next_epoch` advances by 2 per launch too) unless graphs were replayed,
//!   in which case the device's count runs ahead of the host's and the host's only names
//!   operations in error messages.
//! - Ordering between launches is the stream's: a kernel starts after the previous one on the
//!   stream completed, and its stores are visible to the next kernel. Ranks agree on bases
//!   because every rank runs the same sequence of launches of its communicator.
//!
//! [`ll_reset`] uses the second array the same way: load, `bar.sync`, thread 0 stores the
//! current generation; the answer is whether it changed since this block's last LL launch.
//! Every rank runs the same LL launches with the same grids, so all ranks agree block by
//! block.

use crate::abi::{CommArgs, MAX_BLOCKS};
use crate::arch;
use crate::exec::ExecCtx;
use crate::prims::barrier::inbox_of;
use crate::prims::layout::epochs_offset;

/// Slot `i` of this rank's epoch region (`i < 2 * MAX_BLOCKS`).
///
/// # Safety
/// `comm.inboxes` must hold this rank's inbox address.
#[inline(always)]
unsafe fn slot(comm: &CommArgs, i: usize) -> *mut u64 {
    let base = inbox_of(comm, comm.rank).wrapping_add(epochs_offset(comm.nranks) as u64);
    (base as *mut u64).wrapping_add(i)
}

/// This block's epoch base for the launch (every thread of the block calls it first).
///
/// # Safety
/// As [`slot`]; called once per launch by every thread, paired with [`end`].
#[inline(always)]
pub unsafe fn begin(ctx: &ExecCtx, comm: &CommArgs) -> u64 {
    if comm.nranks == 0 {
        return 0;
    }
    begin_at(ctx, slot(comm, 0))
}

/// Advance the epoch slots past this launch by 2 (see the module doc).
///
/// # Safety
/// As [`begin`], with the base [`begin`] returned.
#[inline(always)]
pub unsafe fn end(ctx: &ExecCtx, comm: &CommArgs, base: u64) {
    if comm.nranks == 0 {
        return;
    }
    end_at(ctx, slot(comm, 0), base, 2)
}

/// Whether this block's LL lines must be cleared for `generation` (it changed since this
/// block's last LL launch); records it.
///
/// # Safety
/// As [`begin`]; called once per LL launch by every thread.
#[inline(always)]
pub unsafe fn ll_reset(ctx: &ExecCtx, comm: &CommArgs, generation: u64) -> bool {
    generation_changed_at(ctx, slot(comm, MAX_BLOCKS), generation)
}

/// [`begin`] on the slot array at `slots` (`MAX_BLOCKS` u64 of this rank's memory).
///
/// # Safety
/// `slots` must hold `MAX_BLOCKS` u64 that only this rank's launches of one stream use.
#[inline(always)]
pub unsafe fn begin_at(ctx: &ExecCtx, slots: *mut u64) -> u64 {
    let e = peek_at(ctx, slots);
    ctx.sync_threads();
    e
}

/// The load of [`begin_at`] without its `bar.sync`, for a kernel that has a block-wide
/// barrier of its own to execute next (`bar.red`, say): that barrier, which every thread of
/// the block must pass before any thread calls [`end_at`] or [`set_generation_at`], takes the
/// place of [`begin_at`]'s.
///
/// # Safety
/// As [`begin_at`].
#[inline(always)]
pub unsafe fn peek_at(ctx: &ExecCtx, slots: *mut u64) -> u64 {
    arch::load_volatile_u64(slots.wrapping_add(ctx.block as usize % MAX_BLOCKS))
}

/// [`end`] on the slot array at `slots`, advancing by `step`.
///
/// # Safety
/// As [`begin_at`], with the base it returned.
#[inline(always)]
pub unsafe fn end_at(ctx: &ExecCtx, slots: *mut u64, base: u64, step: u64) {
    let next = base.wrapping_add(step);
    if ctx.block == 0 {
        // The slots no block of this launch reads, spread over block 0's threads (one store
        // each rather than a loop of up to `MAX_BLOCKS - 1` stores in thread 0, which sat at
        // the end of every launch's critical path). No order is needed against any load of
        // this launch, so no barrier either.
        let mut j = ctx.grid_dim as usize + ctx.thread as usize;
        while j < MAX_BLOCKS {
            arch::store_volatile_u64(slots.wrapping_add(j), next);
            j += ctx.block_dim.max(1) as usize;
        }
    }
    if ctx.thread == 0 {
        arch::store_volatile_u64(slots.wrapping_add(ctx.block as usize % MAX_BLOCKS), next);
    }
}

/// [`ll_reset`] on the generation array at `gens` (`MAX_BLOCKS` u64 of this rank's memory).
///
/// # Safety
/// As [`begin_at`].
#[inline(always)]
pub unsafe fn generation_changed_at(ctx: &ExecCtx, gens: *mut u64, generation: u64) -> bool {
    let old = arch::load_volatile_u64(gens.wrapping_add(ctx.block as usize % MAX_BLOCKS));
    ctx.sync_threads();
    set_generation_at(ctx, gens, generation);
    old != generation
}

/// [`peek_at`] for a launch that needs [`generation_changed_at`]'s answer too: this block's
/// base and the generation of its last LL launch, loaded together (one round trip). Pair
/// with a block-wide barrier, then [`set_generation_at`] (the store of
/// [`generation_changed_at`]).
///
/// # Safety
/// As [`begin_at`] and [`generation_changed_at`] together.
#[inline(always)]
pub unsafe fn peek_with_generation_at(ctx: &ExecCtx, slots: *mut u64, gens: *mut u64) -> (u64, u64) {
    let b = ctx.block as usize % MAX_BLOCKS;
    (
        arch::load_volatile_u64(slots.wrapping_add(b)),
        arch::load_volatile_u64(gens.wrapping_add(b)),
    )
}

/// Thread 0 records `generation` as this block's last LL launch's (after the block-wide
/// barrier that follows [`peek_with_generation_at`]).
///
/// # Safety
/// As [`peek_with_generation_at`].
#[inline(always)]
pub unsafe fn set_generation_at(ctx: &ExecCtx, gens: *mut u64, generation: u64) {
    if ctx.thread == 0 {
        arch::store_volatile_u64(gens.wrapping_add(ctx.block as usize % MAX_BLOCKS), generation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Header;
    use crate::prims::layout::inbox_bytes;
    use std::vec;

    /// Launches of different grids (blocks as host threads, one thread each) keep every slot
    /// equal and advance it by 2 per launch; a replay with the same arguments gets a new base.
    #[test]
    fn every_launch_advances_every_slot_by_two() {
        let n = 3;
        let inbox = vec![0u64; inbox_bytes(n, 64) / 8];
        let table = [inbox.as_ptr() as u64, 0, 0, 0, 0, 0];
        let comm = CommArgs {
            header: Header::of::<CommArgs>(),
            rank: 0,
            nranks: n,
            inboxes: table.as_ptr() as u64,
            abort_flag: 0,
            error: 0,
            timeout_ns: 0,
        };
        let mut want = 0;
        for (launch, grid) in [4u32, 1, 64, 7, 7, 2].into_iter().enumerate() {
            let mut bases = [0u64; 64];
            for b in 0..grid {
                let ctx = ExecCtx::host_block(b, grid);
                // SAFETY: the table points at a live, zeroed inbox of `n` ranks.
                bases[b as usize] = unsafe { begin(&ctx, &comm) };
            }
            for b in 0..grid {
                let ctx = ExecCtx::host_block(b, grid);
                assert_eq!(bases[b as usize], want, "launch {launch} block {b}");
                // SAFETY: as above.
                unsafe { end(&ctx, &comm, bases[b as usize]) };
            }
            want += 2;
        }
        let off = epochs_offset(n) / 8;
        assert!(inbox[off..off + MAX_BLOCKS].iter().all(|&e| e == want));
    }

    #[test]
    fn ll_reset_once_per_generation_per_block() {
        let n = 2;
        let inbox = vec![0u64; inbox_bytes(n, 64) / 8];
        let table = [inbox.as_ptr() as u64, 0, 0, 0];
        let comm = CommArgs {
            header: Header::of::<CommArgs>(),
            rank: 0,
            nranks: n,
            inboxes: table.as_ptr() as u64,
            abort_flag: 0,
            error: 0,
            timeout_ns: 0,
        };
        let ctx = ExecCtx::host_block(1, 2);
        // SAFETY: a live, zeroed inbox of `n` ranks.
        unsafe {
            assert!(!ll_reset(&ctx, &comm, 0), "fresh memory is generation 0's");
            assert!(ll_reset(&ctx, &comm, 1));
            assert!(!ll_reset(&ctx, &comm, 1));
            assert!(!ll_reset(&ExecCtx::host_block(0, 2), &comm, 0));
        }
    }
}
