//! Unique ids and the communicator lifecycle: `ncclGetUniqueId`, `ncclCommInitRank*`,
//! `ncclCommInitAll`, `ncclCommSplit`, `ncclCommFinalize`, `ncclCommDestroy`,
//! `ncclCommShrink`, `ncclCommAbort`, `ncclCommRevoke`, `ncclCommGetAsyncError`, the rank
//! queries, and the calls oxccl refuses with a reason (`ncclCommGrow`, suspension).

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::error::{put, CError};
use super::group::{self, Deferred};
use super::handle::{CComm, CWin, State};
use super::types::*;
use crate::bootstrap::{self, Root, UniqueId};
use crate::comm::{Comm, Config, ShrinkMode};

/// `ncclComm_t`.
pub type NcclComm = *mut c_void;

/// Roots of ids made here: each serves its rendezvous until it completes or times out.
static ROOTS: Mutex<Vec<Root>> = Mutex::new(Vec::new());

/// oxccl's [`Config`] for a caller's parsed `ncclConfig_t`: the defaults with the fields the
/// caller set (`blocking`, `commName`, `minCTAs`, `maxCTAs`; `NCCL_MAX_CTAS` /
/// `OXCCL_MAX_BLOCKS` in the environment win over `maxCTAs`, as NCCL's environment wins
/// over its config). `splitShare`, `shrinkShare` and the fields without an oxccl meaning
/// change nothing (README, C ABI section).
fn config_for(parsed: &ParsedConfig) -> Config {
    let mut c = Config::default();
    if let Some(b) = parsed.blocking {
        c.blocking = b;
    }
    if let Some(m) = parsed.max_ctas {
        if crate::settings::max_blocks() == 0 {
            c.max_blocks = m;
        }
    }
    if let Some(m) = parsed.min_ctas {
        c.min_blocks = m;
    }
    c.name = parsed.name.clone();
    c
}

fn handle_ptr(c: &CComm) -> NcclComm {
    c.handle as NcclComm
}

/// The init of every `ncclCommInitRank*` form.
unsafe fn init_rank(
    op: &'static str,
    out: *mut NcclComm,
    nranks: c_int,
    id: &NcclUniqueId,
    rank: c_int,
    cfg: *const NcclConfig,
) -> Result<(), CError> {
    if out.is_null() {
        return Err(CError::arg(op, "comm (the output) is NULL"));
    }
    if nranks < 1 {
        return Err(CError::arg(op, format!("nranks {nranks} is below 1")));
    }
    if rank < 0 || rank >= nranks {
        return Err(CError::arg(op, format!("rank {rank} is not in [0, {nranks})")));
    }
    // SAFETY: caller contract (a config from NCCL_CONFIG_INITIALIZER, or NULL).
    let parsed = unsafe { parse_config(op, cfg) }?;
    let bytes: [u8; 128] = id.internal.map(|c| c as u8);
    let id = UniqueId::from_bytes(&bytes)
        .map_err(|e| CError::arg(op, format!("the ncclUniqueId is not one: {e}")))?;
    let b = super::backend();
    let device = super::current_device(&*b)?;
    let mut config = config_for(&parsed);
    let blocking = config.blocking;
    let boot = bootstrap::Config::from_env().map_err(|source| crate::Error::Bootstrap {
        rank: rank as u32,
        source,
    })?;
    let (n, r) = (nranks as u32, rank as u32);
    tracing::info!(
        target: "oxccl::capi",
        "{op}: rank {r} of {n} on device {device}, {}{}",
        if blocking { "blocking" } else { "non-blocking" },
        parsed.name.as_deref().map(|n| format!(", communicator \"{n}\"")).unwrap_or_default()
    );
    if group::in_group() || !blocking {
        config.blocking = false;
        let h = Comm::start_init_rank(b, n, &id, r, device, config, &boot);
        let c = CComm::pending_init(h, parsed.name, blocking);
        // SAFETY: checked non-null; caller contract.
        unsafe { out.write(handle_ptr(&c)) };
        if group::in_group() {
            group::defer(Deferred::Comm(c));
        }
        return if blocking {
            Ok(())
        } else {
            Err(CError::in_progress(op))
        };
    }
    let comm = Comm::init_rank_with(b, n, &id, r, device, config, &boot)?;
    let c = CComm::ready(comm, parsed.name, true);
    // SAFETY: checked non-null; caller contract.
    unsafe { out.write(handle_ptr(&c)) };
    Ok(())
}

