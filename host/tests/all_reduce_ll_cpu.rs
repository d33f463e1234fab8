//! The LL all-reduce on the CPU backend (the same device code the GPU runs), against the host
//! reference (f64, every element, outputs poisoned, ranks bit-identical): rank counts 1..=8,
//! sizes from 0 to the LL capacity and beyond (pieces), every dtype and operator, in place,
//! many operations back to back without synchronizing (parities reused), the flag generation
//! change, abort, mismatched calls, and communicators spanning processes.
#![allow(clippy::needless_range_loop)] // ranks index parallel vectors

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::bootstrap::{self, UniqueId};
use oxccl::harness::{check_all_reduce, Case, Ranks};
use oxccl::{verify, Backend, Comm, Config, DataType, DeviceBuffer, Error, Op, RedOp};

/// A small LL capacity keeps the "up to the limit" and "pieces" cases quick.
const LL_MAX: usize = 8192;

fn config(timeout: Duration, proto: &str) -> Config {
    Config {
        timeout_ns: timeout.as_nanos() as u64,
        ll_max_bytes: LL_MAX,
        proto: Some(proto.into()),
        algo: None,
        ..Config::default()
    }
}

fn ranks_with(n: usize, cfg: Config) -> Ranks {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    Ranks::new(Comm::init_all_with(b, &vec![0; n], cfg).expect("init_all")).expect("streams")
}

fn ll_ranks(n: usize) -> Ranks {
    ranks_with(n, config(Duration::from_secs(60), "ll"))
}

fn check(r: &Ranks, dtype: DataType, red: RedOp, count: usize, in_place: bool, seed: u64) {
    let case = Case {
        dtype,
        red,
        count,
        in_place,
        seed,
    };
    let n = r.n();
    // The tuner picks LL for these calls (forced by the config).
    if count > 0 {
        let c = r.comms[0]
            .tune(1, dtype, (count * dtype.size()) as u64)
            .expect("a choice");
        assert_eq!(c.proto, oxccl::coll::tuner::Proto::Ll);
    }
    check_all_reduce(r, case).unwrap_or_else(|e| {
        panic!(
            "{n} ranks, {} {} count {count} in_place {in_place}: {e}",
            dtype.name(),
            red.name()
        )
    });
}

#[test]
fn rank_counts_and_sizes_up_to_the_limit() {
    let mut seed = 1;
    for n in 1..=8 {
        let r = ll_ranks(n);
        let sizes: &[usize] = if n <= 3 {
            &[0, 1, 2, 7, 13, 1021, LL_MAX / 4 - 1, LL_MAX / 4]
        } else {
            &[1, 13, 1021, LL_MAX / 4]
        };
        for &count in sizes {
            for (dt, red) in [(DataType::F32, RedOp::Sum), (DataType::Bf16, RedOp::Max)] {
                seed += 1;
                check(&r, dt, red, count, seed % 2 == 0, seed);
            }
        }
    }
}

#[test]
fn every_dtype_and_op_in_and_out_of_place() {
    let r = ll_ranks(3);
    let mut seed = 100;
    for dt in DataType::ALL {
        for red in RedOp::ALL {
            for in_place in [false, true] {
                seed += 1;
                // Odd, prime counts: the last line is partial for every element size.
                check(&r, dt, red, 97, in_place, seed);
            }
        }
        // The whole capacity for this element size.
        seed += 1;
        check(&r, dt, RedOp::Sum, LL_MAX / dt.size(), false, seed);
    }
}

#[test]
fn larger_than_the_capacity_runs_in_pieces() {
    let r = ll_ranks(4);
    for (i, (dt, count)) in [
        (DataType::F32, LL_MAX / 4 + 1),
        (DataType::U8, 3 * LL_MAX + 5),
        (DataType::F64, 5 * LL_MAX / 8 - 3),
    ]
    .into_iter()
    .enumerate()
    {
        check(&r, dt, RedOp::Sum, count, i == 1, 200 + i as u64);
    }
}

