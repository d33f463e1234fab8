//! The element types and their accumulators.

use crate::abi::DataType;
use crate::arch;
use crate::arch::cvt;

/// IEEE binary16, stored as bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F16(pub u16);
/// bfloat16, stored as bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bf16(pub u16);
/// OCP FP8 E4M3, stored as bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F8E4M3(pub u8);
/// OCP FP8 E5M2, stored as bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F8E5M2(pub u8);

/// Arithmetic of an accumulator type.
pub trait Acc: Copy {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    /// Divide by a rank count (`n >= 1`).
    fn div_n(self, n: u32) -> Self;
}

macro_rules! int_acc {
    ($($t:ty => $w:ty),*) => {$(
        impl Acc for $t {
            #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)] fn min(self, o: Self) -> Self { if o < self { o } else { self } }
            #[inline(always)] fn max(self, o: Self) -> Self { if o > self { o } else { self } }
            // In 64 bits so that a rank count never wraps to 0 or a negative in a narrow type.
            #[inline(always)] fn div_n(self, n: u32) -> Self { if n == 0 { self } else { ((self as $w) / (n as $w)) as $t } }
        }
    )*};
}
int_acc!(i8 => i64, u8 => u64, i32 => i64, u32 => u64, i64 => i64, u64 => u64);

macro_rules! float_acc {
    ($($t:ty),*) => {$(
        impl Acc for $t {
            #[inline(always)] fn add(self, o: Self) -> Self { self + o }
            #[inline(always)] fn mul(self, o: Self) -> Self { self * o }
            // IEEE minNum/maxNum: a NaN operand loses to a number.
            #[inline(always)] fn min(self, o: Self) -> Self { if o < self || self != self { o } else { self } }
            #[inline(always)] fn max(self, o: Self) -> Self { if o > self || self != self { o } else { self } }
            #[inline(always)] fn div_n(self, n: u32) -> Self { self / (n as $t) }
        }
    )*};
}
float_acc!(f32, f64);

/// An element type of a collective.
///
/// # Safety
/// `Self` must be plain old data of exactly `size_of::<Self>()` bytes, 1, 2, 4 or 8, with
/// every bit pattern valid, so that it can be reinterpreted from 16-byte vectors.
pub unsafe trait Elem: Copy + 'static {
    /// The NCCL data type.
    const DTYPE: DataType;
    /// Accumulator type.
    type Acc: Acc;
    /// Widen to the accumulator.
    fn to_acc(self) -> Self::Acc;
    /// Round from the accumulator.
    fn from_acc(a: Self::Acc) -> Self;
    /// From the low `size_of::<Self>()` bytes of `bits` (little-endian; higher bits ignored).
    fn from_le_u64(bits: u64) -> Self;
    /// The element's bytes as the low bytes of a `u64` (zero-extended).
    fn to_le_u64(self) -> u64;
    /// Load one element.
    ///
    /// # Safety
    /// `p` valid for reads and naturally aligned.
    unsafe fn load(p: *const Self) -> Self;
    /// Store one element.
    ///
    /// # Safety
    /// `p` valid for writes and naturally aligned.
    unsafe fn store(p: *mut Self, v: Self);
}

/// Elements of `T` in one 16-byte vector.
#[inline(always)]
pub const fn lanes<T>() -> usize {
    16 / core::mem::size_of::<T>()
}

