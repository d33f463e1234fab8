//! The Device API's LSA barrier session on host threads standing for ranks, over a host
//! buffer laid out as a flat range (`oxccl_device::api::flat`): back-to-back syncs with data
//! checks, epochs persisted across "kernels", timeouts for a missing rank, the abort flag,
//! and the same through the C exports.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use oxccl_device::api::abi::DevComm;
use oxccl_device::api::export::*;
use oxccl_device::api::flat::FlatLayout;
use oxccl_device::api::{Block, Coop, DevError, LsaBarrierSession, MemOrder, Thread, Warp};
use oxccl_device::arch;

/// A zeroed, 4 KiB-aligned host flat range.
struct Flat {
    mem: Vec<u64>,
    layout: FlatLayout,
}

impl Flat {
    fn new(ranks: u32, barriers: u32, user_bytes: u64) -> Self {
        let layout = FlatLayout::new(ranks, barriers, user_bytes);
        let words = (layout.total_bytes() + 4096) as usize / 8;
        Flat {
            mem: vec![0u64; words],
            layout,
        }
    }

    fn base(&self) -> u64 {
        (self.mem.as_ptr() as u64).div_ceil(4096) * 4096
    }

    fn comm(&self, rank: u32, abort: &AtomicU32, timeout: Duration) -> DevComm {
        self.layout.dev_comm(
            self.base(),
            rank,
            abort.as_ptr() as u64,
            timeout.as_nanos() as u64,
        )
    }
}

/// Runs `f(rank)` on one thread per rank and returns the results in rank order.
fn on_ranks<T: Send>(n: u32, f: impl Fn(u32) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = (0..n).map(|r| s.spawn(move || f(r))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

const LONG: Duration = Duration::from_secs(60);

#[test]
fn back_to_back_syncs_carry_data() {
    let n = 4u32;
    let iters = 300u64;
    // Two parity slots of n u64 per rank.
    let flat = Flat::new(n, 2, 2 * n as u64 * 8);
    let abort = AtomicU32::new(0);
    on_ranks(n, |r| {
        let comm = flat.comm(r, &abort, LONG);
        let win = flat.layout.user_window(flat.base(), r);
        // SAFETY: the flat range is live and zeroed; barrier 1 is used by this thread only.
        let mut bar = unsafe { LsaBarrierSession::new(Thread, &comm, 1) };
        for i in 0..iters {
            let slot = (i % 2) * n as u64 * 8 + 8 * r as u64;
            for q in 0..n {
                // SAFETY: inside peer q's user bytes.
                unsafe { arch::store_u64(win.lsa_ptr(slot, q) as *mut u64, i * 100 + r as u64) };
            }
            bar.try_sync(MemOrder::AcqRel).unwrap();
            for s in 0..n {
                let at = (i % 2) * n as u64 * 8 + 8 * s as u64;
                // SAFETY: inside this rank's user bytes.
                let v = unsafe { arch::load_u64(win.local_ptr(at) as *const u64) };
                assert_eq!(v, i * 100 + s as u64, "rank {r} iteration {i} slot of {s}");
            }
        }
        assert_eq!(bar.epoch(), iters);
    });
}

#[test]
fn epoch_persists_across_kernels_and_orders_mix() {
    let n = 3u32;
    let flat = Flat::new(n, 4, 0);
    let abort = AtomicU32::new(0);
    let orders = [
        MemOrder::Relaxed,
        MemOrder::Acquire,
        MemOrder::Release,
        MemOrder::AcqRel,
    ];
    for kernel in 0..5u64 {
        on_ranks(n, |r| {
            let comm = flat.comm(r, &abort, LONG);
            // SAFETY: live zeroed range; barrier 3 used by one coop per rank.
            let mut bar = unsafe { LsaBarrierSession::new(Warp, &comm, 3) };
            assert_eq!(bar.epoch(), kernel * 8);
            for k in 0..8 {
                let o = orders[k % 4];
                if k % 2 == 0 {
                    bar.sync(o);
                } else {
                    bar.arrive(o);
                    bar.wait(o);
                }
                assert_eq!(bar.error(), None);
            }
            bar.end();
        });
    }
    // SAFETY: every thread has ended; read the persisted epochs of barrier 3.
    for r in 0..n {
        let c = flat.comm(r, &abort, LONG);
        let v = unsafe { *((c.resource.local + c.lsa_epoch_offset + 8 * 3) as *const u64) };
        assert_eq!(v, 40);
        let other = unsafe { *((c.resource.local + c.lsa_epoch_offset) as *const u64) };
        assert_eq!(other, 0, "barrier 0 untouched");
    }
}

#[test]
fn missing_rank_times_out_and_the_error_sticks() {
    let n = 3u32;
    let flat = Flat::new(n, 1, 0);
    let abort = AtomicU32::new(0);
    let t0 = Instant::now();
    // Rank 2 never starts.
    let res = on_ranks(2, |r| {
        let comm = flat.comm(r, &abort, Duration::from_millis(100));
        // SAFETY: live zeroed range.
        let mut bar = unsafe { LsaBarrierSession::new(Block::current(), &comm, 0) };
        let first = bar.try_sync(MemOrder::AcqRel);
        let again = bar.wait_timeout(MemOrder::AcqRel, 0);
        (first, again, bar.error())
    });
    for (first, again, sticky) in res {
        assert_eq!(first, Err(DevError::Timeout));
        assert_eq!(again, Err(DevError::Timeout));
        assert_eq!(sticky, Some(DevError::Timeout));
    }
    assert!(t0.elapsed() < Duration::from_secs(20));
}

#[test]
fn abort_flag_ends_a_wait_without_timeout() {
    let n = 2u32;
    let flat = Flat::new(n, 1, 0);
    let abort = AtomicU32::new(0);
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let comm = flat.comm(0, &abort, Duration::ZERO);
            // SAFETY: live zeroed range.
            let mut bar = unsafe { LsaBarrierSession::new(Thread, &comm, 0) };
            bar.try_sync(MemOrder::AcqRel)
        });
        std::thread::sleep(Duration::from_millis(50));
        abort.store(1, Ordering::Relaxed);
        assert_eq!(h.join().unwrap(), Err(DevError::Aborted));
    });
}

