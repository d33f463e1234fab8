//! Topology on the CPU backend, and the report and reachability messages on hand-made GPU
//! topologies (no GPU needed).

use super::*;
use crate::backend::cpu::{parse_refused_peers, CpuBackend, CPU_DEVICES};

fn peer(can: bool, rank: i32) -> Link {
    Link::Peer(PeerLink {
        can_access: can,
        access_supported: can,
        native_atomics: can,
        perf_rank: rank,
    })
}

fn gpu_dev(i: usize, bus: u32) -> DeviceInfo {
    DeviceInfo {
        index: i,
        name: "NVIDIA H200".into(),
        pci: Some(PciId {
            domain: 0,
            bus,
            device: 0,
        }),
        memory: Some(150_754_820_096),
        compute: Some((9, 0)),
        sms: Some(132),
    }
}

/// Three GPUs; `gpu 2` cannot reach `gpu 0`'s memory (one direction only).
fn three_gpus() -> Topology {
    Topology {
        backend: BackendKind::Gpu,
        device_count: 3,
        driver: Some(13000),
        devices: vec![gpu_dev(0, 0x19), gpu_dev(1, 0x3b), gpu_dev(2, 0x4c)],
        links: vec![
            vec![Link::Local, peer(true, 0), peer(true, 0)],
            vec![peer(true, 0), Link::Local, peer(true, 1)],
            vec![peer(false, 0), peer(true, 1), Link::Local],
        ],
        nvlink: NvLinks::NotAsked,
    }
}

#[test]
fn cpu_devices_all_reach_each_other() {
    let b = CpuBackend::new();
    let t = Topology::detect(&b, &[0, 3, 1, 3]).unwrap();
    assert_eq!(t.devices.iter().map(|d| d.index).collect::<Vec<_>>(), [0, 3, 1]);
    assert_eq!(t.device_count, CPU_DEVICES);
    assert_eq!(t.link(3, 3), Some(Link::Local));
    assert_eq!(t.link(0, 1), Some(Link::Host));
    assert_eq!(t.link(0, 2), None);
    assert!(t.unreachable_pairs().is_empty());
    assert!(t.check_reachable().is_ok());
    let r = t.report();
    assert!(r.contains("cpu backend, 3 of 64"), "{r}");
    assert!(
        r.contains("every pair of the 3 devices reaches each other"),
        "{r}"
    );
    assert!(pci_id(&b, 0).is_none());
}

#[test]
fn cpu_detect_all_summarizes_and_refuses_missing_devices() {
    let b = CpuBackend::new();
    let t = Topology::detect_all(&b).unwrap();
    assert_eq!(t.devices.len(), CPU_DEVICES);
    let r = t.report();
    assert!(r.contains("... and 60 more"), "{r}");
    assert!(!r.contains("p2p (row -> column)"), "no 64 x 64 matrix: {r}");
    assert!(matches!(
        Topology::detect(&b, &[CPU_DEVICES]),
        Err(Error::NoSuchDevice { device, .. }) if device == CPU_DEVICES
    ));
    let one = Topology::detect(&b, &[5]).unwrap();
    assert!(one.report().contains("one device"));
}

#[test]
fn unreachable_pairs_are_named_by_device_and_bus() {
    let t = three_gpus();
    assert_eq!(t.unreachable_pairs(), [(0, 2)]);
    let msg = t.check_reachable().unwrap_err();
    assert!(msg.contains("device 0 (NVIDIA H200, 0000:19:00.0)"), "{msg}");
    assert!(msg.contains("device 2 (NVIDIA H200, 0000:4c:00.0)"), "{msg}");
    assert!(msg.contains("0 -> 2 yes, 2 -> 0 no"), "{msg}");
    let r = t.report();
    assert!(r.contains("driver cuda 13.0"), "{r}");
    assert!(r.contains("0000:3b:00.0, 140.4 GiB, sm_90, 132 SMs"), "{r}");
    assert!(r.contains("1 pair(s) cannot reach each other"), "{r}");
    // The row of device 2: `no` towards 0, rank 1 towards 1, itself.
    let row2 = r.lines().find(|l| l.trim_start().starts_with("2 ")).unwrap();
    let cells: Vec<&str> = row2.split_whitespace().collect();
    assert_eq!(cells, ["2", "no", "r1", "a", "."], "{r}");
    // A sub-topology without the bad pair is fine.
    let mut two = t.clone();
    two.devices.truncate(2);
    two.links = vec![t.links[0][..2].to_vec(), t.links[1][..2].to_vec()];
    assert!(two.check_reachable().is_ok());
}

