//! The bootstrap wire format: frames, the messages they carry, and a sans-IO frame decoder.
//!
//! Every integer is little-endian. Every connection carries a sequence of frames:
//!
//! ```text
//!  byte 0        4        6        8                16
//!       +--------+--------+--------+----------------+------------------------+
//!       | len u32| kind u16| flags | tag u64        | payload (len bytes)    |
//!       +--------+--------+--------+----------------+------------------------+
//! ```
//!
//! `flags` must be 0. `len` is checked against the decoder's cap *before* anything is buffered
//! past the header, so a stray connection cannot make a listener allocate: before a connection
//! authenticated, the cap is [`AUTH_LEN`] bytes; after, [`MAX_PAYLOAD`].
//!
//! | kind | name   | direction          | payload                                              |
//! |------|--------|--------------------|------------------------------------------------------|
//! | 1    | Auth   | connector → listener | [`Auth`], 32 bytes                                  |
//! | 2    | Join   | rank → root        | listen address (24 bytes, [`encode_addr`]) then the peer-info blob |
//! | 3    | Table  | root → rank        | nranks u32, then per rank: address (24), blob len u32, blob |
//! | 4    | Reject | listener → connector | code u32, four u32 arguments, UTF-8 detail (≤ 1 KiB) |
//! | 5    | Abort  | root → joined ranks | nranks u32, timeout ms u64, count u32, count × missing rank u32 |
//! | 6    | Accept | rank → rank (listener side) | empty                                      |
//! | 7    | Data   | rank → rank        | user message; `tag` is the user's tag                |
//! | 8    | Coll   | rank → rank        | all_gather / barrier step; `tag` is the collective's sequence number |
//!
//! `Auth` layout (32 bytes):
//!
//! ```text
//!  0 magic u32 = MAGIC | 4 version u16 | 6 role u8 (1 root, 2 peer) | 7 zero u8
//!  8 secret [u8; 16]   | 24 rank u32   | 28 nranks u32
//! ```
//!
//! Address layout (24 bytes): `0 family u8 (4 or 6) | 1 zero | 2 port u16 | 4 scope id u32 |
//! 8 ip [u8; 16]` (IPv4 in the first 4 bytes).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

pub use super::messages::*;

/// Protocol magic ("OXBS").
pub const MAGIC: u32 = u32::from_le_bytes(*b"OXBS");
/// Protocol version; bumped on any layout change.
pub const VERSION: u16 = 1;
/// Frame header size.
pub const HEADER_LEN: usize = 16;
/// `Auth` payload size, also the frame cap before authentication.
pub const AUTH_LEN: usize = 32;
/// Encoded socket address size.
pub const ADDR_LEN: usize = 24;
/// Largest payload accepted from an authenticated peer (a table of all ranks' blobs).
pub const MAX_PAYLOAD: usize = 1 << 30;
/// Largest `Reject` detail string.
pub const MAX_DETAIL: usize = 1024;

const _: () = assert!(HEADER_LEN == 4 + 2 + 2 + 8);
const _: () = assert!(AUTH_LEN == 4 + 2 + 1 + 1 + 16 + 4 + 4);
const _: () = assert!(ADDR_LEN == 1 + 1 + 2 + 4 + 16);

/// Frame kinds (see the table above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    Auth = 1,
    Join = 2,
    Table = 3,
    Reject = 4,
    Abort = 5,
    Accept = 6,
    Data = 7,
    Coll = 8,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Kind> {
        Some(match v {
            1 => Kind::Auth,
            2 => Kind::Join,
            3 => Kind::Table,
            4 => Kind::Reject,
            5 => Kind::Abort,
            6 => Kind::Accept,
            7 => Kind::Data,
            8 => Kind::Coll,
            _ => return None,
        })
    }
}

/// A decoding failure: the bytes are not this protocol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u16),
    #[error("nonzero frame flags {0:#06x}")]
    Flags(u16),
    #[error("frame of {len} bytes exceeds the cap of {cap} bytes")]
    TooLarge { len: usize, cap: usize },
    #[error("{what}: payload of {len} bytes is malformed")]
    Malformed { what: &'static str, len: usize },
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    pub tag: u64,
    pub payload: Vec<u8>,
}