macro_rules! elem_native {
    ($t:ty, $dt:ident, $acc:ty, $bits:ty, $ld:ident, $st:ident) => {
        // SAFETY: primitive integer/float, every bit pattern valid.
        unsafe impl Elem for $t {
            const DTYPE: DataType = DataType::$dt;
            type Acc = $acc;
            #[inline(always)]
            fn to_acc(self) -> $acc {
                self as $acc
            }
            #[inline(always)]
            fn from_acc(a: $acc) -> Self {
                a as $t
            }
            #[inline(always)]
            fn from_le_u64(bits: u64) -> Self {
                <$t>::from_ne_bytes((bits as $bits).to_ne_bytes())
            }
            #[inline(always)]
            fn to_le_u64(self) -> u64 {
                <$bits>::from_ne_bytes(self.to_ne_bytes()) as u64
            }
            #[inline(always)]
            unsafe fn load(p: *const Self) -> Self {
                <$t>::from_ne_bytes(arch::$ld(p as *const $bits).to_ne_bytes())
            }
            #[inline(always)]
            unsafe fn store(p: *mut Self, v: Self) {
                arch::$st(p as *mut $bits, <$bits>::from_ne_bytes(v.to_ne_bytes()))
            }
        }
    };
}
elem_native!(i8, I8, i8, u8, load_u8, store_u8);
elem_native!(u8, U8, u8, u8, load_u8, store_u8);
elem_native!(i32, I32, i32, u32, load_u32, store_u32);
elem_native!(u32, U32, u32, u32, load_u32, store_u32);
elem_native!(i64, I64, i64, u64, load_u64, store_u64);
elem_native!(u64, U64, u64, u64, load_u64, store_u64);
elem_native!(f32, F32, f32, u32, load_u32, store_u32);
elem_native!(f64, F64, f64, u64, load_u64, store_u64);

macro_rules! elem_small_float {
    ($t:ident, $dt:ident, $bits:ty, $dec:ident, $enc:ident, $ld:ident, $st:ident) => {
        // SAFETY: transparent wrapper of an unsigned integer.
        unsafe impl Elem for $t {
            const DTYPE: DataType = DataType::$dt;
            type Acc = f32;
            #[inline(always)]
            fn to_acc(self) -> f32 {
                cvt::$dec(self.0)
            }
            #[inline(always)]
            fn from_acc(a: f32) -> Self {
                $t(cvt::$enc(a))
            }
            #[inline(always)]
            fn from_le_u64(bits: u64) -> Self {
                $t(bits as $bits)
            }
            #[inline(always)]
            fn to_le_u64(self) -> u64 {
                self.0 as u64
            }
            #[inline(always)]
            unsafe fn load(p: *const Self) -> Self {
                $t(arch::$ld(p as *const $bits))
            }
            #[inline(always)]
            unsafe fn store(p: *mut Self, v: Self) {
                arch::$st(p as *mut $bits, v.0)
            }
        }
    };
}
elem_small_float!(F16, F16, u16, f16_to_f32, f32_to_f16, load_u16, store_u16);
elem_small_float!(Bf16, Bf16, u16, bf16_to_f32, f32_to_bf16, load_u16, store_u16);
elem_small_float!(F8E4M3, F8E4M3, u8, e4m3_to_f32, f32_to_e4m3, load_u8, store_u8);
elem_small_float!(F8E5M2, F8E5M2, u8, e5m2_to_f32, f32_to_e5m2, load_u8, store_u8);

/// Lane `i` of a 16-byte vector as a `T` (register shifts, no memory: a byte-wise view
/// would force the vector into local memory on the GPU).
#[inline(always)]
pub fn get_lane<T: Elem>(v: &[u32; 4], i: usize) -> T {
    let size = core::mem::size_of::<T>();
    if size == 8 {
        T::from_le_u64(v[2 * i] as u64 | (v[2 * i + 1] as u64) << 32)
    } else {
        let byte = i * size;
        T::from_le_u64((v[byte / 4] >> ((byte % 4) * 8)) as u64)
    }
}

/// Set lane `i` of a 16-byte vector.
#[inline(always)]
pub fn set_lane<T: Elem>(v: &mut [u32; 4], i: usize, x: T) {
    let size = core::mem::size_of::<T>();
    let bits = x.to_le_u64();
    if size == 8 {
        v[2 * i] = bits as u32;
        v[2 * i + 1] = (bits >> 32) as u32;
    } else if size == 4 {
        v[i] = bits as u32;
    } else {
        let byte = i * size;
        let shift = (byte % 4) * 8;
        let mask = ((1u32 << (size * 8)) - 1) << shift;
        v[byte / 4] = (v[byte / 4] & !mask) | (((bits as u32) << shift) & mask);
    }
}
