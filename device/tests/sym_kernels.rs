//! The symmetric kernels on CPU threads: threads as ranks (one per block), one host
//! allocation per window standing for the flat range (rank `r`'s copy at `base + r *
//! stride`), checked against a host reference (f64 for floats, i128 for integers) on random
//! data, many ops back to back on the same windows (buffer rotation, mixed protocols),
//! outputs poisoned before each op.

use oxccl_device::abi::*;
use oxccl_device::api::abi::WindowDesc;
use oxccl_device::arch::cvt;
use oxccl_device::exec::ExecCtx;
use oxccl_device::kernels::{sym_dispatch, sym_lamport_init_dispatch};

// ---------------------------------------------------------------- harness

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One window's flat range: `n` copies of `stride` bytes, 16-byte aligned.
struct Flat {
    mem: Vec<u128>,
    stride: u64,
    n: u32,
}

impl Flat {
    fn new(n: u32, bytes: u64) -> Self {
        let stride = bytes.div_ceil(4096).max(1) * 4096;
        Flat {
            mem: vec![0u128; (stride * n as u64 / 16) as usize],
            stride,
            n,
        }
    }
    fn base(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    fn desc(&self, r: u32) -> WindowDesc {
        WindowDesc {
            local: self.base() + r as u64 * self.stride,
            stride: self.stride,
            size: self.stride,
            rank: r,
            nranks: self.n,
            ..WindowDesc::default()
        }
    }
    /// Rank `r`'s bytes `[off, off + len)` (no kernel runs while the test touches them).
    fn bytes(&mut self, r: u32, off: u64, len: usize) -> &mut [u8] {
        assert!(off + len as u64 <= self.stride);
        let p = (self.base() + r as u64 * self.stride + off) as *mut u8;
        // SAFETY: inside the allocation; kernels run only inside `Comm::run`, joined.
        unsafe { std::slice::from_raw_parts_mut(p, len) }
    }
}

const MAX_BYTES: u64 = 4096; // LL/Lamport capacity per rank and op
const WIN_BYTES: u64 = 8 * 3000 * 8 + 64;

/// A communicator of `n` thread-ranks over three windows.
struct Comm {
    n: u32,
    send: Flat,
    recv: Flat,
    scratch: Flat,
    /// Scratch area offsets per protocol.
    area: [u64; 3],
    seq: u64,
    prev_ll: Option<u64>,
    #[allow(clippy::vec_box)] // stable addresses the kernels write through
    errors: Vec<Box<ErrorRecord>>,
    abort: Box<u32>,
    timeout_ns: u64,
    /// All-reduce in place: the output is the input (same window, same offset).
    in_place: bool,
    /// Per rank, the sequence slots of `SymArgs::state` when the kernels keep the sequence
    /// number in device memory (`Some`: the arguments then carry seq 0 and no reset flag,
    /// as a replayed CUDA graph launch would).
    states: Option<Vec<[u64; 2 * MAX_BLOCKS]>>,
    /// The ranks (bit `r`) whose launches carry `SYM_FLAG_GROUPED`: the grouped kernels run
    /// there where they hold the op (`sym_grouped_kernel_runs`).
    grouped: u64,
}

#[derive(Clone, Copy)]
struct Op {
    kind: u32,
    proto: u32,
    dtype: DataType,
    op: RedOp,
    count: u64,
    scalar: u64,
    send_off: u64,
    recv_off: u64,
    blocks: u32,
}

impl Op {
    /// A `Sum` op of `count` elements of `dtype`, buffers at offset 0, on `blocks` blocks.
    fn sum(kind: u32, proto: u32, dtype: DataType, count: u64, blocks: u32) -> Op {
        Op {
            kind,
            proto,
            dtype,
            op: RedOp::Sum,
            count,
            scalar: 0,
            send_off: 0,
            recv_off: 0,
            blocks,
        }
    }
}

impl Comm {
    fn new(n: u32) -> Self {
        let simple = sym_scratch_bytes(SYM_KIND_ALL_GATHER, SYM_PROTO_SIMPLE, n, MAX_BYTES);
        let ll = sym_scratch_bytes(SYM_KIND_ALL_GATHER, SYM_PROTO_LL, n, MAX_BYTES);
        let lamport = sym_scratch_bytes(SYM_KIND_ALL_GATHER, SYM_PROTO_LAMPORT, n, MAX_BYTES);
        let area = [0, simple, simple + ll];
        let mut c = Comm {
            n,
            send: Flat::new(n, WIN_BYTES),
            recv: Flat::new(n, WIN_BYTES),
            scratch: Flat::new(n, simple + ll + lamport),
            area,
            seq: 0,
            prev_ll: None,
            errors: (0..n).map(|_| Box::default()).collect(),
            abort: Box::new(0),
            timeout_ns: 20_000_000_000,
            in_place: false,
            states: None,
            grouped: 0,
        };
        // The init contract: every rank poisons its own Lamport lines once, then they meet.
        std::thread::scope(|s| {
            for r in 0..n {
                let a = SymInitArgs::for_area(&c.scratch.desc(r), c.area[2], sym_slot_lines(MAX_BYTES));
                s.spawn(move || {
                    // SAFETY: the rank's own Lamport lines, no kernel running.
                    unsafe { sym_lamport_init_dispatch(&ExecCtx::host_block(0, 1), &a) }
                });
            }
        });
        c.scratch.n = n;
        c
    }

    fn args(&mut self, r: u32, o: &Op) -> SymArgs {
        let a = self.args_plain(r, o);
        if self.in_place {
            SymArgs {
                recv: a.send,
                recv_offset: a.send_offset,
                ..a
            }
        } else {
            a
        }
    }

    fn args_plain(&mut self, r: u32, o: &Op) -> SymArgs {
        SymArgs {
            header: Header::of::<SymArgs>(),
            kind: o.kind,
            proto: o.proto,
            send: self.send.desc(r),
            recv: self.recv.desc(r),
            scratch: self.scratch.desc(r),
            send_offset: o.send_off,
            recv_offset: o.recv_off,
            scratch_offset: self.area[o.proto as usize],
            count: o.count,
            dtype: o.dtype as u32,
            op: o.op as u32,
            scalar: o.scalar,
            seq: self.seq,
            abort_flag: &*self.abort as *const u32 as u64,
            timeout_ns: self.timeout_ns,
            error: &*self.errors[r as usize] as *const ErrorRecord as u64,
            slot_lines: sym_slot_lines(MAX_BYTES) as u32,
            flags: 0,
            state: self
                .states
                .as_ref()
                .map_or(0, |st| st[r as usize].as_ptr() as u64),
        }
    }