api! {
    /// Make a unique id: starts this process's rendezvous root for it (kept until the
    /// rendezvous completes or times out).
    fn ncclGetUniqueId / pncclGetUniqueId(out: *mut NcclUniqueId) {
        const OP: &str = "ncclGetUniqueId";
        if out.is_null() {
            return Err(CError::arg(OP, "uniqueId is NULL"));
        }
        let boot = bootstrap::Config::from_env().map_err(|source| crate::Error::Bootstrap { rank: 0, source })?;
        let (id, root) = UniqueId::with_config(None, &boot)
            .map_err(|source| crate::Error::Bootstrap { rank: 0, source })?;
        let mut roots = ROOTS.lock().unwrap_or_else(|p| p.into_inner());
        roots.retain(|r| !r.is_finished());
        roots.push(root);
        let bytes = id.to_bytes();
        // SAFETY: checked non-null.
        unsafe { out.write(NcclUniqueId { internal: bytes.map(|b| b as std::ffi::c_char) }) };
        Ok(())
    }
}

api! {
    fn ncclCommInitRank / pncclCommInitRank(comm: *mut NcclComm, nranks: c_int, id: NcclUniqueId, rank: c_int) {
        // SAFETY: caller contract.
        unsafe { init_rank("ncclCommInitRank", comm, nranks, &id, rank, std::ptr::null()) }
    }
}

api! {
    fn ncclCommInitRankConfig / pncclCommInitRankConfig(
        comm: *mut NcclComm,
        nranks: c_int,
        id: NcclUniqueId,
        rank: c_int,
        config: *mut NcclConfig,
    ) {
        // SAFETY: caller contract.
        unsafe { init_rank("ncclCommInitRankConfig", comm, nranks, &id, rank, config) }
    }
}

api! {
    /// Every rank passes the same list of ids; oxccl's root serves any number of ranks, so the
    /// first id is the rendezvous of all of them.
    fn ncclCommInitRankScalable / pncclCommInitRankScalable(
        comm: *mut NcclComm,
        nranks: c_int,
        rank: c_int,
        n_id: c_int,
        ids: *mut NcclUniqueId,
        config: *mut NcclConfig,
    ) {
        const OP: &str = "ncclCommInitRankScalable";
        if n_id < 1 || ids.is_null() {
            return Err(CError::arg(OP, format!("{n_id} ids at {ids:?}: at least one id is needed")));
        }
        // SAFETY: checked non-null; caller contract (n_id ids).
        let id = unsafe { *ids };
        // SAFETY: caller contract.
        unsafe { init_rank(OP, comm, nranks, &id, rank, config) }
    }
}

api! {
    /// Every rank in this process at once; `devlist` NULL means devices 0, 1, ... (round
    /// robin over the visible devices: ranks may share one).
    fn ncclCommInitAll / pncclCommInitAll(comms: *mut NcclComm, ndev: c_int, devlist: *const c_int) {
        const OP: &str = "ncclCommInitAll";
        if comms.is_null() {
            return Err(CError::arg(OP, "comms is NULL"));
        }
        if ndev < 1 {
            return Err(CError::arg(OP, format!("ndev {ndev} is below 1")));
        }
        let b = super::backend();
        let count = b.device_count().max(1);
        let mut devices = Vec::with_capacity(ndev as usize);
        for i in 0..ndev as usize {
            let d = if devlist.is_null() {
                i % count
            } else {
                // SAFETY: caller contract (ndev entries).
                let d = unsafe { *devlist.add(i) };
                if d < 0 || d as usize >= count {
                    return Err(CError::arg(OP, format!("devlist[{i}] = {d} is not a device (0 to {})", count - 1)));
                }
                d as usize
            };
            devices.push(d);
        }
        let all = Comm::init_all_with(b, &devices, Config::default())?;
        for (i, c) in all.into_iter().enumerate() {
            let h = CComm::ready(c, None, true);
            // SAFETY: caller contract (room for ndev handles).
            unsafe { comms.add(i).write(handle_ptr(&h)) };
        }
        Ok(())
    }
}

