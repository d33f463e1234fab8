//! Communicators: one per rank. `Comm::init_all` creates every rank of a communicator in one
//! process; several ranks may share one device (NCCL refuses that; oxccl allows it, which is
//! how one GPU tests multi-rank code).
//!
//! Shared resources of a communicator: one inbox per rank (the barrier lines, see
//! `oxccl_device::prims::barrier`) on that rank's device, a table of the inbox addresses
//! per rank, an error record per rank, and one abort flag in mapped host memory.
//!
//! Lifecycle (NCCL's): a communicator is made by `init_all`, `init_rank` or [`Comm::split`]
//! (or their non-blocking forms `start_*`, see [`InitHandle`]); [`Comm::finalize`] waits for
//! this rank's work and meets the other ranks, after which only [`Comm::destroy`] (or
//! dropping it) is valid; [`Comm::abort`] cuts every wait short. Host-side exchanges among
//! the ranks go through a control channel (`control`): the bootstrap for `init_rank`
//! communicators, an in-process rendezvous for `init_all` ones.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use oxccl_device::abi::{
    CommArgs, ErrorRecord, Header, ERR_ABORTED, ERR_MISMATCH, ERR_NONE, ERR_TIMEOUT, SYM_ERROR_FLAG,
    SYM_MISMATCH_FLAG,
};
use oxccl_device::prims::layout::{inbox_bytes, table_bytes};

use crate::abort::AbortFlag;
use crate::backend::{self, Backend, MappedMem, Stream};
use crate::bootstrap;
use crate::error::{Error, Result};

/// Per-communicator options (NCCL's `ncclConfig_t`, the fields oxccl has).
#[derive(Clone, Debug)]
pub struct Config {
    /// Device wait timeout (ns); 0 = none.
    pub timeout_ns: u64,
    /// Bytes of each staging buffer on communicators that span processes
    /// (`OXCCL_STAGING_BYTES`; must be equal on every rank).
    pub staging_bytes: usize,
    /// NCCL's `blocking` (default from `NCCL_COMM_BLOCKING`, else true): whether the
    /// `Comm::start_*` forms of init and split run on the calling thread (true) or in the
    /// background (false, the handle reports [`Error::InProgress`] until done). Collectives
    /// are stream-ordered either way. `init_all`, `init_rank` and `split` always block.
    pub blocking: bool,
    /// LL capacity: bytes per rank one LL all-reduce carries (`OXCCL_LL_MAX_BYTES`; rounded
    /// up to 8, at most `settings::LL_MAX_BYTES_LIMIT`; must be equal on every rank). Each
    /// inbox holds `4 * nranks * ll_max_bytes` bytes of LL lines.
    pub ll_max_bytes: usize,
    /// Allowed algorithms, `NCCL_ALGO` syntax (default: the environment's); see
    /// `crate::coll::tuner`. Invalid values fail communicator creation.
    pub algo: Option<String>,
    /// Allowed protocols, `NCCL_PROTO` syntax (default: the environment's).
    pub proto: Option<String>,
    /// Cap on the blocks (NCCL's CTAs) each rank launches per collective or send/recv group
    /// (NCCL's `maxCTAs`; 0 = the backend's limit). Default: `OXCCL_MAX_BLOCKS`, else
    /// `NCCL_MAX_CTAS`. Must be equal on every rank (launch grids must match).
    pub max_blocks: u32,
    /// Floor on the blocks each rank launches per collective on the GPU (NCCL's `minCTAs`;
    /// at most the cap; default 1). The CPU backend always runs its `OXCCL_CPU_BLOCKS`
    /// threads (within the cap). Must be equal on every rank.
    pub min_blocks: u32,
    /// A name for the communicator (NCCL's `commName`), shown in its log lines; communicators
    /// split or shrunk from it keep it unless their config names them.
    pub name: Option<String>,
    /// Automatic all-reduce choice: largest size (bytes per rank) run with LL
    /// (`OXCCL_LL_THRESHOLD`; capped by the LL capacity). Equal on every rank.
    pub ll_threshold: u64,
    /// Automatic all-reduce choice: largest direct Simple all-reduce (bytes per rank) run
    /// one-shot (`OXCCL_ONESHOT_MAX_BYTES`). Equal on every rank.
    pub oneshot_max_bytes: u64,
    /// Collectives on registered windows: the symmetric kernel family (`OXCCL_SYM` syntax,
    /// see [`crate::coll::sym_policy::SymSetting`]); parsed when the communicator is made,
    /// an invalid value fails it. Equal on every rank.
    pub sym: String,
    /// Symmetric kernels: CTAs per rank of every launch (`OXCCL_SYM_CTAS`; 0 = the measured
    /// table). Equal on every rank.
    pub sym_ctas: u32,
    /// Symmetric kernels on the GPU: programmatic dependent launch of small grids
    /// (`OXCCL_SYM_PDL`).
    pub sym_pdl: bool,
    /// Symmetric LL and Lamport kernels: when the grouped kernels run (`OXCCL_SYM_GROUPED`:
    /// `auto`, `on`, `off`; see [`crate::coll::sym_policy::Grouped`]); parsed when the
    /// communicator is made, an invalid value fails it.
    pub sym_grouped: String,
    /// Symmetric kernels: bytes per rank one LL or Lamport operation carries
    /// (`OXCCL_SYM_LL_MAX_BYTES`; used rounded up to 8, at least 8: [`Config::sym_ll_capacity`]).
    /// Sizes the scratch window made with the communicator's first registered window. Equal
    /// on every rank.
    pub sym_ll_max_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeout_ns: crate::settings::timeout_ns(),
            staging_bytes: crate::settings::staging_bytes(),
            blocking: crate::settings::comm_blocking(),
            ll_max_bytes: crate::settings::ll_max_bytes(),
            algo: crate::settings::algo_env(),
            proto: crate::settings::proto_env(),
            max_blocks: crate::settings::max_blocks(),
            min_blocks: 1,
            name: None,
            ll_threshold: crate::settings::ll_threshold(),
            oneshot_max_bytes: crate::settings::oneshot_max_bytes(),
            sym: crate::settings::sym_choice(),
            sym_ctas: crate::settings::sym_ctas(),
            sym_pdl: crate::settings::sym_pdl(),
            sym_grouped: crate::settings::sym_grouped(),
            sym_ll_max_bytes: crate::settings::sym_ll_max_bytes(),
        }
    }
}

