//! The registration protocol of a window (steps 1–4 of the module doc of `super`).

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oxccl_device::api::abi::device_api_header;

use super::layout::{self, Flat, PieceInfo, RankInfo};
use super::mapping::Mapping;
use super::registry::{self, Part};
use super::{Segment, WinInner, Window, WindowDesc, WIN_COLL_SYMMETRIC, WIN_STRICT_ORDERING};
use crate::backend::{Backend, PhysHandle};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::transport::fdpass::{fetch_piece, FdServer};

/// This rank's side of a registration, before the exchange.
struct Prepared {
    info: RankInfo,
    /// One per piece, in order.
    parts: Vec<Part>,
    segments: Vec<Segment>,
    /// Exported descriptors of the pieces and the bytes each must hold (communicators that
    /// may span processes only).
    exports: Vec<(OwnedFd, u64)>,
}

/// The socket secret of registration `seq`: the job's secret with its name part changed,
/// so that every registration has its own server names.
fn window_secret(secret: [u8; 16], seq: u64) -> [u8; 16] {
    const TAG: u64 = 0x4f58_5749_4e00_0000; // "OXWIN"
    let mut s = secret;
    for (b, k) in s.iter_mut().zip((TAG ^ seq).to_le_bytes()) {
        *b ^= k;
    }
    s
}

fn prepare(
    backend: &dyn Backend,
    device: usize,
    op: &'static str,
    rank: u32,
    segs: &[(u64, usize)],
    flags: u32,
    export: bool,
) -> Result<Prepared> {
    let invalid = |what: String| Error::InvalidArgument { op, rank, what };
    if flags & !(WIN_COLL_SYMMETRIC | WIN_STRICT_ORDERING) != 0 {
        return Err(invalid(format!("unknown window flags {flags:#x}")));
    }
    if segs.is_empty() {
        return Err(invalid("no segments".into()));
    }
    let mut parts = Vec::new();
    for &(addr, bytes) in segs {
        match registry::resolve(backend, device, op, rank, addr, bytes) {
            Ok(p) => parts.extend(p),
            Err(e) => {
                registry::release(backend, device, parts);
                return Err(e);
            }
        }
    }
    let laid = (|| {
        let g = backend.win_granularity(device)? as u64;
        let whole = backend.win_whole_allocations();
        let mut pieces = Vec::with_capacity(parts.len());
        let mut segments = Vec::with_capacity(parts.len());
        let (mut at, mut lead) = (0u64, 0u64);
        for (i, p) in parts.iter().enumerate() {
            let off = p.offset() as u64;
            let (phys_offset, map_len) = if whole {
                (0, p.block_bytes as u64)
            } else {
                let lo = off / g * g;
                (lo, (off + p.len as u64).div_ceil(g) * g - lo)
            };
            let d = off - phys_offset;
            if i == 0 {
                lead = d;
            }
            segments.push(Segment {
                addr: p.addr,
                len: p.len,
                offset: at + d - lead,
            });
            pieces.push(PieceInfo {
                phys_offset,
                map_len,
                block: p.block,
            });
            at += map_len;
        }
        let size = segments.last().map_or(0, |s| s.offset + s.len as u64);
        let mut exports = Vec::new();
        if export {
            for (p, piece) in parts.iter().zip(&pieces) {
                exports.push((
                    backend.win_export(device, &p.phys)?,
                    piece.phys_offset + piece.map_len,
                ));
            }
        }
        Ok((
            RankInfo {
                process: crate::comm::process_token(),
                size,
                lead,
                granularity: g,
                flags,
                pieces,
            },
            segments,
            exports,
        ))
    })();
    match laid {
        Ok((info, segments, exports)) => Ok(Prepared {
            info,
            parts,
            segments,
            exports,
        }),
        Err(e) => {
            registry::release(backend, device, parts);
            Err(e)
        }
    }
}

