//! Topology: the devices a backend offers and which pairs of them can load and store each
//! other's memory.
//!
//! - [`Topology::detect`]: each device's name, PCI bus id, memory, compute capability and
//!   multiprocessors, and the P2P matrix. On the GPU backend every entry comes from the
//!   driver without making a context (`cuDeviceCanAccessPeer`, and
//!   `cuDeviceGetP2PAttribute`'s access, native-atomics and performance-rank attributes), so
//!   asking costs no device memory; on the CPU backend the logical devices share one
//!   address space and every pair is reachable.
//! - [`Topology::report`]: the printable report (`oxccl topo`).
//! - [`Topology::check_ranks`], [`Topology::check_reachable`] and [`unreachable_message`]:
//!   what communicator init (`Comm::init_all`, `Comm::init_rank`) reports when ranks sit on
//!   devices that cannot reach each other, every such pair named by its ranks, device name
//!   and bus id (`Error::Unreachable`), never worked around.
//! - [`Placement`]: where the ranks of a CLI run go (`--devices`).
//!
//! The CPU backend's logical devices all reach each other unless a test refuses some pairs
//! (`CpuBackend::with_refused_peers`, `OXCCL_CPU_P2P_REFUSE`): the same checks and messages
//! then run without a GPU (`topo/tests.rs`, `host/tests/multidevice_cpu.rs`).
//!
//! The matrix is read row to column: `links[i][j]` is what device `devices[i]` can do with
//! the memory of device `devices[j]`. Collectives need both directions (each rank's kernels
//! read and write its peers' buffers).
//!
//! NVLink: the driver API does not say whether a link is NVLink or PCIe (its performance
//! rank orders links without naming them), so each GPU's active NVLinks and their far ends
//! come from NVML when `libnvidia-ml.so.1` is there ([`NvLinks`]; otherwise the report says
//! why, and `nvidia-smi topo -m` remains the reference). Not detected: NICs, NUMA affinity.

mod nvlink;
mod placement;
mod report;
#[cfg(test)]
mod tests;

use std::fmt;

use cudarc::driver::sys;

pub use nvlink::{NvLinkEnd, NvLinks, RemoteKind};
pub use placement::{describe_ranks, ranks_label, Placement};

use crate::backend::{Backend, BackendKind};
use crate::error::{Error, Result};
use crate::sys::cuda;

/// A PCI address (function 0), as `cuDeviceGetPCIBusId` prints it: `dddd:bb:dd.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PciId {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

impl PciId {
    /// A nonzero `u64` naming this address (what ranks publish at init; 0 means unknown).
    pub fn to_u64(self) -> u64 {
        (1 << 63)
            | ((self.domain as u64) << 16)
            | (((self.bus & 0xff) as u64) << 8)
            | (self.device & 0xff) as u64
    }

    /// The address [`PciId::to_u64`] made, or `None` for 0 (unknown).
    pub fn from_u64(v: u64) -> Option<PciId> {
        (v >> 63 == 1).then_some(PciId {
            domain: ((v >> 16) & 0xffff_ffff) as u32,
            bus: ((v >> 8) & 0xff) as u32,
            device: (v & 0xff) as u32,
        })
    }
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.0", self.domain, self.bus, self.device)
    }
}

/// One device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Its index on the backend.
    pub index: usize,
    pub name: String,
    /// GPU only.
    pub pci: Option<PciId>,
    /// Bytes of device memory (GPU only).
    pub memory: Option<u64>,
    /// Compute capability (GPU only).
    pub compute: Option<(i32, i32)>,
    /// Multiprocessors (GPU only).
    pub sms: Option<u32>,
}

impl DeviceInfo {
    /// `device 1 (NVIDIA H200, 0000:3b:00.0)`.
    pub fn label(&self) -> String {
        match self.pci {
            Some(p) => format!("device {} ({}, {p})", self.index, self.name),
            None => format!("device {} ({})", self.index, self.name),
        }
    }
}

