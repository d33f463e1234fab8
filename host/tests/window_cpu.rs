//! Symmetric memory windows and device communicators on the CPU backend: ranks as threads
//! (`init_all`, 1..8 ranks) and as separate processes (the test binary re-runs itself as
//! child processes, as `procs_cpu.rs` does), registering windows over `mem_alloc` memory,
//! writing through the flat range into peers' copies and reading back through their own
//! `mem_alloc` pointers (the flat range aliases the same memory).
//!
//! The pattern check (`pattern_round`) works without any barrier beyond the window calls:
//! each rank fills its own memory before registering (registration is collective, so every
//! peer's fill is visible after it), reads every peer's copy through the window, writes a
//! word into every peer's copy, and deregisters (collective: every rank wrote before any
//! returns) before reading its own memory back.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use oxccl::backend::cpu::CpuBackend;
use oxccl::bootstrap::{self, UniqueId};
use oxccl::window::{DevCommRequirements, Segment, WIN_COLL_SYMMETRIC, WIN_DEFAULT, WIN_STRICT_ORDERING};
use oxccl::{Backend, Comm, Config, Error};

const PAGE: usize = 4096;
const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const CHILD_ID: &str = "OXCCL_WINDOW_TEST_ID";
const CHILD_RANKS: &str = "OXCCL_WINDOW_TEST_RANKS";
const CHILD_N: &str = "OXCCL_WINDOW_TEST_N";

fn cpu() -> Arc<dyn Backend> {
    Arc::new(CpuBackend::new())
}

fn boot_config() -> bootstrap::Config {
    bootstrap::Config::default().with_timeout(Duration::from_secs(30))
}

fn init(n: usize) -> Vec<Comm> {
    let devices: Vec<usize> = (0..n).collect();
    Comm::init_all_with_bootstrap(cpu(), &devices, Config::default(), &boot_config()).unwrap()
}

/// Run `f` on every rank, each on its own thread; results in rank order.
fn on_ranks<T: Send>(comms: &[Comm], f: impl Fn(&Comm) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
    })
}

fn read_u64(addr: u64) -> u64 {
    // SAFETY: the tests only read mapped window memory or mem_alloc memory they own.
    unsafe { std::ptr::read_volatile(addr as *const u64) }
}

fn write_u64(addr: u64, v: u64) {
    // SAFETY: as in `read_u64`.
    unsafe { std::ptr::write_volatile(addr as *mut u64, v) }
}

/// The word of rank `q`'s pattern at window offset `o`.
fn pattern(q: u32, o: u64) -> u64 {
    (0x5a00_0000_0000_0000 | (q as u64) << 40) + o / 8
}

/// The word rank `from` writes into rank `to`'s copy.
fn mark(from: u32, to: u32) -> u64 {
    0xab00_0000_0000_0000 | (from as u64) << 20 | to as u64
}

/// Segment sizes of rank `r` (different sizes, and different across ranks; page multiples
/// so that the window is the exact concatenation).
fn seg_sizes(r: u32) -> Vec<usize> {
    vec![PAGE * (1 + r as usize % 3), 2 * PAGE, PAGE * (1 + r as usize % 2)]
}

fn window_size(r: u32) -> u64 {
    seg_sizes(r).iter().sum::<usize>() as u64
}

/// Fill each segment with this rank's pattern by window offset, through the user pointers.
fn fill(rank: u32, segs: &[Segment]) {
    for s in segs {
        for k in 0..s.len / 8 {
            write_u64(s.addr + 8 * k as u64, pattern(rank, s.offset + 8 * k as u64));
        }
    }
}

