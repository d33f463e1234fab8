//! Checks of broadcast, reduce, all-gather and reduce-scatter (all-to-all, gather, scatter
//! and all-gather-v are in [`super::moves`]): random inputs, outputs
//! poisoned with 0xff (NaN for every float type, -1 for integers), every element of every
//! rank compared with the host reference ([`verify`]), and every byte a collective must not
//! write (other ranks' outputs of a reduce, the rest of an in-place reduce-scatter buffer,
//! root's input) checked unchanged.

use oxccl_device::abi::{DataType, RedOp};

use super::{check_all_reduce, Case, Ranks};
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::verify;

/// A collective of the checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coll {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Gather,
    Scatter,
    AllGatherV,
    /// Send/recv in groups (ring, or all-pairs for "in place" cases, see
    /// [`super::P2pPattern::of_case`]).
    SendRecv,
}

impl Coll {
    /// Every collective.
    pub const ALL: [Coll; 10] = [
        Coll::AllReduce,
        Coll::Broadcast,
        Coll::Reduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllToAll,
        Coll::Gather,
        Coll::Scatter,
        Coll::AllGatherV,
        Coll::SendRecv,
    ];

    /// Name as in the API (`all_reduce`, `broadcast`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::AllGather => "all_gather",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllToAll => "all_to_all",
            Coll::Gather => "gather",
            Coll::Scatter => "scatter",
            Coll::AllGatherV => "all_gather_v",
            Coll::SendRecv => "send_recv",
        }
    }

    /// From [`Coll::name`].
    pub fn from_name(s: &str) -> Option<Coll> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Whether it takes a reduction operator.
    pub fn has_op(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::Reduce | Coll::ReduceScatter)
    }

    /// Whether it takes a root.
    pub fn has_root(self) -> bool {
        matches!(
            self,
            Coll::Broadcast | Coll::Reduce | Coll::Gather | Coll::Scatter
        )
    }

    /// Whether the buffer that NCCL's count does not describe holds `nranks` times as many
    /// elements (all-gather's output, reduce-scatter's input, ...).
    pub fn is_blocked(self) -> bool {
        !matches!(
            self,
            Coll::AllReduce | Coll::Broadcast | Coll::Reduce | Coll::SendRecv
        )
    }
}

/// Run and check `coll` (`case.red` is ignored by copies, `root` by collectives without
/// one; all-gather-v draws counts up to `case.count` and displacements from `case.seed`
/// with [`super::v_layout`]; an in-place all-to-all checks that the call is
/// rejected). Returns the number of output elements checked.
pub fn check_coll(ranks: &Ranks, coll: Coll, case: Case, root: u32) -> Result<usize> {
    match coll {
        Coll::AllReduce => check_all_reduce(ranks, case),
        Coll::Broadcast => check_broadcast(ranks, case, root),
        Coll::Reduce => check_reduce(ranks, case, root),
        Coll::AllGather => check_all_gather(ranks, case),
        Coll::ReduceScatter => check_reduce_scatter(ranks, case),
        Coll::AllToAll => super::moves::check_all_to_all(ranks, case),
        Coll::Gather => super::moves::check_gather(ranks, case, root),
        Coll::Scatter => super::moves::check_scatter(ranks, case, root),
        Coll::AllGatherV => {
            let (counts, displs) = super::moves::v_layout(ranks.n(), case.count, case.seed);
            super::moves::check_all_gather_v(ranks, case.dtype, &counts, &displs, case.in_place, case.seed)
        }
        Coll::SendRecv => {
            super::p2p::check_send_recv(ranks, case, super::p2p::P2pPattern::of_case(case.in_place))
        }
    }
}

/// Random inputs of `count` elements for each of `n` ranks (generated in parallel).
pub(super) fn inputs(n: usize, dt: DataType, red: RedOp, count: usize, seed: u64) -> Vec<Vec<u8>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let seed = seed.wrapping_mul(1000).wrapping_add(r as u64);
                s.spawn(move || verify::gen_input(dt, red, count, seed))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("input generator thread"))
            .collect()
    })
}

