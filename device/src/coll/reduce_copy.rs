//! The inner loop of load/store collectives: for a range of elements, load them from up to
//! `nsrc` source buffers, reduce, and store the result into `ndst` destination buffers.
//!
//! Sources and destinations are read from the peers' inbox lines (the addresses published at
//! the entry barrier). The first [`FAN`] of each are kept in registers; more ranks are
//! handled in groups of [`FAN`] with addresses re-read from the (cached) inbox lines.
//!
//! 16-byte vectors when every address and the range start are 16-byte aligned; the rest of
//! the range (and misaligned buffers) element by element.

use crate::abi::SyncLine;
use crate::arch;
use crate::exec::ExecCtx;
use crate::ops::elem::{get_lane, lanes, set_lane};
use crate::ops::{Elem, Reduce};

/// Ranks whose addresses live in registers.
pub const FAN: usize = 8;

/// Which field of the inbox lines holds the addresses of one side.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Send,
    Recv,
}

/// The addresses of one side (sources or destinations) of a [`reduce_copy`].
#[derive(Clone, Copy)]
pub struct Addrs {
    /// First `FAN` addresses.
    pub first: [u64; FAN],
    /// How many addresses in all.
    pub n: u32,
    /// Inbox lines (one per rank) holding the addresses past `FAN`.
    pub lines: *const SyncLine,
    /// Which field of those lines.
    pub field: Field,
    /// Byte offset added to every address read from `lines` (already added in `first`);
    /// for a window side (`lines` null), the address of rank 0's byte instead.
    pub offset: u64,
    /// Window side only: the distance between consecutive ranks' addresses.
    pub win_stride: u64,
}

impl Addrs {
    /// One address.
    pub fn one(a: u64) -> Self {
        let mut first = [0; FAN];
        first[0] = a;
        Addrs {
            first,
            n: 1,
            lines: core::ptr::null(),
            field: Field::Recv,
            offset: 0,
            win_stride: 0,
        }
    }

    /// The same byte of `n` ranks' copies of a window: rank `q`'s at `base + q * stride`
    /// (wrapping), the first `FAN` computed now (see `crate::api::abi::WindowDesc`).
    #[inline(always)]
    pub fn window(base: u64, stride: u64, n: u32) -> Self {
        let mut first = [0; FAN];
        let mut q = 0;
        while q < FAN {
            if (q as u32) < n {
                first[q] = base.wrapping_add((q as u64).wrapping_mul(stride));
            }
            q += 1;
        }
        Addrs {
            first,
            n,
            lines: core::ptr::null(),
            field: Field::Recv,
            offset: base,
            win_stride: stride,
        }
    }

    /// The `field` addresses of `n` ranks' lines, the first `FAN` loaded now.
    ///
    /// # Safety
    /// `lines` must point to `n` published lines.
    #[inline(always)]
    pub unsafe fn from_lines(lines: *const SyncLine, n: u32, field: Field) -> Self {
        Self::from_lines_at(lines, n, field, 0)
    }

    /// As [`Addrs::from_lines`], every address advanced by `offset` bytes (the same block
    /// of every rank's buffer, e.g. block `r` of a reduce-scatter's inputs).
    ///
    /// # Safety
    /// `lines` must point to `n` published lines.
    #[inline(always)]
    pub unsafe fn from_lines_at(lines: *const SyncLine, n: u32, field: Field, offset: u64) -> Self {
        let mut first = [0; FAN];
        let mut q = 0;
        while q < FAN {
            if (q as u32) < n {
                first[q] = Self::read(lines, q as u32, field) + offset;
            }
            q += 1;
        }
        Addrs {
            first,
            n,
            lines,
            field,
            offset,
            win_stride: 0,
        }
    }

    /// Address `i >= FAN`, read from the lines.
    #[inline(always)]
    unsafe fn far(&self, i: u32) -> u64 {
        if self.lines.is_null() {
            return self.offset.wrapping_add((i as u64).wrapping_mul(self.win_stride));
        }
        Self::read(self.lines, i, self.field) + self.offset
    }

    #[inline(always)]
    unsafe fn read(lines: *const SyncLine, i: u32, field: Field) -> u64 {
        let l = lines.add(i as usize);
        match field {
            Field::Send => arch::load_u64(core::ptr::addr_of!((*l).send)),
            Field::Recv => arch::load_u64(core::ptr::addr_of!((*l).recv)),
        }
    }

    /// Calls `f` with addresses `from..n` in order; the register-held ones are indexed by
    /// constants after unrolling, so `first` never spills to local memory.
    #[inline(always)]
    unsafe fn for_each_from(&self, from: u32, mut f: impl FnMut(u64)) {
        let mut q = 0;
        while q < FAN {
            if (q as u32) >= from && (q as u32) < self.n {
                f(self.first[q]);
            }
            q += 1;
        }
        let mut i = if from > FAN as u32 { from } else { FAN as u32 };
        while i < self.n {
            f(self.far(i));
            i += 1;
        }
    }

    #[inline(always)]
    unsafe fn all_aligned(&self, off: u64) -> bool {
        let mut ok = true;
        self.for_each_from(0, |a| ok &= a.wrapping_add(off) % 16 == 0);
        ok
    }
}

/// Reduce elements `[lo, hi)` of `srcs` into every buffer of `dsts`, spread over all
/// threads of the grid.
///
/// # Safety
/// Every address must be valid for the range; destinations must not be read by other
/// threads during the call except where the caller's protocol allows it.
#[inline(always)]
pub unsafe fn reduce_copy<T: Elem, O: Reduce<T>>(
    ctx: &ExecCtx,
    op: &O,
    srcs: &Addrs,
    dsts: &Addrs,
    lo: u64,
    hi: u64,
) {
    reduce_copy_with::<T, O, false>(ctx, op, srcs, dsts, lo, hi)
}

