//! The GPU backend: CUDA driver API (cudarc, loaded at run time), kernels from the PTX that
//! `oxccl-builder` generated from `device/` (embedded at compile time from `ptx/oxccl.ptx`).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};
use oxccl_device::abi::{
    sym_grouped_kernel_runs, sym_sum_kernel_runs, AllReduceArgs, CollArgs, DataType, P2pArgs, SymArgs,
    SymInitArgs, ALGO_LL, SYM_FLAG_EARLY_NEXT, SYM_PROTO_LAMPORT, SYM_PROTO_LL, SYM_PROTO_SIMPLE,
};
use oxccl_device::kernels::{
    all_reduce_kernel_name, all_reduce_ll_kernel_name, sym_grouped_kernel_name, sym_kernel_name,
    sym_sum_kernel_name, ALL_REDUCE_BLOCK_THREADS, P2P_KERNEL, SYM_LAMPORT_INIT_KERNEL,
};

use super::{Backend, BackendKind, CollKernel, Event, Grid, MappedMem, PhysHandle, Stream, WinAlloc};
use crate::error::{Error, Result};
use crate::settings::CopyStores;
use crate::sys::cuda::{self, err};

/// The PTX of the device crate, as committed under `ptx/`.
pub static PTX: &str = include_str!("../../../ptx/oxccl.ptx");

/// The same kernels assembled for sm_90 by the builder (embedded when it matches `PTX`).
#[cfg(oxccl_cubin)]
pub static CUBIN_SM90: Option<&[u8]> = Some(include_bytes!("../../../ptx/oxccl.sm_90.cubin"));
/// No up-to-date cubin at build time: the driver JIT-compiles the PTX.
#[cfg(not(oxccl_cubin))]
pub static CUBIN_SM90: Option<&[u8]> = None;

/// Multiprocessors on the device (co-residency budget for concurrent rank kernels).
const DEFAULT_SMS: u32 = 132;
/// L2 bytes assumed when the driver does not say (an H100's 50 MiB).
const DEFAULT_L2_BYTES: u64 = 50 << 20;

/// A CUDA stream (non-blocking: no implicit sync with the legacy default stream).
pub struct GpuStream {
    pub device: usize,
    raw: usize,
    /// Whether oxccl created it (and destroys it on drop); false for a caller's stream
    /// wrapped by [`GpuBackend::wrap_stream`] (the C ABI's `cudaStream_t`).
    owned: bool,
}

impl GpuStream {
    pub(super) fn raw(&self) -> sys::CUstream {
        self.raw as sys::CUstream
    }
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: created by cuStreamCreate; errors at teardown are ignored (no panic in Drop).
            let _ = unsafe { result::stream::destroy(self.raw()) };
        }
    }
}

/// A CUDA event with timing.
pub struct GpuEvent {
    raw: usize,
    /// The device of the stream it was recorded on.
    device: usize,
}

impl Drop for GpuEvent {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate.
        let _ = unsafe { result::event::destroy(self.raw as sys::CUevent) };
    }
}

pub(super) struct DeviceState {
    pub(super) ctx: usize,
    /// The loaded oxccl module.
    pub(super) module: usize,
    all_reduce: HashMap<DataType, usize>,
    /// The LL all-reduce kernels (`ALGO_LL`).
    all_reduce_ll: HashMap<DataType, usize>,
    sms: u32,
    /// L2 cache bytes (`OXCCL_COPY_STORES=auto` streams the stores of collectives larger).
    l2_bytes: u64,
    /// Blocks of each all-reduce kernel (the smaller of the load/store and the LL kernel's)
    /// that fit on one SM at once.
    blocks_per_sm: HashMap<DataType, u32>,
    /// The [`CollArgs`] collectives' kernels (copy and per-dtype reduce) and their blocks per
    /// SM.
    colls: HashMap<CollKernel, (usize, u32)>,
    /// The send/recv kernel and its blocks per SM.
    p2p: (usize, u32),
    /// The symmetric kernels by (protocol, data type), with their blocks per SM (for LL and
    /// Lamport the lower of the general kernel's and the `Sum` kernel's), the one-shot `Sum`
    /// all-reduce kernels of LL and Lamport (`sym_sum_kernel_runs`), and the Lamport
    /// poisoning kernel.
    sym: HashMap<(u32, DataType), (usize, u32)>,
    sym_sum: HashMap<(u32, DataType), usize>,
    /// The grouped kernels of LL and Lamport (`sym_grouped_kernel_runs`) and their blocks
    /// per SM (more registers than the others: a grid runs grouped only within this bound).
    sym_grouped: HashMap<(u32, DataType), (usize, u32)>,
    sym_init: usize,
}

