//! PTX implementations. Each function is one instruction (or a fixed short sequence), named
//! for its ordering and scope. Addresses are generic (no state space suffix), so they work
//! on global, mapped host, and peer (P2P) memory alike.
#![allow(clippy::missing_safety_doc)]

use core::arch::asm;

/// Abort the kernel (`trap`): the launch fails with an illegal-instruction error.
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` has no operands; control never returns.
    unsafe { asm!("trap;", options(noreturn)) }
}

/// `%tid.x`.
#[inline(always)]
pub fn thread_idx_x() -> u32 {
    let v: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {v}, %tid.x;", v = out(reg32) v, options(pure, nomem, nostack)) };
    v
}

/// `%ntid.x`.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    let v: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {v}, %ntid.x;", v = out(reg32) v, options(pure, nomem, nostack)) };
    v
}

/// `%ctaid.x`.
#[inline(always)]
pub fn block_idx_x() -> u32 {
    let v: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {v}, %ctaid.x;", v = out(reg32) v, options(pure, nomem, nostack)) };
    v
}

/// `%nctaid.x`.
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    let v: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {v}, %nctaid.x;", v = out(reg32) v, options(pure, nomem, nostack)) };
    v
}

/// `bar.sync 0`: block-wide barrier; orders memory among the block's threads.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: all threads of the block reach this call (caller contract of kernels).
    unsafe { asm!("bar.sync 0;", options(nostack)) };
}

/// `bar.red.or.pred`: block-wide barrier that also returns whether `p` was true in any
/// thread of the block.
#[inline(always)]
pub fn sync_threads_or(p: bool) -> bool {
    let r: u32;
    // SAFETY: all threads of the block reach this call (caller contract of kernels).
    unsafe {
        asm!(
            "{{ .reg .pred %pi, %po; setp.ne.u32 %pi, {i}, 0; bar.red.or.pred %po, 0, %pi; selp.u32 {r}, 1, 0, %po; }}",
            i = in(reg32) p as u32, r = out(reg32) r, options(nostack)
        )
    };
    r != 0
}

/// Threads per warp.
pub const WARP_SIZE: u32 = 32;

/// `%laneid`: this thread's lane in its warp.
#[inline(always)]
pub fn lane_id() -> u32 {
    let v: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {v}, %laneid;", v = out(reg32) v, options(pure, nomem, nostack)) };
    v
}

/// `bar.warp.sync -1`: the full warp meets; orders memory among its lanes.
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: every lane of the warp reaches this call (caller contract of warp coops).
    unsafe { asm!("bar.warp.sync -1;", options(nostack)) };
}

/// `vote.sync.any.pred` over the full warp: whether `p` held in any lane.
#[inline(always)]
pub fn sync_warp_any(p: bool) -> bool {
    let r: u32;
    // SAFETY: every lane of the warp reaches this call (caller contract of warp coops).
    unsafe {
        asm!(
            "{{ .reg .pred %pi, %po; setp.ne.u32 %pi, {i}, 0; vote.sync.any.pred %po, %pi, -1; selp.u32 {r}, 1, 0, %po; }}",
            i = in(reg32) p as u32, r = out(reg32) r, options(nostack)
        )
    };
    r != 0
}

/// `%globaltimer`: nanoseconds, coarse (about 1 µs resolution on Hopper).
#[inline(always)]
pub fn globaltimer() -> u64 {
    let v: u64;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u64 {v}, %globaltimer;", v = out(reg64) v, options(nomem, nostack)) };
    v
}

/// `nanosleep.u32`: suspend the thread for about `ns` nanoseconds.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    // SAFETY: no memory effects.
    unsafe { asm!("nanosleep.u32 {n};", n = in(reg32) ns, options(nomem, nostack)) };
}

/// Back off inside a wait loop (short sleep after many spins).
#[inline(always)]
pub fn spin_backoff(spins: u32) {
    if spins >= 4096 {
        nanosleep(256);
    }
}

macro_rules! load_fn {
    ($(#[$m:meta])* $name:ident, $t:ty, $cls:ident, $ins:literal) => {
        $(#[$m])*
        /// # Safety
        /// `p` must be valid for reads of the value's size and naturally aligned.
        #[inline(always)]
        pub unsafe fn $name(p: *const $t) -> $t {
            let v: $t;
            asm!(concat!($ins, " {v}, [{p}];"), v = out($cls) v, p = in(reg64) p, options(nostack));
            v
        }
    };
}

macro_rules! store_fn {
    ($(#[$m:meta])* $name:ident, $t:ty, $cls:ident, $ins:literal) => {
        $(#[$m])*
        /// # Safety
        /// `p` must be valid for writes of the value's size and naturally aligned.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $t, v: $t) {
            asm!(concat!($ins, " [{p}], {v};"), v = in($cls) v, p = in(reg64) p, options(nostack));
        }
    };
}

load_fn!(/// `ld.acquire.sys.u64`.
    load_acquire_sys_u64, u64, reg64, "ld.acquire.sys.u64");
load_fn!(/// `ld.acquire.gpu.u64`.
    load_acquire_gpu_u64, u64, reg64, "ld.acquire.gpu.u64");
load_fn!(/// `ld.acquire.sys.u32`.
    load_acquire_sys_u32, u32, reg32, "ld.acquire.sys.u32");
load_fn!(/// `ld.relaxed.gpu.u32`.
    load_relaxed_gpu_u32, u32, reg32, "ld.relaxed.gpu.u32");
load_fn!(/// `ld.relaxed.sys.u64`.
    load_relaxed_sys_u64, u64, reg64, "ld.relaxed.sys.u64");
load_fn!(/// `ld.volatile.u32`: host-written control words (abort flag).
    load_volatile_u32, u32, reg32, "ld.volatile.u32");
load_fn!(/// `ld.volatile.u64`.
    load_volatile_u64, u64, reg64, "ld.volatile.u64");
store_fn!(/// `st.release.sys.u64`.
    store_release_sys_u64, u64, reg64, "st.release.sys.u64");
store_fn!(/// `st.release.gpu.u64`.
    store_release_gpu_u64, u64, reg64, "st.release.gpu.u64");
store_fn!(/// `st.release.sys.u32`.
    store_release_sys_u32, u32, reg32, "st.release.sys.u32");
store_fn!(/// `st.relaxed.sys.u64`.
    store_relaxed_sys_u64, u64, reg64, "st.relaxed.sys.u64");
store_fn!(/// `st.volatile.u32`.
    store_volatile_u32, u32, reg32, "st.volatile.u32");
store_fn!(/// `st.volatile.u64`.
    store_volatile_u64, u64, reg64, "st.volatile.u64");

// Weak payload accesses of every width.
load_fn!(/// `ld.u8` (weak).
    load_u8, u8, reg16, "ld.u8");
load_fn!(/// `ld.u16` (weak).
    load_u16, u16, reg16, "ld.u16");
load_fn!(/// `ld.u32` (weak).
    load_u32, u32, reg32, "ld.u32");
load_fn!(/// `ld.u64` (weak).
    load_u64, u64, reg64, "ld.u64");
store_fn!(/// `st.u8` (weak).
    store_u8, u8, reg16, "st.u8");
store_fn!(/// `st.u16` (weak).
    store_u16, u16, reg16, "st.u16");
store_fn!(/// `st.u32` (weak).
    store_u32, u32, reg32, "st.u32");
store_fn!(/// `st.u64` (weak).
    store_u64, u64, reg64, "st.u64");

/// `ld.v4.u32`: one weak 16-byte load.
///
/// # Safety
/// `p` must be valid for 16-byte reads and 16-byte aligned.
#[inline(always)]
pub unsafe fn load_v4(p: *const [u32; 4]) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
        a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
        p = in(reg64) p, options(nostack, readonly));
    [a, b, c, d]
}

/// `st.v4.u32`: one weak 16-byte store.
///
/// # Safety
/// `p` must be valid for 16-byte writes and 16-byte aligned.
#[inline(always)]
pub unsafe fn store_v4(p: *mut [u32; 4], v: [u32; 4]) {
    asm!("st.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
        a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
        p = in(reg64) p, options(nostack));
}

/// `st.global.cs.v4.u32`: one weak 16-byte store to global memory with the streaming
/// ("evict first") cache policy, for payload written once and not read again by this kernel
/// (the fan-out stores of the copy collectives, `OXCCL_COPY_STORES=cs`).
///
/// # Safety
/// `p` must be a global-memory address valid for 16-byte writes and 16-byte aligned.
#[inline(always)]
pub unsafe fn store_v4_cs(p: *mut [u32; 4], v: [u32; 4]) {
    asm!("st.global.cs.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
        a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
        p = in(reg64) p, options(nostack));
}

/// `ld.volatile.v4.u32`: a 16-byte load the compiler never splits, merges or hoists; the
/// poll of low-latency line protocols (data and tag in one access).
///
/// # Safety
/// `p` must be valid for 16-byte reads and 16-byte aligned.
#[inline(always)]
pub unsafe fn load_v4_volatile(p: *const [u32; 4]) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.volatile.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
        a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
        p = in(reg64) p, options(nostack));
    [a, b, c, d]
}

/// `st.volatile.v4.u32`: one 16-byte store, never split or merged by the compiler.
///
/// # Safety
/// `p` must be valid for 16-byte writes and 16-byte aligned.
#[inline(always)]
pub unsafe fn store_v4_volatile(p: *mut [u32; 4], v: [u32; 4]) {
    asm!("st.volatile.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
        a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
        p = in(reg64) p, options(nostack));
}

/// `fence.acq_rel.sys`.
#[inline(always)]
pub fn fence_acq_rel_sys() {
    // SAFETY: a fence has no operands.
    unsafe { asm!("fence.acq_rel.sys;", options(nostack)) };
}

/// `griddepcontrol.wait`: returns once the kernels this grid programmatically depends on
/// have completed and their memory operations are visible to it (at once for a grid
/// launched without programmatic stream serialization). A compiler barrier for memory.
#[inline(always)]
pub fn grid_dependency_wait() {
    // SAFETY: no operands; waits for earlier work only.
    unsafe { asm!("griddepcontrol.wait;", options(nostack)) };
}

/// `prefetch.L2`: ask for the line at `p` in L2 (generic address). A hint: it reads nothing
/// the program sees and orders nothing.
///
/// # Safety
/// `p` must lie in memory mapped for this context.
#[inline(always)]
pub unsafe fn prefetch_l2(p: u64) {
    asm!("prefetch.L2 [{p}];", p = in(reg64) p, options(nostack, readonly, preserves_flags));
}

/// Make the value `x` needed here, so that everything `x` is computed from is read by this
/// point: a `prefetch.L2` of `p` predicated on `x == 0x8000000000000001`, which ptxas can
/// neither fold nor move (the kernel-argument loads behind `x` would otherwise be compiled
/// into constant-bank operands at their first use). If `x` ever held that value, the effect
/// is a prefetch: a hint that reads nothing the program sees.
///
/// # Safety
/// `p` must lie in memory mapped for this context.
#[inline(always)]
pub unsafe fn need(x: u64, p: u64) {
    asm!("{{ .reg .pred %pn; setp.eq.u64 %pn, {x}, 0x8000000000000001; @%pn prefetch.L2 [{p}]; }}",
        x = in(reg64) x, p = in(reg64) p, options(nostack, readonly, preserves_flags));
}

/// `griddepcontrol.launch_dependents`: the next kernel of the stream, if it was launched
/// with programmatic stream serialization, may be scheduled once every block of this grid
/// has executed this (or exited). Changes no memory and no ordering.
#[inline(always)]
pub fn launch_dependents() {
    // SAFETY: no operands.
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) };
}

/// `fence.acq_rel.gpu`.
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    // SAFETY: a fence has no operands.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) };
}

/// `fence.sc.sys`.
#[inline(always)]
pub fn fence_sc_sys() {
    // SAFETY: a fence has no operands.
    unsafe { asm!("fence.sc.sys;", options(nostack)) };
}

/// `atom.relaxed.gpu.add.u32`: returns the old value.
///
/// # Safety
/// `p` must be valid, 4-byte aligned, in memory that supports GPU atomics.
#[inline(always)]
pub unsafe fn atomic_add_relaxed_gpu_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    asm!("atom.relaxed.gpu.add.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p,
        v = in(reg32) v, options(nostack));
    old
}

/// `atom.acq_rel.sys.cas.b32`: returns the old value.
///
/// # Safety
/// `p` must be valid, 4-byte aligned, in device memory.
#[inline(always)]
pub unsafe fn atomic_cas_acq_rel_sys_u32(p: *mut u32, cmp: u32, new: u32) -> u32 {
    let old: u32;
    asm!("atom.acq_rel.sys.cas.b32 {o}, [{p}], {c}, {n};", o = out(reg32) old, p = in(reg64) p,
        c = in(reg32) cmp, n = in(reg32) new, options(nostack));
    old
}

/// `red.release.sys.add.u32`: add without a result.
///
/// # Safety
/// `p` must be valid, 4-byte aligned, in device memory.
#[inline(always)]
pub unsafe fn red_add_release_sys_u32(p: *mut u32, v: u32) {
    asm!("red.release.sys.add.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v,
        options(nostack));
}

/// `red.release.sys.add.u64`: add without a result.
///
/// # Safety
/// `p` must be valid, 8-byte aligned, in device memory.
#[inline(always)]
pub unsafe fn red_add_release_sys_u64(p: *mut u64, v: u64) {
    asm!("red.release.sys.add.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v,
        options(nostack));
}
