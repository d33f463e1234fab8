//! The symmetric tuner's table: for a collective on registered windows, which kernel runs
//! (`auto`) and on how many CTAs (blocks per rank), by payload per rank. Printed by
//! `oxccl tuner`; `OXCCL_SYM` forces a kernel, `OXCCL_SYM_CTAS` a CTA count (both equal on
//! every rank: every rank must launch the same grid).
//!
//! The rows come from GPU measurements (`scripts/sym-tune.sh`: every kernel forced, graph-
//! replayed for small payloads and timed plainly for large ones, at CTA counts from 1 to 64;
//! the source of each row's numbers is named next to it). A row applies to payloads up to
//! its `up_to` (inclusive); the first row that matches wins.

use oxccl_device::abi::{
    sym_line_data, SYM_KIND_ALL_GATHER, SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_KIND_ALL_REDUCE_TWO_SHOT,
    SYM_KIND_REDUCE_SCATTER, SYM_PROTO_LAMPORT, SYM_PROTO_LL, SYM_PROTO_SIMPLE,
};

use super::sym::SymChoice;
use oxccl_device::abi::DataType;

/// Which collective a row is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymColl {
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl SymColl {
    /// The collective of a `SYM_KIND_*`.
    pub fn of_kind(kind: u32) -> SymColl {
        match kind {
            SYM_KIND_ALL_GATHER => SymColl::AllGather,
            SYM_KIND_REDUCE_SCATTER => SymColl::ReduceScatter,
            _ => SymColl::AllReduce,
        }
    }

    /// The `SYM_KIND_*` of this collective (the all-reduce's one-shot).
    pub fn kind(self) -> u32 {
        match self {
            SymColl::AllReduce => SYM_KIND_ALL_REDUCE_ONE_SHOT,
            SymColl::AllGather => SYM_KIND_ALL_GATHER,
            SymColl::ReduceScatter => SYM_KIND_REDUCE_SCATTER,
        }
    }

    /// Every collective, in printing order.
    pub const ALL: [SymColl; 3] = [SymColl::AllReduce, SymColl::AllGather, SymColl::ReduceScatter];

    pub fn name(self) -> &'static str {
        match self {
            SymColl::AllReduce => "all_reduce",
            SymColl::AllGather => "all_gather",
            SymColl::ReduceScatter => "reduce_scatter",
        }
    }
}

/// What `auto` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// The classic kernels (they measured as fast or faster).
    Classic,
    /// A mailbox kernel (LL or Lamport) of the collective, one-shot or two-shot.
    Mailbox { proto: u32, two_shot: bool },
    /// The Simple kernel of the collective (for the all-reduce one-shot or two-shot).
    Simple { two_shot: bool },
}

/// One row of the kernel table.
#[derive(Clone, Copy, Debug)]
pub struct KernelRow {
    pub coll: SymColl,
    /// Communicators whose ranks span processes (`true`) or live in one (`false`).
    pub spans: bool,
    /// Largest rank count the row covers.
    pub max_ranks: u32,
    /// Largest payload per rank (bytes) the row covers.
    pub up_to: u64,
    pub pick: Pick,
}

impl KernelRow {
    const fn new(coll: SymColl, spans: bool, max_ranks: u32, up_to: u64, pick: Pick) -> KernelRow {
        KernelRow {
            coll,
            spans,
            max_ranks,
            up_to,
            pick,
        }
    }

    /// Whether the row covers `payload` bytes per rank of `coll` on `nranks` ranks.
    pub fn covers(&self, coll: SymColl, payload: u64, nranks: u32, spans: bool) -> bool {
        self.coll == coll && self.spans == spans && nranks <= self.max_ranks && payload <= self.up_to
    }
}

const TWO_SHOT: Pick = Pick::Simple { two_shot: true };

const LAMPORT: Pick = Pick::Mailbox {
    proto: SYM_PROTO_LAMPORT,
    two_shot: false,
};

