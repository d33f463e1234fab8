//! `Comm::init_rank`: one rank per call (one thread or process per rank, like
//! `ncclCommInitRank`), the ranks meeting through the TCP bootstrap ([`crate::bootstrap`]).
//!
//! Each rank allocates its own inbox, error record and abort flag, publishes where its inbox
//! is (and which process, backend and device it is on) in the bootstrap all-gather, and
//! builds its table of peer inboxes from what the others published. Peers must be able to
//! load and store each other's memory: today that means every rank of the communicator is
//! in this process (the cross-process transports, CUDA VMM handles passed as file
//! descriptors and host shared memory, are not implemented yet). Peers that cannot be
//! reached are reported with their ranks, never guessed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

use oxccl_device::abi::ErrorRecord;
use oxccl_device::prims::barrier::inbox_bytes;

use super::{Comm, Config, Group, RankRes, OPS_REMEMBERED};
use crate::backend::{self, Backend, BackendKind};
use crate::bootstrap::{self, Bootstrap, UniqueId};
use crate::error::{Error, Result};

/// What each rank publishes at init: 24 bytes, little-endian
/// `{process token: u64, inbox address: u64, device: u32, backend: u8, pad: [u8; 3]}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PeerInfo {
    process: u64,
    inbox: u64,
    device: u32,
    backend: u8,
}

const PEER_INFO_BYTES: usize = 24;

impl PeerInfo {
    fn to_bytes(self) -> [u8; PEER_INFO_BYTES] {
        let mut b = [0u8; PEER_INFO_BYTES];
        b[0..8].copy_from_slice(&self.process.to_le_bytes());
        b[8..16].copy_from_slice(&self.inbox.to_le_bytes());
        b[16..20].copy_from_slice(&self.device.to_le_bytes());
        b[20] = self.backend;
        b
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != PEER_INFO_BYTES {
            return None;
        }
        Some(PeerInfo {
            process: u64::from_le_bytes(b[0..8].try_into().ok()?),
            inbox: u64::from_le_bytes(b[8..16].try_into().ok()?),
            device: u32::from_le_bytes(b[16..20].try_into().ok()?),
            backend: b[20],
        })
    }
}

/// A random token naming this process (pids can repeat across containers).
fn process_token() -> u64 {
    static TOKEN: OnceLock<u64> = OnceLock::new();
    *TOKEN.get_or_init(rand::random)
}

fn backend_code(k: BackendKind) -> u8 {
    match k {
        BackendKind::Gpu => 1,
        BackendKind::Cpu => 2,
    }
}

impl Comm {
    /// Rank `rank` of an `nranks`-rank communicator, on `device` of the backend chosen by
    /// [`backend::auto`]; every rank calls it with the same `id` (made by
    /// [`UniqueId::new`] and shipped to the ranks out of band). Bootstrap settings come from
    /// the environment (`OXCCL_BOOTSTRAP_TIMEOUT_MS`, `NCCL_SOCKET_IFNAME`).
    pub fn init_rank(nranks: u32, id: &UniqueId, rank: u32, device: usize) -> Result<Comm> {
        let (b, why) = backend::auto();
        if let Some(why) = why {
            tracing::info!(target: "oxccl::init", rank, "using the cpu backend: {why}");
        }
        let boot = bootstrap::Config::from_env().map_err(|source| Error::Bootstrap { rank, source })?;
        Self::init_rank_with(b, nranks, id, rank, device, Config::default(), &boot)
    }

