//! Passing a segment's file descriptor to peers in other processes, over an abstract Unix
//! socket with `SCM_RIGHTS`.
//!
//! # Protocol
//! The owner of a segment binds the abstract socket [`socket_name`]`(secret, owner)` and
//! serves it from a thread ([`FdServer`]) until `expected` peers were served, the deadline
//! passed, or it is dropped. A peer connects and sends a 32-byte request:
//! `{magic "OXFD": u32, owner: u32, requester: u32, piece: u32, secret: [u8; 16]}`. The server
//! checks the magic, the owner and the secret (constant time) and answers 16 bytes
//! `{magic: u32, status: u32, bytes: u64}` with descriptor number `piece` attached as
//! `SCM_RIGHTS` when `status` is 0; a refused request gets a status and no descriptor, and
//! never stops the server. Both sides bound every read, write and connect by the deadline,
//! and give up early when an abort flag they were handed is raised.
//!
//! A server holds one descriptor (a segment, piece 0) or several (the pieces of a rank's
//! window, `crate::window`); `expected` counts requests served, one per piece per peer.
//!
//! Abstract socket names live in the network namespace: ranks in different namespaces
//! cannot reach each other this way, and are reported as unreachable.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::abort::AbortFlag;
use crate::error::{Error, Result};

const MAGIC: u32 = u32::from_le_bytes(*b"OXFD");
const REQUEST_BYTES: usize = 32;
const REPLY_BYTES: usize = 16;
const STATUS_OK: u32 = 0;
const STATUS_BAD_SECRET: u32 = 1;
const STATUS_BAD_OWNER: u32 = 2;
const STATUS_BAD_PIECE: u32 = 3;

/// The abstract socket name of `owner`'s segment server in the job with `secret`.
pub fn socket_name(secret: &[u8; 16], owner: u32) -> Vec<u8> {
    let hex: String = secret[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("oxccl-seg-{hex}-{owner}").into_bytes()
}

fn fail(op: &'static str, rank: u32, peer: u32, what: impl std::fmt::Display) -> Error {
    Error::Transport {
        op,
        rank,
        peer,
        what: what.to_string(),
    }
}

/// Serves one descriptor to authenticated peers from a thread.
pub struct FdServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<usize>>>,
}

impl FdServer {
    /// Bind `owner`'s socket and serve `fd` (a segment of `bytes` bytes) to `expected` peers
    /// that present `secret`, until `deadline`.
    pub fn start(
        secret: [u8; 16],
        owner: u32,
        fd: OwnedFd,
        bytes: u64,
        expected: usize,
        deadline: Instant,
    ) -> Result<FdServer> {
        Self::start_pieces(secret, owner, vec![(fd, bytes)], expected, deadline, None)
    }

    /// Bind `owner`'s socket and serve `pieces` (descriptors and their sizes, requested by
    /// index) until `expected` requests were answered, `deadline` passed or `abort` was
    /// raised.
    pub fn start_pieces(
        secret: [u8; 16],
        owner: u32,
        pieces: Vec<(OwnedFd, u64)>,
        expected: usize,
        deadline: Instant,
        abort: Option<AbortFlag>,
    ) -> Result<FdServer> {
        let name = socket_name(&secret, owner);
        let addr = SocketAddr::from_abstract_name(&name)
            .map_err(|e| fail("segment server bind", owner, u32::MAX, e))?;
        let listener =
            UnixListener::bind_addr(&addr).map_err(|e| fail("segment server bind", owner, u32::MAX, e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| fail("segment server bind", owner, u32::MAX, e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("oxccl-fd-r{owner}"))
            .spawn(move || {
                serve(
                    listener,
                    secret,
                    owner,
                    &pieces,
                    expected,
                    deadline,
                    &st,
                    abort.as_ref(),
                )
            })
            .map_err(|e| fail("segment server thread", owner, u32::MAX, e))?;
        Ok(FdServer {
            stop,
            thread: Some(thread),
        })
    }

    /// Wait until every expected peer was served (or the deadline passed): the number
    /// served.
    pub fn finish(mut self) -> Result<usize> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Init("the segment server thread panicked".into())),
            None => Ok(0),
        }
    }
}

