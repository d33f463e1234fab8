//! Ranks on several devices, on the CPU backend's logical devices (the GPU runs of the same
//! paths are `scripts/multigpu-bench.sh`): `init_all` and `init_rank` with one rank per
//! device and round-robin placements, every collective and the symmetric kernels on
//! random data checked against the host reference, device pairs that cannot reach each
//! other (refused on the CPU backend) reported by rank and device at init, the command
//! line's `--devices` in one process and with `--procs`, and `oxccl topo`;
//! and `scripts/multigpu-bench.sh`: its syntax, and a dry run of its flow on the CPU
//! backend.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use oxccl::backend::cpu::{CpuBackend, REFUSE_PEERS_ENV};
use oxccl::bootstrap::{self, UniqueId};
use oxccl::harness::sym::{check_sym, sizes, SymBufs};
use oxccl::harness::{check_coll, Case, Coll, Ranks};
use oxccl::topo::{Placement, Topology};
use oxccl::{Backend, Comm, Config, DataType, Error, RedOp};

fn cpu() -> Arc<dyn Backend> {
    Arc::new(CpuBackend::new())
}

/// Every collective (in and out of place, two sizes, roots varying) and the symmetric
/// all-reduce, all-gather and reduce-scatter on `ranks`; returns the cases run.
fn every_collective(ranks: &Ranks, seed: u64) -> usize {
    let n = ranks.n();
    let mut cases = 0;
    for coll in Coll::ALL {
        for (dt, red, count) in [
            (DataType::F32, RedOp::Sum, 1000),
            (DataType::Bf16, RedOp::Max, 4099),
        ] {
            for in_place in [false, true] {
                let s = seed + cases as u64;
                let case = Case {
                    dtype: dt,
                    red,
                    count,
                    in_place,
                    seed: s,
                };
                let root = (s % n as u64) as u32;
                check_coll(ranks, coll, case, root)
                    .unwrap_or_else(|e| panic!("{} {dt:?} {count} in_place={in_place}: {e}", coll.name()));
                cases += 1;
            }
        }
    }
    for coll in [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter] {
        for count in [7, 1000] {
            let (sb, rb) = sizes(coll, n, count, DataType::F32);
            let bufs = SymBufs::new(ranks, sb, rb).unwrap();
            check_sym(ranks, &bufs, coll, DataType::F32, RedOp::Sum, count, 2, seed)
                .unwrap_or_else(|e| panic!("symmetric {} {count}: {e}", coll.name()));
            bufs.release(ranks).unwrap();
            cases += 1;
        }
    }
    cases
}

#[test]
fn init_all_one_rank_per_device_and_round_robin() {
    let b = cpu();
    for (n, place) in [(4, Placement::All), (5, Placement::parse("2,1").unwrap())] {
        let devices = place.devices(n, b.device_count()).unwrap();
        let comms = Comm::init_all_with(b.clone(), &devices, Config::default()).unwrap();
        for (c, &d) in comms.iter().zip(&devices) {
            assert_eq!(c.device(), d, "rank {}", c.rank());
        }
        let ranks = Ranks::new(comms).unwrap();
        assert!(every_collective(&ranks, 10 * n as u64) > 40);
    }
}

#[test]
fn init_rank_threads_on_their_own_devices() {
    let n = 3u32;
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let (id, root) = UniqueId::new(Some(lo)).unwrap();
    let boot = bootstrap::Config::default().with_timeout(Duration::from_secs(60));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let boot = boot.clone();
            std::thread::spawn(move || {
                Comm::init_rank_with(cpu(), n, &id, r, 3 + r as usize, Config::default(), &boot)
            })
        })
        .collect();
    let comms: Vec<Comm> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    root.wait().unwrap();
    for c in &comms {
        assert_eq!(c.device(), 3 + c.rank() as usize);
        assert!(!c.spans_processes());
    }
    let ranks = Ranks::new(comms).unwrap();
    assert!(every_collective(&ranks, 77) > 40);
}