impl Config {
    /// The blocks per rank a launch may use given the backend's limit `backend_max`: the
    /// floor and the cap of [`Config::min_blocks`] / [`Config::max_blocks`] applied (at
    /// least 1 block; the floor never above the cap).
    pub fn block_range(&self, backend_max: u32) -> (u32, u32) {
        let mut hi = backend_max.max(1);
        if self.max_blocks > 0 {
            hi = hi.min(self.max_blocks);
        }
        (self.min_blocks.clamp(1, hi), hi)
    }

    /// The LL capacity as used (see [`Config::ll_max_bytes`]).
    pub fn ll_capacity(&self) -> usize {
        crate::settings::ll_capacity(self.ll_max_bytes)
    }

    /// The symmetric LL and Lamport capacity as used (see [`Config::sym_ll_max_bytes`]).
    pub fn sym_ll_capacity(&self) -> u64 {
        crate::settings::sym_ll_capacity(self.sym_ll_max_bytes)
    }

    /// The symmetric-kernel policy of [`Config::sym`], [`Config::sym_ctas`],
    /// [`Config::sym_pdl`] and [`Config::sym_grouped`]; an invalid `sym` or `sym_grouped` is
    /// an [`Error::InvalidSetting`].
    pub fn sym_policy(&self) -> Result<crate::coll::sym_policy::SymPolicy> {
        let setting =
            crate::coll::sym_policy::SymSetting::parse(&self.sym).map_err(|what| Error::InvalidSetting {
                setting: "OXCCL_SYM",
                value: self.sym.clone(),
                what,
            })?;
        let grouped = crate::coll::sym_policy::Grouped::parse(&self.sym_grouped).map_err(|what| {
            Error::InvalidSetting {
                setting: "OXCCL_SYM_GROUPED",
                value: self.sym_grouped.clone(),
                what,
            }
        })?;
        Ok(crate::coll::sym_policy::SymPolicy {
            setting,
            ctas: self.sym_ctas,
            pdl: self.sym_pdl,
            grouped,
        })
    }

