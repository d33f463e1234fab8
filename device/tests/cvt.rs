//! Tests of `oxccl_device::arch::cvt` on the host: f16/bf16 against the `half` crate, fp8
//! against independent references computed in f64 (a closed formula for decoding, a
//! brute-force nearest-value search for encoding).

use oxccl_device::arch::cvt::*;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------

/// Same f32, bit for bit, or both NaN (any NaN is acceptable as a decoded NaN).
fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn is_f16_nan(b: u16) -> bool {
    (b & 0x7c00) == 0x7c00 && (b & 0x03ff) != 0
}

fn is_bf16_nan(b: u16) -> bool {
    (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0
}

/// Same 16-bit encoding, or both NaN encodings.
fn same_16(a: u16, b: u16, is_nan: fn(u16) -> bool) -> bool {
    a == b || (is_nan(a) && is_nan(b))
}

/// Signed f32 neighbours of `x` (finite, not NaN): `x`, one ulp down and up (through zero).
fn with_neighbours(x: f32) -> [f32; 3] {
    [x, next_down(x), next_up(x)]
}

fn next_up(x: f32) -> f32 {
    let b = x.to_bits();
    if x.is_nan() || x == f32::INFINITY {
        x
    } else if x == 0.0 {
        f32::from_bits(1)
    } else if b >> 31 == 0 {
        f32::from_bits(b + 1)
    } else {
        f32::from_bits(b - 1)
    }
}

fn next_down(x: f32) -> f32 {
    -next_up(-x)
}

/// A cheap deterministic generator (SplitMix64) for dense sweeps.
struct SplitMix(u64);
impl SplitMix {
    fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u32
    }
}

// ---------------------------------------------------------------------------------------
// f16 / bf16
// ---------------------------------------------------------------------------------------

fn check_f16_encode(x: f32) {
    let got = f32_to_f16(x);
    let want = half::f16::from_f32(x).to_bits();
    assert!(
        same_16(got, want, is_f16_nan),
        "f32_to_f16({x:e} = {:#010x}) = {got:#06x}, half says {want:#06x}",
        x.to_bits()
    );
    assert_eq!(got, soft::f32_to_f16(x));
    if x.is_nan() {
        assert!(is_f16_nan(got));
        assert_eq!(got >> 15, (x.to_bits() >> 31) as u16, "NaN keeps its sign");
    }
}

fn check_bf16_encode(x: f32) {
    let got = f32_to_bf16(x);
    let want = half::bf16::from_f32(x).to_bits();
    assert!(
        same_16(got, want, is_bf16_nan),
        "f32_to_bf16({x:e} = {:#010x}) = {got:#06x}, half says {want:#06x}",
        x.to_bits()
    );
    assert_eq!(got, soft::f32_to_bf16(x));
    if x.is_nan() {
        assert!(is_bf16_nan(got));
        assert_eq!(got >> 15, (x.to_bits() >> 31) as u16, "NaN keeps its sign");
    }
}

#[test]
fn f16_decode_exhaustive() {
    for b in 0..=u16::MAX {
        let got = f16_to_f32(b);
        let want = half::f16::from_bits(b).to_f32();
        assert!(
            same_f32(got, want),
            "f16_to_f32({b:#06x}) = {got:e}, half says {want:e}"
        );
        assert!(same_f32(got, soft::f16_to_f32(b)));
        assert_eq!(got.is_nan(), is_f16_nan(b));
    }
}

#[test]
fn bf16_decode_exhaustive() {
    for b in 0..=u16::MAX {
        let got = bf16_to_f32(b);
        let want = half::bf16::from_bits(b).to_f32();
        assert!(
            same_f32(got, want),
            "bf16_to_f32({b:#06x}) = {got:e}, half says {want:e}"
        );
        assert!(same_f32(got, soft::bf16_to_f32(b)));
        assert_eq!(got.is_nan(), is_bf16_nan(b));
    }
}

/// Every finite 16-bit value, the midpoints between consecutive ones (and the one past the
/// max finite: the overflow threshold), each ± one f32 ulp, both signs.
fn check_16_targeted(decode: fn(u16) -> f32, max_finite: u16, check: fn(f32)) {
    for b in 0..=max_finite {
        let v = decode(b) as f64;
        // the next value up; past the max finite, the next step of the same binade
        let next = if b < max_finite {
            decode(b + 1) as f64
        } else {
            v + (v - decode(b - 1) as f64)
        };
        let mid = ((v + next) / 2.0) as f32;
        assert_eq!(mid as f64, (v + next) / 2.0, "midpoint exact in f32");
        for x in with_neighbours(decode(b)).into_iter().chain(with_neighbours(mid)) {
            check(x);
            check(-x);
        }
    }
    for x in [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffbf_ffff),
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::from_bits(0x007f_ffff),
    ] {
        check(x);
    }
}

