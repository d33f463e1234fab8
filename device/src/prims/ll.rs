//! The LL ("low latency") line protocol: data and its flag travel in one 16-byte store, so
//! a reader needs no barrier, fence or separate flag to know the data arrived.
//!
//! # Line format
//! ```text
//!  word 0      word 1   word 2      word 3
//! +-----------+--------+-----------+--------+
//! | data[0:4] |  flag  | data[4:8] |  flag  |   16 bytes, 16-byte aligned
//! +-----------+--------+-----------+--------+
//! ```
//! Written with one `st.volatile.v4.u32` ([`put`]), polled with `ld.volatile.v4.u32`
//! ([`try_get`]); `volatile` is `relaxed` at system scope in the PTX memory model, so the
//! accesses are never cached in L1, split, merged or hoisted, and work on peer (NVLink /
//! VMM-mapped) memory. The flag is repeated in each 8-byte half: like NCCL's LL, the protocol
//! only relies on each 8-byte `{data, flag}` half landing whole (the hardware performs a
//! 16-byte vector store as one access; a reader that saw only one new half keeps polling).
//! On the host target the four words are stored first to last with release and loaded last
//! to first with acquire (`arch::host`), which gives the same guarantee.
//!
//! # Region (in each rank's inbox, `prims::layout`)
//! `[2 parities][nranks sources][1 header + L data lines]`. Slot `(p, s)` of rank `r`'s inbox
//! is written only by rank `s`, for operations of parity `p`. The header carries the
//! writer's fingerprint as its 8 data bytes, so a reader tells a peer that called a
//! different operation from one that is merely late.
//!
//! # Flags, parities, generations
//! An LL operation with barrier epoch base `e` (even; [`crate::abi::AllReduceArgs::epoch`])
//! uses flag [`flag_of`]`(e) = low32(e + 1)` (odd, so never the 0 of fresh memory) and parity
//! [`parity_of`]`(e)` (the operation's index mod 2). Within one generation
//! ([`generation_of`]: `(e + 1) >> 32`) no two operations share a flag, so a line left by an
//! earlier operation never matches. When the generation changes, the first LL operation of
//! the new one clears its rank's region between two barriers (the host sets
//! `LL_FLAG_RESET`; once every 2^31 operations), so old flags cannot come back.
//!
//! # Why two parities suffice (no barrier, no reset per operation)
//! Let X and Y be operations with the same parity, Y later, and rank `s` a fast writer,
//! rank `r` a slow reader. Between X and Y there is at least one operation W (parities
//! alternate with the operation index, and every operation of the communicator takes part
//! on every rank in the same order). `s` starts Y only after it completed W. If W is an LL
//! operation, `s` completed it after reading `r`'s W lines, which `r` stored after it
//! completed X (kernels of a rank are stream-ordered); if W has barriers, `s` passed them
//! only after `r` arrived, also after `r` completed X. Either way `s` writes `r`'s slot
//! `(parity, s)` for Y only after `r` finished reading it for X.
//!
//! # Pairings
//! - [`put`] (relaxed.sys v4 store by the writer) pairs with [`try_get`] (relaxed.sys v4 load
//!   by the reader) of the same line: the data is in the same access as its flag, so no
//!   acquire is needed to read it.
//! - The reset's zero stores are ordered before the peers' next stores by the barrier
//!   (`st.release.sys` arrive / `ld.acquire.sys` wait, cumulative through `bar.sync`).

use crate::arch;
use crate::prims::layout::ll_offset;
use crate::prims::wait::{WaitError, Waiter};

/// Bytes of one line.
pub const LINE_BYTES: u64 = 16;

/// Data bytes of one line.
pub const LINE_DATA: u64 = 8;

/// How long a peer must look like it called a different operation (its barrier line at this
/// operation's entry epoch with another fingerprint, its LL header absent) before a reader
/// reports a mismatch: a peer that is merely ahead published this operation's lines before
/// its next arrival, and they become visible far sooner than this.
pub const MISMATCH_CONFIRM_NS: u64 = 1_000_000;

/// The flag of the LL operation with epoch base `epoch` (odd: never 0).
#[inline(always)]
pub const fn flag_of(epoch: u64) -> u32 {
    (epoch.wrapping_add(1) as u32) | 1
}

/// The parity (half of the region) of the LL operation with epoch base `epoch`.
#[inline(always)]
pub const fn parity_of(epoch: u64) -> u32 {
    ((epoch >> 1) & 1) as u32
}

/// The flag generation of epoch base `epoch`: flags are unique within one generation.
#[inline(always)]
pub const fn generation_of(epoch: u64) -> u64 {
    epoch.wrapping_add(1) >> 32
}