/// Inputs of op `k` of a back-to-back run on rank `r`.
fn inputs(dt: DataType, count: usize, k: usize, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|r| verify::gen_input(dt, RedOp::Sum, count, (k * 1000 + r) as u64))
        .collect()
}

/// `ops` all-reduces launched back to back on every rank (no synchronization between them,
/// sizes varying so stale lines of other sizes sit in the region), then every output checked.
fn back_to_back(r: &Ranks, dt: DataType, ops: usize, counts: impl Fn(usize) -> usize) {
    let n = r.n();
    let op = verify::test_op(dt, RedOp::Sum);
    let mut bufs = Vec::new();
    let mut all_inputs = Vec::new();
    for k in 0..ops {
        let count = counts(k);
        let ins = inputs(dt, count, k, n);
        let mut per = Vec::new();
        for (i, c) in r.comms.iter().enumerate() {
            let bytes = count * dt.size();
            let mut s = DeviceBuffer::alloc(c.backend(), c.device(), bytes.max(1)).unwrap();
            s.upload(&ins[r.rank(i)]).unwrap();
            let mut o = DeviceBuffer::alloc(c.backend(), c.device(), bytes.max(1)).unwrap();
            o.fill(0xff).unwrap();
            per.push((s, o));
        }
        bufs.push(per);
        all_inputs.push(ins);
    }
    // Rank-major launch order: rank 0 queues every op before rank 1 queues any, so fast
    // ranks run ahead by many operations.
    for i in 0..r.comms.len() {
        for k in 0..ops {
            let (s, o) = &mut bufs[k][i];
            r.comms[i]
                .all_reduce(s, o, counts(k), dt, op, &r.streams[i])
                .unwrap();
        }
    }
    r.sync().unwrap();
    for k in 0..ops {
        let refs: Vec<&[u8]> = all_inputs[k].iter().map(|v| v.as_slice()).collect();
        for i in 0..r.comms.len() {
            let bytes = counts(k) * dt.size();
            let mut host = vec![0u8; bytes];
            bufs[k][i].1.download(&mut host).unwrap();
            verify::check_all_reduce_par(dt, op, &refs, &host, counts(k))
                .unwrap_or_else(|m| panic!("op {k} rank {}: {m}", r.rank(i)));
        }
    }
}

#[test]
fn many_back_to_back_ops_reuse_both_parities() {
    let r = ll_ranks(4);
    back_to_back(&r, DataType::F32, 60, |k| [1, 2000, 7, 513, 2048][k % 5]);
    let r = ll_ranks(8);
    back_to_back(&r, DataType::Bf16, 30, |k| 1 + (k * 37) % 300);
}

/// LL and Simple all-reduces (and another collective) interleaved on one communicator.
#[test]
fn interleaved_with_simple_operations() {
    let r = ranks_with(3, config(Duration::from_secs(60), "allreduce:ll,simple"));
    for i in 0..6 {
        for c in &r.comms {
            let proto = if i % 2 == 0 { "ll" } else { "simple" };
            c.set_tuning(None, Some(proto)).unwrap();
        }
        let seed = 301 + i as u64;
        check_all_reduce(
            &r,
            Case {
                dtype: DataType::I32,
                red: RedOp::Sum,
                count: 100 + i,
                in_place: false,
                seed,
            },
        )
        .unwrap();
        oxccl::harness::check_all_gather(
            &r,
            Case {
                dtype: DataType::U8,
                red: RedOp::Sum,
                count: 33,
                in_place: false,
                seed,
            },
        )
        .unwrap();
    }
}

