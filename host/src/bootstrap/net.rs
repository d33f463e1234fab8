//! The thin blocking-socket driver: interface selection (`NCCL_SOCKET_IFNAME`), listening,
//! connecting with retries, and running the sans-IO handshakes of [`super::handshake`] over a
//! `TcpStream` with deadlines (every read and write gets the time left as its socket timeout).

use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Peer, Result};
use super::handshake::{Accepted, Acceptor, Connected, Connector, HandshakeError};
use super::wire::FrameDecoder;
use crate::abort::{self, AbortFlag};

/// Read chunk size.
pub const CHUNK: usize = 64 * 1024;

/// An `NCCL_SOCKET_IFNAME` filter: `eth,ib` (name prefixes), `=eth0` (exact names),
/// `^docker,lo` (exclude prefixes), `^=eth1` (exclude exact names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfFilter {
    pub exclude: bool,
    pub exact: bool,
    pub names: Vec<String>,
}

impl IfFilter {
    /// Parses the NCCL syntax.
    pub fn parse(spec: &str) -> Self {
        let mut s = spec.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names = s
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        Self {
            exclude,
            exact,
            names,
        }
    }

    /// Whether interface `name` passes the filter.
    pub fn matches(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

/// Picks the address to listen on from `(interface name, ip)` pairs. With a filter: the first
/// match (IPv4 before IPv6). Without: the first interface that is neither loopback nor
/// `docker*` (NCCL's default `^docker,lo`), else the first loopback address.
pub fn pick_address(ifaces: &[(String, IpAddr)], spec: Option<&str>) -> Option<(String, IpAddr)> {
    let mut sorted: Vec<&(String, IpAddr)> = ifaces.iter().collect();
    sorted.sort_by_key(|(_, ip)| ip.is_ipv6());
    let first = |f: &IfFilter, skip_loopback: bool| {
        sorted
            .iter()
            .find(|(n, ip)| f.matches(n) && !(skip_loopback && ip.is_loopback()))
            .map(|x| (*x).clone())
    };
    match spec {
        Some(spec) => first(&IfFilter::parse(spec), false),
        None => first(&IfFilter::parse("^docker,lo"), true).or_else(|| {
            sorted
                .iter()
                .find(|(_, ip)| ip.is_loopback())
                .map(|x| (*x).clone())
        }),
    }
}

/// The host's interface addresses, then [`pick_address`].
pub fn select_address(spec: Option<&str>) -> Result<(String, IpAddr)> {
    let ifaces: Vec<(String, IpAddr)> = if_addrs::get_if_addrs()
        .map_err(|source| BootstrapError::Interfaces { source })?
        .into_iter()
        .filter(|i| !i.is_link_local())
        .map(|i| (i.name.clone(), i.ip()))
        .collect();
    pick_address(&ifaces, spec).ok_or_else(|| BootstrapError::NoInterface {
        spec: spec.unwrap_or("(default)").to_string(),
        available: ifaces
            .iter()
            .map(|(n, ip)| format!("{n}={ip}"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Binds a listener on `ip`, any port.
pub fn listen(ip: IpAddr, who: String) -> Result<TcpListener> {
    let addr = SocketAddr::new(ip, 0);
    TcpListener::bind(addr).map_err(|source| BootstrapError::Listen { who, addr, source })
}

/// Who we talk to, for error messages.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    pub op: &'static str,
    pub rank: u32,
    pub peer: Peer,
    pub addr: SocketAddr,
    pub timeout: Duration,
}

impl Ctx {
    pub fn io(&self, source: io::Error) -> BootstrapError {
        BootstrapError::Io {
            op: self.op,
            rank: self.rank,
            peer: self.peer,
            addr: self.addr,
            source,
        }
    }

    pub fn aborted(&self) -> BootstrapError {
        BootstrapError::Aborted {
            op: self.op,
            rank: self.rank,
        }
    }

    pub fn timed_out(&self) -> BootstrapError {
        BootstrapError::Timeout {
            op: self.op,
            rank: self.rank,
            peer: self.peer,
            timeout: self.timeout,
        }
    }

    fn handshake(&self, e: HandshakeError) -> BootstrapError {
        match e {
            HandshakeError::Timeout => self.timed_out(),
            HandshakeError::Reject(reason) | HandshakeError::Rejected(reason) => BootstrapError::Rejected {
                rank: self.rank,
                peer: self.peer,
                addr: self.addr,
                reason,
            },
            HandshakeError::Aborted(a) => BootstrapError::MissingRanks {
                rank: self.rank,
                nranks: a.nranks,
                missing: a.missing,
                timeout: Duration::from_millis(a.timeout_ms),
            },
            HandshakeError::Protocol(detail) => BootstrapError::Protocol {
                rank: self.rank,
                peer: self.peer,
                detail,
            },
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// Connects to `ctx.addr`, retrying refused/unreachable attempts until `deadline`, giving up
/// between attempts when `abort` is raised.
pub fn connect(ctx: &Ctx, deadline: Instant, abort: Option<&AbortFlag>) -> Result<TcpStream> {
    let mut backoff = Duration::from_millis(5);
    loop {
        if abort.is_some_and(AbortFlag::is_raised) {
            return Err(ctx.aborted());
        }
        let Some(rest) = left(deadline) else {
            return Err(ctx.timed_out());
        };
        match TcpStream::connect_timeout(&ctx.addr, rest.min(Duration::from_secs(5))) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) if left(deadline).is_none() => {
                return Err(BootstrapError::Connect {
                    rank: ctx.rank,
                    peer: ctx.peer,
                    addr: ctx.addr,
                    source: e,
                })
            }
            Err(e) => {
                tracing::debug!(rank = ctx.rank, peer = %ctx.peer, addr = %ctx.addr, "connect failed, retrying: {e}");
                std::thread::sleep(backoff.min(left(deadline).unwrap_or_default()));
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
    }
}

/// Writes all of `bytes` before `deadline`.
pub fn write_all(stream: &mut TcpStream, bytes: &[u8], deadline: Instant, ctx: &Ctx) -> Result<()> {
    let rest = left(deadline).ok_or_else(|| ctx.timed_out())?;
    stream.set_write_timeout(Some(rest)).map_err(|e| ctx.io(e))?;
    stream.write_all(bytes).map_err(|e| {
        if is_timeout(&e) {
            ctx.timed_out()
        } else {
            ctx.io(e)
        }
    })
}

/// One read with the time left as the socket timeout. `Ok(0)` is end of stream.
fn read_some(stream: &mut TcpStream, buf: &mut [u8], rest: Duration) -> io::Result<usize> {
    stream.set_read_timeout(Some(rest))?;
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Runs a connector handshake: sends `hello`, feeds replies to `conn` until it completes.
/// With `abort`, reads wait at most [`abort::POLL`] at a time and the flag is looked at
/// between them.
pub fn run_connector(
    stream: &mut TcpStream,
    mut conn: Connector,
    hello: &[u8],
    deadline: Instant,
    ctx: &Ctx,
    abort: Option<&AbortFlag>,
) -> Result<Connected> {
    write_all(stream, hello, deadline, ctx)?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        if abort.is_some_and(AbortFlag::is_raised) {
            return Err(ctx.aborted());
        }
        let mut rest = conn.remaining(Instant::now()).map_err(|e| ctx.handshake(e))?;
        if abort.is_some() {
            rest = rest.min(abort::POLL);
        }
        let n = match read_some(stream, &mut buf, rest) {
            Ok(0) => {
                return Err(BootstrapError::PeerClosed {
                    op: ctx.op,
                    rank: ctx.rank,
                    peer: ctx.peer,
                    detail: "closed during the handshake".into(),
                })
            }
            Ok(n) => n,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(ctx.io(e)),
        };
        if let Some(done) = conn
            .handle_bytes(&buf[..n], Instant::now())
            .map_err(|e| ctx.handshake(e))?
        {
            return Ok(done);
        }
    }
}

/// Runs an acceptor handshake on an accepted stream. On a rejection the reply is sent (best
/// effort) before returning the error; the caller logs it and drops the stream.
pub fn run_acceptor(
    stream: &mut TcpStream,
    mut acc: Acceptor,
) -> Result<(Accepted, FrameDecoder), HandshakeError> {
    let mut buf = vec![0u8; 4096];
    let result = loop {
        let rest = match acc.remaining(Instant::now()) {
            Ok(r) => r,
            Err(e) => break Err(e),
        };
        let n = match read_some(stream, &mut buf, rest) {
            Ok(0) => break Err(HandshakeError::Protocol("closed during the handshake".into())),
            Ok(n) => n,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => break Err(HandshakeError::Protocol(format!("read failed: {e}"))),
        };
        match acc.handle_bytes(&buf[..n], Instant::now()) {
            Ok(Some(done)) => break Ok(done),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
    };
    match result {
        Ok(done) => Ok((done, acc.into_decoder())),
        Err(e) => {
            if let Some(reply) = e.reply() {
                let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = stream.write_all(&reply);
            }
            Err(e)
        }
    }
}