/// Address of line `line` (0 = header, `1..=lines` data) of slot `(parity, src)` in the
/// inbox at `inbox` of an `nranks` communicator with `lines` data lines per slot.
#[inline(always)]
pub fn line_ptr(inbox: u64, nranks: u32, lines: u32, parity: u32, src: u32, line: u64) -> *mut [u32; 4] {
    let slot = (parity as u64 * nranks as u64 + src as u64) * (lines as u64 + 1);
    (inbox + ll_offset(nranks) as u64 + (slot + line) * LINE_BYTES) as *mut [u32; 4]
}

/// Store 8 data bytes with `flag` into line `p` (one 16-byte store).
///
/// # Safety
/// `p` must be a valid, 16-byte aligned line that only this writer stores to in this
/// operation.
#[inline(always)]
pub unsafe fn put(p: *mut [u32; 4], data: u64, flag: u32) {
    arch::store_v4_volatile(p, [data as u32, flag, (data >> 32) as u32, flag]);
}

/// The 8 data bytes of line `p` if both its flags are `flag`.
///
/// # Safety
/// `p` must be a valid, 16-byte aligned line.
#[inline(always)]
pub unsafe fn try_get(p: *const [u32; 4], flag: u32) -> Option<u64> {
    let v = arch::load_v4_volatile(p);
    if v[1] == flag && v[3] == flag {
        Some(v[0] as u64 | (v[2] as u64) << 32)
    } else {
        None
    }
}

/// Why an LL wait gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LlWaitError {
    /// Abort or timeout (as for every wait).
    Wait(WaitError),
    /// The peer called a different operation; carries its fingerprint.
    Mismatch(u64),
}

/// Poll line `p` until both flags are `flag`; returns its data. Every
/// [`arch::SPINS_PER_CHECK`] spins (every spin on the host) it checks the abort flag, the
/// deadline, and `peer_fp()`: `Some(fp)` when the peer looks like it called an operation with
/// fingerprint `fp` instead (reported once that lasted [`MISMATCH_CONFIRM_NS`]).
///
/// # Safety
/// `p` must be a valid, 16-byte aligned line of this rank's inbox.
#[inline(always)]
pub unsafe fn wait_line(
    w: &Waiter,
    p: *const [u32; 4],
    flag: u32,
    mut peer_fp: impl FnMut() -> Option<u64>,
) -> Result<u64, LlWaitError> {
    let mut spins: u32 = 0;
    let mut total: u32 = 0;
    let mut start: u64 = 0;
    let mut suspect: u64 = 0;
    loop {
        if let Some(d) = try_get(p, flag) {
            return Ok(d);
        }
        spins += 1;
        total = total.saturating_add(1);
        arch::spin_backoff(total);
        if spins >= arch::SPINS_PER_CHECK || cfg!(not(target_arch = "nvptx64")) {
            spins = 0;
            w.check_abort().map_err(LlWaitError::Wait)?;
            let now = arch::globaltimer() | 1;
            match peer_fp() {
                Some(fp) => {
                    if suspect == 0 {
                        suspect = now;
                    } else if now.wrapping_sub(suspect) > MISMATCH_CONFIRM_NS {
                        return Err(LlWaitError::Mismatch(fp));
                    }
                }
                None => suspect = 0,
            }
            if start == 0 {
                start = now;
            } else if w.timeout_ns != 0 && now.wrapping_sub(start) > w.timeout_ns {
                let v = arch::load_v4_volatile(p);
                return Err(LlWaitError::Wait(WaitError::Timeout { last: v[1] as u64 }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_odd_and_unique_within_a_generation() {
        let mut seen = std::collections::HashSet::new();
        for k in 0..10_000u64 {
            let e = 2 * k;
            assert_eq!(flag_of(e) & 1, 1);
            assert!(seen.insert(flag_of(e)));
            assert_eq!(parity_of(e), (k & 1) as u32);
            assert_eq!(generation_of(e), 0);
        }
        // The last operation of generation 0 and the first of generation 1.
        let last = (1u64 << 32) - 2;
        assert_eq!(generation_of(last), 0);
        assert_eq!(generation_of(last + 2), 1);
        assert_eq!(flag_of(last + 2), 1);
    }

    #[test]
    fn put_then_get_round_trips_and_other_flags_miss() {
        let mut line = [[0u32; 4]; 1];
        let p = line.as_mut_ptr();
        // SAFETY: a local, aligned line.
        unsafe {
            assert_eq!(try_get(p, 7), None);
            put(p, 0x1122_3344_5566_7788, 7);
            assert_eq!(try_get(p, 7), Some(0x1122_3344_5566_7788));
            assert_eq!(try_get(p, 9), None);
        }
    }
}
