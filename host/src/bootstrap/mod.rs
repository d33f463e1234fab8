//! The bootstrap layer (like NCCL's `bootstrap.cc`): how the ranks of a job find each other
//! over TCP before any GPU transport exists.
//!
//! # Use
//!
//! ```no_run
//! use oxccl::bootstrap::{Bootstrap, Config, UniqueId};
//! // One process (the "root"): create the id, ship its 128 bytes to every rank out of band.
//! let (id, root) = UniqueId::new(None)?;
//! let bytes = id.to_bytes();
//! // Every rank:
//! let id = UniqueId::from_bytes(&bytes)?;
//! let (rank, nranks) = (0, 1);
//! let boot = Bootstrap::init(&id, rank, nranks, b"my peer info", &Config::from_env()?)?;
//! let infos = boot.all_gather(b"more info")?; // every rank's blob, in rank order
//! boot.barrier()?;
//! root.wait()?; // the root thread ends once every rank got the table
//! # Ok::<(), oxccl::bootstrap::BootstrapError>(())
//! ```
//!
//! # Protocol
//!
//! 1. [`UniqueId::new`] binds the root listener (thread owned by the returned [`Root`]) and
//!    draws a random 128-bit secret; both go in the id (layout in [`id`]).
//! 2. [`Bootstrap::init`]: the rank binds its own listener, connects to the root, sends
//!    `Auth{secret, rank, nranks}` and `Join{listen address, peer-info blob}`; the root
//!    checks the secret, the rank range, duplicates and nranks agreement ([`root::Rendezvous`]),
//!    and once all `nranks` joined sends every rank the `Table` of all addresses and blobs.
//! 3. Afterwards ranks talk directly ([`peer`]): `send`/`recv` with a tag, lazily connected
//!    and authenticated with the same secret. [`Bootstrap::all_gather`] is a ring over these
//!    connections (n−1 steps), [`Bootstrap::barrier`] a dissemination barrier (⌈log2 n⌉ rounds);
//!    the root is not involved after step 2.
//!
//! Frames and messages are specified in [`wire`]; the handshakes are sans-IO state machines in
//! [`handshake`], driven by blocking sockets in [`net`].
//!
//! # Timeouts and failures
//!
//! Every step has a deadline of [`Config::timeout`] (`OXCCL_BOOTSTRAP_TIMEOUT_MS`, default
//! 120000; 0 means no limit). The root counts it from the first join: when it passes, the root
//! sends each joined rank the list of missing ranks ([`BootstrapError::MissingRanks`]); a rank
//! waits a little longer than the root (`timeout / 10 + 250 ms`, at most 5 s more) so that this
//! report, not a plain [`BootstrapError::Timeout`], is what it sees. Connections with a wrong
//! secret, a foreign protocol or garbage are refused with a `Reject` frame
//! ([`BootstrapError::Rejected`] on the connector) and never stop a listener.
//!
//! Every wait of a rank (joining, receives) also gives up with [`BootstrapError::Aborted`]
//! within [`crate::abort::POLL`] of its abort flag being raised ([`Config::abort`],
//! [`Bootstrap::abort_flag`]); communicators raise it in `Comm::abort`.
//!
//! # Interface selection
//!
//! [`Config::ifname`] (`NCCL_SOCKET_IFNAME`) uses NCCL's syntax: `eth,ib` prefixes, `=eth0`
//! exact names, `^docker,lo` exclusion. Default: the first interface that is neither loopback
//! nor docker, else loopback. When no filter is set and the root listens on a loopback address,
//! ranks listen on that loopback address too (single-host jobs never leave `lo`).

pub mod error;
pub mod handshake;
pub mod id;
pub mod messages;
pub mod net;
pub mod peer;
pub mod root;
pub mod wire;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use error::{BootstrapError, Peer, RejectReason, Result};
pub use id::{UniqueId, UNIQUE_ID_BYTES};
pub use root::{Root, RootReport};

pub use crate::abort::AbortFlag;

use handshake::{Connected, Connector};
use net::Ctx;
use peer::PeerNet;
use wire::{Auth, Kind, PeerEntry, Role};

/// Environment variable for [`Config::timeout`], in milliseconds.
pub const TIMEOUT_ENV: &str = "OXCCL_BOOTSTRAP_TIMEOUT_MS";
/// Environment variable for [`Config::ifname`] (NCCL's name).
pub const IFNAME_ENV: &str = "NCCL_SOCKET_IFNAME";
/// Default timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(120_000);
/// What a timeout of 0 ("no limit") becomes.
const NO_LIMIT: Duration = Duration::from_secs(30 * 24 * 3600);

