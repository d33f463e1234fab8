//! The GPU backend's shared segments: CUDA VMM allocations with POSIX file descriptor
//! handles (see [`super::shared`]). The owner creates the physical allocation on its device,
//! maps it into a reserved virtual range and exports a descriptor; an importer (another
//! process) imports the descriptor, reserves a range of its own, maps the same physical
//! memory there and grants its device read/write access. Unmapping and releasing follow the
//! reverse order. No multicast object is created anywhere.
//!
//! Access: memory this process allocates is mapped read/write for its own device and for every
//! other device that can reach it (`cuDeviceCanAccessPeer`, as NCCL's `ncclCuMemAlloc` does):
//! ranks of this process on other GPUs load and store it directly at the addresses the
//! collectives publish (segments' inboxes and staging, `mem_alloc` buffers). VMM memory needs
//! that grant per device: `cuCtxEnablePeerAccess` covers `cuMemAlloc` memory only. An
//! imported mapping, or a window's flat range, is used by the importing rank's device alone.

use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use cudarc::driver::sys;

use super::shared::SharedMem;
use super::winmem::{PhysHandle, WinAlloc};
use crate::error::{Error, Result};
use crate::sys::cuda;

/// A driver result as ours: `op` on `device` failed with the code.
pub(super) fn check(r: sys::CUresult, op: &'static str, device: usize) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            op,
            device: device as i32,
            message: format!("{r:?}"),
        })
    }
}

fn location(device: usize) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: device as i32,
    }
}

fn prop(device: usize) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero is a valid (default) value.
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location = location(device);
    p
}

/// The allocation granularity on `device` (the context must be current).
fn granularity(device: usize) -> Result<usize> {
    let p = prop(device);
    let mut g = 0usize;
    // SAFETY: out-pointer to a local, valid property struct.
    check(
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut g,
                &p,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        },
        "cuMemGetAllocationGranularity",
        device,
    )?;
    Ok(g.max(1))
}

/// The devices granted access to memory allocated on `device`: `device` first, then every
/// other device that can access its memory (see the module doc).
fn access_devices(device: usize) -> Result<Vec<usize>> {
    let mut v = vec![device];
    for d in 0..cuda::device_count()? {
        if d != device && cuda::can_access_peer(d, device)? {
            v.push(d);
        }
    }
    Ok(v)
}

/// Grant every device of `devices` read/write access to `[ptr, ptr + bytes)` (`device`
/// names the mapping in errors).
///
/// # Safety
/// The range is mapped.
unsafe fn set_access(ptr: u64, bytes: usize, devices: &[usize], device: usize) -> Result<()> {
    let descs: Vec<sys::CUmemAccessDesc> = devices
        .iter()
        .map(|&d| sys::CUmemAccessDesc {
            location: location(d),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        })
        .collect();
    // SAFETY: caller contract; `descs.len()` descriptors.
    check(
        unsafe { sys::cuMemSetAccess(ptr, bytes, descs.as_ptr(), descs.len()) },
        "cuMemSetAccess",
        device,
    )
}

/// Reserve a range for `handle`, map it and grant every device of `access` read/write
/// access (`device`: the one whose context is current).
///
/// # Safety
/// The context of `device` is current; `handle` holds at least `bytes`.
unsafe fn map(
    handle: sys::CUmemGenericAllocationHandle,
    bytes: usize,
    align: usize,
    device: usize,
    access: &[usize],
) -> Result<u64> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local.
    check(
        unsafe { sys::cuMemAddressReserve(&mut ptr, bytes, align, 0, 0) },
        "cuMemAddressReserve",
        device,
    )?;
    // SAFETY: a fresh reservation of `bytes`, a live handle of at least that size.
    if let Err(e) = check(
        unsafe { sys::cuMemMap(ptr, bytes, 0, handle, 0) },
        "cuMemMap",
        device,
    ) {
        // SAFETY: the reservation just made.
        let _ = unsafe { sys::cuMemAddressFree(ptr, bytes) };
        return Err(e);
    }
    // SAFETY: the mapping just made.
    if let Err(e) = unsafe { set_access(ptr, bytes, access, device) } {
        // SAFETY: as above.
        unsafe {
            let _ = sys::cuMemUnmap(ptr, bytes);
            let _ = sys::cuMemAddressFree(ptr, bytes);
        }
        return Err(e);
    }
    Ok(ptr)
}

