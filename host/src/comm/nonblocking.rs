//! Non-blocking communicator creation (NCCL's `blocking = 0` config): `Comm::start_init_all`,
//! `Comm::start_init_rank`, `Comm::start_split` and `Comm::start_shrink` return an
//! [`InitHandle`] at once.
//!
//! In NCCL the communicator handle itself comes back at once and `ncclCommGetAsyncError`
//! reports `ncclInProgress` until it is ready; the Rust shape of that is a handle that owns
//! the communicator-to-be:
//! - [`InitHandle::async_error`] polls: [`Error::InProgress`] while running, `Ok(())` once
//!   ready, [`Error::InitFailed`] (the failure's message) if it failed;
//! - [`InitHandle::wait`] waits at most a given time and hands over the result;
//! - [`InitHandle::take`] waits for the end (bounded by the init's own timeouts);
//! - [`InitHandle::abort`] aborts: a pending init gives up within a poll interval of its
//!   waits (bootstrap joining and receives, the parent's exchanges for a split) and reports
//!   [`Error::Aborted`]; a ready one is aborted like [`Comm::abort`].
//!
//! With `config.blocking` true (the default, `NCCL_COMM_BLOCKING=1`) the work runs on the
//! calling thread and the handle is ready when returned; with false it runs on a thread of
//! its own. Dropping a pending handle aborts the init.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::shrink::ShrinkMode;
use super::split::Parent;
use super::{Comm, Config};
use crate::abort::AbortFlag;
use crate::backend::Backend;
use crate::bootstrap::{self, UniqueId};
use crate::error::{Error, Result};

mod sealed {
    pub trait Sealed {}
}

/// What an [`InitHandle`] can produce: one communicator, every rank of one, or a split's
/// result.
pub trait Pending: sealed::Sealed + Send + 'static {
    /// Abort every communicator in it ([`Comm::abort`]).
    fn abort_all(&self);
}

impl sealed::Sealed for Comm {}
impl sealed::Sealed for Vec<Comm> {}
impl sealed::Sealed for Option<Comm> {}

impl Pending for Comm {
    fn abort_all(&self) {
        self.abort();
    }
}

impl Pending for Vec<Comm> {
    fn abort_all(&self) {
        self.iter().for_each(Comm::abort);
    }
}

impl Pending for Option<Comm> {
    fn abort_all(&self) {
        self.iter().for_each(Comm::abort);
    }
}

enum Slot<T> {
    Running,
    Done(Result<T>),
    Taken,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    cv: Condvar,
}

/// A communicator being made (see the module documentation).
pub struct InitHandle<T: Pending = Comm> {
    shared: Arc<Shared<T>>,
    abort: AbortFlag,
    op: &'static str,
    rank: u32,
}

impl<T: Pending> std::fmt::Debug for InitHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.lock() {
            Slot::Running => "running",
            Slot::Done(Ok(_)) => "ready",
            Slot::Done(Err(_)) => "failed",
            Slot::Taken => "taken",
        };
        write!(f, "InitHandle({} on rank {}: {state})", self.op, self.rank)
    }
}

