//! The Device API for users' own kernels: the layouts host and kernels share ([`abi`]:
//! window descriptors, device communicators, teams, requirements). The device-side functions
//! built on them come later; this module holds only layouts and their parsing, no kernel code.
pub mod abi;
