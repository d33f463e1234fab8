//! All-to-all (`ncclAlltoAll`): block `q` of every rank `r`'s input into block `r` of rank
//! `q`'s output; both hold `nranks * count` elements. No in-place form, as in NCCL. See
//! `oxccl_device::coll::all_to_all` for the algorithm.

use oxccl_device::abi::{DataType, COLL_ALL_TO_ALL};

use super::launch::Call;
use crate::backend::Stream;
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

const OP: &str = "all_to_all";

impl Comm {
    /// All-to-all: block `q` of this rank's `send` into block `rank` of rank `q`'s `recv`
    /// (each holds `nranks * count` elements, `count` per block).
    pub fn all_to_all(
        &self,
        send: &DeviceBuffer,
        recv: &mut DeviceBuffer,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, self.count() as usize)?;
        self.need(OP, "send", send, bytes)?;
        self.need(OP, "recv", recv, bytes)?;
        // SAFETY: live buffers of sufficient size; `recv` is borrowed mutably, so it is not
        // `send`.
        unsafe { self.all_to_all_raw(send.ptr(), recv.ptr(), count, dtype, stream) }
    }

    /// All-to-all on raw device addresses, like `ncclAlltoAll`. `send == recv` (in place),
    /// or any overlap of the two, is an [`crate::Error::InvalidArgument`].
    ///
    /// # Safety
    /// `send` and `recv` (`nranks * count` elements each) must be valid device addresses on
    /// this rank's device until the operation completes on `stream`, and not be accessed by
    /// anything else meanwhile.
    pub unsafe fn all_to_all_raw(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<()> {
        let bytes = self.bytes_of(OP, count, dtype, self.count() as usize)?;
        if send == recv && send != 0 {
            return Err(self.invalid(OP, "in place (send == recv) is not supported".into()));
        }
        if bytes > 0 {
            if send == 0 || recv == 0 {
                return Err(self.invalid(OP, "null buffer address".into()));
            }
            let b = bytes as u64;
            if send < recv.saturating_add(b) && recv < send.saturating_add(b) {
                return Err(self.invalid(
                    OP,
                    format!("send {send:#x} and recv {recv:#x} overlap ({bytes} bytes each)"),
                ));
            }
        }
        let call = Call {
            coll: COLL_ALL_TO_ALL,
            send,
            recv,
            count,
            dtype,
            op: None,
            root: None,
            v: None,
        };
        self.launch(call, bytes, stream)
    }
}
