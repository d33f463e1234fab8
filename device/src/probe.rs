//! One exported device function per `arch` primitive, so that golden tests can find each
//! primitive's PTX instruction in `ptx/oxccl.ptx` by function name (and so that the
//! bitcode export has them as linkable `extern "C"` symbols).
#![allow(clippy::missing_safety_doc)]

use crate::arch;

macro_rules! probe {
    ($name:ident($($a:ident: $t:ty),*) -> $r:ty = $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r { $body }
    };
}

probe!(oxccl_probe_load_acquire_sys_u64(p: *const u64) -> u64 = arch::load_acquire_sys_u64(p));
probe!(oxccl_probe_load_acquire_gpu_u64(p: *const u64) -> u64 = arch::load_acquire_gpu_u64(p));
probe!(oxccl_probe_load_relaxed_gpu_u32(p: *const u32) -> u32 = arch::load_relaxed_gpu_u32(p));
probe!(oxccl_probe_load_volatile_u32(p: *const u32) -> u32 = arch::load_volatile_u32(p));
probe!(oxccl_probe_store_release_sys_u64(p: *mut u64, v: u64) -> () = arch::store_release_sys_u64(p, v));
probe!(oxccl_probe_store_release_gpu_u64(p: *mut u64, v: u64) -> () = arch::store_release_gpu_u64(p, v));
probe!(oxccl_probe_store_volatile_u32(p: *mut u32, v: u32) -> () = arch::store_volatile_u32(p, v));
probe!(oxccl_probe_fence_acq_rel_sys() -> () = arch::fence_acq_rel_sys());
probe!(oxccl_probe_fence_sc_sys() -> () = arch::fence_sc_sys());
probe!(oxccl_probe_atomic_add_relaxed_gpu_u32(p: *mut u32, v: u32) -> u32 = arch::atomic_add_relaxed_gpu_u32(p, v));
probe!(oxccl_probe_atomic_cas_acq_rel_sys_u32(p: *mut u32, c: u32, v: u32) -> u32 = arch::atomic_cas_acq_rel_sys_u32(p, c, v));
probe!(oxccl_probe_red_add_release_sys_u32(p: *mut u32, v: u32) -> () = arch::red_add_release_sys_u32(p, v));
probe!(oxccl_probe_red_add_release_sys_u64(p: *mut u64, v: u64) -> () = arch::red_add_release_sys_u64(p, v));
probe!(oxccl_probe_load_v4(p: *const [u32; 4], o: *mut [u32; 4]) -> () = arch::store_v4(o, arch::load_v4(p)));
probe!(oxccl_probe_store_v4_volatile(p: *const [u32; 4], o: *mut [u32; 4]) -> () = arch::store_v4_volatile(o, arch::load_v4_volatile(p)));
probe!(oxccl_probe_nanosleep(ns: u32) -> () = arch::nanosleep(ns));
probe!(oxccl_probe_globaltimer() -> u64 = arch::globaltimer());
