//! Host-side abort flags: what the host waits of a communicator (bootstrap receives, the
//! in-process rendezvous, a pending non-blocking init) poll to give up early.
//!
//! The device side has its own flag in mapped memory (see `Comm::abort`); this one is for
//! host threads only. Raising is sticky. A flag can also watch other flags
//! ([`AbortFlag::watching`]): it then reads as raised when any of them is, while raising it
//! raises none of them (a pending split honours both its parent's flag and its own handle's,
//! and aborting the split leaves the parent alone), until [`AbortFlag::detach`] (the new
//! communicator's flag stops following its parent once it is made).
//!
//! Ordering: `raise` is a release store and `is_raised` an acquire load, so whatever the
//! raising thread wrote before raising is visible to a waiter that saw the flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often host waits look at their abort flag while blocked.
pub const POLL: Duration = Duration::from_millis(10);

/// A sticky, shareable abort flag (clones share the flag).
#[derive(Clone, Default)]
pub struct AbortFlag(Arc<Inner>);

#[derive(Default)]
struct Inner {
    raised: AtomicBool,
    /// Flags this one also reads as raised when they are.
    watched: Mutex<Vec<AbortFlag>>,
}

impl AbortFlag {
    /// A new, lowered flag.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new flag that reads as raised when it or one of `others` is raised.
    pub fn watching(others: &[&AbortFlag]) -> Self {
        AbortFlag(Arc::new(Inner {
            raised: AtomicBool::new(false),
            watched: Mutex::new(others.iter().map(|f| (*f).clone()).collect()),
        }))
    }

    /// Stop watching other flags (this flag's own state is kept).
    pub fn detach(&self) {
        self.0.watched.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Raise the flag (sticky).
    pub fn raise(&self) {
        self.0.raised.store(true, Ordering::Release);
    }

    /// Whether this flag or one it watches was raised.
    pub fn is_raised(&self) -> bool {
        self.0.raised.load(Ordering::Acquire)
            || self
                .0
                .watched
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(AbortFlag::is_raised)
    }

    /// Whether `self` and `other` are the same flag.
    pub fn same(&self, other: &AbortFlag) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for AbortFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AbortFlag(raised: {})", self.is_raised())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_and_watching_flags_follow_without_raising() {
        let (a, b) = (AbortFlag::new(), AbortFlag::new());
        let e = AbortFlag::watching(&[&a, &b]);
        assert!(!e.is_raised());
        b.clone().raise();
        assert!(b.is_raised() && e.is_raised() && !a.is_raised());
        let c = AbortFlag::watching(&[&a]);
        c.raise();
        assert!(c.is_raised() && !a.is_raised());
        assert!(a.same(&a.clone()) && !a.same(&b));
        let d = AbortFlag::watching(&[&b]);
        d.detach();
        assert!(!d.is_raised());
    }
}
