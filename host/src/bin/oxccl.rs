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

#[derive(Args)]
struct CheckArgs {
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Collectives: all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all,
    /// gather, scatter, all_gather_v, send_recv (grouped send/recv: a ring out of place, an
    /// all-pairs exchange for the "in place" cases), or all.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub colls: Vec<String>,
    /// Rank counts, e.g. 1,2,3,8.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,8")]
    pub ranks: Vec<usize>,
    /// Element counts (K/M/G suffixes allowed), as NCCL counts them: per rank for
    /// all-gather (`sendcount`), of the output for reduce-scatter (`recvcount`), per block
    /// for all-to-all, gather and scatter, the most per rank for all-gather-v (random
    /// counts and displacements).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,7,31,1000,4099,65537")]
    pub counts: Vec<String>,
    /// Data types (names as printed by `info`), or all.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub dtypes: Vec<String>,
    /// Operators, or all.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub ops: Vec<String>,
    /// Random seed base.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also run each case this many times back to back.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Read `--counts` as bytes per rank (count = bytes / element size, per dtype).
    #[arg(long)]
    pub bytes: bool,
    /// One process per rank (this binary re-run as children, meeting over the bootstrap on
    /// loopback); otherwise every rank is a thread of this process.
    #[arg(long)]
    pub procs: bool,
    /// Devices of the ranks: `all` (rank r on device r mod count: one per device), or a list
    /// (`0,1`, `0-3`; rank r on entry r mod length). Default: every rank on device 0.
    #[arg(long, default_value = "0")]
    pub devices: Placement,
    /// Protocols to run the matrix with, one pass each: `auto` (the tuner's choice), or an
    /// `NCCL_PROTO` value without commas (`ll`, `simple`, `^ll`, `allreduce:ll`).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub proto: Vec<String>,
    /// `NCCL_ALGO` value for every pass (default: the environment's).
    #[arg(long)]
    pub algo: Option<String>,
}

#[derive(Args)]
struct PerfArgs {
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Collectives, one table each: all_reduce, broadcast, reduce, all_gather,
    /// reduce_scatter, all_to_all, gather, scatter, all_gather_v (timed with the all-gather's
    /// layout), send_recv (a ring step: every rank sends to the next and receives from the
    /// previous, in one group).
    #[arg(long, value_delimiter = ',', default_value = "all_reduce")]
    pub coll: Vec<String>,
    /// Root of broadcast and reduce.
    #[arg(long, default_value_t = 0)]
    pub root: u32,
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// Devices of the ranks (see `check --devices`).
    #[arg(long, default_value = "0")]
    pub devices: Placement,
    /// Data types, one table per data type and collective.
    #[arg(long, value_delimiter = ',', default_value = "bf16")]
    pub dtype: Vec<String>,
    #[arg(long, default_value = "sum")]
    pub op: String,
    #[arg(long, default_value = "1K")]
    pub min: String,
    #[arg(long, default_value = "256M")]
    pub max: String,
    /// Multiply the size by this between rows.
    #[arg(long, default_value_t = 4)]
    pub step: usize,
    #[arg(long, default_value_t = 20)]
    pub iters: usize,
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    #[arg(long)]
    pub in_place: bool,
    /// One process per rank (see `check --procs`); the table is rank 0's.
    #[arg(long)]
    pub procs: bool,
    /// Protocols to time, one row each per size: `auto` (the tuner's choice), or an
    /// `NCCL_PROTO` value without commas (`ll`, `simple`); e.g. `--proto ll,simple` to
    /// compare LL with Simple.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub proto: Vec<String>,
    /// `NCCL_ALGO` value (default: the environment's).
    #[arg(long)]
    pub algo: Option<String>,
    /// Also time a write-only fill of the same bytes per rank (memset) and print its rate
    /// and the algorithm's rate against it (the ceiling of collectives that mostly write).
    #[arg(long)]
    pub write_ref: bool,
    /// Also time the operation captured in a CUDA graph (`--iters` operations per graph)
    /// replayed this many times per repetition, next to the same graph with every kernel
    /// replaced by an empty one (GPU backend).
    #[arg(long)]
    pub graph: Option<usize>,
    /// Run on buffers in registered windows (`mem_alloc` + `register_window`): the
    /// symmetric kernels (all_reduce, all_gather, reduce_scatter).
    #[arg(long)]
    pub window: bool,
}