    /// The parsed algorithm and protocol overrides, or an error naming the setting.
    pub fn overrides(&self) -> Result<crate::coll::tuner::Overrides> {
        crate::coll::tuner::Overrides::parse(self.algo.as_deref(), self.proto.as_deref()).map_err(
            |(setting, what)| Error::InvalidSetting {
                setting,
                value: if setting == "NCCL_ALGO" {
                    self.algo.clone()
                } else {
                    self.proto.clone()
                }
                .unwrap_or_default(),
                what,
            },
        )
    }
}

mod control;
mod exchange;
mod init_rank;
mod keep;
mod lifecycle;
pub mod nonblocking;
mod rendezvous;
pub(crate) mod segment;
mod shrink;
mod split;
mod streams;

pub(crate) use init_rank::process_token;
pub use nonblocking::InitHandle;
pub use shrink::ShrinkMode;

use control::Control;
use rendezvous::Rendezvous;
use streams::StreamRegistry;

pub(crate) struct RankRes {
    device: usize,
    /// The inbox (inside `seg` when there is one).
    inbox: u64,
    table: u64,
    error: u64,
    /// On communicators spanning processes: this rank's segment, the peers' segments mapped
    /// here, and the staging buffers in the segment.
    seg: Option<crate::backend::SharedMem>,
    imports: Vec<crate::backend::SharedMem>,
    pub(crate) staging: Option<crate::coll::Staging>,
    /// `inbox` is held in [`keep`] (an `init_rank` rank's plain inbox): released there rather
    /// than freed here.
    inbox_kept: bool,
    /// Holds this rank took in [`keep`] on its in-process peers' inboxes.
    peer_holds: Vec<u64>,
}

/// Resources of the ranks of one communicator that live in this process: all of them after
/// [`Comm::init_all`], one after [`Comm::init_rank`]. Freed together when the last of those
/// ranks' `Comm`s is dropped.
pub(crate) struct Group {
    pub backend: Arc<dyn Backend>,
    /// Ranks of the communicator.
    nranks: u32,
    /// This process's ranks' resources, by rank.
    ranks: std::collections::BTreeMap<u32, RankRes>,
    abort: MappedMem,
    /// Most ranks placed on one device (limits blocks per rank).
    pub ranks_per_device: usize,
    /// Distinct devices the communicator's ranks run on (1: every rank shares one device, so
    /// the symmetric kernels order their accesses at GPU scope).
    pub devices: usize,
    pub config: Config,
    /// `config`'s algorithm and protocol overrides, parsed (the ranks' starting tuning).
    pub tuning: crate::coll::tuner::Overrides,
    /// `config`'s symmetric-kernel policy, parsed (the ranks' starting one).
    pub sym_policy: crate::coll::sym_policy::SymPolicy,
}

impl Drop for Group {
    fn drop(&mut self) {
        let n = self.nranks;
        let ll = self.config.ll_capacity();
        for r in self.ranks.values_mut() {
            // SAFETY: allocated with these sizes (0 = never allocated, after a failed init);
            // ranks synchronize their streams before dropping their communicators.
            unsafe {
                for m in r.imports.drain(..) {
                    self.backend.free_shared(m);
                }
                for p in r.peer_holds.drain(..) {
                    keep::release(p);
                }
                if let Some(seg) = r.seg.take() {
                    self.backend.free_shared(seg);
                } else if r.inbox_kept {
                    keep::release(r.inbox);
                } else if r.inbox != 0 {
                    self.backend.free(r.device, r.inbox, inbox_bytes(n, ll));
                }
                if r.table != 0 {
                    self.backend.free(r.device, r.table, table_bytes(n));
                }
                if r.error != 0 {
                    self.backend
                        .free(r.device, r.error, std::mem::size_of::<ErrorRecord>());
                }
            }
        }
        let dev = self.ranks.values().next().map(|r| r.device).unwrap_or(0);
        // SAFETY: as above.
        unsafe { self.backend.free_mapped(dev, self.abort) };
    }
}

