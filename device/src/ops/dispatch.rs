//! The run-time operator dispatch shared by the kernels: one `match` on the [`RedOp`] value
//! that calls a generic body once per operator (each monomorphized), so kernels do not each
//! repeat it.

use super::{Avg, Elem, Max, Min, PreMulSum, Prod, Reduce, Sum};
use crate::abi::RedOp;

/// A kernel body generic over the operator.
pub trait OpBody<T: Elem> {
    /// Run with operator `op`.
    ///
    /// # Safety
    /// As the kernel body it stands for.
    unsafe fn run<O: Reduce<T>>(self, op: O);
}

/// Call `body` with the operator whose [`RedOp`] value is `op` (`Avg` divides by `nranks`,
/// `PreMulSum` scales by `scalar`, the little-endian bytes of one `T`). Returns `false`,
/// without calling it, for an unknown value.
///
/// # Safety
/// As `body`'s [`OpBody::run`].
#[inline(always)]
pub unsafe fn with_op<T: Elem, B: OpBody<T>>(op: u32, nranks: u32, scalar: u64, body: B) -> bool {
    match RedOp::from_u32(op) {
        Some(RedOp::Sum) => body.run(Sum),
        Some(RedOp::Prod) => body.run(Prod),
        Some(RedOp::Min) => body.run(Min),
        Some(RedOp::Max) => body.run(Max),
        Some(RedOp::Avg) => body.run(Avg { nranks }),
        Some(RedOp::PreMulSum) => body.run(PreMulSum {
            scalar: T::from_le_u64(scalar).to_acc(),
        }),
        None => return false,
    }
    true
}
