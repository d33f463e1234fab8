//! The LSA barrier of the symmetric kernels, on the barrier lines of the scratch area:
//! `[MAX_BLOCKS][nranks]` u64 epochs in every rank's copy, line `(b, s)` written only by
//! block `b` of rank `s`, then as many u64 fingerprints ([`crate::abi::sym_fingerprint`] of
//! the writer's op, stored before the epoch's release). The Simple kernels' entry barrier
//! compares them ([`sync_checked`]): ranks that called different ops stop there, before any
//! load or store of a peer's buffer, with a mismatch naming the peer.
//!
//! - [`arrive`]`(e)` by block `b` of rank `s`: `bar.sync` (the block's earlier loads and
//!   stores are done), then thread `t < nranks`: `fence.acq_rel.sys` and `st.release.sys.u64`
//!   of `e` into line `(b, s)` of rank `t`'s copy.
//! - [`wait`]`(e)`: thread `t < nranks` spins with `ld.acquire.sys.u64` on line `(b, t)` of
//!   its own copy until it reads `>= e` (rolling compare), then `bar.sync` with an
//!   or-reduction of the failures. After it, the block sees everything the peers' blocks
//!   did before they arrived (release/acquire at system scope, cumulative, extended to the
//!   block by `bar.sync`).
//!
//! When every rank runs on this device ([`crate::abi::SYM_FLAG_ONE_DEVICE`]) the fence, the
//! release store and the acquire poll are at GPU scope instead (`.gpu`): the same argument,
//! over the threads of one device, which are all the threads that touch the lines.
//!
//! Epochs come from the op's sequence number ([`crate::abi::sym_epochs`]: `2 seq + 1` at
//! entry, `2 seq + 2` at exit): they only grow, so a line never needs a reset, and an
//! arrival for a later op (a peer that overtook) satisfies a wait for an earlier one, which
//! is harmless because that peer passed this op's exit barrier, which needed our arrival.

use super::SymCtx;
use crate::abi::{ERR_MISMATCH, MAX_BLOCKS, SYM_MISMATCH_FLAG};
use crate::arch;
use crate::prims::wait::report_error;

/// Line `(block, src)` of the barrier lines in rank `q`'s copy of the area.
#[inline(always)]
fn line(c: &SymCtx, q: u32, block: u32, src: u32) -> *mut u64 {
    c.area_of(q, (block as u64 * c.n as u64 + src as u64) * 8) as *mut u64
}

/// Fingerprint line `(block, src)` in rank `q`'s copy: the array after the epoch lines.
#[inline(always)]
fn fp_line(c: &SymCtx, q: u32, block: u32, src: u32) -> *mut u64 {
    let epochs = MAX_BLOCKS as u64 * c.n as u64 * 8;
    c.area_of(q, epochs + (block as u64 * c.n as u64 + src as u64) * 8) as *mut u64
}

/// Arrive at `epoch`, announcing fingerprint `fp` (written before the epoch's release, so a
/// waiter that acquired the epoch reads the fingerprint of the same op or a later one).
///
/// # Safety
/// Called by every thread of the block; the area must be valid in every rank's copy.
#[inline(always)]
pub unsafe fn arrive(c: &SymCtx, epoch: u64, fp: u64) {
    c.ctx.sync_threads();
    let mut t = c.ctx.thread;
    while t < c.n {
        arch::store_volatile_u64(fp_line(c, t, c.ctx.block, c.me), fp);
        c.fence();
        let l = line(c, t, c.ctx.block, c.me);
        if c.gpu_scope {
            arch::store_release_gpu_u64(l, epoch);
        } else {
            arch::store_release_sys_u64(l, epoch);
        }
        t += c.ctx.block_dim;
    }
}

/// Wait until every rank's block arrived at `epoch`; `false` (in every thread of the block)
/// after recording the error when a wait was aborted or timed out, or when another block of
/// this rank recorded one meanwhile.
///
/// # Safety
/// Called by every thread of the block; the area must be valid in this rank's copy.
#[inline(always)]
pub unsafe fn wait(c: &SymCtx, epoch: u64) -> bool {
    wait_checked(c, epoch, None)
}

/// [`wait`]; with `Some(fp)`, also compare every peer's fingerprint with `fp` once its epoch
/// is acquired (a plain load ordered after the acquire) and record a mismatch naming it.
/// Only an arrival at `epoch` or `epoch + 1` (this op's entry or exit: the same call) is
/// compared; a peer already at a later op passed this op's exit barrier with a matching
/// call or was caught there by another block.
///
/// # Safety
/// As [`wait`].
#[inline(always)]
pub unsafe fn wait_checked(c: &SymCtx, epoch: u64, fp: Option<u64>) -> bool {
    let mut failed = false;
    let mut t = c.ctx.thread;
    while t < c.n {
        let l = line(c, c.me, c.ctx.block, t);
        match c
            .waiter
            .wait_geq_acquire_unless_recorded(l, epoch, c.gpu_scope, c.a.error)
        {
            Err(e) => {
                c.wait_failed(t, e);
                failed = true;
                break;
            }
            // Another block of this rank recorded the op's error (a mismatch): the peer's
            // block this one waits for may have started after its own rank failed, and
            // then it never arrives.
            Ok(None) => {
                failed = true;
                break;
            }
            Ok(Some(v)) => {
                if let Some(ours) = fp {
                    if t != c.me && v.wrapping_sub(epoch) < 2 {
                        let theirs = arch::load_volatile_u64(fp_line(c, c.me, c.ctx.block, t));
                        if theirs != ours {
                            let block = c.ctx.block | SYM_MISMATCH_FLAG;
                            report_error(c.a.error, ERR_MISMATCH, c.me, t, block, ours, theirs);
                            failed = true;
                            break;
                        }
                    }
                }
            }
        }
        t += c.ctx.block_dim;
    }
    !c.ctx.sync_threads_or(failed)
}

/// [`arrive`] then [`wait`] (no fingerprint check; the lines still get `fp`).
///
/// # Safety
/// As both.
#[inline(always)]
pub unsafe fn sync(c: &SymCtx, epoch: u64, fp: u64) -> bool {
    arrive(c, epoch, fp);
    wait(c, epoch)
}

/// [`arrive`] then [`wait_checked`] with `fp`: an entry barrier that also tells whether
/// every peer called the same op.
///
/// # Safety
/// As both.
#[inline(always)]
pub unsafe fn sync_checked(c: &SymCtx, epoch: u64, fp: u64) -> bool {
    arrive(c, epoch, fp);
    wait_checked(c, epoch, Some(fp))
}
