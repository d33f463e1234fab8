//! Reduction operators against an f64 (floats) or i128 (integers) reference, on random
//! inputs, for every data type; and the 16-byte vector lane helpers.

use oxccl_device::ops::elem::{get_lane, lanes, set_lane};
use oxccl_device::ops::{Avg, Bf16, Elem, Max, Min, PreMulSum, Prod, Reduce, Sum, F16, F8E4M3, F8E5M2};
use proptest::prelude::*;

fn fold<T: Elem, O: Reduce<T>>(op: O, xs: &[T]) -> T {
    let mut acc = op.first(xs[0]);
    for &x in &xs[1..] {
        acc = op.combine(acc, x);
    }
    op.finish(acc)
}

/// Float types: value of an element and rounding of an f64 through the type's own rounding.
trait FloatElem: Elem {
    fn val(self) -> f64;
    fn round(x: f64) -> Self;
    /// Relative spacing of the format (2^-mantissa bits).
    const EPS: f64;
    /// Largest finite value (fp8 results saturate to it).
    const MAX: f64;
    /// Smallest subnormal (absolute rounding error near zero is up to half of it).
    const MIN_SUB: f64;
}

macro_rules! float_elem {
    ($t:ty, $eps:expr, $max:expr, $sub:expr, |$s:ident| $val:expr, |$x:ident| $round:expr) => {
        impl FloatElem for $t {
            fn val(self) -> f64 {
                let $s = self;
                $val
            }
            fn round($x: f64) -> Self {
                $round
            }
            const EPS: f64 = $eps;
            const MAX: f64 = $max;
            const MIN_SUB: f64 = $sub;
        }
    };
}
float_elem!(f32, f32::EPSILON as f64, f64::MAX, 1.0e-45, |s| s as f64, |x| x
    as f32);
float_elem!(f64, f64::EPSILON, f64::MAX, 5.0e-324, |s| s, |x| x);
float_elem!(
    F16,
    1.0 / 1024.0,
    f64::MAX,
    5.960464477539063e-8,
    |s| half::f16::from_bits(s.0).to_f64(),
    |x| F16(half::f16::from_f64(x).to_bits())
);
float_elem!(
    Bf16,
    1.0 / 128.0,
    f64::MAX,
    9.2e-41,
    |s| half::bf16::from_bits(s.0).to_f64(),
    |x| Bf16(half::bf16::from_f64(x).to_bits())
);
float_elem!(
    F8E4M3,
    1.0 / 8.0,
    448.0,
    0.001953125,
    |s| oxccl_device::arch::cvt::soft::e4m3_to_f32(s.0) as f64,
    |x| F8E4M3(oxccl_device::arch::cvt::soft::f32_to_e4m3(x as f32))
);
float_elem!(
    F8E5M2,
    1.0 / 4.0,
    57344.0,
    1.52587890625e-5,
    |s| oxccl_device::arch::cvt::soft::e5m2_to_f32(s.0) as f64,
    |x| F8E5M2(oxccl_device::arch::cvt::soft::f32_to_e5m2(x as f32))
);

/// Checks every operator for one float type on `raw` inputs in [-4, 4).
fn check_float<T: FloatElem>(raw: &[f64]) {
    let xs: Vec<T> = raw.iter().map(|&x| T::round(x)).collect();
    let v: Vec<f64> = xs.iter().map(|x| x.val()).collect();
    let n = v.len() as f64;
    let mag: f64 = v.iter().map(|x| x.abs()).sum();
    let acc_eps = if T::EPS < 1e-10 {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    };
    let close = |got: T, want: f64, mag: f64| {
        let want = want.clamp(-T::MAX, T::MAX);
        let tol = T::EPS * want.abs() + (n + 1.0) * acc_eps * mag + T::MIN_SUB;
        let g = got.val();
        assert!(
            (g - want).abs() <= tol.max(T::EPS * 1e-3),
            "got {g} want {want} (tol {tol}) inputs {v:?}"
        );
    };
    close(fold(Sum, &xs), v.iter().sum(), mag);
    close(
        fold(
            Avg {
                nranks: xs.len() as u32,
            },
            &xs,
        ),
        v.iter().sum::<f64>() / n,
        mag / n,
    );
    let s = T::round(1.5);
    close(
        fold(PreMulSum { scalar: s.to_acc() }, &xs),
        v.iter().map(|x| 1.5 * x).sum(),
        1.5 * mag,
    );
    let p: f64 = v.iter().product();
    close(fold(Prod, &xs), p, p.abs());
    assert_eq!(
        fold(Min, &xs).val(),
        v.iter().cloned().fold(f64::INFINITY, f64::min)
    );
    assert_eq!(
        fold(Max, &xs).val(),
        v.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
    );
}

