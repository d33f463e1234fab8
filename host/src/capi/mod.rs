//! The nccl.h-compatible C ABI (exported by the `oxccl-capi` cdylib as libnccl.so.2).
