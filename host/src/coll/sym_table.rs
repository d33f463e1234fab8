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
    SYM_KIND_ALL_GATHER, SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_KIND_REDUCE_SCATTER,
    SYM_PROTO_LAMPORT, SYM_PROTO_LL, SYM_PROTO_SIMPLE,
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
    /// Largest payload per rank (bytes) the row covers.
    pub up_to: u64,
    pub pick: Pick,
}

impl KernelRow {
    const fn new(coll: SymColl, spans: bool, up_to: u64, pick: Pick) -> KernelRow {
        KernelRow {
            coll,
            spans,
            up_to,
            pick,
        }
    }
}

const LL: Pick = Pick::Mailbox {
    proto: SYM_PROTO_LL,
    two_shot: false,
};
const TWO_SHOT: Pick = Pick::Simple { two_shot: true };

/// `auto`. From the H200 runs (`benches/results/2026-12-03-sym-h200.md`, mended kernels):
/// up to 4 KiB the window LL kernel is the fastest (graph-replayed, 2 ranks 3.2-3.9 us
/// against the classic LL's 5.1; 8 ranks 5.8 against 13.6); above it, in one process, the
/// classic kernels are as fast or faster up to 256 MiB; across processes the classic LL up
/// to 64 KiB (it reaches peers without staging), then the Simple window kernels, which save
/// the staging copies (128 MiB f32 on 2 ranks: 230 us against 357 staged). The all-gather
/// and reduce-scatter follow the all-reduce's rows.
pub const KERNELS: &[KernelRow] = &{
    let mut rows = [KernelRow {
        coll: SymColl::AllReduce,
        spans: false,
        up_to: 0,
        pick: Pick::Classic,
    }; 15];
    let mut i = 0;
    while i < 3 {
        let c = SymColl::ALL[i];
        rows[5 * i] = KernelRow::new(c, false, 4 << 10, LL);
        rows[5 * i + 1] = KernelRow::new(c, false, u64::MAX, Pick::Classic);
        rows[5 * i + 2] = KernelRow::new(c, true, 4 << 10, LL);
        rows[5 * i + 3] = KernelRow::new(c, true, 64 << 10, Pick::Classic);
        rows[5 * i + 4] = KernelRow::new(c, true, u64::MAX, TWO_SHOT);
        i += 1;
    }
    rows
};

/// One row of the CTA table: kernels of protocol `proto` moving up to `up_to` bytes per rank
/// run on `ctas` CTAs, or, when `ctas` is 0, on one CTA per `bytes_per_cta` bytes.
#[derive(Clone, Copy, Debug)]
pub struct CtaRow {
    pub proto: u32,
    pub up_to: u64,
    pub ctas: u32,
    pub bytes_per_cta: u64,
}

/// CTA counts (before the occupancy cap, `OXCCL_MAX_BLOCKS` / `NCCL_MAX_CTAS`).
pub const CTAS: &[CtaRow] = &[
    CtaRow {
        proto: SYM_PROTO_LL,
        up_to: u64::MAX,
        ctas: 0,
        bytes_per_cta: 16 << 10,
    },
    CtaRow {
        proto: SYM_PROTO_LAMPORT,
        up_to: u64::MAX,
        ctas: 0,
        bytes_per_cta: 16 << 10,
    },
    CtaRow {
        proto: SYM_PROTO_SIMPLE,
        up_to: u64::MAX,
        ctas: 0,
        bytes_per_cta: 256 << 10,
    },
];

/// What `auto` runs for `coll` with `payload` bytes per rank (`fits`: the payload fits the
/// one-shot mailbox slots; `fits_two_shot`: the two-shot's).
pub fn auto(coll: SymColl, payload: u64, spans: bool, fits: bool, fits_two_shot: bool) -> Option<SymChoice> {
    let row = KERNELS
        .iter()
        .find(|r| r.coll == coll && r.spans == spans && payload <= r.up_to)?;
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

/// CTAs for `choice` moving `payload` bytes per rank: `forced` (`OXCCL_SYM_CTAS`, 0 = the
/// table) or the table's, at least 1 and at most `max` (the occupancy and setting cap).
pub fn ctas(choice: SymChoice, payload: u64, max: u32, forced: u32) -> u32 {
    let want = if forced > 0 {
        forced
    } else {
        CTAS.iter()
            .find(|r| r.proto == choice.proto && payload <= r.up_to)
            .map_or(1, |r| {
                if r.ctas > 0 {
                    r.ctas
                } else {
                    payload.div_ceil(r.bytes_per_cta.max(1)).min(u32::MAX as u64) as u32
                }
            })
    };
    want.clamp(1, max.max(1))
}

/// The table as `oxccl tuner` prints it: one line per payload size from 8 bytes to `max`
/// (times 8), the kernel and CTA count of each collective of `dtype` on `nranks` ranks, for
/// one process and across processes, under `setting` (`OXCCL_SYM`), `forced` CTAs and an
/// occupancy cap `cap`.
#[allow(clippy::too_many_arguments)]
pub fn print_table(
    setting: &str,
    dtype: DataType,
    nranks: u32,
    ll_max: u64,
    forced: u32,
    cap: u32,
    max: u64,
) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "symmetric kernels (buffers in registered windows; OXCCL_SYM={setting}, OXCCL_SYM_LL_MAX_BYTES={ll_max}, OXCCL_SYM_CTAS={forced}, cap {cap} CTAs per rank):"
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
                    Some(ch) => format!("{} x{}", ch.name(), ctas(ch, b, cap, forced)),
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
                for p in [0u64, 8, 4096, 4097, 65536, 65537, 1 << 30, u64::MAX] {
                    assert!(
                        KERNELS
                            .iter()
                            .any(|r| r.coll == c && r.spans == spans && p <= r.up_to),
                        "{c:?} spans={spans} payload {p}"
                    );
                }
            }
        }
    }

    #[test]
    fn auto_follows_the_measurements() {
        let ar = SymColl::AllReduce;
        let ll = auto(ar, 4096, false, true, true).unwrap();
        assert_eq!((ll.kind, ll.proto), (SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_PROTO_LL));
        assert_eq!(
            auto(ar, 4096, false, false, false),
            None,
            "mailbox rows need the payload to fit"
        );
        assert_eq!(auto(ar, 8192, false, true, true), None);
        assert_eq!(auto(ar, 65536, true, true, true), None);
        let big = auto(ar, 1 << 20, true, true, true).unwrap();
        assert_eq!(
            (big.kind, big.proto),
            (SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_PROTO_SIMPLE)
        );
        let ag = auto(SymColl::AllGather, 1 << 20, true, true, true).unwrap();
        assert_eq!((ag.kind, ag.proto), (SYM_KIND_ALL_GATHER, SYM_PROTO_SIMPLE));
    }

    #[test]
    fn ctas_follow_the_table_the_override_and_the_cap() {
        let ll = SymChoice {
            kind: SYM_KIND_ALL_REDUCE_ONE_SHOT,
            proto: SYM_PROTO_LL,
        };
        assert_eq!(ctas(ll, 8, 64, 0), 1);
        assert_eq!(ctas(ll, 64 << 10, 64, 0), 4);
        assert_eq!(ctas(ll, 64 << 20, 64, 0), 64, "capped");
        assert_eq!(ctas(ll, 8, 64, 16), 16, "forced");
        assert_eq!(ctas(ll, 8, 8, 16), 8, "forced, still capped");
        assert_eq!(ctas(ll, 0, 0, 0), 1);
    }
}