/// The GPU backend.
pub struct GpuBackend {
    count: usize,
    devices: Mutex<HashMap<usize, Arc<DeviceState>>>,
    /// Launch the empty kernel in place of every kernel (see `gpu_graph`).
    pub(super) empty: std::sync::atomic::AtomicBool,
    /// `OXCCL_COPY_STORES`: when the copy collectives run [`CollKernel::CopyCs`].
    copy_stores: CopyStores,
}

impl std::fmt::Debug for GpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuBackend({} devices)", self.count)
    }
}

pub(super) fn gpu_stream(s: &Stream) -> Result<&Arc<GpuStream>> {
    match s {
        Stream::Gpu(g) => Ok(g),
        Stream::Cpu(_) => Err(Error::Init("a cpu stream was passed to the gpu backend".into())),
    }
}

impl GpuBackend {
    /// Load the driver and count devices; fails with a typed error without a driver or GPU.
    pub fn new() -> Result<Self> {
        let count = cuda::device_count()?;
        if count == 0 {
            return Err(Error::NoCudaDevice);
        }
        Ok(GpuBackend {
            count,
            devices: Mutex::new(HashMap::new()),
            empty: std::sync::atomic::AtomicBool::new(false),
            copy_stores: crate::settings::copy_stores(),
        })
    }

    /// The kernel launched for `kernel` with `args`: the streaming-store copy kernel in place
    /// of the plain one under `OXCCL_COPY_STORES=cs`, or under `auto` when the collective's
    /// data (`count` x element size x ranks: an all-gather's output, a broadcast's or
    /// scatter's fan-out) is at least the L2 size, so that its stores could not stay in L2
    /// for whatever runs next and only evict other lines. Measured on an H100 (8 ranks,
    /// 256 MiB all-gather): streaming stores 911 us against 919 (`scripts/copy-stores.sh`,
    /// `benches/results/2026-12-06-copy-stores-h100.md`).
    fn coll_kernel(&self, st: &DeviceState, kernel: CollKernel, args: &CollArgs) -> CollKernel {
        let stream = match self.copy_stores {
            CopyStores::WriteBack => false,
            CopyStores::Streaming => true,
            CopyStores::Auto => {
                let size = DataType::from_u32(args.dtype).map_or(0, |d| d.size()) as u64;
                args.count
                    .saturating_mul(size)
                    .saturating_mul(args.comm.nranks as u64)
                    >= st.l2_bytes
            }
        };
        match kernel {
            CollKernel::Copy if stream => CollKernel::CopyCs,
            k => k,
        }
    }

    /// A caller's stream (a `CUstream`/`cudaStream_t` of `device`'s primary context; 0 is
    /// the legacy default stream) as a [`Stream`] oxccl launches on; dropping it leaves
    /// the stream alone. Makes the device's context current (loading the module once).
    ///
    /// # Safety
    /// `raw` is 0 or a live stream of `device`'s primary context, and stays alive while the
    /// returned [`Stream`] (or work launched on it) is used.
    pub unsafe fn wrap_stream(&self, device: usize, raw: usize) -> Result<Stream> {
        self.device(device)?;
        Ok(Stream::Gpu(Arc::new(GpuStream {
            device,
            raw,
            owned: false,
        })))
    }

