//! Running collectives on a set of in-process ranks for checks and timing (used by the CLI,
//! the tests and the GPU check script). The all-reduce is here; broadcast, reduce,
//! all-gather and reduce-scatter checks are in `colls`, all-to-all, gather, scatter and
//! all-gather-v checks in `moves`, send/recv checks in `p2p` (all re-exported); collectives
//! on registered windows in `sym`, mismatched ones in `mismatch`.

mod colls;
pub mod devapi;
pub mod graph;
pub mod mismatch;
mod moves;
mod p2p;
pub mod sym;

pub use colls::{
    bus_factor, check_all_gather, check_broadcast, check_coll, check_reduce, check_reduce_scatter,
    size_bytes, time_coll, Coll,
};
pub use moves::{check_all_gather_v, check_all_to_all, check_gather, check_scatter, v_layout};
pub use p2p::{check_send_recv, P2pPattern};

use oxccl_device::abi::{DataType, RedOp};

use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::coll::Op;
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::verify;

/// The ranks of one communicator with one stream each.
pub struct Ranks {
    pub comms: Vec<Comm>,
    pub streams: Vec<Stream>,
}

impl Ranks {
    /// Streams for every rank of `comms`.
    pub fn new(comms: Vec<Comm>) -> Result<Self> {
        let streams = comms
            .iter()
            .map(|c| c.create_stream())
            .collect::<Result<Vec<_>>>()?;
        Ok(Ranks { comms, streams })
    }

    /// Number of ranks of the communicator (all of them, also those in other processes).
    pub fn n(&self) -> usize {
        self.comms.first().map_or(0, |c| c.count() as usize)
    }

    /// The rank of the `i`-th communicator held here.
    pub fn rank(&self, i: usize) -> usize {
        self.comms[i].rank() as usize
    }

    /// Where rank `r` is held here, if it lives in this process.
    pub fn local_index(&self, r: usize) -> Option<usize> {
        self.comms.iter().position(|c| c.rank() as usize == r)
    }

