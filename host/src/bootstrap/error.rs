//! Bootstrap errors: one variant per failing operation, with the rank, the peer and the address
//! involved. Messages are lowercase without a trailing period.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// Result alias for the bootstrap layer.
pub type Result<T, E = BootstrapError> = core::result::Result<T, E>;

/// The other side of a bootstrap connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// The root (the process that created the [`super::UniqueId`]).
    Root,
    /// Another rank.
    Rank(u32),
    /// A connection that did not (yet) say who it is.
    Unknown(SocketAddr),
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Root => f.write_str("the root"),
            Peer::Rank(r) => write!(f, "rank {r}"),
            Peer::Unknown(a) => write!(f, "an unidentified connection from {a}"),
        }
    }
}

/// Why a listener (the root or a rank) refused a connection. Sent back to the connector in a
/// `Reject` frame (see [`super::wire`]), so both sides report the same reason.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectReason {
    /// The secret did not match: a different unique id, or a stray connection.
    BadSecret,
    /// The protocol magic or version did not match.
    BadVersion { magic: u32, version: u16 },
    /// `rank >= nranks`.
    RankOutOfRange { rank: u32, nranks: u32 },
    /// Another connection already joined with this rank.
    DuplicateRank { rank: u32 },
    /// This rank's `nranks` differs from the one an earlier rank announced.
    NranksMismatch {
        rank: u32,
        nranks: u32,
        first_rank: u32,
        first_nranks: u32,
    },
    /// The connection sent something that is not this protocol.
    Protocol { detail: String },
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::BadSecret => {
                f.write_str("wrong secret (the connection belongs to a different unique id)")
            }
            RejectReason::BadVersion { magic, version } => {
                write!(
                    f,
                    "protocol magic {magic:#010x} version {version} is not oxccl bootstrap"
                )
            }
            RejectReason::RankOutOfRange { rank, nranks } => {
                write!(f, "rank {rank} is out of range for nranks {nranks}")
            }
            RejectReason::DuplicateRank { rank } => write!(f, "rank {rank} already joined"),
            RejectReason::NranksMismatch {
                rank,
                nranks,
                first_rank,
                first_nranks,
            } => write!(
                f,
                "rank {rank} says nranks {nranks} but rank {first_rank} said nranks {first_nranks}"
            ),
            RejectReason::Protocol { detail } => write!(f, "protocol error: {detail}"),
        }
    }
}

/// Everything that can fail in the bootstrap layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// `UniqueId::from_bytes` got bytes that are not a unique id.
    #[error("invalid unique id: {what}")]
    InvalidId { what: String },

    /// An environment setting could not be parsed.
    #[error("invalid setting {name}={value:?}: {what}")]
    InvalidSetting {
        name: &'static str,
        value: String,
        what: &'static str,
    },

    /// Listing the host's network interfaces failed.
    #[error("bootstrap: listing network interfaces failed: {source}")]
    Interfaces { source: io::Error },

    /// No interface matched the interface filter (`NCCL_SOCKET_IFNAME` or `Config::ifname`).
    #[error("bootstrap: no network interface matches {spec:?} (interfaces: {available})")]
    NoInterface { spec: String, available: String },

    /// Binding a listening socket failed.
    #[error("bootstrap: {who} could not listen on {addr}: {source}")]
    Listen {
        who: String,
        addr: SocketAddr,
        source: io::Error,
    },

    /// Connecting to the root or a peer failed (after retrying until the deadline).
    #[error("rank {rank}: connecting to {peer} at {addr} failed: {source}")]
    Connect {
        rank: u32,
        peer: Peer,
        addr: SocketAddr,
        source: io::Error,
    },

    /// Reading or writing a connection failed.
    #[error("rank {rank}: {op} with {peer} at {addr} failed: {source}")]
    Io {
        op: &'static str,
        rank: u32,
        peer: Peer,
        addr: SocketAddr,
        source: io::Error,
    },

    /// The other side refused this connection.
    #[error("rank {rank}: {peer} at {addr} rejected the connection: {reason}")]
    Rejected {
        rank: u32,
        peer: Peer,
        addr: SocketAddr,
        reason: RejectReason,
    },

    /// The other side sent bytes that are not this protocol.
    #[error("rank {rank}: protocol error from {peer}: {detail}")]
    Protocol { rank: u32, peer: Peer, detail: String },

    /// A step passed its deadline without the root reporting missing ranks.
    #[error("rank {rank}: {op} timed out after {timeout:?} waiting for {peer}")]
    Timeout {
        op: &'static str,
        rank: u32,
        peer: Peer,
        timeout: Duration,
    },

    /// The root gave up because some ranks never joined; it told this rank which.
    #[error("rank {rank}: bootstrap aborted by the root: ranks {missing:?} of {nranks} did not join within {timeout:?}")]
    MissingRanks {
        rank: u32,
        nranks: u32,
        missing: Vec<u32>,
        timeout: Duration,
    },

    /// The root's own view of the same failure (returned by `Root::wait`).
    /// `nranks` is 0 when no rank joined at all.
    #[error("bootstrap root at {addr}: {joined} ranks joined within {timeout:?}; missing ranks {missing:?} of nranks {nranks}")]
    RootTimeout {
        addr: SocketAddr,
        nranks: u32,
        joined: usize,
        missing: Vec<u32>,
        timeout: Duration,
    },

    /// The root was stopped (its `Root` handle dropped) before the rendezvous completed.
    #[error("bootstrap root at {addr} was stopped before all ranks joined")]
    RootStopped { addr: SocketAddr },

    /// The connection from a peer closed while this rank waited for its message.
    #[error("rank {rank}: {op}: the connection from {peer} closed: {detail}")]
    PeerClosed {
        op: &'static str,
        rank: u32,
        peer: Peer,
        detail: String,
    },

    /// A caller passed an invalid argument.
    #[error("rank {rank}: {op}: invalid argument: {what}")]
    InvalidArgument {
        op: &'static str,
        rank: u32,
        what: String,
    },

    /// The wait was given up because its abort flag was raised (`Comm::abort`, or the abort
    /// of a pending non-blocking init).
    #[error("rank {rank}: {op}: aborted")]
    Aborted { op: &'static str, rank: u32 },

    /// Starting a bootstrap thread failed.
    #[error("bootstrap: spawning the {what} thread failed: {source}")]
    Spawn { what: &'static str, source: io::Error },
}