/// What the driver says of the link from one GPU to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLink {
    /// `cuDeviceCanAccessPeer`: the row's device can map the column's memory.
    pub can_access: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED`.
    pub access_supported: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`: atomics over the link are native.
    pub native_atomics: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK`: lower is faster; comparable between the
    /// links of one machine only.
    pub perf_rank: i32,
}

/// How a device reaches another's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// The device itself.
    Local,
    /// Logical devices of the CPU backend: one address space.
    Host,
    /// Logical devices of the CPU backend made unable to reach each other (fault injection:
    /// `crate::backend::cpu::CpuBackend::with_refused_peers`, `OXCCL_CPU_P2P_REFUSE`).
    Refused,
    /// Two GPUs.
    Peer(PeerLink),
}

impl Link {
    /// Whether the row's device can load and store the column's memory.
    pub fn reachable(&self) -> bool {
        match self {
            Link::Local | Link::Host => true,
            Link::Refused => false,
            Link::Peer(p) => p.can_access,
        }
    }
}

/// Devices and their P2P matrix (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub backend: BackendKind,
    /// Devices the backend offers (the report may cover fewer).
    pub device_count: usize,
    /// The driver's CUDA version (e.g. 13000), GPU only.
    pub driver: Option<i32>,
    /// The devices covered, in the order asked for.
    pub devices: Vec<DeviceInfo>,
    /// `links[i][j]`: from `devices[i]` to `devices[j]`.
    pub links: Vec<Vec<Link>>,
    /// NVLink, as NVML reports it (GPU backend, after [`Topology::with_nvlink`]).
    pub nvlink: NvLinks,
}

impl Topology {
    /// The topology of `devices` (indices on `backend`; duplicates are dropped, the first
    /// occurrence keeps its place).
    pub fn detect(backend: &dyn Backend, devices: &[usize]) -> Result<Topology> {
        let count = backend.device_count();
        let mut list: Vec<usize> = Vec::with_capacity(devices.len());
        for &d in devices {
            if d >= count {
                return Err(Error::NoSuchDevice {
                    device: d,
                    count,
                    backend: backend.kind().name(),
                });
            }
            if !list.contains(&d) {
                list.push(d);
            }
        }
        match backend.kind() {
            BackendKind::Cpu => Self::cpu(backend, count, &list),
            BackendKind::Gpu => Self::gpu(count, &list),
        }
    }

    /// This topology with its GPUs' NVLinks asked of NVML ([`NvLinks`]; communicator init
    /// does not ask: loading NVML costs time and tells nothing init needs).
    pub fn with_nvlink(mut self) -> Topology {
        if self.backend == BackendKind::Gpu {
            let pcis: Vec<Option<PciId>> = self.devices.iter().map(|d| d.pci).collect();
            self.nvlink = nvlink::detect(&pcis);
        }
        self
    }

    /// The topology of every device of `backend`.
    pub fn detect_all(backend: &dyn Backend) -> Result<Topology> {
        let all: Vec<usize> = (0..backend.device_count()).collect();
        Self::detect(backend, &all)
    }

    fn cpu(backend: &dyn Backend, count: usize, list: &[usize]) -> Result<Topology> {
        let devices = list
            .iter()
            .map(|&d| DeviceInfo {
                index: d,
                name: backend.device_name(d),
                pci: None,
                memory: None,
                compute: None,
                sms: None,
            })
            .collect();
        let mut links = Vec::with_capacity(list.len());
        for &a in list {
            let mut row = Vec::with_capacity(list.len());
            for &b in list {
                row.push(if a == b {
                    Link::Local
                } else if backend.can_access_peer(a, b)? {
                    Link::Host
                } else {
                    Link::Refused
                });
            }
            links.push(row);
        }
        Ok(Topology {
            backend: BackendKind::Cpu,
            device_count: count,
            driver: None,
            devices,
            links,
            nvlink: NvLinks::NotApplicable,
        })
    }

    fn gpu(count: usize, list: &[usize]) -> Result<Topology> {
        let devices = list.iter().map(|&d| gpu_device(d)).collect::<Result<Vec<_>>>()?;
        let mut links = Vec::with_capacity(list.len());
        for &a in list {
            let mut row = Vec::with_capacity(list.len());
            for &b in list {
                row.push(if a == b {
                    Link::Local
                } else {
                    Link::Peer(gpu_link(a, b)?)
                });
            }
            links.push(row);
        }
        Ok(Topology {
            backend: BackendKind::Gpu,
            device_count: count,
            driver: cuda::driver_version().ok(),
            devices,
            links,
            nvlink: NvLinks::NotAsked,
        })
    }

    /// Where device `d` is in [`Topology::devices`].
    fn position(&self, d: usize) -> Option<usize> {
        self.devices.iter().position(|x| x.index == d)
    }

    /// The link from device `a` to device `b` (indices on the backend), if both are covered.
    pub fn link(&self, a: usize, b: usize) -> Option<Link> {
        Some(self.links[self.position(a)?][self.position(b)?])
    }

    /// The label of device `d` ([`DeviceInfo::label`]), or its bare index if not covered.
    pub fn label(&self, d: usize) -> String {
        self.position(d)
            .map_or_else(|| format!("device {d}"), |i| self.devices[i].label())
    }

    /// Unordered pairs `(a, b)` (backend indices, `a` listed first) where `a` cannot reach
    /// `b`'s memory or `b` cannot reach `a`'s.
    pub fn unreachable_pairs(&self) -> Vec<(usize, usize)> {
        let n = self.devices.len();
        let mut v = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                if !self.links[i][j].reachable() || !self.links[j][i].reachable() {
                    v.push((self.devices[i].index, self.devices[j].index));
                }
            }
        }
        v
    }

    /// `Ok` when every pair of covered devices reaches each other; else a message naming
    /// every pair that does not (by device name and bus id) and which direction fails.
    pub fn check_reachable(&self) -> std::result::Result<(), String> {
        let pairs = self.unreachable_pairs();
        if pairs.is_empty() {
            return Ok(());
        }
        let what: Vec<String> = pairs
            .iter()
            .map(|&(a, b)| self.pair_message(a, b, None))
            .collect();
        Err(what.join("; "))
    }

    /// As [`Topology::check_reachable`] for ranks placed on devices (`(rank, device)` pairs;
    /// ranks whose device is not known here are left out): every failing pair also names the
    /// ranks on each side (`ranks 0,2 on device 0 (NVIDIA H200, 0000:19:00.0) and rank 1 on
    /// device 1 (...)`). Devices no rank uses are not checked.
    pub fn check_ranks(&self, placed: &[(u32, usize)]) -> std::result::Result<(), String> {
        let pairs = self.rank_pairs(placed);
        if pairs.is_empty() {
            return Ok(());
        }
        let what: Vec<String> = pairs
            .iter()
            .map(|(a, b, ra, rb)| self.pair_message(*a, *b, Some((ra, rb))))
            .collect();
        Err(what.join("; "))
    }

    /// The unreachable device pairs that ranks of `placed` use, with the ranks on each side.
    pub fn rank_pairs(&self, placed: &[(u32, usize)]) -> Vec<(usize, usize, Vec<u32>, Vec<u32>)> {
        let on = |d: usize| -> Vec<u32> { placed.iter().filter(|p| p.1 == d).map(|p| p.0).collect() };
        self.unreachable_pairs()
            .into_iter()
            .map(|(a, b)| (a, b, on(a), on(b)))
            .filter(|(_, _, ra, rb)| !ra.is_empty() && !rb.is_empty())
            .collect()
    }

    /// Why devices `a` and `b` cannot be used together; `ranks`: the ranks on `a` and on `b`.
    fn pair_message(&self, a: usize, b: usize, ranks: Option<(&[u32], &[u32])>) -> String {
        let dir = |x: usize, y: usize| match self.link(x, y) {
            Some(l) if l.reachable() => "yes".to_string(),
            Some(_) => "no".to_string(),
            None => "not asked".to_string(),
        };
        let side = |d: usize, r: Option<&[u32]>| match r {
            Some(r) => format!("{} on {}", ranks_label(r), self.label(d)),
            None => self.label(d),
        };
        format!(
            "{} and {} cannot access each other's memory (no P2P between them: {a} -> {b} {}, {b} -> {a} {})",
            side(a, ranks.map(|r| r.0)),
            side(b, ranks.map(|r| r.1)),
            dir(a, b),
            dir(b, a)
        )
    }
}