#[test]
fn topology_of_the_placed_devices() {
    let b = cpu();
    let devices = Placement::All.devices(6, 4).unwrap();
    let t = Topology::detect(&*b, &devices).unwrap();
    assert_eq!(t.devices.len(), 4);
    assert!(t.check_reachable().is_ok());
}

/// A CPU backend where device 2 cannot reach device 0's memory (0 reaches 2).
fn refused() -> Arc<dyn Backend> {
    Arc::new(CpuBackend::with_refused_peers(&[(2, 0)]))
}

#[test]
fn init_all_names_the_ranks_and_devices_that_cannot_reach_each_other() {
    // Ranks 0 and 3 on device 0, rank 1 on device 1, rank 2 on device 2.
    let e = Comm::init_all_with(refused(), &[0, 1, 2, 0], Config::default()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Unreachable { rank: 0, .. }), "{msg}");
    assert!(
        msg.contains("ranks 0,3 on device 0 (cpu device 0 (host threads)) and rank 2 on device 2 (cpu device 2 (host threads)) cannot access each other's memory"),
        "{msg}"
    );
    assert!(msg.contains("0 -> 2 yes, 2 -> 0 no"), "{msg}");
    // The same backend without device 2 is fine, and so is every rank on one device.
    let ranks = Ranks::new(Comm::init_all_with(refused(), &[0, 1, 0], Config::default()).unwrap()).unwrap();
    check_coll(
        &ranks,
        Coll::AllReduce,
        Case {
            dtype: DataType::F32,
            red: RedOp::Sum,
            count: 1000,
            in_place: false,
            seed: 3,
        },
        0,
    )
    .unwrap();
    assert!(Comm::init_all_with(refused(), &[2, 2], Config::default()).is_ok());
}

#[test]
fn init_rank_every_rank_reports_the_unreachable_pair() {
    let n = 3u32;
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let (id, root) = UniqueId::new(Some(lo)).unwrap();
    let boot = bootstrap::Config::default().with_timeout(Duration::from_secs(60));
    let t0 = std::time::Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let boot = boot.clone();
            // Rank r on device r: ranks 0 and 2 cannot be connected.
            std::thread::spawn(move || {
                Comm::init_rank_with(refused(), n, &id, r, r as usize, Config::default(), &boot)
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let e = h.join().unwrap().unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Unreachable { rank, .. } if rank == r as u32),
            "{msg}"
        );
        assert!(
            msg.starts_with(&format!("communicator init on rank {r}: ")),
            "{msg}"
        );
        assert!(
            msg.contains("rank 0 on device 0 (cpu device 0 (host threads)) and rank 2 on device 2 (cpu device 2 (host threads)) cannot access each other's memory"),
            "{msg}"
        );
    }
    // Reported at once by all three (rank 1 too), not after the bootstrap timeout.
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let _ = root.wait();
}

// ---- The command line ---------------------------------------------------------------

fn oxccl(args: &[&str]) -> (bool, String) {
    oxccl_env(args, &[])
}

fn oxccl_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("NCCL_ALGO")
        .env_remove("NCCL_PROTO")
        .env_remove("OXCCL_SYM")
        .output()
        .expect("run oxccl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn passed(text: &str, closing: &str) -> usize {
    let line = text
        .lines()
        .find(|l| l.starts_with(closing))
        .unwrap_or_else(|| panic!("no {closing:?} line:\n{text}"));
    assert!(line.contains(" 0 failed"), "{text}");
    line[closing.len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("bad {closing:?} line:\n{text}"))
}

