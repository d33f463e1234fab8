//! Timing operations captured in a CUDA graph and replayed (GPU backend only).
//!
//! `iters` operations (each one call of the harness's launch closure, which enqueues the
//! operation on every rank held here) are captured into one graph per device over the
//! ranks' streams (`crate::backend::gpu_graph`), the graphs are replayed `replays` times per
//! repetition, and the time per operation is the repetition's time (the slowest device's)
//! over `replays * iters`; the median of `reps` repetitions counts. [`GraphMode::Empty`] captures the same calls with every kernel
//! replaced by the empty one (same kernels per operation, same grids, same streams): the
//! floor the real replay is compared against.
//!
//! Only operations whose per-operation state lives in device memory replay correctly: the
//! graph re-runs the captured kernel arguments. The symmetric kernels keep their sequence
//! numbers in device memory; the inbox-barrier collectives take their epochs from the host
//! and must not be replayed (their timing here would be of kernels whose barriers pass on
//! stale epochs).

use super::{Ranks, Timing};
use crate::error::{Error, Result};

/// Which graph to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphMode {
    /// The operations' real kernels, the graph replayed `replays` times per repetition.
    Real { replays: usize },
    /// The same launches with every kernel replaced by the empty one.
    Empty { replays: usize },
}

/// Median seconds per operation of replaying a graph of `t.iters` calls of `launch`.
pub fn time_replays(
    ranks: &Ranks,
    t: Timing,
    mode: GraphMode,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let backend = ranks
        .comms
        .first()
        .map(|c| c.backend().clone())
        .ok_or_else(|| Error::Init("graph timing: no ranks".into()))?;
    let gpu = backend
        .as_gpu()
        .ok_or_else(|| Error::Init("graph timing needs the gpu backend (CUDA graphs)".into()))?;
    let (empty, replays) = match mode {
        GraphMode::Real { replays } => (false, replays.max(1)),
        GraphMode::Empty { replays } => (true, replays.max(1)),
    };
    let ops = t.iters.max(1);
    // Warm-up outside the capture: first-use allocations and lazy set-up happen here.
    for _ in 0..t.warmup {
        launch()?;
    }
    ranks.sync()?;
    gpu.set_empty_kernels(empty);
    let graph = gpu.capture(&ranks.streams, || {
        for _ in 0..ops {
            launch()?;
        }
        Ok(())
    });
    gpu.set_empty_kernels(false);
    let graph = graph?;
    gpu.launch_graph(&graph, &ranks.streams)?;
    ranks.sync()?;
    // One graph per device, each launched on its head stream: the slowest one counts.
    let heads: Vec<_> = graph.heads().into_iter().map(|i| &ranks.streams[i]).collect();
    let mut times = Vec::with_capacity(t.reps.max(1));
    for _ in 0..t.reps.max(1) {
        let starts = heads
            .iter()
            .map(|s| backend.record(s))
            .collect::<Result<Vec<_>>>()?;
        for _ in 0..replays {
            gpu.launch_graph(&graph, &ranks.streams)?;
        }
        // All end events first, then the waits (see `time_launches`).
        let ends = heads
            .iter()
            .map(|s| backend.record(s))
            .collect::<Result<Vec<_>>>()?;
        let mut worst: f64 = 0.0;
        for (a, b) in starts.iter().zip(&ends) {
            worst = worst.max(backend.elapsed(a, b)?);
        }
        times.push(worst / (replays * ops) as f64);
    }
    ranks.sync()?;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}

/// Check an all-reduce replayed from a CUDA graph on fresh data every replay: the graph holds,
/// per rank, a copy from a staging buffer into the input and the all-reduce of that input;
/// before each replay the host writes new random inputs into the staging buffers and poisons
/// the outputs, after it every element of every rank's output is checked. A kernel that took
/// its epochs from its (captured) arguments would pass its barriers on the previous replay's
/// epochs and read inputs before the peers copied them. Returns the elements checked.
pub fn check_graph_all_reduce(
    ranks: &Ranks,
    dt: oxccl_device::abi::DataType,
    red: oxccl_device::abi::RedOp,
    count: usize,
    replays: usize,
    ops_per_graph: usize,
) -> Result<usize> {
    use crate::buffer::DeviceBuffer;
    use crate::verify;
    let backend = ranks
        .comms
        .first()
        .map(|c| c.backend().clone())
        .ok_or_else(|| Error::Init("graph check: no ranks".into()))?;
    let gpu = backend
        .as_gpu()
        .ok_or_else(|| Error::Init("graph check needs the gpu backend (CUDA graphs)".into()))?;
    let n = ranks.n();
    if ranks.comms.len() != n {
        return Err(Error::Init("graph check needs every rank in this process".into()));
    }
    let op = verify::test_op(dt, red);
    let bytes = count * dt.size();
    let mut bufs = Vec::new();
    for c in &ranks.comms {
        let b = c.backend();
        let src = DeviceBuffer::alloc(b, c.device(), bytes.max(1))?;
        let send = DeviceBuffer::alloc(b, c.device(), bytes.max(1))?;
        let recv = DeviceBuffer::alloc(b, c.device(), bytes.max(1))?;
        bufs.push((src, send, recv));
    }
    let graph = gpu.capture(&ranks.streams, || {
        for _ in 0..ops_per_graph.max(1) {
            for (i, (src, send, recv)) in bufs.iter_mut().enumerate() {
                let (c, s) = (&ranks.comms[i], &ranks.streams[i]);
                c.backend().copy_async(s, send.ptr(), src.ptr(), bytes)?;
                c.all_reduce(send, recv, count, dt, op, s)?;
            }
        }
        Ok(())
    })?;
    let mut checked = 0;
    for k in 0..replays {
        let inputs: Vec<Vec<u8>> = (0..n)
            .map(|r| verify::gen_input(dt, red, count, 0x6a09 + 1000 * k as u64 + r as u64))
            .collect();
        for (i, (src, _, recv)) in bufs.iter_mut().enumerate() {
            src.upload(&inputs[ranks.rank(i)])?;
            recv.fill(0xff)?;
        }
        gpu.launch_graph(&graph, &ranks.streams)?;
        ranks.sync()?;
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        for (i, (_, _, recv)) in bufs.iter().enumerate() {
            let mut host = vec![0u8; bytes];
            recv.download(&mut host)?;
            verify::check_all_reduce_par(dt, op, &refs, &host, count)
                .map_err(|m| Error::Verify(format!("graph replay {k}, rank {}: {m}", ranks.rank(i))))?;
            checked += count;
        }
    }
    Ok(checked)
}