    /// Run `o` on the ranks in `ranks` (all of them normally); advances `seq`.
    fn run_on(&mut self, o: &Op, ranks: &[u32]) {
        let all = self.launch_args(o, ranks);
        std::thread::scope(|s| {
            for a in &all {
                for b in 0..o.blocks {
                    let a = *a;
                    s.spawn(move || {
                        // SAFETY: the windows outlive the scope; every rank runs the grid.
                        unsafe { sym_dispatch(&ExecCtx::host_block(b, o.blocks), &a) }
                    });
                }
            }
        });
    }

    /// Run `ops` in order with the ranks free-running: each rank runs the ops one after
    /// another on a thread of its own (each op's blocks joined before its next op, never
    /// another rank's), so a rank publishes op `k + 1` (and more, as far as the protocols
    /// let it) while its peers still read op `k`. Every rank records no error.
    fn run_free(&mut self, ops: &[Op]) {
        let ranks: Vec<u32> = (0..self.n).collect();
        let per_op: Vec<Vec<SymArgs>> = ops.iter().map(|o| self.launch_args(o, &ranks)).collect();
        std::thread::scope(|s| {
            for r in 0..self.n as usize {
                let per_op = &per_op;
                s.spawn(move || {
                    for (o, all) in ops.iter().zip(per_op) {
                        let a = all[r];
                        std::thread::scope(|s| {
                            for b in 0..o.blocks {
                                s.spawn(move || {
                                    // SAFETY: the windows outlive the scope; every rank runs
                                    // every op's grid, in the same order.
                                    unsafe { sym_dispatch(&ExecCtx::host_block(b, o.blocks), &a) }
                                });
                            }
                        });
                    }
                });
            }
        });
        for (r, e) in self.errors.iter().enumerate() {
            assert_eq!(e.code, ERR_NONE, "rank {r} recorded {e:?}");
        }
    }

    /// The arguments of `o` for each rank of `ranks`, as its next op; advances `seq`.
    fn launch_args(&mut self, o: &Op, ranks: &[u32]) -> Vec<SymArgs> {
        let mut flags = 0;
        if o.proto == SYM_PROTO_LL {
            if sym_ll_needs_reset(self.prev_ll, self.seq) {
                flags |= SYM_FLAG_LL_RESET;
            }
            self.prev_ll = Some(self.seq);
        }
        let device_seq = self.states.is_some();
        let all: Vec<SymArgs> = ranks
            .iter()
            .map(|&r| {
                let a = self.args(r, o);
                let grouped = if self.grouped >> r & 1 != 0 {
                    SYM_FLAG_GROUPED
                } else {
                    0
                };
                if device_seq {
                    SymArgs {
                        seq: 0,
                        flags: grouped,
                        ..a
                    }
                } else {
                    SymArgs {
                        flags: flags | grouped,
                        ..a
                    }
                }
            })
            .collect();
        self.seq = self.seq.wrapping_add(1);
        all
    }

