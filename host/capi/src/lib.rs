//! libnccl.so.2: the cdylib of [`oxccl::capi`] (every `nccl*` and `pnccl*` symbol lives
//! there; this crate only names the artifact and its SONAME). Header: `include/nccl.h`.

pub use oxccl::capi::*;
