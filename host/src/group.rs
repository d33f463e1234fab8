//! Groups (NCCL's `ncclGroupStart`/`ncclGroupEnd`): [`group_start`] and [`group_end`].
//!
//! A group is per thread and nests: `group_start` raises this thread's depth, `group_end`
//! lowers it, and the sends and receives posted while the depth is above 0 ([`Comm::send`],
//! [`Comm::recv`]) are deferred until the outermost `group_end`, which launches them: per
//! communicator rank, one kernel holding all of that rank's operations of the group (or a
//! few, see [`crate::p2p::plan`]), on the stream they were posted with. A group may hold the
//! operations of several communicators, or of several ranks of one communicator (one thread
//! driving every rank of an `init_all` communicator, as with NCCL). Every operation of a
//! launch is in progress at once, so a group completes in any posting order: a receive before
//! its send, exchanges with many peers, a rank sending to itself.
//!
//! Collectives inside a group are launched when they are called, before the group's sends
//! and receives; this is the order NCCL's group launch gives (a group's collectives are
//! scheduled before its point-to-point operations), and collectives never need deferring here
//! because their launches do not block the host.
//!
//! The operations of one communicator rank within one group must use one stream (an
//! [`Error::InvalidUsage`] otherwise: oxccl does not join streams). Errors found when an
//! operation is posted are returned by that call (the operation is not added to the group);
//! errors of launching are returned by the outermost `group_end`, which launches every other
//! operation of the group regardless.
//!
//! [`Comm::send`]: crate::Comm::send
//! [`Comm::recv`]: crate::Comm::recv

use std::cell::RefCell;
use std::sync::Arc;

use oxccl_device::abi::{Header, P2pArgs, P2pOp, P2P_DIRECT, P2P_MAX_LANES, P2P_MAX_OPS, P2P_STAGED};

use crate::backend::{BackendKind, Grid, Stream};
use crate::error::{Error, Result};
use crate::p2p::plan::{self, Limits, PlanOp};
use crate::p2p::{P2pState, Posted};

/// An operation waiting for the outermost [`group_end`].
pub(crate) struct Pending {
    pub state: Arc<P2pState>,
    pub stream: Stream,
    pub op: Posted,
    /// The rank's collective epoch counter when it was posted.
    pub epoch: u64,
}

#[derive(Default)]
struct GroupState {
    depth: usize,
    pending: Vec<Pending>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::default();
}

/// Start a group (NCCL's `ncclGroupStart`): sends and receives posted on this thread until
/// the matching [`group_end`] are deferred to it. Groups nest; only the outermost
/// `group_end` launches.
pub fn group_start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// End a group (NCCL's `ncclGroupEnd`): at the outermost level, launch every operation
/// posted in the group. Returns the first launch error (every launch is attempted), or
/// [`Error::InvalidUsage`] without a matching [`group_start`].
pub fn group_end() -> Result<()> {
    let ops = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::InvalidUsage {
                op: "group_end",
                what: "no group is open on this thread (group_end without group_start)".into(),
            });
        }
        g.depth -= 1;
        Ok(if g.depth == 0 {
            std::mem::take(&mut g.pending)
        } else {
            Vec::new()
        })
    })?;
    launch_all(ops)
}

/// A send or receive that [`group_discard_end`] dropped: what the cost model needs of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DroppedP2p {
    /// Identifies the communicator rank that posted it (equal for the same rank).
    pub rank_key: u64,
    /// Bytes it would have moved.
    pub bytes: u64,
    /// Whether its communicator spans processes (staged).
    pub spanning: bool,
    pub backend: BackendKind,
}

/// End a group like [`group_end`] but, at the outermost level, drop the sends and receives
/// posted in it instead of launching them (NCCL's `ncclGroupSimulateEnd`); returns what was
/// dropped (nothing at an inner level, which only closes).
pub fn group_discard_end() -> Result<Vec<DroppedP2p>> {
    let ops = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::InvalidUsage {
                op: "group_end",
                what: "no group is open on this thread (group_end without group_start)".into(),
            });
        }
        g.depth -= 1;
        Ok(if g.depth == 0 {
            std::mem::take(&mut g.pending)
        } else {
            Vec::new()
        })
    })?;
    Ok(ops
        .into_iter()
        .map(|p| DroppedP2p {
            rank_key: Arc::as_ptr(&p.state) as u64,
            bytes: (p.op.count * p.op.dtype.size()) as u64,
            spanning: p.state.staging.is_some(),
            backend: p.state.backend().kind(),
        })
        .collect())
}

/// This thread's group depth (0: not in a group).
pub fn group_depth() -> usize {
    GROUP.with(|g| g.borrow().depth)
}

/// Add `p` to this thread's group, or launch it at once outside a group.
pub(crate) fn post(p: Pending) -> Result<()> {
    let now = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Ok(Some(p));
        }
        if let Some(other) = g
            .pending
            .iter()
            .find(|o| Arc::ptr_eq(&o.state, &p.state) && !same_stream(&o.stream, &p.stream))
        {
            return Err(Error::InvalidUsage {
                op: p.op.op_name(),
                what: format!(
                    "rank {} posted a {} to rank {} in this group on another stream than its earlier {} with rank {}; the operations of one communicator rank in a group must use one stream",
                    p.state.rank,
                    p.op.op_name(),
                    p.op.peer,
                    other.op.op_name(),
                    other.op.peer
                ),
            });
        }
        g.pending.push(p);
        Ok(None)
    })?;
    match now {
        Some(p) => launch_all(vec![p]),
        None => Ok(()),
    }
}

