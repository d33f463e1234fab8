//! A rank's segment, on communicators whose ranks live in several processes: the memory its
//! peers map (see [`crate::transport`]).
//!
//! ```text
//! [0, inbox_bytes(n))           the inbox (barrier lines, p2p mailboxes, LL lines)
//! [send, send + half)           staging input  S   (crate::coll::staged)
//! [recv, recv + half)           staging output R
//! ```
//!
//! # Connection (inside `Comm::init_rank`, after the bootstrap all-gather)
//! 1. Every rank allocates its segment (`Backend::alloc_shared`) and starts an
//!    [`FdServer`] for it, expecting one request from each rank in another process.
//! 2. A bootstrap all-gather publishes every segment's base address (in its owner's address
//!    space) and size. No rank can finish it before every server is listening.
//! 3. Each rank fetches the descriptors of the ranks in other processes and maps them
//!    (`Backend::import_shared`); ranks of its own process are addressed directly.
//! 4. The address table holds, per rank, its inbox as addressable here and the delta from
//!    the owner's addresses to this rank's mapping (see `oxccl_device::prims::layout`).
//! 5. The caller's bootstrap barrier ends the connection: every peer fetched and mapped.

use std::time::Instant;

use oxccl_device::prims::layout::inbox_bytes;

use crate::backend::{Backend, SharedMem};
use crate::bootstrap::Bootstrap;
use crate::coll::Staging;
use crate::error::{Error, Result};
use crate::transport::fdpass::{fetch, FdServer};

/// Offsets inside a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegLayout {
    pub send: usize,
    pub recv: usize,
    pub half: usize,
    pub total: usize,
}

impl SegLayout {
    /// The layout for `nranks` ranks, an LL capacity of `ll_max` bytes and staging halves of
    /// `half` bytes (rounded up to 4 KiB).
    pub fn new(nranks: u32, ll_max: usize, half: usize) -> Self {
        let half = half.div_ceil(4096) * 4096;
        let send = inbox_bytes(nranks, ll_max).div_ceil(4096) * 4096;
        SegLayout {
            send,
            recv: send + half,
            half,
            total: send + 2 * half,
        }
    }
}

/// What a connected rank holds.
pub(crate) struct Connected {
    /// This rank's segment (its inbox at offset 0).
    pub seg: SharedMem,
    /// Peers' segments mapped here (ranks in other processes).
    pub imports: Vec<SharedMem>,
    pub staging: Staging,
    /// The address table (`2 * nranks` u64: inboxes here, then deltas).
    pub table: Vec<u64>,
}

/// Steps 1–4 of the connection for `rank` on `device`; `process[q]` names rank `q`'s
/// process (equal values: the same process).
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect(
    backend: &dyn Backend,
    boot: &Bootstrap,
    secret: [u8; 16],
    rank: u32,
    device: usize,
    process: &[u64],
    ll_max: usize,
    half: usize,
    deadline: Instant,
) -> Result<Connected> {
    let n = process.len() as u32;
    let me = rank as usize;
    let layout = SegLayout::new(n, ll_max, half);
    let seg = backend.alloc_shared(device, layout.total)?;
    let result = (|| {
        let fd = seg
            .fd
            .as_ref()
            .ok_or_else(|| Error::Init("a fresh segment has no descriptor".into()))?
            .try_clone()
            .map_err(|e| transport_err(rank, u32::MAX, "dup of the segment descriptor", e))?;
        let remote: Vec<u32> = (0..n).filter(|&q| process[q as usize] != process[me]).collect();
        let server = FdServer::start(secret, rank, fd, seg.bytes as u64, remote.len(), deadline)?;
        let mut blob = [0u8; 16];
        blob[..8].copy_from_slice(&seg.dev.to_le_bytes());
        blob[8..].copy_from_slice(&(seg.bytes as u64).to_le_bytes());
        let all = boot
            .all_gather(&blob)
            .map_err(|source| Error::Bootstrap { rank, source })?;
        let mut bases = Vec::with_capacity(n as usize);
        for (q, b) in all.iter().enumerate() {
            if b.len() != 16 {
                return Err(transport_err(
                    rank,
                    q as u32,
                    "segment exchange",
                    format!("{} bytes published", b.len()),
                ));
            }
            let base = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
            let bytes = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
            if bytes < layout.total as u64 {
                return Err(transport_err(
                    rank,
                    q as u32,
                    "segment exchange",
                    format!(
                        "its segment holds {bytes} bytes, this rank needs {} (OXCCL_STAGING_BYTES or OXCCL_LL_MAX_BYTES differs between ranks?)",
                        layout.total
                    ),
                ));
            }
            bases.push((base, bytes));
        }
        let mut imports: Vec<SharedMem> = Vec::with_capacity(remote.len());
        let mut here = bases.iter().map(|b| b.0).collect::<Vec<u64>>();
        let mut deltas = vec![0u64; n as usize];
        let mapped = (|| {
            for &q in &remote {
                let (fd, bytes) = fetch(&secret, q, rank, deadline)?;
                if bytes != bases[q as usize].1 {
                    return Err(transport_err(
                        rank,
                        q,
                        "segment fetch",
                        "the served size differs from the published one",
                    ));
                }
                let m = backend.import_shared(device, &fd, bytes as usize)?;
                here[q as usize] = m.dev;
                deltas[q as usize] = m.dev.wrapping_sub(bases[q as usize].0);
                imports.push(m);
            }
            Ok(())
        })();
        let served = mapped.and_then(|()| server.finish());
        if let Err(e) = served {
            for m in imports {
                // SAFETY: mapped just now, never used.
                unsafe { backend.free_shared(m) };
            }
            return Err(e);
        }
        Ok((imports, here.into_iter().chain(deltas).collect::<Vec<u64>>()))
    })();
    match result {
        Ok((imports, table)) => Ok(Connected {
            staging: Staging {
                send: seg.dev + layout.send as u64,
                recv: seg.dev + layout.recv as u64,
                half: layout.half,
            },
            seg,
            imports,
            table,
        }),
        Err(e) => {
            // SAFETY: nothing used the segment yet.
            unsafe { backend.free_shared(seg) };
            Err(e)
        }
    }
}

fn transport_err(rank: u32, peer: u32, op: &'static str, what: impl std::fmt::Display) -> Error {
    Error::Transport {
        op,
        rank,
        peer,
        what: what.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_keeps_regions_apart_and_aligned() {
        for n in [1, 2, 3, 8, 64] {
            let l = SegLayout::new(n, 65536, 5000);
            assert!(l.send >= inbox_bytes(n, 65536));
            assert_eq!(l.half, 8192);
            assert_eq!(l.send % 4096, 0);
            assert_eq!(l.recv, l.send + l.half);
            assert_eq!(l.total, l.recv + l.half);
        }
    }
}
