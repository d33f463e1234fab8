//! Memory shared between processes: a rank's segment, exported as a file descriptor and
//! mapped by peers in other processes ([`crate::backend::Backend::alloc_shared`]).
//!
//! - CPU backend: a memfd, `mmap`ed `MAP_SHARED` by the owner and by every importer.
//! - GPU backend: a CUDA VMM allocation (`cuMemCreate` with POSIX file descriptor handles),
//!   exported with `cuMemExportToShareableHandle`, imported with
//!   `cuMemImportFromShareableHandle` and mapped into a reserved range of the importer's
//!   address space (see `gpu_vmm`). No multicast objects are ever created.

use std::os::fd::OwnedFd;

/// A segment as mapped into this process (the owner's own, or a peer's import).
#[derive(Debug)]
pub struct SharedMem {
    /// The device the mapping is used from.
    pub device: usize,
    /// Its address in this process (a device address on the GPU, a host address on the CPU).
    pub dev: u64,
    /// Bytes mapped (rounded up to the backend's granularity; at least what was asked).
    pub bytes: usize,
    /// The exporting descriptor (owner only; `None` for an import).
    pub fd: Option<OwnedFd>,
    /// Backend handle (the VMM allocation handle on the GPU; unused on the CPU).
    pub(crate) handle: u64,
}

impl SharedMem {
    /// True for a peer's segment mapped here.
    pub fn imported(&self) -> bool {
        self.fd.is_none()
    }
}