/// The pattern round on a window of `segs` (see the module doc); `Err` describes the first
/// wrong word.
fn pattern_round(c: &Comm, segs: &[(u64, usize)], size_of: impl Fn(u32) -> u64) -> Result<(), String> {
    let (r, n) = (c.rank(), c.count());
    // Fill first (the window's segment offsets are known only after registration, but for
    // page-multiple segments they are the running sums).
    let mut off = 0u64;
    let planned: Vec<Segment> = segs
        .iter()
        .map(|&(addr, len)| {
            let s = Segment {
                addr,
                len,
                offset: off,
            };
            off += len as u64;
            s
        })
        .collect();
    fill(r, &planned);
    let w = c
        .register_window_segments(segs, WIN_COLL_SYMMETRIC)
        .map_err(|e| e.to_string())?;
    let d = w.desc();
    // Each planned segment lies where planned (a segment over several blocks is cut into
    // parts, which follow each other in the window).
    for p in &planned {
        if c.find_window_for_tests(p.addr, p.len) != Some((d, p.offset)) {
            return Err(format!(
                "segment {p:?} not found where planned in {:?}",
                w.segments()
            ));
        }
    }
    if (d.rank, d.nranks, d.size) != (r, n, size_of(r)) {
        return Err(format!("desc {d:?}"));
    }
    if d.stride % PAGE as u64 != 0 || d.stride < (0..n).map(&size_of).max().unwrap() {
        return Err(format!(
            "stride {} for sizes up to {}",
            d.stride,
            (0..n).map(&size_of).max().unwrap()
        ));
    }
    for q in 0..n {
        if w.peer_size(q) != Some(size_of(q) as usize) {
            return Err(format!("peer {q} size {:?}", w.peer_size(q)));
        }
        // Words below 8 * n take the other ranks' marks concurrently.
        for o in (8 * n as u64..size_of(q)).step_by(8) {
            let p = w.lsa_ptr(q, o as usize).map_err(|e| e.to_string())?;
            let arith = d
                .local
                .wrapping_add((q as i64 - r as i64).wrapping_mul(d.stride as i64) as u64)
                + o;
            if p != arith || w.world_ptr(q, o as usize).ok() != Some(p) {
                return Err(format!(
                    "peer {q} offset {o}: lsa_ptr {p:#x}, desc arithmetic {arith:#x}"
                ));
            }
            let got = read_u64(p);
            if got != pattern(q, o) {
                return Err(format!(
                    "rank {r} reading peer {q} at offset {o}: {got:#x}, expected {:#x}",
                    pattern(q, o)
                ));
            }
        }
        let e = w.lsa_ptr(q, size_of(q) as usize).unwrap_err();
        if !matches!(e, Error::WindowBounds { .. }) {
            return Err(format!("out of bounds: {e}"));
        }
        write_u64(w.lsa_ptr(q, 8 * r as usize).unwrap(), mark(r, q));
    }
    if c.find_window_for_tests(segs[0].0, 8) != Some((d, 0)) {
        return Err("find_window of the first segment".into());
    }
    let last = planned.last().unwrap();
    let found = c.find_window_for_tests(last.addr + 8, 16);
    if found != Some((d, last.offset + 8)) {
        return Err(format!("find_window of the last segment: {found:?}"));
    }
    c.deregister_window(w).map_err(|e| e.to_string())?;
    if c.find_window_for_tests(segs[0].0, 8).is_some() {
        return Err("find_window after deregistration".into());
    }
    // Every rank's mark is in this rank's own memory; the rest is still the pattern.
    for s in 0..n {
        let got = read_u64(segs[0].0 + 8 * s as u64);
        if got != mark(s, r) {
            return Err(format!(
                "rank {r} word {s}: {got:#x}, expected rank {s}'s mark {:#x}",
                mark(s, r)
            ));
        }
    }
    for p in &planned {
        for k in 0..p.len / 8 {
            let o = p.offset + 8 * k as u64;
            if o >= 8 * n as u64 && read_u64(p.addr + 8 * k as u64) != pattern(r, o) {
                return Err(format!("rank {r} offset {o} changed"));
            }
        }
    }
    Ok(())
}

