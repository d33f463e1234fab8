//! The CPU backend's window memory: every allocation is its own memfd mapped `MAP_SHARED`;
//! a window reserves its flat range with an inaccessible anonymous mapping and maps memfd
//! pieces over it with `MAP_FIXED | MAP_SHARED` (see [`super::winmem`]). Unmapping a piece
//! puts the inaccessible reservation back, so the range stays reserved until released.

use std::ffi::c_void;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::fs::{fstat, ftruncate, memfd_create, MemfdFlags};
use rustix::mm::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};

use super::winmem::{PhysHandle, WinAlloc};
use crate::error::{Error, Result};

/// The mapping granularity: the page size.
pub fn granularity() -> usize {
    rustix::param::page_size()
}

fn alloc_err(bytes: usize, device: usize, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Alloc {
        bytes,
        device,
        backend: "cpu (window memory)",
        message: format!("{what}: {e}"),
    }
}

fn map_err(device: usize, op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::WindowMap {
        op,
        device,
        what: e.to_string(),
    }
}

/// A zeroed memfd of `bytes` rounded up to pages, mapped here.
pub fn alloc(device: usize, bytes: usize) -> Result<WinAlloc> {
    let g = granularity();
    let bytes = bytes.max(1).div_ceil(g) * g;
    let fd = memfd_create("oxccl-window", MemfdFlags::CLOEXEC)
        .map_err(|e| alloc_err(bytes, device, "memfd_create", e))?;
    ftruncate(&fd, bytes as u64).map_err(|e| alloc_err(bytes, device, "ftruncate", e))?;
    // SAFETY: a fresh shared mapping of a descriptor we hold; the kernel picks the place.
    let p = unsafe {
        mmap(
            std::ptr::null_mut(),
            bytes,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            &fd,
            0,
        )
    }
    .map_err(|e| alloc_err(bytes, device, "mmap", e))?;
    Ok(WinAlloc {
        device,
        ptr: p as u64,
        bytes,
        phys: PhysHandle::Memfd(Arc::new(fd)),
    })
}

/// Unmap an allocation (the memfd closes with its last reference and mapping).
///
/// # Safety
/// Nothing uses `a.ptr` any more.
pub unsafe fn free(a: WinAlloc) {
    // SAFETY: caller contract; the mapping is the allocation's own.
    let _ = unsafe { munmap(a.ptr as *mut c_void, a.bytes) };
}

/// A peer's exported memfd, checked to hold `bytes`.
pub fn import(device: usize, fd: OwnedFd, bytes: usize) -> Result<PhysHandle> {
    let st = fstat(&fd).map_err(|e| map_err(device, "window import", format!("fstat: {e}")))?;
    if (st.st_size as u64) < bytes as u64 {
        return Err(map_err(
            device,
            "window import",
            format!(
                "the peer's memory holds {} bytes, it reported {bytes}",
                st.st_size
            ),
        ));
    }
    Ok(PhysHandle::Memfd(Arc::new(fd)))
}

/// Reserve `bytes` of inaccessible address space aligned to `align` (over-reserve, trim).
pub fn reserve(device: usize, bytes: usize, align: usize) -> Result<u64> {
    let align = align.max(granularity());
    let total = bytes + align;
    // SAFETY: a fresh anonymous mapping; the kernel picks the place.
    let p = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            total,
            ProtFlags::empty(),
            MapFlags::PRIVATE | MapFlags::NORESERVE,
        )
    }
    .map_err(|e| map_err(device, "window reserve", format!("mmap of {total} bytes: {e}")))?
        as u64;
    let base = p.div_ceil(align as u64) * align as u64;
    let (head, tail) = (base - p, p + total as u64 - (base + bytes as u64));
    // SAFETY: trimming the parts of our own fresh mapping outside [base, base + bytes).
    unsafe {
        if head > 0 {
            let _ = munmap(p as *mut c_void, head as usize);
        }
        if tail > 0 {
            let _ = munmap((base + bytes as u64) as *mut c_void, tail as usize);
        }
    }
    Ok(base)
}

/// Release a reservation.
///
/// # Safety
/// Nothing uses the range any more.
pub unsafe fn unreserve(base: u64, bytes: usize) {
    // SAFETY: caller contract; the range is ours (pieces mapped in it go with it).
    let _ = unsafe { munmap(base as *mut c_void, bytes) };
}

/// Map `bytes` of `phys` from `offset` at `at`, replacing the reservation there.
///
/// # Safety
/// `[at, at + bytes)` is inside one of our reservations.
pub unsafe fn map(device: usize, at: u64, phys: &PhysHandle, offset: usize, bytes: usize) -> Result<()> {
    let PhysHandle::Memfd(fd) = phys else {
        return Err(map_err(
            device,
            "window map",
            "a gpu handle passed to the cpu backend",
        ));
    };
    // SAFETY: caller contract: the range is our reservation, MAP_FIXED replaces it.
    unsafe {
        mmap(
            at as *mut c_void,
            bytes,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED | MapFlags::FIXED,
            &**fd,
            offset as u64,
        )
    }
    .map_err(|e| {
        map_err(
            device,
            "window map",
            format!("mmap of {bytes} bytes at {at:#x}: {e}"),
        )
    })?;
    Ok(())
}

/// Put the inaccessible reservation back over a mapped piece.
///
/// # Safety
/// Nothing uses the piece any more.
pub unsafe fn unmap(at: u64, bytes: usize) {
    // SAFETY: caller contract; MAP_FIXED over our own piece.
    let _ = unsafe {
        mmap_anonymous(
            at as *mut c_void,
            bytes,
            ProtFlags::empty(),
            MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::FIXED,
        )
    };
}
