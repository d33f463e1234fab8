//! Mismatched symmetric collectives, on any backend (`oxccl sym-mismatch`,
//! `host/tests/sym_mismatch_cpu.rs`): ranks that call different collectives, counts or data
//! types on window buffers in the same op, or the same all-reduce with different kernels
//! (two-shot against one-shot), must each get an [`Error::SymMismatch`] naming a peer and
//! both calls, promptly (well before the timeout), and the failed communicator must do no
//! more symmetric work (a later, matching call fails promptly too).
//!
//! Every kernel family is covered in turn (LL and Lamport, one-shot and two-shot: header
//! lines; Simple: fingerprints on the entry barrier), forced through the communicator's
//! config (`OXCCL_SYM`, `OXCCL_SYM_CTAS`); ranks that run another kernel for the same call
//! change their own policy around their launch. Checks return `Err` with a message naming
//! the setting, the CTA count, the case and the rank; nothing here panics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl_device::abi::DataType;

use super::sym::SymBufs;
use super::Ranks;
use crate::backend::{Backend, BackendKind};
use crate::coll::sym_policy::{Grouped, SymPolicy, SymSetting};
use crate::coll::Op;
use crate::comm::{Comm, Config};
use crate::error::Error;
use crate::topo::Placement;

/// The CTA counts the CPU test runs every setting with: one per rank, then eight (with
/// several, a block that starts after a sibling of its rank recorded the mismatch does no
/// work, and its peers' blocks must not wait for it until the timeout).
pub const CPU_CTAS: &[u32] = &[1, 8];

/// The CTA counts on the GPU: also the tuner's choice (0) and sixteen (blocks of many
/// threads each, most of them empty for these small counts).
pub const GPU_CTAS: &[u32] = &[0, 1, 8, 16];

/// The CTA counts for a backend.
pub fn ctas_for(kind: BackendKind) -> &'static [u32] {
    match kind {
        BackendKind::Gpu => GPU_CTAS,
        BackendKind::Cpu => CPU_CTAS,
    }
}

/// One rank's call.
#[derive(Clone, Copy, Debug)]
pub enum Call {
    AllReduce(usize, DataType),
    AllGather(usize, DataType),
    /// An all-reduce launched under another `OXCCL_SYM` than the case's.
    ForcedAllReduce(usize, DataType, SymSetting),
}

/// What the messages must say beyond naming the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// Only the peer (`rank {peer} called`).
    Peer,
    /// Rank 0 ran the two-shot, rank 1 the one-shot of an all-reduce of 300 f32 (sum) with
    /// mailbox protocol `proto` (`ll`, `lamport`): both messages name both kernels, and each
    /// names the other rank's call.
    TwoShotAgainstOneShot { proto: &'static str },
}

/// One mismatch case: the communicator's settings, each rank's call and the peers each rank
/// may name.
#[derive(Clone, Debug)]
pub struct MismatchCase {
    /// What differs.
    pub name: &'static str,
    /// `OXCCL_SYM` of every rank's communicator.
    pub setting: SymSetting,
    /// `OXCCL_SYM_CTAS` (0: the tuner's table).
    pub ctas: u32,
    /// `OXCCL_SYM_GROUPED` of every rank's communicator.
    pub grouped: Grouped,
    /// Rank `r` calls `calls[r]`.
    pub calls: Vec<Call>,
    /// Rank `r` must name one of `expect[r]`.
    pub expect: Vec<Vec<u32>>,
    pub names: Names,
}

impl MismatchCase {
    /// `ll on 8 CTAs, counts differ` (the prefix of its failures).
    pub fn label(&self) -> String {
        let g = match self.grouped {
            Grouped::Auto => String::new(),
            g => format!(" (grouped {g})"),
        };
        format!("{}{g} on {} CTAs, {}", self.setting, self.ctas, self.name)
    }
}

/// What a passing case measured.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Each rank's error message.
    pub msgs: Vec<String>,
    /// From the mismatched launches to every rank's stream done.
    pub detected_in: Duration,
    /// From the later, matching launches to their (failed) synchronization.
    pub sticky_in: Duration,
}

