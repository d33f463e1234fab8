//! Kernel entry points: thin `extern "ptx-kernel"` wrappers on the GPU, and the same
//! dispatch as plain functions for the CPU backend.

use crate::abi::{AllReduceArgs, DataType};
use crate::coll::all_reduce::all_reduce;
use crate::exec::ExecCtx;
use crate::ops::{Bf16, F16, F8E4M3, F8E5M2};

/// Kernels whose spills fail the build (checked by `oxccl-builder` with ptxas).
pub const HOT_KERNELS: &[&str] = &[
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

/// Threads per block the all-reduce kernels are launched with on the GPU.
pub const ALL_REDUCE_BLOCK_THREADS: u32 = 256;

/// PTX entry name of the all-reduce kernel for `dtype`.
pub fn all_reduce_kernel_name(dtype: DataType) -> &'static str {
    HOT_KERNELS[dtype as usize]
}

/// Runs the all-reduce kernel body for `args.dtype` (the CPU backend's entry point).
///
/// # Safety
/// As [`all_reduce`]; `ctx` must be one block of the grid every rank launched.
pub unsafe fn all_reduce_dispatch(ctx: &ExecCtx, args: &AllReduceArgs) {
    match DataType::from_u32(args.dtype) {
        Some(DataType::I8) => all_reduce::<i8>(ctx, args),
        Some(DataType::U8) => all_reduce::<u8>(ctx, args),
        Some(DataType::I32) => all_reduce::<i32>(ctx, args),
        Some(DataType::U32) => all_reduce::<u32>(ctx, args),
        Some(DataType::I64) => all_reduce::<i64>(ctx, args),
        Some(DataType::U64) => all_reduce::<u64>(ctx, args),
        Some(DataType::F16) => all_reduce::<F16>(ctx, args),
        Some(DataType::F32) => all_reduce::<f32>(ctx, args),
        Some(DataType::F64) => all_reduce::<f64>(ctx, args),
        Some(DataType::Bf16) => all_reduce::<Bf16>(ctx, args),
        Some(DataType::F8E4M3) => all_reduce::<F8E4M3>(ctx, args),
        Some(DataType::F8E5M2) => all_reduce::<F8E5M2>(ctx, args),
        None => {}
    }
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
}
