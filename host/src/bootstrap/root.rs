//! The root: a listener thread that collects every rank's `Join` and sends everyone the table.
//!
//! [`Rendezvous`] is the sans-IO bookkeeping (who joined, nranks agreement, what is missing).
//! The thread ([`start`]) polls a non-blocking listener every 2 ms, hands each accepted
//! connection to a short-lived handshake thread (so a silent or garbage-sending stray never
//! blocks the root), and feeds completed handshakes to the `Rendezvous`. Rejected connections
//! get a `Reject` frame and are dropped; the root keeps waiting for genuine ranks.
//!
//! Deadline: `timeout` after the first rank joined (or after creation if none joins). When it
//! passes, every joined rank gets an `Abort` listing the missing ranks and [`Root::wait`]
//! returns [`BootstrapError::RootTimeout`]. The root is one-use: it exits once the table was sent.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Peer, RejectReason, Result};
use super::handshake::{Accepted, Acceptor, HandshakeError};
use super::net::{self, Ctx};
use super::wire::{self, Abort, Auth, Kind, PeerEntry};

/// Sans-IO rendezvous state: the ranks that joined so far.
#[derive(Debug, Default)]
pub struct Rendezvous {
    /// `(first rank that joined, its nranks)`: every later rank must agree.
    first: Option<(u32, u32)>,
    joined: BTreeMap<u32, PeerEntry>,
}

impl Rendezvous {
    /// Records a join, or says why it is refused.
    pub fn join(&mut self, auth: &Auth, entry: PeerEntry) -> std::result::Result<(), RejectReason> {
        let (rank, nranks) = (auth.rank, auth.nranks);
        if rank >= nranks {
            return Err(RejectReason::RankOutOfRange { rank, nranks });
        }
        if let Some((first_rank, first_nranks)) = self.first {
            if nranks != first_nranks {
                return Err(RejectReason::NranksMismatch {
                    rank,
                    nranks,
                    first_rank,
                    first_nranks,
                });
            }
        }
        if self.joined.contains_key(&rank) {
            return Err(RejectReason::DuplicateRank { rank });
        }
        self.first.get_or_insert((rank, nranks));
        self.joined.insert(rank, entry);
        Ok(())
    }

    /// `nranks`, once a rank joined.
    pub fn nranks(&self) -> Option<u32> {
        self.first.map(|(_, n)| n)
    }

    /// Whether every rank joined.
    pub fn complete(&self) -> bool {
        self.nranks().is_some_and(|n| self.joined.len() == n as usize)
    }

    /// Ranks not joined yet (empty while nranks is unknown).
    pub fn missing(&self) -> Vec<u32> {
        (0..self.nranks().unwrap_or(0))
            .filter(|r| !self.joined.contains_key(r))
            .collect()
    }

    /// The table in rank order (all of it once [`Rendezvous::complete`]).
    pub fn table(&self) -> Vec<PeerEntry> {
        self.joined.values().cloned().collect()
    }
}

/// What the root saw, returned by [`Root::wait`].
#[derive(Clone, Debug, Default)]
pub struct RootReport {
    /// The job size.
    pub nranks: u32,
    /// Connections the root refused: remote address and reason.
    pub rejected: Vec<(SocketAddr, String)>,
}

/// Owner of the root listener thread (see the module docs). Dropping it stops the thread.
#[derive(Debug)]
pub struct Root {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Connections refused so far (the report's `rejected`, counted live).
    refused: Arc<AtomicUsize>,
    thread: Option<JoinHandle<Result<RootReport>>>,
}

impl Root {
    /// The address ranks connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections the root has refused so far (each handshake is judged on its own thread,
    /// so a stray connection may be refused before or after the rendezvous completes; the
    /// report of [`Root::wait`] lists those refused before).
    pub fn refused_so_far(&self) -> usize {
        self.refused.load(Ordering::Relaxed)
    }

