//! Sans-IO handshake state machines: no sockets and no clock inside. The driver
//! ([`super::net`]) feeds bytes read from a socket to `handle_bytes(bytes, now)`, writes the
//! bytes the machine returns, and sets its socket timeout from [`Acceptor::remaining`] /
//! [`Connector::remaining`].
//!
//! Protocol (frames in [`super::wire`]):
//!
//! ```text
//! rank -> root : Auth{role Root, secret, rank, nranks}  Join{listen addr, blob}
//! root -> rank : Table{every rank's addr and blob}      | Reject{reason} | Abort{missing ranks}
//!
//! rank A -> B  : Auth{role Peer, secret, rank A, nranks}
//! B -> rank A  : Accept                                 | Reject{reason}
//! rank A -> B  : Data{tag} / Coll{seq} ... (one direction: A sends, B receives)
//! ```
//!
//! The listener caps the first frame at [`wire::AUTH_LEN`] bytes and checks magic, version,
//! role and secret before it accepts anything larger.

use std::time::{Duration, Instant};

use super::error::RejectReason;
use super::wire::{self, Abort, Auth, FrameDecoder, Kind, PeerEntry, Role, WireError};

/// Why a handshake did not complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeError {
    /// Listener side: we refuse the connector; send [`HandshakeError::reply`] and close.
    Reject(RejectReason),
    /// Connector side: the listener refused us.
    Rejected(RejectReason),
    /// Connector side: the root gave up waiting for missing ranks.
    Aborted(Abort),
    /// Connector side: the listener sent bytes that are not this protocol.
    Protocol(String),
    /// The deadline passed.
    Timeout,
}

impl HandshakeError {
    /// The frame to send back before closing, if any.
    pub fn reply(&self) -> Option<Vec<u8>> {
        match self {
            HandshakeError::Reject(r) => Some(wire::encode_frame(Kind::Reject, 0, &wire::encode_reject(r))),
            _ => None,
        }
    }
}

fn reject_wire(e: WireError) -> HandshakeError {
    HandshakeError::Reject(RejectReason::Protocol {
        detail: e.to_string(),
    })
}

/// Constant-time secret comparison.
pub fn secret_eq(a: &[u8; 16], b: &[u8; 16]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn remaining(deadline: Instant, now: Instant) -> Result<Duration, HandshakeError> {
    match deadline.checked_duration_since(now) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(HandshakeError::Timeout),
    }
}

/// What a listener learned from a completed handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// A rank connected to the root and joined.
    Join { auth: Auth, entry: PeerEntry },
    /// A peer rank connected to a rank listener; `reply` (an `Accept` frame) must be sent.
    Peer { rank: u32, reply: Vec<u8> },
}

/// Listener side of a handshake.
#[derive(Debug)]
pub struct Acceptor {
    decoder: FrameDecoder,
    role: Role,
    secret: [u8; 16],
    /// `(our rank, nranks)` on a rank listener; `None` on the root.
    local: Option<(u32, u32)>,
    deadline: Instant,
    auth: Option<Auth>,
    done: bool,
}

impl Acceptor {
    /// The root's acceptor (expects `Auth` then `Join`).
    pub fn root(secret: [u8; 16], deadline: Instant) -> Self {
        Self::new(Role::Root, secret, None, deadline)
    }

    /// A rank listener's acceptor (expects `Auth` from a rank of the same job).
    pub fn peer(secret: [u8; 16], rank: u32, nranks: u32, deadline: Instant) -> Self {
        Self::new(Role::Peer, secret, Some((rank, nranks)), deadline)
    }

    fn new(role: Role, secret: [u8; 16], local: Option<(u32, u32)>, deadline: Instant) -> Self {
        let decoder = FrameDecoder::new(wire::AUTH_LEN);
        Self {
            decoder,
            role,
            secret,
            local,
            deadline,
            auth: None,
            done: false,
        }
    }

    /// Time left before the deadline, or `Timeout`.
    pub fn remaining(&self, now: Instant) -> Result<Duration, HandshakeError> {
        remaining(self.deadline, now)
    }