/// The flag generation changes once every 2^31 operations: the first LL operation of the new
/// one clears the region between two barriers. Without that, the stale lines of the first
/// operation (same flag, same parity) would be taken for a late rank's data.
#[test]
fn flag_generation_change_clears_stale_lines() {
    let r = ll_ranks(2);
    let dt = DataType::F32;
    let count = 1000;
    check(&r, dt, RedOp::Sum, count, false, 7);
    // The first operation used epoch base 0 (flag 1, parity 0); jump so that the next one has
    // base 2^32: flag 1 and parity 0 again, in generation 1.
    for c in &r.comms {
        c.skip_operations((1u64 << 31) - 1).unwrap();
    }
    let op = verify::test_op(dt, RedOp::Sum);
    let ins = inputs(dt, count, 9, 2);
    let mut bufs: Vec<(DeviceBuffer, DeviceBuffer)> = r
        .comms
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut s = DeviceBuffer::alloc(c.backend(), 0, count * 4).unwrap();
            s.upload(&ins[i]).unwrap();
            let mut o = DeviceBuffer::alloc(c.backend(), 0, count * 4).unwrap();
            o.fill(0xff).unwrap();
            (s, o)
        })
        .collect();
    // Rank 1 comes late: rank 0 must not read rank 1's stale lines.
    {
        let (s, o) = &mut bufs[0];
        r.comms[0].all_reduce(s, o, count, dt, op, &r.streams[0]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    {
        let (s, o) = &mut bufs[1];
        r.comms[1].all_reduce(s, o, count, dt, op, &r.streams[1]).unwrap();
    }
    r.sync().unwrap();
    let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
    for (i, (_, o)) in bufs.iter().enumerate() {
        let mut host = vec![0u8; count * 4];
        o.download(&mut host).unwrap();
        verify::check_all_reduce_par(dt, op, &refs, &host, count).unwrap_or_else(|m| panic!("rank {i}: {m}"));
    }
    // And the following operations (generation 1, both parities) still work.
    back_to_back(&r, dt, 6, |k| 500 + k);
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
fn abort_during_an_ll_wait_returns_within_100ms() {
    let r = ranks_with(4, config(Duration::from_secs(600), "ll"));
    let mut b = bufs(&r, 4096);
    // Rank 3 never calls: ranks 0..3 poll their inboxes until the abort.
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
fn missing_rank_times_out_naming_it() {
    let r = ranks_with(3, config(Duration::from_millis(300), "ll"));
    let mut b = bufs(&r, 64);
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
                assert_eq!((me, peer), (rank as u32, 2));
            }
            other => panic!("rank {rank}: expected a timeout, got {other:?}"),
        }
    }
}

/// Rank 0 and rank 1 call with the given (count, dtype); both must report a mismatch naming
/// the other, promptly (the timeout is far away).
fn expect_mismatch(cfg: Config, calls: [(usize, DataType); 2]) {
    let r = ranks_with(2, cfg);
    let mut b = bufs(&r, 1 << 20);
    let t0 = Instant::now();
    for rank in 0..2 {
        let (count, dt) = calls[rank];
        let (s, o) = &mut b[rank];
        r.comms[rank]
            .all_reduce(s, o, count, dt, Op::Sum, &r.streams[rank])
            .unwrap();
    }
    for rank in 0..2 {
        r.comms[rank].backend().synchronize(&r.streams[rank]).unwrap();
        match r.comms[rank].async_error() {
            Err(Error::Mismatch { rank: me, peer, .. }) => {
                assert_eq!((me, peer), (rank as u32, 1 - rank as u32));
            }
            other => panic!(
                "rank {rank} {calls:?}: expected a mismatch, got {other:?} after {:?}",
                t0.elapsed()
            ),
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "mismatch detection took {:?}",
        t0.elapsed()
    );
}

#[test]
fn mismatched_calls_are_errors_not_hangs() {
    let cfg = || config(Duration::from_secs(120), "ll");
    // Both LL, different counts (headers carry the fingerprint).
    expect_mismatch(cfg(), [(100, DataType::F32), (200, DataType::F32)]);
    // Both LL, different data types.
    expect_mismatch(cfg(), [(64, DataType::F32), (64, DataType::I32)]);
    // LL on rank 0, the barrier-framed Simple kernel on rank 1 (auto tuning, sizes on either
    // side of the LL threshold).
    let auto = Config { proto: None, ..cfg() };
    expect_mismatch(auto, [(100, DataType::F32), (100_000, DataType::F32)]);
}

#[test]
fn invalid_overrides_fail_init_and_set_tuning() {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let bad = Config {
        proto: Some("lll".into()),
        ..Config::default()
    };
    let e = Comm::init_all_with(b, &[0, 0], bad).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidSetting {
                setting: "NCCL_PROTO",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("unknown protocol"), "{e}");
    let r = ll_ranks(1);
    let e = r.comms[0].set_tuning(Some("bogus"), None).unwrap_err();
    assert!(e.to_string().contains("NCCL_ALGO"), "{e}");
    // The failed call changed nothing.
    assert_eq!(r.comms[0].tuning().proto.as_deref(), Some("ll"));
    // NCCL's own algorithm names (`tree`) are accepted and change nothing (see the tuner).
    r.comms[0].set_tuning(Some("tree"), Some("ll")).unwrap();
    // Overrides that leave an in-process all-reduce nothing: an error naming the call.
    r.comms[0].set_tuning(Some("staged"), None).unwrap();
    let s = DeviceBuffer::alloc(r.comms[0].backend(), 0, 64).unwrap();
    let mut o = DeviceBuffer::alloc(r.comms[0].backend(), 0, 64).unwrap();
    let e = r.comms[0]
        .all_reduce(&s, &mut o, 4, DataType::F32, Op::Sum, &r.streams[0])
        .unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("all_reduce on rank 0") && m.contains("leave no"),
        "{m}"
    );
}