/// Every case: each mailbox and Simple setting on each of `ctas`, with counts, data types,
/// collectives and one rank of three differing; then, on the tuner's CTAs, two-shot against
/// one-shot of the same all-reduce and a two-shot whose odd rank's count is so small that
/// only rank 0's block has a line.
pub fn cases(ctas: &[u32]) -> Vec<MismatchCase> {
    use Call::AllReduce as Ar;
    use DataType::{F32, I32};
    let case = |name, setting, ctas, calls: &[Call], expect: &[&[u32]]| MismatchCase {
        name,
        setting,
        ctas,
        grouped: Grouped::Auto,
        calls: calls.to_vec(),
        expect: expect.iter().map(|e| e.to_vec()).collect(),
        names: Names::Peer,
    };
    let mut out = Vec::new();
    for setting in [
        SymSetting::Ll,
        SymSetting::Lamport,
        SymSetting::SimpleOneShot,
        SymSetting::SimpleTwoShot,
        SymSetting::LlTwoShot,
        SymSetting::LamportTwoShot,
    ] {
        for &c in ctas {
            // Counts differ (the larger side would wait for lines that never come).
            out.push(case(
                "counts differ",
                setting,
                c,
                &[Ar(100, F32), Ar(200, F32)],
                &[&[1], &[0]],
            ));
            // Data types differ at equal bytes.
            out.push(case(
                "data types differ",
                setting,
                c,
                &[Ar(256, F32), Ar(256, I32)],
                &[&[1], &[0]],
            ));
            out.push(case(
                "collectives differ",
                setting,
                c,
                &[Ar(128, F32), Call::AllGather(128, F32)],
                &[&[1], &[0]],
            ));
            // The two that agree name the odd one, it names either.
            out.push(case(
                "one rank of three differs",
                setting,
                c,
                &[Ar(100, F32), Ar(100, F32), Ar(101, F32)],
                &[&[2], &[2], &[0, 1]],
            ));
            // More ranks than the grouped kernels poll at once (`GROUP` in
            // device/src/coll/sym/grouped.rs): the odd rank's header is in a later group.
            out.push(case(
                "one rank of six differs",
                setting,
                c,
                &[[Ar(100, F32); 5].as_slice(), &[Ar(101, F32)]].concat(),
                &[&[5], &[5], &[5], &[5], &[5], &[0, 1, 2, 3, 4]],
            ));
        }
    }
    // The grouped kernels (LL and Lamport, one-shot): seven ranks under `auto` (grouped
    // there), and forced on for fewer, the odd rank first in its group, last, or alone in
    // the last one; an all-gather against an all-reduce.
    for setting in [SymSetting::Ll, SymSetting::Lamport] {
        for &c in ctas {
            out.push(case(
                "one rank of seven differs",
                setting,
                c,
                &[[Ar(100, F32); 3].as_slice(), &[Ar(64, F32)], &[Ar(100, F32); 3]].concat(),
                &[&[3], &[3], &[3], &[0, 1, 2, 4, 5, 6], &[3], &[3], &[3]],
            ));
            let on = |mut m: MismatchCase| {
                m.grouped = Grouped::On;
                m
            };
            out.push(on(case(
                "one rank of five differs",
                setting,
                c,
                &[[Ar(100, F32); 4].as_slice(), &[Ar(99, F32)]].concat(),
                &[&[4], &[4], &[4], &[4], &[0, 1, 2, 3]],
            )));
            out.push(on(case(
                "collectives differ",
                setting,
                c,
                &[Ar(128, F32), Ar(128, F32), Call::AllGather(128, F32)],
                &[&[2], &[2], &[0, 1]],
            )));
        }
    }
    for (two, one, proto) in [
        (SymSetting::LlTwoShot, SymSetting::Ll, "ll"),
        (SymSetting::LamportTwoShot, SymSetting::Lamport, "lamport"),
    ] {
        // The fingerprints differ in the kind: both name the peer's call and their own.
        out.push(MismatchCase {
            names: Names::TwoShotAgainstOneShot { proto },
            ..case(
                "two-shot against one-shot",
                one,
                0,
                &[Call::ForcedAllReduce(300, F32, two), Ar(300, F32)],
                &[&[1], &[0]],
            )
        });
        // Rank 1 (empty block) must see the odd header itself before it waits for rank 0's
        // reduced line, which rank 0's mismatch stops.
        out.push(case(
            "two-shot, odd count, empty block",
            two,
            0,
            &[Ar(2, F32), Ar(2, F32), Ar(1, F32)],
            &[&[2], &[2], &[0, 1]],
        ));
    }
    out
}

/// Enqueue `call` on the `rank`-th rank held in `r`.
fn launch(r: &Ranks, bufs: &SymBufs, rank: usize, call: Call) -> Result<(), String> {
    let (c, s, b) = (&r.comms[rank], &r.streams[rank], &bufs.ranks[rank]);
    // SAFETY: window buffers of `bufs.send_bytes` / `bufs.recv_bytes` (made by `run_case`
    // large enough for every call of `cases`), alive until `bufs` is released.
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
    .map_err(|e| format!("rank {rank}: launching {call:?} failed: {e}"))
}