#[test]
fn cli_check_places_ranks_in_one_process_and_per_process() {
    let common = [
        "check",
        "--backend",
        "cpu",
        "--ranks",
        "3",
        "--devices",
        "all",
        "--colls",
        "all_reduce,all_gather,reduce_scatter,broadcast,send_recv",
        "--counts",
        "7,1000",
        "--dtypes",
        "f32",
        "--ops",
        "sum",
    ];
    let (ok, t) = oxccl(&common);
    assert!(ok, "{t}");
    assert!(t.contains("3 ranks on devices 0,1,2 (one per device)"), "{t}");
    assert_eq!(passed(&t, "check: "), 5 * 2 * 2);
    let mut procs = common.to_vec();
    procs.push("--procs");
    let (ok, t) = oxccl(&procs);
    assert!(ok, "{t}");
    assert!(t.contains("3 ranks on devices 0,1,2 (one per device)"), "{t}");
    assert_eq!(passed(&t, "check (all processes): "), 3 * 5 * 2 * 2);
    // Round-robin: 4 ranks over devices 1 and 0.
    let (ok, t) = oxccl(&[
        "check",
        "--backend",
        "cpu",
        "--ranks",
        "4",
        "--devices",
        "1,0",
        "--colls",
        "all_reduce",
        "--counts",
        "1000",
        "--dtypes",
        "f32",
        "--ops",
        "sum",
    ]);
    assert!(ok, "{t}");
    assert!(t.contains("4 ranks on devices 0,1 (up to 2 per device)"), "{t}");
    // A device that does not exist.
    let (ok, t) = oxccl(&["check", "--backend", "cpu", "--ranks", "2", "--devices", "0,64"]);
    assert!(!ok);
    assert!(t.contains("device 64 does not exist (64 available)"), "{t}");
}

#[test]
fn cli_sym_check_and_perf_on_several_devices() {
    let (ok, t) = oxccl(&[
        "sym-check",
        "--backend",
        "cpu",
        "--procs",
        "--ranks",
        "2",
        "--devices",
        "all",
        "--colls",
        "all_reduce,reduce_scatter",
        "--dtypes",
        "f32",
        "--ops",
        "sum",
        "--counts",
        "7,1000",
        "--settings",
        "auto,ll",
        "--iters",
        "2",
    ]);
    assert!(ok, "{t}");
    assert!(t.contains("2 ranks on devices 0,1 (one per device)"), "{t}");
    assert_eq!(passed(&t, "check (all processes): "), 2 * 2 * 2 * 2);
    // Several tables in one run: one per data type and collective.
    let (ok, t) = oxccl(&[
        "perf",
        "--backend",
        "cpu",
        "--ranks",
        "3",
        "--devices",
        "all",
        "--coll",
        "all_reduce,all_gather",
        "--dtype",
        "f32,bf16",
        "--min",
        "64",
        "--max",
        "256",
        "--iters",
        "2",
        "--reps",
        "1",
    ]);
    assert!(ok, "{t}");
    let heads: Vec<&str> = t.lines().filter(|l| l.starts_with("oxccl perf: ")).collect();
    assert_eq!(heads.len(), 4, "{t}");
    assert!(
        heads[0].starts_with("oxccl perf: all_reduce f32 sum, 3 ranks on devices 0,1,2"),
        "{t}"
    );
    assert!(
        heads[3].starts_with("oxccl perf: all_gather bf16, 3 ranks on devices 0,1,2"),
        "{t}"
    );
}

#[test]
fn cli_topo_reports_the_cpu_devices() {
    let (ok, t) = oxccl(&["topo", "--backend", "cpu", "--devices", "0-2", "--require-p2p"]);
    assert!(ok, "{t}");
    assert!(t.contains("topology: cpu backend, 3 of 64"), "{t}");
    assert!(
        t.contains("every pair of the 3 devices reaches each other"),
        "{t}"
    );
}

