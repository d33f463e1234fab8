//! Reduce-scatter (`ncclReduceScatter`): rank `r`'s output (`recvcount` elements) is the
//! reduction of block `r` of every rank's input (`nranks * recvcount` elements). See
//! `oxccl_device::coll::reduce_scatter` for the algorithm.

use oxccl_device::abi::{DataType, COLL_REDUCE_SCATTER};

use super::launch::Call;
use super::Op;
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "reduce_scatter";

impl Comm {
    /// Reduce-scatter: `send` holds `nranks * recvcount` elements; `recv` receives block
    /// `rank` of their reduction over every rank.
    pub fn reduce_scatter(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        recvcount: usize,
        dtype: DataType,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        let n = self.count() as usize;
        self.need(OP, "send", send, self.bytes_of(OP, recvcount, dtype, n)?)?;
        self.need(OP, "recv", recv, self.bytes_of(OP, recvcount, dtype, 1)?)?;
        // SAFETY: live buffers of sufficient size; `recv` is borrowed mutably.
        unsafe { self.reduce_scatter_raw(send.ptr(), recv.ptr(), recvcount, dtype, op, stream) }
    }

    /// In-place reduce-scatter: `buf` holds `nranks * recvcount` elements; the result lands
    /// in block `rank` of it (the rest of `buf` is left as it was).
    pub fn reduce_scatter_in_place(
        &self,
        buf: &mut DeviceBuffer,
        recvcount: usize,
        dtype: DataType,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        let n = self.count() as usize;
        self.need(OP, "", buf, self.bytes_of(OP, recvcount, dtype, n)?)?;
        let mine = self.bytes_of(OP, recvcount, dtype, self.rank() as usize)? as u64;
        // SAFETY: live buffer of sufficient size, borrowed mutably; block `rank` lies in it.
        unsafe { self.reduce_scatter_raw(buf.ptr(), buf.ptr() + mine, recvcount, dtype, op, stream) }
    }

    /// Reduce-scatter on raw device addresses, like `ncclReduceScatter` (in place when
    /// `recv == send + rank * recvcount * size`).
    ///
    /// # Safety
    /// `send` (`nranks * recvcount` elements) and `recv` (`recvcount`) must be valid device
    /// addresses on this rank's device until the operation completes on `stream`, and not be
    /// accessed by anything else meanwhile; they overlap only in the in-place form.
    pub unsafe fn reduce_scatter_raw(
        &self,
        send: u64,
        recv: u64,
        recvcount: usize,
        dtype: DataType,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, recvcount, dtype, self.count() as usize)?;
        if recvcount > 0 && (send == 0 || recv == 0) {
            return Err(self.invalid(OP, "null buffer address".into()));
        }
        let each = recvcount * dtype.size();
        let kind = oxccl_device::abi::SYM_KIND_REDUCE_SCATTER;
        if recvcount > 0
            && self.try_sym(
                OP,
                kind,
                send,
                bytes,
                recv,
                each,
                recvcount,
                each as u64,
                dtype,
                Some(op),
                stream,
            )?
        {
            return Ok(());
        }
        let call = Call {
            coll: COLL_REDUCE_SCATTER,
            send,
            recv,
            count: recvcount,
            dtype,
            op: Some(op),
            root: None,
            v: None,
        };
        self.launch(call, bytes, stream)
    }
}
