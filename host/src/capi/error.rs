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
        | Error::SymTimeout { .. }
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
    let _ = LAST.try_with(|l| *l.borrow_mut() = c);
}

/// This thread's last error message (valid until the thread's next failing call); `""`
/// while the thread is being torn down.
pub fn last_ptr() -> *const std::ffi::c_char {
    LAST.try_with(|l| l.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// Install logging once per process (inside the panic guard of the first entry point).
fn init_logging() {
    static LOG: std::sync::Once = std::sync::Once::new();
    LOG.call_once(crate::logging::init);
}

/// The text of a caught panic's payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

thread_local! {
    /// The `commName` of the communicator the running entry point works on (set by
    /// [`note_comm_name`]), added to its error message.
    static COMM_NAME: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Name the communicator the running entry point works on (its `ncclConfig_t.commName`):
/// a failure of the call then says `(communicator "NAME")`.
pub fn note_comm_name(name: Option<&str>) {
    let _ = COMM_NAME.try_with(|n| *n.borrow_mut() = name.map(str::to_string));
}

/// Run an entry point's body: its error becomes the returned code and the last error; a
/// panic (in the body or in the one-time logging set-up) becomes `ncclInternalError` (it
/// never crosses into C).
pub fn guard(op: &'static str, f: impl FnOnce() -> Result<(), CError>) -> NcclResult {
    note_comm_name(None);
    let r = catch_unwind(AssertUnwindSafe(|| {
        init_logging();
        f()
    }));
    match r {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => {
            if e.code != IN_PROGRESS {
                let name = COMM_NAME.try_with(|n| n.borrow().clone()).ok().flatten();
                match name {
                    Some(n) if !e.message.contains(&format!("\"{n}\"")) => {
                        set_last(&format!("{} (communicator \"{n}\")", e.message))
                    }
                    _ => set_last(&e.message),
                }
            }
            e.code
        }
        Err(p) => {
            set_last(&format!(
                "{op}: internal error (please report it): {}",
                panic_text(&*p)
            ));
            INTERNAL_ERROR
        }
    }
}

/// As [`guard`] for the entry points that return a value instead of an `ncclResult_t`
/// (`ncclGetErrorString`, `ncclGetLastError`, `ncclLLA2ACalcSlots`, the team helpers): a
/// panic returns `fallback` and records the last error (if the thread can still hold one).
pub fn guard_value<T>(op: &'static str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(|| {
        init_logging();
        f()
    })) {
        Ok(v) => v,
        Err(p) => {
            let msg = format!("{op}: internal error (please report it): {}", panic_text(&*p));
            let _ = catch_unwind(AssertUnwindSafe(|| set_last(&msg)));
            fallback
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