/// A buffer of `bytes` on `c`'s device holding `data`, or poisoned when `data` is `None`.
pub(super) fn buffer(c: &Comm, bytes: usize, data: Option<&[u8]>) -> Result<DeviceBuffer> {
    let mut b = DeviceBuffer::alloc(c.backend(), c.device(), bytes)?;
    match data {
        Some(d) => b.upload(d)?,
        None => b.fill(0xff)?,
    }
    Ok(b)
}

pub(super) fn download(b: &DeviceBuffer, bytes: usize) -> Result<Vec<u8>> {
    let mut host = vec![0u8; bytes];
    b.download(&mut host)?;
    Ok(host)
}

pub(super) fn fail(coll: Coll, r: usize, m: String) -> Error {
    Error::Verify(format!("{} rank {r}: {m}", coll.name()))
}

pub(super) fn check_root(ranks: &Ranks, root: u32) -> Result<()> {
    if root as usize >= ranks.n() {
        return Err(Error::Verify(format!("root {root} out of {} ranks", ranks.n())));
    }
    Ok(())
}

/// Broadcast `case.count` elements from `root`. Non-root ranks' `send` (out of place) holds
/// random data of its own, so reading the wrong input shows. Checks every rank's output
/// against root's input, and root's input unchanged.
pub fn check_broadcast(ranks: &Ranks, case: Case, root: u32) -> Result<usize> {
    check_root(ranks, root)?;
    let (n, dt) = (ranks.n(), case.dtype);
    let bytes = case.count * dt.size();
    let ins = inputs(n, dt, RedOp::Sum, case.count, case.seed);
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        let mine = r == root as usize;
        if case.in_place {
            recvs.push(buffer(c, bytes, mine.then_some(ins[r].as_slice()))?);
        } else {
            sends.push(buffer(c, bytes, Some(&ins[r]))?);
            recvs.push(buffer(c, bytes, None)?);
        }
    }
    for (i, c) in ranks.comms.iter().enumerate() {
        let s = &ranks.streams[i];
        if case.in_place {
            c.broadcast_in_place(&mut recvs[i], case.count, dt, root, s)?;
        } else {
            c.broadcast(&sends[i], &mut recvs[i], case.count, dt, root, s)?;
        }
    }
    ranks.sync()?;
    let want = &ins[root as usize];
    for (i, o) in recvs.iter().enumerate() {
        let r = ranks.rank(i);
        verify::check_equal(dt, "recv", want, &download(o, bytes)?)
            .map_err(|m| fail(Coll::Broadcast, r, m))?;
    }
    if let (false, Some(i)) = (case.in_place, ranks.local_index(root as usize)) {
        let s = download(&sends[i], bytes)?;
        verify::check_equal(dt, "root's send", want, &s)
            .map_err(|m| fail(Coll::Broadcast, root as usize, m))?;
    }
    Ok(case.count * n)
}

/// Reduce `case.count` elements into `root`. Checks root's output against the reference,
/// and that no other rank's output was touched (still poisoned out of place, still its
/// input in place).
pub fn check_reduce(ranks: &Ranks, case: Case, root: u32) -> Result<usize> {
    check_root(ranks, root)?;
    let (n, dt) = (ranks.n(), case.dtype);
    let bytes = case.count * dt.size();
    let op = verify::test_op(dt, case.red);
    let ins = inputs(n, dt, case.red, case.count, case.seed);
    let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        sends.push(buffer(c, bytes, Some(&ins[r]))?);
        if !case.in_place {
            recvs.push(buffer(c, bytes, None)?);
        }
    }
    for (i, c) in ranks.comms.iter().enumerate() {
        let s = &ranks.streams[i];
        if case.in_place {
            c.reduce_in_place(&mut sends[i], case.count, dt, op, root, s)?;
        } else {
            c.reduce(&sends[i], &mut recvs[i], case.count, dt, op, root, s)?;
        }
    }
    ranks.sync()?;
    let outs = if case.in_place { &sends } else { &recvs };
    let poison = vec![0xffu8; bytes];
    for (i, o) in outs.iter().enumerate() {
        let r = ranks.rank(i);
        let host = download(o, bytes)?;
        let res = if r == root as usize {
            verify::check_reduction_par(dt, op, &refs, 0, &host, 0, case.count).map(|_| ())
        } else if case.in_place {
            verify::check_equal(dt, "non-root buffer (must be untouched)", &ins[r], &host).map(|_| ())
        } else {
            verify::check_equal(dt, "non-root recv (must be untouched)", &poison, &host).map(|_| ())
        };
        res.map_err(|m| fail(Coll::Reduce, r, m))?;
    }
    Ok(case.count)
}