#[test]
fn cli_reports_unreachable_devices_by_rank_and_device() {
    let env = [(REFUSE_PEERS_ENV, "0<>2")];
    let (ok, t) = oxccl_env(&["topo", "--backend", "cpu", "--devices", "0-2"], &env);
    assert!(
        ok,
        "without --require-p2p the report is printed and the exit is clean: {t}"
    );
    assert!(t.contains("1 pair(s) cannot reach each other"), "{t}");
    let (ok, t) = oxccl_env(
        &["topo", "--backend", "cpu", "--devices", "0-2", "--require-p2p"],
        &env,
    );
    assert!(!ok, "{t}");
    assert!(t.contains("0 -> 2 no, 2 -> 0 no"), "{t}");
    let check = [
        "check",
        "--backend",
        "cpu",
        "--ranks",
        "3",
        "--devices",
        "all",
        "--colls",
        "all_reduce",
        "--counts",
        "7",
        "--dtypes",
        "f32",
        "--ops",
        "sum",
    ];
    let (ok, t) = oxccl_env(&check, &env);
    assert!(!ok, "{t}");
    assert!(
        t.contains("rank 0 on device 0 (cpu device 0 (host threads)) and rank 2 on device 2 (cpu device 2 (host threads)) cannot access each other's memory"),
        "{t}"
    );
    let mut procs = check.to_vec();
    procs.push("--procs");
    let (ok, t) = oxccl_env(&procs, &env);
    assert!(!ok, "{t}");
    for r in 0..3 {
        assert!(t.contains(&format!("rank {r} exited with")), "{t}");
        assert!(
            t.contains(&format!("communicator init on rank {r}: rank 0 on device 0")),
            "{t}"
        );
    }
}

// ---- scripts/multigpu-bench.sh ------------------------------------------------------

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether `prog --version` runs here.
fn have(prog: &str) -> bool {
    Command::new(prog)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn bench_scripts_parse() {
    if !have("bash") || !have("python3") {
        eprintln!("skipped: bash or python3 missing");
        return;
    }
    let root = repo_root();
    let out = Command::new("bash")
        .arg("-n")
        .arg(root.join("scripts/multigpu-bench.sh"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for py in ["scripts/nccl-ref.py", "scripts/multigpu-compare.py"] {
        let src = root.join(py);
        let code = "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])";
        let out = Command::new("python3")
            .args(["-c", code])
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{py}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The script's whole flow as a dry run on the CPU backend (2 logical devices as the GPUs,
/// tiny sizes): every step it runs passes, and the table joins oxccl's rows.
#[test]
fn bench_script_dry_run_on_the_cpu_backend() {
    if !have("bash") || !have("python3") || !have("timeout") {
        eprintln!("skipped: bash, python3 or timeout missing");
        return;
    }
    let out_dir = std::env::temp_dir().join(format!("oxccl-mg-dry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/multigpu-bench.sh"))
        .arg("run")
        .env("BACKEND", "cpu")
        .env("BIN", env!("CARGO_BIN_EXE_oxccl"))
        .env("QUICK", "1")
        .env("MAX", "1K")
        .env("OUT", &out_dir)
        .env("STEPS", "machine check perf nccl compare")
        .env_remove("NCCL_ALGO")
        .env_remove("NCCL_PROTO")
        .env_remove("OXCCL_SYM")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = std::fs::read_to_string(out_dir.join("table.md")).unwrap();
    assert!(
        table.starts_with("# multigpu-bench: 2 GPUs: 2 ranks, rank r on GPU r"),
        "{table}"
    );
    assert!(table.contains("NCCL_NVLS_ENABLE=0"), "{table}");
    for step in ["machine", "check", "perf", "perf-procs", "compare"] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(step) && l.split_whitespace().nth(1) == Some("ok")),
            "{step}: {table}"
        );
    }
    assert!(table.contains("nccl         SKIPPED"), "{table}");
    for coll in ["all_reduce", "all_gather", "reduce_scatter"] {
        assert!(table.contains(&format!("### {coll} bf16, 2 ranks")), "{table}");
    }
    assert!(table.contains("| 1K | "), "{table}");
    let _ = std::fs::remove_dir_all(&out_dir);
}