/// `auto`, from `scripts/sym-tune.sh` on an H100 with `RANKS="2 4 8"` (f32 all-reduce in one
/// process, best CTA count of each kernel; `benches/results/2026-12-07-lamport-h100.md`),
/// graph-replayed us per op:
///
/// | payload | 2 ranks: Lamport / LL / classic | 4 ranks: Lamport / LL / classic | 8 ranks: Lamport / LL / classic |
/// | ---: | --- | --- | --- |
/// | 8 B | **2.35** / 2.42 / 4.92 | **3.35** / 3.37 / 8.92 | **5.34** / 5.37 / 11.86 |
/// | 32 B | **2.40** / 2.47 / 4.94 | 3.49 / 3.49 / 8.83 | **5.66** / 5.69 / 11.82 |
/// | 512 B | 2.19 / 2.19 / 4.85 | 3.28 / **3.24** / 8.53 | 5.56 / **5.42** / 11.88 |
/// | 8 KiB | **2.24** / 2.45 / 5.16 | **3.51** / 3.59 / 8.71 | 5.99 / **5.94** / 12.33 |
/// | 128 KiB | **2.45** / 3.19 / 10.82 | **4.15** / 5.09 / 14.78 | **9.30** / 14.24 / 15.45 |
///
/// LL and Lamport are within 0.15 us of each other up to 8 KiB; Lamport is ahead of or
/// level with LL on 2 ranks at every size and far ahead from 32 KiB, so `auto` takes Lamport
/// from the smallest size. On an H200 (`benches/results/2026-12-07-grouped-h200.md`, call 2)
/// LL leads by at most 0.09 us up to 2 KiB on 2, 4 and 8 ranks (2 ranks, 8 B: 1.99 / 1.95;
/// 8 ranks, 8 B, both grouped: 4.23 / 4.16) and Lamport leads from 8 KiB (32 KiB: 2.05 /
/// 2.17, 3.17 / 3.30, 5.10 / 6.36), the classic kernels 4.4-4.5, 7.8-8.2 and 11.1-12.0 us
/// at 8 B-8 KiB: the same choice (before the Lamport kernels lost their entry fence it was 0.36 us
/// behind LL on 2 ranks, and LL ran up to 64 bytes).
///
/// Where Lamport gives way to the Simple two-shot, graph-replayed on the committed build
/// (`benches/results/2026-12-07-lamport-h100.md`, call 3), us per op, Lamport / Simple:
///
/// | payload | 2 ranks | 3 ranks | 4 ranks | 8 ranks |
/// | ---: | --- | --- | --- | --- |
/// | 64 KiB | **2.38** / 6.49 | **3.09** / 6.98 | **3.71** / 7.29 | **6.86** / 8.66 |
/// | 128 KiB | **2.45** / 6.61 | **3.37** / 7.05 | **4.13** / 7.39 | 9.50 / **8.76** |
/// | 256 KiB | **3.38** / 6.70 | **4.18** / 7.16 | **5.29** / 7.50 | 17.46 / **8.88** |
///
/// 5 to 7 ranks and the 8-rank crossover, graph-replayed the same way on the build of this
/// session's first call (`benches/results/2026-12-07-entry-h100.md`), Lamport / Simple:
///
/// | payload | 5 ranks | 6 ranks | 7 ranks | 8 ranks |
/// | ---: | --- | --- | --- | --- |
/// | 64 KiB | **4.39** / 7.81 | **5.19** / 8.15 | **5.97** / 8.55 | |
/// | 80 KiB | | | | **7.32** / 8.67 |
/// | 96 KiB | | | | **7.88** / 8.75 |
/// | 112 KiB | | | | **8.66** / 8.86 |
/// | 128 KiB | **5.35** / 7.98 | **6.29** / 8.22 | **7.71** / 8.70 | |
/// | 256 KiB | 8.06 / 8.09 | 10.47 / **8.35** | 14.23 / **8.77** | |
///
/// On an H200 (`benches/results/2026-12-07-grouped-h200.md`, call 2, graph-replayed,
/// Lamport / Simple; 8 ranks with the grouped kernels where `auto` runs them):
///
/// | payload | 2 ranks | 3 ranks | 4 ranks | 5 ranks | 6 ranks | 7 ranks | 8 ranks |
/// | ---: | --- | --- | --- | --- | --- | --- | --- |
/// | 64 KiB | **2.07** / 5.68 | **2.70** / 6.26 | **3.32** / 6.46 | **3.99** / 6.89 | **4.80** / 7.14 | **5.51** / 7.50 | **6.29** / 7.88 |
/// | 128 KiB | **2.23** / 5.79 | **2.95** / 6.35 | **3.72** / 6.54 | **5.03** / 6.95 | **5.88** / 7.23 | **7.13** / 7.64 | 8.18 / **7.95** |
/// | 256 KiB | **3.09** / 5.92 | **3.79** / 6.46 | **4.87** / 6.62 | 7.65 / **7.08** | 9.57 / **7.39** | 12.28 / **7.71** | 15.14 / **7.97** |
///
/// The same crossovers but one: on 5 ranks Simple wins at 256 KiB by 0.57 us (the H100 had
/// a tie), and the two cross near 220 KiB (linear between 128 and 256 KiB; on the H100 near
/// 256 KiB).
///
/// So the all-reduce runs Lamport up to 256 KiB (the default `OXCCL_SYM_LL_MAX_BYTES`) on up
/// to 4 ranks, up to 192 KiB on 5, up to 128 KiB on 6 and 7, and up to 112 KiB from 8.
///
/// The all-gather and the reduce-scatter, the same way (same call; payload = the block of
/// one rank, us per op, Lamport / Simple):
///
/// | payload | all-gather, 2 / 4 / 8 ranks | reduce-scatter, 2 / 4 / 8 ranks |
/// | ---: | --- | --- |
/// | 64 KiB | **2.49** / 5.90, **3.92** / 6.83, **7.52** / 8.47 | **2.73** / 6.42, **4.29** / 7.29, **7.94** / 8.49 |
/// | 128 KiB | **2.58** / 6.02, **4.47** / 6.99, 12.94 / **9.63** | **2.78** / 6.57, **4.69** / 7.41, 11.31 / **9.16** |
/// | 256 KiB | **3.40** / 6.13, **6.22** / 7.54, 23.88 / **11.86** | **3.50** / 6.66, **5.76** / 7.85, 24.02 / **10.28** |
///
/// 5 to 7 ranks (call 3 of `benches/results/2026-12-07-entry-h100.md`, build `022d2df`):
///
/// | payload | all-gather, 5 / 6 / 7 ranks | reduce-scatter, 5 / 6 / 7 ranks |
/// | ---: | --- | --- |
/// | 64 KiB | **4.81** / 7.34, **5.68** / 7.60, **6.44** / 8.15 | **5.19** / 7.64, **6.25** / 7.87, **7.07** / 8.28 |
/// | 128 KiB | **6.07** / 7.78, **7.54** / 8.18, 9.49 / **8.99** | **6.09** / 7.97, **7.29** / 8.29, 8.88 / **8.77** |
/// | 256 KiB | 9.94 / **8.60**, 14.39 / **9.39**, 18.60 / **10.53** | 9.55 / **8.50**, 14.01 / **8.88**, 18.45 / **9.64** |
///
/// So their Lamport rows end at 256 KiB on up to 4 ranks, at 128 KiB on 5 and 6, and at
/// 64 KiB from 7 (the crossover lies between 64 and 128 KiB there). The H200 (call 2 above,
/// Lamport / Simple) agrees at every row's end and past it: all-gather 2 / 4 ranks at
/// 256 KiB **3.22** / 5.23, **5.68** / 6.46; 5 / 6 ranks at 128 KiB **5.60** / 6.70,
/// **6.78** / 7.10 and at 256 KiB 8.96 / **7.38**, 12.15 / **8.16**; 7 / 8 ranks at 64 KiB
/// **5.94** / 7.09, **6.96** / 7.48 and at 128 KiB 8.24 / **7.84**, 10.85 / **8.44**;
/// reduce-scatter the same way but on 8 ranks at 64 KiB, a tie (7.71 / 7.61). The classic kernels lost
/// to Simple at every size (all-gather on 2 ranks, 64 KiB 8.60 against 5.90 us; on 8 ranks,
/// 256 KiB 24.46 against 11.86).
///
/// Timed plainly, the Simple two-shot against the classic kernels (call 3 of
/// `benches/results/2026-12-07-lamport-h100.md`): 2 ranks 256 KiB 8.9 against 13.2 us,
/// 256 MiB 499.3 against 499.0; 4 ranks 256 KiB 16.7 against 18.4, 256 MiB 820.5 against
/// 825.9; 8 ranks 256 KiB 29.4 against 35.1, 256 MiB 1500.6 against 1509.1. So Simple above.
/// The mailbox two-shots never won on one GPU (2 ranks 3.0-4.0 us, 8 ranks 6.6-10.9) and are
/// not picked. The rows are the same across processes (the window kernels reach peers alike;
/// the Simple two-shot across 2 processes under MPS, 128 MiB f32: 251.7 us against the staged
/// path's 351, H200 earlier: 230 against 357).
pub const KERNELS: &[KernelRow] = &{
    let mut rows = [KernelRow {
        coll: SymColl::AllReduce,
        spans: false,
        max_ranks: 0,
        up_to: 0,
        pick: Pick::Classic,
    }; 30];
    let mut i = 0;
    while i < 3 {
        let c = SymColl::ALL[i];
        let mut k = 0;
        while k < 2 {
            let spans = k == 1;
            let at = 10 * i + 5 * k;
            let all_reduce = i == 0;
            // The 192 KiB row is the all-reduce's (5 ranks); for the others it covers no
            // rank count.
            let (any_up_to, to_256k, to_192k, to_128k) = if all_reduce {
                (112 << 10, 4, 5, 7)
            } else {
                (64 << 10, 4, 0, 6)
            };
            rows[at] = KernelRow::new(c, spans, u32::MAX, any_up_to, LAMPORT);
            rows[at + 1] = KernelRow::new(c, spans, to_256k, 256 << 10, LAMPORT);
            rows[at + 2] = KernelRow::new(c, spans, to_192k, 192 << 10, LAMPORT);
            rows[at + 3] = KernelRow::new(c, spans, to_128k, 128 << 10, LAMPORT);
            rows[at + 4] = KernelRow::new(c, spans, u32::MAX, u64::MAX, TWO_SHOT);
            k += 1;
        }
        i += 1;
    }
    rows
};