/// One rank of a communicator.
pub struct Comm {
    pub(crate) group: Arc<Group>,
    rank: u32,
    nranks: u32,
    /// Barrier epochs used so far (2 per collective).
    pub(crate) epoch: AtomicU64,
    /// The last [`OPS_REMEMBERED`] operations launched: (epoch base, name), so that a device
    /// error (which carries its epoch) names the operation that failed.
    ops: Mutex<VecDeque<(u64, &'static str, u64)>>,
    /// How this rank meets the others on the host (split, finalize); shared with pending
    /// splits.
    control: Arc<Control>,
    /// Set by [`Comm::finalize`]: later calls fail with [`Error::Finalized`].
    finalized: AtomicBool,
    /// The streams this rank launched on.
    streams: StreamRegistry,
    /// Send/recv state (sequence numbers, launches), shared with operations pending in
    /// groups (`crate::group`).
    pub(crate) p2p: Arc<crate::p2p::P2pState>,
    /// The algorithm and protocol overrides in force ([`Comm::set_tuning`]).
    tuning: std::sync::RwLock<Arc<crate::coll::tuner::Overrides>>,
    /// The symmetric-kernel policy in force ([`Comm::set_sym_policy`]).
    sym_policy: std::sync::RwLock<crate::coll::sym_policy::SymPolicy>,
    /// The LL flag generation this rank's LL region was last cleared for
    /// (`oxccl_device::prims::ll`): fresh memory is generation 0's.
    pub(crate) ll_generation: AtomicU64,
    /// This rank's registered windows (`crate::window`).
    windows: crate::window::CommWindows,
    /// The symmetric kernels' scratch window and sequence slots, made with the first
    /// registered window (`crate::coll::sym`).
    pub(crate) sym: Mutex<Option<Arc<crate::coll::sym::SymRes>>>,
}

/// How many launched operations a [`Comm`] remembers for error messages.
const OPS_REMEMBERED: usize = 64;

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Comm(rank {}/{} on {} device {})",
            self.rank,
            self.nranks,
            self.group.backend.kind(),
            self.device()
        )
    }
}

/// Check that the distinct devices of `devices` (rank `r` on `devices[r]`) reach each other,
/// every failing pair named by its ranks, device name and bus id, then enable peer access
/// between every pair of them.
fn connect_devices(backend: &dyn Backend, devices: &[usize]) -> Result<()> {
    let mut distinct = devices.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 {
        return Ok(());
    }
    let on = |d: usize| -> Vec<u32> {
        (0..devices.len() as u32)
            .filter(|&r| devices[r as usize] == d)
            .collect()
    };
    let topo = crate::topo::Topology::detect(backend, &distinct)?;
    tracing::debug!(target: "oxccl::init", "{}", topo.report());
    let placed: Vec<(u32, usize)> = devices.iter().enumerate().map(|(r, &d)| (r as u32, d)).collect();
    if let Err(what) = topo.check_ranks(&placed) {
        // The error's rank: the first rank of the first pair that fails.
        let rank = topo.rank_pairs(&placed).first().map_or(0, |p| p.2[0]);
        return Err(Error::Unreachable { rank, what });
    }
    for (i, &a) in distinct.iter().enumerate() {
        for &b in &distinct[i + 1..] {
            if !backend.enable_peer_access(a, b)? {
                let (ra, rb) = (on(a), on(b));
                return Err(Error::Unreachable {
                    rank: ra[0],
                    what: crate::topo::unreachable_message(backend, a, b, &ra, &rb),
                });
            }
        }
    }
    Ok(())
}

