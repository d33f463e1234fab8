//! Conversions between `f32` and the low-precision float formats, values held as raw bits.
//!
//! # Formats
//!
//! | format | bits | exponent bits / bias | mantissa bits | max finite | inf | NaN encodings |
//! |--------|------|----------------------|---------------|------------|-----|---------------|
//! | f16 (IEEE binary16) | 16 | 5 / 15 | 10 | 65504 | `S.11111.0000000000` | `S.11111.m`, m != 0 |
//! | bf16 (bfloat16) | 16 | 8 / 127 | 7 | ≈ 3.39e38 | `S.11111111.0000000` | `S.11111111.m`, m != 0 |
//! | FP8 E4M3 (OCP) | 8 | 4 / 7 | 3 | 448 | none | `S.1111.111` only |
//! | FP8 E5M2 (OCP) | 8 | 5 / 15 | 2 | 57344 | `S.11111.00` | `S.11111.m`, m != 0 |
//!
//! All four have subnormals (exponent field 0, no implicit leading one), and all are
//! handled exactly, both ways.
//!
//! # Decoding (`*_to_f32`)
//!
//! Every value of every format is exactly representable in `f32`, so decoding is exact:
//! there is no rounding. A NaN decodes to some `f32` NaN (its payload and sign are not
//! specified); an infinity decodes to the infinity of the same sign.
//!
//! # Encoding (`f32_to_*`)
//!
//! - Rounding: to nearest, ties to even (IEEE `roundTiesToEven`, PTX `.rn`), including values
//!   that round into the subnormal range of the target (and from there down to ±0 or up to
//!   the smallest normal) and values that round up into the next binade.
//! - Signed zeros keep their sign; an underflow to zero keeps the sign of the input.
//! - f16 and bf16: IEEE overflow, i.e. a value whose magnitude rounds past the max finite
//!   (for f16: `|x| >= 65520`) becomes ±inf, and ±inf stays ±inf. NaN becomes a quiet NaN;
//!   which one is unspecified (the soft path returns `input sign | quiet bit | top payload
//!   bits`, the GPU returns the canonical `0x7FFF` whatever the sign); callers may only
//!   test for NaN-ness.
//! - E4M3 and E5M2: **saturating to finite** (`.satfinite`, CUDA's `__NV_SATFINITE`): a value
//!   whose magnitude rounds past the max finite becomes the max finite of the same sign
//!   (±448, ±57344), **and so does ±inf**, for both formats. E4M3 has no infinity, so this
//!   is forced there; for E5M2 it is what PTX's `cvt.rn.satfinite.e5m2x2.f32` does (the
//!   only f32→fp8 conversion the hardware has: `.satfinite` is mandatory on it) and what
//!   CUDA's `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)` does. Keeping the soft
//!   path identical to that instruction is what lets the CPU backend and the GPU agree
//!   bit for bit. NaN becomes `0x7F` (the canonical fp8 NaN) for both formats, also for a
//!   negative NaN: the hardware drops the sign, so the soft path does too.
//!
//! # Why these choices
//!
//! Reductions on low-precision data (sum, prod, min, max, avg over f16/bf16/fp8 buffers)
//! decode every operand to `f32`, combine in `f32`, and round the result **once** with
//! these encoders. Correct round-to-nearest-even at that single point is what keeps the
//! result within half an ulp of the f32 result and identical on the CPU backend and on the
//! GPU. Saturation for fp8 follows the convention of the FP8 training recipes (and of the
//! hardware): an fp8 tensor is scaled into range, and a rare overflow clipped to the max
//! finite does far less damage than an infinity that then poisons every later step (an
//! infinity times a zero scale is NaN). f16/bf16 keep IEEE overflow semantics, like the
//! `cvt.rn` instructions without `.satfinite` and like the `half` crate.
//!
//! # Implementations
//!
//! [`soft`] holds portable bit-manipulation versions of all eight functions (integer
//! operations only, no tables, no float arithmetic, so they give the same bits under any
//! floating-point environment); they are used on the host and are the reference in tests.
//! The top-level functions call [`soft`] on every target but `nvptx64`, where they use the
//! PTX `cvt` instructions of sm_90 (`cvt.f32.f16`, `cvt.rn.f16.f32`, `cvt.rn.bf16.f32`,
//! `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`, `cvt.rn.f16x2.e4m3x2`). Decoding bf16 and E5M2
//! needs no instruction: a bf16 is the top half of an f32, and an E5M2 is the top byte of
//! an f16 (same exponent width and bias), so those decoders are shifts (plus
//! `cvt.f32.f16` for E5M2), which the compiler can also fold into neighbouring code,
//! unlike an `asm!` block. These instructions need PTX ISA 7.8 on sm_90 (8.1 only adds
//! sm_89 for the fp8 forms), which is the version rustc emits for sm_90 by default.
//!
//! Both paths were checked on an H200 against each other, bit for bit, for all 2^32 f32
//! inputs of the four encoders and all 16- and 8-bit inputs of the decoders (NaN results of
//! f16/bf16/f32 compared as NaN-ness).

