//! Execution backends: where memory lives and where kernels run.
//!
//! One trait, two implementations: [`gpu::GpuBackend`] (CUDA driver, the PTX built from
//! `device/`) and [`cpu::CpuBackend`] (the same device functions on host threads, one
//! thread per block, each stream a worker thread). Addresses are `u64` in both: device
//! addresses on the GPU, host addresses on the CPU.

pub mod cpu;
mod cpu_shm;
mod cpu_win;
pub mod gpu;
mod gpu_graph;
pub mod gpu_module;
mod gpu_vmm;
pub mod shared;
pub mod winmem;

use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::Arc;

pub use gpu_graph::GpuGraph;
use oxccl_device::abi::{AllReduceArgs, CollArgs, P2pArgs, SymArgs, SymInitArgs};
pub use oxccl_device::kernels::CollKernel;
pub use shared::SharedMem;
pub use winmem::{PhysHandle, WinAlloc};

use crate::error::Result;

/// Which backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Gpu,
    Cpu,
}

impl BackendKind {
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Gpu => "gpu",
            BackendKind::Cpu => "cpu",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Launch geometry (x only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub blocks: u32,
    pub threads: u32,
}

/// Host-visible memory the device can also address (abort flags, error records).
#[derive(Clone, Copy, Debug)]
pub struct MappedMem {
    pub host: *mut u8,
    pub dev: u64,
    pub bytes: usize,
}

// SAFETY: a plain address pair; synchronization is the users' business (atomics).
unsafe impl Send for MappedMem {}
// SAFETY: as above.
unsafe impl Sync for MappedMem {}

/// A stream: operations on it run in order.
#[derive(Clone)]
pub enum Stream {
    Gpu(Arc<gpu::GpuStream>),
    Cpu(Arc<cpu::CpuStream>),
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stream::Gpu(s) => write!(f, "Stream::Gpu(device {})", s.device),
            Stream::Cpu(s) => write!(f, "Stream::Cpu(device {})", s.device),
        }
    }
}

/// A point in a stream's work (a CUDA event on the GPU, a recorded instant on the CPU).
pub enum Event {
    Gpu(gpu::GpuEvent),
    Cpu(Arc<cpu::CpuEvent>),
}