impl Comm {
    fn new(group: Arc<Group>, rank: u32, nranks: u32, control: Control) -> Comm {
        let me = &group.ranks[&rank];
        let comm_args = CommArgs {
            header: Header::of::<CommArgs>(),
            rank,
            nranks,
            inboxes: me.table,
            abort_flag: group.abort.dev,
            error: me.error,
            timeout_ns: group.config.timeout_ns,
        };
        // The segment (whose base is the inbox) holds the staging halves.
        let staging = me.staging.map(|st| (st, st.send.wrapping_sub(me.inbox)));
        let p2p = Arc::new(crate::p2p::P2pState::new(
            group.clone(),
            rank,
            nranks,
            comm_args,
            staging,
        ));
        Comm {
            p2p,
            rank,
            nranks,
            epoch: AtomicU64::new(0),
            ops: Mutex::new(VecDeque::with_capacity(OPS_REMEMBERED)),
            control: Arc::new(control),
            finalized: AtomicBool::new(false),
            streams: StreamRegistry::default(),
            tuning: std::sync::RwLock::new(Arc::new(group.tuning.clone())),
            sym_policy: std::sync::RwLock::new(group.sym_policy),
            ll_generation: AtomicU64::new(0),
            windows: crate::window::CommWindows::default(),
            sym: Mutex::new(None),
            group,
        }
    }

    /// Replace the algorithm and protocol overrides of this rank (`NCCL_ALGO` /
    /// `NCCL_PROTO` syntax, `None` = allow every one); every rank of the communicator must
    /// set the same ones before its next collective, or ranks choose differently (reported
    /// as a mismatch, or a timeout). Invalid values are an error and change nothing.
    pub fn set_tuning(&self, algo: Option<&str>, proto: Option<&str>) -> Result<()> {
        let cfg = Config {
            algo: algo.map(str::to_string),
            proto: proto.map(str::to_string),
            ..self.group.config.clone()
        };
        let o = cfg.overrides()?;
        *self.tuning.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(o);
        Ok(())
    }

