//! The host collective API: validate arguments, choose the algorithm and grid, pack the
//! kernel arguments, launch on the caller's stream. Completion is stream-ordered; device
//! errors surface through [`Comm::async_error`].
//!
//! One module per collective, each with a safe form on [`DeviceBuffer`]s (sizes checked)
//! and an `unsafe` `*_raw` form on device addresses, like NCCL's API:
//! [`Comm::all_reduce`], [`Comm::broadcast`], [`Comm::reduce`], [`Comm::all_gather`],
//! [`Comm::reduce_scatter`], [`Comm::all_to_all`], [`Comm::gather`], [`Comm::scatter`],
//! [`Comm::all_gather_v`]. Counts are NCCL's: all-gather takes the count per rank
//! (`sendcount`), reduce-scatter the count of the output (`recvcount`), all-to-all, gather
//! and scatter the count of one block (the blocked buffer holds `nranks * count`),
//! all-gather-v one count and one displacement per rank.

mod all_gather;
mod all_gather_v;
mod all_reduce;
mod all_to_all;
mod broadcast;
pub mod cost;
mod gather;
mod launch;
mod reduce;
mod reduce_scatter;
mod scatter;
mod staged;
pub mod sym;
pub mod sym_policy;
pub mod sym_table;
pub mod tuner;

pub(crate) use staged::Staging;

use oxccl_device::abi::{
    DataType, RedOp, ALGO_LL, ALGO_ONE_SHOT, ALGO_TWO_SHOT, COLL_ALL_GATHER, COLL_ALL_GATHER_V,
    COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_BROADCAST, COLL_GATHER, COLL_REDUCE, COLL_REDUCE_SCATTER,
    COLL_SCATTER,
};

use crate::backend::{CollKernel, Grid};
#[cfg(doc)]
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Error;

/// A reduction operator with its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
    /// `sum(scalar * x)`; the scalar's bits in the collective's data type, little-endian
    /// (see [`Op::premul_sum`]).
    PreMulSum {
        scalar_bits: u64,
    },
}

impl Op {
    /// The operator kind.
    pub fn red_op(self) -> RedOp {
        match self {
            Op::Sum => RedOp::Sum,
            Op::Prod => RedOp::Prod,
            Op::Max => RedOp::Max,
            Op::Min => RedOp::Min,
            Op::Avg => RedOp::Avg,
            Op::PreMulSum { .. } => RedOp::PreMulSum,
        }
    }

    /// PreMulSum with `scalar` converted to `dtype` (rounded like the data).
    pub fn premul_sum(dtype: DataType, scalar: f64) -> Op {
        Op::PreMulSum {
            scalar_bits: crate::verify::encode_f64(dtype, scalar),
        }
    }

    /// The operator for `red` (PreMulSum with scalar 1).
    pub fn from_red_op(red: RedOp, dtype: DataType) -> Op {
        match red {
            RedOp::Sum => Op::Sum,
            RedOp::Prod => Op::Prod,
            RedOp::Max => Op::Max,
            RedOp::Min => Op::Min,
            RedOp::Avg => Op::Avg,
            RedOp::PreMulSum => Op::premul_sum(dtype, 1.0),
        }
    }
}

/// Below this many bytes per block a block is not worth launching (GPU).
const GPU_BYTES_PER_BLOCK: u64 = 64 * 1024;

impl Comm {
    /// The variant of the direct Simple all-reduce for `bytes` per rank (identical on every
    /// rank: depends only on the size and settings): one-shot up to
    /// `OXCCL_ONESHOT_MAX_BYTES`, else two-shot, unless `NCCL_ALGO` forces one.
    pub fn choose_algo(&self, bytes: u64) -> u32 {
        self.tuning()
            .direct_variant(COLL_ALL_REDUCE)
            .unwrap_or(if bytes <= self.config().oneshot_max_bytes {
                ALGO_ONE_SHOT
            } else {
                ALGO_TWO_SHOT
            })
    }

    /// The sizes the tuner works with on this communicator.
    pub fn thresholds(&self) -> tuner::Thresholds {
        tuner::Thresholds::of(self.config())
    }

    /// The tuner's algorithm and protocol for collective `coll` (a `COLL_*` id) of `bytes`
    /// per rank of `dtype` on this communicator, under the overrides in force
    /// ([`Comm::set_tuning`]); an error names the call and the rank when the overrides leave
    /// nothing.
    pub fn tune(&self, coll: u32, dtype: DataType, bytes: u64) -> Result<tuner::Choice, Error> {
        let call = tuner::Call {
            coll,
            elem_size: dtype.size(),
            bytes,
            nranks: self.count(),
            spanning: self.spans_processes(),
        };
        tuner::choose(&call, &self.thresholds(), &self.tuning()).map_err(|m| self.invalid(coll_name(coll), m))
    }

    /// The launch grid of the LL all-reduce for `bytes` per rank (identical on every rank):
    /// one 8-byte line per thread where the device holds that many blocks at once.
    pub fn ll_grid(&self, bytes: u64, dtype: DataType) -> Grid {
        let b = &self.group.backend;
        let (lo, hi) = self
            .config()
            .block_range(b.max_blocks_per_rank(self.group.ranks_per_device, dtype));
        let threads = b.block_threads();
        let blocks = match b.kind() {
            crate::backend::BackendKind::Cpu => hi,
            crate::backend::BackendKind::Gpu => {
                (bytes.div_ceil(8).div_ceil(threads as u64) as u32).clamp(lo, hi)
            }
        };
        Grid { blocks, threads }
    }