    /// Whether the root finished (table sent, timed out or stopped).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Blocks until the rendezvous completed (`Ok`) or timed out (`RootTimeout`).
    pub fn wait(mut self) -> Result<RootReport> {
        let thread = self.thread.take().expect("thread present until wait");
        thread
            .join()
            .unwrap_or(Err(BootstrapError::RootStopped { addr: self.addr }))
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Binds the root listener on `ip` and starts its thread.
pub fn start(ip: IpAddr, secret: [u8; 16], timeout: Duration) -> Result<Root> {
    let listener = net::listen(ip, "the root".into())?;
    let addr = listener.local_addr().map_err(|source| BootstrapError::Listen {
        who: "the root".into(),
        addr: SocketAddr::new(ip, 0),
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| BootstrapError::Listen {
            who: "the root".into(),
            addr,
            source,
        })?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let refused = Arc::new(AtomicUsize::new(0));
    let refused2 = refused.clone();
    let thread = std::thread::Builder::new()
        .name("oxccl-bootstrap-root".into())
        .spawn(move || run(listener, addr, secret, timeout, &stop2, &refused2))
        .map_err(|source| BootstrapError::Spawn { what: "root", source })?;
    tracing::info!(%addr, "bootstrap root listening");
    Ok(Root {
        addr,
        stop,
        refused,
        thread: Some(thread),
    })
}

type Handshaken = (
    TcpStream,
    SocketAddr,
    std::result::Result<Accepted, HandshakeError>,
);

fn describe(e: &HandshakeError) -> String {
    match e {
        HandshakeError::Reject(r) | HandshakeError::Rejected(r) => r.to_string(),
        HandshakeError::Timeout => "no complete handshake before the deadline".into(),
        HandshakeError::Protocol(s) => s.clone(),
        HandshakeError::Aborted(_) => "aborted".into(),
    }
}

fn run(
    listener: TcpListener,
    addr: SocketAddr,
    secret: [u8; 16],
    timeout: Duration,
    stop: &AtomicBool,
    refused_count: &AtomicUsize,
) -> Result<RootReport> {
    let (tx, rx) = mpsc::channel::<Handshaken>();
    let created = Instant::now();
    let mut first_join: Option<Instant> = None;
    let mut rv = Rendezvous::default();
    let mut streams: Vec<(u32, TcpStream, SocketAddr)> = Vec::new();
    let mut report = RootReport::default();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(BootstrapError::RootStopped { addr });
        }
        let mut idle = true;
        match listener.accept() {
            Ok((mut stream, from)) => {
                idle = false;
                let tx = tx.clone();
                let acc = Acceptor::root(secret, Instant::now() + timeout);
                let spawned = std::thread::Builder::new()
                    .name("oxccl-bootstrap-root-hs".into())
                    .spawn(move || {
                        let _ = stream.set_nonblocking(false);
                        let res = net::run_acceptor(&mut stream, acc).map(|(a, _)| a);
                        let _ = tx.send((stream, from, res));
                    });
                if let Err(e) = spawned {
                    tracing::warn!(%from, "bootstrap root: dropping a connection, no handshake thread: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => tracing::warn!(%addr, "bootstrap root: accept failed: {e}"),
        }
        while let Ok((mut stream, from, res)) = rx.try_recv() {
            idle = false;
            let refused = match res {
                Ok(Accepted::Join { auth, entry }) => match rv.join(&auth, entry) {
                    Ok(()) => {
                        tracing::debug!(rank = auth.rank, nranks = auth.nranks, %from, "bootstrap root: rank joined");
                        first_join.get_or_insert_with(Instant::now);
                        streams.push((auth.rank, stream, from));
                        None
                    }
                    Err(reason) => {
                        let reply = wire::encode_frame(Kind::Reject, 0, &wire::encode_reject(&reason));
                        let ctx = ctx(addr, auth.rank, timeout);
                        let _ = net::write_all(
                            &mut stream,
                            &reply,
                            Instant::now() + Duration::from_secs(1),
                            &ctx,
                        );
                        Some(reason.to_string())
                    }
                },
                Ok(Accepted::Peer { .. }) => Some("peer handshake sent to the root".into()),
                Err(e) => Some(describe(&e)),
            };
            if let Some(why) = refused {
                tracing::warn!(%addr, %from, "bootstrap root: refused a connection: {why}");
                report.rejected.push((from, why));
                refused_count.fetch_add(1, Ordering::Relaxed);
            }
        }
        if rv.complete() {
            report.nranks = rv.nranks().unwrap_or(0);
            let frame = wire::encode_frame(Kind::Table, 0, &wire::encode_table(&rv.table()));
            broadcast(&mut streams, &frame, addr, timeout);
            tracing::info!(%addr, nranks = report.nranks, "bootstrap root: rendezvous complete");
            return Ok(report);
        }
        if Instant::now() >= first_join.unwrap_or(created) + timeout {
            let missing = rv.missing();
            let abort = Abort {
                nranks: rv.nranks().unwrap_or(0),
                timeout_ms: timeout.as_millis() as u64,
                missing,
            };
            let frame = wire::encode_frame(Kind::Abort, 0, &wire::encode_abort(&abort));
            broadcast(&mut streams, &frame, addr, timeout);
            tracing::warn!(%addr, missing = ?abort.missing, "bootstrap root: ranks did not join");
            let (nranks, joined) = (abort.nranks, streams.len());
            return Err(BootstrapError::RootTimeout {
                addr,
                nranks,
                joined,
                missing: abort.missing,
                timeout,
            });
        }
        if idle {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn ctx(addr: SocketAddr, rank: u32, timeout: Duration) -> Ctx {
    Ctx {
        op: "root reply",
        rank,
        peer: Peer::Root,
        addr,
        timeout,
    }
}

fn broadcast(
    streams: &mut [(u32, TcpStream, SocketAddr)],
    frame: &[u8],
    addr: SocketAddr,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    for (rank, stream, from) in streams.iter_mut() {
        if let Err(e) = net::write_all(stream, frame, deadline, &ctx(addr, *rank, timeout)) {
            tracing::warn!(rank = *rank, %from, "bootstrap root: sending to rank failed: {e}");
        }
    }
}
