//! Element types and reduction operators.
//!
//! Every NCCL data type is an [`Elem`]; each has an accumulator type ([`Elem::Acc`]) in which
//! reductions run: `f32` for f16/bf16/fp8 (rounded once at the end, so an 8-rank sum of bf16
//! is as exact as one f32 sum then one rounding), `f32` for f32, `f64` for f64, and the type
//! itself (wrapping arithmetic, like NCCL) for integers.
//!
//! Operators ([`Sum`], [`Prod`], [`Min`], [`Max`], [`Avg`], [`PreMulSum`]) implement
//! [`Reduce`]: `first(x)` starts an accumulation, `combine(acc, x)` adds one more input,
//! `finish(acc)` produces the element. All ranks combine inputs in rank order, so every
//! rank obtains bit-identical results.
//!
//! Semantics choices (documented for users):
//! - `Avg`: floats sum in the accumulator then divide by `nranks` (one rounding); integers
//!   sum with wrap-around then divide with truncation toward zero (NCCL does the same).
//! - `PreMulSum`: `sum(scalar * x)`, the product formed in the accumulator type (wrapping for
//!   integers).
//! - `Min`/`Max` on floats follow IEEE `minNum`/`maxNum`: a NaN input loses to a number.

pub mod dispatch;
pub mod elem;
mod red;

pub use dispatch::{with_op, OpBody};
pub use elem::{Bf16, Elem, F16, F8E4M3, F8E5M2};
pub use red::{Avg, Max, Min, PreMulSum, Prod, Reduce, Sum};
