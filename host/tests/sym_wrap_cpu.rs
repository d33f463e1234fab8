//! The symmetric kernels across the LL tag-generation wrap, through the communicator: the
//! test hook is the ranks' sequence slots in device memory (`Comm::sym_scratch_for_tests`),
//! set to a few ops before op 2^31 (where LL tags repeat and the first LL op of the new
//! generation clears the mailboxes between two barriers), with every kernel (LL, Lamport,
//! Simple) taking turns on one communicator across it, outputs poisoned and every element
//! checked each time. The same again across the u32 wrap of the sequence number (2^32).

use std::sync::Arc;

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::sym::{check_sym, sizes, SymBufs};
use oxccl::harness::{Coll, Ranks};
use oxccl::{Backend, Comm, Config, DataType, RedOp};
use oxccl_device::abi::{sym_ll_generation, MAX_BLOCKS};

/// Sets every rank's sequence slots to `seq` and its LL generation slots to `seq`'s
/// generation, as if `seq` ops had run (the kernels read them at their next launch).
fn jump_to(ranks: &Ranks, backend: &Arc<dyn Backend>, seq: u64) {
    for c in &ranks.comms {
        let (_, state, _) = c
            .sym_scratch_for_tests()
            .expect("scratch made with the first window");
        let mut bytes = Vec::with_capacity(2 * MAX_BLOCKS * 8);
        for _ in 0..MAX_BLOCKS {
            bytes.extend_from_slice(&seq.to_le_bytes());
        }
        for _ in 0..MAX_BLOCKS {
            bytes.extend_from_slice(&sym_ll_generation(seq).to_le_bytes());
        }
        backend.upload(c.device(), state, &bytes).unwrap();
    }
}

fn slot(ranks: &Ranks, backend: &Arc<dyn Backend>) -> u64 {
    let c = &ranks.comms[0];
    let (_, state, _) = c.sym_scratch_for_tests().unwrap();
    let mut b = [0u8; 8];
    backend.download(c.device(), &mut b, state).unwrap();
    u64::from_le_bytes(b)
}

#[test]
fn every_kernel_across_the_sequence_wraps() {
    // The environment is only read here: this test binary has one test.
    std::env::set_var("OXCCL_SYM_LL_MAX_BYTES", "16384");
    let backend: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    for n in [2usize, 3] {
        let comms = Comm::init_all_with(backend.clone(), &vec![0; n], Config::default()).unwrap();
        let ranks = Ranks::new(comms).unwrap();
        // A first op makes the scratch window and the sequence slots.
        let (sb, rb) = sizes(Coll::AllReduce, n, 1000, DataType::F32);
        let bufs = SymBufs::new(&ranks, sb, rb).unwrap();
        ranks.set_sym("ll".parse().unwrap());
        check_sym(
            &ranks,
            &bufs,
            Coll::AllReduce,
            DataType::F32,
            RedOp::Sum,
            1000,
            1,
            1,
        )
        .unwrap();
        bufs.release(&ranks).unwrap();
        // Op 6 after the jump (an LL all-reduce of the first op's size) lands exactly on 2^31
        // (then 2^32): its tag and half are those of op 0 (then op 2^31), whose lines are still
        // in the mailbox, so only the generation reset keeps it from reading them.
        for start in [(1u64 << 31) - 6, (1u64 << 32) - 6] {
            jump_to(&ranks, &backend, start);
            let mut ops = 0u64;
            let mut seed = 10;
            // Three rounds of LL, Lamport, Simple and LL again: the LL ops land on both sides
            // of the wrap (the reset op among them), the Lamport ones on all three buffers.
            for _round in 0..3 {
                for setting in ["ll", "lamport", "simple-oneshot", "ll"] {
                    ranks.set_sym(setting.parse().unwrap());
                    for (coll, dt, red, count) in [
                        (Coll::AllReduce, DataType::F32, RedOp::Sum, 1000usize),
                        (Coll::AllGather, DataType::Bf16, RedOp::Sum, 517),
                    ] {
                        let (sb, rb) = sizes(coll, n, count, dt);
                        let bufs = SymBufs::new(&ranks, sb, rb).unwrap();
                        check_sym(&ranks, &bufs, coll, dt, red, count, 1, seed).unwrap_or_else(|e| {
                            panic!(
                                "n {n}, {setting} {} at op {} (from {start:#x}): {e}",
                                coll.name(),
                                start + ops
                            )
                        });
                        bufs.release(&ranks).unwrap();
                        ops += 1;
                        seed += 1;
                    }
                }
            }
            // Every op ran on the device's count, from the jump on.
            assert_eq!(slot(&ranks, &backend), start + ops, "n {n} from {start:#x}");
        }
    }
}
