//! Collectives on registered windows (the symmetric kernels) on the CPU backend, ranks as
//! threads: all-reduce, all-gather and reduce-scatter with every kernel forced in turn
//! (`OXCCL_SYM`) and by the automatic choice, several data types and operators, ranks 1..8,
//! sizes from 1 element to past the LL capacity, back to back on fresh data (outputs
//! poisoned before each), every element checked against the host reference. The kernels'
//! sequence slots must count every launch (the symmetric path really ran).

use std::sync::Arc;

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::sym::{check_sym, sizes, SymBufs};
use oxccl::harness::{Coll, Ranks};
use oxccl::{Backend, Comm, Config, DataType, RedOp};

/// One test function: `OXCCL_SYM` is process-wide, so the settings run one after another.
#[test]
fn symmetric_kernels_every_setting() {
    // The environment is only read here: this test binary has one test.
    std::env::set_var("OXCCL_SYM_LL_MAX_BYTES", "16384");
    let backend: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let mut cases = 0;
    for n in [1usize, 2, 3, 4, 8] {
        let comms = Comm::init_all_with(backend.clone(), &vec![0; n], Config::default()).unwrap();
        let ranks = Ranks::new(comms).unwrap();
        let mut launches = 0u64;
        for setting in ["auto", "simple-oneshot", "simple-twoshot", "ll", "lamport"] {
            std::env::set_var("OXCCL_SYM", setting);
            for coll in [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter] {
                for (dt, red) in [
                    (DataType::F32, RedOp::Sum),
                    (DataType::Bf16, RedOp::Max),
                    (DataType::I32, RedOp::Sum),
                    (DataType::U8, RedOp::Min),
                    (DataType::F64, RedOp::Prod),
                ] {
                    // Past 16 KiB per rank LL and Lamport fall back to Simple.
                    for count in [1usize, 7, 1000, 4099, 30011] {
                        let (sb, rb) = sizes(coll, n, count, dt);
                        let bufs = SymBufs::new(&ranks, sb, rb).unwrap();
                        let iters = if count > 4099 { 2 } else { 4 };
                        check_sym(&ranks, &bufs, coll, dt, red, count, iters, cases).unwrap_or_else(|e| {
                            panic!("n {n} {setting} {} {dt:?} {red:?} {count}: {e}", coll.name())
                        });
                        // `auto` runs the classic kernels for some sizes (see coll::sym).
                        let kind = match coll {
                            Coll::AllGather => oxccl_device::abi::SYM_KIND_ALL_GATHER,
                            Coll::ReduceScatter => oxccl_device::abi::SYM_KIND_REDUCE_SCATTER,
                            _ => oxccl_device::abi::SYM_KIND_ALL_REDUCE_ONE_SHOT,
                        };
                        let payload = (count * dt.size()) as u64;
                        if ranks.comms[0].sym_choice(kind, payload).is_some() {
                            launches += iters as u64;
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
