//! Payload codecs for the `Join`, `Table`, `Reject` and `Abort` frames (layouts in the table
//! of [`super::wire`]). Decoders check every length against the payload before allocating.

use std::net::SocketAddr;

use super::error::RejectReason;
use super::wire::{decode_addr, encode_addr, u32_at, WireError, ADDR_LEN, MAX_DETAIL};

/// One rank's entry in the table: its listening address and peer-info blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerEntry {
    pub addr: SocketAddr,
    pub blob: Vec<u8>,
}

/// `Join` payload.
pub fn encode_join(entry: &PeerEntry) -> Vec<u8> {
    let mut p = encode_addr(entry.addr).to_vec();
    p.extend_from_slice(&entry.blob);
    p
}

pub fn decode_join(p: &[u8]) -> Result<PeerEntry, WireError> {
    if p.len() < ADDR_LEN {
        return Err(WireError::Malformed {
            what: "join",
            len: p.len(),
        });
    }
    Ok(PeerEntry {
        addr: decode_addr(&p[..ADDR_LEN])?,
        blob: p[ADDR_LEN..].to_vec(),
    })
}

/// `Table` payload.
pub fn encode_table(entries: &[PeerEntry]) -> Vec<u8> {
    let mut p = (entries.len() as u32).to_le_bytes().to_vec();
    for e in entries {
        p.extend_from_slice(&encode_addr(e.addr));
        p.extend_from_slice(&(e.blob.len() as u32).to_le_bytes());
        p.extend_from_slice(&e.blob);
    }
    p
}

pub fn decode_table(p: &[u8]) -> Result<Vec<PeerEntry>, WireError> {
    let bad = WireError::Malformed {
        what: "table",
        len: p.len(),
    };
    if p.len() < 4 {
        return Err(bad);
    }
    let n = u32_at(p, 0) as usize;
    // Each entry takes at least ADDR_LEN + 4 bytes: bound the allocation by the payload.
    if n > (p.len() - 4) / (ADDR_LEN + 4) {
        return Err(bad);
    }
    let mut out = Vec::with_capacity(n);
    let mut at = 4;
    for _ in 0..n {
        if p.len() < at + ADDR_LEN + 4 {
            return Err(bad);
        }
        let addr = decode_addr(&p[at..at + ADDR_LEN])?;
        let len = u32_at(p, at + ADDR_LEN) as usize;
        at += ADDR_LEN + 4;
        if p.len() - at < len {
            return Err(bad);
        }
        out.push(PeerEntry {
            addr,
            blob: p[at..at + len].to_vec(),
        });
        at += len;
    }
    if at != p.len() {
        return Err(bad);
    }
    Ok(out)
}

/// `Reject` payload.
pub fn encode_reject(r: &RejectReason) -> Vec<u8> {
    let (code, args, detail): (u32, [u32; 4], &str) = match r {
        RejectReason::BadSecret => (1, [0; 4], ""),
        RejectReason::BadVersion { magic, version } => (2, [*magic, *version as u32, 0, 0], ""),
        RejectReason::RankOutOfRange { rank, nranks } => (3, [*rank, *nranks, 0, 0], ""),
        RejectReason::DuplicateRank { rank } => (4, [*rank, 0, 0, 0], ""),
        RejectReason::NranksMismatch {
            rank,
            nranks,
            first_rank,
            first_nranks,
        } => (5, [*rank, *nranks, *first_rank, *first_nranks], ""),
        RejectReason::Protocol { detail } => (6, [0; 4], detail.as_str()),
    };
    let mut p = code.to_le_bytes().to_vec();
    for a in args {
        p.extend_from_slice(&a.to_le_bytes());
    }
    let mut end = detail.len().min(MAX_DETAIL);
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    p.extend_from_slice(&detail.as_bytes()[..end]);
    p
}

pub fn decode_reject(p: &[u8]) -> Result<RejectReason, WireError> {
    let bad = WireError::Malformed {
        what: "reject",
        len: p.len(),
    };
    if p.len() < 20 || p.len() > 20 + MAX_DETAIL {
        return Err(bad);
    }
    let a = |i: usize| u32_at(p, 4 + 4 * i);
    Ok(match u32_at(p, 0) {
        1 => RejectReason::BadSecret,
        2 => RejectReason::BadVersion {
            magic: a(0),
            version: a(1) as u16,
        },
        3 => RejectReason::RankOutOfRange {
            rank: a(0),
            nranks: a(1),
        },
        4 => RejectReason::DuplicateRank { rank: a(0) },
        5 => RejectReason::NranksMismatch {
            rank: a(0),
            nranks: a(1),
            first_rank: a(2),
            first_nranks: a(3),
        },
        6 => RejectReason::Protocol {
            detail: String::from_utf8_lossy(&p[20..]).into_owned(),
        },
        _ => return Err(bad),
    })
}

/// `Abort` payload: the root's list of ranks that never joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Abort {
    pub nranks: u32,
    pub timeout_ms: u64,
    pub missing: Vec<u32>,
}

pub fn encode_abort(a: &Abort) -> Vec<u8> {
    let mut p = a.nranks.to_le_bytes().to_vec();
    p.extend_from_slice(&a.timeout_ms.to_le_bytes());
    p.extend_from_slice(&(a.missing.len() as u32).to_le_bytes());
    for r in &a.missing {
        p.extend_from_slice(&r.to_le_bytes());
    }
    p
}

pub fn decode_abort(p: &[u8]) -> Result<Abort, WireError> {
    let bad = WireError::Malformed {
        what: "abort",
        len: p.len(),
    };
    if p.len() < 16 {
        return Err(bad);
    }
    let count = u32_at(p, 12) as usize;
    if p.len() != 16 + 4 * count {
        return Err(bad);
    }
    Ok(Abort {
        nranks: u32_at(p, 0),
        timeout_ms: u64::from_le_bytes(p[4..12].try_into().unwrap()),
        missing: (0..count).map(|i| u32_at(p, 16 + 4 * i)).collect(),
    })
}
