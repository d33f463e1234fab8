//! Dynamically loaded system libraries. A missing library is a typed error naming what was
//! searched, never a panic.

pub mod cuda;
