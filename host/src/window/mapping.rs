//! One rank's flat range of a window: the reservation, the pieces mapped in it (every LSA
//! rank's memory, see `super::layout`) and the references that keep that memory alive.
//! Dropping a [`Mapping`] unmaps the pieces in reverse order, releases the references and
//! then the reservation; it never panics (teardown failures are ignored, as in every
//! `Drop` of the crate).

use std::sync::Arc;

use crate::backend::{Backend, PhysHandle};
use crate::error::Result;

/// A flat range being built or in use.
pub(crate) struct Mapping {
    backend: Arc<dyn Backend>,
    device: usize,
    pub base: u64,
    bytes: usize,
    /// Mapped pieces `(address, bytes)`, in mapping order.
    pieces: Vec<(u64, usize)>,
    /// References held for the mapped memory.
    handles: Vec<PhysHandle>,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Mapping({:#x}, {} bytes, {} pieces)",
            self.base,
            self.bytes,
            self.pieces.len()
        )
    }
}

impl Mapping {
    /// Reserve `bytes` (aligned to `align`) on `device`.
    pub fn reserve(backend: Arc<dyn Backend>, device: usize, bytes: usize, align: usize) -> Result<Self> {
        let base = backend.win_reserve(device, bytes, align)?;
        Ok(Mapping {
            backend,
            device,
            base,
            bytes,
            pieces: Vec::new(),
            handles: Vec::new(),
        })
    }

    /// Map `len` bytes of `phys` from its byte `offset` at `base + at`, keeping `phys` until
    /// teardown (it is released here if the mapping fails).
    pub fn map(&mut self, at: u64, phys: PhysHandle, offset: usize, len: usize) -> Result<()> {
        if at.checked_add(len as u64).is_none_or(|e| e > self.bytes as u64) {
            // SAFETY: not used for any mapping.
            unsafe { self.backend.win_release(self.device, phys) };
            return Err(crate::error::Error::WindowMap {
                op: "window map",
                device: self.device,
                what: format!("piece [{at}, +{len}) outside the {}-byte flat range", self.bytes),
            });
        }
        let addr = self.base + at;
        // SAFETY: inside our reservation (checked), nothing mapped there yet (the layout's
        // pieces do not overlap), offset and length are granularity multiples (layout).
        let r = unsafe { self.backend.win_map(self.device, addr, &phys, offset, len) };
        match r {
            Ok(()) => {
                self.pieces.push((addr, len));
                self.handles.push(phys);
                Ok(())
            }
            Err(e) => {
                // SAFETY: the failed mapping did not take it.
                unsafe { self.backend.win_release(self.device, phys) };
                Err(e)
            }
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the window owning this mapping is gone or deregistered: nothing uses it.
        unsafe {
            for &(at, len) in self.pieces.iter().rev() {
                self.backend.win_unmap(self.device, at, len);
            }
            for h in self.handles.drain(..).rev() {
                self.backend.win_release(self.device, h);
            }
            self.backend.win_unreserve(self.device, self.base, self.bytes);
        }
    }
}
