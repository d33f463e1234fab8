//! Collectives on registered windows (the symmetric kernels) on the CPU backend, ranks as
//! threads: all-reduce, all-gather and reduce-scatter with every kernel forced in turn
//! (`OXCCL_SYM`) and by the automatic choice, several data types and operators, ranks 1..8,
//! sizes from 1 element to past the LL capacity (the two-shot mailbox kernels also exactly
//! at their capacity and one element past it), back to back on fresh data (outputs poisoned
//! before each), in place for the all-reduce, every element checked against the host
//! reference. The kernels' sequence slots must count every launch (the symmetric path
//! really ran).

use std::sync::Arc;

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::sym::{check_sym, sizes, SymBufs};
use oxccl::harness::{Coll, Ranks};
use oxccl::{verify, Backend, Comm, Config, DataType, RedOp};
use oxccl_device::abi::{SYM_KIND_ALL_GATHER, SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_KIND_REDUCE_SCATTER};

/// The LL and Lamport capacity per rank this test sets.
const LL_MAX: usize = 16384;

const SETTINGS: [&str; 7] = [
    "auto",
    "simple-oneshot",
    "simple-twoshot",
    "ll",
    "lamport",
    "ll-twoshot",
    "lamport-twoshot",
];

/// The largest all-reduce count of `dt` the LL two-shot runs on `n` ranks: two blocks of
/// `n`'s share of the lines must fit a slot's `LL_MAX / 8` data lines (LL lines carry 8
/// bytes; Lamport's float lines 16, so this is half its capacity there).
fn ll_two_shot_max(n: usize, dt: DataType) -> usize {
    LL_MAX / 8 / 2 * n * 8 / dt.size()
}

/// An in-place all-reduce (`send` = `recv`) on the window buffers of `bufs`, checked.
fn check_in_place(ranks: &Ranks, bufs: &SymBufs, dt: DataType, red: RedOp, count: usize, seed: u64) {
    let op = verify::test_op(dt, red);
    let inputs: Vec<Vec<u8>> = (0..ranks.n())
        .map(|r| verify::gen_input(dt, red, count, seed + r as u64))
        .collect();
    for (i, b) in bufs.ranks.iter().enumerate() {
        let c = &ranks.comms[i];
        c.backend().upload(c.device(), b.send, &inputs[i]).unwrap();
    }
    for (i, b) in bufs.ranks.iter().enumerate() {
        // SAFETY: window buffers of `count` elements, alive until `bufs` is released.
        unsafe { ranks.comms[i].all_reduce_raw(b.send, b.send, count, dt, op, &ranks.streams[i]) }.unwrap();
    }
    ranks.sync().unwrap();
    let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    for (i, b) in bufs.ranks.iter().enumerate() {
        let c = &ranks.comms[i];
        let mut out = vec![0u8; count * dt.size()];
        c.backend().download(c.device(), &mut out, b.send).unwrap();
        verify::check_all_reduce_par(dt, op, &refs, &out, count)
            .unwrap_or_else(|e| panic!("in place, rank {i}: {e}"));
    }
}

/// One test function: `OXCCL_SYM_LL_MAX_BYTES` is process-wide. Each communicator runs the
/// `OXCCL_SYM` settings one after another (`Ranks::set_sym`).
#[test]
fn symmetric_kernels_every_setting() {
    // The environment is only read here: this test binary has one test.
    std::env::set_var("OXCCL_SYM_LL_MAX_BYTES", LL_MAX.to_string());
    let backend: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let mut cases = 0;
    for n in [1usize, 2, 3, 4, 5, 8] {
        let comms = Comm::init_all_with(backend.clone(), &vec![0; n], Config::default()).unwrap();
        let ranks = Ranks::new(comms).unwrap();
        let mut launches = 0u64;
        for setting in SETTINGS {
            ranks.set_sym(setting.parse().unwrap());
            let two_shot = setting.ends_with("-twoshot") && !setting.starts_with("simple");
            for coll in [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter] {
                for (dt, red) in [
                    (DataType::F32, RedOp::Sum),
                    (DataType::Bf16, RedOp::Max),
                    (DataType::I32, RedOp::Sum),
                    (DataType::U8, RedOp::Min),
                    (DataType::F64, RedOp::Prod),
                    (DataType::F16, RedOp::Avg),
                    (DataType::F8E4M3, RedOp::PreMulSum),
                ] {
                    // Past 16 KiB per rank LL and Lamport fall back to Simple (the two-shot
                    // past its own capacity).
                    let mut counts = vec![1usize, 7, 1000, 4099, 30011];
                    if two_shot && coll == Coll::AllReduce {
                        let max = ll_two_shot_max(n, dt);
                        counts.extend([n - 1, n + 1, max, max + 1]);
                        counts.retain(|&k| k > 0);
                    }
                    for count in counts {
                        let (sb, rb) = sizes(coll, n, count, dt);
                        let bufs = SymBufs::new(&ranks, sb, rb).unwrap();
                        let iters = if count > 4099 { 2 } else { 4 };
                        check_sym(&ranks, &bufs, coll, dt, red, count, iters, cases).unwrap_or_else(|e| {
                            panic!("n {n} {setting} {} {dt:?} {red:?} {count}: {e}", coll.name())
                        });
                        // `auto` runs the classic kernels for some sizes (see coll::sym).
                        let kind = match coll {
                            Coll::AllGather => SYM_KIND_ALL_GATHER,
                            Coll::ReduceScatter => SYM_KIND_REDUCE_SCATTER,
                            _ => SYM_KIND_ALL_REDUCE_ONE_SHOT,
                        };
                        let payload = (count * dt.size()) as u64;
                        let choice = ranks.comms[0].sym_choice(kind, payload, dt);
                        if choice.is_some() {
                            launches += iters as u64;
                        }
                        if two_shot && coll == Coll::AllReduce {
                            // The LL two-shot takes exactly its capacity, the Lamport one
                            // (twice as dense for floats) at least that much.
                            let name = choice.map(|c| c.name()).unwrap_or("classic");
                            let mailbox = name.contains("(two-shot)") && !name.contains("simple");
                            if count <= ll_two_shot_max(n, dt) {
                                assert!(mailbox, "n {n} {setting} {dt:?} {count}: {name}");
                            } else if setting == "ll-twoshot" {
                                assert!(!mailbox, "n {n} {setting} {dt:?} {count}: {name}");
                            }
                        }
                        if coll == Coll::AllReduce && matches!(count, 7 | 1000 | 4099) {
                            check_in_place(&ranks, &bufs, dt, red, count, cases);
                            if choice.is_some() {
                                launches += 1;
                            }
                        }
                        bufs.release(&ranks).unwrap();
                        cases += 1;
                    }
                }
            }
        }
        for c in &ranks.comms {
            let (_, state, _) = c
                .sym_scratch_for_tests()
                .expect("scratch made with the first window");
            let mut b = [0u8; 8];
            backend.download(c.device(), &mut b, state).unwrap();
            assert_eq!(
                u64::from_le_bytes(b),
                launches,
                "rank {}: every call ran a symmetric kernel",
                c.rank()
            );
        }
    }
    println!("{cases} cases");
}