#[derive(Args)]
struct TunerArgs {
    /// Rank count of the table.
    #[arg(long, default_value_t = 8)]
    pub ranks: u32,
    /// Data type (its element size matters).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Largest size bucket (bytes per rank).
    #[arg(long, default_value = "256M")]
    pub max: String,
    /// `NCCL_ALGO` value to show the table under (default: the environment's).
    #[arg(long)]
    pub algo: Option<String>,
    /// `NCCL_PROTO` value to show the table under (default: the environment's).
    #[arg(long)]
    pub proto: Option<String>,
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

#[derive(Args)]
struct DevapiRunArgs {
    /// The PTX of the linked user kernel.
    #[arg(long, value_name = "FILE")]
    ptx: PathBuf,
    /// Ranks (all on device 0).
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// The kernel to launch (contract: see oxccl::harness::devapi).
    #[arg(long, default_value = harness::devapi::DEFAULT_KERNEL)]
    kernel: String,
    #[arg(long, value_enum, default_value_t = BackendArg::Gpu)]
    backend: BackendArg,
}

#[derive(Args)]
struct SymCheckArgs {
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    #[arg(long, value_delimiter = ',', default_value = "2,3,8")]
    ranks: Vec<usize>,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "all_reduce,all_gather,reduce_scatter"
    )]
    colls: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16,i32,f8e4m3")]
    dtypes: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "sum,max")]
    ops: Vec<String>,
    /// Element counts (NCCL's: per rank for all_reduce, the input of all_gather, the
    /// output of reduce_scatter).
    #[arg(long, value_delimiter = ',', default_value = "1,7,1000,4099,65537")]
    counts: Vec<usize>,
    /// `OXCCL_SYM` values to run, each in turn.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "auto,simple-oneshot,simple-twoshot,ll,lamport,ll-twoshot,lamport-twoshot"
    )]
    settings: Vec<String>,
    /// Operations back to back per case (fresh data each).
    #[arg(long, default_value_t = 3)]
    iters: usize,
    /// One process per rank.
    #[arg(long)]
    procs: bool,
    /// Devices of the ranks (see `check --devices`).
    #[arg(long, default_value = "0")]
    devices: Placement,
}

#[derive(Args)]
struct GraphCheckArgs {
    /// Rank counts.
    #[arg(long, value_delimiter = ',', default_value = "2,8")]
    ranks: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16")]
    dtypes: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "sum")]
    ops: Vec<String>,
    /// Element counts (the tuner picks LL, one-shot or two-shot by size).
    #[arg(long, value_delimiter = ',', default_value = "1,1000,65537,1000003")]
    counts: Vec<usize>,
    /// Replays per case (each on new data).
    #[arg(long, default_value_t = 20)]
    replays: usize,
    /// All-reduces per rank captured in the graph.
    #[arg(long, default_value_t = 3)]
    ops_per_graph: usize,
    /// Devices of the ranks (see `check --devices`; one graph per device).
    #[arg(long, default_value = "0")]
    devices: Placement,
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

/// A `check`-style command with `--procs`: run it as `n` processes for each `n` of
/// `rank_counts`, sum the children's closing counts and fail if any case failed.
fn check_procs(rank_counts: &[usize]) -> Result<(), String> {
    let (mut passed, mut failed) = (0, 0);
    for &n in rank_counts {
        println!("--- {n} processes");
        let (p, f) = run_procs(n)?;
        passed += p;
        failed += f;
    }
    println!("check (all processes): {passed} passed, {failed} failed");
    if failed > 0 {
        Err(format!("{failed} cases failed"))
    } else {
        Ok(())
    }
}