/// One row of the CTA table: kernels of protocol `proto` moving up to `up_to` bytes per rank
/// run on `ctas` CTAs, or, when `ctas` is 0, on one CTA per `lines_per_cta` mailbox lines
/// (lines of the protocol's format for the data type: [`sym_line_data`] payload bytes each).
#[derive(Clone, Copy, Debug)]
pub struct CtaRow {
    pub proto: u32,
    pub up_to: u64,
    pub ctas: u32,
    pub lines_per_cta: u64,
}

/// CTA counts (before the occupancy cap, `OXCCL_MAX_BLOCKS` / `NCCL_MAX_CTAS`), from the
/// same runs (`benches/results/2026-12-07-lamport-tune-h100.log`, f32, graph-replayed): the
/// mailbox kernels want one CTA per 256 lines, that is per 2 KiB of payload for LL (8 data
/// bytes a line) and per 4 KiB for Lamport's 16-byte float lines. At 128 KiB, Lamport on 32
/// CTAs took 2.45 / 4.15 / 9.30 us on 2 / 4 / 8 ranks against 3.26 / 4.78 / 9.65 on 64 (the
/// former one CTA per 2 KiB), and at 8 and 32 KiB the new counts (2 and 8) are best or
/// within 0.06 us. LL at 128 KiB takes 3.19 us on 32 CTAs and 3.41 on 64 on 2 ranks, and
/// is best on 64 on 4 and 8 ranks (5.09, 14.24); at 32 KiB it wants its 16 (8: 0.65 us
/// slower on 2 ranks). Up to 2 KiB one CTA is best or within 0.02 us everywhere. For Lamport's
/// integer lines (8 data bytes) and at 256 KiB no other cap does better everywhere: 32 CTAs
/// win on 2 ranks at f32 256 KiB and i32 128 KiB (by 0.15 and 0.24 us) but lose at i32
/// 256 KiB (by 0.66) and on 4 ranks (by 0.43-1.63); the rule is within 0.24 us of the best
/// count in every case measured (`benches/results/2026-12-07-entry-h100.md`). The Simple kernels take as many as fit
/// (2 ranks, 16 MiB: 40.4 us on 64 CTAs, 98.4 on 16). On an H200 (call 2 of
/// `benches/results/2026-12-07-grouped-h200.md`, Lamport f32 at 1-64 CTAs) the rule's count
/// is the best at 8, 32 and 128 KiB on 2 ranks and at 32 and 128 KiB on 8, and 0.09 us
/// behind the best (8 CTAs, 4.80 us) at 8 KiB on 8 ranks.
pub const CTAS: &[CtaRow] = &[
    CtaRow {
        proto: SYM_PROTO_LL,
        up_to: u64::MAX,
        ctas: 0,
        lines_per_cta: 256,
    },
    CtaRow {
        proto: SYM_PROTO_LAMPORT,
        up_to: u64::MAX,
        ctas: 0,
        lines_per_cta: 256,
    },
    CtaRow {
        proto: SYM_PROTO_SIMPLE,
        up_to: u64::MAX,
        ctas: oxccl_device::abi::MAX_BLOCKS as u32,
        lines_per_cta: 0,
    },
];

