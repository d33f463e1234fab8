//! Broadcast, reduce, all-gather and reduce-scatter on the CPU backend (the same device code
//! the GPU runs), against the host reference: random rank counts, sizes, data types,
//! operators, roots, in place and out of place; argument checks; a mismatched call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::{check_coll, Case, Coll, Ranks};
use oxccl::{Backend, Comm, Config, DataType, DeviceBuffer, Error, Op, RedOp};
use proptest::prelude::*;

fn ranks_with(n: usize, timeout: Duration) -> Ranks {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let cfg = Config {
        timeout_ns: timeout.as_nanos() as u64,
        ..Config::default()
    };
    Ranks::new(Comm::init_all_with(b, &vec![0; n], cfg).expect("init_all")).expect("streams")
}

fn ranks(n: usize) -> Ranks {
    ranks_with(n, Duration::from_secs(60))
}

fn dtype() -> impl Strategy<Value = DataType> {
    prop::sample::select(DataType::ALL.to_vec())
}

fn red_op() -> impl Strategy<Value = RedOp> {
    prop::sample::select(RedOp::ALL.to_vec())
}

/// Run `coll` twice on one fresh communicator of `n` ranks (epochs advance, inboxes are
/// reused), root `root % n`.
fn run(coll: Coll, n: usize, case: Case, root: usize) {
    let r = ranks(n);
    let root = (root % n) as u32;
    for k in 0..2 {
        let case = Case {
            seed: case.seed.wrapping_add(k),
            ..case
        };
        if let Err(e) = check_coll(&r, coll, case, root) {
            panic!("{} n={n} root={root} {case:?}: {e}", coll.name());
        }
    }
}