#[test]
fn f16_encode_targeted() {
    check_16_targeted(f16_to_f32, 0x7bff, check_f16_encode);
    assert_eq!(f32_to_f16(65504.0), 0x7bff);
    assert_eq!(f32_to_f16(65519.996), 0x7bff);
    assert_eq!(f32_to_f16(65520.0), 0x7c00);
    assert_eq!(f32_to_f16(-65520.0), 0xfc00);
    assert_eq!(f32_to_f16(f32::powi(2.0, -25)), 0x0000); // tie to even: 0
    assert_eq!(f32_to_f16(next_up(f32::powi(2.0, -25))), 0x0001);
    assert_eq!(f32_to_f16(-f32::powi(2.0, -26)), 0x8000);
    assert_eq!(f32_to_f16(3.0 * f32::powi(2.0, -25)), 0x0002); // 1.5 ulp: tie to even
    assert_eq!(f32_to_f16(next_down(f32::powi(2.0, -14))), 0x0400); // rounds up to min normal
}

#[test]
fn bf16_encode_targeted() {
    check_16_targeted(bf16_to_f32, 0x7f7f, check_bf16_encode);
    assert_eq!(f32_to_bf16(f32::MAX), 0x7f80); // rounds past the max finite: inf
    assert_eq!(f32_to_bf16(f32::from_bits(0x7f7f_7fff)), 0x7f7f);
    assert_eq!(f32_to_bf16(f32::from_bits(0x7f7f_8000)), 0x7f80); // tie, odd: up to inf
    assert_eq!(f32_to_bf16(f32::from_bits(0x0000_8000)), 0x0000); // tie, even: down
    assert_eq!(f32_to_bf16(f32::from_bits(0x0001_8000)), 0x0002); // tie, odd: up
    assert_eq!(f32_to_bf16(f32::from_bits(0x007f_ffff)), 0x0080); // up to min normal
}

#[test]
fn f16_bf16_encode_sweep() {
    // A deterministic sweep of 1M random bit patterns, on top of the proptest cases.
    let mut rng = SplitMix(0x0123_4567_89ab_cdef);
    for _ in 0..1_000_000 {
        let x = f32::from_bits(rng.next_u32());
        check_f16_encode(x);
        check_bf16_encode(x);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn f16_bf16_encode_prop(bits in any::<u32>()) {
        let x = f32::from_bits(bits);
        check_f16_encode(x);
        check_bf16_encode(x);
    }

    #[test]
    fn fp8_encode_prop(bits in any::<u32>()) {
        let x = f32::from_bits(bits);
        check_fp8_encode(E4M3, x);
        check_fp8_encode(E5M2, x);
    }

    /// Values near the fp8 ranges, where random bit patterns rarely land.
    #[test]
    fn fp8_encode_prop_in_range(m in -70000.0f64..70000.0, scale in -20i32..2) {
        let x = (m * 2f64.powi(scale)) as f32;
        check_fp8_encode(E4M3, x);
        check_fp8_encode(E5M2, x);
    }
}

// ---------------------------------------------------------------------------------------
// fp8
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Fp8 {
    name: &'static str,
    ebits: u32,
    mbits: u32,
    /// E4M3: only S.1111.111 is NaN, no inf; E5M2: IEEE-like.
    ieee_specials: bool,
    max_finite: u8,
    max_value: f64,
    decode: fn(u8) -> f32,
    encode: fn(f32) -> u8,
    soft_decode: fn(u8) -> f32,
    soft_encode: fn(f32) -> u8,
}

const E4M3: Fp8 = Fp8 {
    name: "e4m3",
    ebits: 4,
    mbits: 3,
    ieee_specials: false,
    max_finite: 0x7e,
    max_value: 448.0,
    decode: e4m3_to_f32,
    encode: f32_to_e4m3,
    soft_decode: soft::e4m3_to_f32,
    soft_encode: soft::f32_to_e4m3,
};

const E5M2: Fp8 = Fp8 {
    name: "e5m2",
    ebits: 5,
    mbits: 2,
    ieee_specials: true,
    max_finite: 0x7b,
    max_value: 57344.0,
    decode: e5m2_to_f32,
    encode: f32_to_e5m2,
    soft_decode: soft::e5m2_to_f32,
    soft_encode: soft::f32_to_e5m2,
};

/// Independent decoding in f64: sign * 2^(e - bias) * (1 + m / 2^mbits), or
/// sign * 2^(1 - bias) * (m / 2^mbits) for e = 0.
fn fp8_reference_decode(f: Fp8, b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> f.mbits) & ((1 << f.ebits) - 1) as u8) as i32;
    let m = (b & ((1 << f.mbits) - 1) as u8) as f64;
    let bias = (1 << (f.ebits - 1)) - 1;
    let emax = (1 << f.ebits) - 1;
    let frac = m / (1u32 << f.mbits) as f64;
    if f.ieee_specials && e == emax {
        return if m == 0.0 { sign * f64::INFINITY } else { f64::NAN };
    }
    if !f.ieee_specials && e == emax && m == ((1 << f.mbits) - 1) as f64 {
        return f64::NAN;
    }
    if e == 0 {
        sign * 2f64.powi(1 - bias) * frac
    } else {
        sign * 2f64.powi(e - bias) * (1.0 + frac)
    }
}