impl<T: Pending> InitHandle<T> {
    /// Runs `work` (on this thread when `blocking`, else on a new one); `work` must give up
    /// once the flag it gets is raised.
    fn start(
        op: &'static str,
        rank: u32,
        blocking: bool,
        abort: AbortFlag,
        work: impl FnOnce(&AbortFlag) -> Result<T> + Send + 'static,
    ) -> Self {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::Running),
            cv: Condvar::new(),
        });
        let run = {
            let (shared, abort) = (shared.clone(), abort.clone());
            move || {
                let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&abort)))
                    .unwrap_or_else(|_| {
                        Err(Error::Init(format!(
                            "{op} on rank {rank}: the init thread panicked"
                        )))
                    });
                // Aborted: whatever the work returned (it gave up, or finished meanwhile),
                // the init is aborted; NCCL's abort of a pending comm destroys it. Checked
                // under the slot's lock, which `abort` raises the flag under: an abort lands
                // either here or on the finished communicator, never in between.
                let mut slot = shared.slot.lock().unwrap_or_else(|p| p.into_inner());
                let res = match res {
                    Ok(t) if abort.is_raised() => {
                        t.abort_all();
                        Err(Error::Aborted { op, rank })
                    }
                    Err(e) if abort.is_raised() => {
                        tracing::debug!(target: "oxccl::init", op, rank, "aborted: {e}");
                        Err(Error::Aborted { op, rank })
                    }
                    r => r,
                };
                *slot = Slot::Done(res);
                drop(slot);
                shared.cv.notify_all();
            }
        };
        if blocking {
            run();
        } else if let Err(e) = std::thread::Builder::new()
            .name(format!("oxccl-init-r{rank}"))
            .spawn(run)
        {
            *shared.slot.lock().unwrap_or_else(|p| p.into_inner()) = Slot::Done(Err(Error::Init(format!(
                "{op} on rank {rank}: spawning the init thread failed: {e}"
            ))));
        }
        InitHandle {
            shared,
            abort,
            op,
            rank,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot<T>> {
        self.shared.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// NCCL's `ncclCommGetAsyncError` on a pending communicator: [`Error::InProgress`] while
    /// the init runs, `Ok(())` once it is ready (or was handed over), [`Error::InitFailed`]
    /// with the failure's message if it failed.
    pub fn async_error(&self) -> Result<()> {
        match &*self.lock() {
            Slot::Running => Err(Error::InProgress {
                op: self.op,
                rank: self.rank,
            }),
            Slot::Done(Err(e)) => Err(Error::InitFailed {
                op: self.op,
                rank: self.rank,
                message: e.to_string(),
            }),
            Slot::Done(Ok(_)) | Slot::Taken => Ok(()),
        }
    }

    /// Whether the init finished (ready or failed).
    pub fn is_done(&self) -> bool {
        !matches!(*self.lock(), Slot::Running)
    }

    /// Waits at most `timeout` for the init: its result (the communicator, or the init's own
    /// error), or [`Error::InProgress`] if it still runs (the handle stays usable). After
    /// the result was handed over, [`Error::InvalidArgument`].
    pub fn wait(&mut self, timeout: Duration) -> Result<T> {
        let deadline = Instant::now().checked_add(timeout);
        let mut slot = self.lock();
        loop {
            match std::mem::replace(&mut *slot, Slot::Taken) {
                Slot::Done(res) => return res,
                Slot::Taken => {
                    return Err(Error::InvalidArgument {
                        op: self.op,
                        rank: self.rank,
                        what: "the init's result was already taken from this handle".into(),
                    })
                }
                Slot::Running => *slot = Slot::Running,
            }
            let rest = deadline.map_or(Duration::from_secs(1), |d| {
                d.saturating_duration_since(Instant::now())
            });
            if rest.is_zero() {
                return Err(Error::InProgress {
                    op: self.op,
                    rank: self.rank,
                });
            }
            slot = self
                .shared
                .cv
                .wait_timeout(slot, rest)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits until the init ends (its own timeouts bound it) and returns its result.
    pub fn take(mut self) -> Result<T> {
        loop {
            match self.wait(Duration::from_secs(3600)) {
                Err(Error::InProgress { .. }) => continue,
                r => return r,
            }
        }
    }

    /// NCCL's `ncclCommAbort` on this communicator-to-be: a running init gives up (and
    /// reports [`Error::Aborted`]); a ready one is aborted ([`Comm::abort`]); after the
    /// result was handed over, nothing (abort the communicator itself).
    pub fn abort(&self) {
        let slot = self.lock();
        match &*slot {
            Slot::Running => self.abort.raise(),
            Slot::Done(Ok(t)) => t.abort_all(),
            Slot::Done(Err(_)) | Slot::Taken => {}
        }
    }
}

impl<T: Pending> Drop for InitHandle<T> {
    fn drop(&mut self) {
        if matches!(*self.lock(), Slot::Running) {
            self.abort.raise();
        }
    }
}

impl Comm {
    /// [`Comm::init_all_with`] as NCCL's non-blocking init: see [`InitHandle`]. One handle
    /// for every rank; `config.blocking` decides whether it runs on this thread.
    pub fn start_init_all(
        backend: Arc<dyn Backend>,
        devices: &[usize],
        config: Config,
    ) -> InitHandle<Vec<Comm>> {
        let devices = devices.to_vec();
        InitHandle::start("init_all", 0, config.blocking, AbortFlag::new(), move |_| {
            Comm::init_all_with(backend, &devices, config)
        })
    }

    /// [`Comm::init_rank_with`] as NCCL's non-blocking `ncclCommInitRankConfig`: see
    /// [`InitHandle`]. Aborting the handle aborts the bootstrap's waits (`boot.abort` is
    /// replaced by the handle's flag, which the communicator keeps as its own).
    pub fn start_init_rank(
        backend: Arc<dyn Backend>,
        nranks: u32,
        id: &UniqueId,
        rank: u32,
        device: usize,
        config: Config,
        boot: &bootstrap::Config,
    ) -> InitHandle<Comm> {
        let (id, abort) = (*id, AbortFlag::new());
        let boot = boot.clone().with_abort(Some(abort.clone()));
        InitHandle::start("init_rank", rank, config.blocking, abort, move |_| {
            Comm::init_rank_with(backend, nranks, &id, rank, device, config, &boot)
        })
    }

    /// [`Comm::split`] as NCCL's non-blocking `ncclCommSplit`: see [`InitHandle`]. Blocking
    /// or not follows `config` if given, else this communicator's config. Every rank still
    /// has to call it (or [`Comm::split`]); aborting the handle aborts this rank's part
    /// without touching the parent.
    pub fn start_split(
        &self,
        color: Option<u32>,
        key: i32,
        config: Option<Config>,
    ) -> InitHandle<Option<Comm>> {
        let blocking = config.as_ref().unwrap_or(&self.group.config).blocking;
        let parent = self.check_live("split").map(|()| Parent::of(self));
        InitHandle::start("split", self.rank, blocking, AbortFlag::new(), move |abort| {
            parent?.split(color, key, config, abort)
        })
    }

    /// [`Comm::shrink`] as NCCL's non-blocking `ncclCommShrink`: see [`InitHandle`]. The
    /// checks and, with [`ShrinkMode::Abort`], the abort of this communicator's kernels run
    /// on the calling thread; the rendezvous and init follow `config`'s `blocking` if given,
    /// else this communicator's. Aborting the handle aborts this rank's part only.
    pub fn start_shrink(
        &self,
        exclude: &[u32],
        mode: ShrinkMode,
        config: Option<Config>,
    ) -> InitHandle<Comm> {
        let blocking = config.as_ref().unwrap_or(&self.group.config).blocking;
        let prepared = self.prepare_shrink(exclude, mode);
        InitHandle::start(
            super::shrink::OP,
            self.rank,
            blocking,
            AbortFlag::new(),
            move |abort| {
                let (parent, plan) = prepared?;
                parent.shrink(&plan, config, abort)
            },
        )
    }
}
