//! Rank-to-rank control messages: every rank listens; a sender connects lazily to the receiver
//! (one connection per ordered pair, used in one direction only, so two ranks that send to each
//! other at the same time never race on a shared socket) and authenticates with the job's
//! secret. On the receiving side a thread per accepted connection runs the handshake, then
//! decodes `Data`/`Coll` frames into a [`Mailbox`] keyed by (peer, kind, tag); `recv` waits on
//! it with a deadline. Frames on one connection keep their order, so messages with the same
//! (peer, tag) arrive in the order they were sent.

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Peer, Result};
use super::handshake::{Accepted, Acceptor, Connected, Connector};
use super::net::{self, Ctx};
use super::wire::{self, Auth, FrameDecoder, Kind, Role};
use crate::abort::{self, AbortFlag};

type Key = (u32, u16, u64);

#[derive(Default)]
struct MailState {
    queues: HashMap<Key, VecDeque<Vec<u8>>>,
    /// Peers whose connection ended, with why.
    closed: HashMap<u32, String>,
}

/// Received messages, keyed by (peer, frame kind, tag).
#[derive(Default)]
pub struct Mailbox {
    state: Mutex<MailState>,
    cv: Condvar,
}

/// Why [`Mailbox::pop`] returned nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum PopError {
    Timeout,
    Closed(String),
    Aborted,
}

impl Mailbox {
    pub fn push(&self, peer: u32, kind: Kind, tag: u64, payload: Vec<u8>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.queues
            .entry((peer, kind as u16, tag))
            .or_default()
            .push_back(payload);
        self.cv.notify_all();
    }

    pub fn close(&self, peer: u32, why: String) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.closed.insert(peer, why);
        self.cv.notify_all();
    }

    /// The oldest message for the key; waits until `deadline` or until `abort` is raised
    /// (looked at every [`abort::POLL`]).
    pub fn pop(
        &self,
        peer: u32,
        kind: Kind,
        tag: u64,
        deadline: Instant,
        abort: &AbortFlag,
    ) -> Result<Vec<u8>, PopError> {
        let key = (peer, kind as u16, tag);
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(q) = s.queues.get_mut(&key) {
                if let Some(m) = q.pop_front() {
                    if q.is_empty() {
                        s.queues.remove(&key);
                    }
                    return Ok(m);
                }
            }
            if let Some(why) = s.closed.get(&peer) {
                return Err(PopError::Closed(why.clone()));
            }
            if abort.is_raised() {
                return Err(PopError::Aborted);
            }
            let Some(rest) = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return Err(PopError::Timeout);
            };
            s = self
                .cv
                .wait_timeout(s, rest.min(abort::POLL))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// This rank's listener, incoming connections and lazily opened outgoing connections.
