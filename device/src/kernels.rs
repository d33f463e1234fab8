//! Kernel entry points: thin `extern "ptx-kernel"` wrappers on the GPU, and the same
//! dispatch as plain functions for the CPU backend.

use crate::abi::{
    sym_grouped_kernel_runs, sym_sum_kernel_runs, SymArgs, SymInitArgs, SYM_PROTO_LAMPORT, SYM_PROTO_LL,
    SYM_PROTO_SIMPLE,
};
use crate::abi::{
    AllReduceArgs, CollArgs, DataType, P2pArgs, ALGO_LL, COLL_ALL_GATHER, COLL_ALL_GATHER_V, COLL_ALL_TO_ALL,
    COLL_BROADCAST, COLL_GATHER, COLL_REDUCE, COLL_REDUCE_SCATTER, COLL_SCATTER,
};
use crate::coll::all_reduce::all_reduce;
use crate::coll::all_reduce_ll::all_reduce_ll;
#[cfg(target_arch = "nvptx64")]
use crate::coll::lsa::copy_coll_with;
use crate::coll::lsa::{copy_coll, reduce_coll};
use crate::coll::p2p::p2p;
use crate::coll::sym::{
    sym_lamport, sym_lamport_grouped, sym_lamport_init, sym_lamport_sum, sym_ll, sym_ll_grouped, sym_ll_sum,
    sym_simple,
};
use crate::exec::ExecCtx;
use crate::ops::{Bf16, F16, F8E4M3, F8E5M2};

/// PTX entry names of the all-reduce kernels, indexed by [`DataType`] value.
pub const ALL_REDUCE_KERNELS: [&str; 12] = [
    "oxccl_all_reduce_i8",
    "oxccl_all_reduce_u8",
    "oxccl_all_reduce_i32",
    "oxccl_all_reduce_u32",
    "oxccl_all_reduce_i64",
    "oxccl_all_reduce_u64",
    "oxccl_all_reduce_f16",
    "oxccl_all_reduce_f32",
    "oxccl_all_reduce_f64",
    "oxccl_all_reduce_bf16",
    "oxccl_all_reduce_f8e4m3",
    "oxccl_all_reduce_f8e5m2",
];

/// PTX entry names of the LL all-reduce kernels (`ALGO_LL`), indexed by [`DataType`] value.
pub const ALL_REDUCE_LL_KERNELS: [&str; 12] = [
    "oxccl_all_reduce_ll_i8",
    "oxccl_all_reduce_ll_u8",
    "oxccl_all_reduce_ll_i32",
    "oxccl_all_reduce_ll_u32",
    "oxccl_all_reduce_ll_i64",
    "oxccl_all_reduce_ll_u64",
    "oxccl_all_reduce_ll_f16",
    "oxccl_all_reduce_ll_f32",
    "oxccl_all_reduce_ll_f64",
    "oxccl_all_reduce_ll_bf16",
    "oxccl_all_reduce_ll_f8e4m3",
    "oxccl_all_reduce_ll_f8e5m2",
];

/// PTX entry name of the broadcast, all-gather, all-to-all, gather, scatter and
/// all-gather-v kernel (a byte copy, any data type).
pub const COPY_COLL_KERNEL: &str = "oxccl_copy_coll";

/// [`COPY_COLL_KERNEL`] with streaming (`st.global.cs`) fan-out stores
/// (`OXCCL_COPY_STORES=cs`).
pub const COPY_COLL_CS_KERNEL: &str = "oxccl_copy_coll_cs";

/// PTX entry names of the reduce and reduce-scatter kernels, indexed by [`DataType`] value.
pub const REDUCE_COLL_KERNELS: [&str; 12] = [
    "oxccl_reduce_coll_i8",
    "oxccl_reduce_coll_u8",
    "oxccl_reduce_coll_i32",
    "oxccl_reduce_coll_u32",
    "oxccl_reduce_coll_i64",
    "oxccl_reduce_coll_u64",
    "oxccl_reduce_coll_f16",
    "oxccl_reduce_coll_f32",
    "oxccl_reduce_coll_f64",
    "oxccl_reduce_coll_bf16",
    "oxccl_reduce_coll_f8e4m3",
    "oxccl_reduce_coll_f8e5m2",
];

/// PTX entry name of the kernel that does nothing (the floor of launch-time measurements).
pub const EMPTY_KERNEL: &str = "oxccl_empty";

