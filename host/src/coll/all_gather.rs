//! All-gather (`ncclAllGather`): every rank's `sendcount` elements, concatenated in rank
//! order, into every rank's output (`nranks * sendcount` elements). See
//! `oxccl_device::coll::all_gather` for the algorithm.

use oxccl_device::abi::{DataType, COLL_ALL_GATHER};

use super::launch::Call;
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "all_gather";

impl Comm {
    /// All-gather `sendcount` elements of every rank's `send` into every rank's `recv`
    /// (which holds `nranks * sendcount` elements, rank `q`'s at block `q`).
    pub fn all_gather(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        sendcount: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, sendcount, dtype, 1)?;
        self.need(OP, "send", send, bytes)?;
        self.need(
            OP,
            "recv",
            recv,
            self.bytes_of(OP, sendcount, dtype, self.count() as usize)?,
        )?;
        // SAFETY: live buffers of sufficient size; `recv` is borrowed mutably.
        unsafe { self.all_gather_raw(send.ptr(), recv.ptr(), sendcount, dtype, stream) }
    }

    /// In-place all-gather: `buf` holds `nranks * sendcount` elements and this rank's input
    /// is already at block `rank` of it.
    pub fn all_gather_in_place(
        &self,
        buf: &mut DeviceBuffer,
        sendcount: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        self.need(
            OP,
            "",
            buf,
            self.bytes_of(OP, sendcount, dtype, self.count() as usize)?,
        )?;
        let mine = self.bytes_of(OP, sendcount, dtype, self.rank() as usize)? as u64;
        // SAFETY: live buffer of sufficient size, borrowed mutably; block `rank` lies in it.
        unsafe { self.all_gather_raw(buf.ptr() + mine, buf.ptr(), sendcount, dtype, stream) }
    }

    /// All-gather on raw device addresses, like `ncclAllGather` (in place when
    /// `send == recv + rank * sendcount * size`).
    ///
    /// # Safety
    /// `send` (`sendcount` elements) and `recv` (`nranks * sendcount`) must be valid device
    /// addresses on this rank's device until the operation completes on `stream`, and not be
    /// accessed by anything else meanwhile; they overlap only in the in-place form.
    pub unsafe fn all_gather_raw(
        &self,
        send: u64,
        recv: u64,
        sendcount: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, sendcount, dtype, self.count() as usize)?;
        if sendcount > 0 && (send == 0 || recv == 0) {
            return Err(self.invalid(OP, "null buffer address".into()));
        }
        let each = sendcount * dtype.size();
        let kind = oxccl_device::abi::SYM_KIND_ALL_GATHER;
        if sendcount > 0
            && self.try_sym(
                OP,
                kind,
                send,
                each,
                recv,
                bytes,
                sendcount,
                each as u64,
                dtype,
                None,
                stream,
            )?
        {
            return Ok(());
        }
        let call = Call {
            coll: COLL_ALL_GATHER,
            send,
            recv,
            count: sendcount,
            dtype,
            op: None,
            root: None,
            v: None,
        };
        self.launch(call, bytes, stream)
    }
}
