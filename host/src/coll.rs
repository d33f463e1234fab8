//! The host collective API: validate arguments, choose the algorithm and grid, pack the
//! kernel arguments, launch on the caller's stream. Completion is stream-ordered; device
//! errors surface through [`Comm::async_error`].

use oxccl_device::abi::{
    fingerprint, AllReduceArgs, DataType, Header, RedOp, ALGO_ONE_SHOT, ALGO_TWO_SHOT, COLL_ALL_REDUCE,
};

use crate::backend::{Grid, Stream};
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::{Error, Result};

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
    /// Out-of-place all-reduce of `count` elements from `send` into `recv`.
    pub fn all_reduce(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = count * dtype.size();
        for (name, b) in [("send", send as &DeviceBuffer), ("recv", recv)] {
            if b.len() < bytes {
                return Err(self.invalid(format!(
                    "{name} buffer holds {} bytes, {count} {} elements need {bytes}",
                    b.len(),
                    dtype.name()
                )));
            }
        }
        // SAFETY: both buffers are live and large enough; `recv` is borrowed mutably.
        unsafe { self.all_reduce_raw(send.ptr(), recv.ptr(), count, dtype, op, stream) }
    }

    /// In-place all-reduce of the first `count` elements of `buf`.
    pub fn all_reduce_in_place(
        &self,
        buf: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = count * dtype.size();
        if buf.len() < bytes {
            return Err(self.invalid(format!(
                "buffer holds {} bytes, {count} {} elements need {bytes}",
                buf.len(),
                dtype.name()
            )));
        }
        // SAFETY: live buffer of sufficient size, borrowed mutably.
        unsafe { self.all_reduce_raw(buf.ptr(), buf.ptr(), count, dtype, op, stream) }
    }

    /// All-reduce on raw device addresses (`send == recv` for in place), like `ncclAllReduce`.
    ///
    /// # Safety
    /// `send` and `recv` must be valid device addresses on this rank's device for `count`
    /// elements until the operation completes on `stream`, and not be accessed by anything
    /// else meanwhile.
    pub unsafe fn all_reduce_raw(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        let _span = tracing::debug_span!(target: "oxccl::coll", "all_reduce", rank = self.rank(), count, dtype = dtype.name(), op = op.red_op().name()).entered();
        if count == 0 {
            return Ok(());
        }
        if send == 0 || recv == 0 {
            return Err(self.invalid("null buffer address".into()));
        }
        let bytes = (count * dtype.size()) as u64;
        let algo = self.choose_algo(bytes);
        let grid = self.grid(bytes, dtype);
        let fp = fingerprint(
            COLL_ALL_REDUCE,
            count as u64,
            dtype as u32,
            op.red_op() as u32,
            algo,
        );
        let epoch = self.epoch.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let args = AllReduceArgs {
            header: Header::of::<AllReduceArgs>(),
            comm: self.args(),
            send,
            recv,
            count: count as u64,
            dtype: dtype as u32,
            op: op.red_op() as u32,
            algo,
            _pad: 0,
            epoch,
            scalar: match op {
                Op::PreMulSum { scalar_bits } => scalar_bits,
                _ => 0,
            },
            fingerprint: fp,
        };
        tracing::trace!(target: "oxccl::coll", ?grid, algo, epoch, "launch all_reduce");
        self.group.backend.launch_all_reduce(stream, grid, &args)
    }

    /// The algorithm for `bytes` per rank (identical on every rank: depends only on the
    /// size, the rank count and settings).
    pub fn choose_algo(&self, bytes: u64) -> u32 {
        crate::settings::algo_override().unwrap_or(if bytes <= crate::settings::oneshot_max_bytes() {
            ALGO_ONE_SHOT
        } else {
            ALGO_TWO_SHOT
        })
    }

    /// The launch grid for `bytes` per rank (identical on every rank).
    pub fn grid(&self, bytes: u64, dtype: DataType) -> Grid {
        let b = &self.group.backend;
        let mut max = b.max_blocks_per_rank(self.group.ranks_per_device, dtype);
        let cap = crate::settings::max_blocks();
        if cap > 0 {
            max = max.min(cap);
        }
        let blocks = match b.kind() {
            crate::backend::BackendKind::Cpu => max,
            crate::backend::BackendKind::Gpu => (bytes.div_ceil(GPU_BYTES_PER_BLOCK) as u32).clamp(1, max),
        };
        Grid {
            blocks,
            threads: b.block_threads(),
        }
    }

    fn invalid(&self, what: String) -> Error {
        Error::InvalidArgument {
            op: "all_reduce",
            rank: self.rank(),
            what,
        }
    }
}

/// nccl-tests' bus-bandwidth factor for all-reduce: `2 (n - 1) / n`.
pub fn all_reduce_bus_factor(nranks: usize) -> f64 {
    if nranks <= 1 {
        1.0
    } else {
        2.0 * (nranks as f64 - 1.0) / nranks as f64
    }
}

/// The all-reduce algorithms and their names.
pub const ALGORITHMS: [(u32, &str); 2] = [(ALGO_ONE_SHOT, "one-shot"), (ALGO_TWO_SHOT, "two-shot")];

/// Name of an algorithm id.
pub fn algo_name(algo: u32) -> &'static str {
    ALGORITHMS
        .iter()
        .find(|a| a.0 == algo)
        .map(|a| a.1)
        .unwrap_or("?")
}
