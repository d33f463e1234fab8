//! All-reduce (`ncclAllReduce`): see `oxccl_device::coll::all_reduce` for the algorithms.

use oxccl_device::abi::{fingerprint, AllReduceArgs, DataType, Header, COLL_ALL_REDUCE};

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
        self.bytes_of(OP, count, dtype, 1)?;
        if self.staging().is_some() {
            let fp = fingerprint(
                COLL_ALL_REDUCE,
                count as u64,
                dtype as u32,
                op.red_op() as u32,
                u32::MAX,
            );
            return self.all_reduce_staged(send, recv, count, dtype, op, fp, stream);
        }
        self.all_reduce_direct(send, recv, count, dtype, op, None, None, stream)
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
        let epoch = self.next_epoch(OP);
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
            local_send: local.map_or(0, |l| l.0),
            local_recv: local.map_or(0, |l| l.1),
        };
        tracing::trace!(target: "oxccl::coll", ?grid, algo, epoch, "launch all_reduce");
        self.group.backend.launch_all_reduce(stream, grid, &args)
    }
}
