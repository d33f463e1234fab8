//! Synchronization primitives between ranks: bounded waits and the inbox barrier.

pub mod barrier;
pub mod layout;
pub mod wait;