/// Map every rank's pieces into a fresh flat range (step 3).
#[allow(clippy::too_many_arguments)]
fn map_all(
    comm: &Comm,
    op: &'static str,
    infos: &[RankInfo],
    flat: &Flat,
    own: &mut Vec<PhysHandle>,
    secret: Option<[u8; 16]>,
    deadline: Instant,
) -> Result<Mapping> {
    let (rank, device) = (comm.rank(), comm.device());
    let backend = comm.backend();
    let n = infos.len() as u64;
    let g = infos[rank as usize].granularity as usize;
    let total = flat
        .stride
        .checked_mul(n)
        .filter(|&t| t <= isize::MAX as u64)
        .ok_or_else(|| Error::Window {
            op,
            rank,
            peer: u32::MAX,
            what: format!(
                "a flat range of {n} x {} bytes does not fit the address space",
                flat.stride
            ),
        })?;
    let mut m = Mapping::reserve(backend.clone(), device, total as usize, g)?;
    own.reverse();
    let me = &infos[rank as usize];
    for (q, info) in infos.iter().enumerate() {
        let q32 = q as u32;
        for (j, p) in info.pieces.iter().enumerate() {
            let need = p.phys_offset + p.map_len;
            let phys = if q32 == rank {
                own.pop().ok_or_else(|| Error::Window {
                    op,
                    rank,
                    peer: q32,
                    what: "fewer references than pieces".into(),
                })?
            } else if info.process == me.process {
                registry::retain_block(&**backend, p.block, need).ok_or_else(|| Error::Window {
                    op,
                    rank,
                    peer: q32,
                    what: format!(
                        "its block at {:#x} ({need} bytes needed) is not live window memory in this process",
                        p.block
                    ),
                })?
            } else {
                let secret = secret.ok_or_else(|| Error::Window {
                    op,
                    rank,
                    peer: q32,
                    what: "the peer lives in another process but this communicator has no job secret".into(),
                })?;
                let (fd, bytes) = fetch_piece(
                    &secret,
                    q32,
                    rank,
                    j as u32,
                    deadline,
                    Some(comm.host_abort_flag()),
                )
                .map_err(|e| match e {
                    Error::Aborted { .. } => Error::Aborted { op, rank },
                    e => e,
                })?;
                if bytes != need {
                    return Err(Error::Window {
                        op,
                        rank,
                        peer: q32,
                        what: format!("served piece {j} of {bytes} bytes, published {need}"),
                    });
                }
                backend
                    .win_import(device, fd, need as usize)
                    .map_err(|e| Error::Window {
                        op,
                        rank,
                        peer: q32,
                        what: format!("importing its piece {j}: {e}"),
                    })?
            };
            let at = q as u64 * flat.stride + flat.piece_at[q][j];
            m.map(at, phys, p.phys_offset as usize, p.map_len as usize)
                .map_err(|e| Error::Window {
                    op,
                    rank,
                    peer: q32,
                    what: format!("mapping its piece {j}: {e}"),
                })?;
        }
    }
    Ok(m)
}

