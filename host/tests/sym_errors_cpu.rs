//! The symmetric path's failures and where it must not run, on the CPU backend (ranks as
//! threads):
//! - the Simple kernels on collective-symmetric windows with a rank at another offset or in
//!   another window: every rank reports a mismatch naming the placement, and no rank's
//!   output is touched (the entry barrier checks before any peer's copy is reached);
//! - the same calls on default windows, where offsets may differ by rank: the classic
//!   kernels run them, correctly (no symmetric kernel ran);
//! - a symmetric kernel that times out or is aborted names the operation it ran (its
//!   collective, count, type, operator and protocol) and the missing peer, not some earlier
//!   classic collective.
#![allow(clippy::needless_range_loop)] // ranks index parallel vectors

use std::sync::Arc;
use std::time::Duration;

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::Ranks;
use oxccl::window::{Window, WIN_COLL_SYMMETRIC, WIN_DEFAULT};
use oxccl::{verify, Backend, Comm, Config, DataType, Error, Op, RedOp};

const COUNT: usize = 256;
const BYTES: usize = COUNT * 4;
const POISON: u8 = 0xA5;

fn ranks(n: usize, timeout: Duration) -> Ranks {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let cfg = Config {
        timeout_ns: timeout.as_nanos() as u64,
        ..Config::default()
    };
    Ranks::new(Comm::init_all_with(b, &vec![0; n], cfg).unwrap()).unwrap()
}

/// Per rank: one `mem_alloc` block of `4 * BYTES` registered as one window with `flags`
/// (collective, each rank on its thread).
fn windows(r: &Ranks, flags: u32) -> Vec<(u64, Window)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = r
            .comms
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let p = c.mem_alloc(4 * BYTES).unwrap();
                    (p, c.register_window(p, 4 * BYTES, flags).unwrap())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The sequence slot of rank `c`'s symmetric kernels: how many symmetric ops it ran.
fn sym_ops(c: &Comm) -> u64 {
    let Some((_, state, _)) = c.sym_scratch_for_tests() else {
        return 0;
    };
    let mut b = [0u8; 8];
    c.backend().download(c.device(), &mut b, state).unwrap();
    u64::from_le_bytes(b)
}

/// Rank `r`'s all-reduce of `COUNT` f32 from byte `send` to byte `recv` of its window: the
/// input is uploaded, the output poisoned. Returns the input.
fn stage(r: &Ranks, rank: usize, base: u64, send: u64, recv: u64) -> Vec<u8> {
    let c = &r.comms[rank];
    let input = verify::gen_input(DataType::F32, RedOp::Sum, COUNT, 40 + rank as u64);
    c.backend().upload(c.device(), base + send, &input).unwrap();
    c.backend()
        .upload(c.device(), base + recv, &[POISON; BYTES])
        .unwrap();
    input
}

fn all_reduce(r: &Ranks, rank: usize, base: u64, send: u64, recv: u64) {
    // SAFETY: both ranges lie in the rank's registered window, alive past the sync.
    unsafe {
        r.comms[rank].all_reduce_raw(
            base + send,
            base + recv,
            COUNT,
            DataType::F32,
            Op::Sum,
            &r.streams[rank],
        )
    }
    .unwrap();
}

/// Wait for every rank's stream (its errors are read with `async_error`).
fn drain(r: &Ranks) {
    for (c, s) in r.comms.iter().zip(&r.streams) {
        c.backend().synchronize(s).unwrap();
    }
}

fn download(r: &Ranks, rank: usize, addr: u64) -> Vec<u8> {
    let c = &r.comms[rank];
    let mut out = vec![0u8; BYTES];
    c.backend().download(c.device(), &mut out, addr).unwrap();
    out
}