/// All-gather `case.count` elements per rank. Checks every rank's output (`n * count`)
/// against the concatenation of the inputs.
pub fn check_all_gather(ranks: &Ranks, case: Case) -> Result<usize> {
    let (n, dt) = (ranks.n(), case.dtype);
    let bytes = case.count * dt.size();
    let ins = inputs(n, dt, RedOp::Sum, case.count, case.seed);
    let want: Vec<u8> = ins.concat();
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        let mut o = buffer(c, n * bytes, None)?;
        if case.in_place {
            let mut init = vec![0xffu8; n * bytes];
            init[r * bytes..(r + 1) * bytes].copy_from_slice(&ins[r]);
            o.upload(&init)?;
        } else {
            sends.push(buffer(c, bytes, Some(&ins[r]))?);
        }
        recvs.push(o);
    }
    for (i, c) in ranks.comms.iter().enumerate() {
        let s = &ranks.streams[i];
        if case.in_place {
            c.all_gather_in_place(&mut recvs[i], case.count, dt, s)?;
        } else {
            c.all_gather(&sends[i], &mut recvs[i], case.count, dt, s)?;
        }
    }
    ranks.sync()?;
    for (i, o) in recvs.iter().enumerate() {
        let r = ranks.rank(i);
        verify::check_equal(dt, "recv", &want, &download(o, n * bytes)?)
            .map_err(|m| fail(Coll::AllGather, r, m))?;
    }
    Ok(case.count * n * n)
}

/// Reduce-scatter `case.count` elements per rank (inputs of `n * count`). Checks every
/// rank's output against the reference of its block, and in place, that the rest of the
/// buffer is unchanged.
pub fn check_reduce_scatter(ranks: &Ranks, case: Case) -> Result<usize> {
    let (n, dt, count) = (ranks.n(), case.dtype, case.count);
    let bytes = count * dt.size();
    let op = verify::test_op(dt, case.red);
    let ins = inputs(n, dt, case.red, n * count, case.seed);
    let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for c in &ranks.comms {
        let r = c.rank() as usize;
        sends.push(buffer(c, n * bytes, Some(&ins[r]))?);
        if !case.in_place {
            recvs.push(buffer(c, bytes, None)?);
        }
    }
    for (i, c) in ranks.comms.iter().enumerate() {
        let s = &ranks.streams[i];
        if case.in_place {
            c.reduce_scatter_in_place(&mut sends[i], count, dt, op, s)?;
        } else {
            c.reduce_scatter(&sends[i], &mut recvs[i], count, dt, op, s)?;
        }
    }
    ranks.sync()?;
    for i in 0..ranks.comms.len() {
        let r = ranks.rank(i);
        let res = if case.in_place {
            let host = download(&sends[i], n * bytes)?;
            let (lo, hi) = (r * bytes, (r + 1) * bytes);
            verify::check_reduction_par(dt, op, &refs, r * count, &host, r * count, count).and_then(|_| {
                let (mut a, mut b) = (host.clone(), ins[r].clone());
                a.drain(lo..hi);
                b.drain(lo..hi);
                verify::check_equal(dt, "other blocks (must be untouched)", &b, &a)
            })
        } else {
            let host = download(&recvs[i], bytes)?;
            verify::check_reduction_par(dt, op, &refs, r * count, &host, 0, count)
        };
        res.map_err(|m| fail(Coll::ReduceScatter, r, m))?;
    }
    Ok(count * n)
}