/// What oxccl needs from an execution backend.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Devices usable (GPUs, or logical CPU "devices").
    fn device_count(&self) -> usize;
    /// Human-readable description of a device.
    fn device_name(&self, device: usize) -> String;
    /// Zeroed device memory, 4096-byte aligned.
    fn alloc(&self, device: usize, bytes: usize) -> Result<u64>;
    /// Free memory from [`Backend::alloc`].
    ///
    /// # Safety
    /// `ptr` came from `alloc(device, bytes)` and is no longer used by any kernel.
    unsafe fn free(&self, device: usize, ptr: u64, bytes: usize);
    /// Zeroed memory the host can read/write while kernels run.
    fn alloc_mapped(&self, device: usize, bytes: usize) -> Result<MappedMem>;
    /// Free memory from [`Backend::alloc_mapped`].
    ///
    /// # Safety
    /// No kernel uses it any more.
    unsafe fn free_mapped(&self, device: usize, mem: MappedMem);
    /// Zeroed memory that peers in other processes can map: its descriptor
    /// ([`SharedMem::fd`]) exports it (see [`shared`]).
    fn alloc_shared(&self, device: usize, bytes: usize) -> Result<SharedMem>;
    /// Map a segment another process exported (its descriptor and the size it reported) for
    /// use on `device`.
    fn import_shared(&self, device: usize, fd: &OwnedFd, bytes: usize) -> Result<SharedMem>;
    /// Unmap a segment from [`Backend::alloc_shared`] or [`Backend::import_shared`].
    ///
    /// # Safety
    /// No kernel uses it any more.
    unsafe fn free_shared(&self, mem: SharedMem);
    /// Copy host bytes to device memory (synchronous).
    fn upload(&self, device: usize, dst: u64, src: &[u8]) -> Result<()>;
    /// Copy device memory to host bytes (synchronous).
    fn download(&self, device: usize, dst: &mut [u8], src: u64) -> Result<()>;
    /// A new stream on `device`.
    fn create_stream(&self, device: usize) -> Result<Stream>;
    /// Wait for all work on `stream`.
    fn synchronize(&self, stream: &Stream) -> Result<()>;
    /// Enqueue a device-to-device copy on `stream`.
    fn copy_async(&self, stream: &Stream, dst: u64, src: u64, bytes: usize) -> Result<()>;
    /// Enqueue a fill of `bytes` bytes at `dst` with `value` on `stream` (device memory
    /// writes only: the write-bandwidth reference of `oxccl perf --write-ref`).
    fn fill_async(&self, stream: &Stream, dst: u64, value: u8, bytes: usize) -> Result<()>;
    /// Enqueue an all-reduce kernel on `stream`: the LL kernel when `args.algo` is `ALGO_LL`,
    /// else the load/store one.
    fn launch_all_reduce(&self, stream: &Stream, grid: Grid, args: &AllReduceArgs) -> Result<()>;
    /// Largest grid (blocks) the all-reduce of `dtype` may use per rank when
    /// `ranks_per_device` ranks share one device and their kernels must all be resident at
    /// once (they wait on each other).
    fn max_blocks_per_rank(&self, ranks_per_device: usize, dtype: oxccl_device::abi::DataType) -> u32;
    /// Enqueue the kernel of a [`CollArgs`] collective (every one but the all-reduce) on `stream`
    /// (`kernel` is [`CollKernel::of`] `args.coll` and `args.dtype`).
    fn launch_coll(&self, stream: &Stream, grid: Grid, kernel: CollKernel, args: &CollArgs) -> Result<()>;
    /// As [`Backend::max_blocks_per_rank`], for `kernel`.
    fn max_coll_blocks_per_rank(&self, ranks_per_device: usize, kernel: CollKernel) -> u32;
    /// Enqueue the send/recv kernel of one group launch on `stream` (`grid.blocks` is the sum
    /// of the operations' lanes).
    fn launch_p2p(&self, stream: &Stream, grid: Grid, args: &P2pArgs) -> Result<()>;
    /// Most blocks one send/recv launch may use per rank when `ranks_per_device` ranks share
    /// one device (all of them must be resident at once: the blocks wait on each other).
    fn max_p2p_blocks_per_rank(&self, ranks_per_device: usize) -> u32;
    /// Enqueue the symmetric kernel of `args.proto` and `args.dtype` on `stream`
    /// (`oxccl_device::coll::sym`).
    fn launch_sym(&self, stream: &Stream, grid: Grid, args: &SymArgs) -> Result<()>;
    /// Enqueue the Lamport poisoning kernel on `stream`.
    fn launch_sym_init(&self, stream: &Stream, grid: Grid, args: &SymInitArgs) -> Result<()>;
    /// As [`Backend::max_blocks_per_rank`], for the symmetric kernel of `proto` and `dtype`.
    fn max_sym_blocks_per_rank(
        &self,
        ranks_per_device: usize,
        proto: u32,
        dtype: oxccl_device::abi::DataType,
    ) -> u32;
    /// As [`Backend::max_sym_blocks_per_rank`], for the grouped kernel of `proto` and
    /// `dtype` (`oxccl_device::abi::sym_grouped_kernel_runs`; never above the general
    /// kernel's bound).
    fn max_sym_grouped_blocks_per_rank(
        &self,
        ranks_per_device: usize,
        proto: u32,
        dtype: oxccl_device::abi::DataType,
    ) -> u32 {
        self.max_sym_blocks_per_rank(ranks_per_device, proto, dtype)
    }
    /// Threads per block of the all-reduce (and of every other collective kernel).
    fn block_threads(&self) -> u32;
    /// Whether device `a` can map and access device `b`'s memory (asks only, enables
    /// nothing; `cuDeviceCanAccessPeer` on the GPU). `a == b` is always true.
    fn can_access_peer(&self, _a: usize, _b: usize) -> Result<bool> {
        Ok(true)
    }
    /// Let devices `a` and `b` access each other's memory; `false` if they cannot.
    fn enable_peer_access(&self, a: usize, b: usize) -> Result<bool> {
        Ok(self.can_access_peer(a, b)? && self.can_access_peer(b, a)?)
    }
    /// The granularity of window mappings on `device`: allocations, reservations and mapped
    /// pieces are multiples of it (the page size on the CPU, the VMM granularity, 2 MiB on
    /// current GPUs).
    fn win_granularity(&self, device: usize) -> Result<usize>;
    /// Whether only whole allocations can be mapped into a window (the GPU: `cuMemMap` takes
    /// offset 0); otherwise any granularity-aligned sub-range of one can.
    fn win_whole_allocations(&self) -> bool;
    /// Window-ready memory (NCCL's `ncclMemAlloc`): zeroed, at least `bytes` rounded up to
    /// [`Backend::win_granularity`], mapped read/write on `device`, with a physical handle
    /// that windows map again (`crate::backend::winmem`).
    fn win_alloc(&self, device: usize, bytes: usize) -> Result<WinAlloc>;
    /// Unmap and release an allocation from [`Backend::win_alloc`] (windows still mapping
    /// its memory keep it alive).
    ///
    /// # Safety
    /// No kernel uses `alloc.ptr` any more.
    unsafe fn win_free(&self, alloc: WinAlloc);
    /// A new reference to the physical memory of `alloc`.
    fn win_retain(&self, alloc: &WinAlloc) -> Result<PhysHandle>;
    /// A descriptor exporting `phys` to another process.
    fn win_export(&self, device: usize, phys: &PhysHandle) -> Result<OwnedFd>;
    /// A reference to the physical memory a peer exported (`bytes` as it reported them).
    fn win_import(&self, device: usize, fd: OwnedFd, bytes: usize) -> Result<PhysHandle>;
    /// Release a reference from [`Backend::win_retain`] or [`Backend::win_import`].
    ///
    /// # Safety
    /// Not used by any mapping call afterwards (mappings made with it may stay).
    unsafe fn win_release(&self, device: usize, phys: PhysHandle);
    /// Reserve `bytes` of address space (inaccessible until mapped), aligned to `align`.
    fn win_reserve(&self, device: usize, bytes: usize, align: usize) -> Result<u64>;
    /// Release a reservation from [`Backend::win_reserve`] (nothing may be mapped in it).
    ///
    /// # Safety
    /// Nothing uses the range any more.
    unsafe fn win_unreserve(&self, device: usize, base: u64, bytes: usize);
    /// Map `bytes` of `phys` starting at its byte `offset` at `at` with read/write access
    /// from `device`.
    ///
    /// # Safety
    /// `[at, at + bytes)` lies inside a reservation of this backend with nothing mapped
    /// there; `offset` and `bytes` are multiples of the granularity and inside `phys`.
    unsafe fn win_map(
        &self,
        device: usize,
        at: u64,
        phys: &PhysHandle,
        offset: usize,
        bytes: usize,
    ) -> Result<()>;
    /// Undo one [`Backend::win_map`] (the range stays reserved).
    ///
    /// # Safety
    /// Nothing uses the mapping any more.
    unsafe fn win_unmap(&self, device: usize, at: u64, bytes: usize);
    /// Record an event on `stream` (reached when the work enqueued before it completes).
    fn record(&self, stream: &Stream) -> Result<Event>;
    /// Seconds from `a` to `b` (waits for `b`).
    fn elapsed(&self, a: &Event, b: &Event) -> Result<f64>;
    /// The GPU backend, for what only it has (CUDA graph capture, `gpu_graph`).
    fn as_gpu(&self) -> Option<&gpu::GpuBackend> {
        None
    }
}

/// Choose a backend: the GPU when a driver and a device are present (unless
/// `OXCCL_BACKEND=cpu`), otherwise the CPU. Returns why the GPU was not used.
pub fn auto() -> (Arc<dyn Backend>, Option<String>) {
    let want = crate::settings::backend_choice();
    if want == "cpu" {
        return (Arc::new(cpu::CpuBackend::new()), Some("OXCCL_BACKEND=cpu".into()));
    }
    match gpu::GpuBackend::new() {
        Ok(g) => (Arc::new(g), None),
        Err(e) => (Arc::new(cpu::CpuBackend::new()), Some(e.to_string())),
    }
}