/// The message communicator init reports when devices `a` and `b` of `backend` cannot
/// reach each other, `ranks_a` on `a` and `ranks_b` on `b`: ranks and devices named (device
/// name and bus id, [`DeviceInfo::label`]), with the directions the driver refuses (bare
/// indices when even the query fails).
pub fn unreachable_message(
    backend: &dyn Backend,
    a: usize,
    b: usize,
    ranks_a: &[u32],
    ranks_b: &[u32],
) -> String {
    let (ra, rb) = (ranks_label(ranks_a), ranks_label(ranks_b));
    match Topology::detect(backend, &[a, b]) {
        Ok(t) if a != b && !t.unreachable_pairs().is_empty() => {
            t.pair_message(a, b, Some((ranks_a, ranks_b)))
        }
        Ok(t) => format!(
            "{ra} on {} and {rb} on {} cannot access each other's memory (peer access could not be enabled)",
            t.label(a),
            t.label(b)
        ),
        Err(e) => {
            format!("{ra} on device {a} and {rb} on device {b} cannot access each other's memory ({e})")
        }
    }
}

/// The PCI address of `device` (GPU backend; `None` on the CPU backend or when the driver
/// does not say).
pub fn pci_id(backend: &dyn Backend, device: usize) -> Option<PciId> {
    if backend.kind() != BackendKind::Gpu {
        return None;
    }
    gpu_pci(device).ok()
}

