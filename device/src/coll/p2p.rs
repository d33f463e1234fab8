//! The p2p kernel: the sends and receives of one group launch of one rank
//! ([`P2pArgs`]), each on its own blocks, all in progress at once, so that any order of
//! posting (receive before send, many peers, a rank sending to itself) completes.
//!
//! # Matching
//! The `k`-th send from rank `s` to rank `r` (counted from 1 over the communicator's life,
//! [`P2pOp::seq`]) matches the `k`-th receive of `r` from `s`. Each side only ever has one
//! of its operations with a given peer and direction in progress: a receive waits until the
//! previous receive from the same peer completed (`recv_seq` of its own mailbox), a send
//! waits until the receiver announced a receive with its sequence number (which the
//! receiver does only after completing the previous one). One mailbox per ordered pair
//! therefore suffices (see [`P2pMailbox`]).
//!
//! # Direct mode (one address space: every rank's buffers are addressable by its peers)
//! Receiver `r`, receive `k` from `s`:
//! 1. wait for `recv_seq` of its mailbox for `s` to reach `k - 1`;
//! 2. reset `done_count` of that mailbox to 0, then publish `ready_addr` (its buffer),
//!    `ready_posted` (count and dtype) in `s`'s mailbox for `r`, `fence.acq_rel.sys`, and
//!    `ready_seq = k` with `st.release.sys`;
//! 3. wait (`ld.acquire.sys`) for `done_count >= bytes + 1`, compare `done_posted` with its
//!    own posting, store `recv_seq = k` (release).
//!
//! Sender `s`, send `k` to `r`, on each of its `L` lanes (blocks) `l`:
//! 1. wait for `ready_seq >= k` in its own mailbox for `r` (acquire);
//! 2. if `ready_posted` differs from its own posting: lane 0 reports the mismatch, stores
//!    `done_posted` and adds [`P2P_MISMATCH_MARK`] to `r`'s `done_count`; nothing is copied;
//! 3. else copy its share (`chunk(bytes, L, l)`) into `ready_addr`, `bar.sync`, and add the
//!    share's bytes (lane 0: plus 1, after storing `done_posted`) to `r`'s `done_count` with
//!    `red.release.sys`.
//!
//! The reset in receiver step 2 is ordered before every add of this operation: the adds
//! follow the sender's acquire of `ready_seq`, which the reset precedes (release). The count
//! reaches `bytes + 1` only once every lane added (lane 0's 1 included), so the receiver's
//! acquire makes every lane's stores and lane 0's `done_posted` visible (the adds extend
//! each lane's release sequence).
//!
//! # Staged mode (ranks in several processes: user buffers are private to their process)
//! The sender keeps one slot of `slot_bytes` in its staging input half per receiver, cut in
//! two sub-buffers used alternately by consecutive chunks. Receiver steps 1–2 as above
//! (without an address, and with `ready_consumed = (k << 32) + 0`); the sender then publishes
//! `done_posted` and `done_count = 1` (or the mark on a mismatch), and for chunk `c`: waits
//! for `ready_consumed >= (k << 32) + c - 1` (the sub-buffer's previous chunk was copied out), copies the
//! chunk from its buffer into the sub-buffer, `done_count = c + 2` (release). The receiver
//! waits for `done_count >= 1`, compares postings, then for every chunk waits for
//! `done_count >= c + 2`, copies the chunk out of the sender's slot (mapped in its address
//! space) and publishes `ready_consumed = (k << 32) + c + 1` (release). The sender completes
//! once `ready_consumed` reached the number of chunks, so nothing reads its staging half
//! after its kernel ended (the next collective may overwrite it). The sequence number in the
//! high half keeps that last wait correct when the receiver already announced receive
//! `k + 1` (rolling compare: `(k + 1) << 32` is past every target of receive `k`).
//!
//! # Failures
//! Every wait polls the abort flag and the timeout ([`Waiter`]); a block that gives up
//! records the error (peer, the operation's index and the launch serial in
//! [`crate::abi::ErrorRecord::block`] with [`P2P_ERROR_FLAG`]) and stops. A mismatch is
//! recorded on both sides (each names the other and carries the other's posting) and the
//! two operations complete without moving data, so later operations stay matched.

use crate::abi::{
    DataType, P2pArgs, P2pMailbox, P2pOp, ERR_MISMATCH, P2P_ERROR_FLAG, P2P_MAX_OPS, P2P_MISMATCH_MARK,
    P2P_STAGED,
};
use crate::arch;
use crate::coll::frame::chunk;
use crate::coll::reduce_copy::{reduce_copy, Addrs};
use crate::exec::ExecCtx;
use crate::ops::Sum;
use crate::prims::barrier::inbox_of;
use crate::prims::layout::mailbox_addr;
use crate::prims::wait::{failed_before, report_error, Waiter};