#[test]
fn c_exports_on_threads() {
    let n = 4u32;
    let flat = Flat::new(n, 2, n as u64 * 8);
    let abort = AtomicU32::new(0);
    let sums = on_ranks(n, |r| {
        let comm = flat.comm(r, &abort, LONG);
        let win = flat.layout.user_window(flat.base(), r);
        let mut s = OxcclLsaBarrierSession { opaque: [0; 12] };
        // SAFETY: valid structs; the session is started before use and ended once.
        unsafe {
            assert_eq!(oxccl_dev_lsa_barrier_init(&mut s, &comm, 9, 2), 0x100);
            // An unknown coop, and communicators this layout did not make, are refused.
            assert_eq!(oxccl_dev_lsa_barrier_init(&mut s, &comm, 3, 1), 0x100);
            for header in [
                oxccl_device::abi::Header {
                    version: comm.header.version + 1,
                    ..comm.header
                },
                oxccl_device::abi::Header {
                    size: comm.header.size - 8,
                    ..comm.header
                },
            ] {
                let other = DevComm { header, ..comm };
                assert_eq!(oxccl_dev_lsa_barrier_init(&mut s, &other, COOP_T, 1), 0x100);
            }
            assert_eq!(oxccl_dev_lsa_barrier_init(&mut s, &comm, COOP_T, 1), 0);
            let mut lsa = oxccl_device::api::abi::Team::default();
            oxccl_dev_team_lsa(&comm, &mut lsa);
            for k in 0..oxccl_dev_lsa_size(&comm) {
                let q = oxccl_dev_team_peer(&lsa, k);
                let w = oxccl_dev_team_rank_to_world(&comm, &lsa, q);
                let p = oxccl_dev_peer_ptr(&comm, &win, 8 * oxccl_dev_rank(&comm) as u64, w);
                assert_eq!(p, oxccl_dev_lsa_ptr(&win, 8 * r as u64, q));
                arch::store_u64(p as *mut u64, r as u64 + 1);
            }
            assert_eq!(oxccl_dev_lsa_barrier_sync(&mut s, 4), 0);
            let mut sum = 0;
            for q in 0..n {
                sum += arch::load_u64(oxccl_dev_local_ptr(&win, 8 * q as u64) as *const u64);
            }
            oxccl_dev_lsa_barrier_arrive(&mut s, 3);
            assert_eq!(oxccl_dev_lsa_barrier_wait_timeout(&mut s, 2, 0), 0);
            oxccl_dev_lsa_barrier_end(&mut s);
            sum
        }
    });
    assert_eq!(sums, vec![10; 4]);
}