/// Portable, pure-Rust versions of the conversions (the host path and the reference).
///
/// Integer operations only: results do not depend on the floating-point environment
/// (flush-to-zero, rounding mode) of the target.
pub mod soft {
    /// Round `m >> shift` to nearest, ties to even. `shift` may be 0..=63 (large shifts give 0
    /// for any `m < 2^(shift-1)`, which holds for the 24-bit significands used here).
    #[inline(always)]
    const fn round_shift_rne(m: u32, shift: u32) -> u32 {
        if shift == 0 {
            return m;
        }
        if shift > 31 {
            // m < 2^24 <= 2^(shift - 1): below half of the last place.
            return 0;
        }
        let q = m >> shift;
        let rem = m & ((1u32 << shift) - 1);
        let half = 1u32 << (shift - 1);
        if rem > half || (rem == half && (q & 1) == 1) {
            q + 1
        } else {
            q
        }
    }

    /// Round the magnitude `abs` (f32 bits, sign cleared, finite or inf) into a format with
    /// `ebits` exponent bits (bias `2^(ebits-1) - 1`) and `mbits` mantissa bits, with an
    /// unbounded exponent field: the result may exceed the format's largest finite encoding
    /// (the caller decides between infinity and saturation). Handles zeros, f32 subnormals,
    /// target subnormals (including rounding up to the smallest normal) and carries into
    /// the next binade.
    #[inline(always)]
    const fn encode_mag(abs: u32, ebits: u32, mbits: u32) -> u32 {
        let bias = (1i32 << (ebits - 1)) - 1;
        let ef = (abs >> 23) as i32;
        let frac = abs & 0x007f_ffff;
        // abs = sig * 2^(e - 23)
        let (sig, e) = if ef == 0 {
            (frac, -126)
        } else {
            (frac | 0x0080_0000, ef - 127)
        };
        if e >= 1 - bias {
            // Normal in the target. `sig` rounded to `mbits` fraction bits still carries its
            // leading one at bit `mbits`, which adds 1 to the exponent field, hence the
            // `- 1`; a carry out of the fraction bumps the exponent, as it should. (For an
            // f32 subnormal, which is only possible here for bf16, the exponent field is
            // 0 and there is no leading one: the sum is the bf16 subnormal.)
            (((e + bias - 1) as u32) << mbits) + round_shift_rne(sig, 23 - mbits)
        } else {
            // Subnormal in the target: the encoding is the value in units of the smallest
            // subnormal, 2^(1 - bias - mbits). Rounding up to `1 << mbits` is the smallest
            // normal, which is also its encoding.
            let shift = (1 - bias - mbits as i32) - (e - 23);
            round_shift_rne(sig, shift as u32)
        }
    }

