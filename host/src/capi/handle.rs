//! C handles (`ncclComm_t`, `ncclWindow_t`): opaque numbers, never addresses. Each is a
//! key into a process-wide table, handed out once and never reused, so a handle used after
//! `ncclCommDestroy` (or one that never was a communicator) is found missing and reported
//! as `ncclInvalidArgument` instead of being dereferenced.
//!
//! A communicator's state moves Pending (a non-blocking or grouped init/split still
//! running: [`InitHandle`]) → Ready or Failed; calls that need the communicator wait for a
//! pending one ([`CComm::comm`]), `ncclCommGetAsyncError` only polls it ([`CComm::poll`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::CError;
use crate::backend::{BackendKind, Stream};
use crate::coll::Op;
use crate::comm::{Comm, InitHandle};
use crate::window::{DevCommHandle, Window};

/// Handles start here and step by 16 (they look like aligned pointers to debuggers; 0 is
/// never one).
const FIRST_HANDLE: usize = 0x0c0c_0000;

static NEXT: AtomicUsize = AtomicUsize::new(FIRST_HANDLE);

pub(crate) fn next_handle() -> usize {
    NEXT.fetch_add(16, Ordering::Relaxed)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) enum State {
    Init(InitHandle<Comm>),
    Split(InitHandle<Option<Comm>>),
    Ready(Arc<Comm>),
    Failed(CError),
    /// Destroyed (kept only while a racing call still holds the `CComm`).
    Gone,
}

/// A `ncclRedOpCreatePreMulSum` operator.
#[derive(Clone, Copy, Debug)]
pub(crate) enum UserOp {
    /// Host scalar, already in the operator's type.
    Host(Op, oxccl_device::abi::DataType),
    /// Device scalar: read (stream-ordered) when a collective uses it.
    Device(u64, oxccl_device::abi::DataType),
}

/// What a `ncclComm_t` refers to.
pub(crate) struct CComm {
    pub handle: usize,
    state: Mutex<State>,
    /// Operators from `ncclRedOpCreatePreMulSum`, by `op - ncclNumOps`.
    pub ops: Mutex<Vec<Option<UserOp>>>,
    /// Caller streams wrapped for launching (GPU), or this rank's one stream (CPU, key 0);
    /// kept so that finalize and destroy can wait for the work launched on them.
    pub streams: Mutex<HashMap<usize, Stream>>,
    /// `ncclCommRevoke` was called: new operations are refused.
    pub revoked: AtomicBool,
    /// `ncclCommRegister` handles: handle → (address, bytes).
    pub regs: Mutex<HashMap<usize, (u64, usize)>>,
    /// Device communicators made by `ncclDevCommCreate`.
    pub devcomms: Mutex<Vec<DevCommHandle>>,
    /// `commName` of the config, for logs.
    pub name: Option<String>,
    /// The config's `blocking`: false makes init, split and finalize return
    /// `ncclInProgress` and finish in the background.
    pub blocking: bool,
    /// A non-blocking `ncclCommFinalize` running in the background.
    pub finalizing: Mutex<Option<std::thread::JoinHandle<Result<(), CError>>>>,
}

static COMMS: Mutex<Option<HashMap<usize, Arc<CComm>>>> = Mutex::new(None);

impl CComm {
    fn new(state: State, name: Option<String>, blocking: bool) -> Arc<CComm> {
        let c = Arc::new(CComm {
            handle: next_handle(),
            state: Mutex::new(state),
            ops: Mutex::default(),
            streams: Mutex::default(),
            revoked: AtomicBool::new(false),
            regs: Mutex::default(),
            devcomms: Mutex::default(),
            name,
            blocking,
            finalizing: Mutex::default(),
        });
        lock(&COMMS)
            .get_or_insert_with(HashMap::new)
            .insert(c.handle, c.clone());
        c
    }

