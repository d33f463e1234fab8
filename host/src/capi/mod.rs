//! The nccl.h-compatible C ABI, exported by the `oxccl-capi` cdylib as `libnccl.so.2`
//! (header: `host/capi/include/nccl.h`, NCCL 2.29.7's ABI). Every `nccl*` function has its
//! `pnccl*` twin (NCCL's profiling names), defined by [`api!`].
//!
//! - Types and NCCL's `ncclConfig_t` parsing rule: [`types`]; errors, the last-error string
//!   and the panic guard every entry runs in: [`error`].
//! - Handles are table keys, never addresses ([`handle`]): a destroyed or foreign
//!   `ncclComm_t` is an `ncclInvalidArgument`, not a crash.
//! - Groups and what the C ABI adds to them (deferred host collectives, completion on the CPU
//!   backend): [`group`].
//! - Entry points: [`init`] (ids, communicators), [`coll`] (collectives, send/recv,
//!   operators), [`mem`] (`ncclMemAlloc`, registration, windows), [`devapi`] (the host side
//!   of the Device API; NCCL's requirements layout read by `devreqs`), [`requirements`]
//!   (its resource-requirement helpers), [`misc`] (version, strings, groups' simulation,
//!   one-sided calls oxccl refuses).
//!
//! One backend serves the process: the GPU when a driver and a device are present, else the
//! CPU (`OXCCL_BACKEND=cpu` forces it), as [`crate::backend::auto`] decides. On the GPU a
//! rank's device is the current CUDA device at init (`cudaSetDevice`), several ranks may
//! share one GPU (in one process or many), and `cudaStream_t` arguments are the caller's
//! streams. On the CPU backend "device memory" is host memory and streams are ignored (see
//! [`group`] for when operations complete).
//!
//! Safety contract of every entry point: nccl.h's (pointers valid for what the call reads
//! or writes, device buffers valid until the operation completes on its stream).

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::sync::{Arc, OnceLock};

use crate::backend::Backend;

/// Defines `nccl$name` with its body run in [`error::guard`], and its `pnccl` twin.
macro_rules! api {
    ($(#[$m:meta])* fn $name:ident / $pname:ident ($($a:ident : $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $crate::capi::types::NcclResult {
            $crate::capi::error::guard(stringify!($name), || $body)
        }
        #[doc = concat!("`", stringify!($name), "` under its profiling name.")]
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> $crate::capi::types::NcclResult {
            // SAFETY: the same contract as the function it forwards to.
            unsafe { $name($($a),*) }
        }
    };
}

pub mod coll;
pub mod devapi;
pub(crate) mod devreqs;
pub mod error;
pub(crate) mod group;
pub(crate) mod handle;
pub mod init;
pub mod mem;
pub mod misc;
pub mod requirements;
pub mod types;

pub use coll::*;
pub use devapi::*;
pub use init::*;
pub use mem::*;
pub use misc::*;
pub use requirements::*;

/// The process's backend (chosen once, at the first call that needs one).
pub(crate) fn backend() -> Arc<dyn Backend> {
    static B: OnceLock<Arc<dyn Backend>> = OnceLock::new();
    B.get_or_init(|| {
        let (b, why) = crate::backend::auto();
        if let Some(why) = why {
            tracing::info!(target: "oxccl::capi", "using the cpu backend: {why}");
        }
        b
    })
    .clone()
}

/// The device a new rank of this thread uses: the current CUDA device on the GPU (device 0
/// when no context is current, as `cudaGetDevice` reports), device 0 on the CPU.
pub(crate) fn current_device(b: &dyn Backend) -> Result<usize, error::CError> {
    if b.as_gpu().is_none() {
        return Ok(0);
    }
    Ok(crate::sys::cuda::current_device()?.unwrap_or(0))
}

/// A non-null handle as the `usize` key of [`handle`]'s tables.
pub(crate) fn key<T>(p: *const T) -> usize {
    p as usize
}

#[cfg(test)]
mod tests;