/// A zeroed physical allocation of at least `bytes` (rounded up to the granularity) with
/// POSIX descriptor handles on `device` (its context current), mapped read/write for it and
/// the devices that can reach it ([`access_devices`]): the handle, the address and the
/// rounded size.
fn create_mapped(device: usize, bytes: usize) -> Result<(sys::CUmemGenericAllocationHandle, u64, usize)> {
    let g = granularity(device)?;
    let bytes = bytes.max(1).div_ceil(g) * g;
    let p = prop(device);
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: out-pointer to a local; valid properties.
    check(
        unsafe { sys::cuMemCreate(&mut handle, bytes, &p, 0) },
        "cuMemCreate",
        device,
    )
    .map_err(|e| Error::Alloc {
        bytes,
        device,
        backend: "gpu (vmm, shareable)",
        message: e.to_string(),
    })?;
    let release = |e: Error| {
        // SAFETY: the handle just created.
        let _ = unsafe { sys::cuMemRelease(handle) };
        e
    };
    let access = access_devices(device).map_err(release)?;
    // SAFETY: context current (caller), the handle holds `bytes`.
    let dev = unsafe { map(handle, bytes, g, device, &access) }.map_err(release)?;
    let free_all = |e: Error| {
        // SAFETY: the mapping and handle just made.
        unsafe {
            let _ = sys::cuMemUnmap(dev, bytes);
            let _ = sys::cuMemAddressFree(dev, bytes);
            let _ = sys::cuMemRelease(handle);
        }
        e
    };
    // SAFETY: a mapped range of `bytes`.
    check(unsafe { sys::cuMemsetD8_v2(dev, 0, bytes) }, "cuMemsetD8", device).map_err(free_all)?;
    // The memset runs on the legacy stream; our non-blocking streams do not wait for it.
    // SAFETY: context current; the null stream is the legacy default stream.
    check(
        unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) },
        "cuStreamSynchronize(legacy)",
        device,
    )
    .map_err(free_all)?;
    Ok((handle, dev, bytes))
}

/// A descriptor exporting `handle` (a POSIX-descriptor allocation).
fn export(handle: sys::CUmemGenericAllocationHandle, device: usize) -> Result<OwnedFd> {
    let mut raw: i32 = -1;
    // SAFETY: a POSIX-fd handle type writes an int into the out-pointer.
    check(
        unsafe {
            sys::cuMemExportToShareableHandle(
                &mut raw as *mut i32 as *mut c_void,
                handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        },
        "cuMemExportToShareableHandle",
        device,
    )?;
    // SAFETY: a descriptor the driver just opened for us.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A zeroed exportable segment of at least `bytes` on `device` (its context current).
pub fn alloc(device: usize, bytes: usize) -> Result<SharedMem> {
    let (handle, dev, bytes) = create_mapped(device, bytes)?;
    let fd = export(handle, device).inspect_err(|_| {
        // SAFETY: the mapping and handle just made, unused.
        unsafe {
            let _ = sys::cuMemUnmap(dev, bytes);
            let _ = sys::cuMemAddressFree(dev, bytes);
            let _ = sys::cuMemRelease(handle);
        }
    })?;
    Ok(SharedMem {
        device,
        dev,
        bytes,
        fd: Some(fd),
        handle,
    })
}

/// Import a peer's exported allocation (`bytes` as the owner reported it): the handle, one
/// reference owned by the caller.
fn import_handle(device: usize, fd: &OwnedFd, bytes: usize) -> Result<sys::CUmemGenericAllocationHandle> {
    let g = granularity(device)?;
    if bytes == 0 || !bytes.is_multiple_of(g) {
        return Err(Error::Cuda {
            op: "segment import",
            device: device as i32,
            message: format!("the peer reported {bytes} bytes, not a multiple of the granularity {g}"),
        });
    }
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: for POSIX descriptors the "OS handle" is the descriptor's value; the driver
    // dups what it needs, we keep ownership of `fd`.
    check(
        unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                fd.as_raw_fd() as usize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        },
        "cuMemImportFromShareableHandle",
        device,
    )?;
    Ok(handle)
}

/// Map a peer's exported segment (`bytes` as the owner reported it) for use on `device`
/// (its context current).
pub fn import(device: usize, fd: &OwnedFd, bytes: usize) -> Result<SharedMem> {
    let g = granularity(device)?;
    let handle = import_handle(device, fd, bytes)?;
    // SAFETY: context current, the imported handle holds the owner's `bytes`.
    let dev = unsafe { map(handle, bytes, g, device, &[device]) }.inspect_err(|_| {
        // SAFETY: the handle just imported.
        let _ = unsafe { sys::cuMemRelease(handle) };
    })?;
    Ok(SharedMem {
        device,
        dev,
        bytes,
        fd: None,
        handle,
    })
}

/// Unmap and release a segment (owner or import); the context of its device current.
///
/// # Safety
/// No kernel uses the mapping any more.
pub unsafe fn free(mem: SharedMem) {
    // SAFETY: caller contract; the mapping and handle are ours.
    unsafe {
        let _ = sys::cuMemUnmap(mem.dev, mem.bytes);
        let _ = sys::cuMemAddressFree(mem.dev, mem.bytes);
        let _ = sys::cuMemRelease(mem.handle);
    }
}

/// Window memory (see `super::winmem`): the granularity of `device` (its context current).
pub fn win_granularity(device: usize) -> Result<usize> {
    granularity(device)
}

/// Window-ready memory: a zeroed POSIX-descriptor allocation on `device` (its context
/// current), mapped read/write for it and its peers, never exported until a window asks.
pub fn win_alloc(device: usize, bytes: usize) -> Result<WinAlloc> {
    let (handle, ptr, bytes) = create_mapped(device, bytes)?;
    Ok(WinAlloc {
        device,
        ptr,
        bytes,
        phys: PhysHandle::Vmm(handle),
    })
}

/// Unmap an allocation and drop its own reference (the context of its device current).
///
/// # Safety
/// No kernel uses `a.ptr` any more.
pub unsafe fn win_free(a: WinAlloc) {
    // SAFETY: caller contract; the mapping and the reference are the allocation's own.
    unsafe {
        let _ = sys::cuMemUnmap(a.ptr, a.bytes);
        let _ = sys::cuMemAddressFree(a.ptr, a.bytes);
        if let PhysHandle::Vmm(h) = a.phys {
            let _ = sys::cuMemRelease(h);
        }
    }
}

fn vmm(phys: &PhysHandle, op: &'static str, device: usize) -> Result<sys::CUmemGenericAllocationHandle> {
    match phys {
        PhysHandle::Vmm(h) => Ok(*h),
        PhysHandle::Memfd(_) => Err(Error::Cuda {
            op,
            device: device as i32,
            message: "a cpu memfd handle passed to the gpu backend".into(),
        }),
    }
}

/// A new reference to the physical memory mapped at `a.ptr`.
pub fn win_retain(a: &WinAlloc) -> Result<PhysHandle> {
    let mut h: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: out-pointer to a local; `a.ptr` is mapped (the allocation is live).
    check(
        unsafe { sys::cuMemRetainAllocationHandle(&mut h, a.ptr as *mut c_void) },
        "cuMemRetainAllocationHandle",
        a.device,
    )?;
    Ok(PhysHandle::Vmm(h))
}

/// A descriptor exporting `phys`.
pub fn win_export(device: usize, phys: &PhysHandle) -> Result<OwnedFd> {
    export(vmm(phys, "cuMemExportToShareableHandle", device)?, device)
}

/// A reference to a peer's exported allocation of `bytes`.
pub fn win_import(device: usize, fd: OwnedFd, bytes: usize) -> Result<PhysHandle> {
    Ok(PhysHandle::Vmm(import_handle(device, &fd, bytes)?))
}

/// Drop a reference.
///
/// # Safety
/// No mapping call uses it afterwards.
pub unsafe fn win_release(phys: PhysHandle) {
    if let PhysHandle::Vmm(h) = phys {
        // SAFETY: caller contract; one reference of ours.
        let _ = unsafe { sys::cuMemRelease(h) };
    }
}

/// Reserve `bytes` of virtual addresses aligned to `align`.
pub fn win_reserve(device: usize, bytes: usize, align: usize) -> Result<u64> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local.
    check(
        unsafe { sys::cuMemAddressReserve(&mut ptr, bytes, align, 0, 0) },
        "cuMemAddressReserve",
        device,
    )?;
    Ok(ptr)
}

