//! Symmetric memory windows (NCCL's `ncclCommWindowRegister`), device communicators
//! (`ncclDevCommCreate`) and property queries (`ncclCommQueryProperties`).
//!
//! # Memory
//! Windows are made of memory from [`Comm::mem_alloc`] (`registry`): a CUDA VMM physical
//! allocation with POSIX descriptor handles on the GPU, a memfd on the CPU. A process-wide
//! registry finds the physical memory behind any address range of it; anything else (plain
//! `cudaMalloc` memory, a `Vec`) is refused with [`Error::NotWindowMemory`].
//!
//! # Layout
//! The LSA team (ranks that load and store each other's memory) is every rank of the
//! communicator: oxccl communicators live on one node (ranks in several processes map each
//! other's memory through passed descriptors). Registering a window, every rank reserves a
//! flat range of `lsa_size * stride` bytes and maps every LSA rank's memory into it, rank `q`'s
//! at `base + q * stride`:
//!
//! ```text
//!  base            base + stride     base + 2*stride        ...
//!  | rank 0's copy  | rank 1's copy    | rank 2's copy    |  ...
//!  ^byte0           ^byte0             ^byte0   (the same slot offset in every slot)
//! ```
//!
//! so that peer `q`'s byte `o` is at `local + (q - rank) * stride + o`, exactly as
//! [`WindowDesc`] documents (`local` is this rank's byte 0 in its own slot). `stride` is the
//! largest rank's mapped extent, a multiple of the mapping granularity (2 MiB on current
//! GPUs, the page size on the CPU); sizes may differ between ranks (each pointer is checked
//! against its peer's size). The flat range aliases the `mem_alloc` memory: a store through
//! either address is seen through the other. How pieces are cut and placed is in `layout`.
//!
//! # Several segments
//! [`Comm::register_window_segments`] makes one window of several buffers (each inside
//! `mem_alloc` blocks), mapped one after another into each slot. A segment starts at the
//! next mapping unit after the previous one (a granule on the CPU, a whole `mem_alloc`
//! block on the GPU): when every segment starts and ends on a granule boundary (the usual
//! case with `mem_alloc`'d buffers on the CPU) the window is their exact concatenation;
//! otherwise [`Window::segments`] gives where each one lies, and the bytes between them
//! alias the rest of their mapping units. A single range that runs over several adjacent
//! `mem_alloc` blocks is cut at the block boundaries and mapped the same way (contiguously:
//! blocks end on granule boundaries). A window's first bytes must start at the same offset
//! modulo the granularity on every rank ([`Error::Window`] otherwise).
//!
//! # Registration protocol (collective, every rank calls it in the same order)
//! 1. Each rank resolves its segments in the registry (retaining their memory) and, on
//!    communicators whose ranks may live in other processes, exports each piece's
//!    descriptor.
//! 2. A control-channel all-gather publishes each rank's pieces (`layout`), or its failure:
//!    every rank then fails, naming the rank that could not register.
//! 3. Every rank computes the same flat layout, reserves its range and maps each rank's
//!    pieces: its own from its references, an in-process peer's through the registry (by
//!    the block address the peer published), another process's through descriptors fetched
//!    from that rank's descriptor server (`crate::transport::fdpass`, authenticated by the
//!    job's secret as the init segments are, on a socket name of its own per registration).
//! 4. An all-gather of each rank's outcome: the window exists on every rank or on none.
//!
//! Every wait is bounded by the bootstrap timeout and cut short by [`Comm::abort`].
//! Deregistration ([`Comm::deregister_window`]) waits for this rank's streams, meets the
//! other ranks, then unmaps and releases in reverse order; dropping a [`Window`] unmaps
//! locally. Nothing here creates a multicast object.

mod devcomm;
mod layout;
mod mapping;
mod register;
mod registry;

/// Register `segs` as a window for the library's own use (no symmetric set-up).
pub(crate) fn register_internal(comm: &Comm, op: &'static str, segs: &[(u64, usize)]) -> Result<Window> {
    register::register(comm, op, segs, WIN_COLL_SYMMETRIC)
}

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

pub use devcomm::{CommProperties, DevCommHandle};
pub use oxccl_device::api::abi::{
    DevComm, DevCommRequirements, Team, WindowDesc, GIN_TYPE_NONE, WIN_COLL_SYMMETRIC, WIN_DEFAULT,
    WIN_STRICT_ORDERING,
};
pub(crate) use registry::free as free_block;
pub use registry::{mem_alloc_on, mem_free_on};

use crate::comm::Comm;
use crate::error::{Error, Result};
use mapping::Mapping;

