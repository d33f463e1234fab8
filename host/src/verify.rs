//! Host reference for collectives: random inputs per data type, the expected result computed
//! independently (floats in f64 from exactly decoded inputs, integers in i128 wrapped to the
//! type's width), and an element-by-element comparison with a tolerance derived from the
//! accumulation precision and the output type's rounding.

use oxccl_device::abi::{DataType, RedOp};
use oxccl_device::arch::cvt::soft;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::coll::Op;

/// Value of one element, exactly, as f64 (floats) — integers are handled separately.
pub fn decode_f64(dt: DataType, bits: u64) -> f64 {
    match dt {
        DataType::F16 => soft::f16_to_f32(bits as u16) as f64,
        DataType::Bf16 => soft::bf16_to_f32(bits as u16) as f64,
        DataType::F8E4M3 => soft::e4m3_to_f32(bits as u8) as f64,
        DataType::F8E5M2 => soft::e5m2_to_f32(bits as u8) as f64,
        DataType::F32 => f32::from_bits(bits as u32) as f64,
        DataType::F64 => f64::from_bits(bits),
        _ => int_value(dt, bits) as f64,
    }
}

/// Round `x` to `dt` and return its bits (low bytes of the u64).
pub fn encode_f64(dt: DataType, x: f64) -> u64 {
    match dt {
        DataType::F16 => soft::f32_to_f16(x as f32) as u64,
        DataType::Bf16 => soft::f32_to_bf16(x as f32) as u64,
        DataType::F8E4M3 => soft::f32_to_e4m3(x as f32) as u64,
        DataType::F8E5M2 => soft::f32_to_e5m2(x as f32) as u64,
        DataType::F32 => (x as f32).to_bits() as u64,
        DataType::F64 => x.to_bits(),
        _ => (x as i128 as u128 & mask(dt)) as u64,
    }
}

fn mask(dt: DataType) -> u128 {
    (1u128 << (8 * dt.size())) - 1
}

fn signed(dt: DataType) -> bool {
    matches!(dt, DataType::I8 | DataType::I32 | DataType::I64)
}

/// An integer element's value (sign-extended for signed types).
pub fn int_value(dt: DataType, bits: u64) -> i128 {
    let w = 8 * dt.size() as u32;
    let b = bits as u128 & mask(dt);
    if signed(dt) && (b >> (w - 1)) & 1 == 1 {
        b as i128 - (1i128 << w)
    } else {
        b as i128
    }
}

/// Wrap an integer to the type's width.
fn wrap(dt: DataType, v: i128) -> i128 {
    int_value(dt, (v as u128 & mask(dt)) as u64)
}

/// Element `i` of a byte buffer as raw bits.
pub fn get_bits(dt: DataType, buf: &[u8], i: usize) -> u64 {
    let s = dt.size();
    let mut b = [0u8; 8];
    b[..s].copy_from_slice(&buf[i * s..(i + 1) * s]);
    u64::from_le_bytes(b)
}

fn put_bits(dt: DataType, buf: &mut [u8], i: usize, v: u64) {
    let s = dt.size();
    buf[i * s..(i + 1) * s].copy_from_slice(&v.to_le_bytes()[..s]);
}

/// Random input for one rank: floats in a range suited to the operator (products near 1,
/// sums of moderate values), integers over their full range.
pub fn gen_input(dt: DataType, red: RedOp, count: usize, seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![0u8; count * dt.size()];
    for i in 0..count {
        let bits = if dt.is_float() {
            let x: f64 = match red {
                RedOp::Prod => {
                    let m: f64 = rng.random_range(0.5..1.5);
                    if rng.random::<bool>() {
                        -m
                    } else {
                        m
                    }
                }
                RedOp::Min | RedOp::Max => rng.random_range(-100.0..100.0),
                _ => rng.random_range(-2.0..2.0),
            };
            encode_f64(dt, x)
        } else {
            rng.random::<u64>() & mask(dt) as u64
        };
        put_bits(dt, &mut out, i, bits);
    }
    out
}

/// The PreMulSum scalar the checks use for `dt` (exactly representable in every type).
pub fn test_op(dt: DataType, red: RedOp) -> Op {
    match red {
        RedOp::PreMulSum if dt.is_float() => Op::premul_sum(dt, 1.5),
        RedOp::PreMulSum => Op::PreMulSum { scalar_bits: 3 },
        r => Op::from_red_op(r, dt),
    }
}