/// PTX entry name of the send/recv kernel (one group launch of one rank, any data type).
pub const P2P_KERNEL: &str = "oxccl_p2p";

macro_rules! dtype_names {
    ($prefix:literal) => {
        [
            concat!($prefix, "i8"),
            concat!($prefix, "u8"),
            concat!($prefix, "i32"),
            concat!($prefix, "u32"),
            concat!($prefix, "i64"),
            concat!($prefix, "u64"),
            concat!($prefix, "f16"),
            concat!($prefix, "f32"),
            concat!($prefix, "f64"),
            concat!($prefix, "bf16"),
            concat!($prefix, "f8e4m3"),
            concat!($prefix, "f8e5m2"),
        ]
    };
}

/// PTX entry names of the Simple symmetric kernels (`SymArgs`, every `SYM_KIND_*`), indexed
/// by [`DataType`] value.
pub const SYM_SIMPLE_KERNELS: [&str; 12] = dtype_names!("oxccl_sym_simple_");

/// PTX entry names of the LL symmetric kernels (every `SYM_KIND_*`), indexed by
/// [`DataType`] value.
pub const SYM_LL_KERNELS: [&str; 12] = dtype_names!("oxccl_sym_ll_");

/// PTX entry names of the Lamport symmetric kernels (every `SYM_KIND_*`), indexed by
/// [`DataType`] value.
pub const SYM_LAMPORT_KERNELS: [&str; 12] = dtype_names!("oxccl_sym_lamport_");

/// PTX entry names of the LL kernels that hold the one-shot all-reduce with `Sum` alone
/// ([`crate::abi::sym_sum_kernel_runs`]), indexed by [`DataType`] value.
pub const SYM_LL_SUM_KERNELS: [&str; 12] = dtype_names!("oxccl_sym_ll_sum_");

/// PTX entry names of the Lamport kernels that hold the one-shot all-reduce with `Sum`
/// alone, indexed by [`DataType`] value.
pub const SYM_LAMPORT_SUM_KERNELS: [&str; 12] = dtype_names!("oxccl_sym_lamport_sum_");

/// PTX entry names of the grouped LL kernels ([`crate::abi::sym_grouped_kernel_runs`]),
/// indexed by [`DataType`] value.
pub const SYM_LL_GROUPED_KERNELS: [&str; 12] = dtype_names!("oxccl_sym_ll_grouped_");

/// PTX entry names of the grouped Lamport kernels, indexed by [`DataType`] value.
pub const SYM_LAMPORT_GROUPED_KERNELS: [&str; 12] = dtype_names!("oxccl_sym_lamport_grouped_");

/// PTX entry name of the kernel that poisons a Lamport scratch area once (`SymInitArgs`).
pub const SYM_LAMPORT_INIT_KERNEL: &str = "oxccl_sym_lamport_init";

/// PTX entry name of the symmetric kernel for protocol `proto` (`SYM_PROTO_*`) and `dtype`
/// (the general one: every kind and operator).
pub fn sym_kernel_name(proto: u32, dtype: DataType) -> Option<&'static str> {
    let table = match proto {
        SYM_PROTO_SIMPLE => &SYM_SIMPLE_KERNELS,
        SYM_PROTO_LL => &SYM_LL_KERNELS,
        SYM_PROTO_LAMPORT => &SYM_LAMPORT_KERNELS,
        _ => return None,
    };
    Some(table[dtype as usize])
}

/// PTX entry name of the one-shot `Sum` all-reduce kernel of protocol `proto` (LL or
/// Lamport) and `dtype`.
pub fn sym_sum_kernel_name(proto: u32, dtype: DataType) -> Option<&'static str> {
    let table = match proto {
        SYM_PROTO_LL => &SYM_LL_SUM_KERNELS,
        SYM_PROTO_LAMPORT => &SYM_LAMPORT_SUM_KERNELS,
        _ => return None,
    };
    Some(table[dtype as usize])
}

/// PTX entry name of the grouped kernel of protocol `proto` (LL or Lamport) and `dtype`.
pub fn sym_grouped_kernel_name(proto: u32, dtype: DataType) -> Option<&'static str> {
    let table = match proto {
        SYM_PROTO_LL => &SYM_LL_GROUPED_KERNELS,
        SYM_PROTO_LAMPORT => &SYM_LAMPORT_GROUPED_KERNELS,
        _ => return None,
    };
    Some(table[dtype as usize])
}

