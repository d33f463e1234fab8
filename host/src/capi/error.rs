//! Errors across the C ABI: every entry point runs inside [`guard`], which catches panics
//! (none may unwind into C), maps oxccl's [`Error`] to an `ncclResult_t` and records the
//! rendered error chain as this thread's last error (`ncclGetLastError`).

use std::cell::RefCell;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::types::*;
use crate::error::Error;

/// An error on its way to C: the code and the message `ncclGetLastError` shows.
#[derive(Clone, Debug)]
pub struct CError {
    pub code: NcclResult,
    pub message: String,
}

impl CError {
    /// `ncclInvalidArgument` from `op`.
    pub fn arg(op: &str, what: impl std::fmt::Display) -> Self {
        CError {
            code: INVALID_ARGUMENT,
            message: format!("{op}: invalid argument: {what}"),
        }
    }

    /// `ncclInvalidUsage` from `op`.
    pub fn usage(op: &str, what: impl std::fmt::Display) -> Self {
        CError {
            code: INVALID_USAGE,
            message: format!("{op}: invalid usage: {what}"),
        }
    }

    /// `ncclInProgress` (not an error: the last error is left alone).
    pub fn in_progress(op: &str) -> Self {
        CError {
            code: IN_PROGRESS,
            message: format!("{op}: in progress"),
        }
    }
}

/// The `ncclResult_t` for an oxccl error.
pub fn code_of(e: &Error) -> NcclResult {
    match e {
        Error::CudaDriverMissing { .. }
        | Error::Cuda { .. }
        | Error::NoCudaDevice
        | Error::ModuleLoad { .. } => UNHANDLED_CUDA_ERROR,
        Error::NoSuchDevice { .. }
        | Error::InvalidArgument { .. }
        | Error::InvalidSetting { .. }
        | Error::BufferTooSmall { .. }
        | Error::NotWindowMemory { .. }
        | Error::WindowBounds { .. }
        | Error::LayoutVersion { .. } => INVALID_ARGUMENT,
        Error::InvalidUsage { .. } | Error::Finalized { .. } | Error::Unsupported { .. } => INVALID_USAGE,
        Error::Timeout { .. }
        | Error::Mismatch { .. }
        | Error::SymMismatch { .. }
        | Error::P2pMismatch { .. }
        | Error::P2pTimeout { .. }
        | Error::ControlTimeout { .. }
        | Error::Bootstrap { .. }
        | Error::Aborted { .. } => REMOTE_ERROR,
        Error::InProgress { .. } => IN_PROGRESS,
        Error::Alloc { .. }
        | Error::Unreachable { .. }
        | Error::Transport { .. }
        | Error::Control { .. }
        | Error::InitFailed { .. }
        | Error::Window { .. }
        | Error::WindowMap { .. } => SYSTEM_ERROR,
        _ => INTERNAL_ERROR,
    }
}

impl From<Error> for CError {
    fn from(e: Error) -> Self {
        let mut message = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            message.push_str(": ");
            message.push_str(&s.to_string());
            src = s.source();
        }
        CError {
            code: code_of(&e),
            message,
        }
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `message` as this thread's last error (and log it at warn level, NCCL_DEBUG=WARN).
pub fn set_last(message: &str) {
    tracing::warn!(target: "oxccl::capi", "{message}");
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// This thread's last error message (valid until the thread's next failing call).
pub fn last_ptr() -> *const std::ffi::c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// Run an entry point's body: its error becomes the returned code and the last error; a
/// panic becomes `ncclInternalError` (it never crosses into C).
pub fn guard(op: &'static str, f: impl FnOnce() -> Result<(), CError>) -> NcclResult {
    static LOG: std::sync::Once = std::sync::Once::new();
    LOG.call_once(crate::logging::init);
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => {
            if e.code != IN_PROGRESS {
                set_last(&e.message);
            }
            e.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last(&format!("{op}: internal error (please report it): {what}"));
            INTERNAL_ERROR
        }
    }
}

/// Write `v` through an out-pointer the caller passed (`op` names the call in the error).
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub unsafe fn put<T>(op: &'static str, name: &str, out: *mut T, v: T) -> Result<(), CError> {
    if out.is_null() {
        return Err(CError::arg(op, format!("{name} is NULL")));
    }
    // SAFETY: non-null, valid for writes by the caller's contract.
    unsafe { out.write(v) };
    Ok(())
}
