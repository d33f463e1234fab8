//! All-reduce (`ncclAllReduce`): see `oxccl_device::coll::all_reduce` for the load/store
//! algorithms and `oxccl_device::coll::all_reduce_ll` for the LL protocol; the tuner
//! (`super::tuner`) picks one per call. LL needs no staging on communicators spanning
//! processes (peers write into each other's inboxes, which live in the shared segments), so
//! their small all-reduces run through it directly.

use std::sync::atomic::Ordering;

use oxccl_device::abi::{
    fingerprint, piece_fingerprint, AllReduceArgs, DataType, Header, ALGO_LL, COLL_ALL_REDUCE, LL_FLAG_RESET,
};
use oxccl_device::prims::layout::ll_lines;
use oxccl_device::prims::ll::generation_of;

use super::tuner::{Algo, Proto};
use super::Op;
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "all_reduce";

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
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        self.need(OP, "send", send, bytes)?;
        self.need(OP, "recv", recv, bytes)?;
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
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        self.need(OP, "", buf, bytes)?;
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
        self.check_launch(OP, stream)?;
        if count == 0 {
            return Ok(());
        }
        if send == 0 || recv == 0 {
            return Err(self.invalid(OP, "null buffer address".into()));
        }
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        // Buffers in registered windows: the symmetric kernels (crate::coll::sym).
        let kind = oxccl_device::abi::SYM_KIND_ALL_REDUCE_ONE_SHOT;
        if self.try_sym(
            OP,
            kind,
            send,
            bytes,
            recv,
            bytes,
            count,
            bytes as u64,
            dtype,
            Some(op),
            stream,
        )? {
            return Ok(());
        }
        let choice = self.tune(COLL_ALL_REDUCE, dtype, bytes as u64)?;
        tracing::trace!(target: "oxccl::coll", %choice, "tuner");
        match (choice.algo, choice.proto) {
            (_, Proto::Ll) => self.all_reduce_ll(send, recv, count, dtype, op, stream),
            (Algo::Staged, Proto::Simple) => {
                let fp = fingerprint(
                    COLL_ALL_REDUCE,
                    count as u64,
                    dtype as u32,
                    op.red_op() as u32,
                    u32::MAX,
                );
                self.all_reduce_staged(send, recv, count, dtype, op, fp, stream)
            }
            (Algo::Direct, Proto::Simple) => {
                if self.spans_processes() {
                    return Err(self.invalid(
                        OP,
                        "direct/simple cannot reach buffers of ranks in other processes".into(),
                    ));
                }
                self.all_reduce_direct(send, recv, count, dtype, op, None, None, stream)
            }
        }
    }

    /// The all-reduce by the LL protocol: one LL operation per `ll_capacity` bytes (a call
    /// larger than the region runs as several, each its own operation with its own epoch,
    /// parity and fingerprint, so a piece never overruns a peer's slot).
    ///
    /// # Safety
    /// As [`Comm::all_reduce_raw`]; `count > 0`.
    pub(crate) unsafe fn all_reduce_ll(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        let size = dtype.size();
        let cap = self.config().ll_capacity();
        // The capacity is a multiple of 8, every element size divides 8.
        let per = (cap / size).max(1);
        let call_fp = fingerprint(
            COLL_ALL_REDUCE,
            count as u64,
            dtype as u32,
            op.red_op() as u32,
            ALGO_LL,
        );
        let pieces = count.div_ceil(per);
        for j in 0..pieces {
            let off = j * per;
            let k = per.min(count - off);
            let fp = if pieces == 1 {
                call_fp
            } else {
                piece_fingerprint(call_fp, j as u64, ALGO_LL as u64)
            };
            let at = (off * size) as u64;
            let epoch = self.next_epoch(OP, fp);
            let generation = generation_of(epoch);
            let reset = self.ll_generation.swap(generation, Ordering::Relaxed) != generation;
            let args = AllReduceArgs {
                header: Header::of::<AllReduceArgs>(),
                comm: self.args(),
                send: send + at,
                recv: recv + at,
                count: k as u64,
                dtype: dtype as u32,
                op: op.red_op() as u32,
                algo: ALGO_LL,
                _pad: 0,
                epoch,
                scalar: match op {
                    Op::PreMulSum { scalar_bits } => scalar_bits,
                    _ => 0,
                },
                fingerprint: fp,
                ll_lines: ll_lines(cap) as u32,
                ll_flags: if reset { LL_FLAG_RESET } else { 0 },
                local_send: 0,
                local_recv: 0,
            };
            let grid = self.ll_grid((k * size) as u64, dtype);
            tracing::trace!(target: "oxccl::coll", ?grid, epoch, piece = j, reset, "launch all_reduce (ll)");
            self.group.backend.launch_all_reduce(stream, grid, &args)?;
        }
        Ok(())
    }

    /// Launch the all-reduce kernel on `send` and `recv` as they are (the addresses peers
    /// will load and store); `fp` replaces the call's own fingerprint (staged pieces);
    /// `local` gives a staged piece's own user input and output, which this rank's kernel
    /// uses for its own share (see `AllReduceArgs::local_send`).
    ///
    /// # Safety
    /// As [`Comm::all_reduce_raw`]; `count > 0`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn all_reduce_direct(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        op: Op,
        fp: Option<u64>,
        local: Option<(u64, u64)>,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, 1)? as u64;
        let algo = self.choose_algo(bytes);
        let grid = self.grid(bytes, dtype);
        let fp = fp.unwrap_or_else(|| {
            fingerprint(
                COLL_ALL_REDUCE,
                count as u64,
                dtype as u32,
                op.red_op() as u32,
                algo,
            )
        });
        let epoch = self.next_epoch(OP, fp);
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
            ll_lines: 0,
            ll_flags: 0,
            local_send: local.map_or(0, |l| l.0),
            local_recv: local.map_or(0, |l| l.1),
        };
        tracing::trace!(target: "oxccl::coll", ?grid, algo, epoch, "launch all_reduce");
        self.group.backend.launch_all_reduce(stream, grid, &args)
    }
}
