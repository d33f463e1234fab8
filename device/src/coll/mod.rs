//! Collective kernels, written as plain Rust functions over an [`crate::exec::ExecCtx`].

pub mod all_gather;
pub mod all_gather_v;
pub mod all_reduce;
pub mod all_reduce_ll;
pub mod all_to_all;
pub mod broadcast;
mod frame;
pub mod gather;
pub mod lsa;
pub mod p2p;
pub mod reduce;
mod reduce_copy;
pub mod reduce_scatter;
pub mod scatter;
pub mod sym;