fn case(dtype: DataType, red: RedOp, count: usize, in_place: bool, seed: u64) -> Case {
    Case {
        dtype,
        red,
        count,
        in_place,
        seed,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn broadcast_matches_reference(n in 1usize..=8, count in prop_oneof![0usize..40, 40usize..3000],
        dt in dtype(), root in 0usize..8, in_place in any::<bool>(), seed in any::<u64>()) {
        run(Coll::Broadcast, n, case(dt, RedOp::Sum, count, in_place, seed), root);
    }

    #[test]
    fn reduce_matches_reference(n in 1usize..=8, count in prop_oneof![0usize..40, 40usize..3000],
        dt in dtype(), red in red_op(), root in 0usize..8, in_place in any::<bool>(), seed in any::<u64>()) {
        run(Coll::Reduce, n, case(dt, red, count, in_place, seed), root);
    }

    #[test]
    fn all_gather_matches_reference(n in 1usize..=8, count in prop_oneof![0usize..40, 40usize..3000],
        dt in dtype(), in_place in any::<bool>(), seed in any::<u64>()) {
        run(Coll::AllGather, n, case(dt, RedOp::Sum, count, in_place, seed), 0);
    }

    #[test]
    fn reduce_scatter_matches_reference(n in 1usize..=8, count in prop_oneof![0usize..40, 40usize..3000],
        dt in dtype(), red in red_op(), in_place in any::<bool>(), seed in any::<u64>()) {
        run(Coll::ReduceScatter, n, case(dt, red, count, in_place, seed), 0);
    }
}

/// Nine ranks (an in-place all-gather's peers exactly fill the FAN = 8 register slots) and
/// ten (more ranks than fit in registers: the far-address path of every collective).
#[test]
fn nine_and_ten_ranks_every_collective() {
    for n in [9, 10] {
        let r = ranks(n);
        for (i, coll) in Coll::ALL.into_iter().enumerate() {
            for in_place in [false, true] {
                let case = Case {
                    dtype: DataType::Bf16,
                    red: RedOp::Sum,
                    count: 1037,
                    in_place,
                    seed: 40 + i as u64,
                };
                check_coll(&r, coll, case, n as u32 - 1)
                    .unwrap_or_else(|e| panic!("{} n={n} in_place={in_place}: {e}", coll.name()));
            }
        }
    }
}

/// Several MiB per rank for every collective (the chunking of large calls: many grid-stride
/// rounds per thread, 16-byte vectors and an odd tail), 3 and 8 ranks, every element
/// checked.
#[test]
fn several_mib_every_collective() {
    for (n, dtype, red, count) in [
        (3, DataType::F32, RedOp::Sum, 1_000_003),
        (8, DataType::Bf16, RedOp::Max, 1_500_007),
    ] {
        let r = ranks(n);
        for (i, coll) in Coll::ALL.into_iter().enumerate() {
            // Blocked collectives (all-to-all, gather, scatter, all-gather(-v), reduce-scatter)
            // hold n blocks of `count`: keep their whole buffers at several MiB too.
            let count = if coll.is_blocked() { count / 2 } else { count };
            let case = Case {
                dtype,
                red,
                count,
                in_place: i % 2 == 1,
                seed: 7000 + i as u64,
            };
            check_coll(&r, coll, case, (i % n) as u32)
                .unwrap_or_else(|e| panic!("{} n={n} {}: {e}", coll.name(), dtype.name()));
        }
    }
}

/// The collectives back to back on one communicator, mixed with all-reduces.
#[test]
fn mixed_sequence_on_one_communicator() {
    let r = ranks(3);
    let mut seed = 100;
    for dt in [DataType::F32, DataType::I8, DataType::F8E5M2] {
        for coll in Coll::ALL {
            seed += 1;
            let case = Case {
                dtype: dt,
                red: RedOp::Max,
                count: 517,
                in_place: seed % 2 == 0,
                seed,
            };
            check_coll(&r, coll, case, (seed % 3) as u32)
                .unwrap_or_else(|e| panic!("{} {}: {e}", coll.name(), dt.name()));
        }
    }
}

/// Rank 0 broadcasts from root 0, rank 1 from root 1: both report a mismatch naming the
/// other rank, and nobody hangs.
#[test]
fn different_roots_are_a_mismatch() {
    let r = ranks_with(2, Duration::from_secs(30));
    let bufs: Vec<_> = r
        .comms
        .iter()
        .map(|c| DeviceBuffer::alloc(c.backend(), c.device(), 256).unwrap())
        .collect();
    let mut bufs = bufs;
    let t0 = Instant::now();
    for (rank, b) in bufs.iter_mut().enumerate() {
        r.comms[rank]
            .broadcast_in_place(b, 64, DataType::F32, rank as u32, &r.streams[rank])
            .unwrap();
    }
    for rank in 0..2 {
        r.comms[rank].backend().synchronize(&r.streams[rank]).unwrap();
        match r.comms[rank].async_error() {
            Err(Error::Mismatch {
                op,
                rank: me,
                peer,
                ours,
                theirs,
                ..
            }) => {
                assert_eq!(op, "broadcast");
                assert_eq!(me, rank as u32);
                assert_eq!(peer, 1 - rank as u32);
                assert_eq!(ours, format!("broadcast of 64 x f32 from root {rank}"));
                assert_eq!(theirs, format!("broadcast of 64 x f32 from root {}", 1 - rank));
            }
            other => panic!("rank {rank}: expected a mismatch, got {other:?}"),
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
}

/// A broadcast on one rank against a reduce on the other: different collectives.
#[test]
fn different_collectives_are_a_mismatch() {
    let r = ranks_with(2, Duration::from_secs(30));
    let mut bufs: Vec<_> = r
        .comms
        .iter()
        .map(|c| DeviceBuffer::alloc(c.backend(), c.device(), 256).unwrap())
        .collect();
    let (b0, b1) = bufs.split_at_mut(1);
    r.comms[0]
        .broadcast_in_place(&mut b0[0], 64, DataType::F32, 0, &r.streams[0])
        .unwrap();
    r.comms[1]
        .reduce_in_place(&mut b1[0], 64, DataType::F32, Op::Sum, 0, &r.streams[1])
        .unwrap();
    let calls = [
        "broadcast of 64 x f32 from root 0",
        "reduce of 64 x f32 with sum to root 0",
    ];
    for rank in 0..2 {
        r.comms[rank].backend().synchronize(&r.streams[rank]).unwrap();
        match r.comms[rank].async_error() {
            Err(Error::Mismatch { ours, theirs, .. }) => {
                assert_eq!(ours, calls[rank]);
                assert_eq!(theirs, calls[1 - rank]);
            }
            other => panic!("rank {rank}: expected a mismatch, got {other:?}"),
        }
    }
}

/// Host-side argument checks: roots out of range and short buffers are typed errors that
/// name the operation and the rank.
#[test]
fn invalid_arguments() {
    let r = ranks(2);
    let c = &r.comms[1];
    let s = &r.streams[1];
    let mut small = DeviceBuffer::alloc(c.backend(), c.device(), 16).unwrap();
    let big = DeviceBuffer::alloc(c.backend(), c.device(), 4096).unwrap();
    let e = c
        .broadcast_in_place(&mut small, 1, DataType::F32, 2, s)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "broadcast",
                rank: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("root 2"), "{e}");
    let e = c
        .reduce_in_place(&mut small, 1, DataType::F32, Op::Sum, 7, s)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "reduce",
                rank: 1,
                ..
            }
        ),
        "{e}"
    );
    // All-gather output must hold nranks * sendcount.
    let e = c.all_gather(&big, &mut small, 4, DataType::F32, s).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "all_gather", .. }),
        "{e}"
    );
    // Reduce-scatter input must hold nranks * recvcount.
    let mut out = DeviceBuffer::alloc(c.backend(), c.device(), 16).unwrap();
    let e = c
        .reduce_scatter(&small, &mut out, 4, DataType::F32, Op::Sum, s)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "reduce_scatter",
                ..
            }
        ),
        "{e}"
    );
}
