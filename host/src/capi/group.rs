//! `ncclGroupStart` / `ncclGroupEnd` / `ncclGroupSimulateEnd` over [`crate::group`], plus
//! what the C ABI adds to a group:
//!
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

/// `ncclGroupEnd`: at the outermost level, launch the group's sends and receives, wait for
/// its deferred host collectives and (CPU backend) its operations. The first error wins;
/// everything is attempted.
pub(crate) fn end() -> Result<(), CError> {
    let outer = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(CError::usage(
                "ncclGroupEnd",
                "no group is open on this thread (ncclGroupEnd without ncclGroupStart)",
            ));
        }
        g.depth -= 1;
        Ok((g.depth == 0).then(|| (std::mem::take(&mut g.deferred), std::mem::take(&mut g.touched))))
    })?;
    let mut first: Option<CError> = None;
    if let Err(e) = crate::group::group_end() {
        first.get_or_insert(e.into());
    }
    let Some((deferred, touched)) = outer else {
        return first.map_or(Ok(()), Err);
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
    first.map_or(Ok(()), Err)
}
