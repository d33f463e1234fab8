//! Transports between the ranks of one node that live in different processes.
//!
//! Each rank of such a communicator owns a *segment*: memory its peers map into their own
//! address spaces (a CUDA VMM allocation exported as a POSIX file descriptor on the GPU
//! backend, a memfd on the CPU backend; see `Backend::alloc_shared`). The descriptors travel
//! between processes over Unix sockets with `SCM_RIGHTS` ([`fdpass`]); what lives in a
//! segment and how collectives use it is in `crate::comm::segment` and
//! `crate::coll::staged`.

pub mod fdpass;
