//! CUDA graphs on the GPU backend: capture the operations enqueued on several streams into
//! one graph, replay it, and the empty-kernel mode that measures the replay floor.
//!
//! Capture (one graph over the streams of every rank in this process):
//! 1. `cuStreamBeginCapture` on the first stream (relaxed mode: other threads may keep
//!    calling the driver), an event recorded there, and every other stream made to wait on
//!    it, which pulls them into the same capture (fork);
//! 2. the caller's body enqueues its work on those streams (kernel launches, copies);
//! 3. every other stream records an event that the first one waits on (join), and
//!    `cuStreamEndCapture` on the first stream returns the graph, instantiated at once.
//!
//! Replaying a graph re-runs its kernels with the parameters captured, so only kernels whose
//! per-operation state lives in device memory (not in their arguments) give the same result
//! on every replay; the timing harness says which operations those are.
//!
//! Empty-kernel mode ([`GpuBackend::set_empty_kernels`]): every kernel launch of the backend
//! launches `oxccl_empty` instead, with the same grid on the same stream, so a graph
//! captured in that mode has the same nodes and edges as the real one with every kernel
//! doing nothing: its replay time is the floor the real graph is compared against.

use std::sync::atomic::Ordering;

use cudarc::driver::{result, sys};
use oxccl_device::kernels::EMPTY_KERNEL;

use super::gpu::{gpu_stream, DeviceState, GpuBackend};
use super::gpu_vmm::check;
use super::Stream;
use crate::error::{Error, Result};
use crate::sys::cuda::{self, err};

/// An instantiated CUDA graph.
pub struct GpuGraph {
    graph: usize,
    exec: usize,
    device: usize,
}

// SAFETY: driver handles, usable from any thread with the context current.
unsafe impl Send for GpuGraph {}

impl Drop for GpuGraph {
    fn drop(&mut self) {
        // SAFETY: created by capture below; errors at teardown are ignored (no panic in Drop).
        unsafe {
            let _ = sys::cuGraphExecDestroy(self.exec as sys::CUgraphExec);
            let _ = sys::cuGraphDestroy(self.graph as sys::CUgraph);
        }
    }
}

/// A fresh event (no timing) recorded on `s`.
fn record_plain(s: sys::CUstream, device: usize) -> Result<sys::CUevent> {
    let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(err("cuEventCreate", device as i32))?;
    // SAFETY: a fresh event, a live stream.
    unsafe { result::event::record(e, s) }.map_err(err("cuEventRecord", device as i32))?;
    Ok(e)
}

impl GpuBackend {
    /// Launch the empty kernel in place of every kernel from now on (`true`), or the real
    /// kernels again (`false`).
    pub fn set_empty_kernels(&self, on: bool) {
        self.empty.store(on, Ordering::Relaxed);
    }

    /// `f`, or the empty kernel in empty-kernel mode.
    pub(super) fn kernel_or_empty(&self, st: &DeviceState, f: usize) -> Result<sys::CUfunction> {
        if !self.empty.load(Ordering::Relaxed) {
            return Ok(f as sys::CUfunction);
        }
        // SAFETY: the module of this device state, loaded in the current context.
        unsafe { cuda::get_function(-1, st.module as sys::CUmodule, EMPTY_KERNEL) }
    }

    /// Capture what `body` enqueues on `streams` (all on one device) into one graph.
    pub fn capture(&self, streams: &[Stream], body: impl FnOnce() -> Result<()>) -> Result<GpuGraph> {
        let gs = streams.iter().map(gpu_stream).collect::<Result<Vec<_>>>()?;
        let first = gs
            .first()
            .ok_or_else(|| Error::Init("graph capture needs at least one stream".into()))?;
        let device = first.device;
        if gs.iter().any(|s| s.device != device) {
            return Err(Error::Init(
                "graph capture: every stream must be on one device".into(),
            ));
        }
        self.device(device)?;
        let s0 = first.raw();
        // SAFETY: a live stream not being captured.
        check(
            unsafe {
                sys::cuStreamBeginCapture_v2(s0, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            },
            "cuStreamBeginCapture",
            device,
        )?;
        let mut events = Vec::new();
        let captured = (|| -> Result<()> {
            let fork = record_plain(s0, device)?;
            events.push(fork);
            for s in &gs[1..] {
                // SAFETY: live stream and event.
                check(
                    unsafe { sys::cuStreamWaitEvent(s.raw(), fork, 0) },
                    "cuStreamWaitEvent",
                    device,
                )?;
            }
            body()?;
            for s in &gs[1..] {
                let join = record_plain(s.raw(), device)?;
                events.push(join);
                // SAFETY: live stream and event.
                check(
                    unsafe { sys::cuStreamWaitEvent(s0, join, 0) },
                    "cuStreamWaitEvent",
                    device,
                )?;
            }
            Ok(())
        })();
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is capturing (ends the capture even after a failed body).
        let ended = check(
            unsafe { sys::cuStreamEndCapture(s0, &mut graph) },
            "cuStreamEndCapture",
            device,
        );
        for e in events {
            // SAFETY: created above; the graph does not need the event objects.
            let _ = unsafe { result::event::destroy(e) };
        }
        captured?;
        ended?;
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: a complete graph from the capture.
        let inst = check(
            unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) },
            "cuGraphInstantiate",
            device,
        );
        if let Err(e) = inst {
            // SAFETY: the graph from the capture, not instantiated.
            let _ = unsafe { sys::cuGraphDestroy(graph) };
            return Err(e);
        }
        Ok(GpuGraph {
            graph: graph as usize,
            exec: exec as usize,
            device,
        })
    }

    /// Enqueue one replay of `g` on `stream`.
    pub fn launch_graph(&self, g: &GpuGraph, stream: &Stream) -> Result<()> {
        let s = gpu_stream(stream)?;
        self.device(g.device)?;
        // SAFETY: an instantiated graph of this device, a live stream.
        check(
            unsafe { sys::cuGraphLaunch(g.exec as sys::CUgraphExec, s.raw()) },
            "cuGraphLaunch",
            g.device,
        )
    }
}
