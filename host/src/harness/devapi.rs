//! `oxccl devapi-run`: runs a user kernel linked against the Device API bitcode
//! (`ptx/oxccl_device.bc`, e.g. by `scripts/link-user-kernel.sh`) on every rank of an
//! in-process communicator, and checks what each rank computed.
//!
//! The kernel contract (that of `builder/tests/data/user_kernel.ll`):
//! `kernel(const OxcclDevComm* comm, const OxcclWindow* win, uint64_t* out)`, launched with
//! one block of one thread per rank; every rank stores `lsa_rank + 1` into its slot
//! (`8 * lsa_rank`) of every LSA peer's window, meets the peers on LSA barrier 0, then writes
//! `out[0]` = the sum of its slots, `out[1]` = a status (0), `out[2]` = the LSA size,
//! `out[3]` = `oxccl_dev_version()`. With `n` ranks every rank must see `n (n + 1) / 2`.
//!
//! Set-up, per rank on its own thread (the window calls are collective): `mem_alloc` +
//! `register_window` of the window, `dev_comm_create` with one LSA barrier; the `DevComm`
//! and `WindowDesc` are copied into device memory; then every rank's kernel is launched on
//! its own stream (they run concurrently and wait for each other in the barrier), the
//! streams synchronized and the outputs downloaded.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use oxccl_device::api::abi::{DevComm, DevCommRequirements, WindowDesc, DEVICE_API_VERSION};

use crate::backend::gpu_module::GpuModule;
use crate::backend::{Backend, Grid};
use crate::comm::{Comm, Config};
use crate::error::{Error, Result};
use crate::window::{DevCommHandle, Window};

/// The kernel name `devapi-run` launches by default.
pub const DEFAULT_KERNEL: &str = "oxccl_user_sum";

/// u64 words the kernel writes into its output.
pub const OUT_WORDS: usize = 4;

/// What was found on one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankResult {
    pub rank: u32,
    /// The kernel's `out` words.
    pub out: [u64; OUT_WORDS],
    /// The words expected.
    pub expected: [u64; OUT_WORDS],
}

impl RankResult {
    pub fn passed(&self) -> bool {
        self.out == self.expected
    }
}

/// What the kernel must write on every rank of `n`.
pub fn expected(n: usize) -> [u64; OUT_WORDS] {
    let n = n as u64;
    [n * (n + 1) / 2, 0, n, DEVICE_API_VERSION as u64]
}

/// One rank's set-up: its window and device communicator.
struct RankSetup {
    ptr: u64,
    window: Window,
    dev: DevCommHandle,
}

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: `T` is one of the repr(C) plain-old-data layouts of the Device API (integers
    // only, no padding read as uninitialized: WindowDesc has an explicit `_pad`, DevComm's
    // fields tile it, asserted in device::api::abi), viewed as its bytes for the copy.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }.to_vec()
}

