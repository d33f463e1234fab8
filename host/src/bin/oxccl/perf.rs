//! `oxccl perf` (the bandwidth table next to a device-to-device copy, and CUDA-graph
//! latency next to the same graph with empty kernels) and `oxccl tuner`.

use super::*;

#[derive(Args)]
pub(crate) struct PerfArgs {
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
    /// Also time the host: the wall time of enqueueing one operation on one rank (the loop
    /// over every rank's call, per operation and rank), printed after each row with the
    /// device time it amounts to on all ranks in the copy column (plain launches only).
    #[arg(long)]
    pub host: bool,
    /// Run on buffers in registered windows (`mem_alloc` + `register_window`): the
    /// symmetric kernels (all_reduce, all_gather, reduce_scatter).
    #[arg(long)]
    pub window: bool,
}

pub(crate) fn perf(a: &PerfArgs) -> Result<(), String> {
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
pub(crate) fn perf_table(
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
    if a.host {
        println!("(each row is followed by the host's time to enqueue one operation on one rank, the host's time for one operation on every rank, and that against the device time per operation)");
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
                host: false,
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
                    sym_choice_name(r, coll, count, dt, red)
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
            if a.host {
                let th = time_with(Timing { host: true, ..timing })?;
                println!(
                    "{:>8} {:>11} {:>26} {:>10.2} {:>10} {:>10} {:>10.2} {:>11} {:>11} {:>6.3}",
                    "",
                    "",
                    "host per call | all ranks",
                    th * 1e6 / ranks as f64,
                    "",
                    "",
                    th * 1e6,
                    "",
                    "",
                    th / t
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

/// Apply `proto` (an `NCCL_PROTO` value or `auto`) and `algo` to every rank held here.
pub(crate) fn set_tuning(r: &Ranks, algo: Option<&str>, proto: &str) -> Result<(), String> {
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
pub(crate) fn choice_name(r: &Ranks, dt: DataType, bytes: usize) -> String {
    r.comms[0]
        .tune(oxccl_device::abi::COLL_ALL_REDUCE, dt, bytes as u64)
        .map_or_else(|e| format!("error: {e}"), |c| c.to_string())
}

#[derive(Args)]
pub(crate) struct TunerArgs {
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

pub(crate) fn tuner_table(a: &TunerArgs) -> Result<(), String> {
    let dt = parse_dtypes(std::slice::from_ref(&a.dtype))?[0];
    let max = parse_size(&a.max).ok_or("bad --max")? as u64;
    let cfg = Config {
        algo: a.algo.clone().or_else(oxccl::settings::algo_env),
        proto: a.proto.clone().or_else(oxccl::settings::proto_env),
        ..Config::default()
    };
    let ov = cfg.overrides().map_err(|e| e.to_string())?;
    let th = tuner::Thresholds::of(&cfg);
    let sym = cfg.sym_policy().map_err(|e| e.to_string())?;
    print!("{}", tuner::table(&th, &ov, a.ranks, dt.size(), max));
    // The symmetric kernels (buffers in registered windows), by payload per rank; the CTA
    // cap as on a GPU with 132 SMs and one rank per GPU, unless --ranks share one.
    let cap = (132 * 2 / a.ranks.max(1)).clamp(1, oxccl_device::abi::MAX_BLOCKS as u32);
    print!(
        "\n{}",
        oxccl::coll::sym_table::print_table(sym, dt, a.ranks, cfg.sym_ll_capacity(), cap, max)
    );
    Ok(())
}
