//! `ncclGroupStart` / `ncclGroupEnd` / `ncclGroupSimulateEnd` over [`crate::group`], plus
//! what the C ABI adds to a group:
//!
//! - **Queued collectives.** A collective called inside a group is checked (arguments,
//!   operator, scalar) when called and launched at the outermost `ncclGroupEnd`, before the
//!   group's sends and receives, in call order, as NCCL launches a group. The outermost
//!   `ncclGroupSimulateEnd` launches nothing: it drops the group's collectives and sends and
//!   receives and reports their estimated time ([`crate::coll::cost`]).
//! - **Deferred host collectives.** Inits, splits, window registrations and finalizes called
//!   inside a group start at once on a background thread and are joined at the outermost
//!   `ncclGroupEnd`, so one thread can drive every rank (`ncclCommInitRank` for each rank
//!   between `ncclGroupStart` and `ncclGroupEnd`, as NCCL allows). Outside a group they run
//!   on the calling thread.
//! - **Completion on the CPU backend.** There are no CUDA streams there: an operation outside
//!   a group has completed when its call returns, and every operation of a group when the
//!   outermost `ncclGroupEnd` returns (the streams the group launched on are synchronized).
//!   On the GPU, completion is stream-ordered as with NCCL.

use std::cell::RefCell;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::error::CError;
use super::handle::CComm;
use crate::backend::{Backend, BackendKind, Stream};

/// A collective called inside a group, waiting for the outermost group end.
pub(crate) struct QueuedColl {
    /// Launches it (on the CPU backend, records its stream as [`launched`] does).
    pub launch: Box<dyn FnOnce() -> Result<(), CError>>,
    /// The communicator rank it runs on, and its estimated microseconds.
    pub estimate: (u64, f64),
}

/// Work a group waits for at its end.
pub(crate) enum Deferred {
    /// A communicator whose init or split runs in the background.
    Comm(Arc<CComm>),
    /// A host collective on a thread.
    Job(&'static str, JoinHandle<Result<(), CError>>),
}

#[derive(Default)]
struct CGroup {
    depth: usize,
    deferred: Vec<Deferred>,
    /// CPU-backend streams launched on in this group (synchronized at its end).
    touched: Vec<(Arc<dyn Backend>, Stream)>,
    /// Collectives called in this group, launched at its end.
    colls: Vec<QueuedColl>,
}

thread_local! {
    static GROUP: RefCell<CGroup> = RefCell::default();
}

/// Whether this thread is inside a group.
pub(crate) fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

pub(crate) fn start() {
    crate::group::group_start();
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Queue a collective in this thread's group (the caller checked [`in_group`]).
pub(crate) fn queue(q: QueuedColl) {
    GROUP.with(|g| g.borrow_mut().colls.push(q));
}

/// Add `d` to this thread's group (the caller checked [`in_group`]).
pub(crate) fn defer(d: Deferred) {
    GROUP.with(|g| g.borrow_mut().deferred.push(d));
}

/// Run `f` now outside a group, or on a thread joined at the group's end.
pub(crate) fn run_or_defer(
    op: &'static str,
    f: impl FnOnce() -> Result<(), CError> + Send + 'static,
) -> Result<(), CError> {
    if !in_group() {
        return f();
    }
    let h = std::thread::Builder::new()
        .name(format!("oxccl-{op}"))
        .spawn(f)
        .map_err(|e| CError {
            code: super::types::SYSTEM_ERROR,
            message: format!("{op}: could not start a thread for the grouped call: {e}"),
        })?;
    defer(Deferred::Job(op, h));
    Ok(())
}

/// An operation was launched on `stream`: on the CPU backend, wait for it now (outside a
/// group) or at the group's end.
pub(crate) fn launched(backend: &Arc<dyn Backend>, stream: &Stream) -> Result<(), CError> {
    if backend.kind() != BackendKind::Cpu {
        return Ok(());
    }
    let now = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return true;
        }
        g.touched.push((backend.clone(), stream.clone()));
        false
    });
    if now {
        backend.synchronize(stream)?;
    }
    Ok(())
}

/// The collectives queued in the group if the group being closed is the outermost one
/// (left in the group, at depth 1, while they launch: their CPU streams are recorded).
fn take_colls(op: &'static str) -> Result<Vec<QueuedColl>, CError> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        match g.depth {
            0 => Err(CError::usage(
                op,
                format!("no group is open on this thread ({op} without ncclGroupStart)"),
            )),
            1 => Ok(std::mem::take(&mut g.colls)),
            _ => Ok(Vec::new()),
        }
    })
}

/// Close one level; at the outermost, hand over what the group waits for.
type Closed = Option<(Vec<Deferred>, Vec<(Arc<dyn Backend>, Stream)>)>;

fn close_level() -> Closed {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.depth -= 1;
        (g.depth == 0).then(|| (std::mem::take(&mut g.deferred), std::mem::take(&mut g.touched)))
    })
}

/// Wait for a closed group's host collectives and (CPU backend) its streams.
fn wait_closed(closed: Closed, first: &mut Option<CError>) {
    let Some((deferred, touched)) = closed else {
        return;
    };
    for d in deferred {
        let r = match d {
            Deferred::Comm(c) => c.comm_even_revoked("ncclGroupEnd").map(|_| ()),
            Deferred::Job(op, h) => h.join().unwrap_or_else(|_| {
                Err(CError {
                    code: super::types::INTERNAL_ERROR,
                    message: format!("{op}: internal error (a panic in the grouped call)"),
                })
            }),
        };
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    for (b, s) in touched {
        if let Err(e) = b.synchronize(&s) {
            first.get_or_insert(e.into());
        }
    }
}

/// `ncclGroupEnd`: at the outermost level, launch the group's collectives, then its sends
/// and receives, wait for its deferred host collectives and (CPU backend) its operations.
/// The first error wins; everything is attempted.
pub(crate) fn end() -> Result<(), CError> {
    let colls = take_colls("ncclGroupEnd")?;
    let mut first: Option<CError> = None;
    for q in colls {
        if let Err(e) = (q.launch)() {
            first.get_or_insert(e);
        }
    }
    let closed = close_level();
    if let Err(e) = crate::group::group_end() {
        first.get_or_insert(e.into());
    }
    wait_closed(closed, &mut first);
    first.map_or(Ok(()), Err)
}

/// `ncclGroupSimulateEnd`: at the outermost level, drop the group's collectives and sends
/// and receives (nothing is launched) and return their estimated time in microseconds
/// ([`crate::coll::cost::group_us`]); host collectives called in the group (inits, splits,
/// registrations) still complete, as they do at `ncclGroupEnd`. At an inner level it only
/// closes that level (`None`: no estimate).
pub(crate) fn simulate_end() -> Result<Option<f64>, CError> {
    const OP: &str = "ncclGroupSimulateEnd";
    let colls = take_colls(OP)?;
    let outer = GROUP.with(|g| g.borrow().depth == 1);
    let mut estimates: Vec<(u64, f64)> = colls.into_iter().map(|q| q.estimate).collect();
    let closed = close_level();
    let mut first: Option<CError> = None;
    match crate::group::group_discard_end() {
        Ok(dropped) => estimates.extend(dropped.iter().map(|d| {
            (
                d.rank_key,
                crate::coll::cost::p2p_us(d.backend, d.bytes, d.spanning),
            )
        })),
        Err(e) => {
            first.get_or_insert(e.into());
        }
    }
    wait_closed(closed, &mut first);
    if let Some(e) = first {
        return Err(e);
    }
    Ok(outer.then(|| crate::coll::cost::group_us(&estimates)))
}