fn fp8_is_finite(f: Fp8, b: u8) -> bool {
    fp8_reference_decode(f, b).is_finite()
}

/// Brute force: the finite fp8 value nearest to `x` in f64, ties to the even encoding,
/// the sign of `x` kept (also for zeros); saturation is implied (anything beyond the max
/// finite is nearest to it), ±inf gives ±max, NaN gives 0x7F.
fn fp8_reference_encode(f: Fp8, x: f32) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = ((x.to_bits() >> 31) as u8) << 7;
    if x.is_infinite() {
        return sign | f.max_finite;
    }
    let a = (x as f64).abs();
    if a >= f.max_value {
        // Saturation: nothing finite is nearer. (Also avoids comparing distances that f64
        // cannot tell apart for huge `a`.) Below it, the two candidates around `a` are within
        // a factor 2 of `a`, so their distances are exact (Sterbenz) and ties are real ties.
        return sign | f.max_finite;
    }
    let mut best = 0u8;
    let mut best_d = f64::INFINITY;
    for b in 0..=f.max_finite {
        let d = (fp8_reference_decode(f, b) - a).abs();
        if d < best_d || (d == best_d && b & 1 == 0) {
            best = b;
            best_d = d;
        }
    }
    sign | best
}

fn check_fp8_encode(f: Fp8, x: f32) {
    let got = (f.encode)(x);
    let want = fp8_reference_encode(f, x);
    assert_eq!(
        got,
        want,
        "f32_to_{}({x:e} = {:#010x}) = {got:#04x}, want {want:#04x}",
        f.name,
        x.to_bits()
    );
    assert_eq!(got, (f.soft_encode)(x));
}

fn fp8_decode_exhaustive(f: Fp8) {
    let mut nans = 0;
    for b in 0..=u8::MAX {
        let got = (f.decode)(b);
        let want = fp8_reference_decode(f, b);
        assert!(same_f32(got, (f.soft_decode)(b)));
        if want.is_nan() {
            nans += 1;
            assert!(got.is_nan(), "{}_to_f32({b:#04x}) = {got:e}, want NaN", f.name);
        } else {
            assert_eq!(
                got.to_bits(),
                (want as f32).to_bits(),
                "{}_to_f32({b:#04x}) = {got:e}, want {want:e}",
                f.name
            );
            assert_eq!(got as f64, want, "exact");
        }
    }
    assert_eq!(nans, if f.ieee_specials { 6 } else { 2 });
    assert_eq!((f.decode)(f.max_finite) as f64, f.max_value);
}

#[test]
fn e4m3_decode_exhaustive() {
    fp8_decode_exhaustive(E4M3);
    assert_eq!(e4m3_to_f32(0x01), f32::powi(2.0, -9)); // min subnormal
    assert_eq!(e4m3_to_f32(0x08), f32::powi(2.0, -6)); // min normal
    assert!(e4m3_to_f32(0x7f).is_nan() && e4m3_to_f32(0xff).is_nan());
    assert_eq!(e4m3_to_f32(0x78), 256.0); // S.1111.000 is finite in E4M3
}

#[test]
fn e5m2_decode_exhaustive() {
    fp8_decode_exhaustive(E5M2);
    assert_eq!(e5m2_to_f32(0x01), f32::powi(2.0, -16)); // min subnormal
    assert_eq!(e5m2_to_f32(0x04), f32::powi(2.0, -14)); // min normal
    assert_eq!(e5m2_to_f32(0x7c), f32::INFINITY);
    assert_eq!(e5m2_to_f32(0xfc), f32::NEG_INFINITY);
}

