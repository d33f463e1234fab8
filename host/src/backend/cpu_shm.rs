//! The CPU backend's shared segments: memfds mapped `MAP_SHARED` (see [`super::shared`]).

use std::os::fd::OwnedFd;

use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};

use super::shared::SharedMem;
use crate::error::{Error, Result};

fn alloc_err(bytes: usize, device: usize, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Alloc {
        bytes,
        device,
        backend: "cpu (shared)",
        message: format!("{what}: {e}"),
    }
}

fn map(fd: &OwnedFd, bytes: usize, device: usize) -> Result<u64> {
    // SAFETY: a fresh shared mapping of a descriptor we hold; nothing else is mapped there.
    let p = unsafe {
        mmap(
            std::ptr::null_mut(),
            bytes,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
    }
    .map_err(|e| alloc_err(bytes, device, "mmap", e))?;
    Ok(p as u64)
}

/// A zeroed memfd segment of `bytes` (page-rounded), mapped here.
pub fn alloc(device: usize, bytes: usize) -> Result<SharedMem> {
    let bytes = bytes.max(1).div_ceil(4096) * 4096;
    let fd = memfd_create("oxccl-segment", MemfdFlags::CLOEXEC)
        .map_err(|e| alloc_err(bytes, device, "memfd_create", e))?;
    ftruncate(&fd, bytes as u64).map_err(|e| alloc_err(bytes, device, "ftruncate", e))?;
    let dev = map(&fd, bytes, device)?;
    Ok(SharedMem {
        device,
        dev,
        bytes,
        fd: Some(fd),
        handle: 0,
    })
}

/// Map a peer's memfd segment.
pub fn import(device: usize, fd: &OwnedFd, bytes: usize) -> Result<SharedMem> {
    let st = rustix::fs::fstat(fd).map_err(|e| alloc_err(bytes, device, "fstat of a peer's segment", e))?;
    if (st.st_size as u64) < bytes as u64 {
        return Err(alloc_err(
            bytes,
            device,
            "import",
            format!("the peer's segment holds {} bytes", st.st_size),
        ));
    }
    Ok(SharedMem {
        device,
        dev: map(fd, bytes, device)?,
        bytes,
        fd: None,
        handle: 0,
    })
}

/// Unmap (and, for the owner, close) a segment.
///
/// # Safety
/// Nothing uses the mapping any more.
pub unsafe fn free(mem: SharedMem) {
    // SAFETY: caller contract; the mapping is ours.
    let _ = unsafe { munmap(mem.dev as *mut std::ffi::c_void, mem.bytes) };
}
