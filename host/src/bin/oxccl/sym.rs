//! `oxccl sym-check` (collectives on registered windows, every symmetric kernel forced in
//! turn), `oxccl sym-mismatch` (ranks calling mismatched ones must each get an error naming
//! a peer) and `oxccl devapi-run` (a user kernel linked against the Device API bitcode).

use super::*;
use oxccl::coll::sym_policy::SymSetting;

#[derive(Args)]
pub(crate) struct SymCheckArgs {
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
    settings: Vec<SymSetting>,
    /// Operations back to back per case (fresh data each).
    #[arg(long, default_value_t = 3)]
    iters: usize,
    /// Operations in flight at once, each on buffers of its own: with more than 1, each
    /// batch of that many is enqueued on every rank with no wait between them, so ranks run
    /// ahead of each other through the rotating mailbox buffers (the default waits for
    /// every operation before the next).
    #[arg(long, default_value_t = 1)]
    ahead: usize,
    /// One process per rank.
    #[arg(long)]
    procs: bool,
    /// Devices of the ranks (see `check --devices`).
    #[arg(long, default_value = "0")]
    devices: Placement,
}

pub(crate) fn sym_check(a: &SymCheckArgs) -> Result<(), String> {
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
    if a.ahead > 1 {
        println!(
            "oxccl sym-check: {desc}; {} operations back to back per case, up to {} in flight",
            a.iters, a.ahead
        );
    } else {
        println!(
            "oxccl sym-check: {desc}; {} operations back to back per case",
            a.iters
        );
    }
    let rank_counts = match child_env() {
        Some((_, _, n)) => vec![n],
        None => a.ranks.clone(),
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for n in rank_counts {
        let (r, placed) = make_ranks(&b, n, &a.devices)?;
        println!("--- {placed}");
        for setting in &a.settings {
            r.set_sym(*setting);
            for &coll in &colls {
                for &dt in &dts {
                    for &red in &ops {
                        for &count in &a.counts {
                            let t0 = std::time::Instant::now();
                            let (sb, rb) = if a.ahead > 1 {
                                harness::sym::sizes_ahead(coll, n, count, dt, a.ahead)
                            } else {
                                harness::sym::sizes(coll, n, count, dt)
                            };
                            let res = harness::sym::SymBufs::new(&r, sb, rb).and_then(|bufs| {
                                let k = harness::sym::check_sym_ahead(
                                    &r,
                                    &bufs,
                                    coll,
                                    dt,
                                    red,
                                    count,
                                    a.iters,
                                    a.ahead,
                                    passed as u64,
                                );
                                bufs.release(&r).and(k)
                            });
                            let name = sym_choice_name(&r, coll, count, dt, red);
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

pub(crate) fn sym_choice_name(r: &Ranks, coll: Coll, count: usize, dt: DataType, red: RedOp) -> String {
    let kind = match coll {
        Coll::AllGather => oxccl_device::abi::SYM_KIND_ALL_GATHER,
        Coll::ReduceScatter => oxccl_device::abi::SYM_KIND_REDUCE_SCATTER,
        _ => oxccl_device::abi::SYM_KIND_ALL_REDUCE_ONE_SHOT,
    };
    let payload = (count * dt.size()) as u64;
    let c = &r.comms[0];
    c.sym_choice(kind, payload, dt)
        .map_or("classic (not sym)".into(), |ch| {
            let plan = c.sym_plan(ch, red as u32, payload, dt);
            let g = if plan.grouped { "+grouped" } else { "" };
            format!("{}{g}", ch.name())
        })
}

#[derive(Args)]
pub(crate) struct SymMismatchArgs {
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// The communicators' device wait timeout (`OXCCL_TIMEOUT_MS`'s role; at least 1, as 0
    /// would mean none): every case is bounded by it, and detection and the failure of a
    /// later call must each take under a third of it.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: u64,
    /// `OXCCL_SYM_CTAS` values to run every setting with (0: the tuner's table). Default:
    /// 1,8 on the CPU backend, 0,1,8,16 on the GPU.
    #[arg(long, value_delimiter = ',')]
    ctas: Vec<u32>,
    /// Devices of the ranks (see `check --devices`).
    #[arg(long, default_value = "0")]
    devices: Placement,
    /// Also print every rank's error message under its case.
    #[arg(long)]
    messages: bool,
}

/// The bound on one `sym-mismatch` case, whatever the kernels do: every wait in them gives
/// up at the communicator's timeout, but a kernel that did not would block its stream's
/// synchronization for good, and the tool must not hang silently. A thread that, once a case
/// has run past `limit`, names it and ends the process with status 2.
struct Watchdog {
    current: std::sync::Arc<std::sync::Mutex<Option<(String, std::time::Instant)>>>,
}

impl Watchdog {
    fn start(limit: std::time::Duration) -> Self {
        let current = std::sync::Arc::new(std::sync::Mutex::new(None::<(String, std::time::Instant)>));
        let watched = current.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let late = watched
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .filter(|(_, t0)| t0.elapsed() > limit)
                .map(|(label, _)| label.clone());
            if let Some(label) = late {
                eprintln!(
                    "oxccl sym-mismatch: case {label} has run for over {limit:?} (the kernels' waits should have given up at the timeout long before); exiting"
                );
                std::process::exit(2);
            }
        });
        Watchdog { current }
    }

    /// No case runs.
    fn disarm(&self) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The case `label` starts now.
    fn arm(&self, label: &str) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((label.to_string(), std::time::Instant::now()));
    }
}

pub(crate) fn sym_mismatch(a: &SymMismatchArgs) -> Result<(), String> {
    use harness::mismatch;
    let (b, desc) = pick_backend(a.backend).map_err(|e| e.to_string())?;
    let timeout = std::time::Duration::from_millis(a.timeout_ms);
    let ctas = if a.ctas.is_empty() {
        mismatch::ctas_for(b.kind())
    } else {
        &a.ctas
    };
    let cases = mismatch::cases(ctas);
    println!(
        "oxccl sym-mismatch: {desc}; {} cases, timeout {} ms (each must be detected, and a later call fail, in under a third of it)",
        cases.len(),
        a.timeout_ms
    );
    let mut failed = Vec::new();
    let watchdog = Watchdog::start(timeout * 4 + std::time::Duration::from_secs(20));
    for case in &cases {
        watchdog.arm(&case.label());
        let ctas = match case.ctas {
            0 => "tuner's".to_string(),
            c => c.to_string(),
        };
        let name = match case.grouped {
            oxccl::coll::sym_policy::Grouped::Auto => case.name.to_string(),
            g => format!("{} (grouped {g})", case.name),
        };
        let head = format!(
            "{:<16} {ctas:>7} CTAs  {name:<38} {} ranks",
            case.setting,
            case.calls.len()
        );
        match mismatch::run_case(&b, &a.devices, timeout, case) {
            Ok(out) => {
                println!(
                    "ok   {head}  detected in {:>8.2} ms, later call failed in {:>6.2} ms",
                    out.detected_in.as_secs_f64() * 1e3,
                    out.sticky_in.as_secs_f64() * 1e3
                );
                if a.messages {
                    for m in &out.msgs {
                        println!("       {m}");
                    }
                }
            }
            Err(e) => {
                // The message's own prefix repeats the head.
                let label = format!("{}: ", case.label());
                println!("FAIL {head}: {}", e.strip_prefix(&label).unwrap_or(&e));
                failed.push(case.label());
            }
        }
    }
    watchdog.disarm();
    match failed.as_slice() {
        [] => {
            println!("sym-mismatch: {} cases passed", cases.len());
            Ok(())
        }
        [one] => Err(format!(
            "sym-mismatch: case {one} failed ({} passed)",
            cases.len() - 1
        )),
        many => Err(format!(
            "sym-mismatch: {} of {} cases failed: {}",
            many.len(),
            cases.len(),
            many.join("; ")
        )),
    }
}

#[derive(Args)]
pub(crate) struct DevapiRunArgs {
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

pub(crate) fn devapi_run(a: &DevapiRunArgs) -> Result<(), String> {
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
