//! Mismatched symmetric collectives on the CPU backend (the same device code as the GPU's):
//! ranks that call different collectives, counts or data types on window buffers in the
//! same op get an error naming the peer and both calls, promptly (not at the timeout), and
//! the failed communicator does no more symmetric work. Each kernel family in turn (LL and
//! Lamport, one-shot and two-shot: header lines; Simple: fingerprints on the entry barrier),
//! forced through the communicator's config (`OXCCL_SYM`'s [`Config::sym`]; ranks that run
//! different kernels for the same call change their own policy around their launch).
#![allow(clippy::needless_range_loop)] // ranks index parallel vectors

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::coll::sym_policy::{SymPolicy, SymSetting};
use oxccl::harness::sym::SymBufs;
use oxccl::harness::Ranks;
use oxccl::{Backend, Comm, Config, DataType, Error, Op};
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

#[derive(Clone, Copy, Debug)]
enum Call {
    AllReduce(usize, DataType),
    AllGather(usize, DataType),
    /// An all-reduce launched under another `OXCCL_SYM` than the case's.
    ForcedAllReduce(usize, DataType, SymSetting),
}

fn launch(r: &Ranks, bufs: &SymBufs, rank: usize, call: Call) {
    let (c, s, b) = (&r.comms[rank], &r.streams[rank], &bufs.ranks[rank]);
    // SAFETY: window buffers of `bufs.send_bytes` / `bufs.recv_bytes`, large enough for
    // every call below, alive until `bufs` is released.
    unsafe {
        match call {
            Call::AllReduce(n, dt) => c.all_reduce_raw(b.send, b.recv, n, dt, Op::Sum, s),
            Call::AllGather(n, dt) => c.all_gather_raw(b.send, b.recv, n, dt, s),
            Call::ForcedAllReduce(n, dt, setting) => {
                // The kernel is chosen at launch, by this rank's policy.
                let case = c.sym_policy();
                c.set_sym_policy(SymPolicy { setting, ..case });
                let res = c.all_reduce_raw(b.send, b.recv, n, dt, Op::Sum, s);
                c.set_sym_policy(case);
                res
            }
        }
    }
    .unwrap();
}

/// Run `calls[rank]` on every rank; every rank in `expect` must report a `SymMismatch` with a
/// peer in `expect[rank]`, the others must report none or a mismatch too. Returns the
/// messages.
fn mismatch_case(policy: (&str, u32), calls: &[Call], expect: &[&[u32]]) -> Vec<String> {
    let n = calls.len();
    let r = ranks(n, policy);
    let setting = &format!("{} on {} CTAs", policy.0, policy.1);
    let bufs = SymBufs::new(&r, 1 << 14, 1 << 16).unwrap();
    // A matching op first: the comm works, and the mailboxes hold lines of an earlier op.
    for rank in 0..n {
        launch(&r, &bufs, rank, Call::AllReduce(64, DataType::F32));
    }
    r.sync().unwrap();
    let t0 = Instant::now();
    for rank in 0..n {
        launch(&r, &bufs, rank, calls[rank]);
    }
    for rank in 0..n {
        r.comms[rank].backend().synchronize(&r.streams[rank]).unwrap();
    }
    let took = t0.elapsed();
    let mut msgs = Vec::new();
    for rank in 0..n {
        match r.comms[rank].async_error() {
            Err(Error::SymMismatch {
                rank: me,
                peer,
                ours,
                theirs,
                ..
            }) => {
                assert_eq!(me, rank as u32);
                assert!(
                    expect[rank].contains(&peer),
                    "{setting} rank {rank}: peer {peer}, expected one of {:?}",
                    expect[rank]
                );
                assert_ne!(ours, theirs, "{setting} rank {rank}");
                let msg = r.comms[rank].async_error().unwrap_err().to_string();
                assert!(msg.contains(&format!("rank {peer} called")), "{msg}");
                eprintln!("{setting}: {msg}");
                msgs.push(msg);
            }
            other => panic!("{setting} rank {rank} {calls:?}: expected a symmetric mismatch, got {other:?} after {took:?}"),
        }
    }
    assert!(took < TIMEOUT / 3, "{setting}: mismatch detection took {took:?}");
    // Sticky: a later, matching call does no work and returns promptly.
    let t1 = Instant::now();
    for rank in 0..n {
        launch(&r, &bufs, rank, Call::AllReduce(64, DataType::F32));
    }
    assert!(r.sync().is_err());
    assert!(t1.elapsed() < TIMEOUT / 3, "{setting}: {:?}", t1.elapsed());
    bufs.release(&r).unwrap();
    msgs
}

