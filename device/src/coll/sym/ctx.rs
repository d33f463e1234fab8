//! What every symmetric kernel derives from its arguments: the rank, the rank count, the
//! addresses of the scratch area in every rank's copy, the wait policy, and the error
//! reports.

use crate::abi::{
    sym_fingerprint, sym_lines_offset, SymArgs, ERR_MISMATCH, MAX_BLOCKS, MAX_LOCAL_RANKS, SYM_ERROR_FLAG,
    SYM_FLAG_ONE_DEVICE, SYM_KIND_REDUCE_SCATTER, SYM_LINE_BYTES,
};
use crate::api::abi::WindowDesc;
use crate::arch;
use crate::exec::ExecCtx;
use crate::prims::wait::{report_error, WaitError, Waiter};

/// One block's view of one symmetric op.
pub struct SymCtx<'a> {
    pub ctx: &'a ExecCtx,
    pub a: &'a SymArgs,
    /// This rank and the rank count (from the scratch window).
    pub me: u32,
    pub n: u32,
    pub waiter: Waiter,
    /// [`SYM_FLAG_ONE_DEVICE`]: every peer runs on this device, GPU scope suffices.
    pub gpu_scope: bool,
    /// The address of the mailbox lines in rank 0's copy of the scratch (wrapping: the
    /// window layout's arithmetic, `local - rank * stride`), and the byte strides of a
    /// mailbox buffer and of a slot: [`Self::line_of`] is one multiply-add per term from
    /// these, and none of them depends on the op's sequence number, so a kernel can derive
    /// them while its entry loads are in flight (`super::enter_load`).
    lines: u64,
    buffer_bytes: u64,
    slot_bytes: u64,
}

/// `fence.acq_rel.gpu` when every peer runs on this device, else `fence.acq_rel.sys`.
#[inline(always)]
pub fn scoped_fence(gpu_scope: bool) {
    if gpu_scope {
        arch::fence_acq_rel_gpu();
    } else {
        arch::fence_acq_rel_sys();
    }
}

/// Address of byte `off` of rank `q`'s copy of window `w` (wrapping arithmetic, as the
/// window layout defines it).
#[inline(always)]
pub fn peer_addr(w: &WindowDesc, q: u32, off: u64) -> u64 {
    let d = (q as u64).wrapping_sub(w.rank as u64).wrapping_mul(w.stride);
    w.local.wrapping_add(d).wrapping_add(off)
}

impl<'a> SymCtx<'a> {
    /// The context of `a`, unchecked.
    #[inline(always)]
    pub fn of(ctx: &'a ExecCtx, a: &'a SymArgs) -> Self {
        let (me, n) = (a.scratch.rank, a.scratch.nranks);
        let slot_bytes = (a.slot_lines as u64).wrapping_mul(SYM_LINE_BYTES);
        SymCtx {
            ctx,
            a,
            me,
            n,
            waiter: Waiter {
                abort_flag: a.abort_flag,
                timeout_ns: a.timeout_ns,
            },
            gpu_scope: a.flags & SYM_FLAG_ONE_DEVICE != 0,
            lines: peer_addr(&a.scratch, 0, a.scratch_offset.wrapping_add(sym_lines_offset(n))),
            buffer_bytes: slot_bytes.wrapping_mul(n as u64),
            slot_bytes,
        }
    }

    /// `fence.acq_rel` at the scope the peers need ([`Self::gpu_scope`]).
    #[inline(always)]
    pub fn fence(&self) {
        scoped_fence(self.gpu_scope)
    }

    /// Whether the `proto` family can run these arguments; reports why not: unknown kind or
    /// another protocol, no ranks, too many ranks or blocks.
    ///
    /// # Safety
    /// `a.error` must be a valid record or 0.
    #[inline(always)]
    pub unsafe fn runs(&self, proto: u32) -> bool {
        match self.fault(proto) {
            Some(detail) => {
                self.bad_arg(detail);
                false
            }
            None => true,
        }
    }