impl Drop for FdServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn serve(
    listener: UnixListener,
    secret: [u8; 16],
    owner: u32,
    pieces: &[(OwnedFd, u64)],
    expected: usize,
    deadline: Instant,
    stop: &AtomicBool,
    abort: Option<&AbortFlag>,
) -> Result<usize> {
    let mut served = 0;
    while served < expected {
        if stop.load(Ordering::Relaxed) {
            return Ok(served);
        }
        if abort.is_some_and(AbortFlag::is_raised) {
            return Err(Error::Aborted {
                op: "segment server",
                rank: owner,
            });
        }
        if Instant::now() >= deadline {
            return Err(fail(
                "segment server",
                owner,
                u32::MAX,
                format!("timed out with {served} of {expected} peers served"),
            ));
        }
        match listener.accept() {
            Ok((mut s, _)) => {
                // A misbehaving client costs at most this long; it never stops the server.
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_secs(2));
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(left.max(Duration::from_millis(1))));
                let _ = s.set_write_timeout(Some(left.max(Duration::from_millis(1))));
                if answer(&mut s, &secret, owner, pieces).unwrap_or(false) {
                    served += 1;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(fail("segment server accept", owner, u32::MAX, e)),
        }
    }
    Ok(served)
}

/// Answer one request; `Ok(true)` when the descriptor was sent.
fn answer(
    s: &mut UnixStream,
    secret: &[u8; 16],
    owner: u32,
    pieces: &[(OwnedFd, u64)],
) -> std::io::Result<bool> {
    let mut req = [0u8; REQUEST_BYTES];
    s.read_exact(&mut req)?;
    let u32_at = |o: usize| u32::from_le_bytes(req[o..o + 4].try_into().unwrap_or([0; 4]));
    let their: [u8; 16] = req[16..32].try_into().unwrap_or([0; 16]);
    let status = if u32_at(0) != MAGIC || !crate::bootstrap::handshake::secret_eq(&their, secret) {
        STATUS_BAD_SECRET
    } else if u32_at(4) != owner {
        STATUS_BAD_OWNER
    } else if u32_at(12) as usize >= pieces.len() {
        STATUS_BAD_PIECE
    } else {
        STATUS_OK
    };
    let (fd, bytes) = pieces
        .get(u32_at(12) as usize)
        .map_or((None, 0), |(fd, b)| (Some(fd), *b));
    let mut reply = [0u8; REPLY_BYTES];
    reply[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    reply[4..8].copy_from_slice(&status.to_le_bytes());
    reply[8..16].copy_from_slice(&bytes.to_le_bytes());
    let Some(fd) = fd.filter(|_| status == STATUS_OK) else {
        s.write_all(&reply)?;
        return Ok(false);
    };
    let fds = [fd.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let n = sendmsg(&*s, &[IoSlice::new(&reply)], &mut control, SendFlags::NOSIGNAL)?;
    Ok(n == REPLY_BYTES)
}

/// Fetch `owner`'s segment descriptor as rank `me`: the descriptor and the segment's size.
/// Retries the connection until `deadline` (the owner may not be listening yet).
pub fn fetch(secret: &[u8; 16], owner: u32, me: u32, deadline: Instant) -> Result<(OwnedFd, u64)> {
    fetch_piece(secret, owner, me, 0, deadline, None)
}

/// Fetch descriptor number `piece` of `owner`'s server as rank `me` (see [`fetch`]); gives
/// up when `abort` is raised.
pub fn fetch_piece(
    secret: &[u8; 16],
    owner: u32,
    me: u32,
    piece: u32,
    deadline: Instant,
    abort: Option<&AbortFlag>,
) -> Result<(OwnedFd, u64)> {
    const OP: &str = "segment fetch";
    let name = socket_name(secret, owner);
    let addr = SocketAddr::from_abstract_name(&name).map_err(|e| fail(OP, me, owner, e))?;
    let mut s = loop {
        match UnixStream::connect_addr(&addr) {
            Ok(s) => break s,
            Err(e) => {
                if abort.is_some_and(AbortFlag::is_raised) {
                    return Err(Error::Aborted { op: OP, rank: me });
                }
                if Instant::now() >= deadline {
                    return Err(fail(
                        OP,
                        me,
                        owner,
                        format!("could not reach the peer's segment server before the deadline ({e})"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(10));
    s.set_read_timeout(Some(left))
        .map_err(|e| fail(OP, me, owner, e))?;
    s.set_write_timeout(Some(left))
        .map_err(|e| fail(OP, me, owner, e))?;
    let mut req = [0u8; REQUEST_BYTES];
    req[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    req[4..8].copy_from_slice(&owner.to_le_bytes());
    req[8..12].copy_from_slice(&me.to_le_bytes());
    req[12..16].copy_from_slice(&piece.to_le_bytes());
    req[16..32].copy_from_slice(secret);
    s.write_all(&req).map_err(|e| fail(OP, me, owner, e))?;
    let mut reply = [0u8; REPLY_BYTES];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        &s,
        &mut [IoSliceMut::new(&mut reply)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| fail(OP, me, owner, e))?;
    let mut fd = None;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg {
            fd = fds.next();
        }
    }
    if got.bytes < REPLY_BYTES {
        // The rest of a short reply (rare: a 16-byte message arrives whole on a stream socket).
        s.read_exact(&mut reply[got.bytes..])
            .map_err(|e| fail(OP, me, owner, e))?;
    }
    let magic = u32::from_le_bytes(reply[0..4].try_into().unwrap_or([0; 4]));
    let status = u32::from_le_bytes(reply[4..8].try_into().unwrap_or([0; 4]));
    let bytes = u64::from_le_bytes(reply[8..16].try_into().unwrap_or([0; 8]));
    if magic != MAGIC {
        return Err(fail(
            OP,
            me,
            owner,
            "the peer's socket answered with a foreign protocol",
        ));
    }
    match (status, fd) {
        (STATUS_OK, Some(fd)) => Ok((fd, bytes)),
        (STATUS_OK, None) => Err(fail(OP, me, owner, "the reply carried no file descriptor")),
        (STATUS_BAD_SECRET, _) => Err(fail(OP, me, owner, "the peer refused our secret (another job?)")),
        (STATUS_BAD_OWNER, _) => Err(fail(OP, me, owner, "the socket belongs to another rank")),
        (STATUS_BAD_PIECE, _) => Err(fail(OP, me, owner, format!("the peer serves no piece {piece}"))),
        (s, _) => Err(fail(OP, me, owner, format!("refused with status {s}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn memfd_with(bytes: &[u8]) -> OwnedFd {
        let fd = rustix::fs::memfd_create("oxccl-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::io::write(&fd, bytes).unwrap();
        fd
    }

    #[test]
    fn passes_a_descriptor_and_refuses_a_foreign_secret() {
        let secret: [u8; 16] = rand::random();
        let fd = memfd_with(b"hello segment");
        let deadline = Instant::now() + Duration::from_secs(10);
        let server = FdServer::start(secret, 7, fd, 13, 2, deadline).unwrap();
        // A stray client with another secret is refused and does not count.
        let mut other = secret;
        other[15] ^= 1;
        let e = fetch(&other, 7, 1, deadline).unwrap_err().to_string();
        assert!(e.contains("refused our secret"), "{e}");
        for me in [1, 2] {
            let (got, bytes) = fetch(&secret, 7, me, deadline).unwrap();
            assert_eq!(bytes, 13);
            let mut buf = [0u8; 13];
            rustix::io::pread(&got, &mut buf, 0).unwrap();
            assert_eq!(&buf, b"hello segment");
            assert!(got.as_raw_fd() >= 0);
        }
        assert_eq!(server.finish().unwrap(), 2);
    }

    #[test]
    fn serves_pieces_by_index_and_refuses_a_missing_one() {
        let secret: [u8; 16] = rand::random();
        let pieces = vec![(memfd_with(b"first"), 5), (memfd_with(b"second!"), 7)];
        let deadline = Instant::now() + Duration::from_secs(10);
        let abort = AbortFlag::new();
        let server = FdServer::start_pieces(secret, 4, pieces, 2, deadline, Some(abort.clone())).unwrap();
        let e = fetch_piece(&secret, 4, 0, 2, deadline, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no piece 2"), "{e}");
        let (b, n) = fetch_piece(&secret, 4, 0, 1, deadline, Some(&abort)).unwrap();
        assert_eq!(n, 7);
        let mut buf = [0u8; 7];
        rustix::io::pread(&b, &mut buf, 0).unwrap();
        assert_eq!(&buf, b"second!");
        let (a, n) = fetch_piece(&secret, 4, 0, 0, deadline, None).unwrap();
        assert_eq!(n, 5);
        assert!(a.as_raw_fd() >= 0);
        assert_eq!(server.finish().unwrap(), 2);
        // An aborted fetch gives up before its deadline.
        abort.raise();
        let t = Instant::now();
        let e = fetch_piece(
            &secret,
            9,
            0,
            0,
            Instant::now() + Duration::from_secs(30),
            Some(&abort),
        );
        assert!(matches!(e, Err(Error::Aborted { .. })) && t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn fetch_without_server_times_out_naming_the_owner() {
        let secret: [u8; 16] = rand::random();
        let e = fetch(&secret, 3, 0, Instant::now() + Duration::from_millis(50))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 0 (peer 3)"), "{e}");
    }
}