api! {
    /// Collective over the parent (every rank calls it); `NCCL_SPLIT_NOCOLOR` ranks take
    /// part and get NULL. In a group (or with a non-blocking config) the split runs in the
    /// background.
    fn ncclCommSplit / pncclCommSplit(
        comm: NcclComm,
        color: c_int,
        key: c_int,
        newcomm: *mut NcclComm,
        config: *mut NcclConfig,
    ) {
        const OP: &str = "ncclCommSplit";
        if newcomm.is_null() {
            return Err(CError::arg(OP, "newcomm is NULL"));
        }
        if color < SPLIT_NOCOLOR {
            return Err(CError::arg(OP, format!("color {color} is negative (only NCCL_SPLIT_NOCOLOR = -1 is allowed)")));
        }
        let cc = CComm::get(OP, super::key(comm))?;
        let parent = cc.comm_even_revoked(OP)?;
        let cfg = if config.is_null() {
            None
        } else {
            // SAFETY: caller contract.
            Some(config_for(&unsafe { parse_config(OP, config) }?))
        };
        let blocking = cfg.as_ref().unwrap_or(parent.config()).blocking;
        // The child's name: the config's commName, or the parent's with a NULL config.
        let name = cfg.as_ref().map_or_else(|| cc.name.clone(), |c| c.name.clone());
        let color = (color != SPLIT_NOCOLOR).then_some(color as u32);
        let background = group::in_group() || !blocking;
        tracing::info!(
            target: "oxccl::capi",
            "{OP}: parent rank {} of {}, color {color:?}, key {key}, {}",
            parent.rank(),
            parent.count(),
            if background { "in the background" } else { "blocking" }
        );
        // SAFETY: checked non-null.
        unsafe { newcomm.write(std::ptr::null_mut()) };
        if !background {
            if let Some(c) = parent.split(color, key, cfg)? {
                let h = CComm::ready(c, name, blocking);
                // SAFETY: checked non-null.
                unsafe { newcomm.write(handle_ptr(&h)) };
            }
            return Ok(());
        }
        let mut bg = cfg.unwrap_or_else(|| parent.config().clone());
        bg.blocking = false;
        let h = parent.start_split(color, key, Some(bg));
        match color {
            Some(_) => {
                let c = CComm::pending_split(h, name, blocking);
                // SAFETY: checked non-null.
                unsafe { newcomm.write(handle_ptr(&c)) };
                if group::in_group() {
                    group::defer(Deferred::Comm(c));
                }
            }
            None => {
                // This rank gets no communicator, but its part of the split must run to the
                // end: joined at the group's end, or on a thread of its own.
                let job = move || h.take().map(|_| ()).map_err(CError::from);
                if group::in_group() {
                    group::run_or_defer(OP, job)?;
                } else {
                    std::thread::spawn(job);
                }
            }
        }
        if blocking {
            Ok(())
        } else {
            Err(CError::in_progress(OP))
        }
    }
}

