//! The control channel of one rank: how the ranks of a communicator all-gather small byte
//! blobs on the host (the exchanges of `Comm::split`, the barrier of `Comm::finalize`).
//!
//! - Communicators made by `Comm::init_rank` keep their rank's [`Bootstrap`]: each exchange
//!   sends this rank's blob to every peer and receives every peer's, so a wait that times
//!   out names exactly the ranks whose blob never came (a ring would name a neighbour that
//!   is itself waiting).
//! - Communicators made by `Comm::init_all` share one in-process [`Rendezvous`].
//!
//! Exchanges are collective: every rank makes them in the same order. Each has a deadline
//! (the bootstrap timeout, `OXCCL_BOOTSTRAP_TIMEOUT_MS`) and honours an abort flag. An
//! exchange that failed (timed out, aborted) leaves the channel unusable, since the ranks no
//! longer agree on which exchange is which: later ones are refused at once
//! ([`Error::InvalidArgument`]). Collectives do not use the channel and keep working.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::rendezvous::Rendezvous;
use crate::abort::AbortFlag;
use crate::bootstrap::{self, Bootstrap, BootstrapError, Peer};
use crate::error::{Error, Result};

/// Tags of control exchanges on the bootstrap: this base plus the exchange's sequence
/// number (far above any tag a caller of `Bootstrap::send` picks by hand).
const TAG_BASE: u64 = 0x6f78_6374_6c00_0000; // "oxctl"

/// How one rank reaches the others on the host.
pub(crate) enum Control {
    /// This rank's bootstrap (communicators from `Comm::init_rank`).
    Bootstrap {
        boot: Box<Bootstrap>,
        /// Exchanges made so far (the tag of the next).
        seq: AtomicU64,
        /// An exchange failed: refuse the next ones.
        broken: AtomicBool,
        /// The job's secret (from its unique id): authenticates descriptor passing between
        /// the ranks' processes after init (window registration, `crate::window`).
        secret: [u8; 16],
    },
    /// The group's rendezvous (communicators from `Comm::init_all`), with the bootstrap
    /// settings for the communicators split from it.
    Local {
        rdv: Arc<Rendezvous>,
        config: bootstrap::Config,
    },
}

impl Control {
    /// The channel of a bootstrap.
    pub fn bootstrap(boot: Bootstrap, secret: [u8; 16]) -> Self {
        Control::Bootstrap {
            boot: Box::new(boot),
            seq: AtomicU64::new(0),
            broken: AtomicBool::new(false),
            secret,
        }
    }

    /// The job's secret, on channels whose ranks may live in other processes (`None` for
    /// in-process groups, which never pass descriptors).
    pub fn secret(&self) -> Option<[u8; 16]> {
        match self {
            Control::Bootstrap { secret, .. } => Some(*secret),
            Control::Local { .. } => None,
        }
    }

    /// The flag `Comm::abort` raises: it aborts this channel's waits.
    pub fn abort_flag(&self) -> &AbortFlag {
        match self {
            Control::Bootstrap { boot, .. } => boot.abort_flag(),
            Control::Local { rdv, .. } => rdv.abort_flag(),
        }
    }

    /// Deadline of one exchange.
    pub fn timeout(&self) -> Duration {
        match self {
            Control::Bootstrap { boot, .. } => boot.timeout(),
            Control::Local { config, .. } => config.effective_timeout(),
        }
    }

    /// Bootstrap settings for a communicator made from this one (no abort flag: the new
    /// communicator gets its own).
    pub fn child_config(&self) -> bootstrap::Config {
        match self {
            Control::Bootstrap { boot, .. } => boot.config().clone(),
            Control::Local { config, .. } => config.clone(),
        }
        .with_abort(None)
    }

    /// Where the root of a new communicator's bootstrap listens: the interface this rank's
    /// bootstrap uses, loopback for in-process groups.
    pub fn id_addr(&self) -> IpAddr {
        match self {
            Control::Bootstrap { boot, .. } => boot.listen_addr().ip(),
            Control::Local { .. } => IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// Every rank's `blob` in rank order. Gives up after [`Control::timeout`] naming the
    /// ranks that did not take part ([`Error::ControlTimeout`]), or once `abort` is raised
    /// ([`Error::Aborted`]; pass [`Control::abort_flag`] or a flag watching it).
    pub fn all_gather(
        &self,
        op: &'static str,
        rank: u32,
        nranks: u32,
        blob: &[u8],
        abort: &AbortFlag,
    ) -> Result<Vec<Vec<u8>>> {
        match self {
            Control::Local { rdv, .. } => rdv.all_gather(op, rank, blob, self.timeout(), abort),
            Control::Bootstrap {
                boot, seq, broken, ..
            } => {
                if broken.load(Ordering::Acquire) {
                    return Err(Error::InvalidArgument {
                        op,
                        rank,
                        what: "an earlier host exchange among the ranks failed; the communicator can only be aborted or destroyed".into(),
                    });
                }
                let tag = TAG_BASE + seq.fetch_add(1, Ordering::Relaxed);
                let res = exchange(boot, op, rank, nranks, tag, blob, abort);
                if res.is_err() {
                    broken.store(true, Ordering::Release);
                }
                res
            }
        }
    }

    /// Returns once every rank called it (an all-gather of nothing).
    pub fn barrier(&self, op: &'static str, rank: u32, nranks: u32, abort: &AbortFlag) -> Result<()> {
        self.all_gather(op, rank, nranks, &[], abort).map(drop)
    }
}

/// The bootstrap form of [`Control::all_gather`]: send to all, then receive from all with
/// one deadline, collecting every peer that never sent.
fn exchange(
    boot: &Bootstrap,
    op: &'static str,
    rank: u32,
    nranks: u32,
    tag: u64,
    blob: &[u8],
    abort: &AbortFlag,
) -> Result<Vec<Vec<u8>>> {
    let wrap = |source: BootstrapError| match source {
        BootstrapError::Aborted { .. } => Error::Aborted { op, rank },
        source => Error::Control { op, rank, source },
    };
    let timeout = boot.timeout();
    let deadline = Instant::now() + timeout;
    for peer in (0..nranks).filter(|&q| q != rank) {
        if abort.is_raised() {
            return Err(Error::Aborted { op, rank });
        }
        boot.send(peer, tag, blob).map_err(wrap)?;
    }
    let mut out = vec![Vec::new(); nranks as usize];
    out[rank as usize] = blob.to_vec();
    let mut missing = Vec::new();
    for peer in (0..nranks).filter(|&q| q != rank) {
        match boot.recv_until(op, peer, tag, deadline, abort) {
            Ok(b) => out[peer as usize] = b,
            Err(BootstrapError::Timeout {
                peer: Peer::Rank(p), ..
            }) => missing.push(p),
            Err(e) => return Err(wrap(e)),
        }
    }
    if !missing.is_empty() {
        tracing::warn!(target: "oxccl::init", op, rank, ?missing, "host exchange timed out");
        return Err(Error::ControlTimeout {
            op,
            rank,
            missing,
            timeout,
        });
    }
    Ok(out)
}
