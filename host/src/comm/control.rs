//! The control channel of one rank: how the ranks of a communicator all-gather small byte
//! blobs on the host (the exchanges of `Comm::split`, the barrier of `Comm::finalize`).
//!
//! - Communicators made by `Comm::init_rank` keep their rank's [`Bootstrap`]: each exchange
//!   sends this rank's blob to every peer and receives every peer's, so a wait that times
//!   out names exactly the ranks whose blob never came (a ring would name a neighbour that
//!   is itself waiting).
//! - Communicators made by `Comm::init_all` share one in-process [`Rendezvous`].
//!
//! Besides the exchanges, [`Control::send_to`] / [`Control::recv_from`] pass point-to-point
//! messages among a subset of the ranks (`Comm::shrink`: the survivors meet without the
//! excluded ranks), tagged apart from the exchanges ([`Control::next_subset_tag`]: one
//! sequence per subset, so that ranks left out of one subset exchange still agree with the
//! others on the tags of the next subset they are part of).
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

/// Tags of point-to-point messages among a subset of the ranks: these top 16 bits ("os",
/// never those of [`TAG_BASE`]), then 48 bits of the subset's hash plus its sequence number.
const SUBSET_TAG_TOP: u64 = 0x6f73 << 48;

/// FNV-1a of a subset's key (its ranks, or what defines it).
fn subset_hash(key: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in key {
        for b in v.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Sequence numbers of subset exchanges, per subset hash.
#[derive(Default)]
pub(crate) struct SubsetSeq(std::sync::Mutex<std::collections::HashMap<u64, u64>>);

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
        /// Subset exchanges made so far, per subset hash.
        subset_seq: SubsetSeq,
    },
    /// The group's rendezvous (communicators from `Comm::init_all`), with the bootstrap
    /// settings for the communicators split from it.
    Local {
        rdv: Arc<Rendezvous>,
        config: bootstrap::Config,
        /// Subset exchanges made so far, per subset hash.
        subset_seq: SubsetSeq,
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
            subset_seq: SubsetSeq::default(),
        }
    }

    /// The channel of one rank of an in-process group sharing `rdv`.
    pub fn local(rdv: Arc<Rendezvous>, config: bootstrap::Config) -> Self {
        Control::Local {
            rdv,
            config,
            subset_seq: SubsetSeq::default(),
        }
    }

    /// The tag of this rank's next exchange among the subset `key` identifies (e.g. its
    /// excluded ranks): every rank of that subset takes the tags of its exchanges in the same
    /// order, whatever other subsets it was or was not part of.
    pub fn next_subset_tag(&self, key: &[u32]) -> u64 {
        let seqs = match self {
            Control::Bootstrap { subset_seq, .. } | Control::Local { subset_seq, .. } => subset_seq,
        };
        let h = subset_hash(key);
        let mut m = seqs.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(h).or_insert(0);
        let seq = *n;
        *n += 1;
        SUBSET_TAG_TOP | (h.wrapping_add(seq) & ((1 << 48) - 1))
    }

    /// Send `blob` to rank `peer` under `tag` (a subset exchange's; does not wait for the
    /// peer to receive it, except for connecting to it on the bootstrap).
    pub fn send_to(&self, op: &'static str, rank: u32, peer: u32, tag: u64, blob: &[u8]) -> Result<()> {
        match self {
            Control::Local { rdv, .. } => rdv.post(rank, peer, tag, blob),
            Control::Bootstrap { boot, .. } => boot.send(peer, tag, blob).map_err(|source| match source {
                BootstrapError::Aborted { .. } => Error::Aborted { op, rank },
                source => Error::Control { op, rank, source },
            }),
        }
    }

    /// The message rank `peer` sent this rank under `tag`, waiting at most
    /// [`Control::timeout`] ([`Error::ControlTimeout`] naming `peer`) unless `abort` is
    /// raised ([`Error::Aborted`]).
    pub fn recv_from(
        &self,
        op: &'static str,
        rank: u32,
        peer: u32,
        tag: u64,
        abort: &AbortFlag,
    ) -> Result<Vec<u8>> {
        let timeout = self.timeout();
        let deadline = Instant::now() + timeout;
        match self {
            Control::Local { rdv, .. } => rdv.take(op, rank, peer, tag, deadline, timeout, abort),
            Control::Bootstrap { boot, .. } => {
                boot.recv_until(op, peer, tag, deadline, abort)
                    .map_err(|source| match source {
                        BootstrapError::Aborted { .. } => Error::Aborted { op, rank },
                        BootstrapError::Timeout { .. } => Error::ControlTimeout {
                            op,
                            rank,
                            missing: vec![peer],
                            timeout,
                        },
                        source => Error::Control { op, rank, source },
                    })
            }
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