    /// The launch grid of the all-reduce for `bytes` per rank (identical on every rank).
    pub fn grid(&self, bytes: u64, dtype: DataType) -> Grid {
        let max = self
            .group
            .backend
            .max_blocks_per_rank(self.group.ranks_per_device, dtype);
        self.grid_within(bytes, max)
    }

    /// The launch grid of a collective `kernel` moving `bytes` per rank (identical on every
    /// rank).
    pub fn coll_grid(&self, bytes: u64, kernel: CollKernel) -> Grid {
        let max = self
            .group
            .backend
            .max_coll_blocks_per_rank(self.group.ranks_per_device, kernel);
        self.grid_within(bytes, max)
    }

    /// `bytes` spread over blocks of at least [`GPU_BYTES_PER_BLOCK`] (all `max` on the CPU),
    /// within the config's floor and cap ([`crate::Config::block_range`]).
    fn grid_within(&self, bytes: u64, max: u32) -> Grid {
        let b = &self.group.backend;
        let (lo, hi) = self.config().block_range(max);
        let blocks = match b.kind() {
            crate::backend::BackendKind::Cpu => hi,
            crate::backend::BackendKind::Gpu => (bytes.div_ceil(GPU_BYTES_PER_BLOCK) as u32).clamp(lo, hi),
        };
        Grid {
            blocks,
            threads: b.block_threads(),
        }
    }

    /// An [`Error::InvalidArgument`] of collective `op` on this rank.
    pub(crate) fn invalid(&self, op: &'static str, what: String) -> Error {
        Error::InvalidArgument {
            op,
            rank: self.rank(),
            what,
        }
    }
}

/// Name of a collective id (`COLL_*`), as in error messages.
pub fn coll_name(coll: u32) -> &'static str {
    match coll {
        COLL_ALL_REDUCE => "all_reduce",
        COLL_BROADCAST => "broadcast",
        COLL_REDUCE => "reduce",
        COLL_ALL_GATHER => "all_gather",
        COLL_REDUCE_SCATTER => "reduce_scatter",
        COLL_ALL_TO_ALL => "all_to_all",
        COLL_GATHER => "gather",
        COLL_SCATTER => "scatter",
        COLL_ALL_GATHER_V => "all_gather_v",
        _ => "collective",
    }
}

/// What a collective fingerprint (`oxccl_device::abi::fingerprint`, or a piece's) says was
/// called, for mismatch errors: "all_reduce of 1000 x f32 with sum (two-shot)", "broadcast of
/// 7 x bf16 from root 3", "a piece (#2) of a larger all_reduce of f32 with sum". Roots and counts
/// are as the fingerprint keeps them (folded when they do not fit its fields).
pub fn describe_call(fp: u64) -> String {
    use oxccl_device::abi::FingerprintFields;
    let f = FingerprintFields::of(fp);
    let coll = coll_name(f.coll);
    if coll == "collective" {
        return format!("an unknown operation (fingerprint {fp:#018x})");
    }
    let dtype = DataType::from_u32(f.dtype).map_or("an unknown type", |d| d.name());
    let reduces = matches!(f.coll, COLL_ALL_REDUCE | COLL_REDUCE | COLL_REDUCE_SCATTER);
    let op = if reduces {
        format!(
            " with {}",
            RedOp::from_u32(f.op).map_or("an unknown operator", |o| o.name())
        )
    } else {
        String::new()
    };
    if let Some(piece) = f.piece {
        return format!("a piece (#{piece}) of a larger {coll} of {dtype}{op}");
    }
    let count = if f.coll == COLL_ALL_GATHER_V {
        format!("counts and displacements hashed {:#012x},", f.count)
    } else {
        format!("{} x", f.count)
    };
    let tag = match f.coll {
        COLL_ALL_REDUCE => match f.tag {
            ALGO_ONE_SHOT => " (one-shot)".to_string(),
            ALGO_TWO_SHOT => " (two-shot)".to_string(),
            ALGO_LL => " (ll)".to_string(),
            _ => " (staged)".to_string(),
        },
        COLL_BROADCAST | COLL_SCATTER => format!(" from root {}", f.tag),
        COLL_REDUCE | COLL_GATHER => format!(" to root {}", f.tag),
        _ => String::new(),
    };
    format!("{coll} of {count} {dtype}{op}{tag}")
}

/// nccl-tests' bus-bandwidth factor for all-reduce: `2 (n - 1) / n`.
pub fn all_reduce_bus_factor(nranks: usize) -> f64 {
    if nranks <= 1 {
        1.0
    } else {
        2.0 * (nranks as f64 - 1.0) / nranks as f64
    }
}

/// The all-reduce kernels' algorithm ids and their names.
pub const ALGORITHMS: [(u32, &str); 3] = [
    (ALGO_ONE_SHOT, "one-shot"),
    (ALGO_TWO_SHOT, "two-shot"),
    (ALGO_LL, "ll"),
];

/// Name of an algorithm id.
pub fn algo_name(algo: u32) -> &'static str {
    ALGORITHMS
        .iter()
        .find(|a| a.0 == algo)
        .map(|a| a.1)
        .unwrap_or("?")
}