/// Calls one (kernel body, data type) instance for the CPU backend's dispatchers, out of line.
///
/// The kernel bodies are `#[inline(always)]` (on the GPU each entry point is one function).
/// A dispatcher that called them directly would inline every instance into itself: for the
/// symmetric kernels one host function of over three million LLVM instructions, which took
/// LLVM more than twenty minutes to optimize at the test profile's `opt-level = 1`. Called
/// through a function pointer the optimizer cannot see through, each instance is compiled
/// as a function of its own. (Host only: the GPU entry points call the bodies directly.)
#[inline(always)]
unsafe fn out_of_line<A>(body: unsafe fn(&ExecCtx, &A), ctx: &ExecCtx, args: &A) {
    core::hint::black_box(body)(ctx, args)
}

/// `out_of_line($body::<T>, $ctx, $args)` for the element type `T` of `$dt` (an
/// `Option<DataType>`), `$none` when it is `None`: the CPU backend's dispatch by data type.
macro_rules! out_of_line_by_dtype {
    ($dt:expr, $body:ident, $ctx:expr, $args:expr, $none:expr) => {
        match $dt {
            Some(DataType::I8) => out_of_line($body::<i8>, $ctx, $args),
            Some(DataType::U8) => out_of_line($body::<u8>, $ctx, $args),
            Some(DataType::I32) => out_of_line($body::<i32>, $ctx, $args),
            Some(DataType::U32) => out_of_line($body::<u32>, $ctx, $args),
            Some(DataType::I64) => out_of_line($body::<i64>, $ctx, $args),
            Some(DataType::U64) => out_of_line($body::<u64>, $ctx, $args),
            Some(DataType::F16) => out_of_line($body::<F16>, $ctx, $args),
            Some(DataType::F32) => out_of_line($body::<f32>, $ctx, $args),
            Some(DataType::F64) => out_of_line($body::<f64>, $ctx, $args),
            Some(DataType::Bf16) => out_of_line($body::<Bf16>, $ctx, $args),
            Some(DataType::F8E4M3) => out_of_line($body::<F8E4M3>, $ctx, $args),
            Some(DataType::F8E5M2) => out_of_line($body::<F8E5M2>, $ctx, $args),
            None => $none,
        }
    };
}

/// Runs the symmetric kernel body of `args.proto` and `args.dtype` (the CPU backend's entry
/// point): the grouped kernels' where [`sym_grouped_kernel_runs`], else the one-shot `Sum`
/// all-reduce's own where [`sym_sum_kernel_runs`], as on the GPU; an unknown protocol or
/// data type is recorded as an argument error.
///
/// # Safety
/// As [`sym_simple`] / [`sym_ll`] / [`sym_lamport`]; `ctx` must be one block of the grid
/// every rank launched.
pub unsafe fn sym_dispatch(ctx: &ExecCtx, args: &SymArgs) {
    let dt = DataType::from_u32(args.dtype);
    // The kernel the GPU backend launches for these arguments.
    if sym_grouped_kernel_runs(args.proto, args.kind, args.op, args.flags) {
        return match args.proto {
            SYM_PROTO_LL => out_of_line_by_dtype!(dt, sym_ll_grouped, ctx, args, sym_bad_dtype(ctx, args)),
            _ => out_of_line_by_dtype!(dt, sym_lamport_grouped, ctx, args, sym_bad_dtype(ctx, args)),
        };
    }
    if sym_sum_kernel_runs(args.proto, args.kind, args.op) {
        return match args.proto {
            SYM_PROTO_LL => out_of_line_by_dtype!(dt, sym_ll_sum, ctx, args, sym_bad_dtype(ctx, args)),
            _ => out_of_line_by_dtype!(dt, sym_lamport_sum, ctx, args, sym_bad_dtype(ctx, args)),
        };
    }
    match args.proto {
        SYM_PROTO_SIMPLE => out_of_line_by_dtype!(dt, sym_simple, ctx, args, sym_bad_dtype(ctx, args)),
        SYM_PROTO_LL => out_of_line_by_dtype!(dt, sym_ll, ctx, args, sym_bad_dtype(ctx, args)),
        SYM_PROTO_LAMPORT => out_of_line_by_dtype!(dt, sym_lamport, ctx, args, sym_bad_dtype(ctx, args)),
        _ => sym_bad_dtype(ctx, args),
    }
}

