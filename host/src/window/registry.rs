//! Window-ready memory ([`Comm::mem_alloc`], NCCL's `ncclMemAlloc`) and the process-wide
//! registry that finds the physical memory behind any address range of it.
//!
//! The registry maps each live block's address range to its allocation (a memfd on the
//! CPU, a VMM allocation handle on the GPU; see `crate::backend::winmem`). It is one per
//! process, shared by every communicator and rank of the process, so that a rank mapping an
//! in-process peer's window finds that peer's memory from its address. Lookups retain the
//! physical memory they return (under the registry's lock), so a block freed while a window
//! maps it stays alive until the window is unmapped.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::backend::{Backend, BackendKind, PhysHandle, WinAlloc};
use crate::comm::Comm;
use crate::error::{Error, Result};

struct Block {
    kind: BackendKind,
    alloc: WinAlloc,
}

/// Live blocks by base address.
static BLOCKS: Mutex<BTreeMap<u64, Block>> = Mutex::new(BTreeMap::new());

fn blocks() -> std::sync::MutexGuard<'static, BTreeMap<u64, Block>> {
    BLOCKS.lock().unwrap_or_else(|p| p.into_inner())
}

/// One part of a registered range: inside one block, with a reference to its memory.
#[derive(Debug)]
pub(crate) struct Part {
    /// The user's address of the part's first byte.
    pub addr: u64,
    pub len: usize,
    /// The block's base address and size.
    pub block: u64,
    pub block_bytes: usize,
    /// A reference retained for this registration (released by the window).
    pub phys: PhysHandle,
}

impl Part {
    /// Offset of the part inside its block.
    pub fn offset(&self) -> usize {
        (self.addr - self.block) as usize
    }
}

/// Release the references of `parts`.
pub(crate) fn release(backend: &dyn Backend, device: usize, parts: Vec<Part>) {
    for p in parts {
        // SAFETY: a reference this registration retained; nothing maps with it any more.
        unsafe { backend.win_release(device, p.phys) };
    }
}

/// The parts of `[addr, addr + bytes)`: walks the blocks it covers (they must follow each
/// other without a gap), retaining each one's memory.
pub(crate) fn resolve(
    backend: &dyn Backend,
    device: usize,
    op: &'static str,
    rank: u32,
    addr: u64,
    bytes: usize,
) -> Result<Vec<Part>> {
    let refuse = |what: String| Error::NotWindowMemory {
        op,
        rank,
        addr,
        bytes,
        what,
    };
    if bytes == 0 {
        return Err(refuse("the range is empty".into()));
    }
    let end = addr
        .checked_add(bytes as u64)
        .ok_or_else(|| refuse("the range wraps around the address space".into()))?;
    let map = blocks();
    let mut parts = Vec::new();
    let mut cur = addr;
    let result = (|| {
        while cur < end {
            let found = map
                .range(..=cur)
                .next_back()
                .map(|(_, b)| b)
                .filter(|b| cur < b.alloc.ptr + b.alloc.bytes as u64);
            let Some(b) = found else {
                return Err(refuse(if cur == addr {
                    "it was not allocated by mem_alloc (or was freed); windows need memory from Comm::mem_alloc"
                        .into()
                } else {
                    format!(
                        "the range leaves the mem_alloc block ending at {cur:#x} and the memory after it is not from mem_alloc"
                    )
                }));
            };
            if b.kind != backend.kind() {
                return Err(refuse(format!(
                    "the block was allocated on the {} backend, this communicator runs on {}",
                    b.kind,
                    backend.kind()
                )));
            }
            let stop = end.min(b.alloc.ptr + b.alloc.bytes as u64);
            parts.push(Part {
                addr: cur,
                len: (stop - cur) as usize,
                block: b.alloc.ptr,
                block_bytes: b.alloc.bytes,
                phys: backend.win_retain(&b.alloc)?,
            });
            cur = stop;
        }
        Ok(())
    })();
    drop(map);
    match result {
        Ok(()) => Ok(parts),
        Err(e) => {
            release(backend, device, parts);
            Err(e)
        }
    }
}