/// A coop of two host threads that run at their own pace between meetings, as the warps of
/// a block (or the lanes of a warp) may on the GPU (the CPU backend's coops are one thread).
#[derive(Clone, Copy)]
struct Pair<'a> {
    thread: u32,
    meet: &'a Barrier,
    any: &'a AtomicU32,
}

impl Coop for Pair<'_> {
    fn thread_rank(&self) -> u32 {
        self.thread
    }
    fn size(&self) -> u32 {
        2
    }
    fn sync(&self) {
        self.meet.wait();
    }
    fn sync_any(&self, p: bool) -> bool {
        if p {
            self.any.fetch_add(1, Ordering::SeqCst);
        }
        self.meet.wait();
        let any = self.any.load(Ordering::SeqCst) != 0;
        self.meet.wait();
        if self.thread == 0 {
            self.any.store(0, Ordering::SeqCst);
        }
        self.meet.wait();
        any
    }
}

/// Two sessions on the same barrier in one kernel, with a coop of two threads whose thread
/// 0 is the last to end the first session: every thread of the second session must start
/// from the epoch the first one persisted (the end of a session makes the coop meet after
/// thread 0's store), and the second session's sync must work. Found by
/// `barrier_model.rs` (`lsa_mutation_no_sync_after_persist_is_caught`).
#[test]
fn a_second_session_in_the_same_kernel_sees_the_persisted_epoch() {
    let n = 2u32;
    let flat = Flat::new(n, 1, 0);
    let abort = AtomicU32::new(0);
    let res = on_ranks(n, |r| {
        let comm = flat.comm(r, &abort, Duration::from_secs(5));
        let meet = Barrier::new(2);
        let any = AtomicU32::new(0);
        let (comm, meet, any) = (&comm, &meet, &any);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|thread| {
                    s.spawn(move || {
                        let coop = Pair { thread, meet, any };
                        // SAFETY: live zeroed range; barrier 0 used by this coop only.
                        let mut first = unsafe { LsaBarrierSession::new(coop, comm, 0) };
                        first.try_sync(MemOrder::AcqRel).unwrap();
                        if thread == 0 {
                            std::thread::sleep(Duration::from_millis(100));
                        }
                        first.end();
                        // SAFETY: as above; the first session has ended.
                        let mut second = unsafe { LsaBarrierSession::new(coop, comm, 0) };
                        let started = second.epoch();
                        let synced = second.try_sync(MemOrder::AcqRel);
                        (started, synced, second.epoch())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
    });
    for (r, threads) in res.iter().enumerate() {
        for (t, got) in threads.iter().enumerate() {
            assert_eq!(*got, (1, Ok(()), 2), "rank {r} coop thread {t}");
        }
    }
}

const COOP_T: u32 = oxccl_device::api::coop::COOP_THREAD;