/// One rank's multi-segment round: three `mem_alloc` blocks of `seg_sizes`.
fn segments_round(c: &Comm) -> Result<(), String> {
    let sizes = seg_sizes(c.rank());
    let segs: Vec<(u64, usize)> = sizes.iter().map(|&b| (c.mem_alloc(b).unwrap(), b)).collect();
    let r = pattern_round(c, &segs, window_size);
    for (p, _) in segs {
        // SAFETY: ours, the window is gone.
        unsafe { c.mem_free(p).unwrap() };
    }
    r
}

/// A device communicator round: layout, zeroed memory, abort flag, destroy.
fn dev_comm_round(c: &Comm) -> Result<(), String> {
    let mut reqs = DevCommRequirements::new();
    reqs.resource_bytes = 1000;
    reqs.lsa_barrier_count = 3;
    let h = c.dev_comm_create(&reqs).map_err(|e| e.to_string())?;
    let d = h.dev_comm();
    let n = c.count();
    let lines = 3 * n as u64 * 8;
    let epochs = 1024 + lines.div_ceil(128) * 128;
    let ok = d.rank == c.rank()
        && d.nranks == n
        && (d.lsa_rank, d.lsa_size) == (c.rank(), n)
        && d.lsa_barrier_offset == 1024
        && d.lsa_epoch_offset == epochs
        && d.lsa_barrier_count == 3
        && d.gin_type == oxccl::window::GIN_TYPE_NONE
        && d.resource.size == epochs + 24
        && d.resource.flags == WIN_COLL_SYMMETRIC
        && d.abort_flag != 0
        && d.timeout_ns == c.config().timeout_ns;
    if !ok {
        return Err(format!("dev comm {d:?}"));
    }
    for q in 0..n {
        let base = h.resource_window().unwrap().lsa_ptr(q, 0).unwrap();
        if let Some(o) = (0..d.resource.size).step_by(8).find(|&o| read_u64(base + o) != 0) {
            return Err(format!("peer {q}'s resource memory not zero at {o}"));
        }
    }
    c.dev_comm_destroy(h).map_err(|e| e.to_string())
}

#[test]
fn threads_write_peers_copies_and_read_back_their_own_memory() {
    for n in 1..=8 {
        let comms = init(n);
        let res = on_ranks(&comms, |c| {
            let p = c.mem_alloc(3 * PAGE).unwrap();
            let r = pattern_round(c, &[(p, 3 * PAGE)], |_| 3 * PAGE as u64);
            // SAFETY: ours, the window is gone.
            unsafe { c.mem_free(p).unwrap() };
            r
        });
        for (r, e) in res.into_iter().enumerate() {
            e.unwrap_or_else(|e| panic!("{n} ranks, rank {r}: {e}"));
        }
    }
}

#[test]
fn multi_segment_windows_with_unequal_sizes() {
    for n in [1, 2, 3, 5] {
        let comms = init(n);
        for (r, e) in on_ranks(&comms, segments_round).into_iter().enumerate() {
            e.unwrap_or_else(|e| panic!("{n} ranks, rank {r}: {e}"));
        }
    }
}

#[test]
fn unaligned_segments_start_at_the_next_granule() {
    let comms = init(2);
    let res = on_ranks(&comms, |c| {
        let a = c.mem_alloc(PAGE).unwrap();
        let b = c.mem_alloc(2 * PAGE).unwrap();
        let w = c
            .register_window_segments(&[(a, 100), (b + PAGE as u64, 200)], WIN_DEFAULT)
            .unwrap();
        let segs = w.segments().to_vec();
        assert_eq!(
            segs[0],
            Segment {
                addr: a,
                len: 100,
                offset: 0
            }
        );
        // b's piece is its second page: the segment starts at the window's second page.
        assert_eq!(
            segs[1],
            Segment {
                addr: b + PAGE as u64,
                len: 200,
                offset: PAGE as u64
            }
        );
        assert_eq!(w.size(), PAGE + 200);
        assert_eq!(w.desc().stride, 2 * PAGE as u64);
        write_u64(b + PAGE as u64 + 8, 77 + c.rank() as u64);
        let peer = 1 - c.rank();
        assert_eq!(
            c.find_window_for_tests(b + PAGE as u64 + 8, 8).map(|f| f.1),
            Some(PAGE as u64 + 8)
        );
        // A range running past the segment's end is not in the window.
        assert!(c.find_window_for_tests(b + PAGE as u64 + 8, 200).is_none());
        c.deregister_window(w).unwrap();
        // SAFETY: ours, no window maps them.
        unsafe {
            c.mem_free(a).unwrap();
            c.mem_free(b).unwrap();
        }
        peer
    });
    assert_eq!(res, vec![1, 0]);
}