/// One segment of a window as this rank registered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The user's address of its first byte (inside `mem_alloc` memory).
    pub addr: u64,
    /// Its bytes.
    pub len: usize,
    /// Where it lies in the window (byte offset from [`Window::local_ptr`]`(0)`).
    pub offset: u64,
}

/// This rank's registered windows, and the sequence of registrations (which names their
/// descriptor servers).
pub(crate) struct CommWindows {
    /// Tells communicators apart (a window is deregistered on the one that made it).
    id: u64,
    seq: AtomicU64,
    list: Mutex<Vec<Weak<WinInner>>>,
}

impl Default for CommWindows {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        CommWindows {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            seq: AtomicU64::new(0),
            list: Mutex::new(Vec::new()),
        }
    }
}

impl CommWindows {
    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    fn add(&self, w: &Arc<WinInner>) {
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.retain(|x| x.strong_count() > 0);
        l.push(Arc::downgrade(w));
    }

    fn remove(&self, w: &Arc<WinInner>) {
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.retain(|x| x.strong_count() > 0 && !std::ptr::eq(x.as_ptr(), Arc::as_ptr(w)));
    }

    fn live(&self) -> Vec<Arc<WinInner>> {
        let l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.iter().filter_map(Weak::upgrade).collect()
    }
}

pub(crate) struct WinInner {
    comm_id: u64,
    world_rank: u32,
    desc: WindowDesc,
    /// Every LSA rank's registered bytes.
    sizes: Vec<u64>,
    segments: Vec<Segment>,
    /// `None` once deregistered.
    mapping: Mutex<Option<Mapping>>,
}

impl WinInner {
    fn is_mapped(&self) -> bool {
        self.mapping.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// The window offset of user range `[addr, addr + bytes)` if it lies in this window:
    /// inside one segment, or running on through segments that follow each other both in
    /// the user's memory and in the window. A flat-range address of this rank is accepted
    /// too.
    fn offset_of(&self, addr: u64, bytes: usize) -> Option<u64> {
        let bytes = bytes as u64;
        let local = self.desc.local;
        if addr >= local
            && addr.checked_add(bytes)? <= local + self.desc.size
            && addr < local + self.desc.size
        {
            return Some(addr - local);
        }
        let i = self
            .segments
            .iter()
            .position(|s| addr >= s.addr && addr < s.addr + s.len as u64)?;
        let off = self.segments[i].offset + (addr - self.segments[i].addr);
        let mut end = self.segments[i].addr + self.segments[i].len as u64;
        let want = addr.checked_add(bytes)?;
        let mut k = i;
        while want > end {
            let (s, n) = (self.segments[k], self.segments.get(k + 1)?);
            if n.addr != end || n.offset != s.offset + s.len as u64 {
                return None;
            }
            end = n.addr + n.len as u64;
            k += 1;
        }
        Some(off)
    }
}

/// A registered window (NCCL's `ncclWindow_t`): this rank's view of every LSA rank's copy.
/// Deregister it with [`Comm::deregister_window`] (collective); dropping it unmaps it on
/// this rank only.
pub struct Window {
    inner: Arc<WinInner>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("desc", &self.inner.desc)
            .field("segments", &self.inner.segments)
            .finish()
    }
}

impl Window {
    /// The descriptor kernels take (see [`WindowDesc`]).
    pub fn desc(&self) -> WindowDesc {
        self.inner.desc
    }

    /// Bytes this rank registered (the window's size on this rank).
    pub fn size(&self) -> usize {
        self.inner.desc.size as usize
    }

    /// The `WIN_*` flags it was registered with.
    pub fn flags(&self) -> u32 {
        self.inner.desc.flags
    }

    /// This rank's segments and where they lie in the window.
    pub fn segments(&self) -> &[Segment] {
        &self.inner.segments
    }

    /// Bytes LSA rank `peer` registered.
    pub fn peer_size(&self, peer: u32) -> Option<usize> {
        self.inner.sizes.get(peer as usize).map(|&s| s as usize)
    }

    /// The flat-range address of this rank's byte `offset` (NCCL's `ncclGetLocalPointer`:
    /// arithmetic, no bounds check; see [`Window::lsa_ptr`] for a checked one).
    pub fn local_ptr(&self, offset: usize) -> u64 {
        self.inner.desc.local.wrapping_add(offset as u64)
    }

