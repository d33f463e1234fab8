//! Device memory owned by Rust: allocation, upload/download, freed on drop.

use std::sync::Arc;

use crate::backend::Backend;
use crate::error::{Error, Result};

/// A device allocation (host memory on the CPU backend).
pub struct DeviceBuffer {
    backend: Arc<dyn Backend>,
    device: usize,
    ptr: u64,
    bytes: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer({} bytes at {:#x} on {} device {})",
            self.bytes,
            self.ptr,
            self.backend.kind(),
            self.device
        )
    }
}

impl DeviceBuffer {
    /// `bytes` of zeroed memory on `device`.
    pub fn alloc(backend: &Arc<dyn Backend>, device: usize, bytes: usize) -> Result<Self> {
        let ptr = backend.alloc(device, bytes)?;
        tracing::debug!(target: "oxccl::alloc", device, bytes, "alloc");
        Ok(DeviceBuffer {
            backend: backend.clone(),
            device,
            ptr,
            bytes,
        })
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// True for a zero-byte buffer.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The device it lives on.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Copy `src` to the start of the buffer (synchronous; no kernel may use the buffer).
    pub fn upload(&mut self, src: &[u8]) -> Result<()> {
        self.fits("upload", src.len())?;
        self.backend.upload(self.device, self.ptr, src)
    }

    /// Copy the start of the buffer into `dst` (synchronous).
    pub fn download(&self, dst: &mut [u8]) -> Result<()> {
        self.fits("download", dst.len())?;
        self.backend.download(self.device, dst, self.ptr)
    }

    fn fits(&self, op: &'static str, len: usize) -> Result<()> {
        if len > self.bytes {
            return Err(Error::BufferTooSmall {
                op,
                len,
                capacity: self.bytes,
                device: self.device,
            });
        }
        Ok(())
    }

    /// Fill every byte with `v` (synchronous).
    pub fn fill(&mut self, v: u8) -> Result<()> {
        let data = vec![v; self.bytes];
        self.upload(&data)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by this backend with this size; users synchronize before drop.
        unsafe { self.backend.free(self.device, self.ptr, self.bytes) };
    }
}