/// Release a reservation.
///
/// # Safety
/// Nothing is mapped in it any more.
pub unsafe fn win_unreserve(base: u64, bytes: usize) {
    // SAFETY: caller contract.
    let _ = unsafe { sys::cuMemAddressFree(base, bytes) };
}

/// Map the whole of `phys` (`bytes`, `offset` 0: `cuMemMap` maps whole allocations) at
/// `at` and grant `device` read/write access.
///
/// # Safety
/// `[at, at + bytes)` is inside a reservation with nothing mapped there.
pub unsafe fn win_map(device: usize, at: u64, phys: &PhysHandle, offset: usize, bytes: usize) -> Result<()> {
    let h = vmm(phys, "cuMemMap", device)?;
    if offset != 0 {
        return Err(Error::Cuda {
            op: "cuMemMap",
            device: device as i32,
            message: format!("offset {offset} into an allocation (only whole allocations are mapped)"),
        });
    }
    // SAFETY: caller contract; a live handle of at least `bytes`.
    check(unsafe { sys::cuMemMap(at, bytes, 0, h, 0) }, "cuMemMap", device)?;
    // SAFETY: the mapping just made.
    if let Err(e) = unsafe { set_access(at, bytes, &[device], device) } {
        // SAFETY: as above.
        let _ = unsafe { sys::cuMemUnmap(at, bytes) };
        return Err(e);
    }
    Ok(())
}

/// Undo a [`win_map`].
///
/// # Safety
/// Nothing uses the mapping any more.
pub unsafe fn win_unmap(at: u64, bytes: usize) {
    // SAFETY: caller contract.
    let _ = unsafe { sys::cuMemUnmap(at, bytes) };
}