/// A new reference to the block based at `block` (an in-process peer's), checked to hold
/// `need` bytes.
pub(crate) fn retain_block(backend: &dyn Backend, block: u64, need: u64) -> Option<PhysHandle> {
    let map = blocks();
    let b = map.get(&block)?;
    if b.kind != backend.kind() || (b.alloc.bytes as u64) < need {
        return None;
    }
    backend.win_retain(&b.alloc).ok()
}

/// Unmap and release the block based at `ptr` (see [`Comm::mem_free`]).
///
/// # Safety
/// As [`Comm::mem_free`].
pub(crate) unsafe fn free(backend: &dyn Backend, op: &'static str, rank: u32, ptr: u64) -> Result<()> {
    let mut map = blocks();
    let refuse = |what: String| Error::NotWindowMemory {
        op,
        rank,
        addr: ptr,
        bytes: 0,
        what,
    };
    match map.get(&ptr) {
        None => return Err(refuse("it is not the start of a live mem_alloc block".into())),
        Some(b) if b.kind != backend.kind() => {
            return Err(refuse(format!(
                "the block was allocated on the {} backend, this communicator runs on {}",
                b.kind,
                backend.kind()
            )))
        }
        Some(_) => {}
    }
    let b = map.remove(&ptr).map(|b| b.alloc);
    drop(map);
    if let Some(a) = b {
        // SAFETY: caller contract; the block left the registry, no lookup can reach it.
        unsafe { backend.win_free(a) };
    }
    Ok(())
}

impl Comm {
    /// Window-ready memory on this rank's device (NCCL's `ncclMemAlloc`): zeroed, `bytes`
    /// rounded up to the mapping granularity (the page size on the CPU backend, 2 MiB on
    /// current GPUs), 4096-byte aligned at least. On the GPU it is a CUDA VMM physical
    /// allocation with POSIX descriptor handles mapped read/write on this rank's device; on
    /// the CPU a memfd mapped `MAP_SHARED`. Only such memory can be registered as a window
    /// ([`Comm::register_window`]). Free it with [`Comm::mem_free`] (on any communicator of
    /// the same backend).
    pub fn mem_alloc(&self, bytes: usize) -> Result<u64> {
        const OP: &str = "mem_alloc";
        self.check_live(OP)?;
        mem_alloc_on(&**self.backend(), self.device(), self.rank(), bytes)
    }

    /// Free memory from [`Comm::mem_alloc`] (NCCL's `ncclMemFree`). Windows still mapping
    /// it keep its memory alive until they are deregistered or dropped; `find_window` and
    /// symmetric collectives must not be handed the freed address any more.
    ///
    /// # Safety
    /// `ptr` is the address `mem_alloc` returned; no kernel uses the block through `ptr`
    /// any more (its window aliases may still be used until their window goes).
    pub unsafe fn mem_free(&self, ptr: u64) -> Result<()> {
        // SAFETY: caller contract.
        unsafe { free(&**self.backend(), "mem_free", self.rank(), ptr) }
    }
}

/// [`Comm::mem_alloc`] without a communicator (NCCL's `ncclMemAlloc` takes none): window-ready
/// memory on `device` of `backend`; `rank` only names the caller in errors and logs.
pub fn mem_alloc_on(backend: &dyn Backend, device: usize, rank: u32, bytes: usize) -> Result<u64> {
    if bytes == 0 {
        return Err(Error::InvalidArgument {
            op: "mem_alloc",
            rank,
            what: "0 bytes asked".into(),
        });
    }
    let a = backend.win_alloc(device, bytes)?;
    let ptr = a.ptr;
    tracing::debug!(target: "oxccl::window", rank, ptr, bytes = a.bytes, "mem_alloc");
    blocks().insert(
        ptr,
        Block {
            kind: backend.kind(),
            alloc: a,
        },
    );
    Ok(ptr)
}

/// [`Comm::mem_free`] without a communicator (NCCL's `ncclMemFree`); `rank` as for
/// [`mem_alloc_on`].
///
/// # Safety
/// As [`Comm::mem_free`].
pub unsafe fn mem_free_on(backend: &dyn Backend, rank: u32, ptr: u64) -> Result<()> {
    // SAFETY: caller contract.
    unsafe { free(backend, "mem_free", rank, ptr) }
}
