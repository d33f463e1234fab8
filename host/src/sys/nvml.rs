//! NVML (`libnvidia-ml.so.1`, the library `nvidia-smi` uses), loaded at run time, for what
//! the CUDA driver API does not say: which NVLinks of a GPU are up and what sits at their far
//! end (another GPU, or an NVSwitch). Only the calls [`crate::topo`] needs, all read-only.
//! A missing library or symbol is an [`NvmlError`] naming it, never a panic; nothing in
//! oxccl depends on NVML being there (the topology report then says why NVLink is not
//! shown).
//!
//! Nothing here touches multicast or fabric state: NVML is asked about link state and the
//! PCI address of the link's remote end only.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

/// `nvmlReturn_t`.
type Ret = c_int;
/// `nvmlDevice_t`.
type RawDevice = *mut c_void;

const NVML_SUCCESS: Ret = 0;
const NVML_ERROR_INVALID_ARGUMENT: Ret = 2;
const NVML_ERROR_NOT_SUPPORTED: Ret = 3;

/// `NVML_NVLINK_MAX_LINKS` of current nvml.h (18: Hopper's link count).
pub const MAX_LINKS: u32 = 18;

/// Library names tried, in order.
pub const LIB_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// `nvmlPciInfo_t` as nvml.h lays it out (68 bytes: `busIdLegacy[16]`, five `unsigned int`,
/// `busId[32]`), followed by slack so that a longer structure of some future release written
/// through the pointer stays inside this one. Only `domain`, `bus` and `device` are read.
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_subsystem_id: c_uint,
    bus_id: [c_char; 32],
    _slack: [u8; 64],
}

const _: () = assert!(std::mem::offset_of!(PciInfo, domain) == 16);
const _: () = assert!(std::mem::offset_of!(PciInfo, bus_id) == 36);
const _: () = assert!(std::mem::offset_of!(PciInfo, _slack) == 68);

/// NVML failures.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NvmlError {
    /// The library or one of its symbols could not be loaded.
    #[error("nvml not loaded: {0}")]
    Load(String),
    /// A call returned an error code.
    #[error("{op}: nvml error {code} ({text})")]
    Call {
        op: &'static str,
        code: i32,
        text: String,
    },
}

type Result<T> = std::result::Result<T, NvmlError>;

struct Api {
    /// Keeps the library mapped while the function pointers below are used.
    _lib: libloading::Library,
    by_pci: unsafe extern "C" fn(*const c_char, *mut RawDevice) -> Ret,
    link_state: unsafe extern "C" fn(RawDevice, c_uint, *mut c_int) -> Ret,
    remote_pci: unsafe extern "C" fn(RawDevice, c_uint, *mut PciInfo) -> Ret,
    /// `nvmlDeviceGetNvLinkRemoteDeviceType` (R460 and later; optional).
    remote_type: Option<unsafe extern "C" fn(RawDevice, c_uint, *mut c_int) -> Ret>,
    error_string: Option<unsafe extern "C" fn(Ret) -> *const c_char>,
}

// SAFETY: NVML is thread-safe (its documentation); the struct holds function pointers and
// the library handle only.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