api! {
    /// Waits for this rank's work, meets the other ranks, reports this rank's device error.
    /// Several ranks driven by one thread finalize inside a group.
    fn ncclCommFinalize / pncclCommFinalize(comm: NcclComm) {
        const OP: &str = "ncclCommFinalize";
        let cc = CComm::get(OP, super::key(comm))?;
        if cc.revoked.load(Ordering::Acquire) {
            return Err(CError::usage(OP, "the communicator was revoked: finalize is invalid after ncclCommRevoke"));
        }
        let c = cc.comm(OP)?;
        if !cc.blocking && !group::in_group() {
            let h = std::thread::spawn(move || c.finalize().map_err(CError::from));
            *cc.finalizing.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
            return Err(CError::in_progress(OP));
        }
        group::run_or_defer(OP, move || c.finalize().map_err(CError::from))
    }
}

/// Free what a handle holds (destroy and abort).
fn release(op: &'static str, cc: &CComm) -> Result<(), CError> {
    for w in CWin::of_comm(cc.handle) {
        if let Some(w) = CWin::remove(w) {
            let win = w.window.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let (Some(win), Some(c)) = (win, cc.ready_comm()) {
                if let Err(e) = c.deregister_window(win) {
                    tracing::warn!(target: "oxccl::capi", "{op}: deregistering a window: {e}");
                }
            }
        }
    }
    let devcomms = std::mem::take(&mut *cc.devcomms.lock().unwrap_or_else(|p| p.into_inner()));
    if let Some(c) = cc.ready_comm() {
        for d in devcomms {
            if let Err(e) = c.dev_comm_destroy(d) {
                tracing::warn!(target: "oxccl::capi", "{op}: destroying a device communicator: {e}");
            }
        }
    }
    if let Some(h) = cc.finalizing.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = h.join();
    }
    // The cached streams stay until the communicator is gone: destroying it waits for the
    // work launched on them.
    match cc.remove() {
        State::Ready(c) => {
            let rank = c.rank();
            let result = match Arc::try_unwrap(c) {
                Ok(c) => c.destroy(),
                Err(c) => {
                    drop(c);
                    Ok(())
                }
            };
            if let Err(e) = result {
                // NCCL's destroy frees and returns success; the error was the async one.
                tracing::warn!(target: "oxccl::capi", rank, "{op}: {e}");
            }
        }
        State::Init(h) => h.abort(),
        State::Split(h) => h.abort(),
        State::Failed(_) | State::Gone => {}
    }
    cc.streams.lock().unwrap_or_else(|p| p.into_inner()).clear();
    Ok(())
}

api! {
    /// Waits for this rank's launched work and frees the rank's resources (local: the other
    /// ranks are not waited for). Destroying NULL is a no-op, as with NCCL.
    fn ncclCommDestroy / pncclCommDestroy(comm: NcclComm) {
        const OP: &str = "ncclCommDestroy";
        if comm.is_null() {
            return Ok(()); // NCCL returns ncclSuccess for NULL
        }
        let cc = CComm::get(OP, super::key(comm))?;
        release(OP, &cc)
    }
}

api! {
    /// Aborts every wait of this rank's work (device kernels and host exchanges), then frees
    /// the rank like `ncclCommDestroy`.
    fn ncclCommAbort / pncclCommAbort(comm: NcclComm) {
        const OP: &str = "ncclCommAbort";
        if comm.is_null() {
            return Ok(()); // NCCL accepts aborting NULL
        }
        let cc = CComm::get(OP, super::key(comm))?;
        cc.abort();
        release(OP, &cc)
    }
}

api! {
    /// Stops this rank's in-flight kernels (they end with an abort error) and refuses new
    /// operations; destroy and split still work.
    fn ncclCommRevoke / pncclCommRevoke(comm: NcclComm, flags: c_int) {
        const OP: &str = "ncclCommRevoke";
        if flags != 0 {
            return Err(CError::arg(OP, format!("revokeFlags {flags} is not NCCL_REVOKE_DEFAULT (0)")));
        }
        let cc = CComm::get(OP, super::key(comm))?;
        let c = cc.comm_even_revoked(OP)?;
        cc.revoked.store(true, Ordering::Release);
        c.abort_kernels();
        for s in cc.streams.lock().unwrap_or_else(|p| p.into_inner()).values() {
            // The kernels end with an abort error, which is what revoking asks.
            let _ = c.backend().synchronize(s);
        }
        Ok(())
    }
}

