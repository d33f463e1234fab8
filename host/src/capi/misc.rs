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
    /// Ends the group without launching anything: at the outermost level the collectives and
    /// sends/receives called in it are dropped and `simInfo->estimatedTime` gets their
    /// estimated time in microseconds (oxccl's cost model, `crate::coll::cost`: per
    /// operation the tuner's algorithm and protocol, latency plus bus bytes over bandwidth;
    /// a communicator rank's operations add up, ranks run in parallel). Inits, splits and
    /// registrations called in the group complete as at `ncclGroupEnd`. An inner level only
    /// closes (`simInfo` untouched). At the outermost level a `simInfo` that is NULL or
    /// not from `NCCL_SIM_INFO_INITIALIZER` is `ncclInvalidArgument`, and the group still
    /// ends with nothing launched.
    fn ncclGroupSimulateEnd / pncclGroupSimulateEnd(info: *mut NcclSimInfo) {
        const OP: &str = "ncclGroupSimulateEnd";
        // Checked before the group ends, reported after (the group ends either way).
        let bad = if info.is_null() {
            Some("simInfo is NULL".to_string())
        } else {
            // SAFETY: non-null; the header (size, magic) is in every version of the struct.
            let (size, magic) = unsafe {
                (
                    std::ptr::read_unaligned(info as *const usize),
                    std::ptr::read_unaligned((info as *const u8).add(8) as *const c_uint),
                )
            };
            if magic != SIM_INFO_MAGIC {
                Some(format!("simInfo's magic is {magic:#x}, not {SIM_INFO_MAGIC:#x} (initialize it with NCCL_SIM_INFO_INITIALIZER)"))
            } else if size < std::mem::size_of::<NcclSimInfo>() {
                Some(format!("simInfo's size is {size}, smaller than the {} bytes of ncclSimInfo_t", std::mem::size_of::<NcclSimInfo>()))
            } else {
                None
            }
        };
        let Some(us) = group::simulate_end()? else {
            return Ok(()); // an inner level: closed, simInfo not read (as NCCL)
        };
        if let Some(why) = bad {
            return Err(CError::arg(OP, format!("{why}; the group ended with nothing launched")));
        }
        tracing::debug!(target: "oxccl::capi", "{OP}: estimated {us:.1} us, nothing launched");
        // SAFETY: checked non-null, initialized, of at least our size.
        unsafe { std::ptr::write_unaligned(std::ptr::addr_of_mut!((*info).estimated_time), us as f32) };
        Ok(())
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