fn same_stream(a: &Stream, b: &Stream) -> bool {
    match (a, b) {
        (Stream::Gpu(x), Stream::Gpu(y)) => Arc::ptr_eq(x, y),
        (Stream::Cpu(x), Stream::Cpu(y)) => Arc::ptr_eq(x, y),
        _ => false,
    }
}

/// One communicator rank's operations of a group: its state, its stream, and its operations
/// in posting order with the epoch each was posted at.
type RankOps = (Arc<P2pState>, Stream, Vec<(Posted, u64)>);

/// Launch the operations of a group: per communicator rank (in order of first use), its
/// operations in posting order. Every rank is launched; the first error is returned.
fn launch_all(ops: Vec<Pending>) -> Result<()> {
    let mut per_rank: Vec<RankOps> = Vec::new();
    for p in ops {
        match per_rank.iter_mut().find(|r| Arc::ptr_eq(&r.0, &p.state)) {
            Some(r) => r.2.push((p.op, p.epoch)),
            None => per_rank.push((p.state, p.stream, vec![(p.op, p.epoch)])),
        }
    }
    let mut first = None;
    for (state, stream, ops) in per_rank {
        if let Err(e) = launch_rank(&state, &stream, &ops) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Bytes of data per extra lane of a send.
const LANE_BYTES_GPU: u64 = 64 * 1024;
const LANE_BYTES_CPU: u64 = 4 << 20;

/// Launch one rank's operations of a group.
fn launch_rank(st: &P2pState, stream: &Stream, ops: &[(Posted, u64)]) -> Result<()> {
    let _span =
        tracing::debug_span!(target: "oxccl::p2p", "group launch", rank = st.rank, ops = ops.len()).entered();
    if st.closed.load(std::sync::atomic::Ordering::Acquire) {
        return Err(Error::InvalidUsage {
            op: "group_end",
            what: format!(
                "rank {} of a communicator dropped before group_end had {} send/recv operations pending; they were not launched",
                st.rank,
                ops.len()
            ),
        });
    }
    let backend = st.backend();
    let budget = backend.max_p2p_blocks_per_rank(st.group.ranks_per_device).max(2);
    let mut lim = Limits {
        max_ops: P2P_MAX_OPS.min(budget as usize).max(2),
        max_blocks: budget,
        max_lanes: P2P_MAX_LANES,
        lane_bytes: LANE_BYTES_GPU,
        multi_lane: st.staging.is_none(),
    };
    if backend.kind() == BackendKind::Cpu {
        lim.lane_bytes = LANE_BYTES_CPU;
        // The CPU backend's blocks per rank are its `OXCCL_CPU_BLOCKS` threads.
        let threads = backend.max_blocks_per_rank(st.group.ranks_per_device, oxccl_device::abi::DataType::U8);
        lim.max_lanes = threads.min(P2P_MAX_LANES);
    }
    let cap = st.group.config.max_blocks;
    if cap > 0 {
        lim.max_blocks = lim.max_blocks.min(cap.max(2));
        lim.max_ops = lim.max_ops.min(lim.max_blocks as usize);
    }
    // Sequence numbers in posting order, and each operation's index among this group's
    // operations with the same peer and direction.
    let mut inner = st.inner.lock().unwrap_or_else(|p| p.into_inner());
    let n = st.nranks as usize;
    let mut in_group = vec![[0u32; 2]; n];
    let mut seqs = Vec::with_capacity(ops.len());
    let mut plan_ops = Vec::with_capacity(ops.len());
    for (p, _) in ops {
        let q = p.peer as usize;
        let seq = if p.recv {
            inner.recv_seq[q] += 1;
            inner.recv_seq[q]
        } else {
            inner.send_seq[q] += 1;
            inner.send_seq[q]
        };
        seqs.push(seq);
        let t = &mut in_group[q][p.recv as usize];
        plan_ops.push(PlanOp {
            recv: p.recv,
            peer: p.peer,
            bytes: p.count as u64 * p.dtype.size() as u64,
            pair_index: *t,
        });
        *t += 1;
    }
    let mut first_err = None;
    for launch in plan::launches(&plan_ops, st.rank, st.nranks, lim.max_ops) {
        let these: Vec<PlanOp> = launch.iter().map(|&i| plan_ops[i]).collect();
        let lanes = plan::lanes(&these, &lim);
        inner.serial = inner.serial.wrapping_add(1);
        let serial = inner.serial;
        let mut args = P2pArgs {
            header: Header::of::<P2pArgs>(),
            comm: st.comm,
            nops: launch.len() as u32,
            mode: if st.staging.is_some() {
                P2P_STAGED
            } else {
                P2P_DIRECT
            },
            stage_offset: st.staging.map_or(0, |s| s.1),
            slot_bytes: st.slot_bytes(),
            epoch: 0,
            serial,
            _pad: 0,
            ops: [P2pOp::default(); P2P_MAX_OPS],
        };
        let mut blocks = 0u32;
        let mut logged = Vec::with_capacity(launch.len());
        for (slot, (&i, &l)) in launch.iter().zip(&lanes).enumerate() {
            let (p, epoch) = ops[i];
            args.epoch = args.epoch.max(epoch);
            args.ops[slot] = P2pOp {
                addr: p.addr,
                count: p.count as u64,
                seq: seqs[i],
                peer: p.peer,
                meta: P2pOp::meta_of(p.dtype as u32, p.recv, l),
            };
            blocks += l;
            logged.push(p);
        }
        P2pState::log_launch(&mut inner, serial, logged);
        let grid = Grid {
            blocks,
            threads: backend.block_threads(),
        };
        tracing::trace!(target: "oxccl::p2p", ?grid, serial, "launch send/recv");
        if let Err(e) = backend.launch_p2p(stream, grid, &args) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}