    fn run(&mut self, o: &Op) {
        let ranks: Vec<u32> = (0..self.n).collect();
        self.run_on(o, &ranks);
        for (r, e) in self.errors.iter().enumerate() {
            assert_eq!(e.code, ERR_NONE, "rank {r} recorded {e:?}");
        }
    }
}

// ---------------------------------------------------------------- reference

fn is_signed(dt: DataType) -> bool {
    matches!(dt, DataType::I8 | DataType::I32 | DataType::I64)
}

fn int_of(dt: DataType, b: &[u8]) -> i128 {
    let mut w = [0u8; 16];
    w[..b.len()].copy_from_slice(b);
    let v = u128::from_le_bytes(w);
    let bits = 8 * b.len() as u32;
    if is_signed(dt) && (v >> (bits - 1)) & 1 == 1 {
        (v as i128) - (1i128 << bits)
    } else {
        v as i128
    }
}

fn f_of(dt: DataType, b: &[u8]) -> f64 {
    match dt {
        DataType::F16 => cvt::f16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64,
        DataType::Bf16 => cvt::bf16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64,
        DataType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
        DataType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
        DataType::F8E4M3 => cvt::e4m3_to_f32(b[0]) as f64,
        DataType::F8E5M2 => cvt::e5m2_to_f32(b[0]) as f64,
        _ => unreachable!(),
    }
}

fn f_bytes(dt: DataType, x: f64) -> Vec<u8> {
    match dt {
        DataType::F16 => cvt::f32_to_f16(x as f32).to_le_bytes().to_vec(),
        DataType::Bf16 => cvt::f32_to_bf16(x as f32).to_le_bytes().to_vec(),
        DataType::F32 => (x as f32).to_le_bytes().to_vec(),
        DataType::F64 => x.to_le_bytes().to_vec(),
        DataType::F8E4M3 => vec![cvt::f32_to_e4m3(x as f32)],
        DataType::F8E5M2 => vec![cvt::f32_to_e5m2(x as f32)],
        _ => unreachable!(),
    }
}

/// A random element for operator `op` (floats from small exact sets, so that no reduction
/// overflows the narrowest type; integers of any bits).
fn random_elem(rng: &mut Rng, dt: DataType, op: RedOp) -> Vec<u8> {
    if dt.is_float() {
        let x = if op == RedOp::Prod {
            [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0][rng.below(6) as usize]
        } else {
            (rng.below(17) as f64 - 8.0) * 0.5
        };
        f_bytes(dt, x)
    } else {
        rng.next().to_le_bytes()[..dt.size()].to_vec()
    }
}

fn scalar_for(dt: DataType, rng: &mut Rng) -> (u64, f64, i128) {
    let (f, i) = [(2.0, 3i128), (0.5, -1), (-1.0, 7)][rng.below(3) as usize];
    let bytes = if dt.is_float() {
        f_bytes(dt, f)
    } else {
        (i as i64).to_le_bytes()[..dt.size()].to_vec()
    };
    let mut w = [0u8; 8];
    w[..bytes.len()].copy_from_slice(&bytes);
    (
        u64::from_le_bytes(w),
        f_of_or(dt, &bytes, f),
        int_of_or(dt, &bytes, i),
    )
}

fn f_of_or(dt: DataType, b: &[u8], f: f64) -> f64 {
    if dt.is_float() {
        f_of(dt, b)
    } else {
        f
    }
}

fn int_of_or(dt: DataType, b: &[u8], i: i128) -> i128 {
    if dt.is_float() {
        i
    } else {
        int_of(dt, b)
    }
}

/// Relative tolerance of one rounding into `dt` (results are rounded once).
fn tol(dt: DataType) -> f64 {
    match dt {
        DataType::F8E4M3 => 0.13,
        DataType::F8E5M2 => 0.26,
        DataType::Bf16 => 1.0 / 128.0,
        DataType::F16 => 1.0 / 1024.0,
        DataType::F32 => 1e-6,
        _ => 1e-12,
    }
}

/// Check element `got` against the reduction of `xs` (one element per rank, rank order).
fn check_reduced(dt: DataType, op: RedOp, xs: &[&[u8]], got: &[u8], sf: f64, si: i128, what: &str) {
    let n = xs.len();
    if dt.is_float() {
        let v: Vec<f64> = xs.iter().map(|b| f_of(dt, b)).collect();
        let e = match op {
            RedOp::Sum => v.iter().sum(),
            RedOp::Prod => v.iter().product(),
            RedOp::Max => v.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            RedOp::Min => v.iter().cloned().fold(f64::INFINITY, f64::min),
            RedOp::Avg => v.iter().sum::<f64>() / n as f64,
            RedOp::PreMulSum => v.iter().map(|x| x * sf).sum(),
        };
        let g = f_of(dt, got);
        if v.iter().any(|x| x.is_nan())
            && matches!(op, RedOp::Sum | RedOp::Prod | RedOp::Avg | RedOp::PreMulSum)
        {
            assert!(g.is_nan(), "{what}: expected NaN, got {g}");
            return;
        }
        assert!(
            (g - e).abs() <= tol(dt) * e.abs().max(1.0),
            "{what}: {dt:?} {op:?} of {v:?}: got {g}, want {e}"
        );
    } else {
        let bits = 8 * dt.size() as u32;
        let wrap = |x: i128| -> i128 {
            let m = x & ((1i128 << bits) - 1);
            int_of(dt, &m.to_le_bytes()[..dt.size()])
        };
        let v: Vec<i128> = xs.iter().map(|b| int_of(dt, b)).collect();
        let e = match op {
            RedOp::Sum => wrap(v.iter().fold(0i128, |a, x| a.wrapping_add(*x))),
            RedOp::Prod => wrap(v.iter().fold(1i128, |a, x| wrap(a.wrapping_mul(*x)))),
            RedOp::Max => *v.iter().max().unwrap(),
            RedOp::Min => *v.iter().min().unwrap(),
            RedOp::Avg => wrap(v.iter().fold(0i128, |a, x| a.wrapping_add(*x))) / n as i128,
            RedOp::PreMulSum => wrap(
                v.iter()
                    .fold(0i128, |a, x| wrap(a.wrapping_add(wrap(x.wrapping_mul(si))))),
            ),
        };
        assert_eq!(int_of(dt, got), wrap(e), "{what}: {dt:?} {op:?} of {v:?}");
    }
}

// ---------------------------------------------------------------- one checked op

const OUT_POISON: u8 = 0xA5;

/// Elements of a rank's input for `o` on `n` ranks.
fn in_elems(o: &Op, n: u32) -> usize {
    if o.kind == SYM_KIND_REDUCE_SCATTER {
        n as usize * o.count as usize
    } else {
        o.count as usize
    }
}

/// Fill inputs with random data, poison outputs, run, check against the reference.
fn run_checked(c: &mut Comm, o: &Op, rng: &mut Rng, in_place: bool) {
    let inputs: Vec<Vec<u8>> = (0..c.n)
        .map(|_| {
            (0..in_elems(o, c.n))
                .flat_map(|_| random_elem(rng, o.dtype, o.op))
                .collect()
        })
        .collect();
    run_checked_on(c, o, &inputs, in_place);
}

/// Fill `inputs`, poison outputs, run, check against the reference; the all-reduces must
/// leave the same bits on every rank.
fn run_checked_on(c: &mut Comm, o: &Op, inputs: &[Vec<u8>], in_place: bool) {
    stage(c, o, inputs);
    c.in_place = in_place;
    c.run(o);
    c.in_place = false;
    check_op(c, o, inputs, in_place, c.seq - 1);
}

/// Elements of a rank's output for `o` on `n` ranks.
fn out_elems(o: &Op, n: u32) -> usize {
    if o.kind == SYM_KIND_ALL_GATHER {
        n as usize * o.count as usize
    } else {
        o.count as usize
    }
}

/// Copy every rank's input of `o` into place and poison its output.
fn stage(c: &mut Comm, o: &Op, inputs: &[Vec<u8>]) {
    let sz = o.dtype.size();
    for r in 0..c.n {
        c.recv
            .bytes(r, o.recv_off, out_elems(o, c.n) * sz)
            .fill(OUT_POISON);
        c.send
            .bytes(r, o.send_off, in_elems(o, c.n) * sz)
            .copy_from_slice(&inputs[r as usize]);
    }
}

/// Check every rank's output of `o` (op `seq`) against the reference of `inputs`; the
/// all-reduces must leave the same bits on every rank.
fn check_op(c: &mut Comm, o: &Op, inputs: &[Vec<u8>], in_place: bool, seq: u64) {
    let n = c.n;
    let sz = o.dtype.size();
    let cnt = o.count as usize;
    let out_elems = out_elems(o, n);
    assert!(!in_place || o.kind <= SYM_KIND_ALL_REDUCE_TWO_SHOT);
    let (sf, si) = (scalar_f(o.dtype, o.scalar), scalar_i(o.dtype, o.scalar));
    let o3 = Op {
        recv_off: if in_place { o.send_off } else { o.recv_off },
        ..*o
    };
    let mut first_out: Option<Vec<u8>> = None;
    for r in 0..n {
        let win = if in_place { &mut c.send } else { &mut c.recv };
        let out = win.bytes(r, o3.recv_off, out_elems * sz).to_vec();
        if o.kind <= SYM_KIND_ALL_REDUCE_TWO_SHOT {
            match &first_out {
                Some(f) => assert!(
                    *f == out,
                    "kind {} proto {} n {n} count {cnt}: rank {r}'s result differs from rank 0's",
                    o.kind,
                    o.proto
                ),
                None => first_out = Some(out.clone()),
            }
        }
        for e in 0..out_elems {
            let got = &out[e * sz..(e + 1) * sz];
            let what = format!(
                "kind {} proto {} n {n} count {cnt} rank {r} elem {e} seq {seq}",
                o.kind, o.proto
            );
            match o.kind {
                SYM_KIND_ALL_GATHER => {
                    let (q, i) = (e / cnt, e % cnt);
                    let want = &inputs[q][i * sz..(i + 1) * sz];
                    assert_eq!(got, want, "{what}");
                }
                _ => {
                    let base = if o.kind == SYM_KIND_REDUCE_SCATTER {
                        r as usize * cnt
                    } else {
                        0
                    };
                    let xs: Vec<&[u8]> = inputs
                        .iter()
                        .map(|v| &v[(base + e) * sz..(base + e + 1) * sz])
                        .collect();
                    check_reduced(o.dtype, o.op, &xs, got, sf, si, &what);
                }
            }
        }
    }
}

fn scalar_f(dt: DataType, s: u64) -> f64 {
    if dt.is_float() {
        f_of(dt, &s.to_le_bytes()[..dt.size()])
    } else {
        0.0
    }
}

fn scalar_i(dt: DataType, s: u64) -> i128 {
    if dt.is_float() {
        0
    } else {
        int_of(dt, &s.to_le_bytes()[..dt.size()])
    }
}

// ---------------------------------------------------------------- tests

const KINDS: [(u32, u32); 12] = [
    (SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_PROTO_SIMPLE),
    (SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_PROTO_LL),
    (SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_PROTO_LAMPORT),
    (SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_PROTO_SIMPLE),
    (SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_PROTO_LL),
    (SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_PROTO_LAMPORT),
    (SYM_KIND_ALL_GATHER, SYM_PROTO_SIMPLE),
    (SYM_KIND_ALL_GATHER, SYM_PROTO_LL),
    (SYM_KIND_ALL_GATHER, SYM_PROTO_LAMPORT),
    (SYM_KIND_REDUCE_SCATTER, SYM_PROTO_SIMPLE),
    (SYM_KIND_REDUCE_SCATTER, SYM_PROTO_LL),
    (SYM_KIND_REDUCE_SCATTER, SYM_PROTO_LAMPORT),
];

const SIZES: [u64; 12] = [0, 1, 2, 3, 7, 8, 13, 16, 31, 61, 127, 257];

/// The largest count the LL or Lamport kernel of `kind` takes on `n` ranks: the host's
/// `MAX_BYTES` per rank, or for the two-shot all-reduce exactly the slot's capacity
/// (`sym_two_shot_lines`: two blocks of a rank's share of the lines).
fn max_count(kind: u32, proto: u32, dtype: DataType, n: u32) -> u64 {
    let sz = dtype.size() as u64;
    if kind != SYM_KIND_ALL_REDUCE_TWO_SHOT {
        return MAX_BYTES / sz;
    }
    let slot = sym_header_line(sym_slot_lines(MAX_BYTES));
    let max = slot / 2 * n as u64 * sym_line_data(proto, dtype) / sz;
    let lines = |c| sym_two_shot_lines(c, sz, n, sym_line_data(proto, dtype));
    assert!(lines(max) <= slot && lines(max + 1) > slot);
    max
}

fn random_op(rng: &mut Rng, n: u32, kind: u32, proto: u32, dtype: DataType) -> Op {
    let op = RedOp::ALL[rng.below(6) as usize];
    let scalar = scalar_for(dtype, rng).0;
    let mut count = SIZES[rng.below(SIZES.len() as u64) as usize];
    if proto == SYM_PROTO_SIMPLE && rng.below(4) == 0 {
        count = 500 + rng.below(2500); // bigger, several vectors per thread
    }
    let max = max_count(kind, proto, dtype, n);
    if proto != SYM_PROTO_SIMPLE {
        count = count.min(max);
        if rng.below(8) == 0 {
            count = max; // a full slot
        }
    }
    let sz = dtype.size() as u64;
    Op {
        kind,
        proto,
        dtype,
        op,
        count,
        scalar,
        // Aligned (vector paths) or shifted by one element (scalar paths).
        send_off: [0, 16, sz][rng.below(3) as usize],
        recv_off: [0, 32, sz][rng.below(3) as usize],
        blocks: 1 + rng.below(3) as u32,
    }
}

#[test]
fn every_kernel_every_dtype_ranks_1_to_8() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for n in 1..=8u32 {
        let mut c = Comm::new(n);
        for (i, &(kind, proto)) in KINDS.iter().enumerate() {
            for k in 0..3 {
                let dt = DataType::ALL[(i * 3 + k + n as usize) % 12];
                let o = random_op(&mut rng, c.n, kind, proto, dt);
                run_checked(&mut c, &o, &mut rng, false);
            }
        }
    }
}

