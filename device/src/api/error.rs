//! Why a Device API wait gave up.

use crate::abi::{ERR_ABORTED, ERR_TIMEOUT};
use crate::prims::wait::WaitError;

/// The error of a Device API wait (`try_*` functions; `OXCCL_DEV_ERR_*` in C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DevError {
    /// A peer did not arrive within the timeout ([`crate::api::abi::DevComm::timeout_ns`]
    /// or the one given).
    Timeout,
    /// The communicator's abort flag was raised.
    Aborted,
}

impl DevError {
    /// The `ERR_*` code ([`ERR_TIMEOUT`], [`ERR_ABORTED`]).
    pub const fn code(self) -> u32 {
        match self {
            DevError::Timeout => ERR_TIMEOUT,
            DevError::Aborted => ERR_ABORTED,
        }
    }

    /// From an `ERR_*` code (0 and unknown codes: `None`).
    pub const fn from_code(code: u32) -> Option<Self> {
        match code {
            ERR_TIMEOUT => Some(DevError::Timeout),
            ERR_ABORTED => Some(DevError::Aborted),
            _ => None,
        }
    }
}

impl From<WaitError> for DevError {
    fn from(e: WaitError) -> Self {
        match e {
            WaitError::Aborted => DevError::Aborted,
            WaitError::Timeout { .. } => DevError::Timeout,
        }
    }
}

/// Device API status: success (`OXCCL_DEV_SUCCESS`).
pub const DEV_SUCCESS: u32 = 0;
/// Device API status: an argument is out of range or null (`OXCCL_DEV_ERR_INVALID_ARGUMENT`);
/// kept apart from the `ERR_*` codes of [`crate::abi`].
pub const DEV_ERR_INVALID_ARGUMENT: u32 = 0x100;