impl Api {
    fn load() -> std::result::Result<Api, String> {
        let mut tried = Vec::new();
        let lib = LIB_NAMES
            .iter()
            .find_map(|name| {
                // SAFETY: loading NVML runs its (trusted, system) initializers only.
                match unsafe { libloading::Library::new(*name) } {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tried.push(format!("{name}: {e}"));
                        None
                    }
                }
            })
            .ok_or_else(|| tried.join("; "))?;
        // SAFETY: each symbol is looked up with its nvml.h signature.
        unsafe {
            let init: libloading::Symbol<unsafe extern "C" fn() -> Ret> = lib
                .get(b"nvmlInit_v2\0")
                .map_err(|e| format!("nvmlInit_v2: {e}"))?;
            let r = init();
            if r != NVML_SUCCESS {
                return Err(format!("nvmlInit_v2 returned {r}"));
            }
            let by_pci = *lib
                .get(b"nvmlDeviceGetHandleByPciBusId_v2\0")
                .map_err(|e| format!("nvmlDeviceGetHandleByPciBusId_v2: {e}"))?;
            let link_state = *lib
                .get(b"nvmlDeviceGetNvLinkState\0")
                .map_err(|e| format!("nvmlDeviceGetNvLinkState: {e}"))?;
            let remote_pci = *lib
                .get(b"nvmlDeviceGetNvLinkRemotePciInfo_v2\0")
                .map_err(|e| format!("nvmlDeviceGetNvLinkRemotePciInfo_v2: {e}"))?;
            let remote_type = lib.get(b"nvmlDeviceGetNvLinkRemoteDeviceType\0").ok().map(|s| *s);
            let error_string = lib.get(b"nvmlErrorString\0").ok().map(|s| *s);
            Ok(Api {
                _lib: lib,
                by_pci,
                link_state,
                remote_pci,
                remote_type,
                error_string,
            })
        }
    }

    fn check(&self, r: Ret, op: &'static str) -> Result<()> {
        if r == NVML_SUCCESS {
            return Ok(());
        }
        let text = self
            .error_string
            // SAFETY: nvmlErrorString returns a static NUL-terminated string (or null).
            .map(|f| unsafe { f(r) })
            .filter(|p| !p.is_null())
            // SAFETY: non-null, NUL-terminated, static.
            .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .unwrap_or_else(|| "no description".into());
        Err(NvmlError::Call { op, code: r, text })
    }
}

/// NVML, loaded and initialized once per process.
fn api() -> Result<&'static Api> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(Api::load)
        .as_ref()
        .map_err(|e| NvmlError::Load(e.clone()))
}

/// A GPU as NVML names it.
#[derive(Clone, Copy, Debug)]
pub struct Device(usize);

/// What is at the far end of an NVLink (`nvmlIntNvLinkDeviceType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteType {
    Gpu,
    Switch,
    /// IBM NPU, unknown, or not reported.
    Other,
}

/// The GPU at PCI address `bus_id` (`dddd:bb:dd.0`, as `cuDeviceGetPCIBusId` writes it).
pub fn device_by_pci(bus_id: &str) -> Result<Device> {
    let a = api()?;
    let c = CString::new(bus_id).map_err(|_| NvmlError::Load(format!("bad bus id {bus_id:?}")))?;
    let mut d: RawDevice = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string and an out-pointer to a local.
    a.check(
        unsafe { (a.by_pci)(c.as_ptr(), &mut d) },
        "nvmlDeviceGetHandleByPciBusId_v2",
    )?;
    Ok(Device(d as usize))
}

/// Whether NVLink `link` of `dev` is active; `None` when the GPU has no such link (or no
/// NVLink at all).
pub fn link_active(dev: Device, link: u32) -> Result<Option<bool>> {
    let a = api()?;
    let mut on: c_int = 0;
    // SAFETY: a handle from NVML and an out-pointer to a local.
    let r = unsafe { (a.link_state)(dev.0 as RawDevice, link, &mut on) };
    if r == NVML_ERROR_INVALID_ARGUMENT || r == NVML_ERROR_NOT_SUPPORTED {
        return Ok(None);
    }
    a.check(r, "nvmlDeviceGetNvLinkState")?;
    Ok(Some(on != 0))
}

/// The PCI address `(domain, bus, device)` of the far end of NVLink `link` of `dev`, and
/// what it is.
pub fn remote(dev: Device, link: u32) -> Result<((u32, u32, u32), RemoteType)> {
    let a = api()?;
    // SAFETY: plain integers and byte arrays: all-zero is a valid value.
    let mut p: PciInfo = unsafe { std::mem::zeroed() };
    // SAFETY: a handle from NVML and an out-pointer to a structure at least as large as
    // nvml.h's.
    a.check(
        unsafe { (a.remote_pci)(dev.0 as RawDevice, link, &mut p) },
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    )?;
    let kind = a.remote_type.map_or(RemoteType::Other, |f| {
        let mut t: c_int = 0xff;
        // SAFETY: a handle from NVML and an out-pointer to a local.
        match unsafe { f(dev.0 as RawDevice, link, &mut t) } {
            NVML_SUCCESS if t == 0 => RemoteType::Gpu,
            NVML_SUCCESS if t == 2 => RemoteType::Switch,
            _ => RemoteType::Other,
        }
    });
    Ok(((p.domain, p.bus & 0xff, p.device & 0xff), kind))
}