/// Ranks running ahead of each other: each rank runs a sequence of ops back to back on its
/// own thread (`Comm::run_free`), every op on buffers of its own (inputs staged and outputs
/// poisoned before the sequence, every element checked after it). Kinds, protocols, data
/// types, operators, sizes (a full slot included) and block counts mixed in one sequence,
/// long enough to go round the LL halves and the three Lamport buffers several times, with
/// the sequence number from the arguments and from the sequence slots (a replayed graph).
/// A reader that re-poisoned too late, a writer that reused a buffer too early, or an op
/// taking a line of another would show as a wrong element or a timeout here; the tests that
/// join every rank after each op cannot see these.
#[test]
fn ranks_run_ahead_of_each_other() {
    const OPS: u64 = 12;
    let slot = WIN_BYTES / OPS / 64 * 64;
    let mut rng = Rng(0x5851_F42D_4C95_7F2D);
    for (round, n) in [2u32, 3, 4, 5, 8, 2, 3, 8].into_iter().enumerate() {
        let mut c = Comm::new(n);
        if round % 2 == 1 {
            c.states = Some((0..n).map(|_| [0u64; 2 * MAX_BLOCKS]).collect());
        }
        for _ in 0..3 {
            let ops: Vec<Op> = (0..OPS)
                .map(|k| {
                    let (kind, proto) = KINDS[rng.below(KINDS.len() as u64) as usize];
                    let dt = DataType::ALL[rng.below(12) as usize];
                    let sz = dt.size() as u64;
                    let mut o = random_op(&mut rng, n, kind, proto, dt);
                    // Every op's buffers fit its own slot of the windows.
                    o.count = o.count.min(slot / (n as u64 * sz) - 1);
                    o.send_off = k * slot;
                    o.recv_off = k * slot;
                    o
                })
                .collect();
            let inputs: Vec<Vec<Vec<u8>>> = ops
                .iter()
                .map(|o| {
                    (0..n)
                        .map(|_| {
                            (0..in_elems(o, n))
                                .flat_map(|_| random_elem(&mut rng, o.dtype, o.op))
                                .collect()
                        })
                        .collect()
                })
                .collect();
            for (o, inp) in ops.iter().zip(&inputs) {
                stage(&mut c, o, inp);
            }
            let first = c.seq;
            c.run_free(&ops);
            for (k, (o, inp)) in ops.iter().zip(&inputs).enumerate() {
                check_op(&mut c, o, inp, false, first + k as u64);
            }
        }
    }
}

