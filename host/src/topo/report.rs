//! The printable topology report (`oxccl topo`, and the log at communicator init).

use std::fmt::Write;

use super::{Link, Topology};
use crate::backend::BackendKind;

/// Up to this many devices the report prints every device and the whole matrix; beyond it
/// (the CPU backend's 64 logical devices) the first few devices and a summary.
const FULL: usize = 16;

/// One matrix cell: `.` the device itself, `host` one address space, `r<rank>` a reachable
/// peer with the driver's performance rank (` a`: native atomics), `no` unreachable (the
/// driver refuses, or on the CPU backend a refused pair).
fn cell(l: &Link) -> String {
    match l {
        Link::Local => ".".into(),
        Link::Host => "host".into(),
        Link::Peer(p) if p.can_access => {
            format!("r{}{}", p.perf_rank, if p.native_atomics { " a" } else { "" })
        }
        Link::Peer(_) | Link::Refused => "no".into(),
    }
}

impl Topology {
    /// The report: the devices, the P2P matrix (row -> column) and the pairs that cannot
    /// reach each other, if any.
    pub fn report(&self) -> String {
        let mut o = String::new();
        let n = self.devices.len();
        let what = match self.backend {
            BackendKind::Gpu => "gpu",
            BackendKind::Cpu => "logical cpu",
        };
        let _ = write!(
            o,
            "topology: {} backend, {n} of {} {what} device(s)",
            self.backend, self.device_count
        );
        if let Some(v) = self.driver {
            let _ = write!(o, ", driver cuda {}.{}", v / 1000, (v % 1000) / 10);
        }
        if self.backend == BackendKind::Cpu {
            o.push_str(" (host threads, one address space)");
        }
        o.push('\n');
        let shown = if n > FULL { 4 } else { n };
        for d in &self.devices[..shown] {
            let _ = write!(o, "  device {}: {}", d.index, d.name);
            if let Some(p) = d.pci {
                let _ = write!(o, ", {p}");
            }
            if let Some(m) = d.memory {
                let _ = write!(o, ", {:.1} GiB", m as f64 / (1u64 << 30) as f64);
            }
            if let Some((a, b)) = d.compute {
                let _ = write!(o, ", sm_{a}{b}");
            }
            if let Some(s) = d.sms {
                let _ = write!(o, ", {s} SMs");
            }
            o.push('\n');
        }
        if shown < n {
            let _ = writeln!(o, "  ... and {} more", n - shown);
        }
        if n > 1 && n <= FULL {
            o.push_str("p2p (row -> column): r<k> = reachable, the driver's performance rank k (lower is faster); a = native atomics; no = cuDeviceCanAccessPeer refuses; host = one address space\n");
            let cells: Vec<Vec<String>> = self.links.iter().map(|r| r.iter().map(cell).collect()).collect();
            let w = cells.iter().flatten().map(|c| c.len()).max().unwrap_or(1).max(3) + 2;
            let _ = write!(o, "{:>6}", "");
            for d in &self.devices {
                let _ = write!(o, "{:>w$}", d.index);
            }
            o.push('\n');
            for (d, row) in self.devices.iter().zip(&cells) {
                let _ = write!(o, "{:>6}", d.index);
                for c in row {
                    let _ = write!(o, "{c:>w$}");
                }
                o.push('\n');
            }
        }
        for l in self.nvlink.lines(&self.devices[..shown]) {
            o.push_str(&l);
            o.push('\n');
        }
        let bad = self.unreachable_pairs();
        if n < 2 {
            o.push_str("p2p: one device, nothing to connect\n");
        } else if bad.is_empty() {
            let _ = writeln!(
                o,
                "p2p: every pair of the {n} devices reaches each other both ways"
            );
        } else {
            let _ = writeln!(o, "p2p: {} pair(s) cannot reach each other:", bad.len());
            for (a, b) in bad {
                let _ = writeln!(o, "  {}", self.pair_message(a, b, None));
            }
        }
        o
    }
}