/// The `ready_consumed` word of receive `seq` after `chunks` chunks: the sequence number in
/// the high half, so that a sender waiting for the last chunks of one receive also stops
/// waiting when the receiver announces its next one (which resets the chunk count). The host
/// keeps the chunks of one operation below 2^32.
#[inline(always)]
const fn consumed_word(seq: u64, chunks: u64) -> u64 {
    (seq << 32).wrapping_add(chunks)
}

/// The operation block `ctx.block` works on: (op, lane, index in the launch).
struct Work {
    op: P2pOp,
    lane: u32,
    slot: u32,
}

/// Find this block's operation. The operations are visited with constant indices (the
/// visit is unrolled by the macro), so the by-value arguments are read at fixed offsets and
/// never copied to local memory.
#[inline(always)]
fn find_work(ctx: &ExecCtx, a: &P2pArgs) -> Option<Work> {
    let mut first = 0u32;
    let mut found: Option<Work> = None;
    let mut visit = |i: usize| {
        if i < P2P_MAX_OPS && (i as u32) < a.nops {
            let op = a.ops[i];
            let lanes = op.lanes();
            if ctx.block >= first && ctx.block - first < lanes {
                found = Some(Work {
                    op,
                    lane: ctx.block - first,
                    slot: i as u32,
                });
            }
            first = first.wrapping_add(lanes);
        }
    };
    macro_rules! visit_all {
        ($($i:literal)*) => { $( visit($i); )* };
    }
    visit_all!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63);
    found
}

const _: () = assert!(
    P2P_MAX_OPS == 64,
    "find_work visits exactly P2P_MAX_OPS operations"
);

/// Sends and receives of one group launch (see the module docs).
///
/// # Safety
/// `a` must describe valid buffers of this rank and a valid communicator whose inboxes hold
/// the p2p mailboxes; called by every thread of every block of the launch, whose grid is the
/// sum of the operations' lanes.
#[inline(always)]
pub unsafe fn p2p(ctx: &ExecCtx, a: &P2pArgs) {
    let comm = &a.comm;
    if comm.nranks == 0 || (a.epoch > 0 && failed_before(comm.error, a.epoch - 1)) {
        return;
    }
    let Some(w) = find_work(ctx, a) else {
        return;
    };
    if w.op.peer >= comm.nranks {
        return;
    }
    let size = DataType::from_u32(w.op.dtype()).map_or(1, |d| d.size()) as u64;
    let bytes = w.op.count.wrapping_mul(size);
    let side = Side { ctx, a, w: &w, bytes };
    match (a.mode == P2P_STAGED, w.op.is_recv()) {
        (false, false) => side.direct_send(),
        (false, true) => side.direct_recv(),
        (true, false) => side.staged_send(),
        (true, true) => side.staged_recv(),
    }
}

/// One block's side of one operation.
struct Side<'a> {
    ctx: &'a ExecCtx,
    a: &'a P2pArgs,
    w: &'a Work,
    /// Bytes this rank posted.
    bytes: u64,
}