#[test]
fn every_dtype_and_op_on_four_ranks() {
    let mut rng = Rng(42);
    let mut c = Comm::new(4);
    for dt in DataType::ALL {
        for op in RedOp::ALL {
            for &(kind, proto) in &KINDS {
                if kind == SYM_KIND_ALL_GATHER && op != RedOp::Sum {
                    continue;
                }
                let mut o = random_op(&mut rng, c.n, kind, proto, dt);
                o.op = op;
                o.count = o.count.min(61);
                run_checked(&mut c, &o, &mut rng, false);
            }
        }
    }
}

/// The kernels keep the sequence number in device memory (`SymArgs::state`): every launch
/// gets the same arguments (seq 0, no reset flag), as launches replayed from a CUDA graph do,
/// and still runs as the next op (barrier epochs, LL parity and tags, Lamport buffers).
#[test]
fn device_sequence_slots_make_identical_launches_successive_ops() {
    let mut rng = Rng(11);
    for n in [2u32, 4] {
        let mut c = Comm::new(n);
        c.states = Some((0..n).map(|_| [0u64; 2 * MAX_BLOCKS]).collect());
        for _ in 0..90 {
            let (kind, proto) = KINDS[rng.below(KINDS.len() as u64) as usize];
            let dt = DataType::ALL[rng.below(12) as usize];
            let o = random_op(&mut rng, c.n, kind, proto, dt);
            run_checked(&mut c, &o, &mut rng, false);
        }
        let st = c.states.as_ref().unwrap();
        assert!(
            st.iter().all(|s| s[..MAX_BLOCKS].iter().all(|&q| q == 90)),
            "every slot counts every launch"
        );
    }
}

#[test]
fn back_to_back_mixed_protocols_rotate_buffers() {
    let mut rng = Rng(7);
    for n in [2u32, 3, 5] {
        let mut c = Comm::new(n);
        for _ in 0..120 {
            let (kind, proto) = KINDS[rng.below(KINDS.len() as u64) as usize];
            let dt = DataType::ALL[rng.below(12) as usize];
            let o = random_op(&mut rng, c.n, kind, proto, dt);
            run_checked(&mut c, &o, &mut rng, false);
        }
    }
}

#[test]
fn lamport_back_to_back_varying_sizes() {
    // Large op then small ops: lines the small ops do not rewrite must stay poisoned.
    let mut rng = Rng(99);
    let mut c = Comm::new(3);
    for it in 0..200 {
        let kind = [
            SYM_KIND_ALL_REDUCE_ONE_SHOT,
            SYM_KIND_ALL_GATHER,
            SYM_KIND_REDUCE_SCATTER,
            SYM_KIND_ALL_REDUCE_TWO_SHOT,
        ][it % 4];
        let dt = [
            DataType::F32,
            DataType::I32,
            DataType::Bf16,
            DataType::U8,
            DataType::F64,
        ][it % 5];
        let mut o = random_op(&mut rng, c.n, kind, SYM_PROTO_LAMPORT, dt);
        o.count = if it % 7 == 0 {
            max_count(kind, SYM_PROTO_LAMPORT, dt, c.n)
        } else {
            rng.below(40)
        };
        run_checked(&mut c, &o, &mut rng, false);
    }
}

#[test]
fn all_reduce_in_place() {
    let mut rng = Rng(5);
    let mut c = Comm::new(4);
    for proto in [SYM_PROTO_SIMPLE, SYM_PROTO_LL, SYM_PROTO_LAMPORT] {
        for kind in [SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_KIND_ALL_REDUCE_TWO_SHOT] {
            for dt in [DataType::F32, DataType::I64, DataType::F16, DataType::U8] {
                for _ in 0..3 {
                    let o = random_op(&mut rng, c.n, kind, proto, dt);
                    run_checked(&mut c, &o, &mut rng, true);
                }
            }
        }
    }
}

