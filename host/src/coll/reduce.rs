//! Reduce (`ncclReduce`): the reduction of every rank's `count` elements into root's output;
//! the other ranks' output is not touched. See `oxccl_device::coll::reduce` for the algorithm.

use oxccl_device::abi::{DataType, COLL_REDUCE};

use super::launch::Call;
use super::Op;
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "reduce";

impl Comm {
    /// Reduce `count` elements of every rank's `send` into root's `recv` (`recv` is written
    /// only at the root; its size is not checked on the other ranks).
    #[allow(clippy::too_many_arguments)] // NCCL's signature
    pub fn reduce(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        op: Op,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        self.need(OP, "send", send, bytes)?;
        if self.rank() == root {
            self.need(OP, "recv", recv, bytes)?;
        }
        // SAFETY: live buffers of sufficient size; `recv` is borrowed mutably.
        unsafe { self.reduce_raw(send.ptr(), recv.ptr(), count, dtype, op, root, stream) }
    }

    /// In-place reduce: the first `count` elements of every rank's `buf` are the inputs, and
    /// root's `buf` receives the result.
    pub fn reduce_in_place(
        &self,
        buf: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        op: Op,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        self.need(OP, "", buf, bytes)?;
        // SAFETY: live buffer of sufficient size, borrowed mutably.
        unsafe { self.reduce_raw(buf.ptr(), buf.ptr(), count, dtype, op, root, stream) }
    }

    /// Reduce on raw device addresses, like `ncclReduce` (`send == recv` for in place;
    /// `recv` is ignored on the other ranks and may be 0 there).
    ///
    /// # Safety
    /// `send` (and `recv` at the root) must be valid device addresses on this rank's device
    /// for `count` elements until the operation completes on `stream`, and not be accessed
    /// by anything else meanwhile.
    #[allow(clippy::too_many_arguments)] // NCCL's signature
    pub unsafe fn reduce_raw(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        op: Op,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        if count > 0 && (send == 0 || (self.rank() == root && recv == 0)) {
            return Err(self.invalid(OP, "null buffer address".into()));
        }
        let call = Call {
            coll: COLL_REDUCE,
            send,
            recv,
            count,
            dtype,
            op: Some(op),
            root: Some(root),
            v: None,
        };
        self.launch(call, bytes, stream)
    }
}
