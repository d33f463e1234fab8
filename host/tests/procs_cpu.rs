//! Communicators spanning processes on the CPU backend: the test binary re-runs itself as
//! child processes, each holding some ranks (one thread per rank), meeting over the TCP
//! bootstrap on loopback and mapping each other's memfd segments. Every process runs the same
//! matrix of collectives (every collective and grouped send/recv: ring and all-pairs, several
//! dtypes and operators, in and out of place, sizes from 0 to several staging buffers so that
//! calls are cut into pieces) and
//! checks every element of its own ranks' outputs against the host reference computed from
//! every rank's inputs (each process draws all inputs from the same seeds).

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::bootstrap::{self, UniqueId};
use oxccl::harness::{check_coll, Case, Coll, Ranks};
use oxccl::{Backend, Comm, Config, DataType, Error, RedOp};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const CHILD_ID: &str = "OXCCL_PROCS_TEST_ID";
const CHILD_RANKS: &str = "OXCCL_PROCS_TEST_RANKS";
const CHILD_N: &str = "OXCCL_PROCS_TEST_N";
const CHILD_TEST: &str = "OXCCL_PROCS_TEST_NAME";
/// Small staging buffers: most cases are cut into several pieces.
const STAGING: usize = 16 * 1024;

fn boot_config() -> bootstrap::Config {
    bootstrap::Config::default().with_timeout(Duration::from_secs(60))
}

