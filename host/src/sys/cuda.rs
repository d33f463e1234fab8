//! The CUDA driver through cudarc's dynamic loading (`libcuda.so` is opened at run time,
//! so oxccl binaries start on machines without a GPU).

use std::ffi::{c_int, c_void, CString};
use std::sync::OnceLock;

use cudarc::driver::{result, sys};

use crate::error::{Error, Result};

/// Library names tried, in order (those cudarc's loader tries for "cuda").
pub fn searched_names() -> Vec<String> {
    cudarc::get_lib_name_candidates("cuda")
}

/// Load and initialize the driver once per process.
pub fn driver() -> Result<()> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    let r = INIT.get_or_init(|| {
        // SAFETY: only probes dlopen of the candidate names.
        let present = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
        if !present {
            return Err(String::new());
        }
        // cudarc panics if a symbol is missing (driver too old): turn that into an error.
        match std::panic::catch_unwind(result::init) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("cuInit: {e}")),
            Err(_) => Err(
                "cuInit: the driver library lacks a required symbol (driver too old for CUDA 13.0)".into(),
            ),
        }
    });
    match r {
        Ok(()) => Ok(()),
        Err(m) if m.is_empty() => Err(Error::CudaDriverMissing {
            searched: searched_names(),
        }),
        Err(m) => Err(Error::Cuda {
            op: "init",
            device: -1,
            message: m.clone(),
        }),
    }
}

/// Map a driver error into ours.
pub fn err(op: &'static str, device: i32) -> impl FnOnce(result::DriverError) -> Error {
    move |e| Error::Cuda {
        op,
        device,
        message: e.to_string(),
    }
}

/// Number of visible GPUs.
pub fn device_count() -> Result<usize> {
    driver()?;
    Ok(result::device::get_count().map_err(err("cuDeviceGetCount", -1))? as usize)
}

/// A device's name.
pub fn device_name(ordinal: usize) -> Result<String> {
    driver()?;
    let d = result::device::get(ordinal as c_int).map_err(err("cuDeviceGet", ordinal as i32))?;
    result::device::get_name(d).map_err(err("cuDeviceGetName", ordinal as i32))
}

/// The driver's CUDA version (e.g. 13000).
pub fn driver_version() -> Result<i32> {
    driver()?;
    let mut v: c_int = 0;
    // SAFETY: out-pointer to a local.
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(err("cuDriverGetVersion", -1))?;
    Ok(v)
}

/// Retain the primary context of `ordinal` and make it current on this thread.
pub fn bind_primary(ordinal: usize) -> Result<sys::CUcontext> {
    driver()?;
    let dev = result::device::get(ordinal as c_int).map_err(err("cuDeviceGet", ordinal as i32))?;
    // SAFETY: `dev` is a valid device handle from cuDeviceGet.
    let ctx = unsafe { result::primary_ctx::retain(dev) }
        .map_err(err("cuDevicePrimaryCtxRetain", ordinal as i32))?;
    // SAFETY: `ctx` was just retained.
    unsafe { result::ctx::set_current(ctx) }.map_err(err("cuCtxSetCurrent", ordinal as i32))?;
    Ok(ctx)
}

/// The device of the context current on this thread (what `cudaGetDevice` reports after
/// `cudaSetDevice`), or `None` when no context is current.
pub fn current_device() -> Result<Option<usize>> {
    driver()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cuCtxGetCurrent(&mut ctx) }
        .result()
        .map_err(err("cuCtxGetCurrent", -1))?;
    if ctx.is_null() {
        return Ok(None);
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a valid out-pointer; a context is current.
    unsafe { sys::cuCtxGetDevice(&mut dev) }
        .result()
        .map_err(err("cuCtxGetDevice", -1))?;
    Ok(Some(dev as usize))
}

/// Load a PTX image (NUL-terminated) in the current context and get its functions.
pub fn load_module(device: i32, ptx: &str) -> Result<sys::CUmodule> {
    let c = CString::new(ptx).map_err(|_| Error::ModuleLoad {
        device,
        message: "ptx contains a NUL byte".into(),
    })?;
    // SAFETY: a NUL-terminated PTX image; the driver copies it.
    unsafe { result::module::load_data(c.as_ptr() as *const c_void) }.map_err(|e| Error::ModuleLoad {
        device,
        message: e.to_string(),
    })
}

/// A kernel of a loaded module.
///
/// # Safety
/// `module` must be a module loaded in the current context and not unloaded.
pub unsafe fn get_function(device: i32, module: sys::CUmodule, name: &str) -> Result<sys::CUfunction> {
    let c = CString::new(name).expect("kernel names have no NUL");
    // SAFETY: caller contract.
    unsafe { result::module::get_function(module, c) }.map_err(|e| Error::ModuleLoad {
        device,
        message: format!("kernel {name}: {e}"),
    })
}

/// A device handle for `ordinal` (the driver loaded).
fn handle(ordinal: usize) -> Result<sys::CUdevice> {
    driver()?;
    result::device::get(ordinal as c_int).map_err(err("cuDeviceGet", ordinal as i32))
}

/// An integer attribute of device `ordinal` (no context needed).
pub fn device_attribute(ordinal: usize, attr: sys::CUdevice_attribute) -> Result<i32> {
    let d = handle(ordinal)?;
    // SAFETY: a device handle from cuDeviceGet.
    unsafe { result::device::get_attribute(d, attr) }.map_err(err("cuDeviceGetAttribute", ordinal as i32))
}

/// Bytes of memory on device `ordinal`.
pub fn device_total_mem(ordinal: usize) -> Result<usize> {
    let d = handle(ordinal)?;
    // SAFETY: a device handle from cuDeviceGet.
    unsafe { result::device::total_mem(d) }.map_err(err("cuDeviceTotalMem", ordinal as i32))
}

/// Whether device `a` can map memory of device `b` (`cuDeviceCanAccessPeer`; no context
/// needed, nothing is enabled).
pub fn can_access_peer(a: usize, b: usize) -> Result<bool> {
    let (da, db) = (handle(a)?, handle(b)?);
    let mut can: c_int = 0;
    // SAFETY: out-pointer to a local; device handles from cuDeviceGet.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, da, db) }
        .result()
        .map_err(err("cuDeviceCanAccessPeer", a as i32))?;
    Ok(can != 0)
}

/// A P2P attribute of the link from device `src` to device `dst`
/// (`cuDeviceGetP2PAttribute`; `src != dst`).
pub fn p2p_attribute(src: usize, dst: usize, attr: sys::CUdevice_P2PAttribute) -> Result<i32> {
    let (ds, dd) = (handle(src)?, handle(dst)?);
    let mut v: c_int = 0;
    // SAFETY: out-pointer to a local; device handles from cuDeviceGet.
    unsafe { sys::cuDeviceGetP2PAttribute(&mut v, attr, ds, dd) }
        .result()
        .map_err(err("cuDeviceGetP2PAttribute", src as i32))?;
    Ok(v)
}
