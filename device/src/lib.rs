//! oxccl device code: collective kernels and device primitives.
//!
//! One source for two targets:
//! - `nvptx64-nvidia-cuda`: compiled to PTX by `oxccl-builder` (`ptx/oxccl.ptx`), where the
//!   thin `extern "ptx-kernel"` wrappers in [`kernels`] feed the plain Rust kernel functions;
//! - the host target: the same kernel functions run on CPU threads (the CPU backend of the
//!   `oxccl` crate), one thread per block, with [`arch`] backed by `core` atomics.
//!
//! Layering: [`arch`] (the only `asm!`), [`abi`] (layouts shared with the host), [`ops`]
//! (element types and reduction operators), [`prims`] (flag barriers), [`coll`] (collective
//! kernels), [`kernels`] (GPU entry points and the list of hot kernels).
#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, asm_experimental_arch)
)]

#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

pub mod abi;
pub mod api;
pub mod arch;
pub mod coll;
pub mod exec;
pub mod kernels;
pub mod ops;
pub mod prims;

#[cfg(target_arch = "nvptx64")]
mod probe;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // A device panic has no unwinding: trap the kernel, the host sees a launch failure.
    arch::trap()
}