/// Runs kernel `kernel` of the PTX text `ptx` on `nranks` in-process ranks of `backend` (the
/// GPU backend; every rank on device 0) and returns each rank's result.
pub fn run(backend: Arc<dyn Backend>, ptx: &str, kernel: &str, nranks: usize) -> Result<Vec<RankResult>> {
    const OP: &str = "devapi-run";
    let gpu = backend.as_gpu().ok_or_else(|| Error::InvalidUsage {
        op: OP,
        what: format!(
            "needs the GPU backend (a user kernel's PTX cannot run on the {:?} backend)",
            backend.kind()
        ),
    })?;
    if nranks == 0 {
        return Err(Error::InvalidUsage {
            op: OP,
            what: "--ranks must be at least 1".into(),
        });
    }
    let comms = Comm::init_all_with(backend.clone(), &vec![0; nranks], Config::default())?;
    let window_bytes = (nranks * 8).max(4096);
    let reqs = DevCommRequirements {
        lsa_barrier_count: 1,
        ..DevCommRequirements::new()
    };
    // Collective set-up: one thread per rank.
    let setups: Vec<Result<RankSetup>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|c| {
                s.spawn(move || -> Result<RankSetup> {
                    let ptr = c.mem_alloc(window_bytes)?;
                    let window = c.register_window(ptr, window_bytes, 0)?;
                    let dev = c.dev_comm_create(&reqs)?;
                    Ok(RankSetup { ptr, window, dev })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::InvalidUsage {
                        op: OP,
                        what: "a set-up thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let setups = setups.into_iter().collect::<Result<Vec<_>>>()?;
    let result = launch_and_check(&backend, gpu, &comms, &setups, ptx, kernel, nranks);
    // Collective tear-down, also after a failed run.
    let teardown: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .zip(setups)
            .map(|(c, st)| {
                s.spawn(move || -> Result<()> {
                    c.dev_comm_destroy(st.dev)?;
                    c.deregister_window(st.window)?;
                    // SAFETY: the kernels using the window finished (streams synchronized,
                    // or the run failed before they were launched) and it is deregistered.
                    unsafe { c.mem_free(st.ptr) }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::InvalidUsage {
                        op: OP,
                        what: "a tear-down thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let results = result?;
    teardown.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(results)
}

/// Device memory of one rank's kernel arguments: `DevComm`, `WindowDesc`, the output.
struct Args {
    device: usize,
    comm: u64,
    win: u64,
    out: u64,
}

fn launch_and_check(
    backend: &Arc<dyn Backend>,
    gpu: &crate::backend::gpu::GpuBackend,
    comms: &[Comm],
    setups: &[RankSetup],
    ptx: &str,
    kernel: &str,
    nranks: usize,
) -> Result<Vec<RankResult>> {
    let mut modules: HashMap<usize, GpuModule> = HashMap::new();
    for c in comms {
        if let std::collections::hash_map::Entry::Vacant(e) = modules.entry(c.device()) {
            e.insert(gpu.load_module_ptx(c.device(), ptx)?);
        }
    }
    let mut args = Vec::with_capacity(comms.len());
    // Whether kernels may still be running on the arguments (a launch or a sync failed).
    let mut in_flight = false;
    let result = (|| -> Result<Vec<RankResult>> {
        for (c, st) in comms.iter().zip(setups) {
            let device = c.device();
            let dc: DevComm = st.dev.dev_comm();
            let win: WindowDesc = st.window.desc();
            let a = Args {
                device,
                comm: backend.alloc(device, std::mem::size_of::<DevComm>())?,
                win: backend.alloc(device, std::mem::size_of::<WindowDesc>())?,
                out: backend.alloc(device, OUT_WORDS * 8)?,
            };
            args.push(a);
            let a = args.last().expect("just pushed");
            backend.upload(device, a.comm, &bytes_of(&dc))?;
            backend.upload(device, a.win, &bytes_of(&win))?;
            // A sentinel, so that a kernel that wrote nothing is seen.
            backend.upload(device, a.out, &[0xff; OUT_WORDS * 8])?;
        }
        let streams = comms
            .iter()
            .map(|c| c.create_stream())
            .collect::<Result<Vec<_>>>()?;
        let grid = Grid {
            blocks: 1,
            threads: 1,
        };
        in_flight = true;
        for (a, s) in args.iter().zip(&streams) {
            let f = gpu.module_function(&modules[&a.device], kernel)?;
            let mut values = [a.comm, a.win, a.out];
            let mut params: Vec<*mut c_void> =
                values.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
            // SAFETY: the kernel contract (module doc) is three pointer parameters, passed
            // as u64 device addresses of live allocations: the DevComm and WindowDesc copies
            // (whose windows stay registered until tear-down, after the streams are
            // synchronized) and the output.
            unsafe { gpu.launch_raw(&f, grid, s, &mut params)? };
        }
        for s in &streams {
            backend.synchronize(s)?;
        }
        in_flight = false;
        let want = expected(nranks);
        let mut results = Vec::with_capacity(args.len());
        for (c, a) in comms.iter().zip(&args) {
            let mut bytes = [0u8; OUT_WORDS * 8];
            backend.download(a.device, &mut bytes, a.out)?;
            let mut out = [0u64; OUT_WORDS];
            for (w, b) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                *w = u64::from_le_bytes(b.try_into().expect("8 bytes"));
            }
            results.push(RankResult {
                rank: c.rank(),
                out,
                expected: want,
            });
        }
        Ok(results)
    })();
    if in_flight {
        // Kernels of other ranks may still use the arguments: leak them rather than free
        // memory under a running kernel.
        tracing::warn!(target: "oxccl::init", "devapi-run: a launch or sync failed; kernel arguments not freed");
        return result;
    }
    for a in args {
        // SAFETY: allocated above by `alloc`; no kernel uses them any more (every stream
        // was synchronized, or none was launched).
        unsafe {
            backend.free(a.device, a.comm, std::mem::size_of::<DevComm>());
            backend.free(a.device, a.win, std::mem::size_of::<WindowDesc>());
            backend.free(a.device, a.out, OUT_WORDS * 8);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_sums_every_rank_plus_one() {
        assert_eq!(expected(1), [1, 0, 1, DEVICE_API_VERSION as u64]);
        assert_eq!(expected(4)[0], 1 + 2 + 3 + 4);
    }

    #[test]
    fn cpu_backend_is_refused() {
        let b: Arc<dyn Backend> = Arc::new(crate::backend::cpu::CpuBackend::new());
        let e = run(b, "", DEFAULT_KERNEL, 2).unwrap_err();
        assert!(
            e.to_string().starts_with("devapi-run: needs the GPU backend"),
            "{e}"
        );
    }
}
