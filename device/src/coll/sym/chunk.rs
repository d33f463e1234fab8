//! Payload chunks of a local buffer as line payload words: chunk `i` is bytes
//! `[i * DATA, (i + 1) * DATA)` (`DATA` = 8 or 16), zero past the end. One vector access
//! when aligned and whole, else element by element (register lanes, no byte views).

use crate::arch;
use crate::ops::elem::{get_lane, set_lane};
use crate::ops::Elem;

/// Elements of `T` in a chunk of `data` bytes.
#[inline(always)]
pub const fn chunk_lanes<T>(data: u64) -> usize {
    (data / core::mem::size_of::<T>() as u64) as usize
}

/// Chunk `i` of the buffer at `base` holding `bytes` bytes.
///
/// # Safety
/// `base` must be valid for `bytes` bytes and aligned for `T`.
#[inline(always)]
pub unsafe fn load<T: Elem>(data: u64, base: u64, i: u64, bytes: u64) -> [u32; 4] {
    let off = i * data;
    let addr = base.wrapping_add(off);
    if off + data <= bytes && addr.is_multiple_of(data) {
        if data == 16 {
            return arch::load_v4(addr as *const [u32; 4]);
        }
        let x = arch::load_u64(addr as *const u64);
        return [x as u32, (x >> 32) as u32, 0, 0];
    }
    let size = core::mem::size_of::<T>() as u64;
    let mut v = [0u32; 4];
    // A constant trip count (the lanes of 16 bytes) so the loop unrolls and every lane index
    // is a constant: a run-time index would put `v` in local memory.
    let lanes = chunk_lanes::<T>(data);
    let mut l = 0;
    while l < 16 / size as usize {
        let o = off + l as u64 * size;
        if l < lanes && o < bytes {
            set_lane::<T>(&mut v, l, T::load(base.wrapping_add(o) as *const T));
        }
        l += 1;
    }
    v
}

/// Store chunk `i` (words `v`) into the buffer at `base` holding `bytes` bytes (nothing
/// past the end).
///
/// # Safety
/// `base` must be valid for `bytes` bytes and aligned for `T`.
#[inline(always)]
pub unsafe fn store<T: Elem>(data: u64, base: u64, i: u64, bytes: u64, v: [u32; 4]) {
    let off = i * data;
    let addr = base.wrapping_add(off);
    if off + data <= bytes && addr.is_multiple_of(data) {
        if data == 16 {
            arch::store_v4(addr as *mut [u32; 4], v);
        } else {
            arch::store_u64(addr as *mut u64, v[0] as u64 | (v[1] as u64) << 32);
        }
        return;
    }
    let size = core::mem::size_of::<T>() as u64;
    // Constant trip count, as in `load`.
    let lanes = chunk_lanes::<T>(data);
    let mut l = 0;
    while l < 16 / size as usize {
        let o = off + l as u64 * size;
        if l < lanes && o < bytes {
            T::store(base.wrapping_add(o) as *mut T, get_lane::<T>(&v, l));
        }
        l += 1;
    }
}