/// Bootstrap settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Deadline for each step (joining, each send/recv, each collective).
    pub timeout: Duration,
    /// Interface filter in `NCCL_SOCKET_IFNAME` syntax; `None` for the default choice.
    pub ifname: Option<String>,
    /// A flag that, once raised, makes every wait of the [`Bootstrap`] made with this
    /// configuration give up with [`BootstrapError::Aborted`] (joining included); `None`: the
    /// bootstrap gets a flag of its own ([`Bootstrap::abort_flag`]).
    pub abort: Option<AbortFlag>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            ifname: None,
            abort: None,
        }
    }
}

/// Equal settings: the same timeout, the same interface filter and the same abort flag (or
/// none on both sides).
impl PartialEq for Config {
    fn eq(&self, other: &Self) -> bool {
        self.timeout == other.timeout
            && self.ifname == other.ifname
            && match (&self.abort, &other.abort) {
                (None, None) => true,
                (Some(a), Some(b)) => a.same(b),
                _ => false,
            }
    }
}

impl Eq for Config {}

impl Config {
    /// From `OXCCL_BOOTSTRAP_TIMEOUT_MS` and `NCCL_SOCKET_IFNAME` (unset or empty: defaults).
    pub fn from_env() -> Result<Self> {
        let mut c = Config::default();
        if let Ok(v) = std::env::var(TIMEOUT_ENV) {
            if !v.trim().is_empty() {
                let ms: u64 = v.trim().parse().map_err(|_| BootstrapError::InvalidSetting {
                    name: TIMEOUT_ENV,
                    value: v.clone(),
                    what: "expected milliseconds as an unsigned integer",
                })?;
                c.timeout = Duration::from_millis(ms);
            }
        }
        c.ifname = std::env::var(IFNAME_ENV).ok().filter(|s| !s.trim().is_empty());
        Ok(c)
    }

    /// The same configuration with another timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same configuration with another abort flag (`None`: a fresh one per bootstrap).
    pub fn with_abort(mut self, abort: Option<AbortFlag>) -> Self {
        self.abort = abort;
        self
    }

    pub(crate) fn effective_timeout(&self) -> Duration {
        if self.timeout.is_zero() {
            NO_LIMIT
        } else {
            self.timeout
        }
    }
}

/// Extra time a rank waits for the table beyond the root's own deadline.
fn grace(timeout: Duration) -> Duration {
    (timeout / 10 + Duration::from_millis(250)).min(Duration::from_secs(5))
}

/// One rank's bootstrap handle: the table of all ranks and the rank-to-rank connections.
/// `send`/`recv` may be called from several threads; `all_gather` and `barrier` must be called
/// by every rank in the same order, one at a time per rank.
pub struct Bootstrap {
    rank: u32,
    nranks: u32,
    timeout: Duration,
    table: Vec<PeerEntry>,
    net: PeerNet,
    seq: AtomicU64,
    /// Raised: every wait gives up.
    abort: AbortFlag,
    /// The settings it was made with (its abort flag is `abort`).
    config: Config,
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("listen_addr", &self.net.listen_addr())
            .finish_non_exhaustive()
    }
}

impl Bootstrap {
    /// Joins the job of `id` as `rank` of `nranks`, publishing `blob` (any bytes: addresses,
    /// device ids, ...). Returns once every rank joined, or with
    /// [`BootstrapError::Aborted`] once `config.abort` is raised.
    pub fn init(id: &UniqueId, rank: u32, nranks: u32, blob: &[u8], config: &Config) -> Result<Self> {
        if rank >= nranks {
            return Err(BootstrapError::InvalidArgument {
                op: "bootstrap init",
                rank,
                what: format!("rank {rank} is not below nranks {nranks}"),
            });
        }
        let timeout = config.effective_timeout();
        let abort = config.abort.clone().unwrap_or_default();
        let config = config.clone().with_abort(Some(abort.clone()));
        let root_addr = id.root_addr();
        let ip = match &config.ifname {
            None if root_addr.ip().is_loopback() => root_addr.ip(),
            spec => net::select_address(spec.as_deref())?.1,
        };
        let _span = tracing::debug_span!("bootstrap", rank, nranks).entered();
        let net = PeerNet::start(ip, id.secret(), rank, nranks, timeout)?;
        let ctx = Ctx {
            op: "bootstrap init",
            rank,
            peer: Peer::Root,
            addr: root_addr,
            timeout,
        };
        let start = Instant::now();
        let mut stream = net::connect(&ctx, start + timeout, Some(&abort))?;
        let me = PeerEntry {
            addr: net.listen_addr(),
            blob: blob.to_vec(),
        };
        let deadline = start + timeout + grace(timeout);
        let (conn, hello) = Connector::new(
            Auth::new(Role::Root, id.secret(), rank, nranks),
            Some(&me),
            deadline,
        );
        let table = match net::run_connector(&mut stream, conn, &hello, deadline, &ctx, Some(&abort))? {
            Connected::Table(t) => t,
            Connected::Accepted => unreachable!("a root connector yields a table"),
        };
        if table[rank as usize] != me {
            return Err(BootstrapError::Protocol {
                rank,
                peer: Peer::Root,
                detail: format!("the table's entry for rank {rank} is not the one this rank sent"),
            });
        }
        tracing::debug!(rank, nranks, "bootstrap: got the table");
        Ok(Self {
            rank,
            nranks,
            timeout,
            table,
            net,
            seq: AtomicU64::new(0),
            abort,
            config,
        })
    }