/// A page of ordinary (not `mem_alloc`) memory, wherever the kernel places it.
fn guard_page() -> u64 {
    use rustix::mm::{mmap_anonymous, MapFlags, ProtFlags};
    // SAFETY: a fresh private mapping the kernel places; nothing else uses it.
    unsafe { mmap_anonymous(std::ptr::null_mut(), PAGE, ProtFlags::READ, MapFlags::PRIVATE) }.unwrap() as u64
}

fn unmap_guard(p: u64) {
    // SAFETY: a page `guard_page` mapped.
    unsafe { rustix::mm::munmap(p as *mut _, PAGE).unwrap() };
}

/// Two adjacent `bytes`-sized `mem_alloc` blocks followed directly by a page of ordinary
/// memory that we own. The registry is one per process and other tests allocate
/// concurrently, so only a mapping of our own proves that the memory after a block is not
/// from `mem_alloc`. The kernel places consecutive mappings next to each other as a rule,
/// below the previous one (top-down layout) or above it (the legacy bottom-up layout), so a
/// guard page is mapped before and after the two blocks and the one that follows them is
/// kept; retried until one does.
fn adjacent_pair_then_guard(c: &Comm, bytes: usize) -> (u64, u64, u64) {
    let mut spare = Vec::new();
    let mut guards = Vec::new();
    let found = (0..64).find_map(|_| {
        let before = guard_page();
        let a = c.mem_alloc(bytes).unwrap();
        let b = c.mem_alloc(bytes).unwrap();
        let after = guard_page();
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let end = hi + bytes as u64;
        if lo + bytes as u64 == hi && (end == before || end == after) {
            guards.push(if end == before { after } else { before });
            return Some((lo, hi, end));
        }
        spare.extend([a, b]);
        guards.extend([before, after]);
        None
    });
    for p in spare {
        // SAFETY: unused blocks of ours.
        unsafe { c.mem_free(p).unwrap() };
    }
    for g in guards {
        unmap_guard(g);
    }
    found.expect("no guard page directly after two adjacent mem_alloc blocks in 64 tries")
}

#[test]
fn a_range_spanning_two_allocations_is_one_window() {
    let comms = init(3);
    let pairs: Vec<(u64, u64, u64)> = comms
        .iter()
        .map(|c| adjacent_pair_then_guard(c, 2 * PAGE))
        .collect();
    let res = on_ranks(&comms, |c| {
        let (lo, hi, _) = pairs[c.rank() as usize];
        // The whole of both blocks, then a range from inside the first into the second.
        let whole = pattern_round(c, &[(lo, 4 * PAGE)], |_| 4 * PAGE as u64);
        let inside = pattern_round(c, &[(lo + PAGE as u64, 2 * PAGE)], |_| 2 * PAGE as u64);
        // Running past the second block is refused.
        let past = c.register_window(hi, 2 * PAGE + 8, WIN_DEFAULT).unwrap_err();
        // SAFETY: ours, no window maps them.
        unsafe {
            c.mem_free(lo).unwrap();
            c.mem_free(hi).unwrap();
        }
        (whole, inside, past.to_string())
    });
    for (_, _, g) in pairs {
        unmap_guard(g);
    }
    for (r, (whole, inside, past)) in res.into_iter().enumerate() {
        whole.unwrap_or_else(|e| panic!("rank {r} whole: {e}"));
        inside.unwrap_or_else(|e| panic!("rank {r} inside: {e}"));
        assert!(past.contains("leaves the mem_alloc block"), "rank {r}: {past}");
    }
}

