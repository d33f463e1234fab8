//! Phase timestamps of the Lamport and LL kernels, for latency work only (issue 4's
//! small-message latency; the phases inside the op are marked in the one-shot all-reduce and
//! the reduce-scatter, other kinds print the entry and end phases only). Compiled in when
//! the device crate is built with the environment variable `OXCCL_SYM_TIMELINE` set
//! (`OXCCL_SYM_TIMELINE=1 cargo run -p oxccl-builder`), absent from every other build
//! ([`ON`] is a constant, so the marks fold away).
//!
//! Global thread 0 of each rank reads `%clock64` at the kernel's entry and after each phase
//! ([`Mark`]) and keeps the values in a table in the module's global memory, one row per
//! rank of the process; at the end of every op whose `seq` is a multiple of [`EVERY`], it
//! prints the row with `vprintf` (the CUDA printf buffer, written to the process's standard
//! output when the host next synchronizes). The deltas are SM clock cycles. The table is
//! read only in the op that prints; the marks cost one clock read and one store each.
//! With the row it prints global thread 0's unsuccessful spins on its first peer line
//! (`polls`), which tells a late line (many spins) from a slow poll (few).

/// Whether the timeline is compiled in.
pub const ON: bool = option_env!("OXCCL_SYM_TIMELINE").is_some();

/// Print every op whose `seq` is a multiple of this.
pub const EVERY: u64 = 256;

/// The phases, in kernel order.
#[derive(Clone, Copy)]
#[repr(usize)]
pub enum Mark {
    /// First instruction (before `griddepcontrol.wait`).
    Entry = 0,
    /// `griddepcontrol.wait` returned.
    Waited,
    /// Error record and sequence slot loaded, block barrier passed (`super::enter`).
    Entered,
    /// Arguments checked, kind and operator dispatched: the op's body begins.
    Dispatched,
    /// Header lines stored (global thread 0's checks; nothing on one rank).
    Header,
    /// Input loaded and every line stored into the peers' mailboxes.
    Published,
    /// Every line polled, reduced, output stored.
    Collected,
    /// Sequence slots stored: the end.
    End,
}

#[cfg(target_arch = "nvptx64")]
mod imp {
    use super::Mark;
    use crate::abi::MAX_LOCAL_RANKS;
    use core::arch::asm;

    const MARKS: usize = Mark::End as usize + 1;

    static mut TABLE: [[u64; MARKS]; MAX_LOCAL_RANKS] = [[0; MARKS]; MAX_LOCAL_RANKS];
    static mut POLLS: [u64; MAX_LOCAL_RANKS] = [0; MAX_LOCAL_RANKS];

    extern "C" {
        fn vprintf(format: *const u8, args: *const u8) -> i32;
    }

    #[inline(always)]
    pub fn clock() -> u64 {
        let v: u64;
        // SAFETY: reads a special register; not `nomem`, so the compiler keeps it in place
        // among the memory operations around it.
        unsafe { asm!("mov.u64 {v}, %clock64;", v = out(reg64) v, options(nostack)) };
        v
    }

    /// # Safety
    /// One thread per rank of the process.
    #[inline(always)]
    pub unsafe fn store(me: u32, m: Mark, t: u64) {
        let row = core::ptr::addr_of_mut!(TABLE[me as usize % MAX_LOCAL_RANKS]);
        crate::arch::store_volatile_u64((row as *mut u64).wrapping_add(m as usize), t);
    }

    /// # Safety
    /// As [`store`].
    pub unsafe fn store_polls(me: u32, n: u64) {
        let p = core::ptr::addr_of_mut!(POLLS[me as usize % MAX_LOCAL_RANKS]);
        crate::arch::store_volatile_u64(p, n);
    }

    /// # Safety
    /// As [`store`].
    pub unsafe fn print(me: u32, seq: u64, count: u64) {
        let row = core::ptr::addr_of_mut!(TABLE[me as usize % MAX_LOCAL_RANKS]) as *mut u64;
        let mut args = [0u64; MARKS + 3];
        args[0] = me as u64;
        args[1] = seq;
        args[2] = count;
        let t0 = crate::arch::load_volatile_u64(row);
        let mut prev = t0;
        let mut i = 1;
        while i < MARKS {
            let t = crate::arch::load_volatile_u64(row.wrapping_add(i));
            args[i + 2] = t.wrapping_sub(prev);
            prev = t;
            i += 1;
        }
        args[MARKS + 2] =
            crate::arch::load_volatile_u64(core::ptr::addr_of_mut!(POLLS[me as usize % MAX_LOCAL_RANKS]));
        vprintf(
            b"oxccl-timeline rank %llu seq %llu count %llu cycles wait %llu enter %llu dispatch %llu header %llu publish %llu collect %llu end %llu polls %llu\n\0"
                .as_ptr(),
            args.as_ptr() as *const u8,
        );
    }
}

/// `%clock64` when [`ON`] (0 otherwise).
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    if ON {
        return imp::clock();
    }
    0
}

/// Record mark `m` at time `t` ([`now`]) for rank `me`, in global thread 0 only.
///
/// # Safety
/// Called with the kernel's own rank, global thread index and a time from [`now`].
#[inline(always)]
pub unsafe fn record(gt: u64, me: u32, m: Mark, t: u64) {
    #[cfg(target_arch = "nvptx64")]
    if ON && gt == 0 {
        imp::store(me, m, t);
    }
    let _ = (gt, me, m, t);
}

/// [`record`] of mark `m` now.
///
/// # Safety
/// As [`record`].
#[inline(always)]
pub unsafe fn mark(gt: u64, me: u32, m: Mark) {
    if ON {
        record(gt, me, m, now());
    }
}

/// Global thread 0's unsuccessful spins on its first peer line (and header) of the op.
///
/// # Safety
/// As [`record`].
#[inline(always)]
pub unsafe fn polls(gt: u64, me: u32, n: u32) {
    #[cfg(target_arch = "nvptx64")]
    if ON && gt == 0 {
        imp::store_polls(me, n as u64);
    }
    let _ = (gt, me, n);
}

/// At the end of the op: print this rank's row when `seq` is a multiple of [`EVERY`].
///
/// # Safety
/// As [`record`].
#[inline(always)]
pub unsafe fn end(gt: u64, me: u32, seq: u64, count: u64) {
    #[cfg(target_arch = "nvptx64")]
    if ON && gt == 0 {
        imp::store(me, Mark::End, imp::clock());
        if seq.is_multiple_of(EVERY) {
            imp::print(me, seq, count);
        }
    }
    let _ = (gt, me, seq, count);
}
