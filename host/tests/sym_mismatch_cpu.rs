//! Mismatched symmetric collectives on the CPU backend (the same device code as the GPU's):
//! ranks that call different collectives, counts or data types on window buffers in the
//! same op get an error naming the peer and both calls, promptly (not at the timeout), and
//! the failed communicator does no more symmetric work. Each kernel family in turn (LL and
//! Lamport, one-shot and two-shot: header lines; Simple: fingerprints on the entry barrier),
//! forced with `OXCCL_SYM`; one test function, since the variable is process-wide (ranks
//! that run different kernels for the same call set it around their own launch).
#![allow(clippy::needless_range_loop)] // ranks index parallel vectors

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::sym::SymBufs;
use oxccl::harness::Ranks;
use oxccl::{Backend, Comm, Config, DataType, Error, Op};

/// The timeout the waits would give up at; detection must come well before it.
const TIMEOUT: Duration = Duration::from_secs(3);

fn ranks(n: usize) -> Ranks {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let cfg = Config {
        timeout_ns: TIMEOUT.as_nanos() as u64,
        ..Config::default()
    };
    Ranks::new(Comm::init_all_with(b, &vec![0; n], cfg).unwrap()).unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Call {
    AllReduce(usize, DataType),
    AllGather(usize, DataType),
    /// An all-reduce launched under another `OXCCL_SYM` than the case's.
    ForcedAllReduce(usize, DataType, &'static str),
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
                // The kernel is chosen at launch, on this thread.
                let case = std::env::var("OXCCL_SYM").unwrap();
                std::env::set_var("OXCCL_SYM", setting);
                let res = c.all_reduce_raw(b.send, b.recv, n, dt, Op::Sum, s);
                std::env::set_var("OXCCL_SYM", case);
                res
            }
        }
    }
    .unwrap();
}

/// Run `calls[rank]` on every rank; every rank in `expect` must report a `SymMismatch` with a
/// peer in `expect[rank]`, the others must report none or a mismatch too. Returns the
/// messages.
fn mismatch_case(setting: &str, calls: &[Call], expect: &[&[u32]]) -> Vec<String> {
    let n = calls.len();
    let r = ranks(n);
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
    .flat_map(|s| [(s, "1"), (s, "8")])
    {
        std::env::set_var("OXCCL_SYM", setting);
        std::env::set_var("OXCCL_SYM_CTAS", ctas);
        let setting = &format!("{setting} on {ctas} CTAs");
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
    std::env::remove_var("OXCCL_SYM_CTAS");
    // One rank runs the two-shot, the other the one-shot of the same all-reduce (the
    // fingerprints differ in the kind): both name the peer's call and their own.
    for (two, one) in [("ll-twoshot", "ll"), ("lamport-twoshot", "lamport")] {
        std::env::set_var("OXCCL_SYM", one);
        let msgs = mismatch_case(
            two,
            &[
                Call::ForcedAllReduce(300, DataType::F32, two),
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
        std::env::set_var("OXCCL_SYM", two);
        mismatch_case(
            two,
            &[
                Call::AllReduce(2, DataType::F32),
                Call::AllReduce(2, DataType::F32),
                Call::AllReduce(1, DataType::F32),
            ],
            &[&[2], &[2], &[0, 1]],
        );
    }
}