#[test]
fn deregistration_then_reuse_and_drop_without_deregistering() {
    let comms = init(4);
    let res = on_ranks(&comms, |c| {
        let p = c.mem_alloc(PAGE).unwrap();
        for (i, flags) in [WIN_DEFAULT, WIN_COLL_SYMMETRIC, WIN_STRICT_ORDERING]
            .into_iter()
            .enumerate()
        {
            let w = c.register_window(p, PAGE, flags).unwrap();
            assert_eq!(w.flags(), flags);
            let peer = (c.rank() + 1) % c.count();
            write_u64(w.lsa_ptr(peer, 8 * i).unwrap(), mark(c.rank(), peer) + i as u64);
            c.deregister_window(w).unwrap();
        }
        let from = (c.rank() + c.count() - 1) % c.count();
        for i in 0..3 {
            assert_eq!(read_u64(p + 8 * i), mark(from, c.rank()) + i);
        }
        // Dropped without deregistering: unmapped here, no panic; registering again works.
        drop(c.register_window(p, PAGE, WIN_DEFAULT).unwrap());
        assert!(c.find_window_for_tests(p, 8).is_none());
        let w = c.register_window(p, PAGE, WIN_DEFAULT).unwrap();
        assert_eq!(c.find_window_for_tests(p, 8).map(|f| f.1), Some(0));
        c.deregister_window(w).unwrap();
        // SAFETY: ours, no window maps it.
        unsafe { c.mem_free(p).unwrap() };
    });
    assert_eq!(res.len(), 4);
}

#[test]
fn a_window_outlives_mem_free_and_its_communicator() {
    let comms = init(2);
    let ws = on_ranks(&comms, |c| {
        let p = c.mem_alloc(PAGE).unwrap();
        write_u64(p, 1000 + c.rank() as u64);
        let w = c.register_window(p, PAGE, WIN_DEFAULT).unwrap();
        // SAFETY: nothing uses `p` any more; the window keeps the memory mapped.
        unsafe { c.mem_free(p).unwrap() };
        w
    });
    drop(comms);
    for (r, w) in ws.iter().enumerate() {
        for q in 0..2 {
            assert_eq!(read_u64(w.lsa_ptr(q, 0).unwrap()), 1000 + q as u64, "rank {r}");
        }
    }
    drop(ws);
}

#[test]
fn foreign_memory_is_refused_on_every_rank() {
    let comms = init(2);
    let res = on_ranks(&comms, |c| {
        let v = vec![0u64; 1024];
        let own = c.mem_alloc(PAGE).unwrap();
        let addr = if c.rank() == 1 { v.as_ptr() as u64 } else { own };
        let e = c.register_window(addr, PAGE, WIN_DEFAULT).unwrap_err();
        // SAFETY: ours, never registered.
        unsafe { c.mem_free(own).unwrap() };
        (e, addr)
    });
    let (e1, addr) = &res[1];
    assert!(matches!(e1, Error::NotWindowMemory { rank: 1, .. }), "{e1}");
    let m = e1.to_string();
    assert!(
        m.contains("register_window on rank 1")
            && m.contains(&format!("{addr:#x}"))
            && m.contains("mem_alloc"),
        "{m}"
    );
    let e0 = res[0].0.to_string();
    assert!(matches!(res[0].0, Error::Window { peer: 1, .. }), "{e0}");
    assert!(e0.contains("rank 1 failed"), "{e0}");
}

