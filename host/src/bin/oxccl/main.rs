//! The `oxccl` command line: `demo`, `check`, `perf`, `topo`, `info`, ...
//!
//! Ranks go on devices by `--devices` (`oxccl::topo::Placement`: a list, or `all` for one
//! rank per device, round-robin when there are more ranks than devices), in one process or,
//! with `--procs`, one process per rank (each child takes its rank's device).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use oxccl::backend::{self, cpu::CpuBackend, gpu::GpuBackend, Backend};
use oxccl::coll::all_reduce_bus_factor;
use oxccl::coll::tuner;
use oxccl::harness::{self, fmt_bytes, parse_size, Case, Coll, Ranks, Timing};
use oxccl::topo::{self, Placement};
use oxccl::{verify, Comm, Config, DataType, RedOp};

mod check;
mod perf;
mod sym;

use check::{check, check_procs, graph_check, run_procs, CheckArgs, GraphCheckArgs};
use perf::{choice_name, perf, set_tuning, tuner_table, PerfArgs, TunerArgs};
use sym::{
    devapi_run, sym_check, sym_choice_name, sym_mismatch, DevapiRunArgs, SymCheckArgs, SymMismatchArgs,
};

#[derive(Parser)]
#[command(
    name = "oxccl",
    version,
    about = "oxccl: GPU collective communication in Rust"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum BackendArg {
    Auto,
    Gpu,
    Cpu,
}

#[derive(Subcommand)]
enum Cmd {
    /// All-reduce on 4 ranks (GPU when there is one, else CPU), checked and timed.
    Demo {
        #[arg(long, default_value_t = 4)]
        ranks: usize,
        #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
        backend: BackendArg,
        /// Devices of the ranks (see `check --devices`).
        #[arg(long, default_value = "0")]
        devices: Placement,
    },
    /// Correctness matrix: every collective x dtype x op x rank count x size, in place and
    /// out of place (roots vary).
    Check(CheckArgs),
    /// Bandwidth table (nccl-tests columns) next to a device-to-device copy of the same bytes.
    Perf(PerfArgs),
    /// The tuner's thresholds and its algorithm/protocol per collective and size bucket,
    /// in-process and across processes, under the current (or given) overrides.
    Tuner(TunerArgs),
    /// All-reduce captured in a CUDA graph and replayed on fresh random data every replay,
    /// every element checked (GPU backend, ranks in one process).
    GraphCheck(GraphCheckArgs),
    /// Collectives on registered windows (the symmetric kernels), every kernel forced in
    /// turn (`OXCCL_SYM`), back to back on fresh random data, every element checked.
    SymCheck(SymCheckArgs),
    /// Ranks calling mismatched collectives on windows (counts, data types, collectives,
    /// two-shot against one-shot), every symmetric kernel in turn on several CTA counts: each
    /// rank must get a symmetric-mismatch error naming a peer, promptly, and later calls on
    /// the failed communicator must fail too.
    SymMismatch(SymMismatchArgs),
    /// Run a user kernel linked against ptx/oxccl_device.bc (scripts/link-user-kernel.sh)
    /// on N in-process ranks (GPU backend) and check every rank's result.
    DevapiRun(DevapiRunArgs),
    /// Settings, backend and devices.
    Info,
    /// The devices (name, PCI bus id, memory) and their P2P matrix: which pairs can load and
    /// store each other's memory, the driver's performance rank, native atomics.
    Topo(TopoArgs),
}

#[derive(Args)]
struct TopoArgs {
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Devices to cover (`all`, or a list as in `check --devices`).
    #[arg(long, default_value = "all")]
    devices: Placement,
    /// Exit with an error when some pair of the devices cannot reach each other.
    #[arg(long)]
    require_p2p: bool,
}

fn pick_backend(b: BackendArg) -> Result<(Arc<dyn Backend>, String), oxccl::Error> {
    match b {
        BackendArg::Cpu => Ok((Arc::new(CpuBackend::new()), "cpu backend (requested)".into())),
        BackendArg::Gpu => {
            let g = GpuBackend::new()?;
            let name = g.device_name(0);
            Ok((Arc::new(g), format!("gpu backend: {name}")))
        }
        BackendArg::Auto => {
            let (b, why) = backend::auto();
            let desc = match why {
                None => format!("gpu backend: {}", b.device_name(0)),
                Some(w) => format!("cpu backend (no gpu: {w})"),
            };
            Ok((b, desc))
        }
    }
}

