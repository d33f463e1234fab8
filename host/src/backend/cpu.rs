//! The CPU backend: device memory is host memory, a stream is a worker thread running
//! enqueued work in order, and a kernel launch runs the device crate's kernel function on
//! one host thread per block. Ranks' streams run concurrently; device wait loops back off
//! (yield, then sleep), so many ranks make progress on a machine with few cores.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Instant;

use oxccl_device::abi::{AllReduceArgs, CollArgs, P2pArgs};
use oxccl_device::exec::ExecCtx;
use oxccl_device::kernels::{all_reduce_dispatch, coll_dispatch, p2p_dispatch};

use std::os::fd::OwnedFd;

use super::{Backend, BackendKind, CollKernel, Event, Grid, MappedMem, PhysHandle, Stream, WinAlloc};
use crate::error::{Error, Result};

/// Logical devices the CPU backend offers (any index below is accepted).
pub const CPU_DEVICES: usize = 64;
const ALIGN: usize = 4096;

type Job = Box<dyn FnOnce() -> Result<()> + Send>;

/// A stream: a worker thread and its queue.
pub struct CpuStream {
    pub device: usize,
    tx: Mutex<Option<Sender<Job>>>,
    state: Arc<(Mutex<StreamState>, Condvar)>,
    worker: Mutex<Option<thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct StreamState {
    enqueued: u64,
    done: u64,
    /// First failure since the last synchronize.
    error: Option<Error>,
}

impl CpuStream {
    fn new(device: usize) -> Result<Arc<Self>> {
        let (tx, rx) = channel::<Job>();
        let state: Arc<(Mutex<StreamState>, Condvar)> = Arc::default();
        let st = state.clone();
        let worker = thread::Builder::new()
            .name(format!("oxccl-cpu-stream-d{device}"))
            .spawn(move || {
                for job in rx {
                    let r = job();
                    let (m, cv) = &*st;
                    let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
                    s.done += 1;
                    if let Err(e) = r {
                        s.error.get_or_insert(e);
                    }
                    cv.notify_all();
                }
            })
            .map_err(|e| Error::Init(format!("spawning a cpu stream thread for device {device}: {e}")))?;
        Ok(Arc::new(CpuStream {
            device,
            tx: Mutex::new(Some(tx)),
            state,
            worker: Mutex::new(Some(worker)),
        }))
    }

    fn enqueue(&self, job: Job) {
        let (m, _) = &*self.state;
        m.lock().unwrap_or_else(|p| p.into_inner()).enqueued += 1;
        if let Some(tx) = &*self.tx.lock().unwrap_or_else(|p| p.into_inner()) {
            // The worker lives as long as the sender; a send cannot fail before drop.
            let _ = tx.send(job);
        }
    }

