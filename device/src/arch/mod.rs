//! The hardware layer: the only module with `asm!`.
//!
//! Every function here exists twice with the same signature: [`nvptx`] wraps one PTX
//! instruction each, [`host`] gives the same semantics with `core` atomics so that the code
//! above runs on CPU threads (the CPU backend) without data races in the Rust sense.
//!
//! # Memory model, as used by oxccl
//!
//! Names carry ordering and scope: `load_acquire_sys_u64` is `ld.acquire.sys.u64`,
//! `store_release_sys_u64` is `st.release.sys.u64`, `load_relaxed_gpu_u32` is
//! `ld.relaxed.gpu.u32`, `*_volatile_*` is `ld.volatile`/`st.volatile` (used only for
//! host-written control words such as the abort flag, polled from the device).
//! Scopes: `cta` = one block, `gpu` = every thread of one device, `sys` = every device and
//! the host. Ranks of one communicator may sit on different GPUs or in different processes,
//! so every flag that crosses ranks is released and acquired at `.sys` scope.
//!
//! Pairings (who synchronizes with whom):
//! - A flag store `store_release_sys_*` by rank A pairs with `load_acquire_sys_*` of the same
//!   location by rank B: everything A wrote before (its own stores, and, through the
//!   preceding `bar.sync`, the stores of the other threads of its block, the release being
//!   cumulative) is visible to B after the acquire returns the stored value (or a later one).
//! - After a thread's acquire, `sync_threads` (`bar.sync`) extends the visibility to the other
//!   threads of its block, which then read payload with weak loads.
//! - Payload moves with weak (plain) loads and stores, 16 bytes wide where aligned
//!   ([`load_v4`], [`store_v4`]); they are never used to communicate by themselves.
//! - `fence_acq_rel_sys` is a full `fence.acq_rel.sys`, used before a release flag store
//!   where the flag alone does not cover earlier weak stores of the same thread to other
//!   addresses (it does, but the explicit fence keeps the protocol obvious and costs one
//!   instruction per barrier).
//!
//! On the host, weak payload accesses are `Relaxed` atomics of the same width (so two ranks
//! touching one buffer is never UB), acquire/release are `Acquire`/`Release`, and fences are
//! `core::sync::atomic::fence`. `core::sync::atomic` is never used on nvptx, where rustc does
//! not lower its orderings to the scoped PTX forms.

pub mod cvt;

#[cfg(target_arch = "nvptx64")]
mod nvptx;
#[cfg(target_arch = "nvptx64")]
pub use nvptx::*;

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

/// Spins between two abort/timeout checks in device wait loops.
pub const SPINS_PER_CHECK: u32 = 1024;
