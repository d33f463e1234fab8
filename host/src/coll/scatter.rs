//! Scatter (`ncclScatter`): block `r` of root's input (`nranks * count` elements) into rank
//! `r`'s output (`count`). See `oxccl_device::coll::scatter` for the algorithm.

use oxccl_device::abi::{DataType, COLL_SCATTER};

use super::launch::Call;
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "scatter";

impl Comm {
    /// Scatter block `q` of root's `send` (`nranks * count` elements) into rank `q`'s `recv`
    /// (`count`). `send` is read only at the root (other ranks may pass any buffer; its size
    /// is not checked there).
    pub fn scatter(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        if self.rank() == root {
            self.need(
                OP,
                "send",
                send,
                self.bytes_of(OP, count, dtype, self.count() as usize)?,
            )?;
        }
        self.need(OP, "recv", recv, self.bytes_of(OP, count, dtype, 1)?)?;
        // SAFETY: live buffers of sufficient size; `recv` is borrowed mutably.
        unsafe { self.scatter_raw(send.ptr(), recv.ptr(), count, dtype, root, stream) }
    }

    /// In-place scatter: at the root, `buf` holds the `nranks * count` elements to scatter
    /// and its own block stays where it is (block `root`); on the other ranks, `buf` is the
    /// output (`count`).
    pub fn scatter_in_place(
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
            unsafe { self.scatter_raw(buf.ptr(), buf.ptr() + mine, count, dtype, root, stream) }
        } else {
            self.need(OP, "", buf, self.bytes_of(OP, count, dtype, 1)?)?;
            // SAFETY: live buffer of sufficient size; `send` is not used off the root.
            unsafe { self.scatter_raw(buf.ptr(), buf.ptr(), count, dtype, root, stream) }
        }
    }

    /// Scatter on raw device addresses, like `ncclScatter` (in place at the root when
    /// `recv == send + root * count * size`; `send` is ignored on the other ranks and may be
    /// 0 there).
    ///
    /// # Safety
    /// `recv` (`count` elements), and at the root `send` (`nranks * count`), must be valid
    /// device addresses on this rank's device until the operation completes on `stream`, and
    /// not be accessed by anything else meanwhile; they overlap only in the in-place form.
    pub unsafe fn scatter_raw(
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
        if count > 0 && (recv == 0 || (self.rank() == root && send == 0)) {
            return Err(self.invalid(OP, "null buffer address".into()));
        }
        let call = Call {
            coll: COLL_SCATTER,
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