/// All decoded values, all midpoints between consecutive finite values (and past the max
/// finite), each ± one f32 ulp, both signs; plus the specials.
fn fp8_encode_targeted(f: Fp8) {
    for b in 0..=f.max_finite {
        let v = (f.decode)(b) as f64;
        let next = if b < f.max_finite {
            (f.decode)(b + 1) as f64
        } else {
            v + (v - (f.decode)(b - 1) as f64)
        };
        let mid = ((v + next) / 2.0) as f32;
        assert_eq!(mid as f64, (v + next) / 2.0);
        for x in with_neighbours(v as f32).into_iter().chain(with_neighbours(mid)) {
            check_fp8_encode(f, x);
            check_fp8_encode(f, -x);
        }
    }
    for x in [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffff_ffff),
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        1e30,
        -1e30,
    ] {
        check_fp8_encode(f, x);
    }
}

#[test]
fn e4m3_encode_targeted() {
    fp8_encode_targeted(E4M3);
    assert_eq!(f32_to_e4m3(448.0), 0x7e);
    assert_eq!(f32_to_e4m3(464.0), 0x7e);
    assert_eq!(f32_to_e4m3(1e9), 0x7e);
    assert_eq!(f32_to_e4m3(-1e9), 0xfe);
    assert_eq!(f32_to_e4m3(f32::INFINITY), 0x7e);
    assert_eq!(f32_to_e4m3(f32::NEG_INFINITY), 0xfe);
    assert_eq!(f32_to_e4m3(f32::NAN), 0x7f);
    assert_eq!(f32_to_e4m3(-f32::NAN), 0x7f);
    assert_eq!(f32_to_e4m3(f32::powi(2.0, -10)), 0x00); // half the min subnormal: tie to 0
    assert_eq!(f32_to_e4m3(-f32::powi(2.0, -10)), 0x80);
    assert_eq!(f32_to_e4m3(next_up(f32::powi(2.0, -10))), 0x01);
    assert_eq!(f32_to_e4m3(next_down(f32::powi(2.0, -6))), 0x08); // up to min normal
}

#[test]
fn e5m2_encode_targeted() {
    fp8_encode_targeted(E5M2);
    assert_eq!(f32_to_e5m2(57344.0), 0x7b);
    assert_eq!(f32_to_e5m2(61440.0), 0x7b);
    assert_eq!(f32_to_e5m2(1e9), 0x7b);
    assert_eq!(f32_to_e5m2(f32::INFINITY), 0x7b); // satfinite: inf saturates too
    assert_eq!(f32_to_e5m2(f32::NEG_INFINITY), 0xfb);
    assert_eq!(f32_to_e5m2(f32::NAN), 0x7f);
    assert_eq!(f32_to_e5m2(-f32::NAN), 0x7f);
    assert_eq!(f32_to_e5m2(f32::powi(2.0, -17)), 0x00);
    assert_eq!(f32_to_e5m2(next_up(f32::powi(2.0, -17))), 0x01);
    assert_eq!(f32_to_e5m2(next_down(f32::powi(2.0, -14))), 0x04);
}

#[test]
fn fp8_encode_sweep() {
    let mut rng = SplitMix(0xfeed_f00d_dead_beef);
    for _ in 0..200_000 {
        let bits = rng.next_u32();
        // half the cases in the fp8 ranges: exponent field 100..=148 (2^-27 .. 2^21)
        let bits = if bits & 1 == 0 {
            bits
        } else {
            (bits & 0x807f_ffff) | ((100 + (bits >> 23) % 49) << 23)
        };
        let x = f32::from_bits(bits);
        check_fp8_encode(E4M3, x);
        check_fp8_encode(E5M2, x);
    }
}

// ---------------------------------------------------------------------------------------
// round trips
// ---------------------------------------------------------------------------------------

#[test]
fn round_trips() {
    for b in 0..=u16::MAX {
        if !is_f16_nan(b) {
            assert_eq!(f32_to_f16(f16_to_f32(b)), b, "f16 {b:#06x}");
        }
        if !is_bf16_nan(b) {
            assert_eq!(f32_to_bf16(bf16_to_f32(b)), b, "bf16 {b:#06x}");
        }
    }
    for f in [E4M3, E5M2] {
        for b in 0..=u8::MAX {
            if fp8_is_finite(f, b) {
                let v = (f.decode)(b);
                assert_eq!((f.encode)(v), b, "{} {b:#04x}", f.name);
                assert_eq!((f.decode)((f.encode)(v)).to_bits(), v.to_bits());
            }
        }
    }
}