api! {
    fn ncclCommGetAsyncError / pncclCommGetAsyncError(comm: NcclComm, async_error: *mut NcclResult) {
        const OP: &str = "ncclCommGetAsyncError";
        if async_error.is_null() {
            return Err(CError::arg(OP, "asyncError is NULL"));
        }
        let cc = CComm::get(OP, super::key(comm))?;
        let code = match cc.poll(OP) {
            Ok(()) => SUCCESS,
            Err(e) => {
                if e.code != IN_PROGRESS {
                    super::error::set_last(&e.message);
                }
                e.code
            }
        };
        // SAFETY: checked non-null.
        unsafe { async_error.write(code) };
        Ok(())
    }
}

api! {
    fn ncclCommCount / pncclCommCount(comm: NcclComm, count: *mut c_int) {
        const OP: &str = "ncclCommCount";
        let c = CComm::get(OP, super::key(comm))?.comm_even_revoked(OP)?;
        // SAFETY: caller contract.
        unsafe { put(OP, "count", count, c.count() as c_int) }
    }
}

api! {
    fn ncclCommCuDevice / pncclCommCuDevice(comm: NcclComm, device: *mut c_int) {
        const OP: &str = "ncclCommCuDevice";
        let c = CComm::get(OP, super::key(comm))?.comm_even_revoked(OP)?;
        // SAFETY: caller contract.
        unsafe { put(OP, "device", device, c.cu_device()) }
    }
}

api! {
    fn ncclCommUserRank / pncclCommUserRank(comm: NcclComm, rank: *mut c_int) {
        const OP: &str = "ncclCommUserRank";
        let c = CComm::get(OP, super::key(comm))?.comm_even_revoked(OP)?;
        // SAFETY: caller contract.
        unsafe { put(OP, "rank", rank, c.user_rank() as c_int) }
    }
}

fn refuse(op: &'static str, comm: NcclComm, why: &str) -> Result<(), CError> {
    CComm::get(op, super::key(comm))?;
    Err(CError::usage(op, why))
}

