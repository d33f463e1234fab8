//! Version and error strings, groups, logging re-initialization, and the one-sided calls of
//! NCCL 2.29 that oxccl refuses with a reason (`ncclPutSignal`, `ncclSignal`,
//! `ncclWaitSignal`: no host RMA here, as `ncclCommQueryProperties` reports).

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::coll::CudaStream;
use super::error::{guard_value, last_ptr, put, CError};
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
    guard_value("ncclGetErrorString", c"unknown result code".as_ptr(), || {
        error_string(result).as_ptr()
    })
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
    guard_value("ncclGetLastError", c"".as_ptr(), last_ptr)
}

/// `ncclGetLastError` under its profiling name.
#[no_mangle]
pub extern "C" fn pncclGetLastError(comm: NcclComm) -> *const c_char {
    ncclGetLastError(comm)
}

/// Re-reads `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS` (and `RUST_LOG`, which wins) and applies them
/// to oxccl's log filter from now on, as NCCL re-reads its debug settings. When another
/// `tracing` subscriber owns the process (one installed before oxccl's first call), its
/// filter is left alone.
#[no_mangle]
pub extern "C" fn ncclResetDebugInit() {
    guard_value("ncclResetDebugInit", (), || {
        if !crate::logging::reload() {
            tracing::debug!(target: "oxccl::capi", "ncclResetDebugInit: logging is not oxccl's; nothing reloaded");
        }
    })
}

/// `ncclResetDebugInit` under its profiling name.
#[no_mangle]
pub extern "C" fn pncclResetDebugInit() {
    ncclResetDebugInit()
}

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
