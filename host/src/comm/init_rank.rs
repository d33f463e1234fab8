//! `Comm::init_rank`: one rank per call (one thread or process per rank, like
//! `ncclCommInitRank`), the ranks meeting through the TCP bootstrap ([`crate::bootstrap`]).
//!
//! Each rank allocates its own inbox, error record and abort flag, publishes where its inbox
//! is (and which process, backend and device it is on) in the bootstrap all-gather, and
//! builds its table of peer inboxes from what the others published. When every rank is in
//! this process, peers load and store each other's buffers directly (each holding its peers'
//! inboxes until it is dropped, [`super::keep`]). When some are in other
//! processes, every rank moves its inbox into a segment that its peers map
//! ([`super::segment`]: CUDA VMM memory exported as a POSIX descriptor, or a memfd on the
//! CPU backend, passed over a Unix socket) and collectives go through the segment's staging
//! buffers (`crate::coll::staged`). Peers that cannot be reached (another backend, devices
//! without P2P) are reported with their ranks, never guessed.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use oxccl_device::abi::ErrorRecord;
use oxccl_device::prims::layout::{inbox_bytes, table_bytes};

use super::{Comm, Config, Control, Group, RankRes};
use crate::backend::{self, Backend, BackendKind};
use crate::bootstrap::{self, Bootstrap, UniqueId};
use crate::error::{Error, Result};

/// What each rank publishes at init: 48 bytes, little-endian
/// `{process token: u64, inbox address: u64, device: u32, backend: u8, pad: [u8; 3],
/// staging bytes: u64, LL capacity: u64, PCI address: u64}` (the address as
/// `crate::topo::PciId::to_u64`, 0 when unknown: the CPU backend).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PeerInfo {
    process: u64,
    inbox: u64,
    device: u32,
    backend: u8,
    staging: u64,
    ll_max: u64,
    pci: u64,
}

const PEER_INFO_BYTES: usize = 48;

impl PeerInfo {
    fn to_bytes(self) -> [u8; PEER_INFO_BYTES] {
        let mut b = [0u8; PEER_INFO_BYTES];
        b[0..8].copy_from_slice(&self.process.to_le_bytes());
        b[8..16].copy_from_slice(&self.inbox.to_le_bytes());
        b[16..20].copy_from_slice(&self.device.to_le_bytes());
        b[20] = self.backend;
        b[24..32].copy_from_slice(&self.staging.to_le_bytes());
        b[32..40].copy_from_slice(&self.ll_max.to_le_bytes());
        b[40..48].copy_from_slice(&self.pci.to_le_bytes());
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
            staging: u64::from_le_bytes(b[24..32].try_into().ok()?),
            ll_max: u64::from_le_bytes(b[32..40].try_into().ok()?),
            pci: u64::from_le_bytes(b[40..48].try_into().ok()?),
        })
    }
}

/// A random token naming this process (pids can repeat across containers).
pub(crate) fn process_token() -> u64 {
    static TOKEN: OnceLock<u64> = OnceLock::new();
    *TOKEN.get_or_init(rand::random)
}

fn backend_code(k: BackendKind) -> u8 {
    match k {
        BackendKind::Gpu => 1,
        BackendKind::Cpu => 2,
    }
}