/// Mantissa bits of a float type, and of its accumulator.
fn precision(dt: DataType) -> (i32, i32) {
    match dt {
        DataType::F16 => (10, 23),
        DataType::Bf16 => (7, 23),
        DataType::F8E4M3 => (3, 23),
        DataType::F8E5M2 => (2, 23),
        DataType::F32 => (23, 23),
        _ => (52, 52),
    }
}

/// Largest finite value (fp8 results saturate to it).
fn max_finite(dt: DataType) -> f64 {
    match dt {
        DataType::F8E4M3 => 448.0,
        DataType::F8E5M2 => 57344.0,
        DataType::F16 => 65504.0,
        _ => f64::MAX,
    }
}

/// Smallest positive subnormal.
fn min_sub(dt: DataType) -> f64 {
    match dt {
        DataType::F16 => 2f64.powi(-24),
        DataType::Bf16 => 2f64.powi(-133),
        DataType::F8E4M3 => 2f64.powi(-9),
        DataType::F8E5M2 => 2f64.powi(-16),
        DataType::F32 => 2f64.powi(-149),
        _ => 0.0,
    }
}

/// The reference for one element of a reduction: the expected value of `op` over the ranks'
/// input elements, and whether a result is close enough to it (floats: within a tolerance
/// from the accumulation precision and the output rounding; integers: exactly).
#[derive(Clone, Copy, Debug)]
pub struct Reducer {
    dt: DataType,
    op: Op,
}

impl Reducer {
    /// The reference of `op` on elements of type `dt`.
    pub fn new(dt: DataType, op: Op) -> Self {
        Reducer { dt, op }
    }

    /// Whether `got` (an element's bits) is a correct reduction of `xs` (one input element's
    /// bits per rank, in rank order).
    pub fn accepts(&self, xs: &[u64], got: u64) -> bool {
        let (dt, op, n) = (self.dt, self.op, xs.len());
        let red = op.red_op();
        if dt.is_float() {
            let xs = xs.iter().map(|&b| decode_f64(dt, b));
            let s = match op {
                Op::PreMulSum { scalar_bits } => decode_f64(dt, scalar_bits),
                _ => 1.0,
            };
            let (want, mag) = match red {
                RedOp::Sum => xs.fold((0.0, 0.0), |(w, m), x| (w + x, m + x.abs())),
                RedOp::Avg => {
                    let (w, m) = xs.fold((0.0, 0.0), |(w, m), x| (w + x, m + x.abs()));
                    (w / n as f64, m / n as f64)
                }
                RedOp::PreMulSum => xs.fold((0.0, 0.0), |(w, m), x| (w + s * x, m + (s * x).abs())),
                RedOp::Prod => {
                    let p = xs.product::<f64>();
                    (p, p.abs())
                }
                RedOp::Min => (xs.fold(f64::INFINITY, f64::min), 0.0),
                RedOp::Max => (xs.fold(f64::NEG_INFINITY, f64::max), 0.0),
            };
            let want = want.clamp(-max_finite(dt), max_finite(dt));
            let g = decode_f64(dt, got);
            let (m_out, m_acc) = precision(dt);
            let tol =
                2f64.powi(-m_out) * want.abs() + (n as f64 + 1.0) * 2f64.powi(-m_acc) * mag + min_sub(dt);
            g.is_finite() && (g - want).abs() <= tol
        } else {
            let xs = xs.iter().map(|&b| int_value(dt, b));
            let s = match op {
                Op::PreMulSum { scalar_bits } => int_value(dt, scalar_bits),
                _ => 1,
            };
            let want = match red {
                RedOp::Sum => wrap(dt, xs.sum()),
                RedOp::Avg => wrap(dt, xs.sum()) / n as i128,
                RedOp::PreMulSum => wrap(dt, xs.map(|x| wrap(dt, s * x)).sum()),
                RedOp::Prod => xs.fold(1i128, |a, x| wrap(dt, a.wrapping_mul(x))),
                RedOp::Min => xs.min().unwrap_or(0),
                RedOp::Max => xs.max().unwrap_or(0),
            };
            int_value(dt, got) == want
        }
    }
}

