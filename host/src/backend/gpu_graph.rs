//! CUDA graphs on the GPU backend: capture the operations enqueued on several streams into
//! one graph per device, replay them, and the empty-kernel mode that measures the replay
//! floor.
//!
//! Capture (over the streams of every rank in this process, grouped by device; one graph per
//! device, as nccl-tests captures one per GPU, so no graph holds nodes of two devices):
//! 1. for each device, `cuStreamBeginCapture` on its first stream (relaxed mode: other
//!    threads may keep calling the driver, and several captures may be open at once), an
//!    event recorded there, and every other stream of that device made to wait on it, which
//!    pulls them into the same capture (fork);
//! 2. the caller's body enqueues its work on those streams (kernel launches, copies);
//! 3. on each device every other stream records an event that the first one waits on (join),
//!    and `cuStreamEndCapture` on the first stream returns that device's graph, instantiated
//!    at once.
//!
//! A replay ([`GpuBackend::launch_graph`]) launches each device's graph on that device's
//! first stream; the ranks' kernels in the graphs of different devices meet as they do when
//! launched one by one.
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

/// Instantiated CUDA graphs, one per device of the streams captured.
pub struct GpuGraph {
    parts: Vec<GraphPart>,
}

/// One device's graph.
struct GraphPart {
    graph: usize,
    exec: usize,
    device: usize,
    /// Index (in the captured stream list) of the stream it is launched on.
    head: usize,
}

// SAFETY: driver handles, usable from any thread with the context current.
unsafe impl Send for GpuGraph {}

impl GpuGraph {
    /// Indices (in the stream list given to [`GpuBackend::capture`]) of the streams the
    /// graphs are launched on: one per device, the first stream of each.
    pub fn heads(&self) -> Vec<usize> {
        self.parts.iter().map(|p| p.head).collect()
    }
}

impl Drop for GraphPart {
    fn drop(&mut self) {
        // SAFETY: created by capture below; errors at teardown are ignored (no panic in Drop).
        unsafe {
            let _ = sys::cuGraphExecDestroy(self.exec as sys::CUgraphExec);
            let _ = sys::cuGraphDestroy(self.graph as sys::CUgraph);
        }
    }
}

/// One device's streams during a capture.
struct Capturing {
    device: usize,
    /// Indices into the stream list; the first is the head.
    streams: Vec<usize>,
    /// Whether `cuStreamBeginCapture` succeeded on the head.
    begun: bool,
}

