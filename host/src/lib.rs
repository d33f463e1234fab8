//! oxccl: GPU collective communication in Rust.
//!
//! - [`Comm`]: communicators (`Comm::init_all` for every rank in one process; several ranks
//!   may share a device; `Comm::init_rank` one rank per call), [`Comm::split`],
//!   [`Comm::finalize`], [`Comm::destroy`], and non-blocking creation behind an
//!   [`InitHandle`].
//! - [`Comm::all_reduce`] and friends: collectives on device buffers and streams.
//! - [`Comm::send`] and [`Comm::recv`]: point-to-point transfers, grouped by
//!   [`group_start`] / [`group_end`] (NCCL's group semantics, see [`group`]).
//! - [`backend`]: the GPU backend (CUDA driver, PTX from `device/`) and the CPU backend
//!   (the same device functions on host threads).
//! - [`topo`]: the devices of a backend and which pairs reach each other's memory (P2P).
//!
//! Errors are [`Error`]; device-side failures (timeouts, aborts, mismatched calls) are
//! reported through [`Comm::async_error`].

pub mod abort;
pub mod backend;
pub mod bootstrap;
pub mod buffer;
pub mod capi;
pub mod coll;
pub mod comm;
pub mod error;
pub mod group;
pub mod harness;
pub mod logging;
pub mod p2p;
pub mod settings;
pub mod sys;
pub mod topo;
pub mod transport;
pub mod verify;
pub mod window;

pub use backend::{Backend, BackendKind, Stream};
pub use buffer::DeviceBuffer;
pub use coll::Op;
pub use comm::{Comm, Config, InitHandle, ShrinkMode};
pub use error::{Error, Result};
pub use group::{group_end, group_start};
pub use oxccl_device::abi::{DataType, RedOp};
pub use window::{CommProperties, DevCommHandle, Window};
