//! `Comm::shrink` (NCCL's `ncclCommShrink`) on the CPU backend, ranks as threads: the
//! excluded ranks never call it (they may be dead), the survivors get a communicator ranked
//! in parent order whose all-reduce sums exactly their inputs; for `init_all` communicators
//! (in-process rendezvous) and `init_rank` ones (bootstrap messages), with the lowest rank
//! excluded (another leader), with `ShrinkMode::Abort` while a survivor's collective waits
//! for the dead rank, non-blocking, a rank left out of one shrink taking part in the next,
//! and the errors: a survivor whose leader never comes times out naming it, so do lists
//! that disagree, bad lists are refused.
#![allow(clippy::needless_range_loop)] // ranks index parallel vectors

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::bootstrap::{self, UniqueId};
use oxccl::{Backend, Comm, Config, DataType, DeviceBuffer, Error, Op, ShrinkMode};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const COUNT: usize = 1031;

fn backend() -> Arc<dyn Backend> {
    Arc::new(CpuBackend::new())
}

fn cfg() -> Config {
    Config {
        timeout_ns: 60_000_000_000,
        blocking: true,
        ..Config::default()
    }
}

fn boot(timeout: Duration) -> bootstrap::Config {
    bootstrap::Config::default().with_timeout(timeout)
}

fn init_all(n: usize, host_timeout: Duration) -> Vec<Comm> {
    Comm::init_all_with_bootstrap(backend(), &vec![0; n], cfg(), &boot(host_timeout)).unwrap()
}

fn init_rank_comms(n: u32, boot: &bootstrap::Config) -> Vec<Comm> {
    let (id, root) = UniqueId::with_config(Some(LO), boot).unwrap();
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let boot = boot.clone();
            std::thread::spawn(move || Comm::init_rank_with(backend(), n, &id, r, 0, cfg(), &boot))
        })
        .collect();
    let comms = hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    root.wait().unwrap();
    comms
}

/// The survivors of `comms` (every rank not in `exclude`) shrink, each from its own thread.
fn shrink_survivors(comms: &[Comm], exclude: &[u32], mode: ShrinkMode) -> Vec<(u32, oxccl::Result<Comm>)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .filter(|c| !exclude.contains(&c.rank()))
            .map(|c| (c.rank(), s.spawn(move || c.shrink(exclude, mode, None))))
            .collect();
        hs.into_iter().map(|(r, h)| (r, h.join().unwrap())).collect()
    })
}

fn input(parent: u32) -> Vec<i32> {
    (0..COUNT as i32).map(|i| parent as i32 * 7919 + i).collect()
}

/// Each child (with its parent rank) all-reduces its parent's input; every result must be
/// the sum over the survivors, and child ranks must follow parent order.
fn check_children(children: Vec<(u32, oxccl::Result<Comm>)>) {
    let children: Vec<(u32, Comm)> = children
        .into_iter()
        .map(|(p, c)| {
            (
                p,
                c.unwrap_or_else(|e| panic!("parent rank {p}: shrink failed: {e}")),
            )
        })
        .collect();
    let n = children.len() as u32;
    for (i, (p, c)) in children.iter().enumerate() {
        assert_eq!((c.rank(), c.count()), (i as u32, n), "parent rank {p}");
    }
    let mut expect = vec![0i32; COUNT];
    for (p, _) in &children {
        for (e, v) in expect.iter_mut().zip(input(*p)) {
            *e += v;
        }
    }
    std::thread::scope(|s| {
        for (p, c) in &children {
            let expect = &expect;
            s.spawn(move || {
                let bytes = COUNT * 4;
                let mut send = DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap();
                let le: Vec<u8> = input(*p).iter().flat_map(|v| v.to_le_bytes()).collect();
                send.upload(&le).unwrap();
                let mut recv = DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap();
                recv.fill(0xff).unwrap();
                let stream = c.create_stream().unwrap();
                c.all_reduce(&send, &mut recv, COUNT, DataType::I32, Op::Sum, &stream)
                    .unwrap();
                c.backend().synchronize(&stream).unwrap();
                c.async_error().unwrap();
                let mut host = vec![0u8; bytes];
                recv.download(&mut host).unwrap();
                let got: Vec<i32> = host
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                assert_eq!(&got, expect, "child rank {} (parent {p})", c.rank());
            });
        }
    });
}

#[test]
fn init_all_survivors_shrink_without_the_excluded_rank() {
    let comms = init_all(5, Duration::from_secs(60));
    check_children(shrink_survivors(&comms, &[2], ShrinkMode::Default));
    // The lowest rank excluded too: rank 1 leads.
    check_children(shrink_survivors(&comms, &[0, 3], ShrinkMode::Default));
}