    /// As [`Comm::init_rank`] with an explicit backend, configuration and bootstrap settings.
    pub fn init_rank_with(
        backend: Arc<dyn Backend>,
        nranks: u32,
        id: &UniqueId,
        rank: u32,
        device: usize,
        config: Config,
        boot: &bootstrap::Config,
    ) -> Result<Comm> {
        if nranks == 0 || rank >= nranks {
            return Err(Error::Init(format!("rank {rank} is not below nranks {nranks}")));
        }
        if device >= backend.device_count() {
            return Err(Error::NoSuchDevice {
                device,
                count: backend.device_count(),
                backend: backend.kind().name(),
            });
        }
        let _span = tracing::info_span!(target: "oxccl::init", "init_rank", rank, nranks).entered();
        let n = nranks as usize;
        let abort = backend.alloc_mapped(device, 64)?;
        // From here on, `group` frees whatever was allocated if a step fails.
        let mut group = Group {
            backend: backend.clone(),
            nranks,
            ranks: BTreeMap::new(),
            abort,
            ranks_per_device: 1,
            config,
        };
        group.ranks.insert(
            rank,
            RankRes {
                device,
                inbox: 0,
                table: 0,
                error: 0,
            },
        );
        let inbox = backend.alloc(device, inbox_bytes(nranks))?;
        group.ranks.entry(rank).and_modify(|r| r.inbox = inbox);
        let table = backend.alloc(device, 8 * n)?;
        group.ranks.entry(rank).and_modify(|r| r.table = table);
        let error = backend.alloc(device, std::mem::size_of::<ErrorRecord>())?;
        group.ranks.entry(rank).and_modify(|r| r.error = error);
        let info = PeerInfo {
            process: process_token(),
            inbox,
            device: device as u32,
            backend: backend_code(backend.kind()),
        };

        let boot = Bootstrap::init(id, rank, nranks, &info.to_bytes(), boot)
            .map_err(|source| Error::Bootstrap { rank, source })?;
        let mut peers = Vec::with_capacity(n);
        for (q, blob) in boot.peer_infos().into_iter().enumerate() {
            let p = PeerInfo::from_bytes(blob).ok_or_else(|| {
                Error::Init(format!(
                "rank {rank}: rank {q} published {} bytes of peer information, expected {PEER_INFO_BYTES}",
                blob.len()
            ))
            })?;
            peers.push(p);
        }
        let elsewhere: Vec<usize> = (0..n).filter(|&q| peers[q].process != info.process).collect();
        if !elsewhere.is_empty() {
            return Err(Error::Unreachable {
                rank,
                what: format!(
                    "ranks {elsewhere:?} are in other processes: cross-process transports (CUDA \
                     VMM handles over Unix sockets, host shared memory) are not implemented yet, \
                     so every rank of a communicator must be created in one process"
                ),
            });
        }
        let other_backend: Vec<usize> = (0..n).filter(|&q| peers[q].backend != info.backend).collect();
        if !other_backend.is_empty() {
            return Err(Error::Unreachable {
                rank,
                what: format!(
                    "ranks {other_backend:?} use another backend than this rank's {}",
                    backend.kind()
                ),
            });
        }
        let mut per_dev = HashMap::<u32, usize>::new();
        for p in &peers {
            *per_dev.entry(p.device).or_default() += 1;
            let d = p.device as usize;
            if d != device && !backend.enable_peer_access(device, d)? {
                return Err(Error::Unreachable {
                    rank,
                    what: format!("devices {device} and {d} cannot access each other's memory (no P2P)"),
                });
            }
        }
        group.ranks_per_device = per_dev.values().copied().max().unwrap_or(1);
        let table_bytes: Vec<u8> = peers.iter().flat_map(|p| p.inbox.to_le_bytes()).collect();
        backend.upload(device, table, &table_bytes)?;
        // Every rank has checked the same table and set up its side before any returns.
        boot.barrier()
            .map_err(|source| Error::Bootstrap { rank, source })?;
        tracing::info!(target: "oxccl::init", rank, nranks, ranks_per_device = group.ranks_per_device, "communicator ready");
        Ok(Comm {
            group: Arc::new(group),
            rank,
            nranks,
            epoch: AtomicU64::new(0),
            ops: Mutex::new(VecDeque::with_capacity(OPS_REMEMBERED)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_info_round_trips_and_rejects_other_sizes() {
        let p = PeerInfo {
            process: 0x0102_0304_0506_0708,
            inbox: 0xdead_beef_0000,
            device: 3,
            backend: 1,
        };
        assert_eq!(PeerInfo::from_bytes(&p.to_bytes()), Some(p));
        assert_eq!(PeerInfo::from_bytes(&[0u8; 23]), None);
    }
}
