//! Symmetric memory windows on the GPU backend (CUDA VMM): ranks as threads sharing the
//! visible GPUs, and two processes on one GPU passing POSIX descriptors. Data goes in and
//! out with host copies (`Backend::upload` / `download`) through the `mem_alloc` pointers
//! and through the flat range; no kernel runs. Without a GPU every test prints
//! "skipped: ..." and returns.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use oxccl::backend::gpu::GpuBackend;
use oxccl::bootstrap::{self, UniqueId};
use oxccl::window::{DevCommRequirements, WIN_COLL_SYMMETRIC};
use oxccl::{Backend, Comm, Config};

const MIB: usize = 1 << 20;
const CHILD_ID: &str = "OXCCL_WINDOW_GPU_TEST_ID";
const CHILD_RANK: &str = "OXCCL_WINDOW_GPU_TEST_RANK";

fn gpu() -> Option<Arc<dyn Backend>> {
    match GpuBackend::new() {
        Ok(g) => Some(Arc::new(g)),
        Err(e) => {
            println!("skipped: no gpu backend ({e})");
            None
        }
    }
}

fn boot() -> bootstrap::Config {
    bootstrap::Config::default().with_timeout(Duration::from_secs(60))
}

fn put(c: &Comm, at: u64, v: u64) {
    c.backend().upload(c.device(), at, &v.to_le_bytes()).unwrap();
}

fn get(c: &Comm, at: u64) -> u64 {
    let mut b = [0u8; 8];
    c.backend().download(c.device(), &mut b, at).unwrap();
    u64::from_le_bytes(b)
}

fn get_block(c: &Comm, at: u64, bytes: usize) -> Vec<u8> {
    let mut b = vec![0u8; bytes];
    c.backend().download(c.device(), &mut b, at).unwrap();
    b
}

fn mark(from: u32, to: u32, k: u64) -> u64 {
    0xab00_0000_0000_0000 | (from as u64) << 24 | (to as u64) << 8 | k
}