fn parse_dtypes(v: &[String]) -> Result<Vec<DataType>, String> {
    if v.iter().any(|s| s == "all") {
        return Ok(DataType::ALL.to_vec());
    }
    v.iter()
        .map(|s| {
            DataType::ALL
                .iter()
                .copied()
                .find(|d| d.name() == s)
                .ok_or(format!("unknown dtype {s}"))
        })
        .collect()
}

fn parse_ops(v: &[String]) -> Result<Vec<RedOp>, String> {
    if v.iter().any(|s| s == "all") {
        return Ok(RedOp::ALL.to_vec());
    }
    v.iter()
        .map(|s| {
            RedOp::ALL
                .iter()
                .copied()
                .find(|d| d.name() == s)
                .ok_or(format!("unknown op {s}"))
        })
        .collect()
}

fn parse_colls(v: &[String]) -> Result<Vec<Coll>, String> {
    if v.iter().any(|s| s == "all") {
        return Ok(Coll::ALL.to_vec());
    }
    v.iter()
        .map(|s| Coll::from_name(s).ok_or(format!("unknown collective {s}")))
        .collect()
}

/// Set in the children of `--procs` runs: the bootstrap id (hex), the child's rank, the
/// rank count.
const CHILD_ID: &str = "OXCCL_CLI_CHILD_ID";

const CHILD_RANK: &str = "OXCCL_CLI_CHILD_RANK";

const CHILD_N: &str = "OXCCL_CLI_CHILD_NRANKS";

/// In a child of a `--procs` run: (id, rank, nranks).
fn child_env() -> Option<(oxccl::bootstrap::UniqueId, u32, usize)> {
    let hex = std::env::var(CHILD_ID).ok()?;
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16).ok())
        .collect::<Option<_>>()?;
    let id = oxccl::bootstrap::UniqueId::from_bytes(&bytes).ok()?;
    let rank = std::env::var(CHILD_RANK).ok()?.parse().ok()?;
    let n = std::env::var(CHILD_N).ok()?.parse().ok()?;
    Some((id, rank, n))
}

/// The ranks of an `n`-rank run placed by `place`: all of them in this process, or, in a child
/// of a `--procs` run, this child's rank alone (on its rank's device). Also returns how the
/// placement reads in a header (`8 ranks on devices 0,...,7 (one per device)`).
fn make_ranks(b: &Arc<dyn Backend>, n: usize, place: &Placement) -> Result<(Ranks, String), String> {
    let child = child_env();
    let n = child.as_ref().map_or(n, |c| c.2);
    let devices = place.devices(n, b.device_count())?;
    let what = topo::describe_ranks(&devices);
    let e = |e: oxccl::Error| e.to_string();
    if let Some((id, rank, nranks)) = child {
        let boot = oxccl::bootstrap::Config::from_env()
            .map_err(|source| oxccl::Error::Bootstrap { rank, source })
            .map_err(e)?;
        let dev = devices[rank as usize];
        let c = Comm::init_rank_with(b.clone(), nranks as u32, &id, rank, dev, Config::default(), &boot)
            .map_err(e)?;
        return Ok((Ranks::new(vec![c]).map_err(e)?, what));
    }
    let comms = Comm::init_all_with(b.clone(), &devices, Config::default()).map_err(e)?;
    Ok((Ranks::new(comms).map_err(e)?, what))
}

