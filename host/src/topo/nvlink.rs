//! NVLink, as NVML reports it (`crate::sys::nvml`): the CUDA driver API tells whether two
//! GPUs reach each other and ranks the links, but not whether a link is NVLink or PCIe.
//! For each covered GPU: its active NVLinks and what each one ends at (a covered GPU, another
//! GPU, an NVSwitch). On NVSwitch machines (HGX H200) every link ends at a switch, and any
//! two GPUs talk through the switches at the full link count.

use super::{DeviceInfo, PciId};
use crate::sys::nvml;

/// What an NVLink ends at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteKind {
    Gpu,
    Switch,
    /// Not reported, or another kind of device.
    Other,
}

/// One active NVLink of a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvLinkEnd {
    /// The link's index on its GPU.
    pub link: u32,
    /// The PCI address of the far end.
    pub remote: PciId,
    pub kind: RemoteKind,
}

/// NVLink of the covered devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NvLinks {
    /// The CPU backend.
    NotApplicable,
    /// Not asked (`crate::topo::Topology::with_nvlink` asks).
    NotAsked,
    /// Not known, and why (NVML missing, a device without a PCI address, a failing call).
    Unavailable(String),
    /// Per covered device (in [`super::Topology::devices`] order), its active links.
    Detected(Vec<Vec<NvLinkEnd>>),
}

/// Ask NVML about the devices at `pcis` (one per covered device).
pub(super) fn detect(pcis: &[Option<PciId>]) -> NvLinks {
    let mut all = Vec::with_capacity(pcis.len());
    for (i, p) in pcis.iter().enumerate() {
        let Some(p) = p else {
            return NvLinks::Unavailable(format!("covered device {i} has no pci address"));
        };
        match links_of(*p) {
            Ok(v) => all.push(v),
            Err(e) => return NvLinks::Unavailable(e.to_string()),
        }
    }
    NvLinks::Detected(all)
}

fn links_of(p: PciId) -> Result<Vec<NvLinkEnd>, nvml::NvmlError> {
    let dev = nvml::device_by_pci(&p.to_string())?;
    let mut v = Vec::new();
    for link in 0..nvml::MAX_LINKS {
        match nvml::link_active(dev, link)? {
            Some(true) => {}
            // Inactive, or no such link (indices need not be contiguous).
            _ => continue,
        }
        let ((domain, bus, device), t) = nvml::remote(dev, link)?;
        v.push(NvLinkEnd {
            link,
            remote: PciId { domain, bus, device },
            kind: match t {
                nvml::RemoteType::Gpu => RemoteKind::Gpu,
                nvml::RemoteType::Switch => RemoteKind::Switch,
                nvml::RemoteType::Other => RemoteKind::Other,
            },
        });
    }
    Ok(v)
}

impl NvLinks {
    /// Active links of covered device `i` whose far end is covered device `j` (direct
    /// GPU-to-GPU links; 0 through switches).
    pub fn direct(&self, devices: &[DeviceInfo], i: usize, j: usize) -> usize {
        match (self, devices.get(j).and_then(|d| d.pci)) {
            (NvLinks::Detected(v), Some(pj)) => v
                .get(i)
                .map_or(0, |l| l.iter().filter(|e| same_pci(e.remote, pj)).count()),
            _ => 0,
        }
    }

    /// One line per covered device (`device 0: 18 active NVLinks: 18 to nvswitch`), or one
    /// line saying why nothing is known; none on the CPU backend.
    pub fn lines(&self, devices: &[DeviceInfo]) -> Vec<String> {
        let v = match self {
            NvLinks::NotApplicable | NvLinks::NotAsked => return Vec::new(),
            NvLinks::Unavailable(why) => {
                return vec![format!("nvlink: not detected ({why}); see nvidia-smi topo -m")]
            }
            NvLinks::Detected(v) => v,
        };
        let mut out = Vec::with_capacity(v.len());
        for (d, links) in devices.iter().zip(v) {
            if links.is_empty() {
                out.push(format!("nvlink: device {}: no active NVLink", d.index));
                continue;
            }
            // Far ends in order of first appearance, with their link counts.
            let mut ends: Vec<(String, usize)> = Vec::new();
            for e in links {
                let name = match (
                    devices
                        .iter()
                        .find(|x| x.pci.is_some_and(|p| same_pci(p, e.remote))),
                    e.kind,
                ) {
                    (Some(x), _) => format!("device {}", x.index),
                    (None, RemoteKind::Switch) => "nvswitch".into(),
                    (None, RemoteKind::Gpu) => format!("gpu {}", e.remote),
                    (None, RemoteKind::Other) => format!("{} (kind not reported)", e.remote),
                };
                match ends.iter_mut().find(|x| x.0 == name) {
                    Some(x) => x.1 += 1,
                    None => ends.push((name, 1)),
                }
            }
            let parts: Vec<String> = ends.iter().map(|(n, c)| format!("{c} to {n}")).collect();
            out.push(format!(
                "nvlink: device {}: {} active NVLink{}: {}",
                d.index,
                links.len(),
                if links.len() == 1 { "" } else { "s" },
                parts.join(", ")
            ));
        }
        out
    }
}

/// Whether two addresses name the same PCI device (NVML's domain is 32-bit, the driver's
/// attribute may give only the low bits: compared as the driver reports them).
fn same_pci(a: PciId, b: PciId) -> bool {
    a.bus == b.bus && a.device == b.device && (a.domain & 0xffff) == (b.domain & 0xffff)
}