#[test]
fn mismatched_symmetric_calls_are_reported() {
    let _one_at_a_time = serial();
    // One CTA per rank, then eight: with several, a block that starts after a sibling of its
    // rank recorded the mismatch does no work, and its peers' blocks must not wait for it
    // until the timeout.
    for (setting, ctas) in [
        "ll",
        "lamport",
        "simple-oneshot",
        "simple-twoshot",
        "ll-twoshot",
        "lamport-twoshot",
    ]
    .into_iter()
    .flat_map(|s| [(s, 1), (s, 8)])
    {
        let setting = (setting, ctas);
        // Counts differ (the larger side would wait for lines that never come).
        mismatch_case(
            setting,
            &[
                Call::AllReduce(100, DataType::F32),
                Call::AllReduce(200, DataType::F32),
            ],
            &[&[1], &[0]],
        );
        // Data types differ at equal bytes.
        mismatch_case(
            setting,
            &[
                Call::AllReduce(256, DataType::F32),
                Call::AllReduce(256, DataType::I32),
            ],
            &[&[1], &[0]],
        );
        // Collectives differ.
        mismatch_case(
            setting,
            &[
                Call::AllReduce(128, DataType::F32),
                Call::AllGather(128, DataType::F32),
            ],
            &[&[1], &[0]],
        );
        // One rank of three differs: the two that agree name it, it names either.
        mismatch_case(
            setting,
            &[
                Call::AllReduce(100, DataType::F32),
                Call::AllReduce(100, DataType::F32),
                Call::AllReduce(101, DataType::F32),
            ],
            &[&[2], &[2], &[0, 1]],
        );
    }
    // One rank runs the two-shot, the other the one-shot of the same all-reduce (the
    // fingerprints differ in the kind): both name the peer's call and their own.
    for (two, one) in [("ll-twoshot", "ll"), ("lamport-twoshot", "lamport")] {
        let msgs = mismatch_case(
            (one, 0),
            &[
                Call::ForcedAllReduce(300, DataType::F32, two.parse().unwrap()),
                Call::AllReduce(300, DataType::F32),
            ],
            &[&[1], &[0]],
        );
        let proto = &one;
        let (two_name, one_name) = (format!("(sym/{proto} (two-shot))"), format!("(sym/{proto})"));
        for m in &msgs {
            assert!(m.contains(&two_name) && m.contains(&one_name), "{m}");
        }
        assert!(
            msgs[0].contains(&format!(
                "rank 1 called all_reduce of 300 x f32 with sum {one_name}"
            )),
            "{}",
            msgs[0]
        );
        assert!(
            msgs[1].contains(&format!(
                "rank 0 called all_reduce of 300 x f32 with sum {two_name}"
            )),
            "{}",
            msgs[1]
        );
        // Two-shot on three ranks, one with another count, so small that only rank 0's
        // block has a line: rank 1 (empty block) must see the odd header itself before it
        // waits for rank 0's reduced line, which rank 0's mismatch stops.
        mismatch_case(
            (two, 0),
            &[
                Call::AllReduce(2, DataType::F32),
                Call::AllReduce(2, DataType::F32),
                Call::AllReduce(1, DataType::F32),
            ],
            &[&[2], &[2], &[0, 1]],
        );
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
