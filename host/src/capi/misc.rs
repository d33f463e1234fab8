//! Version and error strings, groups, logging re-initialization, and the one-sided calls of
//! NCCL 2.29 that oxccl refuses with a reason (`ncclPutSignal`, `ncclSignal`,
//! `ncclWaitSignal`: no host RMA here, as `ncclCommQueryProperties` reports).

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::coll::CudaStream;
use super::error::{last_ptr, put, CError};
use super::group;
use super::handle::CComm;
use super::init::NcclComm;
use super::mem::NcclWindow;
use super::types::*;

api! {
    /// NCCL 2.29.7's version code: the ABI oxccl provides.
    fn ncclGetVersion / pncclGetVersion(version: *mut c_int) {
        // SAFETY: caller contract.
        unsafe { put("ncclGetVersion", "version", version, VERSION_CODE) }
    }
}

/// A static string for each result code.
#[no_mangle]
pub extern "C" fn ncclGetErrorString(result: NcclResult) -> *const c_char {
    error_string(result).as_ptr()
}

/// `ncclGetErrorString` under its profiling name.
#[no_mangle]
pub extern "C" fn pncclGetErrorString(result: NcclResult) -> *const c_char {
    ncclGetErrorString(result)
}

/// The message of this thread's last failed call (every message names the call, the rank
/// and the peer where there is one), "" if none failed. `comm` is not needed.
#[no_mangle]
pub extern "C" fn ncclGetLastError(comm: NcclComm) -> *const c_char {
    let _ = comm;
    last_ptr()
}

/// `ncclGetLastError` under its profiling name.
#[no_mangle]
pub extern "C" fn pncclGetLastError(comm: NcclComm) -> *const c_char {
    ncclGetLastError(comm)
}

/// Logging reads `NCCL_DEBUG`/`OXCCL_LOG` once per process; there is nothing to reset.
#[no_mangle]
pub extern "C" fn ncclResetDebugInit() {}

/// `ncclResetDebugInit` under its profiling name.
#[no_mangle]
pub extern "C" fn pncclResetDebugInit() {}

api! {
    fn ncclGroupStart / pncclGroupStart() {
        group::start();
        Ok(())
    }
}

api! {
    fn ncclGroupEnd / pncclGroupEnd() {
        group::end()
    }
}

api! {
    /// Checks the group's nesting and reports no time estimate (`estimatedTime` stays
    /// NCCL_UNDEF_FLOAT, -1): oxccl's tuner does not simulate groups. The group ends as with
    /// `ncclGroupEnd` (NCCL's simulation also consumes the group's calls).
    fn ncclGroupSimulateEnd / pncclGroupSimulateEnd(info: *mut NcclSimInfo) {
        const OP: &str = "ncclGroupSimulateEnd";
        if !info.is_null() {
            // SAFETY: non-null; the header is in every version of the struct.
            let magic = unsafe { std::ptr::read_unaligned((info as *const u8).add(8) as *const c_uint) };
            if magic != SIM_INFO_MAGIC {
                return Err(CError::arg(OP, "simInfo is not initialized (use NCCL_SIM_INFO_INITIALIZER)"));
            }
            // SAFETY: as above; `estimatedTime` is in every version.
            unsafe { std::ptr::write_unaligned(std::ptr::addr_of_mut!((*info).estimated_time), -1.0) };
        }
        group::end()
    }
}

fn no_rma(op: &'static str, comm: NcclComm) -> Result<(), CError> {
    CComm::get(op, super::key(comm))?;
    Err(CError::usage(
        op,
        "one-sided host RMA is not supported by oxccl (ncclCommQueryProperties reports hostRmaSupport = false); \
         use ncclSend/ncclRecv, or the Device API on a window",
    ))
}

api! {
    fn ncclPutSignal / pncclPutSignal(
        local: *const c_void,
        count: usize,
        datatype: c_int,
        peer: c_int,
        win: NcclWindow,
        offset: usize,
        sig: c_int,
        ctx: c_int,
        flags: c_uint,
        comm: NcclComm,
        stream: CudaStream,
    ) {
        let _ = (local, count, datatype, peer, win, offset, sig, ctx, flags, stream);
        no_rma("ncclPutSignal", comm)
    }
}

api! {
    fn ncclSignal / pncclSignal(peer: c_int, sig: c_int, ctx: c_int, flags: c_uint, comm: NcclComm, stream: CudaStream) {
        let _ = (peer, sig, ctx, flags, stream);
        no_rma("ncclSignal", comm)
    }
}

api! {
    fn ncclWaitSignal / pncclWaitSignal(n: c_int, descs: *mut c_void, comm: NcclComm, stream: CudaStream) {
        let _ = (n, descs, stream);
        no_rma("ncclWaitSignal", comm)
    }
}