/// What `auto` runs for `coll` with `payload` bytes per rank on `nranks` ranks (`fits`: the
/// payload fits the one-shot mailbox slots; `fits_two_shot`: the two-shot's). The first row
/// that covers the call decides; a mailbox row the payload does not fit gives the classic
/// kernels.
pub fn auto(
    coll: SymColl,
    payload: u64,
    nranks: u32,
    spans: bool,
    fits: bool,
    fits_two_shot: bool,
) -> Option<SymChoice> {
    let row = KERNELS.iter().find(|r| r.covers(coll, payload, nranks, spans))?;
    match row.pick {
        Pick::Mailbox { two_shot: false, .. } if !fits => None,
        Pick::Mailbox { two_shot: true, .. } if !fits_two_shot => None,
        p => choice_of(coll, p),
    }
}

/// The kernel a [`Pick`] stands for.
pub fn choice_of(coll: SymColl, pick: Pick) -> Option<SymChoice> {
    let all_reduce = coll == SymColl::AllReduce;
    match pick {
        Pick::Classic => None,
        Pick::Mailbox { proto, two_shot } => Some(SymChoice {
            kind: if all_reduce && two_shot {
                SYM_KIND_ALL_REDUCE_TWO_SHOT
            } else {
                coll.kind()
            },
            proto,
        }),
        Pick::Simple { two_shot } => Some(SymChoice {
            kind: if all_reduce && two_shot {
                SYM_KIND_ALL_REDUCE_TWO_SHOT
            } else {
                coll.kind()
            },
            proto: SYM_PROTO_SIMPLE,
        }),
    }
}