#[test]
fn simple_kernels_refuse_ranks_at_other_offsets() {
    for (n, setting) in [
        (2, "simple-oneshot"),
        (3, "simple-twoshot"),
        (4, "simple-oneshot"),
    ] {
        let r = ranks(n, Duration::from_secs(20));
        r.set_sym(setting.parse().unwrap());
        let w = windows(&r, WIN_COLL_SYMMETRIC);
        // Rank 1 passes its buffers one buffer further into the window than the others.
        let place = |rank: usize| {
            if rank == 1 {
                (BYTES as u64, 3 * BYTES as u64)
            } else {
                (0, 2 * BYTES as u64)
            }
        };
        for rank in 0..n {
            let (s, o) = place(rank);
            stage(&r, rank, w[rank].0, s, o);
        }
        for rank in 0..n {
            let (s, o) = place(rank);
            all_reduce(&r, rank, w[rank].0, s, o);
        }
        drain(&r);
        for rank in 0..n {
            let e = r.comms[rank].async_error().unwrap_err();
            let msg = e.to_string();
            assert!(
                matches!(e, Error::SymMismatch { op: "all_reduce", .. }),
                "{setting}, {n} ranks, rank {rank}: {msg}"
            );
            assert!(msg.contains("other offsets"), "{msg}");
            // No rank stored anything: every output is still the poison.
            let (_, o) = place(rank);
            let out = download(&r, rank, w[rank].0 + o);
            assert!(
                out.iter().all(|&b| b == POISON),
                "{setting}, rank {rank}: output touched"
            );
        }
        // Rank 0 and the ranks beside it at the same offsets name a peer that differs from
        // them; rank 1 names any peer.
        if let Error::SymMismatch { peer, .. } = r.comms[0].async_error().unwrap_err() {
            assert!(peer < n as u32 && peer != 0);
        }
    }
}

#[test]
fn simple_kernels_refuse_ranks_in_another_window() {
    let r = ranks(2, Duration::from_secs(20));
    r.set_sym("simple-oneshot".parse().unwrap());
    let a = windows(&r, WIN_COLL_SYMMETRIC);
    let b = windows(&r, WIN_COLL_SYMMETRIC);
    // Same offsets, but rank 1's buffers lie in the second window.
    let base = |rank: usize| if rank == 1 { b[1].0 } else { a[0].0 };
    for rank in 0..2 {
        stage(&r, rank, base(rank), 0, 2 * BYTES as u64);
    }
    for rank in 0..2 {
        all_reduce(&r, rank, base(rank), 0, 2 * BYTES as u64);
    }
    drain(&r);
    for rank in 0..2 {
        let msg = r.comms[rank].async_error().unwrap_err().to_string();
        assert!(msg.contains("another window"), "rank {rank}: {msg}");
        let out = download(&r, rank, base(rank) + 2 * BYTES as u64);
        assert!(out.iter().all(|&x| x == POISON), "rank {rank}: output touched");
    }
}

#[test]
fn default_windows_at_other_offsets_run_the_classic_kernels() {
    for setting in ["simple-oneshot", "simple-twoshot"] {
        let r = ranks(3, Duration::from_secs(20));
        r.set_sym(setting.parse().unwrap());
        let w = windows(&r, WIN_DEFAULT);
        let place = |rank: usize| (rank as u64 * 64, BYTES as u64 * 2 + rank as u64 * 128);
        let inputs: Vec<Vec<u8>> = (0..3)
            .map(|rank| {
                let (s, o) = place(rank);
                stage(&r, rank, w[rank].0, s, o)
            })
            .collect();
        for rank in 0..3 {
            let (s, o) = place(rank);
            all_reduce(&r, rank, w[rank].0, s, o);
        }
        r.sync().unwrap();
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        for rank in 0..3 {
            r.comms[rank].async_error().unwrap();
            let out = download(&r, rank, w[rank].0 + place(rank).1);
            verify::check_all_reduce_par(DataType::F32, Op::Sum, &refs, &out, COUNT)
                .unwrap_or_else(|e| panic!("{setting}, rank {rank}: {e}"));
            assert_eq!(sym_ops(&r.comms[rank]), 0, "{setting}: no symmetric kernel ran");
        }
    }
}

