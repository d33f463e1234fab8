//! Collectives, send/recv and `ncclRedOpCreatePreMulSum`/`ncclRedOpDestroy`. Each call
//! validates its C arguments (negative roots and peers, unknown types and operators, counts
//! beyond any buffer such as a negative count cast to `size_t`), finds the stream, launches
//! through the `*_raw` form of [`Comm`] (which checks null buffers, sizes and ranges) and,
//! on the CPU backend, completes as [`super::group`] says. Inside a group a collective is
//! queued instead (roots and null buffers checked at the call) and launched at the
//! outermost `ncclGroupEnd`, or dropped by `ncclGroupSimulateEnd`.
//!
//! `ncclScalarDevice` operators read their scalar in stream order: the stream is
//! synchronized and the scalar copied when the collective is called (refused inside a CUDA
//! graph capture, where that copy cannot be ordered).

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use oxccl_device::abi::{
    DataType, COLL_ALL_GATHER, COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_BROADCAST, COLL_GATHER, COLL_REDUCE,
    COLL_REDUCE_SCATTER, COLL_SCATTER,
};

use super::error::{put, CError};
use super::handle::{CComm, UserOp};
use super::init::NcclComm;
use super::types::*;
use crate::backend::Stream;
use crate::coll::Op;
use crate::comm::Comm;

/// `cudaStream_t`.
pub type CudaStream = *mut c_void;

struct Call {
    cc: Arc<CComm>,
    comm: Arc<Comm>,
    stream: Stream,
}

fn call(op: &'static str, comm: NcclComm, stream: CudaStream) -> Result<Call, CError> {
    let cc = CComm::get(op, super::key(comm))?;
    let c = cc.comm(op)?;
    let s = cc.stream(&c, stream as usize)?;
    Ok(Call {
        cc,
        comm: c,
        stream: s,
    })
}

/// What a queued collective is checked for at the call: its buffers (name, address) when
/// `count` is not 0, and its root.
struct Check<'a> {
    bufs: &'a [(&'static str, u64)],
    count: usize,
    root: Option<u32>,
}

impl Call {
    fn done(&self, launched: crate::Result<()>) -> Result<(), CError> {
        launched?;
        super::group::launched(self.comm.backend(), &self.stream)
    }

    /// Launch collective `coll` (`count` elements of `t` per rank, as the tuner counts them)
    /// with `f` now, or, inside a group, check `check` and queue it for the outermost group
    /// end with its estimated time.
    fn run(
        self,
        op: &'static str,
        coll: u32,
        t: DataType,
        count: usize,
        check: Check<'_>,
        f: impl FnOnce(&Comm, &Stream) -> crate::Result<()> + 'static,
    ) -> Result<(), CError> {
        if !super::group::in_group() {
            let r = f(&self.comm, &self.stream);
            return self.done(r);
        }
        let n = self.comm.count();
        if let Some(r) = check.root.filter(|&r| r >= n) {
            return Err(CError::arg(op, format!("root {r} is not below nranks {n}")));
        }
        if check.count > 0 {
            if let Some((name, _)) = check.bufs.iter().find(|b| b.1 == 0) {
                return Err(CError::arg(
                    op,
                    format!("{name} is null with count {}", check.count),
                ));
            }
        }
        let bytes = (count * t.size()) as u64;
        let us = self
            .comm
            .tune(coll, t, bytes)
            .map(|ch| crate::coll::cost::collective_us(self.comm.backend().kind(), coll, n, bytes, ch))
            .unwrap_or(0.0);
        let key = Arc::as_ptr(&self.comm.p2p) as u64;
        super::group::queue(super::group::QueuedColl {
            launch: Box::new(move || {
                let r = f(&self.comm, &self.stream);
                self.done(r)
            }),
            estimate: (key, us),
        });
        Ok(())
    }

    /// The operator of a `ncclRedOp_t` for `dtype`.
    fn op(&self, name: &'static str, op: c_int, dtype: DataType) -> Result<Op, CError> {
        if let Some(r) = builtin_op(op) {
            return Ok(Op::from_red_op(r, dtype));
        }
        let user = if op >= NUM_OPS {
            let ops = self.cc.ops.lock().unwrap_or_else(|p| p.into_inner());
            ops.get((op - NUM_OPS) as usize).copied().flatten()
        } else {
            None
        };
        let Some(user) = user else {
            return Err(CError::arg(
                name,
                format!("invalid reduction operator {op} (not built in, nor made by ncclRedOpCreatePreMulSum on this communicator)"),
            ));
        };
        let (made_for, op) = match user {
            UserOp::Host(op, t) => (t, op),
            UserOp::Device(ptr, t) => (t, self.device_scalar(name, ptr, t)?),
        };
        if made_for != dtype {
            return Err(CError::arg(
                name,
                format!(
                    "operator {op:?} was made for {} and is used with {}",
                    made_for.name(),
                    dtype.name()
                ),
            ));
        }
        Ok(op)
    }