/// Compare `out` with the reduction of `inputs` element by element. Returns the number of
/// elements checked, or a description of the first mismatches.
pub fn check_all_reduce(
    dt: DataType,
    op: Op,
    inputs: &[&[u8]],
    out: &[u8],
    count: usize,
) -> Result<usize, String> {
    check_reduction(dt, op, inputs, 0, out, 0, count)
}

/// [`check_all_reduce`] on many threads (large buffers).
pub fn check_all_reduce_par(
    dt: DataType,
    op: Op,
    inputs: &[&[u8]],
    out: &[u8],
    count: usize,
) -> Result<usize, String> {
    check_reduction_par(dt, op, inputs, 0, out, 0, count)
}

/// Compare elements `out_at..out_at + count` of `out` with the reduction of elements
/// `in_at..in_at + count` of `inputs` (reduce: both 0; reduce-scatter: the rank's block of
/// the inputs), on many threads for large counts. Returns the number of elements checked.
pub fn check_reduction_par(
    dt: DataType,
    op: Op,
    inputs: &[&[u8]],
    in_at: usize,
    out: &[u8],
    out_at: usize,
    count: usize,
) -> Result<usize, String> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(32);
    if threads <= 1 || count < 1 << 16 {
        return check_reduction(dt, op, inputs, in_at, out, out_at, count);
    }
    let per = count.div_ceil(threads);
    let results: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (lo, hi) = ((t * per).min(count), ((t + 1) * per).min(count));
                s.spawn(move || check_reduction(dt, op, inputs, in_at + lo, out, out_at + lo, hi - lo))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("checker thread panicked".into())))
            .collect()
    });
    let errs: Vec<String> = results.into_iter().filter_map(|r| r.err()).collect();
    if errs.is_empty() {
        Ok(count)
    } else {
        Err(errs.join(" | "))
    }
}

/// [`check_reduction_par`] on the calling thread.
pub fn check_reduction(
    dt: DataType,
    op: Op,
    inputs: &[&[u8]],
    in_at: usize,
    out: &[u8],
    out_at: usize,
    count: usize,
) -> Result<usize, String> {
    let n = inputs.len();
    let reducer = Reducer::new(dt, op);
    let mut xs = Vec::with_capacity(n);
    let mut bad = Vec::new();
    let mut nbad = 0usize;
    for k in 0..count {
        let (i, o) = (in_at + k, out_at + k);
        let got = get_bits(dt, out, o);
        xs.clear();
        xs.extend(inputs.iter().map(|b| get_bits(dt, b, i)));
        if !reducer.accepts(&xs, got) {
            nbad += 1;
            if bad.len() < 5 {
                let inp: Vec<String> = xs.iter().map(|x| format!("{x:#x}")).collect();
                bad.push(format!(
                    "[{o}] got {got:#x} ({}) from inputs [{i}] {}",
                    decode_f64(dt, got),
                    inp.join(",")
                ));
            }
        }
    }
    if nbad == 0 {
        Ok(count)
    } else {
        Err(format!(
            "{nbad} of {count} elements wrong ({} {} on {n} ranks); first: {}",
            dt.name(),
            op.red_op().name(),
            bad.join("; ")
        ))
    }
}

/// Compare `got` with `want` bit for bit, element by element (copies: broadcast,
/// all-gather; and untouched buffers). `what` names the buffer in the message.
pub fn check_equal(dt: DataType, what: &str, want: &[u8], got: &[u8]) -> Result<usize, String> {
    let count = want.len() / dt.size();
    if got.len() != want.len() {
        return Err(format!("{what}: {} bytes, expected {}", got.len(), want.len()));
    }
    if got == want {
        return Ok(count);
    }
    let wrong: Vec<usize> = (0..count)
        .filter(|&i| get_bits(dt, got, i) != get_bits(dt, want, i))
        .collect();
    let first: Vec<String> = wrong
        .iter()
        .take(5)
        .map(|&i| {
            format!(
                "[{i}] got {:#x}, expected {:#x}",
                get_bits(dt, got, i),
                get_bits(dt, want, i)
            )
        })
        .collect();
    Err(format!(
        "{what}: {} of {count} {} elements wrong; first: {}",
        wrong.len(),
        dt.name(),
        first.join("; ")
    ))
}