    /// Wait for every rank's stream, then report the first device error of any rank.
    pub fn sync(&self) -> Result<()> {
        let mut first = None;
        for (c, s) in self.comms.iter().zip(&self.streams) {
            if let Err(e) = c.backend().synchronize(s) {
                first.get_or_insert(e);
            }
        }
        for c in &self.comms {
            if let Err(e) = c.async_error() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// One all-reduce case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub dtype: DataType,
    pub red: RedOp,
    pub count: usize,
    pub in_place: bool,
    pub seed: u64,
}

/// Run `case` on every rank with fresh random inputs and poisoned outputs, then check every
/// element of every rank against the host reference and that all ranks agree bit for bit.
/// Returns the number of elements checked.
pub fn check_all_reduce(ranks: &Ranks, case: Case) -> Result<usize> {
    let n = ranks.n();
    let dt = case.dtype;
    let bytes = case.count * dt.size();
    let op = verify::test_op(dt, case.red);
    let inputs: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let seed = case.seed.wrapping_mul(1000).wrapping_add(r as u64);
                s.spawn(move || verify::gen_input(dt, case.red, case.count, seed))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("input generator thread"))
            .collect()
    });
    let input_refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        let mut s = DeviceBuffer::alloc(c.backend(), c.device(), bytes)?;
        s.upload(&inputs[r])?;
        sends.push(s);
        if !case.in_place {
            let mut o = DeviceBuffer::alloc(c.backend(), c.device(), bytes)?;
            o.fill(0xff)?; // poison: NaN for every float type, -1 for integers
            recvs.push(o);
        }
    }
    for i in 0..ranks.comms.len() {
        let c = &ranks.comms[i];
        if case.in_place {
            c.all_reduce_in_place(&mut sends[i], case.count, dt, op, &ranks.streams[i])?;
        } else {
            c.all_reduce(&sends[i], &mut recvs[i], case.count, dt, op, &ranks.streams[i])?;
        }
    }
    ranks.sync()?;
    let outs = if case.in_place { &sends } else { &recvs };
    let mut first: Option<Vec<u8>> = None;
    for (i, o) in outs.iter().enumerate() {
        let r = ranks.rank(i);
        let mut host = vec![0u8; bytes];
        o.download(&mut host)?;
        verify::check_all_reduce_par(dt, op, &input_refs, &host, case.count)
            .map_err(|m| Error::Verify(format!("rank {r}: {m}")))?;
        match &first {
            None => first = Some(host),
            Some(f) if *f != host => {
                return Err(Error::Verify(format!(
                    "rank {r}'s result differs from rank 0's (ranks must agree bit for bit)"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(case.count * n)
}

/// How many operations to run untimed, per timed repetition, and how many repetitions.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub warmup: usize,
    pub iters: usize,
    pub reps: usize,
    /// Time CUDA-graph replays instead of launches (see [`graph`]).
    pub graph: Option<graph::GraphMode>,
    /// Time the host instead of the device (plain launches only): the wall time of the
    /// loop that enqueues `iters` operations on every rank, per operation, the streams
    /// drained before each repetition so that no launch waits for queue space. Where the
    /// device is faster than the host this is also what the device time measures.
    pub host: bool,
}

/// Median time (seconds) of one all-reduce of `count` elements on every rank, over `reps`
/// repetitions of `iters` back-to-back operations (after `warmup` untimed ones).
pub fn time_all_reduce(
    ranks: &Ranks,
    dt: DataType,
    op: Op,
    count: usize,
    in_place: bool,
    t: Timing,
) -> Result<f64> {
    let bytes = (count * dt.size()).max(1);
    let mut bufs = Vec::new();
    for c in &ranks.comms {
        let mut s = DeviceBuffer::alloc(c.backend(), c.device(), bytes)?;
        s.upload(&verify::gen_input(dt, op.red_op(), count, 7))?;
        let r = if in_place {
            None
        } else {
            Some(DeviceBuffer::alloc(c.backend(), c.device(), bytes)?)
        };
        bufs.push((s, r));
    }
    let launch = |bufs: &mut Vec<(DeviceBuffer, Option<DeviceBuffer>)>| -> Result<()> {
        for (r, (s, o)) in bufs.iter_mut().enumerate() {
            let c = &ranks.comms[r];
            match o {
                Some(o) => c.all_reduce(s, o, count, dt, op, &ranks.streams[r])?,
                None => c.all_reduce_in_place(s, count, dt, op, &ranks.streams[r])?,
            }
        }
        Ok(())
    };
    time_launches(ranks, t, || launch(&mut bufs))
}

/// Median time (seconds) of one call of `launch` (which enqueues one operation on every
/// rank): `t.warmup` untimed calls, then `t.reps` repetitions of `t.iters` back-to-back calls
/// timed with events on every rank's stream (the slowest rank's time counts), or with the
/// host's clock around the calls (`t.host`).
pub fn time_launches(ranks: &Ranks, t: Timing, mut launch: impl FnMut() -> Result<()>) -> Result<f64> {
    if let Some(mode) = t.graph {
        return graph::time_replays(ranks, t, mode, launch);
    }
    let Timing {
        warmup, iters, reps, ..
    } = t;
    for _ in 0..warmup {
        launch()?;
    }
    ranks.sync()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        if t.host {
            let t0 = std::time::Instant::now();
            for _ in 0..iters.max(1) {
                launch()?;
            }
            times.push(t0.elapsed().as_secs_f64() / iters.max(1) as f64);
            ranks.sync()?;
            continue;
        }
        let mut starts = Vec::with_capacity(ranks.n());
        for (c, s) in ranks.comms.iter().zip(&ranks.streams) {
            starts.push(c.backend().record(s)?);
        }
        for _ in 0..iters.max(1) {
            launch()?;
        }
        // Every end event is recorded before any is waited for: an event recorded after the
        // host waited on another rank's would stamp that wait, not the rank's end.
        let ends = ranks
            .comms
            .iter()
            .zip(&ranks.streams)
            .map(|(c, s)| c.backend().record(s))
            .collect::<Result<Vec<_>>>()?;
        let mut worst: f64 = 0.0;
        for (r, c) in ranks.comms.iter().enumerate() {
            worst = worst.max(c.backend().elapsed(&starts[r], &ends[r])?);
        }
        ranks.sync()?;
        times.push(worst / iters.max(1) as f64);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}

/// Median time (seconds) of a device-to-device copy of `bytes` on rank 0's device.
pub fn time_copy(ranks: &Ranks, bytes: usize, iters: usize, reps: usize) -> Result<f64> {
    let c = &ranks.comms[0];
    let b = c.backend();
    let src = DeviceBuffer::alloc(b, c.device(), bytes)?;
    let dst = DeviceBuffer::alloc(b, c.device(), bytes)?;
    let s = &ranks.streams[0];
    b.copy_async(s, dst.ptr(), src.ptr(), bytes)?;
    b.synchronize(s)?;
    let mut times = Vec::new();
    for _ in 0..reps {
        let a = b.record(s)?;
        for _ in 0..iters {
            b.copy_async(s, dst.ptr(), src.ptr(), bytes)?;
        }
        let e = b.record(s)?;
        times.push(b.elapsed(&a, &e)? / iters as f64);
    }
    b.synchronize(s)?;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}

/// Median time (seconds) of filling `bytes` of device memory on rank 0's device (writes
/// only; the write-bandwidth reference of `oxccl perf --write-ref`).
pub fn time_fill(ranks: &Ranks, bytes: usize, iters: usize, reps: usize) -> Result<f64> {
    let c = &ranks.comms[0];
    let b = c.backend();
    let dst = DeviceBuffer::alloc(b, c.device(), bytes)?;
    let s = &ranks.streams[0];
    b.fill_async(s, dst.ptr(), 0x5a, bytes)?;
    b.synchronize(s)?;
    let mut times = Vec::new();
    for _ in 0..reps {
        let a = b.record(s)?;
        for _ in 0..iters {
            b.fill_async(s, dst.ptr(), 0x5a, bytes)?;
        }
        let e = b.record(s)?;
        times.push(b.elapsed(&a, &e)? / iters as f64);
    }
    b.synchronize(s)?;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}

/// Parse sizes like `8`, `4K`, `16M`, `1G` (bytes, binary units).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1usize << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|v| v * mul)
}

/// Human-readable bytes.
pub fn fmt_bytes(b: usize) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        format!("{b}")
    }
}