    /// The address, in this rank's flat range, of LSA rank `peer`'s byte `offset` (NCCL's
    /// `ncclGetLsaDevicePointer`): a device address on the GPU, a host address on the CPU.
    /// Errors when `peer` is not in the LSA team or `offset` is not below its size.
    pub fn lsa_ptr(&self, peer: u32, offset: usize) -> Result<u64> {
        const OP: &str = "window lsa_ptr";
        let d = &self.inner.desc;
        let rank = self.inner.world_rank;
        let Some(&size) = self.inner.sizes.get(peer as usize) else {
            return Err(Error::InvalidArgument {
                op: OP,
                rank,
                what: format!("peer {peer} is not in the LSA team of {} ranks", d.nranks),
            });
        };
        if offset as u64 >= size {
            return Err(Error::WindowBounds {
                op: OP,
                rank,
                peer,
                offset: offset as u64,
                size,
            });
        }
        let delta = (peer as i64 - d.rank as i64).wrapping_mul(d.stride as i64);
        Ok(d.local.wrapping_add(delta as u64).wrapping_add(offset as u64))
    }

    /// As [`Window::lsa_ptr`] for world rank `peer` (NCCL's `ncclGetPeerDevicePointer`);
    /// the LSA team is the world here.
    pub fn world_ptr(&self, peer: u32, offset: usize) -> Result<u64> {
        let lsa0 = self.inner.world_rank - self.inner.desc.rank;
        match peer.checked_sub(lsa0) {
            Some(p) if p < self.inner.desc.nranks => self.lsa_ptr(p, offset),
            _ => Err(Error::InvalidArgument {
                op: "window world_ptr",
                rank: self.inner.world_rank,
                what: format!("world rank {peer} is not in this rank's LSA team (not load/store reachable)"),
            }),
        }
    }
}

impl Comm {
    /// Register `[ptr, ptr + bytes)` (memory from [`Comm::mem_alloc`], possibly over
    /// several adjacent blocks) as a symmetric window (NCCL's `ncclCommWindowRegister`).
    /// Collective: every rank calls it (its own buffer, sizes may differ), each from its own
    /// thread or process. `flags`: [`WIN_DEFAULT`], [`WIN_COLL_SYMMETRIC`] (ranks promise
    /// equal offsets in collectives), [`WIN_STRICT_ORDERING`] (recorded; one node needs no
    /// stronger ordering); every rank must pass the same flags. See the module doc for the
    /// layout. Errors: [`Error::NotWindowMemory`] on the rank whose range is not `mem_alloc`
    /// memory (and [`Error::Window`] naming that rank on the others), [`Error::Window`] when
    /// the ranks' buffers cannot share one layout, control-channel timeouts and aborts.
    pub fn register_window(&self, ptr: u64, bytes: usize, flags: u32) -> Result<Window> {
        let w = register::register(self, "register_window", &[(ptr, bytes)], flags)?;
        // The first window also makes the symmetric kernels' scratch (collective as well).
        self.sym_setup()?;
        Ok(w)
    }

    /// One window over several buffers `segs` (`(address, bytes)`, each inside
    /// `mem_alloc` memory), mapped one after another (see the module doc). Collective as
    /// [`Comm::register_window`]; ranks may pass different numbers of segments.
    pub fn register_window_segments(&self, segs: &[(u64, usize)], flags: u32) -> Result<Window> {
        let w = register::register(self, "register_window_segments", segs, flags)?;
        self.sym_setup()?;
        Ok(w)
    }

    /// Deregister a window of this communicator (collective): waits for the work of this
    /// rank's streams, meets the other ranks (so no rank's kernels use it any more), then
    /// unmaps every piece and releases the memory references in reverse order. The window
    /// is unmapped here even when the meeting fails (the error is returned).
    pub fn deregister_window(&self, w: Window) -> Result<()> {
        const OP: &str = "deregister_window";
        if w.inner.comm_id != self.windows().id {
            return Err(Error::InvalidArgument {
                op: OP,
                rank: self.rank(),
                what: "the window was registered on another communicator".into(),
            });
        }
        let synced = self.sync_launched();
        let met = self.host_barrier(OP);
        self.windows().remove(&w.inner);
        let m = w.inner.mapping.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(m);
        tracing::debug!(target: "oxccl::window", rank = self.rank(), "window deregistered");
        synced.and(met)
    }

    /// The registered window of this rank holding user buffer `[addr, addr + bytes)` (an
    /// address from `mem_alloc` inside a registered segment, or an address of this rank's
    /// flat range), with the buffer's offset in the window.
    pub(crate) fn find_window(&self, addr: u64, bytes: usize) -> Option<(WindowDesc, u64)> {
        self.windows()
            .live()
            .into_iter()
            .filter(|w| w.is_mapped())
            .find_map(|w| w.offset_of(addr, bytes).map(|o| (w.desc, o)))
    }

    /// Test access to [`Comm::find_window`] (the symmetric collectives' lookup).
    #[doc(hidden)]
    pub fn find_window_for_tests(&self, addr: u64, bytes: usize) -> Option<(WindowDesc, u64)> {
        self.find_window(addr, bytes)
    }
}