#[test]
fn pci_ids_round_trip_through_u64() {
    let p = PciId {
        domain: 0x1_0002,
        bus: 0xc1,
        device: 0x1f,
    };
    assert_eq!(PciId::from_u64(p.to_u64()), Some(p));
    assert_eq!(PciId::from_u64(0), None);
    assert_ne!(p.to_u64(), 0);
    assert_eq!(p.to_string(), "10002:c1:1f.0");
    let q = PciId {
        domain: 0,
        bus: 0x19,
        device: 0,
    };
    assert_eq!(q.to_string(), "0000:19:00.0");
}

#[test]
fn placements_parse_and_round_robin() {
    assert_eq!(Placement::parse("all"), Ok(Placement::All));
    assert_eq!(Placement::parse(" ALL "), Ok(Placement::All));
    assert_eq!(Placement::parse("0"), Ok(Placement::default()));
    assert_eq!(
        Placement::parse("4-7,0-1"),
        Ok(Placement::List(vec![4, 5, 6, 7, 0, 1]))
    );
    assert!(Placement::parse("").is_err());
    assert!(Placement::parse("3-1").is_err());
    assert!(Placement::parse("x").is_err());
    assert_eq!(
        Placement::All.devices(10, 4).unwrap(),
        [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    );
    assert_eq!(Placement::All.devices(2, 8).unwrap(), [0, 1]);
    assert!(Placement::All.devices(2, 0).is_err());
    let l = Placement::parse("2,5").unwrap();
    assert_eq!(l.devices(5, 8).unwrap(), [2, 5, 2, 5, 2]);
    assert_eq!(l.to_string(), "2,5");
    let e = Placement::parse("1,9").unwrap().devices(2, 8).unwrap_err();
    assert!(e.contains("device 9 does not exist (8 available)"), "{e}");
    assert_eq!(describe_ranks(&[0, 0, 0]), "3 ranks sharing device 0");
    assert_eq!(describe_ranks(&[1]), "1 rank on device 1");
    assert_eq!(
        describe_ranks(&[0, 1, 2]),
        "3 ranks on devices 0,1,2 (one per device)"
    );
    assert_eq!(
        describe_ranks(&[0, 1, 0, 1, 0]),
        "5 ranks on devices 0,1 (up to 3 per device)"
    );
}

#[test]
fn refused_cpu_pairs_show_in_the_matrix_and_name_the_ranks() {
    // Device 2 cannot reach device 0's memory; 0 reaches 2.
    let b = CpuBackend::with_refused_peers(&[(2, 0)]);
    let t = Topology::detect(&b, &[0, 1, 2]).unwrap();
    assert_eq!(t.link(2, 0), Some(Link::Refused));
    assert_eq!(t.link(0, 2), Some(Link::Host));
    assert_eq!(t.unreachable_pairs(), [(0, 2)]);
    let r = t.report();
    let row2 = r.lines().find(|l| l.trim_start().starts_with("2 ")).unwrap();
    assert_eq!(
        row2.split_whitespace().collect::<Vec<_>>(),
        ["2", "no", "host", "."],
        "{r}"
    );
    assert!(r.contains("1 pair(s) cannot reach each other"), "{r}");
    // Ranks 0 and 3 on device 0, rank 1 on device 1, rank 2 on device 2.
    let placed = [(0, 0), (1, 1), (2, 2), (3, 0)];
    let msg = t.check_ranks(&placed).unwrap_err();
    assert!(
        msg.starts_with("ranks 0,3 on device 0 (cpu device 0 (host threads)) and rank 2 on device 2 (cpu device 2 (host threads)) cannot access each other's memory"),
        "{msg}"
    );
    assert!(msg.contains("0 -> 2 yes, 2 -> 0 no"), "{msg}");
    assert_eq!(t.rank_pairs(&placed), [(0, 2, vec![0, 3], vec![2])]);
    // No rank on device 2: nothing to report.
    assert!(t.check_ranks(&[(0, 0), (1, 1)]).is_ok());
    // The message init reports for one pair.
    let m = unreachable_message(&b, 0, 2, &[0, 3], &[2]);
    assert!(
        m.starts_with("ranks 0,3 on device 0 (cpu device 0 (host threads)) and rank 2 on device 2"),
        "{m}"
    );
    // Peer access is refused as a pair (either direction is enough).
    assert!(!b.enable_peer_access(0, 2).unwrap());
    assert!(!b.enable_peer_access(2, 0).unwrap());
    assert!(b.enable_peer_access(0, 1).unwrap());
}

#[test]
fn refused_pairs_parse_from_the_environment_syntax() {
    assert_eq!(parse_refused_peers("0>2"), Ok(vec![(0, 2)]));
    assert_eq!(
        parse_refused_peers(" 1<>3 , 0>2,"),
        Ok(vec![(1, 3), (3, 1), (0, 2)])
    );
    assert_eq!(parse_refused_peers(""), Ok(vec![]));
    assert!(parse_refused_peers("0-2").is_err());
    assert!(parse_refused_peers("a>1").is_err());
}

#[test]
fn gpu_check_names_ranks_of_an_injected_matrix() {
    let t = three_gpus();
    let msg = t.check_ranks(&[(0, 0), (1, 1), (2, 2), (3, 2)]).unwrap_err();
    assert!(
        msg.starts_with("rank 0 on device 0 (NVIDIA H200, 0000:19:00.0) and ranks 2,3 on device 2 (NVIDIA H200, 0000:4c:00.0)"),
        "{msg}"
    );
    assert_eq!(ranks_label(&[]), "no rank");
    assert_eq!(ranks_label(&[5]), "rank 5");
    assert_eq!(ranks_label(&[1, 4]), "ranks 1,4");
}

#[test]
fn nvlink_lines_name_switches_covered_gpus_and_others() {
    let mut t = three_gpus();
    let pci = |bus| PciId {
        domain: 0,
        bus,
        device: 0,
    };
    let end = |link, bus, kind| NvLinkEnd {
        link,
        remote: pci(bus),
        kind,
    };
    t.nvlink = NvLinks::Detected(vec![
        (0..18)
            .map(|l| end(l, 0xa0 + (l % 4), RemoteKind::Switch))
            .collect(),
        vec![
            end(0, 0x4c, RemoteKind::Gpu),
            end(1, 0x4c, RemoteKind::Gpu),
            end(2, 0x99, RemoteKind::Gpu),
            end(3, 0x77, RemoteKind::Other),
        ],
        vec![],
    ]);
    let r = t.report();
    assert!(
        r.contains("nvlink: device 0: 18 active NVLinks: 18 to nvswitch\n"),
        "{r}"
    );
    assert!(
        r.contains("nvlink: device 1: 4 active NVLinks: 2 to device 2, 1 to gpu 0000:99:00.0, 1 to 0000:77:00.0 (kind not reported)\n"),
        "{r}"
    );
    assert!(r.contains("nvlink: device 2: no active NVLink\n"), "{r}");
    assert_eq!(t.nvlink.direct(&t.devices, 1, 2), 2);
    assert_eq!(t.nvlink.direct(&t.devices, 0, 1), 0);
    t.nvlink = NvLinks::Unavailable("nvml not loaded: libnvidia-ml.so.1: not found".into());
    let r = t.report();
    assert!(
        r.contains(
            "nvlink: not detected (nvml not loaded: libnvidia-ml.so.1: not found); see nvidia-smi topo -m"
        ),
        "{r}"
    );
    // Not asked, and the CPU backend: no nvlink line.
    t.nvlink = NvLinks::NotAsked;
    assert!(!t.report().contains("nvlink"));
    let cpu = Topology::detect(&CpuBackend::new(), &[0, 1])
        .unwrap()
        .with_nvlink();
    assert_eq!(cpu.nvlink, NvLinks::NotApplicable);
    assert!(!cpu.report().contains("nvlink"));
}

#[test]
fn asking_nvml_never_panics() {
    // Without NVML (or with it, for these made-up bus ids) the answer is a reason, not a panic.
    let t = three_gpus().with_nvlink();
    match &t.nvlink {
        NvLinks::Unavailable(why) => assert!(!why.is_empty()),
        NvLinks::Detected(v) => assert_eq!(v.len(), 3),
        other => panic!("{other:?}"),
    }
}