/// Run `case` on a fresh communicator of `backend` (ranks on `place`'s devices) whose waits
/// give up at `timeout`: a matching all-reduce first, then `case.calls`, then a matching
/// all-reduce again. Every rank must report a [`Error::SymMismatch`] with a peer it may
/// name, its call and the peer's different, a message naming the peer; all within a third
/// of `timeout`, and the later call must fail within a third of `timeout` too.
pub fn run_case(
    backend: &Arc<dyn Backend>,
    place: &Placement,
    timeout: Duration,
    case: &MismatchCase,
) -> Result<Outcome, String> {
    let label = case.label();
    let n = case.calls.len();
    let devices = place
        .devices(n, backend.device_count())
        .map_err(|e| format!("{label}: {e}"))?;
    let cfg = Config {
        timeout_ns: timeout.as_nanos().min(u64::MAX as u128) as u64,
        sym: case.setting.name().to_string(),
        sym_ctas: case.ctas,
        sym_grouped: case.grouped.name().to_string(),
        ..Config::default()
    };
    let r = Comm::init_all_with(backend.clone(), &devices, cfg)
        .and_then(Ranks::new)
        .map_err(|e| format!("{label}: making {n} ranks: {e}"))?;
    let bufs = SymBufs::new(&r, 1 << 14, 1 << 16).map_err(|e| format!("{label}: windows: {e}"))?;
    let res = checks(&r, &bufs, timeout, case).map_err(|e| format!("{label}: {e}"));
    let released = bufs
        .release(&r)
        .map_err(|e| format!("{label}: releasing the windows: {e}"));
    let out = res?;
    released?;
    Ok(out)
}

fn checks(r: &Ranks, bufs: &SymBufs, timeout: Duration, case: &MismatchCase) -> Result<Outcome, String> {
    let (n, calls) = (case.calls.len(), &case.calls);
    let matching = Call::AllReduce(64, DataType::F32);
    // A matching op first: the comm works, and the mailboxes hold lines of an earlier op.
    for rank in 0..n {
        launch(r, bufs, rank, matching)?;
    }
    r.sync()
        .map_err(|e| format!("the matching all-reduce before the case failed: {e}"))?;
    let t0 = Instant::now();
    for (rank, &call) in calls.iter().enumerate() {
        launch(r, bufs, rank, call)?;
    }
    for (rank, (c, s)) in r.comms.iter().zip(&r.streams).enumerate() {
        // The kernels record the mismatch and return: the stream itself must not fail.
        c.backend()
            .synchronize(s)
            .map_err(|e| format!("rank {rank}: its stream failed after the mismatched calls: {e}"))?;
    }
    let took = t0.elapsed();
    let mut msgs = Vec::with_capacity(n);
    for (rank, c) in r.comms.iter().enumerate() {
        let res = c.async_error();
        let wrong =
            || format!("rank {rank} {calls:?}: expected a symmetric mismatch, got {res:?} after {took:?}");
        let Err(e) = &res else {
            return Err(wrong());
        };
        let Error::SymMismatch {
            rank: me,
            peer,
            ours,
            theirs,
            ..
        } = e
        else {
            return Err(wrong());
        };
        if *me != rank as u32 {
            return Err(format!("rank {rank}: the error names rank {me} as its own: {e}"));
        }
        if !case.expect[rank].contains(peer) {
            return Err(format!(
                "rank {rank}: named peer {peer}, expected one of {:?}: {e}",
                case.expect[rank]
            ));
        }
        if ours == theirs {
            return Err(format!(
                "rank {rank}: its call and the peer's read the same ({ours}): {e}"
            ));
        }
        let msg = e.to_string();
        if !msg.contains(&format!("rank {peer} called")) {
            return Err(format!(
                "rank {rank}: the message does not say \"rank {peer} called\": {msg}"
            ));
        }
        msgs.push(msg);
    }
    if took >= timeout / 3 {
        return Err(format!(
            "detection took {took:?}, expected under a third of the {timeout:?} timeout"
        ));
    }
    if let Names::TwoShotAgainstOneShot { proto } = case.names {
        check_kernel_names(&msgs, proto)?;
    }
    // Sticky: a later, matching call does no work and returns promptly.
    let t1 = Instant::now();
    for rank in 0..n {
        launch(r, bufs, rank, matching)?;
    }
    if r.sync().is_ok() {
        return Err("a matching all-reduce after the mismatch succeeded, expected an error (the failed communicator is sticky)".into());
    }
    let sticky = t1.elapsed();
    if sticky >= timeout / 3 {
        return Err(format!(
            "the matching all-reduce after the mismatch took {sticky:?} to fail, expected under a third of the {timeout:?} timeout"
        ));
    }
    Ok(Outcome {
        msgs,
        detected_in: took,
        sticky_in: sticky,
    })
}

/// Rank 0 ran the two-shot, rank 1 the one-shot of an all-reduce of 300 f32.
fn check_kernel_names(msgs: &[String], proto: &str) -> Result<(), String> {
    let (two, one) = (format!("(sym/{proto} (two-shot))"), format!("(sym/{proto})"));
    for (rank, m) in msgs.iter().enumerate() {
        if !(m.contains(&two) && m.contains(&one)) {
            return Err(format!(
                "rank {rank}: the message should name both kernels, {two} and {one}: {m}"
            ));
        }
    }
    for (rank, peer, kernel) in [(0, 1, &one), (1, 0, &two)] {
        let want = format!("rank {peer} called all_reduce of 300 x f32 with sum {kernel}");
        if !msgs[rank].contains(&want) {
            return Err(format!(
                "rank {rank}: the message should say \"{want}\": {}",
                msgs[rank]
            ));
        }
    }
    Ok(())
}
