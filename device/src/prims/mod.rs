//! Synchronization primitives between ranks: bounded waits, the inbox barrier and the LL
//! line protocol.

pub mod barrier;
pub mod epoch;
pub mod layout;
pub mod ll;
pub mod wait;