/// Record an unknown data type or protocol.
unsafe fn sym_bad_dtype(ctx: &ExecCtx, args: &SymArgs) {
    if ctx.thread == 0 {
        crate::prims::wait::report_error(
            args.error,
            crate::abi::ERR_MISMATCH,
            args.scratch.rank,
            u32::MAX,
            ctx.block,
            args.seq,
            ((args.proto as u64) << 32) | args.dtype as u64,
        );
    }
}

/// Runs the Lamport init kernel body (the CPU backend's entry point).
///
/// # Safety
/// As [`sym_lamport_init`].
pub unsafe fn sym_lamport_init_dispatch(ctx: &ExecCtx, args: &SymInitArgs) {
    sym_lamport_init(ctx, args)
}

/// The symmetric kernels (every family, every data type; the init kernel is not hot).
pub const SYM_KERNELS: [&str; 84] = {
    let mut all = [""; 84];
    let mut i = 0;
    while i < 12 {
        all[i] = SYM_SIMPLE_KERNELS[i];
        all[12 + i] = SYM_LL_KERNELS[i];
        all[24 + i] = SYM_LAMPORT_KERNELS[i];
        all[36 + i] = SYM_LL_SUM_KERNELS[i];
        all[48 + i] = SYM_LAMPORT_SUM_KERNELS[i];
        all[60 + i] = SYM_LL_GROUPED_KERNELS[i];
        all[72 + i] = SYM_LAMPORT_GROUPED_KERNELS[i];
        i += 1;
    }
    all
};

/// Kernels whose spills fail the build (checked by `oxccl-builder` with ptxas): every
/// kernel above but the Lamport init.
pub const HOT_KERNELS: &[&str] = &{
    let mut all = [""; 38 + 84 + 1];
    let mut i = 0;
    while i < 12 {
        all[i] = ALL_REDUCE_KERNELS[i];
        all[12 + i] = REDUCE_COLL_KERNELS[i];
        all[26 + i] = ALL_REDUCE_LL_KERNELS[i];
        i += 1;
    }
    let mut j = 0;
    while j < 84 {
        all[38 + j] = SYM_KERNELS[j];
        j += 1;
    }
    all[24] = COPY_COLL_KERNEL;
    all[25] = P2P_KERNEL;
    all[38 + 84] = COPY_COLL_CS_KERNEL;
    all
};

/// Threads per block the all-reduce kernels are launched with on the GPU.
pub const ALL_REDUCE_BLOCK_THREADS: u32 = 256;

/// PTX entry name of the all-reduce kernel for `dtype`.
pub fn all_reduce_kernel_name(dtype: DataType) -> &'static str {
    ALL_REDUCE_KERNELS[dtype as usize]
}

/// PTX entry name of the LL all-reduce kernel for `dtype`.
pub fn all_reduce_ll_kernel_name(dtype: DataType) -> &'static str {
    ALL_REDUCE_LL_KERNELS[dtype as usize]
}

/// Which kernel runs a [`CollArgs`] collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollKernel {
    /// Broadcast, all-gather, all-to-all, gather, scatter and all-gather-v:
    /// [`COPY_COLL_KERNEL`].
    Copy,
    /// The same collectives with streaming fan-out stores: [`COPY_COLL_CS_KERNEL`] (the host
    /// launches it in place of [`CollKernel::Copy`] when asked to; the CPU backend runs the
    /// same body, where the cache policy means nothing).
    CopyCs,
    /// Reduce and reduce-scatter of one data type: [`REDUCE_COLL_KERNELS`].
    Reduce(DataType),
}

impl CollKernel {
    /// The kernel for collective `coll` (a `COLL_*` id other than the all-reduce) on `dtype`.
    pub fn of(coll: u32, dtype: DataType) -> Option<Self> {
        match coll {
            COLL_BROADCAST | COLL_ALL_GATHER | COLL_ALL_TO_ALL | COLL_GATHER | COLL_SCATTER
            | COLL_ALL_GATHER_V => Some(CollKernel::Copy),
            COLL_REDUCE | COLL_REDUCE_SCATTER => Some(CollKernel::Reduce(dtype)),
            _ => None,
        }
    }