// ---- Communicators spanning processes -------------------------------------------------

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const CHILD_ID: &str = "OXCCL_LL_TEST_ID";
const CHILD_RANKS: &str = "OXCCL_LL_TEST_RANKS";
const CHILD_N: &str = "OXCCL_LL_TEST_N";

fn boot() -> bootstrap::Config {
    bootstrap::Config::default().with_timeout(Duration::from_secs(60))
}

fn init_local(n: u32, id: &UniqueId, ranks: &[u32]) -> Vec<Comm> {
    let hs: Vec<_> = ranks
        .iter()
        .map(|&r| {
            let id = *id;
            std::thread::spawn(move || {
                let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
                let cfg = Config {
                    // Tiny staging buffers: a staged call would take many pieces; LL needs none.
                    staging_bytes: 4096,
                    ..config(Duration::from_secs(60), "ll")
                };
                Comm::init_rank_with(b, n, &id, r, 0, cfg, &boot())
            })
        })
        .collect();
    hs.into_iter()
        .map(|h| h.join().expect("init thread").expect("init_rank"))
        .collect()
}

/// What every process runs, in the same order.
fn spanning_cases(r: &Ranks) {
    assert!(r.comms.iter().all(|c| c.spans_processes()));
    let mut seed = 500;
    for (dt, red, count) in [
        (DataType::F32, RedOp::Sum, 1021),
        (DataType::Bf16, RedOp::Max, 7),
        (DataType::I8, RedOp::Prod, LL_MAX),
        (DataType::F64, RedOp::Avg, LL_MAX / 8 + 3),
        (DataType::U32, RedOp::PreMulSum, 1),
    ] {
        for in_place in [false, true] {
            seed += 1;
            check(r, dt, red, count, in_place, seed);
        }
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

#[test]
fn spanning_processes_without_staging() {
    const NAME: &str = "spanning_processes_without_staging";
    if let Ok(id) = std::env::var(CHILD_ID) {
        let id = UniqueId::from_bytes(&unhex(&id)).unwrap();
        let n: u32 = std::env::var(CHILD_N).unwrap().parse().unwrap();
        let mine: Vec<u32> = std::env::var(CHILD_RANKS)
            .unwrap()
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        spanning_cases(&Ranks::new(init_local(n, &id, &mine)).unwrap());
        return;
    }
    // Ranks 0 and 2 here (direct addresses between them), rank 1 in a child process.
    let (id, root) = UniqueId::with_config(Some(LO), &boot()).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_ID, hex(&id.to_bytes()))
        .env(CHILD_N, "3")
        .env(CHILD_RANKS, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let comms = init_local(3, &id, &[0, 2]);
    root.wait().unwrap();
    let r = Ranks::new(comms).unwrap();
    let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| spanning_cases(&r)));
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Err(p) = mine {
        std::panic::resume_unwind(p);
    }
}