/// The device of `backend` at PCI address `pci`, if it is visible to this process.
pub fn find_pci(backend: &dyn Backend, pci: PciId) -> Option<usize> {
    (0..backend.device_count()).find(|&d| pci_id(backend, d) == Some(pci))
}

fn gpu_pci(d: usize) -> Result<PciId> {
    use sys::CUdevice_attribute::*;
    Ok(PciId {
        domain: cuda::device_attribute(d, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)? as u32,
        bus: cuda::device_attribute(d, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)? as u32,
        device: cuda::device_attribute(d, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)? as u32,
    })
}

fn gpu_device(d: usize) -> Result<DeviceInfo> {
    use sys::CUdevice_attribute::*;
    let attr = |a| cuda::device_attribute(d, a).ok();
    Ok(DeviceInfo {
        index: d,
        name: cuda::device_name(d)?,
        pci: gpu_pci(d).ok(),
        memory: cuda::device_total_mem(d).ok().map(|b| b as u64),
        compute: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .zip(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
        sms: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map(|v| v as u32),
    })
}

/// What the driver says of the link `a -> b`. `cuDeviceCanAccessPeer` decides reachability
/// (its failure is an error); an attribute the driver does not answer reads as 0 / false
/// (the report then shows rank 0 without atomics), with a debug line.
fn gpu_link(a: usize, b: usize) -> Result<PeerLink> {
    use sys::CUdevice_P2PAttribute::*;
    let attr = |x: sys::CUdevice_P2PAttribute| {
        cuda::p2p_attribute(a, b, x).unwrap_or_else(|e| {
            tracing::debug!(target: "oxccl::init", "cuDeviceGetP2PAttribute({x:?}, {a} -> {b}): {e}");
            0
        })
    };
    Ok(PeerLink {
        can_access: cuda::can_access_peer(a, b)?,
        access_supported: attr(CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED) != 0,
        native_atomics: attr(CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED) != 0,
        perf_rank: attr(CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK),
    })
}
