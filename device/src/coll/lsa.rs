//! Kernel bodies of the broadcast, reduce, all-gather, reduce-scatter, all-to-all, gather,
//! scatter and all-gather-v, by load/store across ranks. Each collective's module plans the
//! data pass of this rank (sources, destinations, range); the bodies here frame it with the
//! barriers and run it through [`reduce_copy`], one instantiation per element type and
//! operator shared by the collectives (so the PTX grows by one loop per operator and type,
//! not per collective):
//! - [`copy_coll`]: broadcast, all-gather, all-to-all, gather, scatter and all-gather-v, a
//!   byte copy whatever the data type. The all-to-all (`nranks` copies, each of one block to
//!   one address) has a call site of its own: merged into the others' (whose plans carry up
//!   to `FAN` destinations), its loop raised the kernel from 64 to 94 registers.
//! - [`reduce_coll`]: reduce and reduce-scatter for element type `T`, the operator chosen at
//!   run time.

use crate::abi::{
    CollArgs, RedOp, COLL_ALL_GATHER, COLL_ALL_GATHER_V, COLL_ALL_TO_ALL, COLL_BROADCAST, COLL_GATHER,
    COLL_REDUCE, COLL_REDUCE_SCATTER, COLL_SCATTER,
};
use crate::coll::frame::{enter, exit, report_bad_arg};
use crate::coll::reduce_copy::{reduce_copy, reduce_copy_with};
use crate::coll::{all_gather, all_gather_v, all_to_all, broadcast, gather, reduce, reduce_scatter, scatter};
use crate::exec::ExecCtx;
use crate::ops::{Avg, Elem, Max, Min, PreMulSum, Prod, Sum};

/// Broadcast, all-gather, all-to-all, gather, scatter or all-gather-v (by `a.coll`).
///
/// # Safety
/// `a` must describe valid buffers on every rank (sizes as documented on [`CollArgs`]) and
/// a valid communicator; called by every thread of every block of the launch.
#[inline(always)]
pub unsafe fn copy_coll(ctx: &ExecCtx, a: &CollArgs) {
    copy_coll_with::<false>(ctx, a)
}

/// [`copy_coll`] with the cache policy of its fan-out stores chosen by `CS` (see
/// [`crate::coll::reduce_copy::reduce_copy_with`]): the kernels `oxccl_copy_coll` (`false`)
/// and `oxccl_copy_coll_cs` (`true`).
///
/// # Safety
/// As [`copy_coll`].
#[inline(always)]
pub unsafe fn copy_coll_with<const CS: bool>(ctx: &ExecCtx, a: &CollArgs) {
    let base = crate::prims::epoch::begin(ctx, &a.comm);
    let mut at = *a;
    at.epoch = base;
    copy_coll_at::<CS>(ctx, &at);
    crate::prims::epoch::end(ctx, &a.comm, base);
}

/// The body of [`copy_coll_with`], on the epoch base the device keeps (`crate::prims::epoch`).
#[inline(always)]
unsafe fn copy_coll_at<const CS: bool>(ctx: &ExecCtx, a: &CollArgs) {
    let Some(lines) = enter(ctx, a) else {
        return;
    };
    if a.coll == COLL_ALL_TO_ALL {
        // One copy per peer, each of one block to one address.
        let mut k = 0;
        while k < all_to_all::steps(a) {
            let (src, dst, lo, hi) = all_to_all::plan(a, lines, k);
            reduce_copy_with::<u8, Sum, CS>(ctx, &Sum, &src, &dst, lo, hi);
            k += 1;
        }
    } else {
        let plan = match a.coll {
            COLL_BROADCAST => Some(broadcast::plan(a, lines)),
            COLL_ALL_GATHER => Some(all_gather::plan(a, lines)),
            COLL_GATHER => Some(gather::plan(a, lines)),
            COLL_SCATTER => Some(scatter::plan(a, lines)),
            COLL_ALL_GATHER_V => Some(all_gather_v::plan(a, lines)),
            _ => None,
        };
        match plan {
            Some((srcs, dsts, lo, hi)) => reduce_copy_with::<u8, Sum, CS>(ctx, &Sum, &srcs, &dsts, lo, hi),
            None => report_bad_arg(ctx, a, a.coll),
        }
    }
    exit(ctx, a);
}

/// Reduce or reduce-scatter (by `a.coll`) of elements of type `T`.
///
/// # Safety
/// As [`copy_coll`].
#[inline(always)]
pub unsafe fn reduce_coll<T: Elem>(ctx: &ExecCtx, a: &CollArgs) {
    let base = crate::prims::epoch::begin(ctx, &a.comm);
    let mut at = *a;
    at.epoch = base;
    reduce_coll_at::<T>(ctx, &at);
    crate::prims::epoch::end(ctx, &a.comm, base);
}

/// The body of [`reduce_coll`], on the epoch base the device keeps (`crate::prims::epoch`).
#[inline(always)]
unsafe fn reduce_coll_at<T: Elem>(ctx: &ExecCtx, a: &CollArgs) {
    let Some(lines) = enter(ctx, a) else {
        return;
    };
    let plan = match a.coll {
        COLL_REDUCE => Some(reduce::plan::<T>(a, lines)),
        COLL_REDUCE_SCATTER => Some(reduce_scatter::plan::<T>(a, lines)),
        _ => None,
    };
    let Some((s, d, lo, hi)) = plan else {
        report_bad_arg(ctx, a, a.coll);
        exit(ctx, a);
        return;
    };
    let (s, d) = (&s, &d);
    match RedOp::from_u32(a.op) {
        Some(RedOp::Sum) => reduce_copy::<T, Sum>(ctx, &Sum, s, d, lo, hi),
        Some(RedOp::Prod) => reduce_copy::<T, Prod>(ctx, &Prod, s, d, lo, hi),
        Some(RedOp::Min) => reduce_copy::<T, Min>(ctx, &Min, s, d, lo, hi),
        Some(RedOp::Max) => reduce_copy::<T, Max>(ctx, &Max, s, d, lo, hi),
        Some(RedOp::Avg) => {
            let op = Avg {
                nranks: a.comm.nranks,
            };
            reduce_copy::<T, Avg>(ctx, &op, s, d, lo, hi)
        }
        Some(RedOp::PreMulSum) => {
            let op = PreMulSum {
                scalar: T::from_le_u64(a.scalar).to_acc(),
            };
            reduce_copy::<T, PreMulSum<T::Acc>>(ctx, &op, s, d, lo, hi)
        }
        None => report_bad_arg(ctx, a, a.op),
    }
    exit(ctx, a);
}
