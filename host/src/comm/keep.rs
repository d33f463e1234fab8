//! Inboxes of ranks made by [`super::Comm::init_rank`] that share this process with their
//! peers: each is freed only once its owner and every in-process peer that may store into it
//! are gone.
//!
//! Why: a rank's kernels store into its peers' inboxes without every store being waited for
//! by the owner. An LL all-reduce rank finishes once it holds the lines it needs, while a
//! block of a peer that carries no line still stores its entry-barrier arrival (which the
//! barrier-framed kernels need for their mismatch check) into every inbox. So a rank can
//! finish, be destroyed and free its inbox while a peer's kernel still stores into it: a
//! segmentation fault on the CPU backend, an illegal address (which poisons the whole CUDA
//! context of the process) on a GPU. Ranks in other processes map each other's inbox
//! through a segment import, which keeps the memory alive by itself; ranks made together by
//! `init_all` share one [`super::Group`], freed after every one of them is gone.
//!
//! Protocol: the owner registers its inbox right after allocating it, before the bootstrap
//! all-gather publishes its address, with one hold (its own). Each in-process peer takes a
//! hold before init's final bootstrap barrier, which no rank passes before every rank has
//! taken its holds, so no inbox can be freed before its peers hold it. Each rank drops its
//! holds when its group is dropped, which happens after its streams were synchronized (no
//! kernel of it runs any more). The last hold frees the memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::Backend;

struct Held {
    backend: Arc<dyn Backend>,
    device: usize,
    bytes: usize,
    holds: usize,
}

/// Live registered inboxes by address (one address space: device addresses are unified
/// virtual addresses, unique among live allocations of the process).
static HELD: Mutex<Option<HashMap<u64, Held>>> = Mutex::new(None);

fn held() -> MutexGuard<'static, Option<HashMap<u64, Held>>> {
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// Register a freshly allocated inbox of `bytes` at `addr` on `device`, with its owner's
/// hold.
pub(crate) fn register(backend: &Arc<dyn Backend>, device: usize, addr: u64, bytes: usize) {
    held().get_or_insert_with(HashMap::new).insert(
        addr,
        Held {
            backend: backend.clone(),
            device,
            bytes,
            holds: 1,
        },
    );
}

/// Take a hold on the registered inbox at `addr` (a peer's in this process); false when no
/// inbox is registered there.
pub(crate) fn retain(addr: u64) -> bool {
    match held().as_mut().and_then(|m| m.get_mut(&addr)) {
        Some(h) => {
            h.holds += 1;
            true
        }
        None => false,
    }
}

/// Drop a hold on the inbox at `addr`; the last one frees it. Unknown addresses are ignored.
///
/// # Safety
/// The caller's kernels no longer use the inbox, and the caller took the hold it drops
/// ([`register`] or [`retain`]).
pub(crate) unsafe fn release(addr: u64) {
    let last = {
        let mut g = held();
        let Some(m) = g.as_mut() else { return };
        match m.get_mut(&addr) {
            Some(h) if h.holds > 1 => {
                h.holds -= 1;
                None
            }
            Some(_) => m.remove(&addr),
            None => None,
        }
    };
    if let Some(h) = last {
        // SAFETY: allocated with these sizes by the owner; every holder is gone, so no
        // kernel stores into it any more (caller contract for each of them).
        unsafe { h.backend.free(h.device, addr, h.bytes) };
    }
}

/// The holds on the inbox at `addr` (tests).
#[cfg(test)]
pub(crate) fn holds(addr: u64) -> usize {
    held().as_ref().and_then(|m| m.get(&addr)).map_or(0, |h| h.holds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    #[test]
    fn the_last_hold_frees() {
        let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
        let a = b.alloc(0, 4096).unwrap();
        register(&b, 0, a, 4096);
        assert!(retain(a) && retain(a));
        assert_eq!(holds(a), 3);
        // SAFETY: no kernel uses it; each release drops a hold taken above.
        unsafe {
            release(a);
            release(a);
        }
        assert_eq!(holds(a), 1);
        // SAFETY: as above; the owner's hold, the last one: freed.
        unsafe { release(a) };
        assert_eq!(holds(a), 0);
        assert!(!retain(a));
    }
}