/// The round: three blocks of different sizes as segments, plus a sub-range window; peers
/// read each other's marks through the flat range; `sync` separates the phases (a thread
/// barrier, or window registration across processes).
fn round(c: &Comm, sync: &dyn Fn()) {
    let (r, n) = (c.rank(), c.count());
    let sizes = [2 * MIB, 4 * MIB + (r as usize % 2) * 2 * MIB, 2 * MIB];
    let blocks: Vec<u64> = sizes.iter().map(|&b| c.mem_alloc(b).unwrap()).collect();
    // Each rank's own words, written through its mem_alloc pointers before registering.
    for (k, &b) in blocks.iter().enumerate() {
        put(c, b + 8, mark(r, r, k as u64));
    }
    let segs: Vec<(u64, usize)> = blocks.iter().copied().zip(sizes).collect();
    let w = c.register_window_segments(&segs, WIN_COLL_SYMMETRIC).unwrap();
    let offs: Vec<u64> = w.segments().iter().map(|s| s.offset).collect();
    assert_eq!(
        offs,
        vec![0, 2 * MIB as u64, (2 * MIB + sizes[1]) as u64],
        "rank {r}"
    );
    assert_eq!(w.desc().stride % (2 * MIB as u64), 0);
    for q in 0..n {
        let qsizes = [2 * MIB, 4 * MIB + (q as usize % 2) * 2 * MIB, 2 * MIB];
        let qoffs = [0, 2 * MIB, 2 * MIB + qsizes[1]];
        for (k, &o) in qoffs.iter().enumerate() {
            let p = w.lsa_ptr(q, o + 8).unwrap();
            assert_eq!(
                get(c, p),
                mark(q, q, k as u64),
                "rank {r} reading peer {q} segment {k}"
            );
        }
        put(c, w.lsa_ptr(q, 8 * (2 + r as usize)).unwrap(), mark(r, q, 9));
        assert!(w.lsa_ptr(q, qoffs[2] + 2 * MIB).is_err());
    }
    assert_eq!(
        c.find_window_for_tests(blocks[1] + 64, 8).map(|f| f.1),
        Some(2 * MIB as u64 + 64)
    );
    sync();
    for s in 0..n {
        assert_eq!(
            get(c, blocks[0] + 8 * (2 + s as u64)),
            mark(s, r, 9),
            "rank {r} from {s}"
        );
    }
    c.deregister_window(w).unwrap();
    // A sub-range starting 4 KiB into the second block (whole blocks are mapped on the
    // GPU: the window starts 4 KiB into its slot).
    let w = c.register_window(blocks[1] + 4096, 8192, 0).unwrap();
    assert_eq!(w.size(), 8192);
    let peer = (r + 1) % n;
    put(c, w.lsa_ptr(peer, 16).unwrap(), mark(r, peer, 5));
    sync();
    let from = (r + n - 1) % n;
    assert_eq!(get(c, blocks[1] + 4096 + 16), mark(from, r, 5), "rank {r}");
    drop(w);
    // A device communicator: zeroed resource memory on every peer.
    let mut reqs = DevCommRequirements::new();
    reqs.resource_bytes = 3000;
    reqs.lsa_barrier_count = 2;
    let h = c.dev_comm_create(&reqs).unwrap();
    let d = h.dev_comm();
    assert_eq!((d.lsa_barrier_offset, d.lsa_size), (3072, n));
    for q in 0..n {
        let b = get_block(
            c,
            h.resource_window().unwrap().lsa_ptr(q, 0).unwrap(),
            d.resource.size as usize,
        );
        assert!(
            b.iter().all(|&x| x == 0),
            "rank {r}: peer {q}'s resources not zero"
        );
    }
    c.dev_comm_destroy(h).unwrap();
    for b in blocks {
        // SAFETY: ours, no window maps it any more.
        unsafe { c.mem_free(b).unwrap() };
    }
}

#[test]
fn threads_on_the_gpus() {
    let Some(g) = gpu() else { return };
    let count = g.device_count();
    for n in [1, 2, 4] {
        let devices: Vec<usize> = (0..n).map(|i| i % count).collect();
        let comms = Comm::init_all_with_bootstrap(g.clone(), &devices, Config::default(), &boot()).unwrap();
        let bar = Barrier::new(n);
        std::thread::scope(|s| {
            for c in &comms {
                let bar = &bar;
                s.spawn(move || {
                    round(c, &|| {
                        bar.wait();
                    })
                });
            }
        });
        println!("{n} ranks on devices {devices:?}: ok");
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Across processes the phases are separated by registering (and dropping) a small
/// window: a collective exchange.
fn process_round(c: &Comm) {
    let p = c.mem_alloc(2 * MIB).unwrap();
    let sync = || drop(c.register_window(p, 4096, 0).unwrap());
    round(c, &sync);
    // SAFETY: ours, no window maps it.
    unsafe { c.mem_free(p).unwrap() };
}

#[test]
fn two_processes_on_one_gpu() {
    let Some(g) = gpu() else { return };
    if let Ok(id) = std::env::var(CHILD_ID) {
        let id = UniqueId::from_bytes(&unhex(&id)).unwrap();
        let r: u32 = std::env::var(CHILD_RANK).unwrap().parse().unwrap();
        let c = Comm::init_rank_with(g, 2, &id, r, 0, Config::default(), &boot()).unwrap();
        process_round(&c);
        return;
    }
    let (id, root) = UniqueId::with_config(Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), &boot()).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "two_processes_on_one_gpu",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ID, hex(&id.to_bytes()))
        .env(CHILD_RANK, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c = Comm::init_rank_with(g, 2, &id, 0, 0, Config::default(), &boot()).unwrap();
    root.wait().unwrap();
    assert!(c.spans_processes());
    process_round(&c);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("two processes: ok");
}