/// Make sure the ranks' devices reach each other, and count the ranks on each physical
/// device (keyed by PCI address where known, else by index).
///
/// First every pair of ranks whose devices are visible here is checked (`cuDeviceCanAccessPeer`
/// both ways, nothing enabled), so that every rank that can see a failing pair reports it, not
/// only the two ranks of the pair (the others would otherwise wait for them until the
/// bootstrap timeout): the error names this rank, the ranks on each side and both devices
/// (`crate::topo`). A peer's device that this process cannot see (another
/// `CUDA_VISIBLE_DEVICES`) is not checked: mapping its segment fails if it is unreachable.
///
/// Then peers in this process get peer access enabled from `device` (their buffers are
/// `cuMemAlloc` memory addressed directly). Peers in other processes need nothing more:
/// their memory is imported and mapped for this device alone, which needs no context on
/// theirs.
fn connect_peers(
    backend: &dyn Backend,
    rank: u32,
    device: usize,
    me: &PeerInfo,
    peers: &[PeerInfo],
) -> Result<HashMap<u64, usize>> {
    let mut per_dev = HashMap::<u64, usize>::new();
    let mut placed: Vec<(u32, usize)> = Vec::with_capacity(peers.len());
    for (q, p) in peers.iter().enumerate() {
        let key = if p.pci != 0 { p.pci } else { p.device as u64 };
        *per_dev.entry(key).or_default() += 1;
        let here = if p.process == me.process {
            Some(p.device as usize)
        } else {
            match crate::topo::PciId::from_u64(p.pci) {
                Some(pci) => crate::topo::find_pci(backend, pci),
                // No address (the CPU backend): the same index names the same device.
                None => Some(p.device as usize).filter(|&d| d < backend.device_count()),
            }
        };
        match here {
            Some(d) => placed.push((q as u32, d)),
            None => {
                tracing::debug!(target: "oxccl::init", rank, peer = q, "the peer's device is not visible here: reachability not checked")
            }
        }
    }
    let mut distinct: Vec<usize> = placed.iter().map(|p| p.1).collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() > 1 {
        let topo = crate::topo::Topology::detect(backend, &distinct)?;
        if let Err(what) = topo.check_ranks(&placed) {
            return Err(Error::Unreachable { rank, what });
        }
    }
    let mut enabled = vec![device];
    for (q, p) in peers.iter().enumerate() {
        let d = p.device as usize;
        if p.process == me.process && !enabled.contains(&d) {
            if !backend.enable_peer_access(device, d)? {
                return Err(Error::Unreachable {
                    rank,
                    what: format!(
                        "peer rank {q}: {}",
                        crate::topo::unreachable_message(backend, device, d, &[rank], &[q as u32])
                    ),
                });
            }
            enabled.push(d);
        }
    }
    Ok(per_dev)
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
        let _span = tracing::info_span!(target: "oxccl::init", "init_rank", rank, nranks, comm = config.name.as_deref().unwrap_or("")).entered();
        let n = nranks as usize;
        let tuning = config.overrides()?;
        let sym_policy = config.sym_policy()?;
        let ll = config.ll_capacity();
        let abort = backend.alloc_mapped(device, 64)?;
        // From here on, `group` frees whatever was allocated if a step fails.
        let mut group = Group {
            backend: backend.clone(),
            nranks,
            ranks: BTreeMap::new(),
            abort,
            ranks_per_device: 1,
            devices: 1,
            config,
            tuning,
            sym_policy,
        };
        group.ranks.insert(
            rank,
            RankRes {
                device,
                inbox: 0,
                table: 0,
                error: 0,
                seg: None,
                imports: Vec::new(),
                staging: None,
                inbox_kept: false,
                peer_holds: Vec::new(),
            },
        );
        let inbox = backend.alloc(device, inbox_bytes(nranks, ll))?;
        // Held before its address is published: in-process peers take their holds on it
        // (see `super::keep`).
        super::keep::register(&backend, device, inbox, inbox_bytes(nranks, ll));
        group.ranks.entry(rank).and_modify(|r| {
            r.inbox = inbox;
            r.inbox_kept = true;
        });
        let table = backend.alloc(device, table_bytes(nranks))?;
        group.ranks.entry(rank).and_modify(|r| r.table = table);
        let error = backend.alloc(device, std::mem::size_of::<ErrorRecord>())?;
        group.ranks.entry(rank).and_modify(|r| r.error = error);
        let info = PeerInfo {
            process: process_token(),
            inbox,
            device: device as u32,
            backend: backend_code(backend.kind()),
            staging: group.config.staging_bytes as u64,
            ll_max: ll as u64,
            pci: crate::topo::pci_id(&*backend, device).map_or(0, |p| p.to_u64()),
        };
        let deadline = std::time::Instant::now() + boot.timeout.max(std::time::Duration::from_millis(1));
        let bootstrap_timeout = boot.timeout;

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
        let cross = peers.iter().any(|p| p.process != info.process);
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
        let other_ll: Vec<usize> = (0..n).filter(|&q| peers[q].ll_max != info.ll_max).collect();
        if !other_ll.is_empty() {
            return Err(Error::Unreachable {
                rank,
                what: format!(
                    "ranks {other_ll:?} use other LL capacities than this rank's {} bytes (OXCCL_LL_MAX_BYTES must be equal on every rank)",
                    info.ll_max
                ),
            });
        }
        let per_dev = connect_peers(&*backend, rank, device, &info, &peers)?;
        group.ranks_per_device = per_dev.values().copied().max().unwrap_or(1);
        group.devices = per_dev.len().max(1);
        let table_words: Vec<u64> = if cross {
            let other_staging: Vec<usize> = (0..n).filter(|&q| peers[q].staging != info.staging).collect();
            if !other_staging.is_empty() {
                return Err(Error::Unreachable {
                    rank,
                    what: format!(
                        "ranks {other_staging:?} use other staging sizes than this rank's {} bytes (OXCCL_STAGING_BYTES must be equal on every rank)",
                        info.staging
                    ),
                });
            }
            let process: Vec<u64> = peers.iter().map(|p| p.process).collect();
            // Effectively unlimited when the bootstrap timeout is 0 ("none").
            let deadline = if bootstrap_timeout.is_zero() {
                std::time::Instant::now() + std::time::Duration::from_secs(30 * 24 * 3600)
            } else {
                deadline.max(std::time::Instant::now() + bootstrap_timeout)
            };
            let conn = super::segment::connect(
                &*backend,
                &boot,
                id.secret(),
                rank,
                device,
                &process,
                ll,
                group.config.staging_bytes,
                deadline,
            )?;
            let me = group
                .ranks
                .get_mut(&rank)
                .ok_or_else(|| Error::Init("rank resources vanished".into()))?;
            // SAFETY: the plain inbox was published but no kernel ever ran on it, and no peer
            // took a hold on it (they use the segment's, whose address is in their tables):
            // this drops the only hold, which frees it.
            unsafe { super::keep::release(me.inbox) };
            me.inbox_kept = false;
            me.inbox = conn.seg.dev;
            me.seg = Some(conn.seg);
            me.imports = conn.imports;
            me.staging = Some(conn.staging);
            tracing::info!(target: "oxccl::init", rank, staging = conn.staging.half, "communicator spans processes: staged through shared segments");
            conn.table
        } else {
            // Hold every peer's inbox (our kernels store into them) before the barrier below,
            // which no peer passes, and so frees nothing, before we hold it (`super::keep`).
            let me = group
                .ranks
                .get_mut(&rank)
                .ok_or_else(|| Error::Init("rank resources vanished".into()))?;
            for (q, p) in peers.iter().enumerate() {
                if q as u32 == rank {
                    continue;
                }
                if !super::keep::retain(p.inbox) {
                    return Err(Error::Init(format!(
                        "init_rank on rank {rank}: peer {q} reports an inbox at {:#x} in this process that is not a live oxccl inbox",
                        p.inbox
                    )));
                }
                me.peer_holds.push(p.inbox);
            }
            // Inbox bases, then deltas (all 0: one address space).
            peers
                .iter()
                .map(|p| p.inbox)
                .chain(std::iter::repeat_n(0, n))
                .collect()
        };
        let table_data: Vec<u8> = table_words.into_iter().flat_map(u64::to_le_bytes).collect();
        backend.upload(device, table, &table_data)?;
        // Every rank has checked the same table and set up its side before any returns.
        boot.barrier()
            .map_err(|source| Error::Bootstrap { rank, source })?;
        tracing::info!(target: "oxccl::init", rank, nranks, ranks_per_device = group.ranks_per_device, "communicator ready");
        // The bootstrap stays with the communicator: its control channel (split, finalize).
        Ok(Comm::new(
            Arc::new(group),
            rank,
            nranks,
            Control::bootstrap(boot, id.secret()),
        ))
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
            staging: 1 << 25,
            ll_max: 1 << 16,
            pci: (1 << 63) | 0x3b00,
        };
        assert_eq!(PeerInfo::from_bytes(&p.to_bytes()), Some(p));
        assert_eq!(PeerInfo::from_bytes(&[0u8; 40]), None);
        assert_eq!(PeerInfo::from_bytes(&[0u8; 47]), None);
    }
}
