//! Dynamically loaded system libraries (the CUDA driver; NVML for NVLink state). A missing library is a typed error naming what was
//! searched, never a panic.

pub mod cuda;
pub mod nvml;