/// Inputs holding the Lamport sentinel patterns of every type: split-line types carry them
/// unchanged (all-gather bit-exact), float lanes equal to the sentinel become the canonical
/// NaN (reductions still give NaN).
#[test]
fn lamport_data_equal_to_the_sentinel() {
    let mut c = Comm::new(3);
    for dt in DataType::ALL {
        let sz = dt.size();
        let count = 24u64;
        let o = Op {
            kind: SYM_KIND_ALL_GATHER,
            proto: SYM_PROTO_LAMPORT,
            dtype: dt,
            op: RedOp::Sum,
            count,
            scalar: 0,
            send_off: 0,
            recv_off: 0,
            blocks: 2,
        };
        let pat: Vec<u8> = (0..count as usize * sz).map(|i| [0xFA, 0xFF][i % 2]).collect();
        for r in 0..3 {
            c.send.bytes(r, 0, pat.len()).copy_from_slice(&pat);
            c.recv.bytes(r, 0, 3 * pat.len()).fill(OUT_POISON);
        }
        c.run(&o);
        for r in 0..3 {
            let out = c.recv.bytes(r, 0, 3 * pat.len()).to_vec();
            for (e, got) in out.chunks(sz).enumerate() {
                let want = &pat[(e % count as usize) * sz..][..sz];
                if dt.is_float() && sz >= 2 {
                    assert!(f_of(dt, got).is_nan(), "{dt:?} elem {e}: {got:?}");
                } else {
                    assert_eq!(got, want, "{dt:?} elem {e}");
                }
            }
        }
        let o = Op {
            kind: SYM_KIND_ALL_REDUCE_ONE_SHOT,
            ..o
        };
        c.run(&o);
        for r in 0..3 {
            let out = c.recv.bytes(r, 0, pat.len()).to_vec();
            for got in out.chunks(sz) {
                if dt.is_float() && sz >= 2 {
                    assert!(f_of(dt, got).is_nan(), "{dt:?} sum: {got:?}");
                }
            }
        }
    }
}

/// The LL and Lamport two-shot all-reduce on 1..8 ranks, every data type, every operator in
/// turn, counts of 0, 1, fewer elements than ranks, around the block and line cuts, random,
/// and the slot's capacity (with one more element refused as a bad argument, reported by
/// the kernel rather than written past the slot), in place and out of place, several
/// blocks per rank.
#[test]
fn two_shot_every_dtype_ranks_1_to_8() {
    let mut rng = Rng(0x2517_0712);
    let mut ops = 0;
    for n in 1..=8u32 {
        let mut c = Comm::new(n);
        for proto in [SYM_PROTO_LL, SYM_PROTO_LAMPORT] {
            for (d, dt) in DataType::ALL.into_iter().enumerate() {
                let max = max_count(SYM_KIND_ALL_REDUCE_TWO_SHOT, proto, dt, n);
                // Elements per line, and per block when every block has one line.
                let per_line = sym_line_data(proto, dt) / dt.size() as u64;
                let mut counts = vec![
                    0,
                    1,
                    n as u64 - 1,
                    n as u64 + 1,
                    per_line * n as u64 + 1,
                    3 * per_line * n as u64 - 1,
                    1 + rng.below(max),
                    max,
                ];
                counts.retain(|&k| k <= max);
                for (i, &count) in counts.iter().enumerate() {
                    let mut o = random_op(&mut rng, n, SYM_KIND_ALL_REDUCE_TWO_SHOT, proto, dt);
                    o.count = count;
                    o.op = RedOp::ALL[(i + d + n as usize) % 6];
                    run_checked(&mut c, &o, &mut rng, (i + d) % 3 == 0);
                    ops += 1;
                }
            }
        }
        // One element past the capacity: every rank refuses it (bad argument: a mismatch
        // without a peer), nobody waits.
        let mut o = random_op(
            &mut rng,
            n,
            SYM_KIND_ALL_REDUCE_TWO_SHOT,
            SYM_PROTO_LL,
            DataType::F32,
        );
        o.count = max_count(o.kind, o.proto, o.dtype, n) + 1;
        let ranks: Vec<u32> = (0..n).collect();
        c.run_on(&o, &ranks);
        for (r, e) in c.errors.iter().enumerate() {
            assert_eq!((e.code, e.peer), (ERR_MISMATCH, u32::MAX), "rank {r}: {e:?}");
        }
    }
    println!("{ops} two-shot ops checked");
}

/// Lamport two-shot (and one-shot, and LL) all-reduce on inputs holding the sentinel
/// patterns of every type, and signalling NaNs that an add quiets into the sentinel
/// (`0xFFBA_FFFA` becomes `0xFFFA_FFFA` on the host): the two-shot sends reduced values,
/// which must be canonicalized like inputs, or readers would take them for poison and wait
/// forever. One rank per element holds the special value; results are checked against the
/// reference (NaN where a float input is a NaN) and are the same bits on every rank.
#[test]
fn all_reduce_on_sentinel_and_quieted_nan_inputs() {
    let mut rng = Rng(17);
    let mut c = Comm::new(3);
    for dt in DataType::ALL {
        let sz = dt.size();
        // Elements whose bytes are the Lamport sentinel's, then signalling NaNs that quiet
        // into it (floats of 16 bits and more).
        let specials: Vec<Vec<u8>> = match dt {
            DataType::F32 => vec![
                0xFFFA_FFFAu32.to_le_bytes().to_vec(),
                0xFFBA_FFFAu32.to_le_bytes().to_vec(),
            ],
            DataType::F64 => vec![
                0xFFFA_FFFA_0000_0001u64.to_le_bytes().to_vec(),
                0xFFF2_FFFA_1234_5678u64.to_le_bytes().to_vec(),
            ],
            DataType::F16 => vec![vec![0xFA, 0xFF], vec![0xFA, 0xFD]],
            DataType::Bf16 => vec![vec![0xFA, 0xFF], vec![0xBA, 0xFF]],
            _ => vec![(0..sz).map(|i| [0xFA, 0xFF][i % 2]).collect()],
        };
        let ops: &[RedOp] = if dt.is_float() { &[RedOp::Sum] } else { &RedOp::ALL };
        for &op in ops {
            for (kind, proto) in [
                (SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_PROTO_LAMPORT),
                (SYM_KIND_ALL_REDUCE_ONE_SHOT, SYM_PROTO_LAMPORT),
                (SYM_KIND_ALL_REDUCE_TWO_SHOT, SYM_PROTO_LL),
            ] {
                let mut o = random_op(&mut rng, 3, kind, proto, dt);
                o.op = op;
                o.count = 37;
                let inputs: Vec<Vec<u8>> = (0..3)
                    .map(|r| {
                        (0..o.count as usize)
                            .flat_map(|e| {
                                if e % 3 == r {
                                    specials[e / 3 % specials.len()].clone()
                                } else {
                                    random_elem(&mut rng, dt, op)
                                }
                            })
                            .collect()
                    })
                    .collect();
                run_checked_on(&mut c, &o, &inputs, false);
            }
        }
    }
}