    fn device_scalar(&self, name: &'static str, ptr: u64, t: DataType) -> Result<Op, CError> {
        let b = self.comm.backend();
        if let Some(g) = b.as_gpu() {
            if g.is_capturing(&self.stream)? {
                return Err(CError::usage(
                    name,
                    "a PreMulSum operator with a device scalar (ncclScalarDevice) cannot be used inside CUDA graph \
                     capture by oxccl: make the operator with ncclScalarHostImmediate",
                ));
            }
        }
        b.synchronize(&self.stream)?;
        let mut bytes = [0u8; 8];
        b.download(self.comm.device(), &mut bytes[..t.size()], ptr)?;
        Ok(Op::PreMulSum {
            scalar_bits: u64::from_le_bytes(bytes),
        })
    }
}

/// The data type of a call with `count` elements of it: a count whose bytes exceed
/// `isize::MAX` (a negative number cast to `size_t`, say) is refused here, before any
/// buffer is touched.
fn dtype_count(op: &'static str, datatype: c_int, count: usize) -> Result<DataType, CError> {
    let t = dtype(op, datatype)?;
    if count > isize::MAX as usize / t.size() {
        return Err(CError::arg(
            op,
            format!(
                "count {count} ({} as a signed number) of {} elements is beyond any buffer (a negative count?)",
                count as isize,
                t.name()
            ),
        ));
    }
    Ok(t)
}

fn root(op: &'static str, r: c_int) -> Result<u32, CError> {
    u32::try_from(r).map_err(|_| CError::arg(op, format!("root {r} is negative")))
}

api! {
    fn ncclAllReduce / pncclAllReduce(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: c_int,
        op: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclAllReduce";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let o = c.op(OP, op, t)?;
        let (s, d) = (send as u64, recv as u64);
        let check = Check { bufs: &[("sendbuff", s), ("recvbuff", d)], count, root: None };
        // SAFETY: nccl.h's contract for the buffers.
        c.run(OP, COLL_ALL_REDUCE, t, count, check, move |comm, st| unsafe { comm.all_reduce_raw(s, d, count, t, o, st) })
    }
}

api! {
    fn ncclBroadcast / pncclBroadcast(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: c_int,
        root_rank: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclBroadcast";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let r = root(OP, root_rank)?;
        let (s, d) = (send as u64, recv as u64);
        let check = Check { bufs: &[("sendbuff", s), ("recvbuff", d)], count, root: Some(r) };
        // SAFETY: nccl.h's contract for the buffers.
        c.run(OP, COLL_BROADCAST, t, count, check, move |comm, st| unsafe { comm.broadcast_raw(s, d, count, t, r, st) })
    }
}

api! {
    /// The in-place broadcast of old NCCL versions.
    fn ncclBcast / pncclBcast(
        buf: *mut c_void,
        count: usize,
        datatype: c_int,
        root_rank: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclBcast";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let r = root(OP, root_rank)?;
        let b = buf as u64;
        let check = Check { bufs: &[("buff", b)], count, root: Some(r) };
        // SAFETY: nccl.h's contract for the buffer.
        c.run(OP, COLL_BROADCAST, t, count, check, move |comm, st| unsafe { comm.broadcast_raw(b, b, count, t, r, st) })
    }
}

api! {
    fn ncclReduce / pncclReduce(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: c_int,
        op: c_int,
        root_rank: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclReduce";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let o = c.op(OP, op, t)?;
        let r = root(OP, root_rank)?;
        let (s, d) = (send as u64, recv as u64);
        let check = Check { bufs: &[("sendbuff", s), ("recvbuff", d)], count, root: Some(r) };
        // SAFETY: nccl.h's contract for the buffers.
        c.run(OP, COLL_REDUCE, t, count, check, move |comm, st| unsafe { comm.reduce_raw(s, d, count, t, o, r, st) })
    }
}

api! {
    fn ncclAllGather / pncclAllGather(
        send: *const c_void,
        recv: *mut c_void,
        sendcount: usize,
        datatype: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclAllGather";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, sendcount)?;
        let (s, d) = (send as u64, recv as u64);
        let check = Check { bufs: &[("sendbuff", s), ("recvbuff", d)], count: sendcount, root: None };
        // SAFETY: nccl.h's contract for the buffers.
        c.run(OP, COLL_ALL_GATHER, t, sendcount, check, move |comm, st| unsafe { comm.all_gather_raw(s, d, sendcount, t, st) })
    }
}

api! {
    fn ncclReduceScatter / pncclReduceScatter(
        send: *const c_void,
        recv: *mut c_void,
        recvcount: usize,
        datatype: c_int,
        op: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclReduceScatter";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, recvcount)?;
        let o = c.op(OP, op, t)?;
        let (s, d) = (send as u64, recv as u64);
        let check = Check { bufs: &[("sendbuff", s), ("recvbuff", d)], count: recvcount, root: None };
        // SAFETY: nccl.h's contract for the buffers.
        c.run(OP, COLL_REDUCE_SCATTER, t, recvcount, check, move |comm, st| unsafe { comm.reduce_scatter_raw(s, d, recvcount, t, o, st) })
    }
}