    /// Decode a magnitude `mag` (sign cleared, finite) of a format with `ebits`/`mbits` into
    /// f32 bits. Exact.
    #[inline(always)]
    const fn decode_mag(mag: u32, ebits: u32, mbits: u32) -> u32 {
        let bias = (1i32 << (ebits - 1)) - 1;
        let ef = (mag >> mbits) as i32;
        let m = mag & ((1u32 << mbits) - 1);
        if ef == 0 {
            if m == 0 {
                return 0;
            }
            // m * 2^(1 - bias - mbits); leading one of m at bit p.
            let p = 31 - m.leading_zeros();
            let e = p as i32 + 1 - bias - mbits as i32;
            (((e + 127) as u32) << 23) | ((m << (23 - p)) & 0x007f_ffff)
        } else {
            (((ef - bias + 127) as u32) << 23) | (m << (23 - mbits))
        }
    }

    /// IEEE binary16 bits to f32 (exact).
    #[inline(always)]
    pub fn f16_to_f32(bits: u16) -> f32 {
        let b = bits as u32;
        let sign = (b & 0x8000) << 16;
        let mag = b & 0x7fff;
        let out = if mag >= 0x7c00 {
            // inf (mantissa 0) or NaN (payload kept, so it stays NaN)
            0x7f80_0000 | ((mag & 0x03ff) << 13)
        } else {
            decode_mag(mag, 5, 10)
        };
        f32::from_bits(sign | out)
    }

    /// f32 to IEEE binary16 bits: round to nearest even, overflow to ±inf, NaN to a quiet NaN
    /// with the input's sign.
    #[inline(always)]
    pub fn f32_to_f16(x: f32) -> u16 {
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let abs = b & 0x7fff_ffff;
        if abs > 0x7f80_0000 {
            return sign | 0x7e00 | ((abs >> 13) & 0x03ff) as u16;
        }
        let m = encode_mag(abs, 5, 10);
        sign | if m >= 0x7c00 { 0x7c00 } else { m as u16 }
    }

    /// bfloat16 bits to f32 (exact: the top half of an f32).
    #[inline(always)]
    pub fn bf16_to_f32(bits: u16) -> f32 {
        f32::from_bits((bits as u32) << 16)
    }

    /// f32 to bfloat16 bits: round to nearest even, overflow to ±inf, NaN to a quiet NaN with
    /// the input's sign.
    #[inline(always)]
    pub fn f32_to_bf16(x: f32) -> u16 {
        let b = x.to_bits();
        if (b & 0x7fff_ffff) > 0x7f80_0000 {
            return ((b >> 16) as u16) | 0x0040;
        }
        // Round the whole word, sign included: the sign sits above the exponent, a carry
        // out of the fraction bumps the exponent, and the largest finite rounds up to
        // exactly the infinity encoding; f32 subnormals become bf16 subnormals.
        round_shift_rne(b, 16) as u16
    }

    /// OCP FP8 E4M3 bits to f32 (exact). `S.1111.111` is NaN; there is no infinity.
    #[inline(always)]
    pub fn e4m3_to_f32(bits: u8) -> f32 {
        let b = bits as u32;
        let sign = (b & 0x80) << 24;
        let mag = b & 0x7f;
        let out = if mag == 0x7f {
            0x7fc0_0000
        } else {
            decode_mag(mag, 4, 3)
        };
        f32::from_bits(sign | out)
    }

    /// f32 to OCP FP8 E4M3 bits: round to nearest even, saturate to ±448 on overflow and for
    /// ±inf, NaN to `0x7F`.
    #[inline(always)]
    pub fn f32_to_e4m3(x: f32) -> u8 {
        let b = x.to_bits();
        let abs = b & 0x7fff_ffff;
        if abs > 0x7f80_0000 {
            return 0x7f;
        }
        let sign = ((b >> 24) & 0x80) as u8;
        let m = encode_mag(abs, 4, 3);
        sign | if m > 0x7e { 0x7e } else { m as u8 }
    }

    /// OCP FP8 E5M2 bits to f32 (exact): an E5M2 is the top byte of an f16.
    #[inline(always)]
    pub fn e5m2_to_f32(bits: u8) -> f32 {
        f16_to_f32((bits as u16) << 8)
    }

