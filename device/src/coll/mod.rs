//! Collective kernels, written as plain Rust functions over an [`crate::exec::ExecCtx`].

pub mod all_reduce;
mod reduce_copy;