pub(super) fn register(comm: &Comm, op: &'static str, segs: &[(u64, usize)], flags: u32) -> Result<Window> {
    comm.check_live(op)?;
    let (rank, n, device) = (comm.rank(), comm.count(), comm.device());
    let backend = comm.backend().clone();
    let seq = comm.windows().next_seq();
    let _span = tracing::debug_span!(target: "oxccl::window", "register_window", rank, seq).entered();
    let secret = comm.job_secret().map(|s| window_secret(s, seq));
    let prep = prepare(&*backend, device, op, rank, segs, flags, secret.is_some());
    let blob = match &prep {
        Ok(p) => p.info.to_bytes(),
        Err(e) => layout::failure_blob(&e.to_string()),
    };
    let gathered = comm.host_all_gather(op, &blob);
    let prep = match (prep, gathered) {
        (Ok(p), Ok(all)) => (p, all),
        (Ok(p), Err(e)) => {
            registry::release(&*backend, device, p.parts);
            return Err(e);
        }
        (Err(e), _) => return Err(e),
    };
    let (
        Prepared {
            info: _,
            parts,
            segments,
            exports,
        },
        all,
    ) = prep;
    let deadline = Instant::now()
        .checked_add(comm.host_timeout())
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(30 * 24 * 3600));
    let laid = (|| {
        let mut infos = Vec::with_capacity(n as usize);
        for (q, b) in all.iter().enumerate() {
            infos.push(layout::parse(b).map_err(|what| Error::Window {
                op,
                rank,
                peer: q as u32,
                what: format!("rank {q} {what}"),
            })?);
        }
        let flat = layout::flat(&infos).map_err(|(peer, what)| Error::Window { op, rank, peer, what })?;
        Ok((infos, flat))
    })();
    let (infos, flat) = match laid {
        Ok(l) => l,
        Err(e) => {
            registry::release(&*backend, device, parts);
            return Err(e);
        }
    };
    let me = infos[rank as usize].process;
    let remote = infos.iter().filter(|i| i.process != me).count();
    let npieces = parts.len();
    // Serve this rank's pieces to the ranks in other processes until the outcome exchange
    // (after which every fetch is done); dropping the server stops it.
    let server = match secret {
        Some(s) if remote > 0 => Some(FdServer::start_pieces(
            s,
            rank,
            exports,
            remote * npieces,
            deadline,
            Some(comm.host_abort_flag().clone()),
        )),
        _ => None,
    };
    let mut own: Vec<PhysHandle> = parts.into_iter().map(|p| p.phys).collect();
    let (server, mapped) = match server {
        Some(Err(e)) => (None, Err(e)),
        s => (s, map_all(comm, op, &infos, &flat, &mut own, secret, deadline)),
    };
    for h in own {
        // SAFETY: retained for this registration and never mapped (a failed mapping).
        unsafe { backend.win_release(device, h) };
    }
    // Step 4: the window exists everywhere or nowhere.
    let status = match &mapped {
        Ok(_) => vec![0u8],
        Err(e) => [&[1u8][..], e.to_string().as_bytes()].concat(),
    };
    let outcome = comm.host_all_gather(op, &status);
    drop(server);
    let mapping = mapped?;
    let outcome = outcome?;
    if let Some((q, b)) = outcome
        .iter()
        .enumerate()
        .find(|(q, b)| *q != rank as usize && b.first() != Some(&0))
    {
        return Err(Error::Window {
            op,
            rank,
            peer: q as u32,
            what: format!(
                "rank {q} could not map the window: {}",
                String::from_utf8_lossy(b.get(1..).unwrap_or_default())
            ),
        });
    }
    let desc = WindowDesc {
        header: device_api_header::<WindowDesc>(),
        local: mapping.base + rank as u64 * flat.stride + flat.byte0,
        stride: flat.stride,
        size: infos[rank as usize].size,
        rank,
        nranks: n,
        flags,
        serial: (seq as u32).wrapping_add(1).max(1),
    };
    let inner = Arc::new(WinInner {
        comm_id: comm.windows().id,
        world_rank: rank,
        desc,
        sizes: infos.iter().map(|i| i.size).collect(),
        segments,
        mapping: Mutex::new(Some(mapping)),
    });
    comm.windows().add(&inner);
    tracing::debug!(target: "oxccl::window", rank, local = desc.local, stride = desc.stride, size = desc.size, "window registered");
    Ok(Window { inner })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_get_distinct_names_and_keep_the_secret_part() {
        let s: [u8; 16] = [7; 16];
        let (a, b) = (window_secret(s, 0), window_secret(s, 1));
        assert_ne!(a[..8], b[..8]);
        assert_ne!(a[..8], s[..8]);
        assert_eq!(a[8..], s[8..]);
    }
}