    /// Feeds bytes from the connection. `Ok(Some(_))` once the handshake completed; further
    /// bytes then belong to the stream ([`Acceptor::into_decoder`]).
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) -> Result<Option<Accepted>, HandshakeError> {
        if self.done {
            return Err(HandshakeError::Reject(RejectReason::Protocol {
                detail: "handshake already complete".into(),
            }));
        }
        self.decoder.push(bytes).map_err(reject_wire)?;
        while let Some(frame) = self.decoder.next_frame().map_err(reject_wire)? {
            match (self.auth, frame.kind) {
                (None, Kind::Auth) => {
                    let auth = Auth::decode(&frame.payload).map_err(reject_wire)?;
                    self.check_auth(&auth)?;
                    if let Some((_, _)) = self.local {
                        self.done = true;
                        let reply = wire::encode_frame(Kind::Accept, 0, &[]);
                        return Ok(Some(Accepted::Peer {
                            rank: auth.rank,
                            reply,
                        }));
                    }
                    self.auth = Some(auth);
                    self.decoder.set_cap(wire::MAX_PAYLOAD);
                }
                (Some(auth), Kind::Join) => {
                    let entry = wire::decode_join(&frame.payload).map_err(reject_wire)?;
                    self.done = true;
                    return Ok(Some(Accepted::Join { auth, entry }));
                }
                (_, kind) => {
                    return Err(HandshakeError::Reject(RejectReason::Protocol {
                        detail: format!("unexpected {kind:?} frame during the handshake"),
                    }))
                }
            }
        }
        // Checked after the bytes: a frame that arrived in time is still accepted.
        self.remaining(now).map(|_| None)
    }

    fn check_auth(&self, auth: &Auth) -> Result<(), HandshakeError> {
        if auth.magic != wire::MAGIC || auth.version != wire::VERSION {
            return Err(HandshakeError::Reject(RejectReason::BadVersion {
                magic: auth.magic,
                version: auth.version,
            }));
        }
        if auth.role != self.role as u8 {
            return Err(HandshakeError::Reject(RejectReason::Protocol {
                detail: format!("auth for role {} sent to a {:?} listener", auth.role, self.role),
            }));
        }
        if !secret_eq(&auth.secret, &self.secret) {
            return Err(HandshakeError::Reject(RejectReason::BadSecret));
        }
        if let Some((rank, nranks)) = self.local {
            if auth.nranks != nranks {
                return Err(HandshakeError::Reject(RejectReason::NranksMismatch {
                    rank: auth.rank,
                    nranks: auth.nranks,
                    first_rank: rank,
                    first_nranks: nranks,
                }));
            }
            if auth.rank >= nranks {
                return Err(HandshakeError::Reject(RejectReason::RankOutOfRange {
                    rank: auth.rank,
                    nranks,
                }));
            }
        }
        Ok(())
    }

    /// The decoder with any bytes that followed the handshake.
    pub fn into_decoder(mut self) -> FrameDecoder {
        self.decoder.set_cap(wire::MAX_PAYLOAD);
        self.decoder
    }
}

/// What a connector got once its handshake completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Connected {
    /// A peer accepted the connection.
    Accepted,
    /// The root sent the table of all ranks.
    Table(Vec<PeerEntry>),
}

/// Connector side of a handshake (a rank connecting to the root or to a peer).
#[derive(Debug)]
pub struct Connector {
    decoder: FrameDecoder,
    role: Role,
    nranks: u32,
    deadline: Instant,
    done: bool,
}

impl Connector {
    /// A connector and the bytes to send first. `join` is required for [`Role::Root`].
    pub fn new(auth: Auth, join: Option<&PeerEntry>, deadline: Instant) -> (Self, Vec<u8>) {
        let role = if auth.role == Role::Root as u8 {
            Role::Root
        } else {
            Role::Peer
        };
        let mut out = wire::encode_frame(Kind::Auth, 0, &auth.encode());
        if let Some(entry) = join {
            out.extend_from_slice(&wire::encode_frame(Kind::Join, 0, &wire::encode_join(entry)));
        }
        let decoder = FrameDecoder::new(wire::MAX_PAYLOAD);
        (
            Self {
                decoder,
                role,
                nranks: auth.nranks,
                deadline,
                done: false,
            },
            out,
        )
    }

    /// Time left before the deadline, or `Timeout`.
    pub fn remaining(&self, now: Instant) -> Result<Duration, HandshakeError> {
        remaining(self.deadline, now)
    }

    /// Feeds bytes from the listener.
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) -> Result<Option<Connected>, HandshakeError> {
        let proto = |e: WireError| HandshakeError::Protocol(e.to_string());
        if self.done {
            return Err(HandshakeError::Protocol(
                "bytes after the handshake completed".into(),
            ));
        }
        self.decoder.push(bytes).map_err(proto)?;
        if let Some(frame) = self.decoder.next_frame().map_err(proto)? {
            return match (self.role, frame.kind) {
                (_, Kind::Reject) => Err(HandshakeError::Rejected(
                    wire::decode_reject(&frame.payload).map_err(proto)?,
                )),
                (Role::Root, Kind::Abort) => Err(HandshakeError::Aborted(
                    wire::decode_abort(&frame.payload).map_err(proto)?,
                )),
                (Role::Root, Kind::Table) => {
                    let table = wire::decode_table(&frame.payload).map_err(proto)?;
                    if table.len() != self.nranks as usize {
                        return Err(HandshakeError::Protocol(format!(
                            "table has {} ranks, expected {}",
                            table.len(),
                            self.nranks
                        )));
                    }
                    self.done = true;
                    Ok(Some(Connected::Table(table)))
                }
                (Role::Peer, Kind::Accept) if frame.payload.is_empty() => {
                    self.done = true;
                    Ok(Some(Connected::Accepted))
                }
                (_, kind) => Err(HandshakeError::Protocol(format!("unexpected {kind:?} frame"))),
            };
        }
        self.remaining(now).map(|_| None)
    }
}