api! {
    fn ncclAlltoAll / pncclAlltoAll(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclAlltoAll";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let (s, d) = (send as u64, recv as u64);
        let check = Check { bufs: &[("sendbuff", s), ("recvbuff", d)], count, root: None };
        // SAFETY: nccl.h's contract for the buffers.
        c.run(OP, COLL_ALL_TO_ALL, t, count, check, move |comm, st| unsafe { comm.all_to_all_raw(s, d, count, t, st) })
    }
}

api! {
    fn ncclGather / pncclGather(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: c_int,
        root_rank: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclGather";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let r = root(OP, root_rank)?;
        let (s, d) = (send as u64, recv as u64);
        let check = Check { bufs: &[("sendbuff", s), ("recvbuff", d)], count, root: Some(r) };
        // SAFETY: nccl.h's contract for the buffers.
        c.run(OP, COLL_GATHER, t, count, check, move |comm, st| unsafe { comm.gather_raw(s, d, count, t, r, st) })
    }
}

api! {
    fn ncclScatter / pncclScatter(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: c_int,
        root_rank: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclScatter";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let r = root(OP, root_rank)?;
        let (s, d) = (send as u64, recv as u64);
        let check = Check { bufs: &[("sendbuff", s), ("recvbuff", d)], count, root: Some(r) };
        // SAFETY: nccl.h's contract for the buffers.
        c.run(OP, COLL_SCATTER, t, count, check, move |comm, st| unsafe { comm.scatter_raw(s, d, count, t, r, st) })
    }
}

fn peer(op: &'static str, p: c_int) -> Result<u32, CError> {
    u32::try_from(p).map_err(|_| CError::arg(op, format!("peer {p} is negative")))
}

api! {
    fn ncclSend / pncclSend(
        send: *const c_void,
        count: usize,
        datatype: c_int,
        to: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclSend";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let p = peer(OP, to)?;
        // SAFETY: nccl.h's contract for the buffer.
        c.done(unsafe { c.comm.send_raw(send as u64, count, t, p, &c.stream) })
    }
}

api! {
    fn ncclRecv / pncclRecv(
        recv: *mut c_void,
        count: usize,
        datatype: c_int,
        from: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        const OP: &str = "ncclRecv";
        let c = call(OP, comm, stream)?;
        let t = dtype_count(OP, datatype, count)?;
        let p = peer(OP, from)?;
        // SAFETY: nccl.h's contract for the buffer.
        c.done(unsafe { c.comm.recv_raw(recv as u64, count, t, p, &c.stream) })
    }
}

api! {
    /// `sum(scalar * x)` for `datatype`: a host scalar is read now, a device scalar when a
    /// collective uses the operator (see the module documentation).
    fn ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum(
        op: *mut c_int,
        scalar: *mut c_void,
        datatype: c_int,
        residence: c_int,
        comm: NcclComm,
    ) {
        const OP: &str = "ncclRedOpCreatePreMulSum";
        let cc = CComm::get(OP, super::key(comm))?;
        let t = dtype(OP, datatype)?;
        if op.is_null() || scalar.is_null() {
            return Err(CError::arg(OP, "op or scalar is NULL"));
        }
        let user = match residence {
            SCALAR_HOST_IMMEDIATE => {
                let mut bytes = [0u8; 8];
                // SAFETY: caller contract: the scalar is one value of `datatype` in host memory.
                unsafe { std::ptr::copy_nonoverlapping(scalar as *const u8, bytes.as_mut_ptr(), t.size()) };
                UserOp::Host(Op::PreMulSum { scalar_bits: u64::from_le_bytes(bytes) }, t)
            }
            SCALAR_DEVICE => UserOp::Device(scalar as u64, t),
            r => return Err(CError::arg(OP, format!("invalid scalar residence {r} (ncclScalarDevice 0 or ncclScalarHostImmediate 1)"))),
        };
        let mut ops = cc.ops.lock().unwrap_or_else(|p| p.into_inner());
        let slot = match ops.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                ops.push(None);
                ops.len() - 1
            }
        };
        let value = NUM_OPS as i64 + slot as i64;
        if value > 0x7fff_ffff {
            return Err(CError::usage(OP, "too many live operators on this communicator"));
        }
        ops[slot] = Some(user);
        // SAFETY: checked non-null.
        unsafe { put(OP, "op", op, value as c_int) }
    }
}

api! {
    fn ncclRedOpDestroy / pncclRedOpDestroy(op: c_int, comm: NcclComm) {
        const OP: &str = "ncclRedOpDestroy";
        let cc = CComm::get(OP, super::key(comm))?;
        if op < NUM_OPS {
            return Err(CError::arg(OP, format!("operator {op} is built in; only operators from ncclRedOpCreatePreMulSum are destroyed")));
        }
        let mut ops = cc.ops.lock().unwrap_or_else(|p| p.into_inner());
        match ops.get_mut((op - NUM_OPS) as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(CError::arg(OP, format!("operator {op} is not a live operator of this communicator"))),
        }
    }
}
