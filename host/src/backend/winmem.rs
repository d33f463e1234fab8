//! Window-ready memory (`Comm::mem_alloc`) and the physical-memory handles through which
//! symmetric windows map it (see `crate::window`).
//!
//! - CPU backend: each allocation is its own memfd, mapped `MAP_SHARED`; a handle is the
//!   memfd (shared by reference count), any page-aligned sub-range of it can be mapped.
//! - GPU backend: each allocation is a CUDA VMM physical allocation (`cuMemCreate`, POSIX
//!   file descriptor handle type) mapped read/write on its device; a handle is a generic
//!   allocation handle (retained with `cuMemRetainAllocationHandle`, or imported from a
//!   peer's descriptor), and only whole allocations are mapped (`cuMemMap`'s offset must be
//!   0). No multicast object is ever created.

use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A reference to physical window memory: mapping it somewhere keeps the memory alive until
/// that mapping is gone and the reference is released (`Backend::win_release`).
#[derive(Debug, Clone)]
pub enum PhysHandle {
    /// A memfd (CPU backend).
    Memfd(Arc<OwnedFd>),
    /// A CUDA generic allocation handle (GPU backend), owning one reference.
    Vmm(u64),
}

/// One window-ready allocation, as `Backend::win_alloc` made it.
#[derive(Debug)]
pub struct WinAlloc {
    /// The device it was made for (mapped read/write there).
    pub device: usize,
    /// Its address in this process.
    pub ptr: u64,
    /// Bytes (a multiple of the backend's window granularity).
    pub bytes: usize,
    /// The physical memory (the allocation's own reference).
    pub(crate) phys: PhysHandle,
}