#[test]
fn init_rank_survivors_shrink_over_bootstrap_messages() {
    let comms = init_rank_comms(4, &boot(Duration::from_secs(60)));
    check_children(shrink_survivors(&comms, &[0], ShrinkMode::Default));
    // Nobody excluded: a copy of the communicator.
    check_children(shrink_survivors(&comms, &[], ShrinkMode::Default));
}

#[test]
fn abort_mode_ends_a_collective_stuck_on_the_dead_rank() {
    let comms = init_rank_comms(3, &boot(Duration::from_secs(60)));
    // Ranks 0 and 1 start an all-reduce that rank 2 (dead) never joins.
    let bufs: Vec<_> = comms[..2]
        .iter()
        .map(|c| {
            let b = DeviceBuffer::alloc(c.backend(), c.device(), 64).unwrap();
            (b, c.create_stream().unwrap())
        })
        .collect();
    for (c, (b, s)) in comms.iter().zip(&bufs) {
        // SAFETY: `b` lives until the stream is synchronized (by the shrink's abort).
        unsafe { c.all_reduce_raw(b.ptr(), b.ptr(), 16, DataType::I32, Op::Sum, s) }.unwrap();
    }
    let t0 = Instant::now();
    check_children(shrink_survivors(&comms, &[2], ShrinkMode::Abort));
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    for c in &comms[..2] {
        assert!(
            matches!(c.async_error(), Err(Error::Aborted { .. })),
            "{:?}",
            c.async_error()
        );
    }
}

#[test]
fn nonblocking_shrink_is_polled_until_ready() {
    let comms = init_all(3, Duration::from_secs(60));
    let nb = Config {
        blocking: false,
        ..cfg()
    };
    let handles: Vec<_> = comms[1..]
        .iter()
        .map(|c| {
            (
                c.rank(),
                c.start_shrink(&[0], ShrinkMode::Default, Some(nb.clone())),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while handles.iter().any(|(_, h)| !h.is_done()) {
        assert!(Instant::now() < deadline, "shrink still in progress");
        for (_, h) in &handles {
            match h.async_error() {
                Ok(()) | Err(Error::InProgress { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    check_children(handles.into_iter().map(|(p, h)| (p, h.take())).collect());
}

#[test]
fn a_leader_that_never_comes_is_named_and_bad_lists_are_refused() {
    let comms = init_rank_comms(3, &boot(Duration::from_millis(700)));
    // Rank 0 is not excluded but never calls: ranks 1 and 2 wait for its offer.
    let t0 = Instant::now();
    for (p, r) in shrink_survivors(&comms[1..], &[], ShrinkMode::Default) {
        match r {
            Err(Error::ControlTimeout { rank, missing, .. }) => {
                assert_eq!((rank, missing), (p, vec![0]));
            }
            other => panic!("parent rank {p}: expected a timeout naming rank 0, got {other:?}"),
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(20));
    let bad = |r: oxccl::Result<Comm>, needle: &str| match r {
        Err(e @ Error::InvalidArgument { .. }) => assert!(e.to_string().contains(needle), "{e}"),
        other => panic!("expected an invalid argument ({needle}), got {other:?}"),
    };
    bad(comms[0].shrink(&[0], ShrinkMode::Default, None), "must not call");
    bad(
        comms[0].shrink(&[3], ShrinkMode::Default, None),
        "not below nranks 3",
    );
    bad(comms[0].shrink(&[1, 1], ShrinkMode::Default, None), "twice");
}

#[test]
fn survivors_with_different_lists_fail_in_bounded_time_naming_a_rank() {
    let comms = init_all(4, Duration::from_millis(1500));
    let t0 = Instant::now();
    // Rank 0 leads in both views; rank 1 also excludes rank 2, which calls anyway. Each
    // list has its own message tags, so rank 1 never sees an offer for its list.
    let results = std::thread::scope(|s| {
        let a = s.spawn(|| comms[0].shrink(&[3], ShrinkMode::Default, None));
        let b = s.spawn(|| comms[1].shrink(&[2, 3], ShrinkMode::Default, None));
        let c = s.spawn(|| comms[2].shrink(&[3], ShrinkMode::Default, None));
        [a.join().unwrap(), b.join().unwrap(), c.join().unwrap()]
    });
    match &results[1] {
        Err(Error::ControlTimeout { rank: 1, missing, .. }) => assert_eq!(missing, &vec![0]),
        other => panic!("rank 1: expected a timeout naming its leader, rank 0; got {other:?}"),
    }
    // The others' new communicator misses rank 1: their init times out instead of hanging.
    assert!(results[0].is_err() && results[2].is_err());
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

#[test]
fn a_rank_left_out_of_one_shrink_takes_part_in_the_next() {
    // Rank 2 sits out the first shrink (alive, just excluded); the second one, which
    // includes it, must still meet.
    let comms = init_rank_comms(4, &boot(Duration::from_secs(60)));
    check_children(shrink_survivors(&comms, &[2], ShrinkMode::Default));
    check_children(shrink_survivors(&comms, &[3], ShrinkMode::Default));
}