    /// What [`Self::runs`] reports, without reporting it: `Some(detail)` when the `proto`
    /// family cannot run these arguments. No memory access and no branch on the sequence
    /// number, so a kernel can decide it while its entry loads are in flight.
    #[inline(always)]
    pub fn fault(&self, proto: u32) -> Option<u64> {
        let a = self.a;
        if a.kind > SYM_KIND_REDUCE_SCATTER || a.proto != proto {
            return Some(((a.kind as u64) << 32) | a.proto as u64);
        }
        if self.n == 0
            || self.n as usize > MAX_LOCAL_RANKS
            || self.me >= self.n
            || self.ctx.block as usize >= MAX_BLOCKS
        {
            return Some(self.n as u64);
        }
        None
    }

    /// Report an argument the host should have rejected, as a mismatch without a peer.
    ///
    /// # Safety
    /// `a.error` must be a valid record or 0.
    #[inline(always)]
    pub unsafe fn bad_arg(&self, detail: u64) {
        if self.ctx.thread == 0 {
            report_error(
                self.a.error,
                ERR_MISMATCH,
                self.me,
                u32::MAX,
                self.ctx.block | SYM_ERROR_FLAG,
                self.a.seq,
                detail,
            );
        }
    }

    /// This op's [`sym_fingerprint`] (what its header lines and barriers announce, and what
    /// its error records name).
    #[inline(always)]
    pub fn fingerprint(&self) -> u64 {
        let a = self.a;
        sym_fingerprint(a.kind, a.proto, a.dtype, a.op, a.count)
    }

    /// Record that a wait for `peer` failed (the record names this op: [`SYM_ERROR_FLAG`]).
    ///
    /// # Safety
    /// `a.error` must be a valid record or 0.
    #[inline(always)]
    pub unsafe fn wait_failed(&self, peer: u32, e: WaitError) {
        let block = self.ctx.block | SYM_ERROR_FLAG;
        report_error(
            self.a.error,
            e.code(),
            self.me,
            peer,
            block,
            self.a.seq,
            self.fingerprint(),
        );
    }

    /// Byte `off` of this op's input in rank `q`'s copy.
    #[inline(always)]
    pub fn send_of(&self, q: u32, off: u64) -> u64 {
        peer_addr(&self.a.send, q, self.a.send_offset.wrapping_add(off))
    }

    /// Byte `off` of this op's output in rank `q`'s copy.
    #[inline(always)]
    pub fn recv_of(&self, q: u32, off: u64) -> u64 {
        peer_addr(&self.a.recv, q, self.a.recv_offset.wrapping_add(off))
    }

    /// Byte `off` of the scratch area in rank `q`'s copy.
    #[inline(always)]
    pub fn area_of(&self, q: u32, off: u64) -> u64 {
        peer_addr(&self.a.scratch, q, self.a.scratch_offset.wrapping_add(off))
    }

    /// Line `i` of slot `(buffer, src)` of the mailbox in rank `q`'s copy.
    ///
    /// That is `area_of(q, sym_lines_offset(n) + ((buffer * n + src) * slot_lines + i) *
    /// SYM_LINE_BYTES)`, regrouped (wrapping arithmetic, so the same address) into terms
    /// of which only `buffer` depends on the sequence number.
    #[inline(always)]
    pub fn line_of(&self, q: u32, buffer: u64, src: u32, i: u64) -> *mut [u32; 4] {
        self.lines
            .wrapping_add((q as u64).wrapping_mul(self.a.scratch.stride))
            .wrapping_add(buffer.wrapping_mul(self.buffer_bytes))
            .wrapping_add((src as u64).wrapping_mul(self.slot_bytes))
            .wrapping_add(i.wrapping_mul(SYM_LINE_BYTES)) as *mut [u32; 4]
    }

    /// The byte distance between the same line of two consecutive writers' slots
    /// (`line_of(q, b, s + 1, i) - line_of(q, b, s, i)`).
    #[inline(always)]
    pub fn slot_bytes(&self) -> u64 {
        self.slot_bytes
    }
}