/// Ranks from which `OXCCL_SYM_GROUPED=auto` runs the grouped kernels. With the ranks
/// sharing one H200 in one process (`benches/results/2026-12-07-grouped-h200.md`), polling a
/// line's peers four at a time takes 0.3-0.8 us off the 8-rank all-reduce, 0.9-1.3 off the
/// all-gather and 1.0-1.5 off the reduce-scatter, and 0.15-0.45 off the 7-rank all-reduce;
/// it adds 0.1-0.4 us on 2, 3 and 5 ranks (on an H100 it gained nothing or lost at 5-6:
/// `benches/results/2026-12-07-groups-h100.md`).
pub const GROUPED_FROM_RANKS: u32 = 7;

/// Largest payload per rank (bytes) `auto` runs grouped: the 8-rank Lamport all-reduce
/// gained 0.5-0.6 us at 16-32 KiB grouped and lost 0.16 us (2.6%) at 64 KiB; from 128 KiB
/// the table's grids are larger than the grouped kernels' occupancy holds anyway.
pub const GROUPED_MAX_BYTES: u64 = 32 << 10;

/// Whether a launch of `choice` with operator `op` (`RedOp` value; anything for the
/// all-gather) and `payload` bytes per rank on `nranks` ranks, spanning processes or not,
/// runs on the grouped kernels under `setting` (`OXCCL_SYM_GROUPED`): only launches they
/// hold (`oxccl_device::abi::sym_grouped_kernel_runs`), and under `auto` from
/// [`GROUPED_FROM_RANKS`] ranks up to [`GROUPED_MAX_BYTES`], in one process: 8 ranks
/// across processes under MPS ran the all-reduce 0.8-1.1 us slower grouped (same H200 run).
pub fn grouped(
    choice: SymChoice,
    op: u32,
    payload: u64,
    nranks: u32,
    spans: bool,
    setting: super::sym_policy::Grouped,
) -> bool {
    use super::sym_policy::Grouped as G;
    let holds = oxccl_device::abi::sym_grouped_kernel_runs(
        choice.proto,
        choice.kind,
        op,
        oxccl_device::abi::SYM_FLAG_GROUPED,
    );
    holds
        && match setting {
            G::Off => false,
            G::On => true,
            G::Auto => !spans && nranks >= GROUPED_FROM_RANKS && payload <= GROUPED_MAX_BYTES,
        }
}