/// Encodes one frame.
pub fn encode_frame(kind: Kind, tag: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&(kind as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Sans-IO frame decoder: feed bytes with [`FrameDecoder::push`], take frames with
/// [`FrameDecoder::next_frame`]. Buffers at most one header plus `cap` payload bytes beyond what
/// the caller pushed in a single call.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    cap: usize,
}

impl FrameDecoder {
    /// A decoder that rejects payloads larger than `cap`.
    pub fn new(cap: usize) -> Self {
        Self { buf: Vec::new(), cap }
    }

    /// Changes the cap (raised once a connection authenticated).
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Appends bytes read from the connection. Fails early when the pending header is invalid.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        self.buf.extend_from_slice(bytes);
        self.check_header().map(|_| ())
    }

    fn check_header(&self) -> Result<Option<(Kind, usize, u64)>, WireError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let h = &self.buf[..HEADER_LEN];
        let len = u32::from_le_bytes(h[0..4].try_into().unwrap()) as usize;
        let kind = u16::from_le_bytes(h[4..6].try_into().unwrap());
        let flags = u16::from_le_bytes(h[6..8].try_into().unwrap());
        let tag = u64::from_le_bytes(h[8..16].try_into().unwrap());
        let kind = Kind::from_u16(kind).ok_or(WireError::UnknownKind(kind))?;
        if flags != 0 {
            return Err(WireError::Flags(flags));
        }
        if len > self.cap {
            return Err(WireError::TooLarge { len, cap: self.cap });
        }
        Ok(Some((kind, len, tag)))
    }

    /// The next complete frame, if one is buffered.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        let Some((kind, len, tag)) = self.check_header()? else {
            return Ok(None);
        };
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.buf.drain(..HEADER_LEN + len);
        Ok(Some(Frame { kind, tag, payload }))
    }
}

/// Which listener an `Auth` is meant for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    Root = 1,
    Peer = 2,
}

/// The first frame on every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Auth {
    pub magic: u32,
    pub version: u16,
    pub role: u8,
    pub secret: [u8; 16],
    pub rank: u32,
    pub nranks: u32,
}

impl Auth {
    pub fn new(role: Role, secret: [u8; 16], rank: u32, nranks: u32) -> Self {
        Self {
            magic: MAGIC,
            version: VERSION,
            role: role as u8,
            secret,
            rank,
            nranks,
        }
    }

    pub fn encode(&self) -> [u8; AUTH_LEN] {
        let mut b = [0u8; AUTH_LEN];
        b[0..4].copy_from_slice(&self.magic.to_le_bytes());
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6] = self.role;
        b[8..24].copy_from_slice(&self.secret);
        b[24..28].copy_from_slice(&self.rank.to_le_bytes());
        b[28..32].copy_from_slice(&self.nranks.to_le_bytes());
        b
    }

    pub fn decode(p: &[u8]) -> Result<Self, WireError> {
        if p.len() != AUTH_LEN {
            return Err(WireError::Malformed {
                what: "auth",
                len: p.len(),
            });
        }
        Ok(Self {
            magic: u32_at(p, 0),
            version: u16::from_le_bytes([p[4], p[5]]),
            role: p[6],
            secret: p[8..24].try_into().unwrap(),
            rank: u32_at(p, 24),
            nranks: u32_at(p, 28),
        })
    }
}

pub(crate) fn u32_at(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
}

/// Encodes a socket address in [`ADDR_LEN`] bytes.
pub fn encode_addr(addr: SocketAddr) -> [u8; ADDR_LEN] {
    let mut b = [0u8; ADDR_LEN];
    b[2..4].copy_from_slice(&addr.port().to_le_bytes());
    match addr {
        SocketAddr::V4(a) => {
            b[0] = 4;
            b[8..12].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            b[0] = 6;
            b[4..8].copy_from_slice(&a.scope_id().to_le_bytes());
            b[8..24].copy_from_slice(&a.ip().octets());
        }
    }
    b
}

/// Decodes an address written by [`encode_addr`].
pub fn decode_addr(b: &[u8]) -> Result<SocketAddr, WireError> {
    let bad = WireError::Malformed {
        what: "address",
        len: b.len(),
    };
    if b.len() != ADDR_LEN || b[1] != 0 {
        return Err(bad);
    }
    let port = u16::from_le_bytes([b[2], b[3]]);
    match b[0] {
        4 => {
            let ip = Ipv4Addr::from(<[u8; 4]>::try_from(&b[8..12]).unwrap());
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        6 => {
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).unwrap());
            Ok(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, u32_at(b, 4))))
        }
        _ => Err(bad),
    }
}