fn comm_config(timeout: Duration) -> Config {
    Config {
        timeout_ns: timeout.as_nanos() as u64,
        staging_bytes: STAGING,
        ..Config::default()
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

/// Init `ranks` of an `n`-rank communicator in this process, one thread each.
fn init_local(n: u32, id: &UniqueId, ranks: &[u32], cfg: &Config) -> oxccl::Result<Vec<Comm>> {
    let handles: Vec<_> = ranks
        .iter()
        .map(|&r| {
            let (id, cfg) = (*id, cfg.clone());
            std::thread::spawn(move || {
                let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
                Comm::init_rank_with(b, n, &id, r, 0, cfg, &boot_config())
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("init thread"))
        .collect()
}

/// The matrix every process runs, in the same order.
fn matrix(ranks: &Ranks) -> oxccl::Result<usize> {
    run_cases(
        ranks,
        &[
            (DataType::F32, RedOp::Sum, 4099),
            (DataType::Bf16, RedOp::Max, 12_345),
            (DataType::I8, RedOp::Sum, 7),
            (DataType::F64, RedOp::PreMulSum, 1),
            (DataType::I64, RedOp::Avg, 0),
            (DataType::U8, RedOp::Min, 40_000),
            (DataType::F16, RedOp::Prod, 65_537),
        ],
    )
}

/// A shorter matrix for layouts of many processes.
fn small_matrix(ranks: &Ranks) -> oxccl::Result<usize> {
    run_cases(
        ranks,
        &[
            (DataType::F32, RedOp::Sum, 4099),
            (DataType::Bf16, RedOp::Max, 1),
            (DataType::I8, RedOp::PreMulSum, 20_011),
        ],
    )
}

/// Several MiB per rank (hundreds of pieces through 16 KiB staging buffers).
fn large(ranks: &Ranks) -> oxccl::Result<usize> {
    run_cases(
        ranks,
        &[
            (DataType::F32, RedOp::Sum, 1_000_003),
            (DataType::U8, RedOp::Max, 3 << 20),
        ],
    )
}

fn run_cases(ranks: &Ranks, cases: &[(DataType, RedOp, usize)]) -> oxccl::Result<usize> {
    let n = ranks.n() as u32;
    let mut checked = 0;
    for (i, &(dtype, red, count)) in cases.iter().enumerate() {
        for coll in Coll::ALL {
            for in_place in [false, true] {
                let case = Case {
                    dtype,
                    red,
                    count,
                    in_place,
                    seed: 100 + i as u64,
                };
                let root = (i as u32 + 1) % n;
                checked += check_coll(ranks, coll, case, root).map_err(|e| {
                    Error::Verify(format!(
                        "{} {dtype:?} {red:?} count {count} in_place {in_place}: {e}",
                        coll.name()
                    ))
                })?;
            }
        }
    }
    Ok(checked)
}

/// In a child: run the ranks named by the environment through `body`; the parent reads the
/// exit status and the output.
fn child(body: fn(&Ranks) -> oxccl::Result<usize>) -> bool {
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
    let comms = init_local(n, &id, &mine, &comm_config(Duration::from_secs(60))).unwrap();
    assert!(comms.iter().all(|c| c.spans_processes()));
    let ranks = Ranks::new(comms).unwrap();
    let checked = body(&ranks).unwrap_or_else(|e| panic!("ranks {mine:?}: {e}"));
    println!("ranks {mine:?}: {checked} elements checked");
    true
}

/// Run an `n`-rank communicator split over processes: `groups[0]` in this process, each
/// further group in a child running test `name` (whose child branch calls `body`).
fn run_split(name: &str, n: u32, groups: &[&[u32]], body: fn(&Ranks) -> oxccl::Result<usize>) {
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
                .env(CHILD_TEST, name)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let comms = init_local(n, &id, groups[0], &comm_config(Duration::from_secs(60))).unwrap();
    root.wait().unwrap();
    let ranks = Ranks::new(comms).unwrap();
    let mine = body(&ranks);
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
    let checked = mine.unwrap_or_else(|e| panic!("ranks {:?}: {e}\n{}", groups[0], failures.join("\n")));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked > 0);
}

#[test]
fn two_processes_run_every_collective() {
    if child(matrix) {
        return;
    }
    run_split("two_processes_run_every_collective", 2, &[&[0], &[1]], matrix);
}

#[test]
fn three_processes_with_two_ranks_in_one() {
    if child(matrix) {
        return;
    }
    // Ranks 0 and 2 share this process (direct addresses between them), 1 and 3 are alone.
    run_split(
        "three_processes_with_two_ranks_in_one",
        4,
        &[&[0, 2], &[1], &[3]],
        matrix,
    );
}

#[test]
fn eight_ranks_in_four_processes() {
    if child(matrix) {
        return;
    }
    run_split(
        "eight_ranks_in_four_processes",
        8,
        &[&[0, 5], &[1, 4], &[2, 7], &[3, 6]],
        matrix,
    );
}

#[test]
fn five_processes_one_rank_each() {
    if child(small_matrix) {
        return;
    }
    run_split(
        "five_processes_one_rank_each",
        5,
        &[&[3], &[0], &[4], &[1], &[2]],
        small_matrix,
    );
}

#[test]
fn one_rank_alone_in_its_process() {
    if child(small_matrix) {
        return;
    }
    run_split("one_rank_alone_in_its_process", 1, &[&[0]], small_matrix);
}

#[test]
fn several_mib_across_two_processes() {
    if child(large) {
        return;
    }
    run_split("several_mib_across_two_processes", 2, &[&[1], &[0]], large);
}

/// Split the communicator into even and odd ranks (keys reversing the order), then run a
/// few collectives on the children (which span processes too).
fn split_then_check(ranks: &Ranks) -> oxccl::Result<usize> {
    let kids: Vec<oxccl::Result<Option<Comm>>> = std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .comms
            .iter()
            .map(|c| s.spawn(move || c.split(Some(c.rank() % 2), -(c.rank() as i32), None)))
            .collect();
        hs.into_iter().map(|h| h.join().expect("split thread")).collect()
    });
    let mut children = Vec::new();
    for (c, k) in ranks.comms.iter().zip(kids) {
        let k = k?.ok_or_else(|| Error::Verify(format!("rank {} got no child", c.rank())))?;
        let half = (c.count() as usize).div_ceil(2) - usize::from(c.rank() % 2 == 1 && c.count() % 2 == 1);
        if k.count() as usize != half || k.rank() != (half as u32 - 1 - c.rank() / 2) {
            return Err(Error::Verify(format!(
                "rank {} became rank {} of {} (expected {} of {half})",
                c.rank(),
                k.rank(),
                k.count(),
                half as u32 - 1 - c.rank() / 2
            )));
        }
        children.push(k);
    }
    let kids = Ranks::new(children)?;
    run_cases(
        &kids,
        &[
            (DataType::F32, RedOp::Sum, 3001),
            (DataType::Bf16, RedOp::Max, 70_001),
        ],
    )
}

#[test]
fn split_across_processes() {
    if child(split_then_check) {
        return;
    }
    run_split(
        "split_across_processes",
        4,
        &[&[0, 3], &[1], &[2]],
        split_then_check,
    );
}

/// Rank 0 calls an all-reduce while rank 1 (another process) calls an all-gather of the same
/// bytes: both report a mismatch naming the other, on the first piece, instead of hanging.
fn mismatch(ranks: &Ranks) -> oxccl::Result<usize> {
    let c = &ranks.comms[0];
    let s = &ranks.streams[0];
    let bytes = 3 * STAGING;
    let a = oxccl::DeviceBuffer::alloc(c.backend(), c.device(), bytes)?;
    let mut b = oxccl::DeviceBuffer::alloc(c.backend(), c.device(), 2 * bytes)?;
    if c.rank() == 0 {
        c.all_reduce(&a, &mut b, bytes / 4, DataType::F32, oxccl::Op::Sum, s)?;
    } else {
        c.all_gather(&a, &mut b, bytes / 4, DataType::F32, s)?;
    }
    c.backend().synchronize(s)?;
    match c.async_error() {
        Err(Error::Mismatch { rank, peer, .. }) if rank == c.rank() && peer == 1 - c.rank() => Ok(1),
        other => Err(Error::Verify(format!(
            "expected a mismatch naming the peer, got {other:?}"
        ))),
    }
}

#[test]
fn mismatched_collectives_across_processes_are_reported() {
    if child(mismatch) {
        return;
    }
    run_split(
        "mismatched_collectives_across_processes_are_reported",
        2,
        &[&[0], &[1]],
        mismatch,
    );
}

/// Ranks of other processes that never call the collective: a timeout naming the peer, and
/// an abort during a wait returns quickly.
fn stall(ranks: &Ranks) -> oxccl::Result<usize> {
    let c = &ranks.comms[0];
    let s = &ranks.streams[0];
    if c.rank() == 1 {
        // Hold the communicator open without calling anything until rank 0 gave up.
        std::thread::sleep(Duration::from_secs(3));
        return Ok(1);
    }
    let buf = oxccl::DeviceBuffer::alloc(c.backend(), c.device(), 4096)?;
    let mut out = oxccl::DeviceBuffer::alloc(c.backend(), c.device(), 4096)?;
    let t0 = Instant::now();
    c.all_reduce(&buf, &mut out, 1024, DataType::F32, oxccl::Op::Sum, s)?;
    std::thread::sleep(Duration::from_millis(200));
    let ta = Instant::now();
    c.abort();
    c.backend().synchronize(s)?;
    let (waited, after_abort) = (t0.elapsed(), ta.elapsed());
    match c.async_error() {
        Err(Error::Aborted { rank: 0, .. }) => {}
        other => return Err(Error::Verify(format!("expected an abort error, got {other:?}"))),
    }
    // The collective was still waiting for rank 1 when aborted, and gave up within 100 ms.
    if waited < Duration::from_millis(200) || after_abort > Duration::from_millis(100) {
        return Err(Error::Verify(format!(
            "abort took {after_abort:?} (the collective ran {waited:?} in all)"
        )));
    }
    Ok(1)
}

#[test]
fn abort_unblocks_a_rank_waiting_for_another_process() {
    if child(stall) {
        return;
    }
    run_split(
        "abort_unblocks_a_rank_waiting_for_another_process",
        2,
        &[&[0], &[1]],
        stall,
    );
}

#[test]
fn foreign_staging_sizes_are_reported() {
    if std::env::var(CHILD_ID).is_ok() {
        let id = UniqueId::from_bytes(&unhex(&std::env::var(CHILD_ID).unwrap())).unwrap();
        let cfg = Config {
            staging_bytes: 2 * STAGING,
            ..comm_config(Duration::from_secs(10))
        };
        let r = init_local(2, &id, &[1], &cfg);
        assert!(matches!(r, Err(Error::Unreachable { .. })), "{r:?}");
        return;
    }
    let (id, root) = UniqueId::with_config(Some(LO), &boot_config()).unwrap();
    let c = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "foreign_staging_sizes_are_reported",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ID, hex(&id.to_bytes()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let e = init_local(2, &id, &[0], &comm_config(Duration::from_secs(10)))
        .expect_err("init must fail")
        .to_string();
    assert!(e.contains("[1]") && e.contains("OXCCL_STAGING_BYTES"), "{e}");
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    root.wait().unwrap();
}

/// Rank 0 sends 1000 f32 to rank 1 (another process), which receives 999: both report the
/// mismatch naming each other and what each posted, without hanging; rank 1's buffer is
/// untouched.
fn p2p_mismatch(ranks: &Ranks) -> oxccl::Result<usize> {
    let c = &ranks.comms[0];
    let s = &ranks.streams[0];
    let peer = 1 - c.rank();
    let mut b = oxccl::DeviceBuffer::alloc(c.backend(), c.device(), 4000)?;
    b.fill(0xff)?;
    if c.rank() == 0 {
        c.send(&b, 1000, DataType::F32, 1, s)?;
    } else {
        c.recv(&mut b, 999, DataType::F32, 0, s)?;
    }
    c.backend().synchronize(s)?;
    match c.async_error() {
        Err(e @ Error::P2pMismatch { rank, peer: p, .. }) if rank == c.rank() && p == peer => {
            let m = e.to_string();
            if !(m.contains("1000 f32 elements") && m.contains("999 f32 elements")) {
                return Err(Error::Verify(format!("the message must name both postings: {m}")));
            }
        }
        other => {
            return Err(Error::Verify(format!(
                "expected a mismatch naming the peer, got {other:?}"
            )))
        }
    }
    let mut host = vec![0u8; 4000];
    b.download(&mut host)?;
    if c.rank() == 1 && host != vec![0xff; 4000] {
        return Err(Error::Verify("the receive buffer was written".into()));
    }
    Ok(1)
}

#[test]
fn mismatched_send_recv_across_processes_is_reported() {
    if child(p2p_mismatch) {
        return;
    }
    run_split(
        "mismatched_send_recv_across_processes_is_reported",
        2,
        &[&[0], &[1]],
        p2p_mismatch,
    );
}

/// Rank 0 waits for a receive from rank 1 (another process) that never sends: an abort
/// returns it within 100 ms, reporting the aborted receive.
fn p2p_stall(ranks: &Ranks) -> oxccl::Result<usize> {
    let c = &ranks.comms[0];
    let s = &ranks.streams[0];
    if c.rank() == 1 {
        std::thread::sleep(Duration::from_secs(2));
        return Ok(1);
    }
    let mut out = oxccl::DeviceBuffer::alloc(c.backend(), c.device(), 1 << 20)?;
    c.recv(&mut out, 1 << 18, DataType::F32, 1, s)?;
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    c.abort();
    c.backend().synchronize(s)?;
    let waited = t0.elapsed();
    match c.async_error() {
        Err(Error::Aborted { op: "recv", rank: 0 }) => {}
        other => return Err(Error::Verify(format!("expected an aborted recv, got {other:?}"))),
    }
    if waited > Duration::from_millis(100) {
        return Err(Error::Verify(format!("abort took {waited:?}")));
    }
    Ok(1)
}

#[test]
fn abort_unblocks_a_receive_from_another_process() {
    if child(p2p_stall) {
        return;
    }
    run_split(
        "abort_unblocks_a_receive_from_another_process",
        2,
        &[&[0], &[1]],
        p2p_stall,
    );
}
