//! Failure paths on the CPU backend: a rank that never joins, abort, mismatched calls. None
//! may hang; each error names the rank and the peer.
#![allow(clippy::needless_range_loop)] // ranks index parallel vectors

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::Ranks;
use oxccl::{Backend, Comm, Config, DataType, DeviceBuffer, Error, Op};

fn ranks(n: usize, timeout: Duration) -> Ranks {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let cfg = Config {
        timeout_ns: timeout.as_nanos() as u64,
        ..Config::default()
    };
    Ranks::new(Comm::init_all_with(b, &vec![0; n], cfg).unwrap()).unwrap()
}

fn bufs(r: &Ranks, bytes: usize) -> Vec<(DeviceBuffer, DeviceBuffer)> {
    r.comms
        .iter()
        .map(|c| {
            (
                DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap(),
                DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap(),
            )
        })
        .collect()
}

#[test]
fn missing_rank_times_out_naming_it() {
    let r = ranks(3, Duration::from_millis(300));
    let mut b = bufs(&r, 64);
    let t0 = Instant::now();
    for rank in 0..2 {
        let (s, o) = &mut b[rank];
        r.comms[rank]
            .all_reduce(s, o, 16, DataType::F32, Op::Sum, &r.streams[rank])
            .unwrap();
    }
    for rank in 0..2 {
        r.comms[rank].backend().synchronize(&r.streams[rank]).unwrap();
        match r.comms[rank].async_error() {
            Err(Error::Timeout { rank: me, peer, .. }) => {
                assert_eq!(me, rank as u32);
                assert_eq!(peer, 2, "the error names the rank that never joined");
            }
            other => panic!("rank {rank}: expected a timeout, got {other:?}"),
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());
    let msg = r.comms[0].async_error().unwrap_err().to_string();
    assert!(msg.contains("rank 2"), "{msg}");
}

#[test]
fn abort_unblocks_every_rank_within_100ms() {
    let r = ranks(4, Duration::from_secs(600));
    let mut b = bufs(&r, 4096);
    // Rank 3 never calls: ranks 0..3 wait in the kernel until the abort.
    for rank in 0..3 {
        let (s, o) = &mut b[rank];
        r.comms[rank]
            .all_reduce(s, o, 1024, DataType::F32, Op::Sum, &r.streams[rank])
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    r.comms[0].abort();
    for rank in 0..3 {
        r.comms[rank].backend().synchronize(&r.streams[rank]).unwrap();
    }
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(100), "abort took {took:?}");
    for rank in 0..3 {
        assert!(
            matches!(r.comms[rank].async_error(), Err(Error::Aborted { .. })),
            "rank {rank}: {:?}",
            r.comms[rank].async_error()
        );
    }
}

#[test]
fn mismatched_counts_are_reported_not_corrupting() {
    let r = ranks(2, Duration::from_secs(2));
    let mut b = bufs(&r, 4096);
    let t0 = Instant::now();
    for rank in 0..2 {
        let count = if rank == 0 { 100 } else { 200 };
        let (s, o) = &mut b[rank];
        r.comms[rank]
            .all_reduce(s, o, count, DataType::F32, Op::Sum, &r.streams[rank])
            .unwrap();
    }
    for rank in 0..2 {
        r.comms[rank].backend().synchronize(&r.streams[rank]).unwrap();
        match r.comms[rank].async_error() {
            Err(e @ Error::Mismatch { .. }) => {
                let Error::Mismatch {
                    rank: me,
                    peer,
                    ref ours,
                    ref theirs,
                    ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!(me, rank as u32);
                assert_eq!(peer, 1 - rank as u32);
                // Each rank says what both called (the tuner picks LL for both sizes).
                let call = |n: u32| format!("all_reduce of {n} x f32 with sum (ll)");
                let (mine, peer_call) = if rank == 0 {
                    (call(100), call(200))
                } else {
                    (call(200), call(100))
                };
                assert_eq!(ours, &mine, "rank {rank}: {e}");
                assert_eq!(theirs, &peer_call, "rank {rank}: {e}");
                let msg = e.to_string();
                assert!(msg.contains(&mine) && msg.contains(&peer_call), "{msg}");
            }
            other => panic!(
                "rank {rank}: expected a mismatch, got {other:?} after {:?}",
                t0.elapsed()
            ),
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "mismatch detection waited {:?}",
        t0.elapsed()
    );
    // The error is sticky: a later, matching call does no work and returns promptly.
    let t1 = Instant::now();
    for rank in 0..2 {
        let (s, o) = &mut b[rank];
        r.comms[rank]
            .all_reduce(s, o, 100, DataType::F32, Op::Sum, &r.streams[rank])
            .unwrap();
    }
    assert!(r.sync().is_err());
    assert!(t1.elapsed() < Duration::from_secs(1), "{:?}", t1.elapsed());
}

#[test]
fn bad_arguments_are_errors() {
    let r = ranks(1, Duration::from_secs(10));
    let c = &r.comms[0];
    let s = DeviceBuffer::alloc(c.backend(), 0, 16).unwrap();
    let mut o = DeviceBuffer::alloc(c.backend(), 0, 16).unwrap();
    let e = c
        .all_reduce(&s, &mut o, 5, DataType::F32, Op::Sum, &r.streams[0])
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // SAFETY: null addresses are rejected before any use.
    let e = unsafe { c.all_reduce_raw(0, o.ptr(), 4, DataType::F32, Op::Sum, &r.streams[0]) }.unwrap_err();
    assert!(e.to_string().contains("null"), "{e}");
    // Zero elements is a no-op, as in NCCL.
    c.all_reduce(&s, &mut o, 0, DataType::F32, Op::Sum, &r.streams[0])
        .unwrap();
    r.sync().unwrap();
}