fn demo(ranks: usize, b: BackendArg, place: &Placement) -> Result<(), String> {
    let (backend, desc) = pick_backend(b).map_err(|e| e.to_string())?;
    let (r, placed) = make_ranks(&backend, ranks, place)?;
    println!("oxccl demo: all-reduce (sum), {placed}, {desc}");
    let gpu = backend.kind() == oxccl::BackendKind::Gpu;
    let sizes: Vec<usize> = if gpu {
        (0..=13)
            .map(|i| 8usize << (2 * i))
            .filter(|&s| s <= 256 << 20)
            .collect()
    } else {
        vec![8, 256, 8 << 10, 256 << 10, 4 << 20]
    };
    println!("every element of every rank is checked against a host reference (f64), inputs random, outputs poisoned first");
    println!(
        "{:>10} {:>10} {:>6} {:>9} {:>11} {:>11} {:>11}  check",
        "bytes", "count", "type", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)"
    );
    let mut seed = 1;
    for dt in [DataType::F32, DataType::Bf16] {
        for &bytes in &sizes {
            let count = bytes / dt.size();
            seed += 1;
            let checked = harness::check_all_reduce(
                &r,
                Case {
                    dtype: dt,
                    red: RedOp::Sum,
                    count,
                    in_place: false,
                    seed,
                },
            )
            .map_err(|e| format!("{} bytes {}: {e}", bytes, dt.name()))?;
            let (iters, reps) = if gpu { (20, 5) } else { (3, 3) };
            let t = harness::time_all_reduce(
                &r,
                dt,
                oxccl::Op::Sum,
                count,
                false,
                Timing {
                    warmup: 2,
                    iters,
                    reps,
                    graph: None,
                    host: false,
                },
            )
            .map_err(|e| e.to_string())?;
            let algbw = bytes as f64 / t / 1e9;
            println!(
                "{:>10} {:>10} {:>6} {:>9} {:>11.2} {:>11.2} {:>11.2}  ok ({} elements)",
                bytes,
                count,
                dt.name(),
                choice_name(&r, dt, bytes),
                t * 1e6,
                algbw,
                algbw * all_reduce_bus_factor(ranks),
                checked
            );
        }
    }
    println!("demo passed: every result matched the reference");
    Ok(())
}

fn topo_report(a: &TopoArgs) -> Result<(), String> {
    let (b, desc) = pick_backend(a.backend).map_err(|e| e.to_string())?;
    let devices = match &a.devices {
        Placement::All => (0..b.device_count()).collect(),
        Placement::List(l) => l.clone(),
    };
    let t = topo::Topology::detect(&*b, &devices)
        .map_err(|e| e.to_string())?
        .with_nvlink();
    println!("oxccl topo: {desc}");
    print!("{}", t.report());
    match t.check_reachable() {
        Err(why) if a.require_p2p => Err(why),
        _ => Ok(()),
    }
}

fn info() {
    println!("oxccl {}", env!("CARGO_PKG_VERSION"));
    match GpuBackend::new() {
        Ok(g) => {
            let v = oxccl::sys::cuda::driver_version().unwrap_or(0);
            println!(
                "gpu backend: {} device(s), driver cuda {}.{}",
                g.device_count(),
                v / 1000,
                (v % 1000) / 10
            );
            match topo::Topology::detect_all(&g) {
                Ok(t) => print!("{}", t.with_nvlink().report()),
                Err(e) => {
                    println!("topology unavailable: {e}");
                    for d in 0..g.device_count() {
                        println!("  device {d}: {}", g.device_name(d));
                    }
                }
            }
        }
        Err(e) => println!("gpu backend unavailable: {e}\ncpu backend available"),
    }
    println!("\nsettings (environment):\n{}", oxccl::settings::table());
}

fn main() -> ExitCode {
    oxccl::logging::init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Demo {
            ranks,
            backend,
            devices,
        } => demo(ranks, backend, &devices),
        Cmd::Check(a) => check(&a),
        Cmd::Perf(a) => perf(&a),
        Cmd::Tuner(a) => tuner_table(&a),
        Cmd::GraphCheck(a) => graph_check(&a),
        Cmd::SymCheck(a) => sym_check(&a),
        Cmd::SymMismatch(a) => sym_mismatch(&a),
        Cmd::DevapiRun(a) => devapi_run(&a),
        Cmd::Info => {
            info();
            Ok(())
        }
        Cmd::Topo(a) => topo_report(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oxccl: error: {e}");
            ExitCode::FAILURE
        }
    }
}