/// Run this command line again as `n` child processes, one rank each (the `--procs` flag
/// dropped), and wait for them. Rank 0's output is printed whole; the others' only where it
/// reports a failure. Returns the (passed, failed) counts the children's closing lines
/// report, summed.
fn run_procs(n: usize) -> Result<(usize, usize), String> {
    let lo = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let (id, root) = oxccl::bootstrap::UniqueId::new(Some(lo)).map_err(|e| e.to_string())?;
    let hex: String = id.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--procs").collect();
    let children = (0..n)
        .map(|r| {
            std::process::Command::new(&exe)
                .args(&args)
                .env(CHILD_ID, &hex)
                .env(CHILD_RANK, r.to_string())
                .env(CHILD_N, n.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("spawning rank {r}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Every child's pipes are drained at once, each by its own thread: read one after the
    // other, a child blocked on a full pipe would stall the collective the others wait in.
    let readers: Vec<_> = children
        .into_iter()
        .map(|c| std::thread::spawn(move || c.wait_with_output()))
        .collect();
    let (mut passed, mut failed, mut errors) = (0, 0, Vec::new());
    for (r, h) in readers.into_iter().enumerate() {
        let out = h
            .join()
            .map_err(|_| format!("rank {r}: output reader panicked"))?
            .map_err(|e| format!("rank {r}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            if r == 0 || line.starts_with("FAIL") {
                let tag = if r == 0 {
                    String::new()
                } else {
                    format!("[rank {r}] ")
                };
                println!("{tag}{line}");
            }
            if let Some(rest) = line.strip_prefix("check: ") {
                let nums: Vec<usize> = rest
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|w| w.parse().ok())
                    .collect();
                if let [p, f, ..] = nums[..] {
                    passed += p;
                    failed += f;
                }
            }
        }
        if !out.status.success() {
            errors.push(format!(
                "rank {r} exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let _ = root.wait();
    if errors.is_empty() {
        Ok((passed, failed))
    } else {
        Err(errors.join("\n"))
    }
}

/// Apply `proto` (an `NCCL_PROTO` value or `auto`) and `algo` to every rank held here.
fn set_tuning(r: &Ranks, algo: Option<&str>, proto: &str) -> Result<(), String> {
    let algo = algo.map(str::to_string).or_else(oxccl::settings::algo_env);
    let proto = if proto == "auto" {
        oxccl::settings::proto_env()
    } else {
        Some(proto.to_string())
    };
    for c in &r.comms {
        c.set_tuning(algo.as_deref(), proto.as_deref())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The tuner's choice for an all-reduce of `bytes` per rank on `r`, as printed.
fn choice_name(r: &Ranks, dt: DataType, bytes: usize) -> String {
    r.comms[0]
        .tune(oxccl_device::abi::COLL_ALL_REDUCE, dt, bytes as u64)
        .map_or_else(|e| format!("error: {e}"), |c| c.to_string())
}

fn tuner_table(a: &TunerArgs) -> Result<(), String> {
    let dt = parse_dtypes(std::slice::from_ref(&a.dtype))?[0];
    let max = parse_size(&a.max).ok_or("bad --max")? as u64;
    let cfg = Config {
        algo: a.algo.clone().or_else(oxccl::settings::algo_env),
        proto: a.proto.clone().or_else(oxccl::settings::proto_env),
        ..Config::default()
    };
    let ov = cfg.overrides().map_err(|e| e.to_string())?;
    let th = tuner::Thresholds::from_settings(cfg.ll_capacity() as u64);
    print!("{}", tuner::table(&th, &ov, a.ranks, dt.size(), max));
    // The symmetric kernels (buffers in registered windows), by payload per rank; the CTA
    // cap as on a GPU with 132 SMs and one rank per GPU, unless --ranks share one.
    let cap = (132 * 2 / a.ranks.max(1)).clamp(1, oxccl_device::abi::MAX_BLOCKS as u32);
    print!(
        "\n{}",
        oxccl::coll::sym_table::print_table(
            &oxccl::settings::sym_choice(),
            dt,
            a.ranks,
            oxccl::settings::sym_ll_max_bytes() as u64,
            oxccl::settings::sym_ctas(),
            cap,
            max
        )
    );
    Ok(())
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

#[allow(clippy::too_many_arguments)]
fn check(a: &CheckArgs) -> Result<(), String> {
    if a.procs && child_env().is_none() {
        println!("oxccl check --procs: one process per rank; every process checks its own rank's outputs; rank 0's table below");
        return check_procs(&a.ranks);
    }
    let (backend, desc) = pick_backend(a.backend).map_err(|e| e.to_string())?;
    let dtypes = parse_dtypes(&a.dtypes)?;
    let ops = parse_ops(&a.ops)?;
    let counts: Vec<usize> = a
        .counts
        .iter()
        .map(|c| parse_size(c).ok_or(format!("bad count {c}")))
        .collect::<Result<_, _>>()?;
    let colls = parse_colls(&a.colls)?;
    let child_ranks = child_env().map(|c| vec![c.2]);
    let (ranks, seed, repeat) = (child_ranks.as_ref().unwrap_or(&a.ranks), a.seed, a.repeat);
    let names: Vec<&str> = colls.iter().map(|c| c.name()).collect();
    println!("oxccl check: {} correctness on the {desc}", names.join(", "));
    println!(
        "{:>14} {:>8} {:>5} {:>10} {:>7} {:>6} {:>7} {:>12} {:>9}",
        "coll", "proto", "ranks", "count", "type", "cases", "failed", "elements", "time(s)"
    );
    let (mut total, mut failed) = (0usize, 0usize);
    let mut s = seed;
    for &n in ranks {
        let (r, placed) = make_ranks(&backend, n, &a.devices)?;
        println!("--- {placed}");
        for proto in &a.proto {
            set_tuning(&r, a.algo.as_deref(), proto)?;
            for &coll in &colls {
                // Copies take no operator: one pass with a placeholder.
                let coll_ops: &[RedOp] = if coll.has_op() { &ops } else { &[RedOp::Sum] };
                for &size in &counts {
                    for &dt in &dtypes {
                        let count = if a.bytes { size / dt.size() } else { size };
                        let t0 = Instant::now();
                        let (mut cases, mut bad, mut elems) = (0, 0, 0usize);
                        for &red in coll_ops {
                            for in_place in [false, true] {
                                for _ in 0..repeat {
                                    s += 1;
                                    cases += 1;
                                    // Roots vary with the seed (every rank over a run).
                                    let root = (s % n as u64) as u32;
                                    let case = Case {
                                        dtype: dt,
                                        red,
                                        count,
                                        in_place,
                                        seed: s,
                                    };
                                    match harness::check_coll(&r, coll, case, root) {
                                        Ok(e) => elems += e,
                                        Err(e) => {
                                            bad += 1;
                                            println!(
                                            "FAIL {} proto={proto} ranks={n} count={count} {} {} root={} in_place={in_place}: {e}",
                                            coll.name(),
                                            dt.name(),
                                            if coll.has_op() { red.name() } else { "-" },
                                            if coll.has_root() { root.to_string() } else { "-".into() },
                                        );
                                        }
                                    }
                                }
                            }
                        }
                        total += cases;
                        failed += bad;
                        println!(
                            "{:>14} {:>8} {:>5} {:>10} {:>7} {:>6} {:>7} {:>12} {:>9.2}",
                            coll.name(),
                            proto,
                            n,
                            count,
                            dt.name(),
                            cases,
                            bad,
                            elems,
                            t0.elapsed().as_secs_f64()
                        );
                    }
                }
            }
        }
    }
    println!("check: {} passed, {} failed", total - failed, failed);
    if failed > 0 {
        Err(format!("{failed} of {total} cases failed"))
    } else {
        Ok(())
    }
}

fn perf(a: &PerfArgs) -> Result<(), String> {
    if a.procs && child_env().is_none() {
        println!("oxccl perf --procs: one process per rank; times are rank 0's (its copy reference runs while the other processes time theirs)");
        return run_procs(a.ranks).map(|_| ());
    }
    let (backend, desc) = pick_backend(a.backend).map_err(|e| e.to_string())?;
    let dts = parse_dtypes(&a.dtype)?;
    let red = parse_ops(std::slice::from_ref(&a.op))?[0];
    let (lo, hi) = (
        parse_size(&a.min).ok_or("bad --min")?,
        parse_size(&a.max).ok_or("bad --max")?,
    );
    let colls = a
        .coll
        .iter()
        .map(|c| Coll::from_name(c).ok_or(format!("unknown collective {c}")))
        .collect::<Result<Vec<_>, _>>()?;
    if a.in_place && colls.iter().any(|&c| c != Coll::AllReduce) {
        return Err("--in-place is timed for all_reduce only".into());
    }
    let (r, placed) = make_ranks(&backend, a.ranks, &a.devices)?;
    for &dt in &dts {
        for &coll in &colls {
            perf_table(a, &r, &placed, &desc, coll, dt, red, lo, hi)?;
        }
    }
    Ok(())
}

/// One `perf` table: `coll` of `dt` on the ranks `r`, sizes `lo` to `hi`.
#[allow(clippy::too_many_arguments)]
fn perf_table(
    a: &PerfArgs,
    r: &Ranks,
    placed: &str,
    desc: &str,
    coll: Coll,
    dt: DataType,
    red: RedOp,
    lo: usize,
    hi: usize,
) -> Result<(), String> {
    let (ranks, step, iters, reps, in_place) = (r.n(), a.step, a.iters, a.reps, a.in_place);
    let op = verify::test_op(dt, red);
    let what = if coll.has_op() {
        format!("{} {} {}", coll.name(), dt.name(), red.name())
    } else {
        format!("{} {}", coll.name(), dt.name())
    };
    let layout = if child_env().is_some() {
        "one process per rank"
    } else {
        "one process"
    };
    println!("oxccl perf: {what}, {placed} ({layout}), {desc}; median of {reps} x {iters} iterations");
    println!("bytes = the larger of input and output per rank (nccl-tests' size); copy = device-to-device copy of the same bytes per rank (read + write counted); alg bytes = every byte read and written over all ranks, each once (all-reduce, all-to-all and send/recv: 2 x ranks x bytes; gather and scatter: 2 x bytes; the others: (ranks + 1) x the data of one rank)");
    println!(
        "{:>8} {:>11} {:>26} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>6}",
        "bytes",
        "count",
        "algo/proto",
        "time(us)",
        "algbw",
        "busbw",
        "copy(us)",
        "alg GB/s",
        "copy GB/s",
        "ratio"
    );
    if a.graph.is_some() {
        println!("(each row is followed by the time per operation replayed from a CUDA graph, the same graph with empty kernels in the copy column, and their ratio)");
    }
    if a.write_ref {
        println!("(each row is followed by the write-only reference: a fill of the same bytes per rank, its rate, and alg GB/s against it)");
    }
    let per_rank = if coll.is_blocked() { ranks } else { 1 };
    let mut bytes = lo.max(dt.size() * per_rank);
    while bytes <= hi {
        for proto in &a.proto {
            set_tuning(r, a.algo.as_deref(), proto)?;
            let count = bytes / dt.size() / per_rank;
            let timing = Timing {
                warmup: 3,
                iters,
                reps,
                graph: None,
            };
            // On registered windows (`--window`): the symmetric kernels.
            let bufs = if a.window {
                let (sb, rb) = harness::sym::sizes(coll, ranks, count, dt);
                Some(harness::sym::SymBufs::new(r, sb, rb).map_err(|e| e.to_string())?)
            } else {
                None
            };
            let time_with = |t: Timing| -> Result<f64, String> {
                match &bufs {
                    Some(b) => harness::sym::time_sym(r, b, coll, dt, red, count, t),
                    None if coll == Coll::AllReduce => {
                        harness::time_all_reduce(r, dt, op, count, in_place, t)
                    }
                    None => harness::time_coll(r, coll, dt, op, count, a.root, t),
                }
                .map_err(|e| e.to_string())
            };
            let t = time_with(timing)?;
            let size = harness::size_bytes(coll, ranks, count, dt.size());
            let tc = harness::time_copy(r, size, iters, reps).map_err(|e| e.to_string())?;
            let algbw = size as f64 / t / 1e9;
            let moved = if matches!(coll, Coll::AllReduce | Coll::AllToAll | Coll::SendRecv) {
                2.0 * ranks as f64 * size as f64
            } else if matches!(coll, Coll::Gather | Coll::Scatter) {
                2.0 * size as f64
            } else {
                (ranks as f64 + 1.0) * (count * dt.size()) as f64 * per_rank as f64
            };
            let alg_rate = moved / t / 1e9;
            let copy_rate = 2.0 * size as f64 / tc / 1e9;
            println!(
                "{:>8} {:>11} {:>26} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>11.1} {:>11.1} {:>6.3}",
                fmt_bytes(size),
                count,
                if bufs.is_some() {
                    sym_choice_name(r, coll, count, dt)
                } else if coll == Coll::AllReduce {
                    choice_name(r, dt, size)
                } else if coll == Coll::SendRecv {
                    "p2p".to_string()
                } else {
                    "lsa".to_string()
                },
                t * 1e6,
                algbw,
                algbw * harness::bus_factor(coll, ranks),
                tc * 1e6,
                alg_rate,
                copy_rate,
                alg_rate / copy_rate
            );
            if let Some(replays) = a.graph {
                let mut g = timing;
                let mut per_mode = [0.0; 2];
                for (k, mode) in [
                    harness::graph::GraphMode::Real { replays },
                    harness::graph::GraphMode::Empty { replays },
                ]
                .into_iter()
                .enumerate()
                {
                    g.graph = Some(mode);
                    per_mode[k] = time_with(g)?;
                }
                println!(
                    "{:>8} {:>11} {:>26} {:>10.2} {:>10} {:>10} {:>10.2} {:>11} {:>11} {:>6.3}",
                    "",
                    "",
                    "graph replay | empty",
                    per_mode[0] * 1e6,
                    "",
                    "",
                    per_mode[1] * 1e6,
                    "",
                    "",
                    per_mode[0] / per_mode[1]
                );
            }
            if a.write_ref {
                let tf = harness::time_fill(r, size, iters, reps).map_err(|e| e.to_string())?;
                let fill_rate = size as f64 / tf / 1e9;
                println!(
                    "{:>8} {:>11} {:>26} {:>10} {:>10} {:>10} {:>10.2} {:>11} {:>11.1} {:>6.3}",
                    "",
                    "",
                    "write-only fill",
                    "",
                    "",
                    "",
                    tf * 1e6,
                    "",
                    fill_rate,
                    alg_rate / fill_rate
                );
            }
            if let Some(b) = bufs {
                b.release(r).map_err(|e| e.to_string())?;
            }
        }
        bytes = bytes.saturating_mul(step.max(2));
    }
    Ok(())
}

fn graph_check(a: &GraphCheckArgs) -> Result<(), String> {
    let (b, desc) = pick_backend(BackendArg::Gpu).map_err(|e| e.to_string())?;
    let (dts, ops) = (parse_dtypes(&a.dtypes)?, parse_ops(&a.ops)?);
    println!(
        "oxccl graph-check: {desc}; {} replays of {} all-reduces per rank per case",
        a.replays, a.ops_per_graph
    );
    let (mut passed, mut failed) = (0, 0);
    for &n in &a.ranks {
        let (r, placed) = make_ranks(&b, n, &a.devices)?;
        println!("--- {placed}");
        for &dt in &dts {
            for &red in &ops {
                for &count in &a.counts {
                    match harness::graph::check_graph_all_reduce(
                        &r,
                        dt,
                        red,
                        count,
                        a.replays,
                        a.ops_per_graph,
                    ) {
                        Ok(k) => {
                            passed += 1;
                            println!(
                                "ok   ranks {n} {} {} count {count}: {k} elements",
                                dt.name(),
                                red.name()
                            );
                        }
                        Err(e) => {
                            failed += 1;
                            println!("FAIL ranks {n} {} {} count {count}: {e}", dt.name(), red.name());
                        }
                    }
                }
            }
        }
    }
    println!("graph-check: {passed} passed, {failed} failed");
    if failed > 0 {
        Err(format!("{failed} graph cases failed"))
    } else {
        Ok(())
    }
}

fn devapi_run(a: &DevapiRunArgs) -> Result<(), String> {
    let (b, desc) = pick_backend(a.backend).map_err(|e| e.to_string())?;
    if b.as_gpu().is_none() {
        return Err(format!(
            "devapi-run needs the GPU backend to run a PTX kernel ({desc})"
        ));
    }
    let ptx = std::fs::read_to_string(&a.ptx)
        .map_err(|e| format!("devapi-run: reading {}: {e}", a.ptx.display()))?;
    println!(
        "oxccl devapi-run: {desc}; kernel {} of {} on {} ranks",
        a.kernel,
        a.ptx.display(),
        a.ranks
    );
    let results = harness::devapi::run(b, &ptx, &a.kernel, a.ranks).map_err(|e| e.to_string())?;
    let (mut passed, mut failed) = (0, 0);
    for r in &results {
        if r.passed() {
            passed += 1;
            println!("ok   rank {}: out {:?}", r.rank, r.out);
        } else {
            failed += 1;
            println!(
                "FAIL rank {}: out {:?}, expected {:?} (sum, status, lsa size, api version)",
                r.rank, r.out, r.expected
            );
        }
    }
    println!("devapi-run: {passed} passed, {failed} failed");
    if failed > 0 {
        Err(format!("{failed} ranks failed"))
    } else {
        Ok(())
    }
}

fn sym_check(a: &SymCheckArgs) -> Result<(), String> {
    if a.procs && child_env().is_none() {
        println!("oxccl sym-check --procs: one process per rank; rank 0's lines below");
        return check_procs(&a.ranks);
    }
    let (b, desc) = pick_backend(a.backend).map_err(|e| e.to_string())?;
    let (dts, ops) = (parse_dtypes(&a.dtypes)?, parse_ops(&a.ops)?);
    let colls = a
        .colls
        .iter()
        .map(|c| Coll::from_name(c).ok_or(format!("unknown collective {c}")))
        .collect::<Result<Vec<_>, _>>()?;
    println!(
        "oxccl sym-check: {desc}; {} operations back to back per case",
        a.iters
    );
    let rank_counts = match child_env() {
        Some((_, _, n)) => vec![n],
        None => a.ranks.clone(),
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for n in rank_counts {
        let (r, placed) = make_ranks(&b, n, &a.devices)?;
        println!("--- {placed}");
        for setting in &a.settings {
            std::env::set_var("OXCCL_SYM", setting);
            for &coll in &colls {
                for &dt in &dts {
                    for &red in &ops {
                        for &count in &a.counts {
                            let t0 = std::time::Instant::now();
                            let (sb, rb) = harness::sym::sizes(coll, n, count, dt);
                            let res = harness::sym::SymBufs::new(&r, sb, rb).and_then(|bufs| {
                                let k = harness::sym::check_sym(
                                    &r,
                                    &bufs,
                                    coll,
                                    dt,
                                    red,
                                    count,
                                    a.iters,
                                    passed as u64,
                                );
                                bufs.release(&r).and(k)
                            });
                            let name = sym_choice_name(&r, coll, count, dt);
                            match res {
                                Ok(k) => {
                                    passed += 1;
                                    println!(
                                        "ok   {n} ranks {setting:<14} {:<14} {:<6} {:<4} {count:>9} {name:<22} {k} elements {:.2}s",
                                        coll.name(),
                                        dt.name(),
                                        red.name(),
                                        t0.elapsed().as_secs_f64()
                                    );
                                }
                                Err(e) => {
                                    failed += 1;
                                    println!(
                                        "FAIL {n} ranks {setting} {} {} {} {count}: {e}",
                                        coll.name(),
                                        dt.name(),
                                        red.name()
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    println!("check: {passed} passed, {failed} failed");
    if failed > 0 {
        Err(format!("{failed} cases failed"))
    } else {
        Ok(())
    }
}

fn sym_choice_name(r: &Ranks, coll: Coll, count: usize, dt: DataType) -> String {
    let kind = match coll {
        Coll::AllGather => oxccl_device::abi::SYM_KIND_ALL_GATHER,
        Coll::ReduceScatter => oxccl_device::abi::SYM_KIND_REDUCE_SCATTER,
        _ => oxccl_device::abi::SYM_KIND_ALL_REDUCE_ONE_SHOT,
    };
    r.comms[0]
        .sym_choice(kind, (count * dt.size()) as u64, dt)
        .map_or("classic (not sym)".into(), |c| c.name().to_string())
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