    /// The PTX entry name.
    pub fn name(self) -> &'static str {
        match self {
            CollKernel::Copy => COPY_COLL_KERNEL,
            CollKernel::CopyCs => COPY_COLL_CS_KERNEL,
            CollKernel::Reduce(dt) => REDUCE_COLL_KERNELS[dt as usize],
        }
    }

    /// Every kernel of this kind.
    pub fn all() -> impl Iterator<Item = CollKernel> {
        [CollKernel::Copy, CollKernel::CopyCs]
            .into_iter()
            .chain(DataType::ALL.into_iter().map(CollKernel::Reduce))
    }
}

/// Runs the all-reduce kernel body for `args.dtype` (the CPU backend's entry point): the LL
/// kernel's when `args.algo` is `ALGO_LL`, else the load/store kernel's.
///
/// # Safety
/// As [`all_reduce`] (or [`all_reduce_ll`]); `ctx` must be one block of the grid every rank
/// launched.
pub unsafe fn all_reduce_dispatch(ctx: &ExecCtx, args: &AllReduceArgs) {
    if args.algo == ALGO_LL {
        return all_reduce_ll_dispatch(ctx, args);
    }
    out_of_line_by_dtype!(DataType::from_u32(args.dtype), all_reduce, ctx, args, {})
}

/// Runs the LL all-reduce kernel body for `args.dtype`.
///
/// # Safety
/// As [`all_reduce_ll`]; `ctx` must be one block of the grid every rank launched.
pub unsafe fn all_reduce_ll_dispatch(ctx: &ExecCtx, args: &AllReduceArgs) {
    out_of_line_by_dtype!(DataType::from_u32(args.dtype), all_reduce_ll, ctx, args, {})
}

/// Runs the kernel body of a [`CollArgs`] collective (the CPU backend's entry point): the
/// copy kernel's for the data-movement collectives, the reduce kernel's of `args.dtype` for
/// reduce and reduce-scatter.
///
/// # Safety
/// As [`copy_coll`]; `ctx` must be one block of the grid every rank launched.
pub unsafe fn coll_dispatch(ctx: &ExecCtx, args: &CollArgs) {
    let Some(dt) = DataType::from_u32(args.dtype) else {
        return;
    };
    match CollKernel::of(args.coll, dt) {
        Some(CollKernel::Copy | CollKernel::CopyCs) => out_of_line(copy_coll, ctx, args),
        Some(CollKernel::Reduce(t)) => out_of_line_by_dtype!(Some(t), reduce_coll, ctx, args, {}),
        None => {}
    }
}

/// Runs the p2p kernel body (the CPU backend's entry point).
///
/// # Safety
/// As [`p2p`]; `ctx` must be one block of the launch's grid.
pub unsafe fn p2p_dispatch(ctx: &ExecCtx, args: &P2pArgs) {
    p2p(ctx, args)
}

#[cfg(target_arch = "nvptx64")]
mod gpu {
    use super::*;

    macro_rules! all_reduce_kernel {
        ($name:ident, $t:ty) => {
            /// All-reduce kernel entry (one per data type; the operator is a run-time
            /// argument, each operator's loop monomorphized inside).
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $name(args: AllReduceArgs) {
                all_reduce::<$t>(&ExecCtx::current(), &args)
            }
        };
    }
    all_reduce_kernel!(oxccl_all_reduce_i8, i8);
    all_reduce_kernel!(oxccl_all_reduce_u8, u8);
    all_reduce_kernel!(oxccl_all_reduce_i32, i32);
    all_reduce_kernel!(oxccl_all_reduce_u32, u32);
    all_reduce_kernel!(oxccl_all_reduce_i64, i64);
    all_reduce_kernel!(oxccl_all_reduce_u64, u64);
    all_reduce_kernel!(oxccl_all_reduce_f16, F16);
    all_reduce_kernel!(oxccl_all_reduce_f32, f32);
    all_reduce_kernel!(oxccl_all_reduce_f64, f64);
    all_reduce_kernel!(oxccl_all_reduce_bf16, Bf16);
    all_reduce_kernel!(oxccl_all_reduce_f8e4m3, F8E4M3);
    all_reduce_kernel!(oxccl_all_reduce_f8e5m2, F8E5M2);