    /// f32 to OCP FP8 E5M2 bits: round to nearest even, saturate to ±57344 on overflow and for
    /// ±inf (satfinite), NaN to `0x7F`.
    #[inline(always)]
    pub fn f32_to_e5m2(x: f32) -> u8 {
        let b = x.to_bits();
        let abs = b & 0x7fff_ffff;
        if abs > 0x7f80_0000 {
            return 0x7f;
        }
        let sign = ((b >> 24) & 0x80) as u8;
        let m = encode_mag(abs, 5, 2);
        sign | if m > 0x7b { 0x7b } else { m as u8 }
    }
}

// ---------------------------------------------------------------------------------------
// The API: soft on the host, PTX `cvt` on the GPU; both give the same bits.
// ---------------------------------------------------------------------------------------

/// IEEE binary16 bits to f32 (exact).
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        ptx::f16_to_f32(bits)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        soft::f16_to_f32(bits)
    }
}

/// f32 to IEEE binary16 bits: round to nearest even, overflow to ±inf, NaN to a quiet NaN.
#[inline(always)]
pub fn f32_to_f16(x: f32) -> u16 {
    #[cfg(target_arch = "nvptx64")]
    {
        ptx::f32_to_f16(x)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        soft::f32_to_f16(x)
    }
}

/// bfloat16 bits to f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        ptx::bf16_to_f32(bits)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        soft::bf16_to_f32(bits)
    }
}

/// f32 to bfloat16 bits: round to nearest even, overflow to ±inf, NaN to a quiet NaN.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    #[cfg(target_arch = "nvptx64")]
    {
        ptx::f32_to_bf16(x)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        soft::f32_to_bf16(x)
    }
}

/// OCP FP8 E4M3 bits to f32 (exact; `S.1111.111` decodes to NaN).
#[inline(always)]
pub fn e4m3_to_f32(bits: u8) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        ptx::e4m3_to_f32(bits)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        soft::e4m3_to_f32(bits)
    }
}

/// f32 to OCP FP8 E4M3 bits: round to nearest even, saturate to ±448 on overflow and
/// for ±inf, NaN to `0x7F`.
#[inline(always)]
pub fn f32_to_e4m3(x: f32) -> u8 {
    #[cfg(target_arch = "nvptx64")]
    {
        ptx::f32_to_e4m3(x)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        soft::f32_to_e4m3(x)
    }
}

/// OCP FP8 E5M2 bits to f32 (exact; inf and NaN decode to inf and NaN).
#[inline(always)]
pub fn e5m2_to_f32(bits: u8) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        ptx::e5m2_to_f32(bits)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        soft::e5m2_to_f32(bits)
    }
}

/// f32 to OCP FP8 E5M2 bits: round to nearest even, saturate to ±57344 on overflow and
/// for ±inf (satfinite), NaN to `0x7F`.
#[inline(always)]
pub fn f32_to_e5m2(x: f32) -> u8 {
    #[cfg(target_arch = "nvptx64")]
    {
        ptx::f32_to_e5m2(x)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        soft::f32_to_e5m2(x)
    }
}

// ---------------------------------------------------------------------------------------
// GPU: PTX `cvt` (sm_90). Each asm block is `pure, nomem, nostack`, so unused conversions
// are removed and repeated ones shared. f16 values live in `.b16` registers (`reg16`).
// ---------------------------------------------------------------------------------------

#[cfg(target_arch = "nvptx64")]
mod ptx {
    use core::arch::asm;

    /// IEEE binary16 bits to f32 (exact): `cvt.f32.f16`.
    #[inline(always)]
    pub fn f16_to_f32(bits: u16) -> f32 {
        let out: f32;
        // SAFETY: a register-only conversion; no memory, no side effects.
        unsafe {
            asm!(
                "cvt.f32.f16 {d}, {a};",
                d = out(reg32) out,
                a = in(reg16) bits,
                options(pure, nomem, nostack),
            );
        }
        out
    }