#[test]
fn symmetric_timeouts_and_aborts_name_the_operation() {
    for setting in ["lamport", "ll", "simple-oneshot", "lamport-twoshot"] {
        let r = ranks(2, Duration::from_millis(300));
        r.set_sym(setting.parse().unwrap());
        let w = windows(&r, WIN_COLL_SYMMETRIC);
        // A classic collective first, so that a wrong lookup would name it.
        let mut a = oxccl::DeviceBuffer::alloc(r.comms[0].backend(), 0, 64).unwrap();
        let mut b = oxccl::DeviceBuffer::alloc(r.comms[1].backend(), 0, 64).unwrap();
        r.comms[0]
            .all_gather(&a, &mut b, 4, DataType::F32, &r.streams[0])
            .ok();
        r.comms[1]
            .all_gather(&b, &mut a, 4, DataType::F32, &r.streams[1])
            .ok();
        r.sync().unwrap();
        // Rank 1 never calls the all-reduce.
        stage(&r, 0, w[0].0, 0, 2 * BYTES as u64);
        all_reduce(&r, 0, w[0].0, 0, 2 * BYTES as u64);
        drain(&r);
        let e = r.comms[0].async_error().unwrap_err();
        let msg = e.to_string();
        match &e {
            Error::SymTimeout {
                op: "all_reduce",
                rank: 0,
                peer: 1,
                what,
                ..
            } => assert!(what.contains("256 x f32"), "{setting}: {msg}"),
            _ => panic!("{setting}: expected a symmetric timeout, got {msg}"),
        }
        assert!(msg.contains("rank 1"), "{msg}");
    }
    for setting in ["lamport", "simple-twoshot"] {
        let r = ranks(2, Duration::from_secs(600));
        r.set_sym(setting.parse().unwrap());
        let w = windows(&r, WIN_COLL_SYMMETRIC);
        stage(&r, 0, w[0].0, 0, 2 * BYTES as u64);
        all_reduce(&r, 0, w[0].0, 0, 2 * BYTES as u64);
        std::thread::sleep(Duration::from_millis(100));
        r.comms[0].abort();
        r.comms[0].backend().synchronize(&r.streams[0]).unwrap();
        let e = r.comms[0].async_error().unwrap_err();
        assert!(
            matches!(
                e,
                Error::Aborted {
                    op: "all_reduce",
                    rank: 0
                }
            ),
            "{setting}: {e}"
        );
    }
}

#[test]
fn ranks_with_other_mailbox_capacities_refuse_the_window() {
    use oxccl::bootstrap::{self, UniqueId};
    let boot = bootstrap::Config::default().with_timeout(Duration::from_secs(20));
    let lo = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let (id, root) = UniqueId::with_config(Some(lo), &boot).unwrap();
    let hs: Vec<_> = (0..3u32)
        .map(|r| {
            let boot = boot.clone();
            std::thread::spawn(move || {
                let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
                let cfg = Config {
                    sym_ll_max_bytes: if r == 2 { 32768 } else { 16384 },
                    ..Config::default()
                };
                let c = Comm::init_rank_with(b, 3, &id, r, 0, cfg, &boot).unwrap();
                let p = c.mem_alloc(4096).unwrap();
                let e = c.register_window(p, 4096, WIN_COLL_SYMMETRIC).unwrap_err();
                assert!(c.sym_scratch_for_tests().is_none(), "rank {r}: no scratch made");
                e.to_string()
            })
        })
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        let msg = h.join().unwrap();
        assert!(msg.contains("OXCCL_SYM_LL_MAX_BYTES"), "rank {r}: {msg}");
        let other = if r == 2 { "rank 0 16384" } else { "rank 2 32768" };
        assert!(msg.contains(other), "rank {r}: {msg}");
    }
    root.wait().unwrap();
}
