//! Mismatched symmetric collectives on the CPU backend (the same device code as the GPU's):
//! ranks that call different collectives, counts or data types on window buffers in the
//! same op get an error naming the peer and both calls, promptly (not at the timeout), and
//! the failed communicator does no more symmetric work. The cases and their checks are
//! `oxccl::harness::mismatch` (also run on the GPU by `oxccl sym-mismatch`): each kernel
//! family in turn (LL and Lamport, one-shot and two-shot: header lines; Simple: fingerprints
//! on the entry barrier), forced through the communicator's config (`OXCCL_SYM`'s
//! [`Config::sym`]; ranks that run different kernels for the same call change their own
//! policy around their launch).

use std::sync::Arc;
use std::time::Duration;

use oxccl::backend::cpu::CpuBackend;
use oxccl::coll::sym_policy::SymSetting;
use oxccl::harness::mismatch;
use oxccl::harness::sym::SymBufs;
use oxccl::harness::Ranks;
use oxccl::topo::Placement;
use oxccl::{Backend, Comm, Config, DataType, Error};
use oxccl_device::abi::SYM_KIND_ALL_REDUCE_ONE_SHOT;

/// The tests of this file one at a time: the mismatch test bounds how long detection takes,
/// which another test's spinning rank threads would stretch on a small machine.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The timeout the waits would give up at; detection must come well before it.
const TIMEOUT: Duration = Duration::from_secs(3);

/// `n` ranks whose symmetric kernels follow `(setting, ctas)` (`OXCCL_SYM`,
/// `OXCCL_SYM_CTAS`).
fn ranks(n: usize, (setting, ctas): (&str, u32)) -> Ranks {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let cfg = Config {
        timeout_ns: TIMEOUT.as_nanos() as u64,
        sym: setting.to_string(),
        sym_ctas: ctas,
        ..Config::default()
    };
    Ranks::new(Comm::init_all_with(b, &vec![0; n], cfg).unwrap()).unwrap()
}

#[test]
fn mismatched_symmetric_calls_are_reported() {
    let _one_at_a_time = serial();
    // One CTA per rank, then eight: with several, a block that starts after a sibling of its
    // rank recorded the mismatch does no work, and its peers' blocks must not wait for it
    // until the timeout. Then two-shot against one-shot on the tuner's CTAs.
    for case in mismatch::cases(mismatch::CPU_CTAS) {
        let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
        match mismatch::run_case(&b, &Placement::default(), TIMEOUT, &case) {
            Ok(out) => {
                for m in &out.msgs {
                    eprintln!("{}: {m}", case.label());
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// The symmetric-kernel policy comes from the communicator's config (read from `OXCCL_SYM`
/// when it is made, never at launch); an invalid one fails creation naming the variable;
/// `Comm::set_sym_policy` changes a live rank's choice.
#[test]
fn the_policy_is_the_configs_and_can_be_changed_per_rank() {
    let _one_at_a_time = serial();
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let bad = Config {
        sym: "lamprot".into(),
        ..Config::default()
    };
    let e = Comm::init_all_with(b, &[0, 0], bad).map(|_| ()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidSetting {
                setting: "OXCCL_SYM",
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("\"lamprot\"") && e.to_string().contains("simple-oneshot"),
        "{e}"
    );
    let r = ranks(2, ("off", 0));
    let all_reduce = |c: &Comm| c.sym_choice(SYM_KIND_ALL_REDUCE_ONE_SHOT, 1024, DataType::F32);
    for c in &r.comms {
        assert_eq!(c.sym_policy().setting, SymSetting::Off);
        assert_eq!(all_reduce(c), None);
    }
    r.set_sym(SymSetting::Lamport);
    for c in &r.comms {
        assert_eq!(all_reduce(c).map(|k| k.name()), Some("sym/lamport"));
    }
    // And it runs: a Lamport all-reduce on windows, every element checked.
    let bufs = SymBufs::new(&r, 4096, 4096).unwrap();
    oxccl::harness::sym::check_sym(
        &r,
        &bufs,
        oxccl::harness::Coll::AllReduce,
        DataType::F32,
        oxccl::RedOp::Sum,
        1024,
        2,
        5,
    )
    .unwrap();
    bufs.release(&r).unwrap();
}