    /// A handle for a ready communicator.
    pub fn ready(comm: Comm, name: Option<String>, blocking: bool) -> Arc<CComm> {
        Self::new(State::Ready(Arc::new(comm)), name, blocking)
    }

    /// A handle for an init still running.
    pub fn pending_init(h: InitHandle<Comm>, name: Option<String>, blocking: bool) -> Arc<CComm> {
        Self::new(State::Init(h), name, blocking)
    }

    /// A handle for a split still running (this rank has a color: the result is a comm).
    pub fn pending_split(h: InitHandle<Option<Comm>>, name: Option<String>, blocking: bool) -> Arc<CComm> {
        Self::new(State::Split(h), name, blocking)
    }

    /// The communicator if it is ready (no waiting).
    pub fn ready_comm(&self) -> Option<Arc<Comm>> {
        match &*lock(&self.state) {
            State::Ready(c) => Some(c.clone()),
            _ => None,
        }
    }

    /// The communicator of a C handle (`op` names the call in the error).
    pub fn get(op: &'static str, handle: usize) -> Result<Arc<CComm>, CError> {
        if handle == 0 {
            return Err(CError::arg(op, "comm is NULL"));
        }
        let c = lock(&COMMS)
            .as_ref()
            .and_then(|m| m.get(&handle).cloned())
            .ok_or_else(|| {
                CError::arg(
                    op,
                    format!("comm {handle:#x} is not a communicator (destroyed already, or never made by ncclCommInit*)"),
                )
            })?;
        // Errors of this call name the communicator by its commName.
        super::error::note_comm_name(c.name.as_deref());
        Ok(c)
    }

    /// Forget the handle (later calls with it are refused) and return what it held.
    pub fn remove(&self) -> State {
        if let Some(m) = lock(&COMMS).as_mut() {
            m.remove(&self.handle);
        }
        std::mem::replace(&mut *lock(&self.state), State::Gone)
    }

    /// Resolve a finished pending state.
    fn settle(&self, st: &mut State) {
        let failed = |e: crate::Error| State::Failed(e.into());
        let next = match std::mem::replace(st, State::Gone) {
            State::Init(h) if h.is_done() => match h.take() {
                Ok(c) => State::Ready(Arc::new(c)),
                Err(e) => failed(e),
            },
            State::Split(h) if h.is_done() => match h.take() {
                Ok(Some(c)) => State::Ready(Arc::new(c)),
                Ok(None) => State::Failed(CError {
                    code: super::types::INTERNAL_ERROR,
                    message: "split: this rank gave a color but was left out".into(),
                }),
                Err(e) => failed(e),
            },
            other => other,
        };
        *st = next;
    }

    /// The communicator, waiting for a pending init or split to end.
    pub fn comm(&self, op: &'static str) -> Result<Arc<Comm>, CError> {
        if self.revoked.load(Ordering::Acquire) {
            return Err(CError::usage(
                op,
                "the communicator was revoked (ncclCommRevoke): only destroy, split and shrink remain",
            ));
        }
        self.comm_even_revoked(op)
    }

    /// As [`CComm::comm`], also on a revoked communicator (destroy, split).
    pub fn comm_even_revoked(&self, op: &'static str) -> Result<Arc<Comm>, CError> {
        // Poll rather than wait under the lock, so that `ncclCommAbort` from another thread
        // can reach a pending init (whose own timeouts bound this loop).
        let st = loop {
            let mut st = lock(&self.state);
            self.settle(&mut st);
            if !matches!(*st, State::Init(_) | State::Split(_)) {
                break st;
            }
            drop(st);
            std::thread::sleep(std::time::Duration::from_micros(200));
        };
        match &*st {
            State::Ready(c) => Ok(c.clone()),
            State::Failed(e) => Err(CError {
                code: e.code,
                message: format!("{op}: the communicator's creation failed: {}", e.message),
            }),
            _ => Err(CError::arg(op, "the communicator was destroyed")),
        }
    }

