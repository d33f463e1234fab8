//! All-to-all, gather, scatter and all-gather-v on the CPU backend (the same device code the
//! GPU runs), bit for bit against the inputs: random rank counts, sizes, data types, roots,
//! in place and out of place, random all-gather-v layouts (zero counts, gaps, blocks out of
//! rank order); argument checks; mismatched calls that must fail without hanging.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::{check_all_gather_v, check_coll, Case, Coll, Ranks};
use oxccl::{Backend, Comm, Config, DataType, DeviceBuffer, Error, RedOp};
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

fn count() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..40, 40usize..2000]
}

fn case(dtype: DataType, count: usize, in_place: bool, seed: u64) -> Case {
    Case {
        dtype,
        red: RedOp::Sum,
        count,
        in_place,
        seed,
    }
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

/// An all-gather-v layout for `n` ranks: counts (often 0), blocks placed in a random rank
/// order with random gaps (often none) before each.
fn v_layout(n: usize) -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    let counts = prop::collection::vec(prop_oneof![Just(0usize), 0usize..2000], n);
    let gaps = prop::collection::vec(prop_oneof![Just(0usize), 0usize..64], n);
    let order = Just((0..n).collect::<Vec<_>>()).prop_shuffle();
    (counts, gaps, order).prop_map(move |(counts, gaps, order)| {
        let mut displs = vec![0; n];
        let mut at = 0;
        for (i, q) in order.into_iter().enumerate() {
            at += gaps[i];
            displs[q] = at;
            at += counts[q];
        }
        (counts, displs)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Out of place and (rejected) in place.
    #[test]
    fn all_to_all_matches_reference(n in 1usize..=8, count in count(), dt in dtype(),
        in_place in prop::bool::weighted(0.2), seed in any::<u64>()) {
        run(Coll::AllToAll, n, case(dt, count, in_place, seed), 0);
    }

    #[test]
    fn gather_matches_reference(n in 1usize..=8, count in count(), dt in dtype(),
        root in 0usize..8, in_place in any::<bool>(), seed in any::<u64>()) {
        run(Coll::Gather, n, case(dt, count, in_place, seed), root);
    }

    #[test]
    fn scatter_matches_reference(n in 1usize..=8, count in count(), dt in dtype(),
        root in 0usize..8, in_place in any::<bool>(), seed in any::<u64>()) {
        run(Coll::Scatter, n, case(dt, count, in_place, seed), root);
    }

    #[test]
    fn all_gather_v_matches_reference((n, (counts, displs)) in (1usize..=8).prop_flat_map(|n| (Just(n), v_layout(n))),
        dt in dtype(), in_place in any::<bool>(), seed in any::<u64>()) {
        let r = ranks(n);
        for k in 0..2 {
            if let Err(e) = check_all_gather_v(&r, dt, &counts, &displs, in_place, seed.wrapping_add(k)) {
                panic!("n={n} {} in_place={in_place} counts={counts:?} displs={displs:?}: {e}", dt.name());
            }
        }
    }
}

/// Nine ranks (an in-place all-gather-v's peers exactly fill the FAN = 8 register slots)
/// and ten (more ranks than fit in registers: the far-address path).
#[test]
fn nine_and_ten_ranks() {
    for n in [9, 10] {
        let r = ranks(n);
        for (i, coll) in [Coll::AllToAll, Coll::Gather, Coll::Scatter, Coll::AllGatherV]
            .into_iter()
            .enumerate()
        {
            for in_place in [false, true] {
                let case = case(DataType::Bf16, 1037, in_place, 70 + i as u64);
                for root in [0, n as u32 - 1] {
                    check_coll(&r, coll, case, root)
                        .unwrap_or_else(|e| panic!("{} n={n} in_place={in_place}: {e}", coll.name()));
                }
            }
        }
    }
}

/// Every collective back to back on one communicator (all-gather-v with a new layout each
/// time), several data types.
#[test]
fn mixed_sequence_on_one_communicator() {
    let r = ranks(4);
    let mut seed = 300;
    for dt in [DataType::F64, DataType::U8, DataType::F16] {
        for coll in Coll::ALL {
            seed += 1;
            let case = Case {
                dtype: dt,
                red: RedOp::Min,
                count: 333,
                in_place: seed % 2 == 0,
                seed,
            };
            check_coll(&r, coll, case, (seed % 4) as u32)
                .unwrap_or_else(|e| panic!("{} {}: {e}", coll.name(), dt.name()));
        }
    }
}

/// Waits for both ranks and expects a mismatch of `op` on each, naming the other rank.
fn expect_mismatch(r: &Ranks, op: &str, t0: Instant) {
    for rank in 0..2 {
        r.comms[rank].backend().synchronize(&r.streams[rank]).unwrap();
        match r.comms[rank].async_error() {
            Err(Error::Mismatch {
                op: got,
                rank: me,
                peer,
                ..
            }) => {
                assert_eq!(got, op);
                assert_eq!(me, rank as u32);
                assert_eq!(peer, 1 - rank as u32);
            }
            other => panic!("rank {rank}: expected a mismatch, got {other:?}"),
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
}

fn bufs(r: &Ranks, bytes: usize) -> Vec<DeviceBuffer> {
    r.comms
        .iter()
        .map(|c| DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap())
        .collect()
}

/// Gather and scatter with rank 0 naming root 0 and rank 1 root 1.
#[test]
fn different_roots_are_a_mismatch() {
    for op in ["gather", "scatter"] {
        let r = ranks_with(2, Duration::from_secs(30));
        let mut b = bufs(&r, 512);
        let t0 = Instant::now();
        for (rank, buf) in b.iter_mut().enumerate() {
            let (c, s) = (&r.comms[rank], &r.streams[rank]);
            if op == "gather" {
                c.gather_in_place(buf, 16, DataType::F32, rank as u32, s).unwrap();
            } else {
                c.scatter_in_place(buf, 16, DataType::F32, rank as u32, s)
                    .unwrap();
            }
        }
        expect_mismatch(&r, op, t0);
    }
}

/// All-gather-v where the ranks disagree on the counts, or only on the displacements.
#[test]
fn different_layouts_are_a_mismatch() {
    let layouts: [[(&[usize], &[usize]); 2]; 2] = [
        [(&[10, 20], &[0, 10]), (&[10, 21], &[0, 10])],
        [(&[10, 20], &[0, 10]), (&[10, 20], &[0, 12])],
    ];
    for layout in layouts {
        let r = ranks_with(2, Duration::from_secs(30));
        let mut b = bufs(&r, 4096);
        let t0 = Instant::now();
        for (rank, buf) in b.iter_mut().enumerate() {
            let (counts, displs) = layout[rank];
            r.comms[rank]
                .all_gather_v_in_place(buf, counts, displs, DataType::U32, &r.streams[rank])
                .unwrap();
        }
        expect_mismatch(&r, "all_gather_v", t0);
    }
}

fn assert_invalid(res: oxccl::Result<()>, op: &str, needle: &str) {
    match res {
        Err(e @ Error::InvalidArgument { .. }) => {
            let Error::InvalidArgument { op: got, rank, .. } = &e else {
                unreachable!()
            };
            assert_eq!((*got, *rank), (op, 1), "{e}");
            assert!(e.to_string().contains(needle), "{e}");
        }
        other => panic!("expected an invalid argument of {op} ({needle}), got {other:?}"),
    }
}

/// Host-side argument checks: typed errors naming the operation and the rank, before
/// anything is launched (so no peer is needed).
#[test]
fn invalid_arguments() {
    let r = ranks(2);
    let (c, s) = (&r.comms[1], &r.streams[1]);
    let alloc = |bytes| DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap();
    let (mut small, big) = (alloc(16), alloc(4096));
    let f32 = DataType::F32;
    // All-to-all: no in place, no overlap, both buffers hold nranks * count.
    // SAFETY: live buffers; the calls are rejected before any launch.
    unsafe {
        assert_invalid(
            c.all_to_all_raw(big.ptr(), big.ptr(), 4, f32, s),
            "all_to_all",
            "in place",
        );
        assert_invalid(
            c.all_to_all_raw(big.ptr(), big.ptr() + 16, 4, f32, s),
            "all_to_all",
            "overlap",
        );
        assert_invalid(
            c.all_to_all_raw(big.ptr(), big.ptr(), 0, f32, s),
            "all_to_all",
            "in place",
        );
    }
    assert_invalid(c.all_to_all(&big, &mut small, 4, f32, s), "all_to_all", "recv");
    // Gather and scatter: roots in range; root's blocked buffer holds nranks * count.
    let mut out = alloc(4096);
    assert_invalid(c.gather(&big, &mut out, 4, f32, 2, s), "gather", "root 2");
    assert_invalid(c.scatter(&big, &mut out, 4, f32, 9, s), "scatter", "root 9");
    assert_invalid(c.gather_in_place(&mut small, 4, f32, 7, s), "gather", "root 7");
    assert_invalid(c.gather(&big, &mut small, 4, f32, 1, s), "gather", "recv");
    assert_invalid(c.gather_in_place(&mut small, 4, f32, 1, s), "gather", "buffer");
    assert_invalid(c.scatter(&small, &mut out, 4, f32, 1, s), "scatter", "send");
    assert_invalid(c.scatter_in_place(&mut small, 4, f32, 1, s), "scatter", "buffer");
    assert_invalid(c.gather(&small, &mut out, 5, f32, 0, s), "gather", "send");
    // All-gather-v: one count and displacement per rank, in bounds, no overlap.
    let agv = |recv: &mut DeviceBuffer, counts: &[usize], displs: &[usize]| {
        c.all_gather_v(&big, recv, counts, displs, f32, s)
    };
    assert_invalid(agv(&mut out, &[1, 2, 3], &[0, 1, 3]), "all_gather_v", "3 counts");
    assert_invalid(agv(&mut out, &[1, 2], &[0]), "all_gather_v", "1 displacements");
    assert_invalid(agv(&mut out, &[4, 4], &[0, 3]), "all_gather_v", "overlap");
    assert_invalid(agv(&mut out, &[4, 4], &[6, 3]), "all_gather_v", "overlap");
    assert_invalid(
        agv(&mut small, &[2, 2], &[0, 3]),
        "all_gather_v",
        "recv buffer holds 16 bytes",
    );
    assert_invalid(
        agv(&mut out, &[1, 1], &[0, usize::MAX]),
        "all_gather_v",
        "overflow",
    );
    assert_invalid(agv(&mut out, &[1, 1 << 62], &[0, 1]), "all_gather_v", "overflow");
    assert_invalid(
        c.all_gather_v(&small, &mut out, &[1, 5], &[0, 1], f32, s),
        "all_gather_v",
        "send",
    );
    assert_invalid(
        c.all_gather_v_in_place(&mut small, &[2, 3], &[0, 2], f32, s),
        "all_gather_v",
        "buffer",
    );
    // Zero-count blocks may sit anywhere (even "inside" another block) and need no room.
    let mut tiny = alloc(8);
    // A lone rank's call completes by itself: nothing launched when every count is 0.
    c.all_gather_v(&small, &mut tiny, &[0, 0], &[5, 1 << 40], f32, s)
        .unwrap();
    c.backend().synchronize(s).unwrap();
    c.async_error().unwrap();
}
