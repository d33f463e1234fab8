//! Gather (`ncclGather`): every rank's `count` elements, concatenated in rank order, into
//! root's output (`nranks * count` elements). See `oxccl_device::coll::gather` for the
//! algorithm.

use oxccl_device::abi::{DataType, COLL_GATHER};

use super::launch::Call;
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "gather";

impl Comm {
    /// Gather `count` elements of every rank's `send` into root's `recv` (`nranks * count`
    /// elements, rank `q`'s at block `q`). `recv` is written only at the root (other ranks
    /// may pass any buffer; its size is not checked there).
    pub fn gather(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.need(OP, "send", send, self.bytes_of(OP, count, dtype, 1)?)?;
        if self.rank() == root {
            self.need(
                OP,
                "recv",
                recv,
                self.bytes_of(OP, count, dtype, self.count() as usize)?,
            )?;
        }
        // SAFETY: live buffers of sufficient size; `recv` is borrowed mutably.
        unsafe { self.gather_raw(send.ptr(), recv.ptr(), count, dtype, root, stream) }
    }

    /// In-place gather: at the root, `buf` holds `nranks * count` elements with the root's
    /// input already at block `root`; on the other ranks, `buf` is the input (`count`).
    pub fn gather_in_place(
        &self,
        buf: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.check_root(OP, root)?;
        if self.rank() == root {
            self.need(
                OP,
                "",
                buf,
                self.bytes_of(OP, count, dtype, self.count() as usize)?,
            )?;
            let mine = self.bytes_of(OP, count, dtype, root as usize)? as u64;
            // SAFETY: live buffer of sufficient size, borrowed mutably; block `root` lies in it.
            unsafe { self.gather_raw(buf.ptr() + mine, buf.ptr(), count, dtype, root, stream) }
        } else {
            self.need(OP, "", buf, self.bytes_of(OP, count, dtype, 1)?)?;
            // SAFETY: live buffer of sufficient size; `recv` is not used off the root.
            unsafe { self.gather_raw(buf.ptr(), buf.ptr(), count, dtype, root, stream) }
        }
    }

    /// Gather on raw device addresses, like `ncclGather` (in place at the root when
    /// `send == recv + root * count * size`; `recv` is ignored on the other ranks and may be
    /// 0 there).
    ///
    /// # Safety
    /// `send` (`count` elements), and at the root `recv` (`nranks * count`), must be valid
    /// device addresses on this rank's device until the operation completes on `stream`, and
    /// not be accessed by anything else meanwhile; they overlap only in the in-place form.
    pub unsafe fn gather_raw(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, 1)?;
        self.bytes_of(OP, count, dtype, self.count() as usize)?;
        if count > 0 && (send == 0 || (self.rank() == root && recv == 0)) {
            return Err(self.invalid(OP, "null buffer address".into()));
        }
        let call = Call {
            coll: COLL_GATHER,
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