/// The streams of `devices` (one entry per stream: its device) grouped by device, in order
/// of first appearance: `(device, indices of its streams)`, the first index its head.
fn group_by_device(devices: &[usize]) -> Vec<(usize, Vec<usize>)> {
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, &d) in devices.iter().enumerate() {
        match groups.iter_mut().find(|g| g.0 == d) {
            Some(g) => g.1.push(i),
            None => groups.push((d, vec![i])),
        }
    }
    groups
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

    /// Capture what `body` enqueues on `streams` into one graph per device (see the module
    /// doc).
    pub fn capture(&self, streams: &[Stream], body: impl FnOnce() -> Result<()>) -> Result<GpuGraph> {
        let gs = streams.iter().map(gpu_stream).collect::<Result<Vec<_>>>()?;
        if gs.is_empty() {
            return Err(Error::Init("graph capture needs at least one stream".into()));
        }
        let devices: Vec<usize> = gs.iter().map(|s| s.device).collect();
        let mut groups: Vec<Capturing> = group_by_device(&devices)
            .into_iter()
            .map(|(device, streams)| Capturing {
                device,
                streams,
                begun: false,
            })
            .collect();
        let mut events = Vec::new();
        let captured = (|| -> Result<()> {
            for g in &mut groups {
                self.device(g.device)?;
                let s0 = gs[g.streams[0]].raw();
                // SAFETY: a live stream not being captured.
                check(
                    unsafe {
                        sys::cuStreamBeginCapture_v2(
                            s0,
                            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                        )
                    },
                    "cuStreamBeginCapture",
                    g.device,
                )?;
                g.begun = true;
                let fork = record_plain(s0, g.device)?;
                events.push(fork);
                for &i in &g.streams[1..] {
                    // SAFETY: live stream and event.
                    check(
                        unsafe { sys::cuStreamWaitEvent(gs[i].raw(), fork, 0) },
                        "cuStreamWaitEvent",
                        g.device,
                    )?;
                }
            }
            body()?;
            for g in &groups {
                self.device(g.device)?;
                let s0 = gs[g.streams[0]].raw();
                for &i in &g.streams[1..] {
                    let join = record_plain(gs[i].raw(), g.device)?;
                    events.push(join);
                    // SAFETY: live stream and event.
                    check(
                        unsafe { sys::cuStreamWaitEvent(s0, join, 0) },
                        "cuStreamWaitEvent",
                        g.device,
                    )?;
                }
            }
            Ok(())
        })();
        // End every capture that began, even after a failed body.
        let mut graphs: Vec<(usize, sys::CUgraph)> = Vec::new();
        let mut failed = captured.err();
        for (k, g) in groups.iter().enumerate().filter(|(_, g)| g.begun) {
            let mut graph: sys::CUgraph = std::ptr::null_mut();
            let r = self.device(g.device).and_then(|_| {
                // SAFETY: the stream is capturing.
                check(
                    unsafe { sys::cuStreamEndCapture(gs[g.streams[0]].raw(), &mut graph) },
                    "cuStreamEndCapture",
                    g.device,
                )
            });
            match r {
                Ok(()) => graphs.push((k, graph)),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        for e in events {
            // SAFETY: created above; the graphs do not need the event objects.
            let _ = unsafe { result::event::destroy(e) };
        }
        let destroy = |graphs: &[(usize, sys::CUgraph)]| {
            for &(_, graph) in graphs {
                if !graph.is_null() {
                    // SAFETY: a graph from a capture, not instantiated.
                    let _ = unsafe { sys::cuGraphDestroy(graph) };
                }
            }
        };
        if let Some(e) = failed {
            destroy(&graphs);
            return Err(e);
        }
        let mut parts = Vec::with_capacity(graphs.len());
        for (j, &(k, graph)) in graphs.iter().enumerate() {
            let g = &groups[k];
            let mut exec: sys::CUgraphExec = std::ptr::null_mut();
            let inst = self.device(g.device).and_then(|_| {
                // SAFETY: a complete graph from the capture.
                check(
                    unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) },
                    "cuGraphInstantiate",
                    g.device,
                )
            });
            if let Err(e) = inst {
                // The graphs not instantiated yet (this one included); the instantiated ones
                // go with `parts`.
                destroy(&graphs[j..]);
                return Err(e);
            }
            parts.push(GraphPart {
                graph: graph as usize,
                exec: exec as usize,
                device: g.device,
                head: g.streams[0],
            });
        }
        Ok(GpuGraph { parts })
    }

    /// Enqueue one replay of `g`: each device's graph on its head stream of `streams` (the
    /// list the graph was captured over).
    pub fn launch_graph(&self, g: &GpuGraph, streams: &[Stream]) -> Result<()> {
        for p in &g.parts {
            let stream = streams.get(p.head).ok_or_else(|| {
                Error::Init(format!(
                    "graph launch: {} streams given, the graph was captured over more",
                    streams.len()
                ))
            })?;
            let s = gpu_stream(stream)?;
            if s.device != p.device {
                return Err(Error::Init(format!(
                    "graph launch: stream {} is on device {}, its graph on device {}",
                    p.head, s.device, p.device
                )));
            }
            self.device(p.device)?;
            // SAFETY: an instantiated graph of this device, a live stream of it.
            check(
                unsafe { sys::cuGraphLaunch(p.exec as sys::CUgraphExec, s.raw()) },
                "cuGraphLaunch",
                p.device,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::group_by_device;

    #[test]
    fn streams_group_by_device_heads_first() {
        assert_eq!(group_by_device(&[0, 0, 0]), [(0, vec![0, 1, 2])]);
        assert_eq!(
            group_by_device(&[1, 0, 1, 2, 0]),
            [(1, vec![0, 2]), (0, vec![1, 4]), (2, vec![3])]
        );
        assert!(group_by_device(&[]).is_empty());
    }
}
