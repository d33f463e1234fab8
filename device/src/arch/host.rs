//! Host implementations of the [`super`] API: `core` atomics with the orderings the PTX
//! names promise (acquire/release; scopes collapse to one process), so that kernels run on
//! CPU threads without data races. Weak payload accesses are `Relaxed` atomics of the same
//! width. Pointers may be in memory shared between processes (the CPU backend's shared
//! memory), which is why atomics are built over raw pointers.
#![allow(clippy::missing_safety_doc)]

use core::sync::atomic::{
    fence, AtomicU16, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};

/// Abort the "kernel": on the host a device trap is a panic of the block's thread.
pub fn trap() -> ! {
    panic!("oxccl device trap")
}

/// A block-wide barrier. The CPU backend runs one thread per block, so this orders nothing
/// beyond program order.
#[inline(always)]
pub fn sync_threads() {}

/// Block-wide barrier returning whether `p` was true in any thread: one thread per block
/// on the host, so `p` itself.
#[inline(always)]
pub fn sync_threads_or(p: bool) -> bool {
    p
}

/// Threads per warp: the CPU backend runs one thread per block, so a warp is one thread.
pub const WARP_SIZE: u32 = 1;

/// This thread's lane in its warp (always 0 on the host).
#[inline(always)]
pub fn lane_id() -> u32 {
    0
}

/// Warp-wide barrier: one thread per warp on the host, so nothing beyond program order.
#[inline(always)]
pub fn sync_warp() {}

/// Warp-wide "any": `p` itself on the host (one thread per warp).
#[inline(always)]
pub fn sync_warp_any(p: bool) -> bool {
    p
}

/// Nanoseconds since the first call in this process (monotonic), like `%globaltimer`.
pub fn globaltimer() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Sleep about `ns` nanoseconds (at least yield the CPU).
pub fn nanosleep(ns: u32) {
    if ns < 1_000 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_nanos(ns as u64));
    }
}

/// Back off inside a wait loop: spin briefly, then yield, then sleep, so that many ranks
/// (threads or processes) make progress on a machine with few cores.
#[inline]
pub fn spin_backoff(spins: u32) {
    if spins < 64 {
        core::hint::spin_loop();
    } else if spins < 256 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

macro_rules! atomic_load {
    ($name:ident, $t:ty, $at:ty, $ord:expr) => {
        /// # Safety
        /// `p` must be valid for reads, naturally aligned, and only accessed atomically by
        /// other threads.
        #[inline(always)]
        pub unsafe fn $name(p: *const $t) -> $t {
            <$at>::from_ptr(p as *mut $t).load($ord)
        }
    };
}

macro_rules! atomic_store {
    ($name:ident, $t:ty, $at:ty, $ord:expr) => {
        /// # Safety
        /// `p` must be valid for writes, naturally aligned, and only accessed atomically by
        /// other threads.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t) {
            <$at>::from_ptr(p).store(v, $ord)
        }
    };
}

atomic_load!(load_acquire_sys_u64, u64, AtomicU64, Acquire);
atomic_load!(load_acquire_gpu_u64, u64, AtomicU64, Acquire);
atomic_load!(load_acquire_sys_u32, u32, AtomicU32, Acquire);
atomic_load!(load_relaxed_gpu_u32, u32, AtomicU32, Relaxed);
atomic_load!(load_relaxed_sys_u64, u64, AtomicU64, Relaxed);
atomic_load!(load_volatile_u32, u32, AtomicU32, Relaxed);
atomic_load!(load_volatile_u64, u64, AtomicU64, Relaxed);
atomic_store!(store_release_sys_u64, u64, AtomicU64, Release);
atomic_store!(store_release_gpu_u64, u64, AtomicU64, Release);
atomic_store!(store_release_sys_u32, u32, AtomicU32, Release);
atomic_store!(store_relaxed_sys_u64, u64, AtomicU64, Relaxed);
atomic_store!(store_volatile_u32, u32, AtomicU32, Relaxed);
atomic_store!(store_volatile_u64, u64, AtomicU64, Relaxed);

atomic_load!(load_u8, u8, AtomicU8, Relaxed);
atomic_load!(load_u16, u16, AtomicU16, Relaxed);
atomic_load!(load_u32, u32, AtomicU32, Relaxed);
atomic_load!(load_u64, u64, AtomicU64, Relaxed);
atomic_store!(store_u8, u8, AtomicU8, Relaxed);
atomic_store!(store_u16, u16, AtomicU16, Relaxed);
atomic_store!(store_u32, u32, AtomicU32, Relaxed);
atomic_store!(store_u64, u64, AtomicU64, Relaxed);