/// CTAs for `choice` moving `payload` bytes per rank of `dtype`: `forced` (`OXCCL_SYM_CTAS`,
/// 0 = the table) or the table's, at least 1 and at most `max` (the occupancy and setting
/// cap).
pub fn ctas(choice: SymChoice, payload: u64, dtype: DataType, max: u32, forced: u32) -> u32 {
    let want = if forced > 0 {
        forced
    } else {
        CTAS.iter()
            .find(|r| r.proto == choice.proto && payload <= r.up_to)
            .map_or(1, |r| {
                if r.ctas > 0 {
                    r.ctas
                } else {
                    let lines = payload.div_ceil(sym_line_data(choice.proto, dtype));
                    lines.div_ceil(r.lines_per_cta.max(1)).min(u32::MAX as u64) as u32
                }
            })
    };
    want.clamp(1, max.max(1))
}

/// The table as `oxccl tuner` prints it: one line per payload size from 8 bytes to `max`
/// (times 8), the kernel and CTA count of each collective of `dtype` on `nranks` ranks, for
/// one process and across processes, under `policy` (`OXCCL_SYM`, `OXCCL_SYM_CTAS`,
/// `OXCCL_SYM_GROUPED`), with an occupancy cap `cap`. A kernel the grouped kernels run for
/// `Sum` is marked `+grouped`.
pub fn print_table(
    policy: super::sym_policy::SymPolicy,
    dtype: DataType,
    nranks: u32,
    ll_max: u64,
    cap: u32,
    max: u64,
) -> String {
    use std::fmt::Write;
    let (setting, forced) = (policy.setting, policy.ctas);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "symmetric kernels (buffers in registered windows; OXCCL_SYM={setting}, OXCCL_SYM_LL_MAX_BYTES={ll_max}, OXCCL_SYM_CTAS={forced}, OXCCL_SYM_GROUPED={}, cap {cap} CTAs per rank):",
        policy.grouped
    );
    for (spans, what) in [(false, "one process"), (true, "across processes")] {
        let _ = writeln!(s, "{what}:");
        let _ = writeln!(
            s,
            "{:>10} {:>30} {:>30} {:>30}",
            "bytes/rank", "all_reduce", "all_gather", "reduce_scatter"
        );
        let mut b = 8u64;
        while b <= max {
            let _ = write!(s, "{:>10}", crate::harness::fmt_bytes(b as usize));
            for c in SymColl::ALL {
                let cell = match super::sym::choose(c.kind(), b, dtype, nranks, ll_max, setting, spans) {
                    None => "classic".to_string(),
                    Some(ch) => {
                        let sum = oxccl_device::abi::RedOp::Sum as u32;
                        let g = if grouped(ch, sum, b, nranks, spans, policy.grouped) {
                            "+grouped"
                        } else {
                            ""
                        };
                        format!("{}{g} x{}", ch.name(), ctas(ch, b, dtype, cap, forced))
                    }
                };
                let _ = write!(s, " {cell:>30}");
            }
            let _ = writeln!(s);
            b *= 8;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collective_and_placement_has_a_row_for_every_payload() {
        for c in SymColl::ALL {
            for spans in [false, true] {
                for n in [1, 2, 3, 8, 72] {
                    for p in [0u64, 8, 4096, 4097, 65536, 65537, 1 << 30, u64::MAX] {
                        assert!(
                            KERNELS.iter().any(|r| r.covers(c, p, n, spans)),
                            "{c:?} spans={spans} ranks {n} payload {p}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn grouped_where_measured_faster_and_held() {
        use crate::coll::sym_policy::Grouped;
        let sum = oxccl_device::abi::RedOp::Sum as u32;
        let max = oxccl_device::abi::RedOp::Max as u32;
        let ch = |kind, proto| SymChoice { kind, proto };
        let ar = ch(SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_PROTO_LAMPORT);
        let ag = ch(SYM_KIND_ALL_GATHER, SYM_PROTO_LL);
        let rs = ch(SYM_KIND_REDUCE_SCATTER, SYM_PROTO_LAMPORT);
        for c in [ar, ag, rs] {
            for n in [7, 8, 72] {
                assert!(grouped(c, sum, 8, n, false, Grouped::Auto), "{c:?} {n}");
                assert!(
                    grouped(c, sum, GROUPED_MAX_BYTES, n, false, Grouped::Auto),
                    "{c:?} {n}"
                );
                assert!(!grouped(c, sum, GROUPED_MAX_BYTES + 1, n, false, Grouped::Auto));
                assert!(
                    !grouped(c, sum, 8, n, true, Grouped::Auto),
                    "{c:?} {n} across processes"
                );
                assert!(
                    grouped(c, sum, 8, n, true, Grouped::On),
                    "{c:?} {n} across processes"
                );
                assert!(!grouped(c, sum, 8, n, false, Grouped::Off));
            }
            for n in [1, 2, 6] {
                assert!(!grouped(c, sum, 8, n, false, Grouped::Auto), "{c:?} {n}");
                assert!(grouped(c, sum, 1 << 20, n, false, Grouped::On), "{c:?} {n}");
            }
        }
        // Operators other than Sum (the all-gather reduces nothing), the two-shot, Simple.
        assert!(!grouped(ar, max, 8, 8, false, Grouped::On));
        assert!(!grouped(rs, max, 8, 8, false, Grouped::On));
        assert!(grouped(ag, max, 8, 8, false, Grouped::Auto));
        let two_shot = ch(SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_PROTO_LL);
        assert!(!grouped(two_shot, sum, 8, 8, false, Grouped::On));
        assert!(!grouped(
            ch(SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_PROTO_SIMPLE),
            sum,
            8,
            8,
            false,
            Grouped::On
        ));
    }

    #[test]
    fn auto_follows_the_measurements() {
        let ar = SymColl::AllReduce;
        let one_shot = |proto| (SYM_KIND_ALL_REDUCE_ONE_SHOT, proto);
        let kp = |c: Option<SymChoice>| c.map(|c| (c.kind, c.proto));
        let simple = Some((SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_PROTO_SIMPLE));
        for spans in [false, true] {
            for n in [2, 4, 8] {
                for p in [8, 64, 4096, 64 << 10] {
                    assert_eq!(
                        kp(auto(ar, p, n, spans, true, true)),
                        Some(one_shot(SYM_PROTO_LAMPORT))
                    );
                }
                assert_eq!(
                    auto(ar, 4096, n, spans, false, false),
                    None,
                    "mailbox rows need the payload to fit"
                );
            }
            // The all-reduce past 64 KiB: Lamport up to 256 KiB on up to 4 ranks, up to
            // 192 KiB on 5, up to 128 KiB on 6-7, up to 112 KiB from 8; Simple above.
            let kib = |k: u64| k << 10;
            let lamport = Some(one_shot(SYM_PROTO_LAMPORT));
            let rows: [(&[u32], u64); 4] =
                [(&[1, 2, 3, 4], 256), (&[5], 192), (&[6, 7], 128), (&[8, 72], 112)];
            for (ranks, last) in rows {
                for &n in ranks {
                    assert_eq!(
                        kp(auto(ar, kib(64) + 1, n, spans, true, true)),
                        lamport,
                        "ranks {n}"
                    );
                    assert_eq!(
                        kp(auto(ar, kib(last), n, spans, true, true)),
                        lamport,
                        "ranks {n}"
                    );
                    assert_eq!(
                        kp(auto(ar, kib(last) + 1, n, spans, true, true)),
                        simple,
                        "ranks {n}"
                    );
                }
            }
            // The all-gather and the reduce-scatter: up to 256 KiB on up to 4 ranks, 128 KiB
            // on 5-6, 64 KiB from 7.
            for c in [SymColl::AllGather, SymColl::ReduceScatter] {
                let pick = |p, n| auto(c, p, n, spans, true, true).map(|x| x.proto);
                for (ranks, last) in [([2, 4], 256), ([5, 6], 128), ([7, 72], 64)] {
                    for n in ranks {
                        assert_eq!(pick(kib(last), n), Some(SYM_PROTO_LAMPORT), "{c:?} ranks {n}");
                        assert_eq!(pick(kib(last) + 1, n), Some(SYM_PROTO_SIMPLE), "{c:?} ranks {n}");
                    }
                }
            }
            assert_eq!(
                auto(ar, kib(256), 2, spans, false, true),
                None,
                "Lamport row, no fit"
            );
            let ag = auto(SymColl::AllGather, 1 << 20, 2, spans, true, true).unwrap();
            assert_eq!((ag.kind, ag.proto), (SYM_KIND_ALL_GATHER, SYM_PROTO_SIMPLE));
            let rs = auto(SymColl::ReduceScatter, 100, 8, spans, true, true).unwrap();
            assert_eq!((rs.kind, rs.proto), (SYM_KIND_REDUCE_SCATTER, SYM_PROTO_LAMPORT));
        }
    }

    #[test]
    fn ctas_follow_the_table_the_override_and_the_cap() {
        let ll = SymChoice {
            kind: SYM_KIND_ALL_REDUCE_ONE_SHOT,
            proto: SYM_PROTO_LL,
        };
        let f32 = DataType::F32;
        assert_eq!(ctas(ll, 8, f32, 64, 0), 1);
        assert_eq!(ctas(ll, 32 << 10, f32, 64, 0), 16);
        assert_eq!(ctas(ll, 128 << 10, f32, 64, 0), 64);
        assert_eq!(ctas(ll, 64 << 20, f32, 33, 0), 33, "capped");
        assert_eq!(ctas(ll, 8, f32, 64, 16), 16, "forced");
        assert_eq!(ctas(ll, 8, f32, 8, 16), 8, "forced, still capped");
        assert_eq!(ctas(ll, 0, f32, 0, 0), 1);
        // Lamport: one CTA per 256 lines, 4 KiB of float payload, 2 KiB of integer payload.
        let lamport = SymChoice {
            kind: SYM_KIND_ALL_REDUCE_ONE_SHOT,
            proto: SYM_PROTO_LAMPORT,
        };
        assert_eq!(ctas(lamport, 2 << 10, f32, 64, 0), 1);
        assert_eq!(ctas(lamport, 8 << 10, DataType::Bf16, 64, 0), 2);
        assert_eq!(ctas(lamport, 128 << 10, f32, 64, 0), 32);
        assert_eq!(ctas(lamport, 128 << 10, DataType::I32, 64, 0), 64);
        assert_eq!(ctas(lamport, 256 << 10, f32, 64, 0), 64);
        let simple = SymChoice {
            kind: SYM_KIND_ALL_REDUCE_TWO_SHOT,
            proto: SYM_PROTO_SIMPLE,
        };
        assert_eq!(ctas(simple, 1 << 20, f32, 33, 0), 33, "as many as fit");
    }
}