macro_rules! check_int {
    ($t:ty, $xs:expr) => {{
        let xs: Vec<$t> = $xs.iter().map(|&x| x as $t).collect();
        let w = |v: i128| v as $t; // wrap to the type's width
        let sum: i128 = xs.iter().map(|&x| x as i128).sum();
        assert_eq!(fold(Sum, &xs), w(sum));
        assert_eq!(
            fold(
                Avg {
                    nranks: xs.len() as u32
                },
                &xs
            ),
            ((w(sum) as i128) / xs.len() as i128) as $t
        );
        assert_eq!(
            fold(Prod, &xs),
            xs.iter().fold(1 as $t, |a, &x| a.wrapping_mul(x))
        );
        assert_eq!(fold(Min, &xs), *xs.iter().min().unwrap());
        assert_eq!(fold(Max, &xs), *xs.iter().max().unwrap());
        let s: $t = 3 as $t;
        let pm: i128 = xs.iter().map(|&x| x.wrapping_mul(s) as i128).sum();
        assert_eq!(fold(PreMulSum { scalar: s }, &xs), w(pm));
    }};
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn float_ops_match_f64(raw in prop::collection::vec(-4.0f64..4.0, 1..9)) {
        check_float::<f32>(&raw);
        check_float::<f64>(&raw);
        check_float::<F16>(&raw);
        check_float::<Bf16>(&raw);
        check_float::<F8E4M3>(&raw);
        check_float::<F8E5M2>(&raw);
    }

    #[test]
    fn int_ops_match_wrapping_reference(xs in prop::collection::vec(any::<i64>(), 1..9)) {
        check_int!(i8, xs);
        check_int!(u8, xs);
        check_int!(i32, xs);
        check_int!(u32, xs);
        check_int!(i64, xs);
        check_int!(u64, xs);
    }

    #[test]
    fn lanes_round_trip(words in any::<[u32; 4]>(), x in any::<u16>(), i in 0usize..8) {
        let mut v = words;
        set_lane::<F16>(&mut v, i, F16(x));
        prop_assert_eq!(get_lane::<F16>(&v, i), F16(x));
        for j in (0..lanes::<F16>()).filter(|&j| j != i) {
            prop_assert_eq!(get_lane::<F16>(&v, j), get_lane::<F16>(&words, j));
        }
        let mut v = words;
        set_lane::<u8>(&mut v, 2 * i, x as u8);
        prop_assert_eq!(get_lane::<u8>(&v, 2 * i), x as u8);
        prop_assert_eq!(get_lane::<u64>(&words, i % 2), (words[2 * (i % 2)] as u64) | ((words[2 * (i % 2) + 1] as u64) << 32));
    }
}

/// Saturation of the fp8 formats when a reduction overflows them (documented behavior).
#[test]
fn fp8_sum_saturates() {
    let xs = [F8E4M3(0x7E), F8E4M3(0x7E)]; // 448 + 448
    assert_eq!(fold(Sum, &xs).0, 0x7E);
    let ys = [F8E5M2(0x7B), F8E5M2(0x7B)]; // 57344 + 57344
    assert_eq!(fold(Sum, &ys).0, 0x7B);
}
