//! The Device API for users' own kernels (NCCL's Device API, §1 of the feature notes), as
//! Rust functions and as `extern "C"` functions for the LLVM bitcode export.
//!
//! # Contract
//! - [`DevComm`](abi::DevComm) (by value or reference) says who this rank is
//!   ([`DevComm::rank`](abi::DevComm::rank), `nranks`, `lsa_rank`, `lsa_size`) and holds
//!   the resource window and the abort flag; the host fills it, kernels only read it.
//! - Teams ([`Team`](abi::Team)): `world`, `lsa` (ranks that load/store each other's memory)
//!   and `rail` (one rank per LSA team at the same LSA rank), with rank conversions
//!   ([`team`]); pure arithmetic.
//! - Window pointers ([`ptr`]): this rank's, an LSA peer's and a world peer's address of a
//!   byte of a [`WindowDesc`](abi::WindowDesc); pure arithmetic on the flat range.
//! - Cooperation width as a type ([`coop`]): [`Thread`](coop::Thread),
//!   [`Warp`](coop::Warp), [`Block`](coop::Block) implement [`Coop`](coop::Coop) (thread
//!   rank, size, sync); every thread of the coop calls a coop-taking function together.
//! - LSA barrier sessions ([`barrier`]): arrive / wait / sync among the LSA team, with a
//!   memory-order argument; every wait polls the abort flag and a timeout, and the `try_*`
//!   forms return [`DevError`] instead of giving up silently.
//! - [`export`]: the same as `#[no_mangle] extern "C" fn oxccl_dev_*`, structs by pointer,
//!   the barrier session as an opaque fixed-size struct; `ptx/oxccl_device.h` (written by
//!   `oxccl-builder`) declares them.
//!
//! Layering: [`abi`] (layouts) → [`query`], [`team`], [`ptr`], [`coop`] → [`barrier`] →
//! [`export`].
pub mod abi;
pub mod barrier;
pub mod coop;
pub mod error;
pub mod export;
pub mod flat;
pub mod ptr;
pub mod query;
pub mod team;

pub use barrier::{LsaBarrierSession, MemOrder};
pub use coop::{Block, Coop, CoopAny, Thread, Warp};
pub use error::DevError;