impl Side<'_> {
    /// This rank's mailbox for the peer.
    #[inline(always)]
    unsafe fn own(&self) -> *mut P2pMailbox {
        let c = &self.a.comm;
        mailbox_addr(inbox_of(c, c.rank), c.nranks, self.w.op.peer)
    }

    /// The peer's mailbox for this rank.
    #[inline(always)]
    unsafe fn theirs(&self) -> *mut P2pMailbox {
        let c = &self.a.comm;
        mailbox_addr(inbox_of(c, self.w.op.peer), c.nranks, c.rank)
    }

    /// Record an error of this operation.
    #[inline(always)]
    unsafe fn report(&self, code: u32, detail: u64) {
        let c = &self.a.comm;
        let block = P2P_ERROR_FLAG | ((self.a.serial & 0x7fff) << 16) | (self.w.slot & 0xffff);
        report_error(c.error, code, c.rank, self.w.op.peer, block, self.a.epoch, detail);
    }

    /// Thread 0 waits for `*p >= target` (rolling); every thread of the block returns whether
    /// it got there (on abort or timeout the error is recorded).
    #[inline(always)]
    unsafe fn wait(&self, p: *const u64, target: u64) -> bool {
        let mut failed = false;
        if self.ctx.thread == 0 {
            let waiter = Waiter {
                abort_flag: self.a.comm.abort_flag,
                timeout_ns: self.a.comm.timeout_ns,
            };
            if let Err(e) = waiter.wait_geq_acquire_sys(p, target) {
                let last = match e {
                    crate::prims::wait::WaitError::Timeout { last } => last,
                    crate::prims::wait::WaitError::Aborted => 0,
                };
                self.report(e.code(), last);
                failed = true;
            }
        }
        !self.ctx.sync_threads_or(failed)
    }

    /// Copy `bytes` from `src` to `dst` with the threads of this block.
    #[inline(always)]
    unsafe fn copy(&self, dst: u64, src: u64, bytes: u64) {
        let local = ExecCtx {
            thread: self.ctx.thread,
            block_dim: self.ctx.block_dim,
            block: 0,
            grid_dim: 1,
        };
        reduce_copy::<u8, Sum>(&local, &Sum, &Addrs::one(src), &Addrs::one(dst), 0, bytes);
    }

    /// Receiver steps 1 and 2: wait for the previous receive from the peer, reset the done
    /// line, announce this receive (buffer `addr`) in the peer's mailbox.
    #[inline(always)]
    unsafe fn announce(&self, addr: u64) -> bool {
        let own = self.own();
        if !self.wait(
            core::ptr::addr_of!((*own).recv_seq),
            self.w.op.seq.wrapping_sub(1),
        ) {
            return false;
        }
        if self.ctx.thread == 0 {
            let t = self.theirs();
            arch::store_u64(core::ptr::addr_of_mut!((*own).done_count), 0);
            arch::store_u64(core::ptr::addr_of_mut!((*own).done_posted), 0);
            arch::store_u64(core::ptr::addr_of_mut!((*t).ready_addr), addr);
            arch::store_u64(core::ptr::addr_of_mut!((*t).ready_posted), self.w.op.posting());
            arch::store_u64(
                core::ptr::addr_of_mut!((*t).ready_consumed),
                consumed_word(self.w.op.seq, 0),
            );
            arch::fence_acq_rel_sys();
            arch::store_release_sys_u64(core::ptr::addr_of_mut!((*t).ready_seq), self.w.op.seq);
        }
        true
    }

    /// Compare the sender's posting with ours (after its `done_count` was acquired); reports
    /// a mismatch. Returns whether they agree.
    #[inline(always)]
    unsafe fn sender_agrees(&self) -> bool {
        let own = self.own();
        let theirs = arch::load_u64(core::ptr::addr_of!((*own).done_posted));
        if theirs != self.w.op.posting() {
            if self.ctx.thread == 0 {
                self.report(ERR_MISMATCH, theirs);
            }
            return false;
        }
        true
    }

    /// Receiver's last step: this receive from the peer is complete.
    #[inline(always)]
    unsafe fn complete_recv(&self) {
        self.ctx.sync_threads();
        if self.ctx.thread == 0 {
            let own = self.own();
            arch::fence_acq_rel_sys();
            arch::store_release_sys_u64(core::ptr::addr_of_mut!((*own).recv_seq), self.w.op.seq);
        }
    }

    /// Sender step 1 and the posting check: wait for the announcement of this send's
    /// receive; on a mismatch lane 0 reports it and releases the receiver with
    /// `mark(done_count)`. Returns whether the data may move.
    #[inline(always)]
    unsafe fn await_receiver(&self, mark: impl Fn(*mut u64)) -> bool {
        let own = self.own();
        if !self.wait(core::ptr::addr_of!((*own).ready_seq), self.w.op.seq) {
            return false;
        }
        let posted = arch::load_u64(core::ptr::addr_of!((*own).ready_posted));
        if posted == self.w.op.posting() {
            return true;
        }
        if self.ctx.thread == 0 && self.w.lane == 0 {
            self.report(ERR_MISMATCH, posted);
            let t = self.theirs();
            arch::store_u64(core::ptr::addr_of_mut!((*t).done_posted), self.w.op.posting());
            arch::fence_acq_rel_sys();
            mark(core::ptr::addr_of_mut!((*t).done_count));
        }
        false
    }

    unsafe fn direct_recv(&self) {
        if !self.announce(self.w.op.addr) {
            return;
        }
        let own = self.own();
        if !self.wait(core::ptr::addr_of!((*own).done_count), self.bytes.wrapping_add(1)) {
            return;
        }
        self.sender_agrees();
        self.complete_recv();
    }

    unsafe fn direct_send(&self) {
        // SAFETY (of the closure's add): `p` is the receiver's done_count.
        let mark = |p: *mut u64| unsafe { arch::red_add_release_sys_u64(p, P2P_MISMATCH_MARK) };
        if !self.await_receiver(mark) {
            return;
        }
        let own = self.own();
        let dst = arch::load_u64(core::ptr::addr_of!((*own).ready_addr));
        let (lo, hi) = chunk(self.bytes, self.w.op.lanes(), self.w.lane, 16);
        self.copy(dst.wrapping_add(lo), self.w.op.addr.wrapping_add(lo), hi - lo);
        self.ctx.sync_threads();
        if self.ctx.thread == 0 {
            let t = self.theirs();
            let first = self.w.lane == 0;
            if first {
                arch::store_u64(core::ptr::addr_of_mut!((*t).done_posted), self.w.op.posting());
            }
            let add = (hi - lo) + first as u64;
            if add > 0 {
                arch::fence_acq_rel_sys();
                arch::red_add_release_sys_u64(core::ptr::addr_of_mut!((*t).done_count), add);
            }
        }
    }

    /// Bytes of one sub-buffer of a staging slot (a multiple of 16, at least 16: the host
    /// checks the slot holds two).
    #[inline(always)]
    fn sub_bytes(&self) -> u64 {
        let sub = (self.a.slot_bytes / 2) & !15;
        if sub == 0 {
            16
        } else {
            sub
        }
    }

    unsafe fn staged_send(&self) {
        let mark = |p: *mut u64| unsafe { arch::store_release_sys_u64(p, P2P_MISMATCH_MARK) };
        if !self.await_receiver(mark) {
            return;
        }
        let c = &self.a.comm;
        let t = self.theirs();
        let done = core::ptr::addr_of_mut!((*t).done_count);
        if self.ctx.thread == 0 {
            arch::store_u64(core::ptr::addr_of_mut!((*t).done_posted), self.w.op.posting());
            arch::fence_acq_rel_sys();
            arch::store_release_sys_u64(done, 1);
        }
        let own = self.own();
        let consumed = core::ptr::addr_of!((*own).ready_consumed);
        let slot = inbox_of(c, c.rank)
            .wrapping_add(self.a.stage_offset)
            .wrapping_add(self.w.op.peer as u64 * self.a.slot_bytes);
        let sub = self.sub_bytes();
        let chunks = self.bytes.div_ceil(sub);
        let mut k = 0u64;
        while k < chunks {
            if k >= 2 && !self.wait(consumed, consumed_word(self.w.op.seq, k - 1)) {
                return;
            }
            let off = k * sub;
            let len = if self.bytes - off < sub {
                self.bytes - off
            } else {
                sub
            };
            self.copy(slot + (k & 1) * sub, self.w.op.addr.wrapping_add(off), len);
            self.ctx.sync_threads();
            if self.ctx.thread == 0 {
                arch::fence_acq_rel_sys();
                arch::store_release_sys_u64(done, k + 2);
            }
            k += 1;
        }
        // Drain: the receiver no longer reads the slot once it consumed every chunk (or
        // announced its next receive, which it does only after that).
        self.wait(consumed, consumed_word(self.w.op.seq, chunks));
    }

    unsafe fn staged_recv(&self) {
        if !self.announce(0) {
            return;
        }
        let c = &self.a.comm;
        let own = self.own();
        let done = core::ptr::addr_of!((*own).done_count);
        if !self.wait(done, 1) {
            return;
        }
        if !self.sender_agrees() {
            self.complete_recv();
            return;
        }
        let t = self.theirs();
        let consumed = core::ptr::addr_of_mut!((*t).ready_consumed);
        let slot = inbox_of(c, self.w.op.peer)
            .wrapping_add(self.a.stage_offset)
            .wrapping_add(c.rank as u64 * self.a.slot_bytes);
        let sub = self.sub_bytes();
        let chunks = self.bytes.div_ceil(sub);
        let mut k = 0u64;
        while k < chunks {
            if !self.wait(done, k + 2) {
                return;
            }
            let off = k * sub;
            let len = if self.bytes - off < sub {
                self.bytes - off
            } else {
                sub
            };
            self.copy(self.w.op.addr.wrapping_add(off), slot + (k & 1) * sub, len);
            self.ctx.sync_threads();
            if self.ctx.thread == 0 {
                arch::fence_acq_rel_sys();
                arch::store_release_sys_u64(consumed, consumed_word(self.w.op.seq, k + 1));
            }
            k += 1;
        }
        self.complete_recv();
    }
}
