//! `oxccl check` (the correctness matrix, in one process or one process per rank) and
//! `oxccl graph-check` (all-reduces replayed from a CUDA graph).

use super::*;

#[derive(Args)]
pub(crate) struct CheckArgs {
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

#[allow(clippy::too_many_arguments)]
pub(crate) fn check(a: &CheckArgs) -> Result<(), String> {
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

/// A `check`-style command with `--procs`: run it as `n` processes for each `n` of
/// `rank_counts`, sum the children's closing counts and fail if any case failed.
pub(crate) fn check_procs(rank_counts: &[usize]) -> Result<(), String> {
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
pub(crate) fn run_procs(n: usize) -> Result<(usize, usize), String> {
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

#[derive(Args)]
pub(crate) struct GraphCheckArgs {
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

pub(crate) fn graph_check(a: &GraphCheckArgs) -> Result<(), String> {
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
