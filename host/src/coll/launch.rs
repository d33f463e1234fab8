//! The launch path shared by the [`CollArgs`] collectives (every one but the all-reduce):
//! argument checks common to all, the grid, the fingerprint, the epochs and the arguments.

#[cfg(doc)]
use oxccl_device::abi::counts_hash;
use oxccl_device::abi::{coll_fingerprint, CollArgs, DataType, Header};

use super::{coll_name, Op};
use crate::backend::{CollKernel, Stream};
use crate::buffer::DeviceBuffer;
use crate::comm::Comm;
use crate::error::Result;

/// One call of a [`CollArgs`] collective, as the API received it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    /// `COLL_*` id.
    pub coll: u32,
    pub send: u64,
    pub recv: u64,
    /// NCCL's count (see [`CollArgs::count`]).
    pub count: usize,
    pub dtype: DataType,
    /// The operator (reduce and reduce-scatter).
    pub op: Option<Op>,
    /// The root (broadcast, reduce, gather and scatter).
    pub root: Option<u32>,
    /// All-gather-v's layout (`count` is then this rank's own count).
    pub v: Option<VLayout>,
}

/// What the launch needs of an all-gather-v's counts and displacements (validated).
#[derive(Clone, Copy, Debug)]
pub(crate) struct VLayout {
    /// This rank's displacement (elements).
    pub displ: usize,
    /// Sum of every rank's count: nothing runs when it is 0 (the same on every rank).
    pub total: usize,
    /// [`counts_hash`] of the counts and displacements: in the fingerprint in place of the
    /// count.
    pub hash: u64,
}

impl Comm {
    /// `count * dtype.size() * times` bytes, or an error naming `op` if it overflows.
    pub(crate) fn bytes_of(
        &self,
        op: &'static str,
        count: usize,
        dtype: DataType,
        times: usize,
    ) -> Result<usize> {
        count
            .checked_mul(dtype.size())
            .and_then(|b| b.checked_mul(times))
            .ok_or_else(|| {
                self.invalid(
                    op,
                    format!(
                        "{count} {} elements x {times} overflow the address space",
                        dtype.name()
                    ),
                )
            })
    }

    /// Fails unless `buf` holds at least `bytes` (`what` names the buffer in the message).
    pub(crate) fn need(&self, op: &'static str, what: &str, buf: &DeviceBuffer, bytes: usize) -> Result<()> {
        if buf.len() < bytes {
            return Err(self.invalid(
                op,
                format!("{what} buffer holds {} bytes, the call needs {bytes}", buf.len()),
            ));
        }
        Ok(())
    }

    /// Fails unless `root` is a rank of this communicator.
    pub(crate) fn check_root(&self, op: &'static str, root: u32) -> Result<()> {
        if root >= self.count() {
            return Err(self.invalid(
                op,
                format!(
                    "root {root} is not a rank of this communicator ({} ranks)",
                    self.count()
                ),
            ));
        }
        Ok(())
    }

    /// Validate what is common to the collectives and launch `call` on `stream`. `bytes`
    /// sizes the grid: it must be the same on every rank (blocks are matched by index).
    ///
    /// # Safety
    /// The addresses of `call` must be valid for the collective's sizes until it completes
    /// on `stream` (see each collective's `*_raw`).
    pub(crate) unsafe fn launch(&self, call: Call, bytes: usize, stream: &Stream) -> Result<()> {
        let name = coll_name(call.coll);
        let _span = tracing::debug_span!(
            target: "oxccl::coll",
            "coll",
            op = name,
            rank = self.rank(),
            count = call.count,
            dtype = call.dtype.name(),
            root = call.root
        )
        .entered();
        self.check_launch(name, stream)?;
        if let Some(root) = call.root {
            self.check_root(name, root)?;
        }
        // The same decision on every rank: all-gather-v runs unless every count is 0.
        if call.v.map_or(call.count, |v| v.total) == 0 {
            return Ok(());
        }
        if CollKernel::of(call.coll, call.dtype).is_none() {
            return Err(self.invalid(name, format!("collective id {}", call.coll)));
        }
        let (op, root) = (call.op.map_or(0, |o| o.red_op() as u32), call.root.unwrap_or(0));
        let shape = call.v.map_or(call.count as u64, |v| v.hash);
        let fp = coll_fingerprint(call.coll, shape, call.dtype as u32, op, root);
        if self.staging().is_some() {
            return self.launch_staged(call, fp, None, stream);
        }
        self.launch_direct(call, bytes, fp, stream)
    }

    /// Launch `call` as it is (its addresses are what peers will load and store), with
    /// fingerprint `fp`; `bytes` sizes the grid (the same on every rank).
    ///
    /// # Safety
    /// As [`Comm::launch`].
    pub(crate) unsafe fn launch_direct(
        &self,
        call: Call,
        bytes: usize,
        fp: u64,
        stream: &Stream,
    ) -> Result<()> {
        let name = coll_name(call.coll);
        let Some(kernel) = CollKernel::of(call.coll, call.dtype) else {
            return Err(self.invalid(name, format!("collective id {}", call.coll)));
        };
        let grid = self.coll_grid(bytes as u64, kernel);
        let (op, root) = (call.op.map_or(0, |o| o.red_op() as u32), call.root.unwrap_or(0));
        let epoch = self.next_epoch(name, fp);
        let args = CollArgs {
            header: Header::of::<CollArgs>(),
            comm: self.args(),
            send: call.send,
            recv: call.recv,
            count: call.count as u64,
            dtype: call.dtype as u32,
            op,
            coll: call.coll,
            root,
            epoch,
            scalar: match call.op {
                Some(Op::PreMulSum { scalar_bits }) => scalar_bits,
                _ => 0,
            },
            fingerprint: fp,
            displ: call.v.map_or(0, |v| v.displ as u64),
        };
        tracing::trace!(target: "oxccl::coll", ?grid, ?kernel, epoch, "launch {name}");
        self.group.backend.launch_coll(stream, grid, kernel, &args)
    }
}