    /// Whether work is being captured into a CUDA graph on `stream`.
    pub fn is_capturing(&self, stream: &Stream) -> Result<bool> {
        let s = gpu_stream(stream)?;
        self.device(s.device)?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a live stream and a valid out-pointer.
        unsafe { sys::cuStreamIsCapturing(s.raw(), &mut status) }
            .result()
            .map_err(err("cuStreamIsCapturing", s.device as i32))?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Make `device`'s primary context current on this thread, loading the module once.
    pub(super) fn device(&self, device: usize) -> Result<Arc<DeviceState>> {
        if device >= self.count {
            return Err(Error::NoSuchDevice {
                device,
                count: self.count,
                backend: "gpu",
            });
        }
        let mut map = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get(&device) {
            // SAFETY: a retained primary context.
            unsafe { result::ctx::set_current(s.ctx as sys::CUcontext) }
                .map_err(err("cuCtxSetCurrent", device as i32))?;
            return Ok(s.clone());
        }
        let ctx = cuda::bind_primary(device)?;
        let t0 = std::time::Instant::now();
        let module = load_kernels(device)?;
        tracing::info!(
            device,
            ms = t0.elapsed().as_millis() as u64,
            "loaded oxccl ptx module"
        );
        let mut all_reduce = HashMap::new();
        let mut all_reduce_ll = HashMap::new();
        for dt in DataType::ALL {
            // SAFETY: `module` was just loaded in the current context.
            let f = unsafe { cuda::get_function(device as i32, module, all_reduce_kernel_name(dt))? };
            all_reduce.insert(dt, f as usize);
            // SAFETY: as above.
            let f = unsafe { cuda::get_function(device as i32, module, all_reduce_ll_kernel_name(dt))? };
            all_reduce_ll.insert(dt, f as usize);
        }
        let dev = result::device::get(device as i32).map_err(err("cuDeviceGet", device as i32))?;
        // SAFETY: valid device handle.
        let sms = unsafe {
            result::device::get_attribute(
                dev,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
        }
        .map(|v| v as u32)
        .unwrap_or(DEFAULT_SMS);
        // SAFETY: valid device handle.
        let l2_bytes = unsafe {
            result::device::get_attribute(dev, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
        }
        .map(|v| v.max(0) as u64)
        .unwrap_or(DEFAULT_L2_BYTES);
        let occupancy = |f: usize| -> Result<u32> {
            // SAFETY: a function of the loaded module.
            let b = unsafe {
                result::occupancy::max_active_block_per_multiprocessor(
                    f as sys::CUfunction,
                    ALL_REDUCE_BLOCK_THREADS as i32,
                    0,
                )
            }
            .map_err(err("cuOccupancyMaxActiveBlocksPerMultiprocessor", device as i32))?;
            Ok(b.max(1) as u32)
        };
        let mut blocks_per_sm = HashMap::new();
        for (&dt, &f) in &all_reduce {
            let ll = occupancy(all_reduce_ll[&dt])?;
            blocks_per_sm.insert(dt, occupancy(f)?.min(ll));
        }
        let mut colls = HashMap::new();
        for k in CollKernel::all() {
            // SAFETY: `module` was loaded in the current context.
            let f = unsafe { cuda::get_function(device as i32, module, k.name())? } as usize;
            colls.insert(k, (f, occupancy(f)?));
        }
        // SAFETY: `module` was loaded in the current context.
        let p2p_fn = unsafe { cuda::get_function(device as i32, module, P2P_KERNEL)? } as usize;
        let p2p = (p2p_fn, occupancy(p2p_fn)?);
        let mut sym = HashMap::new();
        let mut sym_sum = HashMap::new();
        let mut sym_grouped = HashMap::new();
        for proto in [SYM_PROTO_SIMPLE, SYM_PROTO_LL, SYM_PROTO_LAMPORT] {
            for dt in DataType::ALL {
                let name = sym_kernel_name(proto, dt).ok_or_else(|| Error::ModuleLoad {
                    device: device as i32,
                    message: format!("no symmetric kernel for protocol {proto}"),
                })?;
                // SAFETY: `module` was loaded in the current context.
                let f = unsafe { cuda::get_function(device as i32, module, name)? } as usize;
                let mut occ = occupancy(f)?;
                if let Some(sum_name) = sym_sum_kernel_name(proto, dt) {
                    // SAFETY: as above.
                    let g = unsafe { cuda::get_function(device as i32, module, sum_name)? } as usize;
                    // The CTA bounds hold for whichever of the two a call launches.
                    occ = occ.min(occupancy(g)?);
                    sym_sum.insert((proto, dt), g);
                }
                if let Some(grouped_name) = sym_grouped_kernel_name(proto, dt) {
                    // SAFETY: as above.
                    let g = unsafe { cuda::get_function(device as i32, module, grouped_name)? } as usize;
                    sym_grouped.insert((proto, dt), (g, occupancy(g)?));
                }
                sym.insert((proto, dt), (f, occ));
            }
        }
        // SAFETY: as above.
        let sym_init =
            unsafe { cuda::get_function(device as i32, module, SYM_LAMPORT_INIT_KERNEL)? } as usize;
        tracing::info!(target: "oxccl::init", device, sms, ?blocks_per_sm, p2p = p2p.1, "all-reduce and send/recv occupancy");
        tracing::info!(
            target: "oxccl::init",
            device,
            copy = colls[&CollKernel::Copy].1,
            "collective kernels occupancy (blocks per sm)"
        );
        let st = Arc::new(DeviceState {
            ctx: ctx as usize,
            module: module as usize,
            all_reduce,
            all_reduce_ll,
            sms,
            l2_bytes,
            blocks_per_sm,
            colls,
            p2p,
            sym,
            sym_sum,
            sym_grouped,
            sym_init,
        });
        map.insert(device, st.clone());
        Ok(st)
    }

    /// Enable peer access between two devices (both directions), where supported.
    fn peer_access(&self, a: usize, b: usize) -> Result<bool> {
        if a == b {
            return Ok(true);
        }
        // Both directions must be possible (each device's kernels load and store the other's
        // memory); asked before any context is made for them.
        if !cuda::can_access_peer(a, b)? || !cuda::can_access_peer(b, a)? {
            return Ok(false);
        }
        let sa = self.device(a)?;
        let sb = self.device(b)?;
        for (from, fd, to, td) in [(&sa, a, &sb, b), (&sb, b, &sa, a)] {
            // SAFETY: retained primary contexts.
            unsafe { result::ctx::set_current(from.ctx as sys::CUcontext) }
                .map_err(err("cuCtxSetCurrent", fd as i32))?;
            // SAFETY: as above; already-enabled is not an error for us.
            let r = unsafe { sys::cuCtxEnablePeerAccess(to.ctx as sys::CUcontext, 0) };
            if r != sys::CUresult::CUDA_SUCCESS && r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            {
                return Err(Error::Cuda {
                    op: "cuCtxEnablePeerAccess",
                    device: fd as i32,
                    message: format!("{r:?} (enabling access from device {fd} to device {td}'s memory)"),
                });
            }
        }
        Ok(true)
    }
}

impl GpuBackend {
    /// Blocks per rank when `ranks_per_device` ranks share a device, for a kernel of which
    /// `per_sm` blocks fit on one SM. Every rank's kernel must be resident at once (they
    /// wait on each other): keep the total at or below what the device holds at once (SMs x
    /// blocks per SM), on the smallest device loaded.
    fn blocks_per_rank(&self, ranks_per_device: usize, per_sm: impl Fn(&DeviceState) -> Option<u32>) -> u32 {
        let slots = self
            .devices
            .lock()
            .ok()
            .and_then(|m| m.values().map(|s| s.sms * per_sm(s).unwrap_or(1)).min())
            .unwrap_or(DEFAULT_SMS);
        let per = slots / ranks_per_device.max(1) as u32;
        per.clamp(1, oxccl_device::abi::MAX_BLOCKS as u32)
    }
}

/// Launch `f`, whose only parameter is an `A` passed by value.
///
/// # Safety
/// `f` must be a kernel of the current context taking exactly one `A` by value.
unsafe fn launch_one_arg<A: Copy>(
    f: sys::CUfunction,
    grid: Grid,
    s: &GpuStream,
    args: &A,
    op: &'static str,
) -> Result<()> {
    // SAFETY: caller contract.
    unsafe { launch_one_arg_as(f, grid, s, args, op, false) }
}

/// [`launch_one_arg`], with `programmatic`: with programmatic stream serialization
/// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, through `cuLaunchKernelEx`), so
/// that the kernel may be scheduled while the previous kernel of the stream still runs; it
/// must itself wait for that kernel (`griddepcontrol.wait`) before touching memory. Inside
/// stream capture this becomes a programmatic edge of the graph.
///
/// # Safety
/// As [`launch_one_arg`]; with `programmatic`, `f` must begin with `griddepcontrol.wait` (or
/// touch no memory).
unsafe fn launch_one_arg_as<A: Copy>(
    f: sys::CUfunction,
    grid: Grid,
    s: &GpuStream,
    args: &A,
    op: &'static str,
    programmatic: bool,
) -> Result<()> {
    let mut a = *args;
    let mut params = [&mut a as *mut A as *mut c_void];
    let r = if programmatic {
        // SAFETY: a plain-old-data union; the member set is the one the id names.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: grid.blocks,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: grid.threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: s.raw(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: caller contract; the driver copies the configuration and the parameters
        // at launch, so the locals may go out of scope afterwards.
        unsafe { sys::cuLaunchKernelEx(&cfg, f, params.as_mut_ptr(), std::ptr::null_mut()) }.result()
    } else {
        // SAFETY: caller contract; the driver copies the parameters at launch.
        unsafe {
            result::launch_kernel(
                f,
                (grid.blocks, 1, 1),
                (grid.threads, 1, 1),
                0,
                s.raw(),
                &mut params,
            )
        }
    };
    r.map_err(err(op, s.device as i32))
}

/// Load the kernels: the embedded sm_90 cubin on compute capability 9.0 (no JIT), else the
/// PTX (JIT-compiled by the driver, cached in its compute cache).
fn load_kernels(device: usize) -> Result<sys::CUmodule> {
    let dev = result::device::get(device as i32).map_err(err("cuDeviceGet", device as i32))?;
    let cc = |a| {
        // SAFETY: valid device handle.
        unsafe { result::device::get_attribute(dev, a) }.unwrap_or(0)
    };
    let major = cc(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    let minor = cc(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    if let (Some(cubin), 9, 0) = (CUBIN_SM90, major, minor) {
        // SAFETY: a complete cubin image embedded at build time; the driver copies it.
        match unsafe { result::module::load_data(cubin.as_ptr() as *const c_void) } {
            Ok(m) => {
                tracing::info!(target: "oxccl::init", device, "loaded the sm_90 cubin");
                return Ok(m);
            }
            Err(e) => {
                tracing::warn!(target: "oxccl::init", device, "sm_90 cubin rejected ({e}); compiling the ptx")
            }
        }
    }
    let t0 = std::time::Instant::now();
    let m = cuda::load_module(device as i32, PTX)?;
    tracing::info!(target: "oxccl::init", device, ms = t0.elapsed().as_millis() as u64, "compiled the ptx (sm_{major}{minor})");
    Ok(m)
}

impl Backend for GpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Gpu
    }

    fn device_count(&self) -> usize {
        self.count
    }

    fn device_name(&self, device: usize) -> String {
        cuda::device_name(device).unwrap_or_else(|e| format!("gpu {device} ({e})"))
    }

    fn alloc(&self, device: usize, bytes: usize) -> Result<u64> {
        self.device(device)?;
        // SAFETY: context is current; size > 0.
        let p = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(|e| Error::Alloc {
            bytes,
            device,
            backend: "gpu",
            message: e.to_string(),
        })?;
        // SAFETY: fresh allocation of that size.
        unsafe { result::memset_d8_sync(p, 0, bytes.max(1)) }.map_err(err("cuMemsetD8", device as i32))?;
        // The memset runs on the legacy stream; our non-blocking streams do not wait for it.
        // SAFETY: context current; the null stream is the legacy default stream.
        unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) }
            .result()
            .map_err(err("cuStreamSynchronize(legacy)", device as i32))?;
        Ok(p)
    }

    unsafe fn free(&self, device: usize, ptr: u64, _bytes: usize) {
        if self.device(device).is_ok() {
            let _ = result::free_sync(ptr);
        }
    }

    fn alloc_shared(&self, device: usize, bytes: usize) -> Result<super::SharedMem> {
        self.device(device)?;
        super::gpu_vmm::alloc(device, bytes)
    }

    fn import_shared(
        &self,
        device: usize,
        fd: &std::os::fd::OwnedFd,
        bytes: usize,
    ) -> Result<super::SharedMem> {
        self.device(device)?;
        super::gpu_vmm::import(device, fd, bytes)
    }

    unsafe fn free_shared(&self, mem: super::SharedMem) {
        if self.device(mem.device).is_ok() {
            // SAFETY: caller contract; the device's context is current.
            unsafe { super::gpu_vmm::free(mem) }
        }
    }

    fn alloc_mapped(&self, device: usize, bytes: usize) -> Result<MappedMem> {
        self.device(device)?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: context current.
        let host = unsafe { result::malloc_host(bytes.max(1), flags) }.map_err(|e| Error::Alloc {
            bytes,
            device,
            backend: "gpu (mapped host)",
            message: e.to_string(),
        })? as *mut u8;
        // SAFETY: fresh host allocation of that size.
        unsafe { std::ptr::write_bytes(host, 0, bytes.max(1)) };
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `host` is a mapped pinned allocation.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host as *mut c_void, 0) }
            .result()
            .map_err(err("cuMemHostGetDevicePointer", device as i32))?;
        Ok(MappedMem { host, dev, bytes })
    }

    unsafe fn free_mapped(&self, device: usize, mem: MappedMem) {
        if self.device(device).is_ok() {
            let _ = result::free_host(mem.host as *mut c_void);
        }
    }

    fn upload(&self, device: usize, dst: u64, src: &[u8]) -> Result<()> {
        self.device(device)?;
        // SAFETY: dst is an allocation of at least src.len() bytes (caller contract).
        unsafe { result::memcpy_htod_sync(dst, src) }.map_err(err("cuMemcpyHtoD", device as i32))?;
        // From pageable memory the copy may return before its DMA lands, on the legacy
        // stream, which our non-blocking streams do not wait for: wait for that stream (only:
        // a context-wide sync would also wait for collectives in flight, which may need a
        // rank that this thread has yet to launch).
        // SAFETY: context current; the null stream is the legacy default stream.
        unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) }
            .result()
            .map_err(err("cuStreamSynchronize(legacy)", device as i32))
    }

    fn download(&self, device: usize, dst: &mut [u8], src: u64) -> Result<()> {
        self.device(device)?;
        // A CUDA graph being captured on another thread (in the default global mode) must
        // not be invalidated by this copy: e.g. the async-error polls of a framework's
        // watchdog thread. The copy touches no captured stream, so the relaxed mode is
        // safe; the thread's mode is restored afterwards.
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a valid in/out pointer.
        let swapped = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }
            .result()
            .is_ok();
        // SAFETY: src is an allocation of at least dst.len() bytes (caller contract).
        let r = unsafe { result::memcpy_dtoh_sync(dst, src) }.map_err(err("cuMemcpyDtoH", device as i32));
        if swapped {
            // SAFETY: restores the mode swapped out above.
            let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
        }
        r
    }

    fn create_stream(&self, device: usize) -> Result<Stream> {
        self.device(device)?;
        let s = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(err("cuStreamCreate", device as i32))?;
        Ok(Stream::Gpu(Arc::new(GpuStream {
            device,
            raw: s as usize,
            owned: true,
        })))
    }

    fn synchronize(&self, stream: &Stream) -> Result<()> {
        let s = gpu_stream(stream)?;
        self.device(s.device)?;
        // SAFETY: a live stream.
        unsafe { result::stream::synchronize(s.raw()) }.map_err(err("cuStreamSynchronize", s.device as i32))
    }

    fn copy_async(&self, stream: &Stream, dst: u64, src: u64, bytes: usize) -> Result<()> {
        let s = gpu_stream(stream)?;
        self.device(s.device)?;
        // SAFETY: live allocations (caller contract), stream-ordered.
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, s.raw()) }
            .result()
            .map_err(err("cuMemcpyDtoDAsync", s.device as i32))
    }

    fn fill_async(&self, stream: &Stream, dst: u64, value: u8, bytes: usize) -> Result<()> {
        let s = gpu_stream(stream)?;
        self.device(s.device)?;
        let r = if dst.is_multiple_of(4) && bytes.is_multiple_of(4) {
            let word = u32::from_ne_bytes([value; 4]);
            // SAFETY: a live allocation of `bytes` (caller contract), stream-ordered.
            unsafe { sys::cuMemsetD32Async(dst, word, bytes / 4, s.raw()) }
        } else {
            // SAFETY: as above.
            unsafe { sys::cuMemsetD8Async(dst, value, bytes, s.raw()) }
        };
        r.result().map_err(err("cuMemsetAsync", s.device as i32))
    }

    fn launch_all_reduce(&self, stream: &Stream, grid: Grid, args: &AllReduceArgs) -> Result<()> {
        let s = gpu_stream(stream)?;
        let st = self.device(s.device)?;
        let dt = DataType::from_u32(args.dtype).ok_or_else(|| Error::InvalidArgument {
            op: "all_reduce",
            rank: args.comm.rank,
            what: format!("data type {}", args.dtype),
        })?;
        let f = if args.algo == ALGO_LL {
            st.all_reduce_ll[&dt]
        } else {
            st.all_reduce[&dt]
        };
        let f = self.kernel_or_empty(&st, f)?;
        // SAFETY: every all-reduce kernel (LL or not) takes one by-value AllReduceArgs (the
        // empty kernel none: the driver passes parameters by the kernel's own signature).
        unsafe { launch_one_arg(f, grid, s, args, "cuLaunchKernel(all_reduce)") }
    }

    fn max_blocks_per_rank(&self, ranks_per_device: usize, dtype: DataType) -> u32 {
        self.blocks_per_rank(ranks_per_device, |s| s.blocks_per_sm.get(&dtype).copied())
    }

    fn launch_coll(&self, stream: &Stream, grid: Grid, kernel: CollKernel, args: &CollArgs) -> Result<()> {
        let s = gpu_stream(stream)?;
        let st = self.device(s.device)?;
        let f = self.kernel_or_empty(&st, st.colls[&self.coll_kernel(&st, kernel, args)].0)?;
        // SAFETY: every collective kernel takes one by-value CollArgs (the empty one none).
        unsafe { launch_one_arg(f, grid, s, args, "cuLaunchKernel(collective)") }
    }

    fn max_coll_blocks_per_rank(&self, ranks_per_device: usize, kernel: CollKernel) -> u32 {
        // The copy kernel's store policy is chosen per launch: size for the smaller occupancy.
        let also = match kernel {
            CollKernel::Copy => CollKernel::CopyCs,
            k => k,
        };
        self.blocks_per_rank(ranks_per_device, |s| {
            Some(s.colls.get(&kernel)?.1.min(s.colls.get(&also)?.1))
        })
    }

    fn launch_p2p(&self, stream: &Stream, grid: Grid, args: &P2pArgs) -> Result<()> {
        let s = gpu_stream(stream)?;
        let st = self.device(s.device)?;
        let f = self.kernel_or_empty(&st, st.p2p.0)?;
        // SAFETY: the p2p kernel takes one by-value P2pArgs (the empty one none).
        unsafe { launch_one_arg(f, grid, s, args, "cuLaunchKernel(send/recv)") }
    }

    fn launch_sym(&self, stream: &Stream, grid: Grid, args: &SymArgs) -> Result<()> {
        let s = gpu_stream(stream)?;
        let st = self.device(s.device)?;
        let dt = DataType::from_u32(args.dtype).ok_or_else(|| Error::InvalidArgument {
            op: "symmetric collective",
            rank: args.scratch.rank,
            what: format!("data type {}", args.dtype),
        })?;
        let key = (args.proto, dt);
        let k = if sym_grouped_kernel_runs(args.proto, args.kind, args.op, args.flags) {
            st.sym_grouped.get(&key).map(|k| k.0)
        } else if sym_sum_kernel_runs(args.proto, args.kind, args.op) {
            st.sym_sum.get(&key).copied()
        } else {
            st.sym.get(&key).map(|k| k.0)
        }
        .ok_or_else(|| Error::InvalidArgument {
            op: "symmetric collective",
            rank: args.scratch.rank,
            what: format!("protocol {}", args.proto),
        })?;
        let f = self.kernel_or_empty(&st, k)?;
        // SAFETY: every symmetric kernel takes one by-value SymArgs (the empty one none) and
        // begins with `griddepcontrol.wait` (the empty one touches no memory).
        unsafe {
            let programmatic = args.flags & SYM_FLAG_EARLY_NEXT != 0;
            let op = if programmatic {
                "cuLaunchKernelEx(symmetric, programmatic)"
            } else {
                "cuLaunchKernel(symmetric)"
            };
            launch_one_arg_as(f, grid, s, args, op, programmatic)
        }
    }

    fn launch_sym_init(&self, stream: &Stream, grid: Grid, args: &SymInitArgs) -> Result<()> {
        let s = gpu_stream(stream)?;
        let st = self.device(s.device)?;
        // SAFETY: the init kernel takes one by-value SymInitArgs.
        unsafe {
            launch_one_arg(
                st.sym_init as sys::CUfunction,
                grid,
                s,
                args,
                "cuLaunchKernel(symmetric init)",
            )
        }
    }

    fn max_sym_blocks_per_rank(&self, ranks_per_device: usize, proto: u32, dtype: DataType) -> u32 {
        self.blocks_per_rank(ranks_per_device, |s| s.sym.get(&(proto, dtype)).map(|k| k.1))
    }

    fn max_sym_grouped_blocks_per_rank(&self, ranks_per_device: usize, proto: u32, dtype: DataType) -> u32 {
        self.blocks_per_rank(ranks_per_device, |s| {
            let general = s.sym.get(&(proto, dtype))?.1;
            Some(
                s.sym_grouped
                    .get(&(proto, dtype))
                    .map_or(general, |k| k.1.min(general)),
            )
        })
    }

    fn max_p2p_blocks_per_rank(&self, ranks_per_device: usize) -> u32 {
        self.blocks_per_rank(ranks_per_device, |s| Some(s.p2p.1))
    }

    fn block_threads(&self) -> u32 {
        ALL_REDUCE_BLOCK_THREADS
    }

    fn can_access_peer(&self, a: usize, b: usize) -> Result<bool> {
        if a == b {
            return Ok(true);
        }
        for d in [a, b] {
            if d >= self.count {
                return Err(Error::NoSuchDevice {
                    device: d,
                    count: self.count,
                    backend: "gpu",
                });
            }
        }
        cuda::can_access_peer(a, b)
    }

    fn enable_peer_access(&self, a: usize, b: usize) -> Result<bool> {
        self.peer_access(a, b)
    }

    fn as_gpu(&self) -> Option<&GpuBackend> {
        Some(self)
    }

    fn win_granularity(&self, device: usize) -> Result<usize> {
        self.device(device)?;
        super::gpu_vmm::win_granularity(device)
    }

    fn win_whole_allocations(&self) -> bool {
        true
    }

    fn win_alloc(&self, device: usize, bytes: usize) -> Result<WinAlloc> {
        self.device(device)?;
        super::gpu_vmm::win_alloc(device, bytes)
    }

    unsafe fn win_free(&self, alloc: WinAlloc) {
        if self.device(alloc.device).is_ok() {
            // SAFETY: caller contract; the device's context is current.
            unsafe { super::gpu_vmm::win_free(alloc) }
        }
    }

    fn win_retain(&self, alloc: &WinAlloc) -> Result<PhysHandle> {
        self.device(alloc.device)?;
        super::gpu_vmm::win_retain(alloc)
    }

    fn win_export(&self, device: usize, phys: &PhysHandle) -> Result<std::os::fd::OwnedFd> {
        self.device(device)?;
        super::gpu_vmm::win_export(device, phys)
    }

    fn win_import(&self, device: usize, fd: std::os::fd::OwnedFd, bytes: usize) -> Result<PhysHandle> {
        self.device(device)?;
        super::gpu_vmm::win_import(device, fd, bytes)
    }

    unsafe fn win_release(&self, device: usize, phys: PhysHandle) {
        if self.device(device).is_ok() {
            // SAFETY: caller contract.
            unsafe { super::gpu_vmm::win_release(phys) }
        }
    }

    fn win_reserve(&self, device: usize, bytes: usize, align: usize) -> Result<u64> {
        self.device(device)?;
        super::gpu_vmm::win_reserve(device, bytes, align)
    }

    unsafe fn win_unreserve(&self, device: usize, base: u64, bytes: usize) {
        if self.device(device).is_ok() {
            // SAFETY: caller contract.
            unsafe { super::gpu_vmm::win_unreserve(base, bytes) }
        }
    }

    unsafe fn win_map(
        &self,
        device: usize,
        at: u64,
        phys: &PhysHandle,
        offset: usize,
        bytes: usize,
    ) -> Result<()> {
        self.device(device)?;
        // SAFETY: caller contract; the device's context is current.
        unsafe { super::gpu_vmm::win_map(device, at, phys, offset, bytes) }
    }

    unsafe fn win_unmap(&self, device: usize, at: u64, bytes: usize) {
        if self.device(device).is_ok() {
            // SAFETY: caller contract.
            unsafe { super::gpu_vmm::win_unmap(at, bytes) }
        }
    }

    fn record(&self, stream: &Stream) -> Result<Event> {
        let s = gpu_stream(stream)?;
        self.device(s.device)?;
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(err("cuEventCreate", s.device as i32))?;
        // SAFETY: fresh event, live stream.
        unsafe { result::event::record(e, s.raw()) }.map_err(err("cuEventRecord", s.device as i32))?;
        Ok(Event::Gpu(GpuEvent {
            raw: e as usize,
            device: s.device,
        }))
    }

    fn elapsed(&self, a: &Event, b: &Event) -> Result<f64> {
        match (a, b) {
            (Event::Gpu(a), Event::Gpu(b)) => {
                if a.device != b.device {
                    return Err(Error::Init(format!(
                        "timing between events of device {} and device {} (cuEventElapsedTime needs one device)",
                        a.device, b.device
                    )));
                }
                let d = b.device as i32;
                self.device(b.device)?;
                // SAFETY: recorded events.
                unsafe { result::event::synchronize(b.raw as sys::CUevent) }
                    .map_err(err("cuEventSynchronize", d))?;
                // SAFETY: both recorded and complete.
                let ms = unsafe { result::event::elapsed(a.raw as sys::CUevent, b.raw as sys::CUevent) }
                    .map_err(err("cuEventElapsedTime", d))?;
                Ok(ms as f64 / 1e3)
            }
            _ => Err(Error::Init(
                "events of another backend passed to the gpu backend".into(),
            )),
        }
    }
}