#[test]
fn bad_ranges_flags_and_frees_are_errors() {
    let c = init(1).pop().unwrap();
    let p = c.mem_alloc(100).unwrap();
    assert_eq!(p % PAGE as u64, 0);
    let e = c
        .register_window(p, PAGE + 1, WIN_DEFAULT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("leaves the mem_alloc block"), "{e}");
    let e = c.register_window(p, 0, WIN_DEFAULT).unwrap_err().to_string();
    assert!(e.contains("empty"), "{e}");
    let e = c.register_window(p, PAGE, 0x80).unwrap_err().to_string();
    assert!(e.contains("unknown window flags"), "{e}");
    let e = c
        .register_window_segments(&[], WIN_DEFAULT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no segments"), "{e}");
    // SAFETY: not a block start: refused, nothing freed.
    let e = unsafe { c.mem_free(p + 8) }.unwrap_err().to_string();
    assert!(
        e.contains("mem_free on rank 0") && e.contains("not the start"),
        "{e}"
    );
    let w = c.register_window(p, 64, WIN_DEFAULT).unwrap();
    assert_eq!(w.size(), 64);
    assert!(matches!(
        w.lsa_ptr(0, 64),
        Err(Error::WindowBounds {
            peer: 0,
            offset: 64,
            size: 64,
            ..
        })
    ));
    assert!(w
        .lsa_ptr(1, 0)
        .unwrap_err()
        .to_string()
        .contains("not in the LSA team"));
    assert!(w.world_ptr(3, 0).is_err());
    assert_eq!(w.local_ptr(8), w.lsa_ptr(0, 8).unwrap());
    c.deregister_window(w).unwrap();
    // SAFETY: ours, no window maps it.
    unsafe { c.mem_free(p).unwrap() };
    // SAFETY: already freed: refused.
    let e = unsafe { c.mem_free(p) }.unwrap_err().to_string();
    assert!(e.contains("not the start of a live mem_alloc block"), "{e}");
    let e = c.register_window(p, 64, WIN_DEFAULT).unwrap_err().to_string();
    assert!(e.contains("not allocated by mem_alloc"), "{e}");
    // A window of another communicator.
    let other = init(1).pop().unwrap();
    let q = other.mem_alloc(PAGE).unwrap();
    let w = other.register_window(q, PAGE, WIN_DEFAULT).unwrap();
    let e = c.deregister_window(w).unwrap_err().to_string();
    assert!(e.contains("another communicator"), "{e}");
}

#[test]
fn device_communicators_have_their_layout() {
    for n in [1, 2, 4] {
        let comms = init(n);
        for (r, e) in on_ranks(&comms, dev_comm_round).into_iter().enumerate() {
            e.unwrap_or_else(|e| panic!("{n} ranks, rank {r}: {e}"));
        }
        // Dropped without destroy: unmapped and freed locally.
        drop(on_ranks(&comms, |c| {
            c.dev_comm_create(&DevCommRequirements::new()).unwrap()
        }));
        if n == 1 {
            // The abort flag of the device communicator is the one Comm::abort raises.
            let h = comms[0].dev_comm_create(&DevCommRequirements::new()).unwrap();
            let flag = h.dev_comm().abort_flag;
            assert_eq!(read_u64(flag) as u32, 0);
            comms[0].abort();
            assert_eq!(read_u64(flag) as u32, 1);
            drop(h);
        }
    }
}

#[test]
fn device_communicator_requirements_errors() {
    let comms = init(2);
    let res = on_ranks(&comms, |c| {
        let mut newer = DevCommRequirements::new();
        newer.version += 1;
        let v = c.dev_comm_create(&newer).unwrap_err();
        let mut gin = DevCommRequirements::new();
        gin.gin_signal_count = 4;
        let g = c.dev_comm_create(&gin).unwrap_err();
        let mut bad = DevCommRequirements::new();
        bad.magic = 1;
        let m = c.dev_comm_create(&bad).unwrap_err();
        // A caller whose struct is larger (same version) is read by its prefix.
        let mut big = [0u8; 64];
        let mut r = DevCommRequirements::new();
        r.resource_bytes = 256;
        big[0..8].copy_from_slice(&64u64.to_le_bytes());
        big[8..12].copy_from_slice(&r.magic.to_le_bytes());
        big[12..16].copy_from_slice(&r.version.to_le_bytes());
        big[16..24].copy_from_slice(&r.resource_bytes.to_le_bytes());
        let h = c.dev_comm_create_from_bytes(&big).unwrap();
        assert_eq!(h.dev_comm().lsa_barrier_offset, 256);
        c.dev_comm_destroy(h).unwrap();
        // A caller built against version 1 (40 bytes, before lsa_multimem) keeps working.
        let mut v1 = [0u8; 40];
        v1[0..8].copy_from_slice(&40u64.to_le_bytes());
        v1[8..12].copy_from_slice(&r.magic.to_le_bytes());
        v1[12..16].copy_from_slice(&1u32.to_le_bytes());
        v1[16..24].copy_from_slice(&512u64.to_le_bytes());
        v1[24..28].copy_from_slice(&1u32.to_le_bytes());
        let h = c.dev_comm_create_from_bytes(&v1).unwrap();
        assert_eq!(
            (h.dev_comm().lsa_barrier_offset, h.dev_comm().lsa_barrier_count),
            (512, 1)
        );
        c.dev_comm_destroy(h).unwrap();
        // Multimem (version 2's lsa_multimem) is refused: no multicast object here.
        let mut mm = DevCommRequirements::new();
        mm.lsa_multimem = 1;
        let mm = c.dev_comm_create(&mm).unwrap_err();
        assert!(
            matches!(mm, Error::Unsupported { .. }) && mm.to_string().contains("multimem"),
            "{mm}"
        );
        // Ranks asking for different requirements all fail.
        let mut mine = DevCommRequirements::new();
        mine.resource_bytes = 128 * (1 + c.rank() as u64);
        let d = c.dev_comm_create(&mine).unwrap_err();
        (v, g, m, d)
    });
    for (v, g, m, d) in res {
        assert!(
            matches!(v, Error::LayoutVersion { .. }) && v.to_string().contains("newer"),
            "{v}"
        );
        assert!(
            matches!(g, Error::Unsupported { .. }) && g.to_string().contains("GIN"),
            "{g}"
        );
        assert!(m.to_string().contains("magic"), "{m}");
        assert!(d.to_string().contains("other requirements"), "{d}");
    }
}

#[test]
fn a_registration_without_its_peers_times_out_or_is_aborted() {
    let boot = bootstrap::Config::default().with_timeout(Duration::from_millis(300));
    let comms = Comm::init_all_with_bootstrap(cpu(), &[0, 1], Config::default(), &boot).unwrap();
    let p = comms[0].mem_alloc(PAGE).unwrap();
    let t = std::time::Instant::now();
    let e = comms[0].register_window(p, PAGE, WIN_DEFAULT).unwrap_err();
    assert!(
        matches!(&e, Error::ControlTimeout { rank: 0, missing, .. } if missing == &[1]),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    // Aborted from another rank's thread: returns within the poll interval.
    let comms = init(2);
    let p2 = comms[0].mem_alloc(PAGE).unwrap();
    let t = std::time::Instant::now();
    let e = std::thread::scope(|s| {
        let h = s.spawn(|| comms[0].register_window(p2, PAGE, WIN_DEFAULT));
        std::thread::sleep(Duration::from_millis(50));
        comms[1].abort();
        h.join().unwrap().unwrap_err()
    });
    assert!(matches!(e, Error::Aborted { rank: 0, .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    // SAFETY: ours, never registered.
    unsafe {
        comms[0].mem_free(p).unwrap();
        comms[0].mem_free(p2).unwrap();
    }
}

#[test]
fn properties() {
    let comms = init(3);
    let p = comms[2].query_properties();
    assert_eq!(
        (p.rank, p.nranks, p.cu_device, p.lsa_size, p.n_lsa_teams),
        (2, 3, 2, 3, 1)
    );
    assert!(p.device_api_support && !p.multimem_support);
    assert_eq!(p.gin_type, oxccl::window::GIN_TYPE_NONE);
}

// ---- ranks in separate processes ----

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Init `ranks` of an `n`-rank communicator in this process, one thread each.
fn init_local(n: u32, id: &UniqueId, ranks: &[u32]) -> Vec<Comm> {
    let hs: Vec<_> = ranks
        .iter()
        .map(|&r| {
            let id = *id;
            std::thread::spawn(move || {
                Comm::init_rank_with(cpu(), n, &id, r, 0, Config::default(), &boot_config())
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
}

/// What every process runs on each of its ranks.
fn process_body(c: &Comm) -> Result<(), String> {
    segments_round(c)?;
    // A single buffer, then the same buffer again (registrations get their own servers).
    let p = c.mem_alloc(2 * PAGE).unwrap();
    pattern_round(c, &[(p, 2 * PAGE)], |_| 2 * PAGE as u64)?;
    pattern_round(c, &[(p, PAGE)], |_| PAGE as u64)?;
    // SAFETY: ours, no window maps it.
    unsafe { c.mem_free(p).unwrap() };
    dev_comm_round(c)
}

/// In a child: run the ranks named by the environment.
fn child() -> bool {
    let Ok(id) = std::env::var(CHILD_ID) else {
        return false;
    };
    let id = UniqueId::from_bytes(&unhex(&id)).unwrap();
    let n: u32 = std::env::var(CHILD_N).unwrap().parse().unwrap();
    let mine: Vec<u32> = std::env::var(CHILD_RANKS)
        .unwrap()
        .split(',')
        .map(|r| r.parse().unwrap())
        .collect();
    let comms = init_local(n, &id, &mine);
    for (c, r) in comms.iter().zip(on_ranks(&comms, process_body)) {
        r.unwrap_or_else(|e| panic!("rank {}: {e}", c.rank()));
    }
    true
}

/// `groups[0]` in this process, each further group in a child re-running test `name`.
fn run_split(name: &str, n: u32, groups: &[&[u32]]) {
    let (id, root) = UniqueId::with_config(Some(LO), &boot_config()).unwrap();
    let children: Vec<_> = groups[1..]
        .iter()
        .map(|g| {
            let ranks: Vec<String> = g.iter().map(|r| r.to_string()).collect();
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--nocapture", "--test-threads=1"])
                .env(CHILD_ID, hex(&id.to_bytes()))
                .env(CHILD_N, n.to_string())
                .env(CHILD_RANKS, ranks.join(","))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let comms = init_local(n, &id, groups[0]);
    root.wait().unwrap();
    assert!(comms.iter().all(|c| c.spans_processes()));
    let mine = on_ranks(&comms, process_body);
    let mut failures = Vec::new();
    for (g, c) in groups[1..].iter().zip(children) {
        let out = c.wait_with_output().unwrap();
        if !out.status.success() {
            failures.push(format!(
                "child with ranks {g:?} failed:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    for (c, r) in comms.iter().zip(mine) {
        r.unwrap_or_else(|e| panic!("rank {}: {e}\n{}", c.rank(), failures.join("\n")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn two_processes_share_windows() {
    if child() {
        return;
    }
    run_split("two_processes_share_windows", 2, &[&[0], &[1]]);
}

#[test]
fn three_processes_with_two_ranks_in_one() {
    if child() {
        return;
    }
    // Ranks 0 and 2 share this process (mapped through the registry), 1 and 3 are alone
    // (mapped through passed descriptors).
    run_split("three_processes_with_two_ranks_in_one", 4, &[&[0, 2], &[1], &[3]]);
}
