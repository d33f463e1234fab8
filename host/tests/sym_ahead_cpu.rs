//! Ranks running ahead of each other on the symmetric kernels, through the host API on the
//! CPU backend (`harness::sym::check_sym_ahead`, `oxccl sym-check --ahead`): batches of
//! operations enqueued on every rank with no wait between them, each on buffers of its own,
//! every element of every operation checked against the host reference.

use std::sync::Arc;

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::sym::{check_sym_ahead, sizes_ahead, SymBufs};
use oxccl::harness::{Coll, Ranks};
use oxccl::{Backend, Comm, Config, DataType, RedOp};

#[test]
fn batches_in_flight_on_every_setting() {
    let backend: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    const DEPTH: usize = 8;
    let mut seed = 1;
    for n in [2usize, 3, 8] {
        let ranks = Ranks::new(Comm::init_all_with(backend.clone(), &vec![0; n], Config::default()).unwrap())
            .unwrap();
        for setting in [
            "auto",
            "lamport",
            "ll",
            "simple-twoshot",
            "lamport-twoshot",
            "ll-twoshot",
        ] {
            ranks.set_sym(setting.parse().unwrap());
            for coll in [Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter] {
                for (dt, count) in [(DataType::F32, 1000), (DataType::Bf16, 3)] {
                    let (sb, rb) = sizes_ahead(coll, n, count, dt, DEPTH);
                    let bufs = SymBufs::new(&ranks, sb, rb).unwrap();
                    let k = check_sym_ahead(
                        &ranks,
                        &bufs,
                        coll,
                        dt,
                        RedOp::Sum,
                        count,
                        3 * DEPTH + 1,
                        DEPTH,
                        seed,
                    )
                    .unwrap_or_else(|e| panic!("{n} ranks {setting} {} {}: {e}", coll.name(), dt.name()));
                    assert!(k > 0);
                    bufs.release(&ranks).unwrap();
                    seed += 1;
                }
            }
        }
    }
}