/// The LL tag generation wraps every 2^31 ops: start `seq` just before the wrap, with the
/// mailbox full of stale lines carrying exactly the tags the next generation will use; the
/// host's reset flag must clear them.
#[test]
fn ll_epoch_wrap() {
    let mut rng = Rng(3);
    let mut c = Comm::new(3);
    let start = (1u64 << 31) - 3;
    c.seq = start;
    c.prev_ll = Some(start - 1);
    let slot = sym_slot_lines(MAX_BYTES);
    for r in 0..3 {
        for b in 0..2u64 {
            for s in 0..3u64 {
                for i in 0..slot {
                    // A stale line of op `2^31 + b` (same parity, same tag as a later one).
                    let tag = sym_ll_tag((1u64 << 31) + 2 + b);
                    let off = c.area[1] + sym_lines_offset(3) + ((b * 3 + s) * slot + i) * 16;
                    let line = c.scratch.bytes(r, off, 16);
                    for (w, v) in [0xDEAD_BEEFu32, tag, 0xDEAD_BEEF, tag].iter().enumerate() {
                        line[4 * w..4 * w + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
    }
    for _ in 0..12 {
        let kind = [
            SYM_KIND_ALL_REDUCE_ONE_SHOT,
            SYM_KIND_ALL_GATHER,
            SYM_KIND_REDUCE_SCATTER,
            SYM_KIND_ALL_REDUCE_TWO_SHOT,
        ][rng.below(4) as usize];
        let o = random_op(&mut rng, c.n, kind, SYM_PROTO_LL, DataType::I32);
        run_checked(&mut c, &o, &mut rng, false);
    }
    assert!(c.seq > 1 << 31);
}

/// The grouped kernels (`SYM_FLAG_GROUPED`) on 1 to 11 ranks (groups of four: full,
/// partial, and this rank in every position), every data type, the one-shot all-reduce and
/// the reduce-scatter with `Sum` and the all-gather, LL and Lamport, sizes from none to a
/// full slot; on the same communicators ops with the flag on every rank, on none, and on
/// some ranks only (grouped and ungrouped readers of one op meet).
#[test]
fn grouped_kernels_ranks_1_to_11() {
    let mut rng = Rng(0x0005_EED0_F6E0);
    for n in 1..=11u32 {
        let mut c = Comm::new(n);
        for it in 0..48usize {
            let kind = [
                SYM_KIND_ALL_REDUCE_ONE_SHOT,
                SYM_KIND_ALL_GATHER,
                SYM_KIND_REDUCE_SCATTER,
            ][it % 3];
            let proto = [SYM_PROTO_LL, SYM_PROTO_LAMPORT][it / 3 % 2];
            let dt = DataType::ALL[(it / 6 + n as usize) % 12];
            let mut o = random_op(&mut rng, n, kind, proto, dt);
            o.op = RedOp::Sum;
            if it % 8 == 7 {
                o.count = [0, max_count(kind, proto, dt, n)][it / 8 % 2];
            }
            c.grouped = match it % 4 {
                0 => 0,
                1 => rng.next() & ((1 << n) - 1),
                _ => u64::MAX,
            };
            assert!(
                sym_grouped_kernel_runs(proto, kind, o.op as u32, SYM_FLAG_GROUPED),
                "kind {kind} proto {proto}"
            );
            run_checked(&mut c, &o, &mut rng, false);
        }
        // The flag leaves every op the grouped kernels do not hold to the others.
        c.grouped = u64::MAX;
        for &(kind, proto) in &KINDS {
            let dt = DataType::ALL[rng.below(12) as usize];
            let mut o = random_op(&mut rng, n, kind, proto, dt);
            o.count = o.count.min(257); // the windows are sized for 8 ranks' large ops
            run_checked(&mut c, &o, &mut rng, false);
        }
    }
}

/// A missing peer: waits time out and name it; a raised abort flag ends waits too. Every
/// kind on every protocol, with `Sum` (the one-shot on the Sum kernels) and `Max` (on the
/// general kernels). The record marks a symmetric kernel's error ([`SYM_ERROR_FLAG`]) and
/// carries the op's sequence number and fingerprint, so the host can name the call.
#[test]
fn timeout_and_abort_name_the_peer() {
    let kinds = [
        SYM_KIND_ALL_REDUCE_ONE_SHOT,
        SYM_KIND_ALL_REDUCE_TWO_SHOT,
        SYM_KIND_ALL_GATHER,
        SYM_KIND_REDUCE_SCATTER,
    ];
    for (proto, kind) in [SYM_PROTO_SIMPLE, SYM_PROTO_LL, SYM_PROTO_LAMPORT]
        .into_iter()
        .flat_map(|p| kinds.map(|k| (p, k)))
    {
        for red in [RedOp::Sum, RedOp::Max] {
            let what = format!("proto {proto} kind {kind} {red:?}");
            let o = Op {
                op: red,
                ..Op::sum(kind, proto, DataType::F32, 5, 1)
            };
            let fp = sym_fingerprint(kind, proto, DataType::F32 as u32, red as u32, 5);
            let mut c = Comm::new(2);
            c.timeout_ns = 50_000_000;
            c.run_on(&o, &[0]);
            let e = *c.errors[0];
            assert_eq!((e.code, e.rank, e.peer), (ERR_TIMEOUT, 0, 1), "{what}: {e:?}");
            assert_eq!(
                (e.block, e.epoch, e.detail),
                (SYM_ERROR_FLAG, 0, fp),
                "{what}: {e:?}"
            );
            let mut c = Comm::new(2);
            *c.abort = 1;
            c.run_on(&o, &[1]);
            let e = *c.errors[1];
            assert_eq!((e.code, e.rank, e.peer), (ERR_ABORTED, 1, 0), "{what}: {e:?}");
            assert_eq!((e.block, e.detail), (SYM_ERROR_FLAG, fp), "{what}: {e:?}");
        }
    }
}

/// The one-shot `Sum` kernels hold that op alone: launched with another kind or operator
/// (the host never does: `sym_sum_kernel_runs`), they record a mismatch without a peer and
/// store no output.
#[test]
fn sum_kernels_refuse_other_arguments() {
    use oxccl_device::coll::sym::{sym_lamport_sum, sym_ll_sum};
    assert!(sym_sum_kernel_runs(
        SYM_PROTO_LL,
        SYM_KIND_ALL_REDUCE_ONE_SHOT,
        RedOp::Sum as u32
    ));
    assert!(sym_sum_kernel_runs(
        SYM_PROTO_LAMPORT,
        SYM_KIND_ALL_REDUCE_ONE_SHOT,
        RedOp::Sum as u32
    ));
    assert!(!sym_sum_kernel_runs(
        SYM_PROTO_SIMPLE,
        SYM_KIND_ALL_REDUCE_ONE_SHOT,
        RedOp::Sum as u32
    ));
    for proto in [SYM_PROTO_LL, SYM_PROTO_LAMPORT] {
        for (kind, op) in [
            (SYM_KIND_ALL_GATHER, RedOp::Sum),
            (SYM_KIND_REDUCE_SCATTER, RedOp::Sum),
            (SYM_KIND_ALL_REDUCE_TWO_SHOT, RedOp::Sum),
            (SYM_KIND_ALL_REDUCE_ONE_SHOT, RedOp::Max),
        ] {
            assert!(!sym_sum_kernel_runs(proto, kind, op as u32));
            let body = if proto == SYM_PROTO_LL {
                sym_ll_sum::<f32>
            } else {
                sym_lamport_sum::<f32>
            };
            assert_refused(body, proto, kind, op, 0);
        }
    }
}

/// Run kernel body `body` alone (one rank, one block) on a launch of protocol `proto`,
/// `kind`, `op` and `flags` it does not hold: it must record a mismatch without a peer and
/// store no output.
fn assert_refused(body: unsafe fn(&ExecCtx, &SymArgs), proto: u32, kind: u32, op: RedOp, flags: u32) {
    let mut c = Comm::new(1);
    let o = Op {
        op,
        ..Op::sum(kind, proto, DataType::F32, 4, 1)
    };
    c.recv.bytes(0, 0, 16).fill(OUT_POISON);
    let a = SymArgs {
        flags,
        ..c.args(0, &o)
    };
    // SAFETY: the harness's windows and error record, one rank, one block.
    unsafe { body(&ExecCtx::host_block(0, 1), &a) }
    let e = *c.errors[0];
    let what = format!("proto {proto} kind {kind} {op:?} flags {flags}");
    assert_eq!(
        (e.code, e.rank, e.peer),
        (ERR_MISMATCH, 0, u32::MAX),
        "{what}: {e:?}"
    );
    assert!(
        c.recv.bytes(0, 0, 16).iter().all(|&b| b == OUT_POISON),
        "{what}: output written"
    );
}

/// The grouped kernels' waits: a missing peer in any group position is named on timeout
/// (the others present), and a raised abort flag ends the waits.
#[test]
fn grouped_timeout_and_abort_name_the_peer() {
    for kind in [
        SYM_KIND_ALL_REDUCE_ONE_SHOT,
        SYM_KIND_ALL_GATHER,
        SYM_KIND_REDUCE_SCATTER,
    ] {
        for proto in [SYM_PROTO_LL, SYM_PROTO_LAMPORT] {
            for missing in [1u32, 4, 6] {
                let mut c = Comm::new(7);
                c.grouped = u64::MAX;
                c.timeout_ns = 50_000_000;
                let o = Op::sum(kind, proto, DataType::F32, 5, 1);
                let present: Vec<u32> = (0..7).filter(|&r| r != missing).collect();
                c.run_on(&o, &present);
                for &r in &present {
                    let e = *c.errors[r as usize];
                    assert_eq!(
                        (e.code, e.rank, e.peer),
                        (ERR_TIMEOUT, r, missing),
                        "kind {kind} proto {proto}, rank {missing} missing: {e:?}"
                    );
                }
            }
            let mut c = Comm::new(5);
            c.grouped = u64::MAX;
            *c.abort = 1;
            let o = Op::sum(kind, proto, DataType::Bf16, 9, 2);
            c.run_on(&o, &[3]);
            let e = *c.errors[3];
            assert_eq!(
                (e.code, e.rank),
                (ERR_ABORTED, 3),
                "kind {kind} proto {proto}: {e:?}"
            );
            assert!(e.peer < 5 && e.peer != 3, "kind {kind} proto {proto}: {e:?}");
        }
    }
}

/// The grouped kernels hold the one-shot all-reduce and the reduce-scatter with `Sum` and
/// the all-gather, with `SYM_FLAG_GROUPED`: launched otherwise (the host never does:
/// `sym_grouped_kernel_runs`), they record a mismatch without a peer and store no output.
#[test]
fn grouped_kernels_refuse_other_arguments() {
    use oxccl_device::coll::sym::{sym_lamport_grouped, sym_ll_grouped};
    for proto in [SYM_PROTO_LL, SYM_PROTO_LAMPORT] {
        assert!(!sym_grouped_kernel_runs(
            proto,
            SYM_KIND_ALL_REDUCE_ONE_SHOT,
            RedOp::Sum as u32,
            0
        ));
        assert!(sym_grouped_kernel_runs(
            proto,
            SYM_KIND_ALL_GATHER,
            RedOp::Max as u32,
            SYM_FLAG_GROUPED
        ));
        for (kind, op, grouped) in [
            (SYM_KIND_ALL_REDUCE_ONE_SHOT, RedOp::Sum, false),
            (SYM_KIND_ALL_REDUCE_TWO_SHOT, RedOp::Sum, true),
            (SYM_KIND_ALL_REDUCE_ONE_SHOT, RedOp::Max, true),
            (SYM_KIND_REDUCE_SCATTER, RedOp::Prod, true),
        ] {
            let flags = if grouped { SYM_FLAG_GROUPED } else { 0 };
            assert!(!sym_grouped_kernel_runs(proto, kind, op as u32, flags));
            let body = if proto == SYM_PROTO_LL {
                sym_ll_grouped::<f32>
            } else {
                sym_lamport_grouped::<f32>
            };
            assert_refused(body, proto, kind, op, flags);
        }
    }
}