    /// The flag that aborts this bootstrap's waits (raise it from any thread).
    pub fn abort_flag(&self) -> &AbortFlag {
        &self.abort
    }

    /// The settings this bootstrap was made with (`abort` is [`Bootstrap::abort_flag`]).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The deadline of each step ([`Config::timeout`], 0 turned into "no limit").
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Every rank's blob from `init`, in rank order.
    pub fn peer_infos(&self) -> Vec<&[u8]> {
        self.table.iter().map(|e| e.blob.as_slice()).collect()
    }

    /// Where `rank` listens for bootstrap connections.
    pub fn peer_addr(&self, rank: u32) -> Option<SocketAddr> {
        self.table.get(rank as usize).map(|e| e.addr)
    }

    /// Where this rank listens.
    pub fn listen_addr(&self) -> SocketAddr {
        self.net.listen_addr()
    }

    /// Incoming connections this rank refused so far (wrong secret, garbage).
    pub fn rejected_connections(&self) -> usize {
        self.net.rejected()
    }

    fn check_peer(&self, op: &'static str, peer: u32) -> Result<SocketAddr> {
        self.peer_addr(peer)
            .ok_or_else(|| BootstrapError::InvalidArgument {
                op,
                rank: self.rank,
                what: format!("peer {peer} is not below nranks {}", self.nranks),
            })
    }

    /// Sends `bytes` to `peer` under `tag` (connecting on first use).
    pub fn send(&self, peer: u32, tag: u64, bytes: &[u8]) -> Result<()> {
        let addr = self.check_peer("send", peer)?;
        if bytes.len() > wire::MAX_PAYLOAD {
            return Err(BootstrapError::InvalidArgument {
                op: "send",
                rank: self.rank,
                what: format!(
                    "{} bytes exceed the {} byte frame cap",
                    bytes.len(),
                    wire::MAX_PAYLOAD
                ),
            });
        }
        self.net.send("send", peer, addr, Kind::Data, tag, bytes)
    }

    /// The next message `peer` sent under `tag`.
    pub fn recv(&self, peer: u32, tag: u64) -> Result<Vec<u8>> {
        self.recv_until("recv", peer, tag, Instant::now() + self.timeout, &self.abort)
    }

    /// The next message `peer` sent under `tag`, waiting until `deadline` unless `abort` is
    /// raised (pass [`Bootstrap::abort_flag`], or a flag watching it, to honour both); errors
    /// name `op`.
    pub fn recv_until(
        &self,
        op: &'static str,
        peer: u32,
        tag: u64,
        deadline: Instant,
        abort: &AbortFlag,
    ) -> Result<Vec<u8>> {
        self.check_peer(op, peer)?;
        self.net.recv(op, peer, Kind::Data, tag, deadline, abort)
    }

    /// `(r + delta) mod n` without overflow (`delta` may be negative).
    fn offset(&self, delta: i64) -> u32 {
        (self.rank as i64 + delta).rem_euclid(self.nranks as i64) as u32
    }

    /// Every rank's `blob`, in rank order (ring: n−1 steps; step s forwards the blob of rank
    /// r − s to r + 1 and receives the blob of rank r − s − 1 from r − 1).
    pub fn all_gather(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + self.timeout;
        let mut out = vec![Vec::new(); self.nranks as usize];
        out[self.rank as usize] = blob.to_vec();
        let (next, prev) = (self.offset(1), self.offset(-1));
        let next_addr = self.table[next as usize].addr;
        for step in 0..self.nranks as i64 - 1 {
            let send_idx = self.offset(-step) as usize;
            self.net
                .send("all_gather", next, next_addr, Kind::Coll, seq, &out[send_idx])?;
            let recv_idx = self.offset(-step - 1) as usize;
            out[recv_idx] = self
                .net
                .recv("all_gather", prev, Kind::Coll, seq, deadline, &self.abort)?;
        }
        Ok(out)
    }

    /// Returns once every rank called `barrier` (dissemination: round k sends to rank + 2^k
    /// and waits for rank − 2^k).
    pub fn barrier(&self) -> Result<()> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + self.timeout;
        let mut k = 1i64;
        while k < self.nranks as i64 {
            let (to, from) = (self.offset(k), self.offset(-k));
            self.net
                .send("barrier", to, self.table[to as usize].addr, Kind::Coll, seq, &[])?;
            self.net
                .recv("barrier", from, Kind::Coll, seq, deadline, &self.abort)?;
            k *= 2;
        }
        Ok(())
    }
}