/// 16-byte weak load: four relaxed 32-bit loads (no single-copy atomicity on the host).
///
/// # Safety
/// `p` must be valid for 16-byte reads and 16-byte aligned.
#[inline(always)]
pub unsafe fn load_v4(p: *const [u32; 4]) -> [u32; 4] {
    let w = p as *const u32;
    [
        load_u32(w),
        load_u32(w.add(1)),
        load_u32(w.add(2)),
        load_u32(w.add(3)),
    ]
}

/// 16-byte weak store: four relaxed 32-bit stores.
///
/// # Safety
/// `p` must be valid for 16-byte writes and 16-byte aligned.
#[inline(always)]
pub unsafe fn store_v4(p: *mut [u32; 4], v: [u32; 4]) {
    let w = p as *mut u32;
    for (i, x) in v.into_iter().enumerate() {
        store_u32(w.add(i), x);
    }
}

/// The streaming-policy 16-byte store: on the host a plain [`store_v4`] (there is no cache
/// policy to choose).
///
/// # Safety
/// As [`store_v4`].
#[inline(always)]
pub unsafe fn store_v4_cs(p: *mut [u32; 4], v: [u32; 4]) {
    store_v4(p, v)
}

/// 16-byte poll. Host protocols that need the 16 bytes to arrive together must not rely on
/// this (the host has no 16-byte single-copy atomicity); the words are read last to first
/// with acquire so that a protocol writing its tag word last sees the data with it.
///
/// # Safety
/// `p` must be valid for 16-byte reads and 16-byte aligned.
#[inline(always)]
pub unsafe fn load_v4_volatile(p: *const [u32; 4]) -> [u32; 4] {
    let w = p as *const u32;
    let d = load_acquire_sys_u32(w.add(3));
    let c = load_acquire_sys_u32(w.add(2));
    let b = load_acquire_sys_u32(w.add(1));
    let a = load_acquire_sys_u32(w);
    [a, b, c, d]
}

/// 16-byte store, words first to last with release (the last word is the tag word).
///
/// # Safety
/// `p` must be valid for 16-byte writes and 16-byte aligned.
#[inline(always)]
pub unsafe fn store_v4_volatile(p: *mut [u32; 4], v: [u32; 4]) {
    let w = p as *mut u32;
    for (i, x) in v.into_iter().enumerate() {
        store_release_sys_u32(w.add(i), x);
    }
}

/// `fence.acq_rel.sys`.
#[inline(always)]
pub fn fence_acq_rel_sys() {
    fence(AcqRel)
}

/// `griddepcontrol.wait`: nothing to wait for on the host, where a stream's launches run one
/// after the other.
#[inline(always)]
pub fn grid_dependency_wait() {}

/// `prefetch.L2`: nothing to do on the host.
///
/// # Safety
/// None needed here; the GPU version wants a mapped address.
#[inline(always)]
pub unsafe fn prefetch_l2(_p: u64) {}

/// `need` (make a value needed before the dependency wait): nothing on the host.
///
/// # Safety
/// None needed here; the GPU version wants a mapped address.
#[inline(always)]
pub unsafe fn need(_x: u64, _p: u64) {}

/// `griddepcontrol.launch_dependents`: nothing to do on the host.
#[inline(always)]
pub fn launch_dependents() {}

/// `fence.acq_rel.gpu`.
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    fence(AcqRel)
}

/// `fence.sc.sys`.
#[inline(always)]
pub fn fence_sc_sys() {
    fence(SeqCst)
}

/// Relaxed fetch-add; returns the old value.
///
/// # Safety
/// `p` must be valid, 4-byte aligned, accessed only atomically.
#[inline(always)]
pub unsafe fn atomic_add_relaxed_gpu_u32(p: *mut u32, v: u32) -> u32 {
    AtomicU32::from_ptr(p).fetch_add(v, Relaxed)
}

/// Acquire-release compare-and-swap; returns the old value.
///
/// # Safety
/// `p` must be valid, 4-byte aligned, accessed only atomically.
#[inline(always)]
pub unsafe fn atomic_cas_acq_rel_sys_u32(p: *mut u32, cmp: u32, new: u32) -> u32 {
    match AtomicU32::from_ptr(p).compare_exchange(cmp, new, AcqRel, Acquire) {
        Ok(v) | Err(v) => v,
    }
}

/// Release add without a result.
///
/// # Safety
/// `p` must be valid, 4-byte aligned, accessed only atomically.
#[inline(always)]
pub unsafe fn red_add_release_sys_u32(p: *mut u32, v: u32) {
    AtomicU32::from_ptr(p).fetch_add(v, Release);
}

/// Release add without a result (64-bit).
///
/// # Safety
/// `p` must be valid, 8-byte aligned, accessed only atomically.
#[inline(always)]
pub unsafe fn red_add_release_sys_u64(p: *mut u64, v: u64) {
    AtomicU64::from_ptr(p).fetch_add(v, Release);
}