pub struct PeerNet {
    rank: u32,
    nranks: u32,
    secret: [u8; 16],
    timeout: Duration,
    listen_addr: SocketAddr,
    pub mailbox: Arc<Mailbox>,
    out: Vec<Mutex<Option<TcpStream>>>,
    incoming: Arc<Mutex<Vec<TcpStream>>>,
    rejected: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl PeerNet {
    /// Binds the listener on `ip` and starts its accept thread.
    pub fn start(ip: IpAddr, secret: [u8; 16], rank: u32, nranks: u32, timeout: Duration) -> Result<Self> {
        let who = format!("rank {rank}");
        let listener = net::listen(ip, who.clone())?;
        let bind_err = |source| BootstrapError::Listen {
            who: who.clone(),
            addr: SocketAddr::new(ip, 0),
            source,
        };
        let listen_addr = listener.local_addr().map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let me = Self {
            rank,
            nranks,
            secret,
            timeout,
            listen_addr,
            mailbox: Arc::default(),
            out: (0..nranks).map(|_| Mutex::new(None)).collect(),
            incoming: Arc::default(),
            rejected: Arc::default(),
            stop: Arc::default(),
        };
        let ctx = AcceptCtx {
            secret,
            rank,
            nranks,
            timeout,
            mailbox: me.mailbox.clone(),
            incoming: me.incoming.clone(),
            rejected: me.rejected.clone(),
            stop: me.stop.clone(),
        };
        std::thread::Builder::new()
            .name(format!("oxccl-bootstrap-r{rank}"))
            .spawn(move || accept_loop(listener, ctx))
            .map_err(|source| BootstrapError::Spawn {
                what: "rank listener",
                source,
            })?;
        Ok(me)
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    pub fn rejected(&self) -> usize {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Sends one frame to `peer` at `addr`, connecting first if needed.
    pub fn send(
        &self,
        op: &'static str,
        peer: u32,
        addr: SocketAddr,
        kind: Kind,
        tag: u64,
        bytes: &[u8],
    ) -> Result<()> {
        if peer == self.rank {
            self.mailbox.push(peer, kind, tag, bytes.to_vec());
            return Ok(());
        }
        let ctx = Ctx {
            op,
            rank: self.rank,
            peer: Peer::Rank(peer),
            addr,
            timeout: self.timeout,
        };
        let deadline = Instant::now() + self.timeout;
        let mut slot = self.out[peer as usize].lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            let mut stream = net::connect(&ctx, deadline, None)?;
            let auth = Auth::new(Role::Peer, self.secret, self.rank, self.nranks);
            let (conn, hello) = Connector::new(auth, None, deadline);
            match net::run_connector(&mut stream, conn, &hello, deadline, &ctx, None)? {
                Connected::Accepted => *slot = Some(stream),
                Connected::Table(_) => unreachable!("a peer connector never yields a table"),
            }
        }
        let stream = slot.as_mut().expect("connected above");
        let frame = wire::encode_frame(kind, tag, bytes);
        let res = net::write_all(stream, &frame, deadline, &ctx);
        if res.is_err() {
            *slot = None;
        }
        res
    }

    /// Receives the next frame of `kind`/`tag` from `peer`, waiting until `deadline` unless
    /// `abort` is raised.
    pub fn recv(
        &self,
        op: &'static str,
        peer: u32,
        kind: Kind,
        tag: u64,
        deadline: Instant,
        abort: &AbortFlag,
    ) -> Result<Vec<u8>> {
        self.mailbox
            .pop(peer, kind, tag, deadline, abort)
            .map_err(|e| match e {
                PopError::Timeout => BootstrapError::Timeout {
                    op,
                    rank: self.rank,
                    peer: Peer::Rank(peer),
                    timeout: self.timeout,
                },
                PopError::Closed(detail) => BootstrapError::PeerClosed {
                    op,
                    rank: self.rank,
                    peer: Peer::Rank(peer),
                    detail,
                },
                PopError::Aborted => BootstrapError::Aborted { op, rank: self.rank },
            })
    }
}

impl Drop for PeerNet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for s in self.incoming.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

struct AcceptCtx {
    secret: [u8; 16],
    rank: u32,
    nranks: u32,
    timeout: Duration,
    mailbox: Arc<Mailbox>,
    incoming: Arc<Mutex<Vec<TcpStream>>>,
    rejected: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

fn accept_loop(listener: TcpListener, ctx: AcceptCtx) {
    let ctx = Arc::new(ctx);
    while !ctx.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, from)) => {
                let ctx2 = ctx.clone();
                let name = format!("oxccl-bootstrap-r{}-in", ctx.rank);
                if let Err(e) = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || serve(stream, from, &ctx2))
                {
                    tracing::warn!(rank = ctx.rank, %from, "bootstrap: dropping a connection, no thread: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => {
                tracing::warn!(rank = ctx.rank, "bootstrap: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// One incoming connection: handshake, then frames into the mailbox until it closes.
fn serve(mut stream: TcpStream, from: SocketAddr, ctx: &AcceptCtx) {
    let _ = stream.set_nonblocking(false);
    let acc = Acceptor::peer(ctx.secret, ctx.rank, ctx.nranks, Instant::now() + ctx.timeout);
    let (peer, reply, mut decoder) = match net::run_acceptor(&mut stream, acc) {
        Ok((Accepted::Peer { rank, reply }, d)) => (rank, reply, d),
        Ok((Accepted::Join { .. }, _)) => return,
        Err(e) => {
            ctx.rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(rank = ctx.rank, %from, "bootstrap: refused a connection: {e:?}");
            return;
        }
    };
    let nctx = Ctx {
        op: "accept",
        rank: ctx.rank,
        peer: Peer::Rank(peer),
        addr: from,
        timeout: ctx.timeout,
    };
    if let Err(e) = net::write_all(&mut stream, &reply, Instant::now() + ctx.timeout, &nctx) {
        tracing::warn!(rank = ctx.rank, %from, "bootstrap: {e}");
        return;
    }
    match stream.try_clone() {
        Ok(c) => ctx.incoming.lock().unwrap_or_else(|e| e.into_inner()).push(c),
        Err(e) => tracing::warn!(rank = ctx.rank, %from, "bootstrap: clone failed: {e}"),
    }
    let why = pump(&mut stream, &mut decoder, peer, ctx);
    tracing::debug!(
        rank = ctx.rank,
        peer,
        "bootstrap: connection from peer ended: {why}"
    );
    ctx.mailbox.close(peer, why);
}

fn pump(stream: &mut TcpStream, decoder: &mut FrameDecoder, peer: u32, ctx: &AcceptCtx) -> String {
    let _ = stream.set_read_timeout(None);
    let mut buf = vec![0u8; net::CHUNK];
    let mut pending: &[u8] = &[];
    loop {
        if let Err(e) = decoder.push(pending) {
            return format!("protocol error: {e}");
        }
        loop {
            match decoder.next_frame() {
                Ok(Some(f)) if matches!(f.kind, Kind::Data | Kind::Coll) => {
                    ctx.mailbox.push(peer, f.kind, f.tag, f.payload)
                }
                Ok(Some(f)) => return format!("protocol error: unexpected {:?} frame", f.kind),
                Ok(None) => break,
                Err(e) => return format!("protocol error: {e}"),
            }
        }
        if ctx.stop.load(Ordering::Relaxed) {
            return "this rank shut down".into();
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => return "closed by the peer".into(),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
            Err(e) => return format!("read failed: {e}"),
        };
        pending = &buf[..n];
    }
}