api! {
    /// Called by the surviving ranks only (excluded ones may be dead and never call): a new
    /// communicator of the survivors, ranked in parent-rank order ([`Comm::shrink`]).
    /// `NCCL_SHRINK_ABORT` aborts the parent's kernels first (its collectives then fail; the
    /// parent is left revoked); `NCCL_SHRINK_DEFAULT` expects none in flight. A NULL config
    /// inherits the parent's. In a group or with a non-blocking config the shrink runs in the
    /// background, like a split.
    fn ncclCommShrink / pncclCommShrink(
        comm: NcclComm,
        exclude: *mut c_int,
        n_exclude: c_int,
        newcomm: *mut NcclComm,
        config: *mut NcclConfig,
        flags: c_int,
    ) {
        const OP: &str = "ncclCommShrink";
        let cc = CComm::get(OP, super::key(comm))?;
        if newcomm.is_null() {
            return Err(CError::arg(OP, "newcomm is NULL"));
        }
        // SAFETY: checked non-null.
        unsafe { newcomm.write(std::ptr::null_mut()) };
        let n = usize::try_from(n_exclude)
            .map_err(|_| CError::arg(OP, format!("excludeRanksCount {n_exclude} is negative")))?;
        if n > 0 && exclude.is_null() {
            return Err(CError::arg(OP, format!("excludeRanksList is NULL with excludeRanksCount {n}")));
        }
        let mode = match flags {
            SHRINK_DEFAULT => ShrinkMode::Default,
            SHRINK_ABORT => ShrinkMode::Abort,
            f => {
                return Err(CError::arg(
                    OP,
                    format!("shrinkFlags {f:#x} is neither NCCL_SHRINK_DEFAULT (0) nor NCCL_SHRINK_ABORT (1)"),
                ))
            }
        };
        let parent = cc.comm_even_revoked(OP)?;
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: caller contract: `n` ints.
            let q = unsafe { *exclude.add(i) };
            list.push(u32::try_from(q).map_err(|_| {
                CError::arg(OP, format!("excludeRanksList[{i}] = {q} is negative"))
            })?);
        }
        let cfg = if config.is_null() {
            None
        } else {
            // SAFETY: caller contract.
            Some(config_for(&unsafe { parse_config(OP, config) }?))
        };
        let blocking = cfg.as_ref().unwrap_or(parent.config()).blocking;
        let name = cfg.as_ref().map_or_else(|| cc.name.clone(), |c| c.name.clone());
        let background = group::in_group() || !blocking;
        tracing::info!(
            target: "oxccl::capi",
            "{OP}: parent rank {} of {}, excluding {list:?}, {mode:?}, {}",
            parent.rank(),
            parent.count(),
            if background { "in the background" } else { "blocking" }
        );
        if mode == ShrinkMode::Abort {
            // The parent's work is aborted: refuse new operations on it, as after a revoke.
            cc.revoked.store(true, Ordering::Release);
        }
        if !background {
            let c = parent.shrink(&list, mode, cfg)?;
            let h = CComm::ready(c, name, blocking);
            // SAFETY: checked non-null.
            unsafe { newcomm.write(handle_ptr(&h)) };
            return Ok(());
        }
        let mut bg = cfg.unwrap_or_else(|| parent.config().clone());
        bg.blocking = false;
        let h = parent.start_shrink(&list, mode, Some(bg));
        let c = CComm::pending_init(h, name, blocking);
        // SAFETY: checked non-null.
        unsafe { newcomm.write(handle_ptr(&c)) };
        if group::in_group() {
            group::defer(Deferred::Comm(c));
        }
        if blocking {
            Ok(())
        } else {
            Err(CError::in_progress(OP))
        }
    }
}

api! {
    fn ncclCommGetUniqueId / pncclCommGetUniqueId(comm: NcclComm, id: *mut NcclUniqueId) {
        let _ = id;
        refuse(
            "ncclCommGetUniqueId",
            comm,
            "not supported by oxccl (it serves ncclCommGrow, which oxccl does not have): make a new id with \
             ncclGetUniqueId and a new communicator with ncclCommInitRank",
        )
    }
}

api! {
    fn ncclCommGrow / pncclCommGrow(
        comm: NcclComm,
        nranks: c_int,
        id: *const NcclUniqueId,
        rank: c_int,
        newcomm: *mut NcclComm,
        config: *mut NcclConfig,
    ) {
        let _ = (nranks, id, rank, newcomm, config);
        if comm.is_null() {
            return Err(CError::usage("ncclCommGrow", "not supported by oxccl: communicators do not grow; create a new one with ncclCommInitRank"));
        }
        refuse("ncclCommGrow", comm, "not supported by oxccl: communicators do not grow; create a new one with ncclCommInitRank")
    }
}

api! {
    fn ncclCommSuspend / pncclCommSuspend(comm: NcclComm, flags: c_int) {
        let _ = flags;
        refuse("ncclCommSuspend", comm, "not supported by oxccl: a communicator's memory cannot be released while it lives (destroy it instead)")
    }
}

api! {
    fn ncclCommResume / pncclCommResume(comm: NcclComm) {
        refuse("ncclCommResume", comm, "not supported by oxccl: communicators are never suspended")
    }
}

api! {
    fn ncclCommMemStats / pncclCommMemStats(comm: NcclComm, stat: c_int, value: *mut u64) {
        let _ = (stat, value);
        refuse("ncclCommMemStats", comm, "not supported by oxccl: it does not account a communicator's memory by kind")
    }
}