// ---- The command line and the environment ---------------------------------------------

fn oxccl(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    cmd.args(args).env_remove("NCCL_ALGO").env_remove("NCCL_PROTO");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run oxccl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn cli_tuner_table_follows_the_environment() {
    let (ok, t) = oxccl(&["tuner", "--max", "256K"], &[]);
    assert!(ok, "{t}");
    assert!(t.contains("OXCCL_LL_MAX_BYTES = 65536"), "{t}");
    let row = |t: &str, bytes: &str| {
        t.lines()
            .find(|l| l.starts_with("allreduce") && l.split_whitespace().nth(1) == Some(bytes))
            .unwrap_or_else(|| panic!("no {bytes} row:\n{t}"))
            .to_string()
    };
    assert!(row(&t, "1024").contains("direct/ll"), "{t}");
    assert!(row(&t, "262144").contains("staged/simple"), "{t}");
    // NCCL_PROTO from the environment, per collective.
    let (ok, t) = oxccl(&["tuner", "--max", "4K"], &[("NCCL_PROTO", "allreduce:^ll")]);
    assert!(ok, "{t}");
    assert!(!row(&t, "1024").contains("/ll"), "{t}");
    // A forced LL above the capacity (pieces) and the threshold setting.
    let (ok, t) = oxccl(
        &["tuner", "--max", "1M"],
        &[("NCCL_PROTO", "LL"), ("OXCCL_LL_THRESHOLD", "1024")],
    );
    assert!(ok && row(&t, "1048576").contains("direct/ll"), "{t}");
    // NCCL's algorithm names alone (an environment set up for NCCL) change nothing.
    let (ok, t) = oxccl(&["tuner", "--max", "256K"], &[("NCCL_ALGO", "ring,tree")]);
    assert!(ok && row(&t, "1024").contains("direct/ll"), "{t}");
    // Invalid values: a clear error naming the variable.
    let (ok, t) = oxccl(&["tuner"], &[("NCCL_ALGO", "ring,rong")]);
    assert!(!ok && t.contains("invalid NCCL_ALGO"), "{t}");
    let (ok, t) = oxccl(&["tuner"], &[("OXCCL_SYM", "lamprot")]);
    assert!(
        !ok && t.contains("invalid OXCCL_SYM") && t.contains("lamport-twoshot"),
        "{t}"
    );
    // A valid one is read: the table of symmetric kernels follows it.
    let (ok, t) = oxccl(&["tuner", "--max", "4K"], &[("OXCCL_SYM", "Lamport")]);
    assert!(
        ok && t.contains("OXCCL_SYM=lamport") && t.contains("sym/lamport x"),
        "{t}"
    );
    let (ok, t) = oxccl(
        &[
            "check",
            "--backend",
            "cpu",
            "--colls",
            "all_reduce",
            "--ranks",
            "2",
            "--counts",
            "5",
        ],
        &[("NCCL_PROTO", "fast")],
    );
    assert!(
        !ok && t.contains("invalid NCCL_PROTO") && t.contains("unknown protocol"),
        "{t}"
    );
}

#[test]
fn cli_check_sweeps_protocols() {
    let (ok, t) = oxccl(
        &[
            "check",
            "--backend",
            "cpu",
            "--colls",
            "all_reduce",
            "--ranks",
            "3",
            "--counts",
            "1,1000",
            "--dtypes",
            "f32,i8",
            "--ops",
            "sum,min",
            "--proto",
            "ll,simple",
        ],
        &[],
    );
    assert!(ok, "{t}");
    assert!(t.contains(" ll ") && t.contains(" simple "), "{t}");
    assert!(t.contains("check: 32 passed, 0 failed"), "{t}");
}