/// Bytes per rank nccl-tests reports for `coll` of `count` elements of `size` bytes on `n`
/// ranks: the larger of the input and the output.
pub fn size_bytes(coll: Coll, n: usize, count: usize, size: usize) -> usize {
    if coll.is_blocked() {
        n * count * size
    } else {
        count * size
    }
}

/// nccl-tests' bus-bandwidth factor of `coll` on `n` ranks.
pub fn bus_factor(coll: Coll, n: usize) -> f64 {
    let n = n.max(1) as f64;
    match coll {
        Coll::AllReduce => crate::coll::all_reduce_bus_factor(n as usize),
        Coll::Broadcast | Coll::Reduce | Coll::SendRecv => 1.0,
        _ if n > 1.0 => (n - 1.0) / n,
        _ => 1.0,
    }
}

/// Median time (seconds) of one `coll` of `count` elements (NCCL's count) on every rank,
/// out of place, root `root`; as [`super::time_all_reduce`] otherwise.
pub fn time_coll(
    ranks: &Ranks,
    coll: Coll,
    dt: DataType,
    op: crate::coll::Op,
    count: usize,
    root: u32,
    t: super::Timing,
) -> Result<f64> {
    if coll == Coll::AllReduce {
        return super::time_all_reduce(ranks, dt, op, count, false, t);
    }
    let n = ranks.n();
    let bytes = count * dt.size();
    let (sb, rb) = match coll {
        Coll::AllGather | Coll::Gather | Coll::AllGatherV => (bytes, n * bytes),
        Coll::ReduceScatter | Coll::Scatter => (n * bytes, bytes),
        Coll::AllToAll => (n * bytes, n * bytes),
        _ => (bytes, bytes),
    };
    // All-gather-v timed on the all-gather's layout.
    let counts = vec![count; n];
    let displs: Vec<usize> = (0..n).map(|r| r * count).collect();
    let mut bufs = Vec::new();
    for c in &ranks.comms {
        let mut s = DeviceBuffer::alloc(c.backend(), c.device(), sb.max(1))?;
        s.upload(&verify::gen_input(dt, op.red_op(), sb / dt.size(), 7))?;
        bufs.push((s, DeviceBuffer::alloc(c.backend(), c.device(), rb.max(1))?));
    }
    let launch = |bufs: &mut Vec<(DeviceBuffer, DeviceBuffer)>| -> Result<()> {
        if coll == Coll::SendRecv {
            return super::p2p::ring_step(ranks, bufs, count, dt);
        }
        for (r, (s, o)) in bufs.iter_mut().enumerate() {
            let (c, st) = (&ranks.comms[r], &ranks.streams[r]);
            match coll {
                Coll::Broadcast => c.broadcast(s, o, count, dt, root, st)?,
                Coll::Reduce => c.reduce(s, o, count, dt, op, root, st)?,
                Coll::AllGather => c.all_gather(s, o, count, dt, st)?,
                Coll::ReduceScatter => c.reduce_scatter(s, o, count, dt, op, st)?,
                Coll::AllReduce => c.all_reduce(s, o, count, dt, op, st)?,
                Coll::AllToAll => c.all_to_all(s, o, count, dt, st)?,
                Coll::Gather => c.gather(s, o, count, dt, root, st)?,
                Coll::Scatter => c.scatter(s, o, count, dt, root, st)?,
                Coll::AllGatherV => c.all_gather_v(s, o, &counts, &displs, dt, st)?,
                // Posted by `ring_step` above, every rank in one group.
                Coll::SendRecv => {}
            }
        }
        Ok(())
    };
    super::time_launches(ranks, t, || launch(&mut bufs))
}
