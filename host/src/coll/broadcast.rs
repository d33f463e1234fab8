//! Broadcast (`ncclBroadcast`, and `ncclBcast` as the in-place form): root's `count`
//! elements into every rank's output. See `oxccl_device::coll::broadcast` for the algorithm.

use oxccl_device::abi::{DataType, COLL_BROADCAST};

use super::launch::Call;
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "broadcast";

impl Comm {
    /// Broadcast `count` elements of root's `send` into every rank's `recv`. `send` is read
    /// only at the root (other ranks may pass any buffer; its size is not checked there).
    pub fn broadcast(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        if self.rank() == root {
            self.need(OP, "send", send, bytes)?;
        }
        self.need(OP, "recv", recv, bytes)?;
        // SAFETY: live buffers of sufficient size; `recv` is borrowed mutably.
        unsafe { self.broadcast_raw(send.ptr(), recv.ptr(), count, dtype, root, stream) }
    }

    /// In-place broadcast (`ncclBcast`): root's first `count` elements of `buf` into every
    /// other rank's `buf`.
    pub fn broadcast_in_place(
        &self,
        buf: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        self.need(OP, "", buf, bytes)?;
        // SAFETY: live buffer of sufficient size, borrowed mutably.
        unsafe { self.broadcast_raw(buf.ptr(), buf.ptr(), count, dtype, root, stream) }
    }

    /// Broadcast on raw device addresses, like `ncclBroadcast` (`send == recv` at the root
    /// for in place; `send` is ignored on the other ranks and may be 0 there).
    ///
    /// # Safety
    /// `recv` (and `send` at the root) must be valid device addresses on this rank's device
    /// for `count` elements until the operation completes on `stream`, and not be accessed
    /// by anything else meanwhile.
    pub unsafe fn broadcast_raw(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        if count > 0 && (recv == 0 || (self.rank() == root && send == 0)) {
            return Err(self.invalid(OP, "null buffer address".into()));
        }
        let call = Call {
            coll: COLL_BROADCAST,
            send,
            recv,
            count,
            dtype,
            op: None,
            root: Some(root),
            v: None,
        };
        self.launch(call, bytes, stream)
    }
}