    macro_rules! all_reduce_ll_kernel {
        ($name:ident, $t:ty) => {
            /// LL all-reduce kernel entry (one per data type; the operator is a run-time
            /// argument).
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $name(args: AllReduceArgs) {
                all_reduce_ll::<$t>(&ExecCtx::current(), &args)
            }
        };
    }
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_i8, i8);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_u8, u8);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_i32, i32);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_u32, u32);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_i64, i64);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_u64, u64);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_f16, F16);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_f32, f32);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_f64, f64);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_bf16, Bf16);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_f8e4m3, F8E4M3);
    all_reduce_ll_kernel!(oxccl_all_reduce_ll_f8e5m2, F8E5M2);

    /// Broadcast, all-gather, all-to-all, gather, scatter and all-gather-v kernel entry (a
    /// byte copy; the collective is a run-time argument).
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn oxccl_copy_coll(args: CollArgs) {
        copy_coll(&ExecCtx::current(), &args)
    }

    /// [`oxccl_copy_coll`] with streaming (`st.global.cs`) fan-out stores.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn oxccl_copy_coll_cs(args: CollArgs) {
        copy_coll_with::<true>(&ExecCtx::current(), &args)
    }

    /// A kernel that does nothing: the host launches it in place of every kernel of an
    /// operation to measure the launch (or graph replay) floor with the same kernels per
    /// operation and the same streams (the parameters the driver passes are not read).
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn oxccl_empty() {}

    /// Send/recv kernel entry: this rank's operations of one group launch.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn oxccl_p2p(args: P2pArgs) {
        p2p(&ExecCtx::current(), &args)
    }

    macro_rules! reduce_coll_kernel {
        ($name:ident, $t:ty) => {
            /// Reduce and reduce-scatter kernel entry (one per data type; the collective
            /// and the operator are run-time arguments).
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $name(args: CollArgs) {
                reduce_coll::<$t>(&ExecCtx::current(), &args)
            }
        };
    }
    reduce_coll_kernel!(oxccl_reduce_coll_i8, i8);
    reduce_coll_kernel!(oxccl_reduce_coll_u8, u8);
    reduce_coll_kernel!(oxccl_reduce_coll_i32, i32);
    reduce_coll_kernel!(oxccl_reduce_coll_u32, u32);
    reduce_coll_kernel!(oxccl_reduce_coll_i64, i64);
    reduce_coll_kernel!(oxccl_reduce_coll_u64, u64);
    reduce_coll_kernel!(oxccl_reduce_coll_f16, F16);
    reduce_coll_kernel!(oxccl_reduce_coll_f32, f32);
    reduce_coll_kernel!(oxccl_reduce_coll_f64, f64);
    reduce_coll_kernel!(oxccl_reduce_coll_bf16, Bf16);
    reduce_coll_kernel!(oxccl_reduce_coll_f8e4m3, F8E4M3);
    reduce_coll_kernel!(oxccl_reduce_coll_f8e5m2, F8E5M2);

    macro_rules! sym_kernels {
        ($($simple:ident, $ll:ident, $lamport:ident, $ll_sum:ident, $lamport_sum:ident, $t:ty;)*) => {$(
            /// Simple symmetric kernel entry (kind and operator are run-time arguments).
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $simple(args: SymArgs) {
                sym_simple::<$t>(&ExecCtx::current(), &args)
            }
            /// LL symmetric kernel entry (kind and operator are run-time arguments).
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $ll(args: SymArgs) {
                sym_ll::<$t>(&ExecCtx::current(), &args)
            }
            /// Lamport symmetric kernel entry (kind and operator are run-time arguments).
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $lamport(args: SymArgs) {
                sym_lamport::<$t>(&ExecCtx::current(), &args)
            }
            /// LL one-shot `Sum` all-reduce entry.
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $ll_sum(args: SymArgs) {
                sym_ll_sum::<$t>(&ExecCtx::current(), &args)
            }
            /// Lamport one-shot `Sum` all-reduce entry.
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $lamport_sum(args: SymArgs) {
                sym_lamport_sum::<$t>(&ExecCtx::current(), &args)
            }
        )*};
    }
    sym_kernels! {
        oxccl_sym_simple_i8, oxccl_sym_ll_i8, oxccl_sym_lamport_i8, oxccl_sym_ll_sum_i8, oxccl_sym_lamport_sum_i8, i8;
        oxccl_sym_simple_u8, oxccl_sym_ll_u8, oxccl_sym_lamport_u8, oxccl_sym_ll_sum_u8, oxccl_sym_lamport_sum_u8, u8;
        oxccl_sym_simple_i32, oxccl_sym_ll_i32, oxccl_sym_lamport_i32, oxccl_sym_ll_sum_i32, oxccl_sym_lamport_sum_i32, i32;
        oxccl_sym_simple_u32, oxccl_sym_ll_u32, oxccl_sym_lamport_u32, oxccl_sym_ll_sum_u32, oxccl_sym_lamport_sum_u32, u32;
        oxccl_sym_simple_i64, oxccl_sym_ll_i64, oxccl_sym_lamport_i64, oxccl_sym_ll_sum_i64, oxccl_sym_lamport_sum_i64, i64;
        oxccl_sym_simple_u64, oxccl_sym_ll_u64, oxccl_sym_lamport_u64, oxccl_sym_ll_sum_u64, oxccl_sym_lamport_sum_u64, u64;
        oxccl_sym_simple_f16, oxccl_sym_ll_f16, oxccl_sym_lamport_f16, oxccl_sym_ll_sum_f16, oxccl_sym_lamport_sum_f16, F16;
        oxccl_sym_simple_f32, oxccl_sym_ll_f32, oxccl_sym_lamport_f32, oxccl_sym_ll_sum_f32, oxccl_sym_lamport_sum_f32, f32;
        oxccl_sym_simple_f64, oxccl_sym_ll_f64, oxccl_sym_lamport_f64, oxccl_sym_ll_sum_f64, oxccl_sym_lamport_sum_f64, f64;
        oxccl_sym_simple_bf16, oxccl_sym_ll_bf16, oxccl_sym_lamport_bf16, oxccl_sym_ll_sum_bf16, oxccl_sym_lamport_sum_bf16, Bf16;
        oxccl_sym_simple_f8e4m3, oxccl_sym_ll_f8e4m3, oxccl_sym_lamport_f8e4m3, oxccl_sym_ll_sum_f8e4m3, oxccl_sym_lamport_sum_f8e4m3, F8E4M3;
        oxccl_sym_simple_f8e5m2, oxccl_sym_ll_f8e5m2, oxccl_sym_lamport_f8e5m2, oxccl_sym_ll_sum_f8e5m2, oxccl_sym_lamport_sum_f8e5m2, F8E5M2;
    }

    macro_rules! sym_grouped_kernels {
        ($($ll:ident, $lamport:ident, $t:ty;)*) => {$(
            /// Grouped LL kernel entry (one-shot all-reduce and reduce-scatter with `Sum`,
            /// all-gather; the kind is a run-time argument).
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $ll(args: SymArgs) {
                sym_ll_grouped::<$t>(&ExecCtx::current(), &args)
            }
            /// Grouped Lamport kernel entry (as the grouped LL one).
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $lamport(args: SymArgs) {
                sym_lamport_grouped::<$t>(&ExecCtx::current(), &args)
            }
        )*};
    }
    sym_grouped_kernels! {
        oxccl_sym_ll_grouped_i8, oxccl_sym_lamport_grouped_i8, i8;
        oxccl_sym_ll_grouped_u8, oxccl_sym_lamport_grouped_u8, u8;
        oxccl_sym_ll_grouped_i32, oxccl_sym_lamport_grouped_i32, i32;
        oxccl_sym_ll_grouped_u32, oxccl_sym_lamport_grouped_u32, u32;
        oxccl_sym_ll_grouped_i64, oxccl_sym_lamport_grouped_i64, i64;
        oxccl_sym_ll_grouped_u64, oxccl_sym_lamport_grouped_u64, u64;
        oxccl_sym_ll_grouped_f16, oxccl_sym_lamport_grouped_f16, F16;
        oxccl_sym_ll_grouped_f32, oxccl_sym_lamport_grouped_f32, f32;
        oxccl_sym_ll_grouped_f64, oxccl_sym_lamport_grouped_f64, f64;
        oxccl_sym_ll_grouped_bf16, oxccl_sym_lamport_grouped_bf16, Bf16;
        oxccl_sym_ll_grouped_f8e4m3, oxccl_sym_lamport_grouped_f8e4m3, F8E4M3;
        oxccl_sym_ll_grouped_f8e5m2, oxccl_sym_lamport_grouped_f8e5m2, F8E5M2;
    }

    /// Lamport scratch init kernel entry: poisons a rank's own Lamport lines once.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn oxccl_sym_lamport_init(args: SymInitArgs) {
        sym_lamport_init(&ExecCtx::current(), &args)
    }
}