    /// The overrides in force.
    pub fn tuning(&self) -> Arc<crate::coll::tuner::Overrides> {
        self.tuning.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replace this rank's symmetric-kernel policy (what `OXCCL_SYM`, `OXCCL_SYM_CTAS` and
    /// `OXCCL_SYM_PDL` set when the communicator was made). Every rank of the communicator
    /// must make the same change before its next collective on windows, or the ranks launch
    /// different kernels (reported as a mismatch naming the peers, or a timeout).
    pub fn set_sym_policy(&self, p: crate::coll::sym_policy::SymPolicy) {
        *self.sym_policy.write().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// The symmetric-kernel policy in force.
    pub fn sym_policy(&self) -> crate::coll::sym_policy::SymPolicy {
        *self.sym_policy.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Advance this rank's operation counter by `ops` operations without running any (every
    /// rank of the communicator must do the same between the same collectives). For tests of
    /// the LL flag generations, which change once every 2^31 operations.
    /// The device's epoch slots (`oxccl_device::prims::epoch`) advance with it; this rank's
    /// stream must be idle.
    #[doc(hidden)]
    pub fn skip_operations(&self, ops: u64) -> Result<()> {
        let next = self.epoch.fetch_add(2 * ops, Ordering::Relaxed) + 2 * ops;
        let r = &self.group.ranks[&self.rank];
        let slots = r.inbox + oxccl_device::prims::layout::epochs_offset(self.nranks) as u64;
        let bytes: Vec<u8> = (0..oxccl_device::abi::MAX_BLOCKS)
            .flat_map(|_| next.to_le_bytes())
            .collect();
        self.group.backend.upload(r.device, slots, &bytes)
    }

    /// All ranks of a new communicator in this process, rank `i` on `devices[i]`, on the
    /// backend chosen by [`backend::auto`].
    pub fn init_all(devices: &[usize]) -> Result<Vec<Comm>> {
        let (b, why) = backend::auto();
        if let Some(why) = why {
            tracing::info!(target: "oxccl::init", "using the cpu backend: {why}");
        }
        Self::init_all_with(b, devices, Config::default())
    }

    /// As [`Comm::init_all`] on a given backend and configuration. Host exchanges among the
    /// ranks (split, finalize) use the bootstrap settings of the environment
    /// (`OXCCL_BOOTSTRAP_TIMEOUT_MS`, `NCCL_SOCKET_IFNAME`).
    pub fn init_all_with(backend: Arc<dyn Backend>, devices: &[usize], config: Config) -> Result<Vec<Comm>> {
        let boot = bootstrap::Config::from_env().unwrap_or_else(|e| {
            tracing::warn!(target: "oxccl::init", "{e}; using the default bootstrap settings");
            bootstrap::Config::default()
        });
        Self::init_all_with_bootstrap(backend, devices, config, &boot)
    }

    /// As [`Comm::init_all_with`] with explicit bootstrap settings: `boot`'s timeout bounds
    /// the host exchanges among these ranks (split, finalize), and communicators split from
    /// them bootstrap with `boot` (its abort flag is not used).
    pub fn init_all_with_bootstrap(
        backend: Arc<dyn Backend>,
        devices: &[usize],
        config: Config,
        boot: &bootstrap::Config,
    ) -> Result<Vec<Comm>> {
        let n = devices.len();
        if n == 0 {
            return Err(Error::Init("init_all needs at least one device".into()));
        }
        for &d in devices {
            if d >= backend.device_count() {
                return Err(Error::NoSuchDevice {
                    device: d,
                    count: backend.device_count(),
                    backend: backend.kind().name(),
                });
            }
        }
        let _span =
            tracing::info_span!(target: "oxccl::init", "init_all", nranks = n, backend = %backend.kind(), comm = config.name.as_deref().unwrap_or(""))
                .entered();
        let tuning = config.overrides()?;
        let sym_policy = config.sym_policy()?;
        let ll = config.ll_capacity();
        let mut ranks = Vec::with_capacity(n);
        let undo = |ranks: &Vec<RankRes>| {
            for r in ranks {
                // SAFETY: freshly allocated, unused.
                unsafe {
                    backend.free(r.device, r.inbox, inbox_bytes(n as u32, ll));
                    backend.free(r.device, r.table, table_bytes(n as u32));
                    backend.free(r.device, r.error, std::mem::size_of::<ErrorRecord>());
                }
            }
        };
        for &device in devices {
            let res = (|| -> Result<RankRes> {
                Ok(RankRes {
                    device,
                    inbox: backend.alloc(device, inbox_bytes(n as u32, ll))?,
                    table: backend.alloc(device, table_bytes(n as u32))?,
                    error: backend.alloc(device, std::mem::size_of::<ErrorRecord>())?,
                    seg: None,
                    imports: Vec::new(),
                    staging: None,
                    inbox_kept: false,
                    peer_holds: Vec::new(),
                })
            })();
            match res {
                Ok(r) => ranks.push(r),
                Err(e) => {
                    undo(&ranks);
                    return Err(e);
                }
            }
        }
        // Distinct devices must reach each other's memory: every pair that cannot is named
        // (`crate::topo`), then peer access is enabled between each pair.
        if let Err(e) = connect_devices(&*backend, devices) {
            undo(&ranks);
            return Err(e);
        }
        // Inbox bases, then deltas (all 0: one address space).
        let table: Vec<u8> = ranks
            .iter()
            .map(|r| r.inbox)
            .chain(std::iter::repeat_n(0, n))
            .flat_map(u64::to_le_bytes)
            .collect();
        for r in &ranks {
            backend.upload(r.device, r.table, &table)?;
        }
        let abort = backend.alloc_mapped(devices[0], 64)?;
        let mut per_dev = std::collections::HashMap::<usize, usize>::new();
        for &d in devices {
            *per_dev.entry(d).or_default() += 1;
        }
        let group = Arc::new(Group {
            backend: backend.clone(),
            nranks: n as u32,
            ranks: ranks
                .into_iter()
                .enumerate()
                .map(|(r, res)| (r as u32, res))
                .collect(),
            abort,
            ranks_per_device: per_dev.values().copied().max().unwrap_or(1),
            devices: per_dev.len().max(1),
            config,
            tuning,
            sym_policy,
        });
        tracing::info!(target: "oxccl::init", nranks = n, ranks_per_device = group.ranks_per_device, "communicator ready");
        let rdv = Arc::new(Rendezvous::new(n as u32, AbortFlag::new()));
        let boot = boot.clone().with_abort(None);
        Ok((0..n)
            .map(|rank| {
                let control = Control::local(rdv.clone(), boot.clone());
                Comm::new(group.clone(), rank as u32, n as u32, control)
            })
            .collect())
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// This rank (NCCL's `ncclCommUserRank`; the same as [`Comm::rank`]).
    pub fn user_rank(&self) -> u32 {
        self.rank
    }

    /// The device index of this rank as NCCL's `ncclCommCuDevice` reports it (an `i32`; see
    /// [`Comm::device`] for the `usize` form).
    pub fn cu_device(&self) -> i32 {
        self.device() as i32
    }

    /// Number of ranks (NCCL's `ncclCommCount`).
    pub fn count(&self) -> u32 {
        self.nranks
    }

    /// The device of this rank (its index on [`Comm::backend`]).
    pub fn device(&self) -> usize {
        self.group.ranks[&self.rank].device
    }

    /// This rank's staging buffers, when the communicator spans processes (collectives are
    /// then staged through them: `crate::coll::staged`).
    pub(crate) fn staging(&self) -> Option<crate::coll::Staging> {
        self.group.ranks.get(&self.rank).and_then(|r| r.staging)
    }

    /// True when some rank of this communicator lives in another process.
    pub fn spans_processes(&self) -> bool {
        self.staging().is_some()
    }

    /// The configuration this communicator was made with.
    pub fn config(&self) -> &Config {
        &self.group.config
    }

    /// The backend this communicator runs on.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.group.backend
    }

    /// A new stream on this rank's device.
    pub fn create_stream(&self) -> Result<Stream> {
        self.group.backend.create_stream(self.device())
    }

    /// Reserve the two barrier epochs of a new operation named `op`; returns the epoch base
    /// (its barriers use `base + 1` and `base + 2`).
    pub(crate) fn next_epoch(&self, op: &'static str, fingerprint: u64) -> u64 {
        let base = self.epoch.fetch_add(2, Ordering::Relaxed);
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        if ops.len() == OPS_REMEMBERED {
            ops.pop_front();
        }
        ops.push_back((base, op, fingerprint));
        base
    }

    /// The name and fingerprint of the operation whose barriers use `epoch` (("collective",
    /// 0) if forgotten).
    fn op_at(&self, epoch: u64) -> (&'static str, u64) {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        ops.iter()
            .rev()
            .find(|(base, _, _)| epoch > *base && epoch <= base + 2)
            .map_or(("collective", 0), |o| (o.1, o.2))
    }

    /// The kernel-side view of this rank.
    pub(crate) fn args(&self) -> CommArgs {
        self.p2p.comm
    }

    /// Raise the abort flags: every wait of the ranks of this communicator in this group,
    /// device (kernels) or host (split, finalize, the bootstrap), gives up within one check
    /// interval and reports `Aborted`. For `init_all` communicators that is every rank; for
    /// `init_rank` ones this rank (the others time out or are aborted by their own calls).
    pub fn abort(&self) {
        // SAFETY: 64 bytes of mapped memory owned by the group; a volatile store is what
        // the device's `ld.volatile` polls.
        unsafe { std::ptr::write_volatile(self.group.abort.host as *mut u32, 1) };
        std::sync::atomic::fence(Ordering::SeqCst);
        self.control.abort_flag().raise();
    }

    /// Raise only the device abort flag (NCCL's `ncclCommRevoke`): this group's kernels give up
    /// within one check interval and report `Aborted`, while host exchanges (split,
    /// finalize's barrier) keep working.
    pub fn abort_kernels(&self) {
        // SAFETY: as in `abort`.
        unsafe { std::ptr::write_volatile(self.group.abort.host as *mut u32, 1) };
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The first error a kernel of this rank reported, if any (sticky, like NCCL's
    /// `ncclCommGetAsyncError`). Reads device memory: call after synchronizing, or accept
    /// a racy but harmless snapshot.
    pub fn async_error(&self) -> Result<()> {
        let me = &self.group.ranks[&self.rank];
        let mut raw = [0u8; std::mem::size_of::<ErrorRecord>()];
        self.group.backend.download(me.device, &mut raw, me.error)?;
        let u32_at = |o: usize| u32::from_le_bytes(raw[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap());
        let rec = ErrorRecord {
            code: u32_at(0),
            rank: u32_at(4),
            peer: u32_at(8),
            block: u32_at(12),
            epoch: u64_at(16),
            detail: u64_at(24),
        };
        if rec.code != ERR_NONE && crate::p2p::is_p2p_error(&rec) {
            return self.p2p.decode(&rec);
        }
        if rec.code == ERR_MISMATCH && rec.block & SYM_MISMATCH_FLAG != 0 {
            // A symmetric kernel's record: `epoch` holds our fingerprint, `detail` the peer's.
            let (kind, ours, theirs) = crate::coll::sym::describe_mismatch(rec.epoch, rec.detail);
            return Err(Error::SymMismatch {
                op: kind,
                rank: self.rank,
                peer: rec.peer,
                ours,
                theirs,
            });
        }
        if rec.code != ERR_NONE && rec.code != u32::MAX && rec.block & SYM_ERROR_FLAG != 0 {
            return Err(self.sym_error(&rec));
        }
        let (op, ours) = self.op_at(rec.epoch);
        match rec.code {
            ERR_NONE => Ok(()),
            ERR_TIMEOUT => Err(Error::Timeout {
                op,
                rank: self.rank,
                peer: rec.peer,
                block: rec.block,
                epoch: rec.epoch,
            }),
            ERR_ABORTED => Err(Error::Aborted { op, rank: self.rank }),
            // A kernel that found an argument the host should have refused (no peer).
            ERR_MISMATCH if rec.peer == u32::MAX => Err(Error::InvalidUsage {
                op,
                what: format!(
                    "rank {}: the kernel refused value {} (an unknown collective or operator)",
                    self.rank, rec.detail
                ),
            }),
            ERR_MISMATCH => Err(Error::Mismatch {
                op,
                rank: self.rank,
                peer: rec.peer,
                ours: if ours == 0 {
                    format!("{op} (no longer remembered)")
                } else {
                    crate::coll::describe_call(ours)
                },
                theirs: crate::coll::describe_call(rec.detail),
                theirs_fingerprint: rec.detail,
            }),
            // u32::MAX: a record being written right now.
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::Config;

    #[test]
    fn sym_capacity_is_the_setting_rounded_up_to_lines() {
        let c = |sym_ll_max_bytes| Config {
            sym_ll_max_bytes,
            ..Config::default()
        };
        assert_eq!(c(0).sym_ll_capacity(), 8);
        assert_eq!(c(13).sym_ll_capacity(), 16);
        assert_eq!(c(262144).sym_ll_capacity(), 262144);
    }

    #[test]
    fn block_range_applies_the_cap_and_floor() {
        let c = |min_blocks, max_blocks| Config {
            min_blocks,
            max_blocks,
            ..Config::default()
        };
        assert_eq!(c(1, 0).block_range(32), (1, 32));
        assert_eq!(c(1, 4).block_range(32), (1, 4));
        assert_eq!(c(8, 0).block_range(32), (8, 32));
        // The floor never exceeds the cap; at least one block.
        assert_eq!(c(8, 4).block_range(32), (4, 4));
        assert_eq!(c(0, 0).block_range(0), (1, 1));
        assert_eq!(c(3, 100).block_range(2), (2, 2));
    }
}