    fn synchronize(&self) -> Result<()> {
        let (m, cv) = &*self.state;
        let mut s = m.lock().unwrap_or_else(|p| p.into_inner());
        while s.done < s.enqueued {
            s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        match s.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for CpuStream {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = w.join();
        }
    }
}

/// An event: the instant the stream reached it.
#[derive(Default)]
pub struct CpuEvent {
    at: Mutex<Option<Instant>>,
    cv: Condvar,
}

impl CpuEvent {
    fn wait(&self) -> Instant {
        let mut g = self.at.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(t) = *g {
                return t;
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The CPU backend.
#[derive(Debug, Default)]
pub struct CpuBackend {
    /// Directed pairs `(a, b)`: logical device `a` is made unable to access device `b`'s
    /// memory (fault injection for the P2P checks; see [`CpuBackend::with_refused_peers`]).
    refused: Vec<(usize, usize)>,
    /// Host threads (blocks) per rank per collective (`OXCCL_CPU_BLOCKS`, read when the
    /// backend is made).
    blocks: u32,
}

/// The environment variable [`CpuBackend::new`] reads refused pairs from (see
/// [`parse_refused_peers`]).
pub const REFUSE_PEERS_ENV: &str = "OXCCL_CPU_P2P_REFUSE";

impl CpuBackend {
    /// A CPU backend; its logical devices all reach each other, except the pairs
    /// `OXCCL_CPU_P2P_REFUSE` names (fault injection, see [`parse_refused_peers`]; a value
    /// that does not parse is ignored with a warning).
    pub fn new() -> Self {
        let refused = match std::env::var(REFUSE_PEERS_ENV) {
            Ok(v) => parse_refused_peers(&v).unwrap_or_else(|e| {
                tracing::warn!(target: "oxccl::init", "{REFUSE_PEERS_ENV}: {e}; ignored");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        CpuBackend {
            refused,
            blocks: crate::settings::cpu_blocks(),
        }
    }

    /// A CPU backend on which device `a` cannot access device `b`'s memory for every
    /// `(a, b)` of `pairs` (directed; list both orders to refuse both ways): what a machine
    /// without P2P between some GPUs looks like to communicator init and `oxccl topo`.
    pub fn with_refused_peers(pairs: &[(usize, usize)]) -> Self {
        CpuBackend {
            refused: pairs.to_vec(),
            blocks: crate::settings::cpu_blocks(),
        }
    }
}

/// Refused pairs as `OXCCL_CPU_P2P_REFUSE` writes them: comma-separated `a>b` (device `a`
/// cannot access `b`'s memory) or `a<>b` (neither way), e.g. `0<>2,1>3`.
pub fn parse_refused_peers(s: &str) -> std::result::Result<Vec<(usize, usize)>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad device {t:?} in {part:?} (expected a>b or a<>b)"))
        };
        if let Some((a, b)) = part.split_once("<>") {
            let (a, b) = (num(a)?, num(b)?);
            v.push((a, b));
            v.push((b, a));
        } else if let Some((a, b)) = part.split_once('>') {
            v.push((num(a)?, num(b)?));
        } else {
            return Err(format!("bad pair {part:?} (expected a>b or a<>b)"));
        }
    }
    Ok(v)
}

fn cpu_stream(s: &Stream) -> &Arc<CpuStream> {
    match s {
        Stream::Cpu(c) => c,
        Stream::Gpu(_) => unreachable!("streams are created by the backend that uses them"),
    }
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn device_count(&self) -> usize {
        CPU_DEVICES
    }

    fn device_name(&self, device: usize) -> String {
        format!("cpu device {device} (host threads)")
    }

    fn can_access_peer(&self, a: usize, b: usize) -> Result<bool> {
        Ok(a == b || !self.refused.contains(&(a, b)))
    }

    fn alloc(&self, device: usize, bytes: usize) -> Result<u64> {
        let layout = Layout::from_size_align(bytes.max(1), ALIGN).map_err(|e| Error::Alloc {
            bytes,
            device,
            backend: "cpu",
            message: e.to_string(),
        })?;
        // SAFETY: non-zero size layout.
        let p = unsafe { alloc_zeroed(layout) };
        if p.is_null() {
            return Err(Error::Alloc {
                bytes,
                device,
                backend: "cpu",
                message: "out of memory".into(),
            });
        }
        Ok(p as u64)
    }

    fn alloc_shared(&self, device: usize, bytes: usize) -> Result<super::SharedMem> {
        super::cpu_shm::alloc(device, bytes)
    }

    fn import_shared(
        &self,
        device: usize,
        fd: &std::os::fd::OwnedFd,
        bytes: usize,
    ) -> Result<super::SharedMem> {
        super::cpu_shm::import(device, fd, bytes)
    }

    unsafe fn free_shared(&self, mem: super::SharedMem) {
        // SAFETY: caller contract.
        unsafe { super::cpu_shm::free(mem) }
    }

    unsafe fn free(&self, _device: usize, ptr: u64, bytes: usize) {
        let layout = Layout::from_size_align(bytes.max(1), ALIGN).expect("layout was valid at alloc");
        dealloc(ptr as *mut u8, layout);
    }

    fn alloc_mapped(&self, device: usize, bytes: usize) -> Result<MappedMem> {
        let p = self.alloc(device, bytes)?;
        Ok(MappedMem {
            host: p as *mut u8,
            dev: p,
            bytes,
        })
    }

    unsafe fn free_mapped(&self, device: usize, mem: MappedMem) {
        self.free(device, mem.dev, mem.bytes)
    }

    fn upload(&self, _device: usize, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: the caller passes an allocation of at least src.len() bytes; no kernel
        // touches it concurrently (the API synchronizes before uploads).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    fn download(&self, _device: usize, dst: &mut [u8], src: u64) -> Result<()> {
        // SAFETY: as in upload.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn create_stream(&self, device: usize) -> Result<Stream> {
        Ok(Stream::Cpu(CpuStream::new(device)?))
    }

    fn synchronize(&self, stream: &Stream) -> Result<()> {
        cpu_stream(stream).synchronize()
    }

    fn copy_async(&self, stream: &Stream, dst: u64, src: u64, bytes: usize) -> Result<()> {
        cpu_stream(stream).enqueue(Box::new(move || {
            // SAFETY: stream-ordered copy between live allocations (caller contract).
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
            Ok(())
        }));
        Ok(())
    }

    fn fill_async(&self, stream: &Stream, dst: u64, value: u8, bytes: usize) -> Result<()> {
        cpu_stream(stream).enqueue(Box::new(move || {
            // SAFETY: stream-ordered fill of a live allocation (caller contract).
            unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
            Ok(())
        }));
        Ok(())
    }

    fn launch_all_reduce(&self, stream: &Stream, grid: Grid, args: &AllReduceArgs) -> Result<()> {
        let args = *args;
        cpu_stream(stream).enqueue(Box::new(move || {
            run_grid(grid, "all_reduce", args.comm.rank, move |ctx| {
                // SAFETY: the communicator built `args` from live buffers and inboxes.
                unsafe { all_reduce_dispatch(ctx, &args) }
            })
        }));
        Ok(())
    }

    fn max_blocks_per_rank(&self, _ranks_per_device: usize, _dtype: oxccl_device::abi::DataType) -> u32 {
        self.blocks
    }

    fn launch_sym(&self, stream: &Stream, grid: Grid, args: &oxccl_device::abi::SymArgs) -> Result<()> {
        let args = *args;
        cpu_stream(stream).enqueue(Box::new(move || {
            run_grid(grid, "symmetric collective", args.scratch.rank, move |ctx| {
                // SAFETY: the communicator built `args` from registered windows.
                unsafe { oxccl_device::kernels::sym_dispatch(ctx, &args) }
            })
        }));
        Ok(())
    }

    fn launch_sym_init(
        &self,
        stream: &Stream,
        grid: Grid,
        args: &oxccl_device::abi::SymInitArgs,
    ) -> Result<()> {
        let args = *args;
        cpu_stream(stream).enqueue(Box::new(move || {
            run_grid(grid, "symmetric scratch init", 0, move |ctx| {
                // SAFETY: the rank's own Lamport lines, which no kernel uses yet.
                unsafe { oxccl_device::kernels::sym_lamport_init_dispatch(ctx, &args) }
            })
        }));
        Ok(())
    }

    fn max_sym_blocks_per_rank(
        &self,
        ranks_per_device: usize,
        proto: u32,
        dtype: oxccl_device::abi::DataType,
    ) -> u32 {
        let _ = (proto, dtype);
        self.max_blocks_per_rank(ranks_per_device, dtype)
    }

    fn launch_coll(&self, stream: &Stream, grid: Grid, kernel: CollKernel, args: &CollArgs) -> Result<()> {
        let args = *args;
        let op = crate::coll::coll_name(args.coll);
        debug_assert!(oxccl_device::abi::DataType::from_u32(args.dtype)
            .and_then(|dt| CollKernel::of(args.coll, dt))
            .is_some_and(|k| k == kernel));
        cpu_stream(stream).enqueue(Box::new(move || {
            run_grid(grid, op, args.comm.rank, move |ctx| {
                // SAFETY: the communicator built `args` from live buffers and inboxes.
                unsafe { coll_dispatch(ctx, &args) }
            })
        }));
        Ok(())
    }

    fn max_coll_blocks_per_rank(&self, _ranks_per_device: usize, _kernel: CollKernel) -> u32 {
        self.blocks
    }

    fn launch_p2p(&self, stream: &Stream, grid: Grid, args: &P2pArgs) -> Result<()> {
        let args = *args;
        cpu_stream(stream).enqueue(Box::new(move || {
            run_grid(grid, "send/recv", args.comm.rank, move |ctx| {
                // SAFETY: the communicator built `args` from live buffers and inboxes.
                unsafe { p2p_dispatch(ctx, &args) }
            })
        }));
        Ok(())
    }

    fn max_p2p_blocks_per_rank(&self, _ranks_per_device: usize) -> u32 {
        // Every block is a host thread: they all run at once whatever their number.
        oxccl_device::abi::P2P_MAX_OPS as u32
    }

    fn block_threads(&self) -> u32 {
        1
    }

    fn win_granularity(&self, _device: usize) -> Result<usize> {
        Ok(super::cpu_win::granularity())
    }

    fn win_whole_allocations(&self) -> bool {
        false
    }

    fn win_alloc(&self, device: usize, bytes: usize) -> Result<WinAlloc> {
        super::cpu_win::alloc(device, bytes)
    }

    unsafe fn win_free(&self, alloc: WinAlloc) {
        // SAFETY: caller contract.
        unsafe { super::cpu_win::free(alloc) }
    }

    fn win_retain(&self, alloc: &WinAlloc) -> Result<PhysHandle> {
        Ok(alloc.phys.clone())
    }

    fn win_export(&self, device: usize, phys: &PhysHandle) -> Result<OwnedFd> {
        match phys {
            PhysHandle::Memfd(fd) => fd.try_clone().map_err(|e| Error::WindowMap {
                op: "window export",
                device,
                what: format!("dup of a memfd: {e}"),
            }),
            PhysHandle::Vmm(_) => Err(Error::WindowMap {
                op: "window export",
                device,
                what: "a gpu handle passed to the cpu backend".into(),
            }),
        }
    }

    fn win_import(&self, device: usize, fd: OwnedFd, bytes: usize) -> Result<PhysHandle> {
        super::cpu_win::import(device, fd, bytes)
    }

    unsafe fn win_release(&self, _device: usize, phys: PhysHandle) {
        drop(phys);
    }

    fn win_reserve(&self, device: usize, bytes: usize, align: usize) -> Result<u64> {
        super::cpu_win::reserve(device, bytes, align)
    }

    unsafe fn win_unreserve(&self, _device: usize, base: u64, bytes: usize) {
        // SAFETY: caller contract.
        unsafe { super::cpu_win::unreserve(base, bytes) }
    }

    unsafe fn win_map(
        &self,
        device: usize,
        at: u64,
        phys: &PhysHandle,
        offset: usize,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: caller contract.
        unsafe { super::cpu_win::map(device, at, phys, offset, bytes) }
    }

    unsafe fn win_unmap(&self, _device: usize, at: u64, bytes: usize) {
        // SAFETY: caller contract.
        unsafe { super::cpu_win::unmap(at, bytes) }
    }

    fn record(&self, stream: &Stream) -> Result<Event> {
        let ev = Arc::new(CpuEvent::default());
        let e = ev.clone();
        cpu_stream(stream).enqueue(Box::new(move || {
            *e.at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            e.cv.notify_all();
            Ok(())
        }));
        Ok(Event::Cpu(ev))
    }

    fn elapsed(&self, a: &Event, b: &Event) -> Result<f64> {
        match (a, b) {
            (Event::Cpu(a), Event::Cpu(b)) => Ok(b.wait().duration_since(a.wait()).as_secs_f64()),
            _ => Err(Error::Init(
                "events of another backend passed to the cpu backend".into(),
            )),
        }
    }
}

/// Run one kernel launch: a host thread per block, joined; a panic (device trap) becomes an
/// error of the operation.
fn run_grid(grid: Grid, op: &'static str, rank: u32, f: impl Fn(&ExecCtx) + Sync) -> Result<()> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        thread::scope(|s| {
            for b in 1..grid.blocks {
                let f = &f;
                s.spawn(move || f(&ExecCtx::host_block(b, grid.blocks)));
            }
            f(&ExecCtx::host_block(0, grid.blocks));
        })
    }));
    r.map_err(|p| Error::CpuKernelPanic {
        op,
        rank,
        message: p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into()),
    })
}
