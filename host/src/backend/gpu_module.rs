//! Users' PTX modules on the GPU backend: load a module from PTX text (JIT-compiled by the
//! driver for the device), get a kernel of it by name, launch it with raw parameters on a
//! stream. Used by `oxccl devapi-run` to run kernels linked against `ptx/oxccl_device.bc`.

use std::ffi::c_void;
use std::marker::PhantomData;

use cudarc::driver::{result, sys};

use super::gpu::{gpu_stream, GpuBackend};
use super::{Grid, Stream};
use crate::error::{Error, Result};
use crate::sys::cuda::{self, err};

/// A module loaded from PTX in one device's primary context; unloaded on drop.
pub struct GpuModule {
    device: usize,
    raw: usize,
}

impl std::fmt::Debug for GpuModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuModule(device {})", self.device)
    }
}

impl Drop for GpuModule {
    fn drop(&mut self) {
        // SAFETY: loaded by cuModuleLoadData in the device's primary context, which the
        // backend retains for its whole life; errors at teardown are ignored (no panic in
        // Drop).
        unsafe {
            let _ = sys::cuModuleUnload(self.raw as sys::CUmodule);
        }
    }
}

/// A kernel of a [`GpuModule`] (valid while the module lives).
#[derive(Debug, Clone, Copy)]
pub struct GpuFunction<'m> {
    device: usize,
    raw: usize,
    _module: PhantomData<&'m GpuModule>,
}

impl GpuModule {
    /// The device the module was loaded on.
    pub fn device(&self) -> usize {
        self.device
    }
}

impl GpuBackend {
    /// Load `ptx` (text) as a module on `device` (the driver JIT-compiles it).
    pub fn load_module_ptx(&self, device: usize, ptx: &str) -> Result<GpuModule> {
        self.device(device)?;
        let m = cuda::load_module(device as i32, ptx)?;
        Ok(GpuModule {
            device,
            raw: m as usize,
        })
    }

    /// The kernel `name` of `module`.
    pub fn module_function<'m>(&self, module: &'m GpuModule, name: &str) -> Result<GpuFunction<'m>> {
        // The unload in Drop needs no context, but get_function does.
        let _ = self.device(module.device)?;
        // SAFETY: `module` is loaded in the device's primary context, now current, and
        // outlives the returned function (its lifetime).
        let f = unsafe { cuda::get_function(module.device as i32, module.raw as sys::CUmodule, name)? };
        Ok(GpuFunction {
            device: module.device,
            raw: f as usize,
            _module: PhantomData,
        })
    }

    /// Launch `f` on `stream` with `grid`, `params` being the driver's parameter array (one
    /// pointer to each parameter's value, in order).
    ///
    /// # Safety
    /// `params` matches `f`'s parameters in number, sizes and order, and every address the
    /// kernel dereferences is valid for the kernel's whole run.
    pub unsafe fn launch_raw(
        &self,
        f: &GpuFunction<'_>,
        grid: Grid,
        stream: &Stream,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let s = gpu_stream(stream)?;
        if s.device != f.device {
            return Err(Error::InvalidUsage {
                op: "launch_raw",
                what: format!(
                    "kernel of device {} launched on a stream of device {}",
                    f.device, s.device
                ),
            });
        }
        self.device(s.device)?;
        // SAFETY: caller contract for the parameters; `f` is a kernel of a live module of
        // the stream's device, whose context is current. The driver copies the parameter
        // values at launch.
        unsafe {
            result::launch_kernel(
                f.raw as sys::CUfunction,
                (grid.blocks, 1, 1),
                (grid.threads, 1, 1),
                0,
                s.raw(),
                params,
            )
        }
        .map_err(err("cuLaunchKernel(user kernel)", s.device as i32))
    }
}
