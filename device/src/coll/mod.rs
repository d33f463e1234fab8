//! Collective kernels, written as plain Rust functions over an [`crate::exec::ExecCtx`].

pub mod all_gather;
pub mod all_reduce;
pub mod broadcast;
mod frame;
pub mod lsa;
pub mod reduce;
mod reduce_copy;
pub mod reduce_scatter;