    /// f32 to IEEE binary16 bits: `cvt.rn.f16.f32` (RNE, overflow to ±inf).
    #[inline(always)]
    pub fn f32_to_f16(x: f32) -> u16 {
        let out: u16;
        // SAFETY: a register-only conversion; no memory, no side effects.
        unsafe {
            asm!(
                "cvt.rn.f16.f32 {d}, {a};",
                d = out(reg16) out,
                a = in(reg32) x,
                options(pure, nomem, nostack),
            );
        }
        out
    }

    /// bfloat16 bits to f32 (exact): a shift, as a bf16 is the top half of an f32 (what
    /// `cvt.f32.bf16` computes, but visible to the optimizer).
    #[inline(always)]
    pub fn bf16_to_f32(bits: u16) -> f32 {
        super::soft::bf16_to_f32(bits)
    }

    /// f32 to bfloat16 bits: `cvt.rn.bf16.f32` (RNE, overflow to ±inf).
    #[inline(always)]
    pub fn f32_to_bf16(x: f32) -> u16 {
        let out: u16;
        // SAFETY: a register-only conversion; no memory, no side effects.
        unsafe {
            asm!(
                "cvt.rn.bf16.f32 {d}, {a};",
                d = out(reg16) out,
                a = in(reg32) x,
                options(pure, nomem, nostack),
            );
        }
        out
    }

    /// OCP FP8 E4M3 bits to f32 (exact): `cvt.rn.f16x2.e4m3x2` (the byte in the low half of
    /// the source gives the low f16 of the result), then `cvt.f32.f16`.
    #[inline(always)]
    pub fn e4m3_to_f32(bits: u8) -> f32 {
        let out: f32;
        // SAFETY: register-only conversions; no memory, no side effects.
        unsafe {
            asm!(
                "{{",
                ".reg .b32 %cvt_h2;",
                ".reg .b16 %cvt_lo, %cvt_hi;",
                "cvt.rn.f16x2.e4m3x2 %cvt_h2, {a};",
                "mov.b32 {{%cvt_lo, %cvt_hi}}, %cvt_h2;",
                "cvt.f32.f16 {d}, %cvt_lo;",
                "}}",
                d = out(reg32) out,
                a = in(reg16) bits as u16,
                options(pure, nomem, nostack),
            );
        }
        out
    }

    /// f32 to OCP FP8 E4M3 bits: `cvt.rn.satfinite.e4m3x2.f32` (RNE, saturate to ±448, NaN to
    /// `0x7F`). The x2 form packs its first source in the upper byte: `x` goes to both, the
    /// lower byte is kept.
    #[inline(always)]
    pub fn f32_to_e4m3(x: f32) -> u8 {
        let out: u16;
        // SAFETY: a register-only conversion; no memory, no side effects.
        unsafe {
            asm!(
                "cvt.rn.satfinite.e4m3x2.f32 {d}, {a}, {a};",
                d = out(reg16) out,
                a = in(reg32) x,
                options(pure, nomem, nostack),
            );
        }
        out as u8
    }

    /// OCP FP8 E5M2 bits to f32 (exact): an E5M2 is the top byte of an f16, so a shift and
    /// `cvt.f32.f16` (same result as `cvt.rn.f16x2.e5m2x2`, one instruction less to schedule).
    #[inline(always)]
    pub fn e5m2_to_f32(bits: u8) -> f32 {
        f16_to_f32((bits as u16) << 8)
    }

    /// f32 to OCP FP8 E5M2 bits: `cvt.rn.satfinite.e5m2x2.f32` (RNE, saturate to ±57344, inf
    /// included, NaN to `0x7F`). Same packing as [`f32_to_e4m3`].
    #[inline(always)]
    pub fn f32_to_e5m2(x: f32) -> u8 {
        let out: u16;
        // SAFETY: a register-only conversion; no memory, no side effects.
        unsafe {
            asm!(
                "cvt.rn.satfinite.e5m2x2.f32 {d}, {a}, {a};",
                d = out(reg16) out,
                a = in(reg32) x,
                options(pure, nomem, nostack),
            );
        }
        out as u8
    }
}