    /// `ncclCommGetAsyncError`: in progress while pending, the creation's error, or the
    /// communicator's first device error.
    pub fn poll(&self, op: &'static str) -> Result<(), CError> {
        let comm = {
            let mut st = lock(&self.state);
            self.settle(&mut st);
            match &*st {
                State::Init(_) | State::Split(_) => return Err(CError::in_progress(op)),
                State::Failed(e) => return Err(e.clone()),
                State::Gone => return Err(CError::arg(op, "the communicator was destroyed")),
                State::Ready(c) => c.clone(),
            }
        };
        {
            let mut f = lock(&self.finalizing);
            if f.as_ref().is_some_and(|h| !h.is_finished()) {
                return Err(CError::in_progress(op));
            }
            if let Some(h) = f.take() {
                h.join().unwrap_or_else(|_| {
                    Err(CError {
                        code: super::types::INTERNAL_ERROR,
                        message: format!("{op}: internal error (a panic in the background finalize)"),
                    })
                })?;
            }
        }
        comm.async_error().map_err(CError::from)
    }

    /// Abort: a pending init or split gives up; a ready communicator's waits end.
    pub fn abort(&self) {
        match &*lock(&self.state) {
            State::Init(h) => h.abort(),
            State::Split(h) => h.abort(),
            State::Ready(c) => c.abort(),
            State::Failed(_) | State::Gone => {}
        }
    }

    /// The stream to launch on for the caller's `cudaStream_t` `raw`.
    pub fn stream(&self, comm: &Comm, raw: usize) -> Result<Stream, CError> {
        let b = comm.backend();
        let key = if b.kind() == BackendKind::Cpu { 0 } else { raw };
        let mut m = lock(&self.streams);
        if let Some(s) = m.get(&key) {
            return Ok(s.clone());
        }
        let s = match b.as_gpu() {
            // SAFETY: nccl.h's contract: the caller's stream lives while work runs on it.
            Some(g) => unsafe { g.wrap_stream(comm.device(), raw) }?,
            None => comm.create_stream()?,
        };
        // Bound the cache: a caller cycling through streams keeps the last ones only.
        if m.len() >= 64 {
            m.clear();
        }
        m.insert(key, s.clone());
        Ok(s)
    }
}

/// What a `ncclWindow_t` refers to.
pub(crate) struct CWin {
    pub handle: usize,
    pub comm: usize,
    pub window: Mutex<Option<Window>>,
    pub user_ptr: u64,
}

static WINS: Mutex<Option<HashMap<usize, Arc<CWin>>>> = Mutex::new(None);

impl CWin {
    /// Register a window handle.
    pub fn insert(comm: usize, window: Window, user_ptr: u64) -> usize {
        let handle = next_handle();
        let w = Arc::new(CWin {
            handle,
            comm,
            window: Mutex::new(Some(window)),
            user_ptr,
        });
        lock(&WINS).get_or_insert_with(HashMap::new).insert(handle, w);
        handle
    }

    /// The window of a handle.
    pub fn get(op: &'static str, handle: usize) -> Result<Arc<CWin>, CError> {
        if handle == 0 {
            return Err(CError::arg(op, "window is NULL"));
        }
        lock(&WINS)
            .as_ref()
            .and_then(|m| m.get(&handle).cloned())
            .ok_or_else(|| {
                CError::arg(
                    op,
                    format!("window {handle:#x} is not a registered window (deregistered already?)"),
                )
            })
    }

    /// Forget a handle.
    pub fn remove(handle: usize) -> Option<Arc<CWin>> {
        lock(&WINS).as_mut().and_then(|m| m.remove(&handle))
    }

    /// The windows of one communicator (deregistered when it is destroyed).
    pub fn of_comm(comm: usize) -> Vec<usize> {
        lock(&WINS)
            .as_ref()
            .map(|m| m.values().filter(|w| w.comm == comm).map(|w| w.handle).collect())
            .unwrap_or_default()
    }
}