/// [`reduce_copy`], choosing the cache policy of the single-source vector stores: with `CS`
/// they are `st.global.cs` (streaming: the lines are evicted first, since nothing in the
/// kernel reads them again), else plain write-back stores. Only the copy collectives'
/// kernel is built both ways (`OXCCL_COPY_STORES` picks one); everything else uses
/// [`reduce_copy`].
///
/// # Safety
/// As [`reduce_copy`]; with `CS` every destination must be global memory (device memory, or
/// host memory mapped into the device's address space).
#[inline(always)]
pub unsafe fn reduce_copy_with<T: Elem, O: Reduce<T>, const CS: bool>(
    ctx: &ExecCtx,
    op: &O,
    srcs: &Addrs,
    dsts: &Addrs,
    lo: u64,
    hi: u64,
) {
    if hi <= lo || srcs.n == 0 {
        return;
    }
    let size = core::mem::size_of::<T>() as u64;
    let vec = lanes::<T>() as u64;
    let gt = ctx.global_thread() as u64;
    let nt = ctx.global_threads() as u64;
    let mut scalar_lo = lo;
    if srcs.all_aligned(lo * size) && dsts.all_aligned(lo * size) {
        let nvec = (hi - lo) / vec;
        let mut k = gt;
        if srcs.n == 1 {
            // One source (the copies of broadcast, all-gather, scatter, send/recv): a
            // single load per vector would leave one load in flight per thread, so four
            // vectors are loaded before any is stored (stores fan out to every destination).
            while k + 3 * nt < nvec {
                let o0 = (lo + k * vec) * size;
                let o1 = (lo + (k + nt) * vec) * size;
                let o2 = (lo + (k + 2 * nt) * vec) * size;
                let o3 = (lo + (k + 3 * nt) * vec) * size;
                let base = srcs.first[0];
                let v0 = arch::load_v4((base + o0) as *const [u32; 4]);
                let v1 = arch::load_v4((base + o1) as *const [u32; 4]);
                let v2 = arch::load_v4((base + o2) as *const [u32; 4]);
                let v3 = arch::load_v4((base + o3) as *const [u32; 4]);
                let (v0, v1) = (single_vector::<T, O>(op, v0), single_vector::<T, O>(op, v1));
                let (v2, v3) = (single_vector::<T, O>(op, v2), single_vector::<T, O>(op, v3));
                let st = if CS { arch::store_v4_cs } else { arch::store_v4 };
                dsts.for_each_from(0, |a| {
                    st((a + o0) as *mut [u32; 4], v0);
                    st((a + o1) as *mut [u32; 4], v1);
                    st((a + o2) as *mut [u32; 4], v2);
                    st((a + o3) as *mut [u32; 4], v3);
                });
                k += 4 * nt;
            }
        }
        while k < nvec {
            let off = (lo + k * vec) * size;
            let out = reduce_vector::<T, O>(op, srcs, off);
            dsts.for_each_from(0, |a| arch::store_v4((a + off) as *mut [u32; 4], out));
            k += nt;
        }
        scalar_lo = lo + nvec * vec;
    }
    let mut i = scalar_lo + gt;
    while i < hi {
        let off = i * size;
        let mut acc = op.first(T::load((srcs.first[0] + off) as *const T));
        srcs.for_each_from(1, |a| acc = op.combine(acc, T::load((a + off) as *const T)));
        let out = op.finish(acc);
        dsts.for_each_from(0, |a| T::store((a + off) as *mut T, out));
        i += nt;
    }
}

/// The operator applied to the lanes of one vector of a single source (identity for most
/// operators; PreMulSum still scales).
#[inline(always)]
fn single_vector<T: Elem, O: Reduce<T>>(op: &O, v: [u32; 4]) -> [u32; 4] {
    let mut out = [0u32; 4];
    let mut l = 0;
    while l < lanes::<T>() {
        set_lane::<T>(&mut out, l, op.finish(op.first(get_lane(&v, l))));
        l += 1;
    }
    out
}

/// One 16-byte vector at byte offset `off`, reduced over all sources.
#[inline(always)]
unsafe fn reduce_vector<T: Elem, O: Reduce<T>>(op: &O, srcs: &Addrs, off: u64) -> [u32; 4] {
    let nl = lanes::<T>();
    // All loads of a group are issued before the first use, so they are in flight together.
    let mut v = [[0u32; 4]; FAN];
    let mut q = 0;
    while q < FAN {
        if (q as u32) < srcs.n {
            v[q] = arch::load_v4((srcs.first[q] + off) as *const [u32; 4]);
        }
        q += 1;
    }
    let x0: T = get_lane(&v[0], 0);
    let mut acc = [op.first(x0); 16];
    let mut l = 0;
    while l < nl {
        acc[l] = op.first(get_lane(&v[0], l));
        let mut q = 1;
        while q < FAN {
            if (q as u32) < srcs.n {
                acc[l] = op.combine(acc[l], get_lane(&v[q], l));
            }
            q += 1;
        }
        l += 1;
    }
    // Ranks beyond the first FAN, one at a time (rare: more than FAN ranks on one node).
    let mut q = FAN as u32;
    while q < srcs.n {
        let w = arch::load_v4((srcs.far(q) + off) as *const [u32; 4]);
        let mut l = 0;
        while l < nl {
            acc[l] = op.combine(acc[l], get_lane(&w, l));
            l += 1;
        }
        q += 1;
    }
    let mut out = [0u32; 4];
    let mut l = 0;
    while l < nl {
        set_lane::<T>(&mut out, l, op.finish(acc[l]));
        l += 1;
    }
    out
}
