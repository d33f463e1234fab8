//! Communicator lifecycle on the CPU backend: split (of `init_all` and of `init_rank`
//! communicators, several colors, keys that reverse the order, NOCOLOR), finalize, destroy,
//! non-blocking init and split polled until ready, timeouts naming the rank that never
//! called, and abort cutting host waits short. Every child communicator runs an all-reduce
//! checked against the sums of its members' inputs.
#![allow(clippy::needless_range_loop)] // ranks index parallel vectors

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::bootstrap::{self, UniqueId};
use oxccl::{Backend, Comm, Config, DataType, DeviceBuffer, Error, Op};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// How soon an abort must end a host wait (polled every 10 ms; generous for shared machines,
/// far below the 60 s timeouts the aborted waits have).
const ABORT_BOUND: Duration = Duration::from_secs(1);

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

fn nonblocking() -> Config {
    Config {
        blocking: false,
        ..cfg()
    }
}

fn boot(timeout: Duration) -> bootstrap::Config {
    bootstrap::Config::default().with_timeout(timeout)
}

fn init_all(n: usize, host_timeout: Duration) -> Vec<Comm> {
    Comm::init_all_with_bootstrap(backend(), &vec![0; n], cfg(), &boot(host_timeout)).unwrap()
}

/// `n` ranks made by `init_rank`, one thread each, meeting on loopback.
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

/// Every rank of `comms` splits from its own thread (colors and keys by parent rank).
fn split_all(comms: &[Comm], colors: &[Option<u32>], keys: &[i32]) -> Vec<oxccl::Result<Option<Comm>>> {
    split_some(&comms.iter().collect::<Vec<_>>(), colors, keys)
}

/// As [`split_all`] for some ranks only.
fn split_some(comms: &[&Comm], colors: &[Option<u32>], keys: &[i32]) -> Vec<oxccl::Result<Option<Comm>>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|&c| {
                let r = c.rank() as usize;
                s.spawn(move || c.split(colors[r], keys[r], None))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

const COUNT: usize = 257;

fn input(parent: u32) -> Vec<i32> {
    (0..COUNT as i32).map(|i| parent as i32 * 1000 + i).collect()
}

/// An all-reduce (sum of i32) over `members` (child comms in child-rank order, with their
/// parent ranks), checked on every member against the sum of the members' inputs.
fn check_sum(members: &[(u32, &Comm)]) {
    let bytes = COUNT * 4;
    let mut expect = vec![0i32; COUNT];
    for (p, _) in members {
        for (e, v) in expect.iter_mut().zip(input(*p)) {
            *e += v;
        }
    }
    let mut bufs = Vec::new();
    for (p, c) in members {
        let mut send = DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap();
        let le: Vec<u8> = input(*p).iter().flat_map(|v| v.to_le_bytes()).collect();
        send.upload(&le).unwrap();
        let mut recv = DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap();
        recv.fill(0xff).unwrap();
        bufs.push((send, recv, c.create_stream().unwrap()));
    }
    for ((_, c), (send, recv, stream)) in members.iter().zip(bufs.iter_mut()) {
        c.all_reduce(send, recv, COUNT, DataType::I32, Op::Sum, stream)
            .unwrap();
    }
    for ((p, c), (_, recv, stream)) in members.iter().zip(&bufs) {
        c.backend().synchronize(stream).unwrap();
        c.async_error().unwrap();
        let mut host = vec![0u8; bytes];
        recv.download(&mut host).unwrap();
        let got: Vec<i32> = host
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(
            got,
            expect,
            "child rank {} (parent {p}) of {}",
            c.rank(),
            c.count()
        );
    }
}

/// Checks the children of a split against NCCL's rule (same color, ordered by (key, parent
/// rank)), runs an all-reduce on each, then finalizes (every member, own thread) and
/// destroys them. Returns the number of child communicators.
fn check_split(colors: &[Option<u32>], keys: &[i32], children: Vec<oxccl::Result<Option<Comm>>>) -> usize {
    let mut children: Vec<Option<Comm>> = children.into_iter().map(|c| c.unwrap()).collect();
    let mut distinct: Vec<u32> = colors.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    for (p, c) in colors.iter().enumerate() {
        assert_eq!(c.is_some(), children[p].is_some(), "parent rank {p}: color {c:?}");
    }
    for &color in &distinct {
        let mut order: Vec<(i32, u32)> = (0..colors.len())
            .filter(|&p| colors[p] == Some(color))
            .map(|p| (keys[p], p as u32))
            .collect();
        order.sort_unstable();
        let members: Vec<(u32, Comm)> = order
            .iter()
            .map(|&(_, p)| (p, children[p as usize].take().unwrap()))
            .collect();
        for (i, (p, c)) in members.iter().enumerate() {
            assert_eq!(
                (c.rank(), c.user_rank(), c.count()),
                (i as u32, i as u32, order.len() as u32),
                "color {color}, parent {p}"
            );
            assert_eq!(c.cu_device(), 0);
            assert_eq!(c.config().timeout_ns, cfg().timeout_ns, "inherited config");
        }
        let refs: Vec<(u32, &Comm)> = members.iter().map(|(p, c)| (*p, c)).collect();
        check_sum(&refs);
        std::thread::scope(|s| {
            for (_, c) in &members {
                s.spawn(move || c.finalize().unwrap());
            }
        });
        for (_, c) in members {
            c.destroy().unwrap();
        }
    }
    distinct.len()
}

fn reversed_keys(n: usize) -> Vec<i32> {
    (0..n as i32).map(|r| -r).collect()
}

#[test]
fn split_of_init_all_into_two_and_three_colors_with_reversed_keys() {
    let n = 6;
    let comms = init_all(n, Duration::from_secs(20));
    for m in [2u32, 3] {
        let colors: Vec<Option<u32>> = (0..n as u32).map(|r| Some(r % m)).collect();
        let keys = reversed_keys(n);
        let children = split_all(&comms, &colors, &keys);
        assert_eq!(check_split(&colors, &keys, children), m as usize);
    }
    // The parent still works after its splits.
    let refs: Vec<(u32, &Comm)> = comms.iter().map(|c| (c.rank(), c)).collect();
    check_sum(&refs);
}

#[test]
fn split_of_init_rank_comms_into_two_and_three_colors_with_reversed_keys() {
    let n = 5;
    let comms = init_rank_comms(n, &boot(Duration::from_secs(20)));
    for m in [2u32, 3] {
        let colors: Vec<Option<u32>> = (0..n).map(|r| Some(r % m)).collect();
        let keys = reversed_keys(n as usize);
        let children = split_all(&comms, &colors, &keys);
        assert_eq!(check_split(&colors, &keys, children), m as usize);
    }
}

#[test]
fn nocolor_ranks_take_part_but_get_no_communicator() {
    let n = 5;
    let colors = [None, Some(7), None, Some(7), Some(7)];
    let keys = [0, 1, 0, 1, 0]; // ties broken by parent rank: 4, 1, 3
    let comms = init_all(n, Duration::from_secs(20));
    let children = split_all(&comms, &colors, &keys);
    assert_eq!(check_split(&colors, &keys, children), 1);
    let comms = init_rank_comms(n as u32, &boot(Duration::from_secs(20)));
    let children = split_all(&comms, &colors, &keys);
    assert_eq!(check_split(&colors, &keys, children), 1);
    // Everyone NOCOLOR: nobody gets a communicator, nobody waits.
    let none = split_all(&comms, &[None; 5], &keys);
    assert!(none.into_iter().all(|c| c.unwrap().is_none()));
}

#[test]
fn split_takes_the_given_config() {
    let comms = init_all(2, Duration::from_secs(20));
    let given = Config {
        timeout_ns: 7_000_000_000,
        ..cfg()
    };
    let children: Vec<Comm> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                let given = given.clone();
                s.spawn(move || c.split(Some(0), 0, Some(given)))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap().unwrap().unwrap())
            .collect()
    });
    for c in &children {
        assert_eq!(c.config().timeout_ns, 7_000_000_000);
    }
}

#[test]
fn finalize_waits_for_outstanding_work_then_collectives_fail() {
    let n = 3;
    let comms = init_all(n, Duration::from_secs(20));
    let bytes = COUNT * 4;
    let mut bufs = Vec::new();
    for c in &comms {
        let mut send = DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap();
        let le: Vec<u8> = input(c.rank()).iter().flat_map(|v| v.to_le_bytes()).collect();
        send.upload(&le).unwrap();
        let recv = DeviceBuffer::alloc(c.backend(), c.device(), bytes).unwrap();
        bufs.push((send, recv, c.create_stream().unwrap()));
    }
    for (c, (send, recv, stream)) in comms.iter().zip(bufs.iter_mut()) {
        for _ in 0..4 {
            c.all_reduce(send, recv, COUNT, DataType::I32, Op::Sum, stream)
                .unwrap();
        }
    }
    // No synchronize: finalize waits for the launched work.
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || c.finalize().unwrap());
        }
    });
    let expect: Vec<i32> = (0..COUNT as i32).map(|i| 3 * i + 3000).collect();
    for (c, (send, recv, stream)) in comms.iter().zip(bufs.iter_mut()) {
        let mut host = vec![0u8; bytes];
        recv.download(&mut host).unwrap();
        let got: Vec<i32> = host
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(got, expect, "rank {}", c.rank());
        assert!(c.is_finalized());
        let r = c.rank();
        match c.all_reduce(send, recv, COUNT, DataType::I32, Op::Sum, stream) {
            Err(Error::Finalized {
                op: "all_reduce",
                rank,
            }) => assert_eq!(rank, r),
            other => panic!("all_reduce after finalize: {other:?}"),
        }
        match c.broadcast(send, recv, COUNT, DataType::I32, 0, stream) {
            Err(e @ Error::Finalized { op: "broadcast", .. }) => {
                assert!(e.to_string().contains(&format!("rank {r}")), "{e}")
            }
            other => panic!("broadcast after finalize: {other:?}"),
        }
        assert!(matches!(
            c.split(Some(0), 0, None),
            Err(Error::Finalized { op: "split", .. })
        ));
        assert!(matches!(
            c.finalize(),
            Err(Error::Finalized { op: "finalize", .. })
        ));
    }
    for c in comms {
        c.destroy().unwrap();
    }
}

#[test]
fn destroy_reports_the_pending_device_error() {
    let b = backend();
    let short = Config {
        timeout_ns: 200_000_000,
        ..cfg()
    };
    let mut comms = Comm::init_all_with(b, &[0, 0], short).unwrap();
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let send = DeviceBuffer::alloc(c0.backend(), 0, 64).unwrap();
    let mut recv = DeviceBuffer::alloc(c0.backend(), 0, 64).unwrap();
    let stream = c0.create_stream().unwrap();
    // Rank 1 never joins: rank 0's kernel times out; destroy waits for it and reports it.
    c0.all_reduce(&send, &mut recv, 16, DataType::F32, Op::Sum, &stream)
        .unwrap();
    match c0.destroy() {
        Err(Error::Timeout { rank: 0, peer: 1, .. }) => {}
        other => panic!("expected the timeout naming rank 1, got {other:?}"),
    }
    assert!(c1.async_error().is_ok(), "a ready communicator reports nothing");
    c1.destroy().unwrap();
}

#[test]
fn nonblocking_init_all_is_polled_until_ready() {
    let mut h = Comm::start_init_all(backend(), &[0, 0, 0], nonblocking());
    let t0 = Instant::now();
    loop {
        match h.async_error() {
            Ok(()) => break,
            Err(Error::InProgress { op: "init_all", .. }) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("{e}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "never ready");
    }
    let comms = h.wait(Duration::from_secs(1)).unwrap();
    assert!(matches!(
        h.wait(Duration::ZERO),
        Err(Error::InvalidArgument { .. })
    ));
    let refs: Vec<(u32, &Comm)> = comms.iter().map(|c| (c.rank(), c)).collect();
    check_sum(&refs);
    // Blocking (the default): ready when returned.
    let h = Comm::start_init_all(backend(), &[0], cfg());
    assert!(h.is_done());
    h.async_error().unwrap();
    assert_eq!(h.take().unwrap().len(), 1);
}

#[test]
fn nonblocking_init_rank_is_in_progress_until_every_rank_started() {
    let n = 3;
    let boot = boot(Duration::from_secs(20));
    let (id, root) = UniqueId::with_config(Some(LO), &boot).unwrap();
    let mut handles: Vec<_> = (0..2)
        .map(|r| Comm::start_init_rank(backend(), n, &id, r, 0, nonblocking(), &boot))
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    for h in &handles {
        assert!(matches!(
            h.async_error(),
            Err(Error::InProgress { op: "init_rank", .. })
        ));
    }
    handles.push(Comm::start_init_rank(
        backend(),
        n,
        &id,
        2,
        0,
        nonblocking(),
        &boot,
    ));
    let t0 = Instant::now();
    while !handles.iter().all(|h| h.async_error().is_ok()) {
        assert!(t0.elapsed() < Duration::from_secs(20), "never ready: {handles:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    let comms: Vec<Comm> = handles.into_iter().map(|h| h.take().unwrap()).collect();
    root.wait().unwrap();
    let refs: Vec<(u32, &Comm)> = comms.iter().map(|c| (c.rank(), c)).collect();
    check_sum(&refs);
}

#[test]
fn abort_unblocks_a_pending_init_rank() {
    let boot = boot(Duration::from_secs(60));
    let (id, _root) = UniqueId::with_config(Some(LO), &boot).unwrap();
    // Rank 1 never starts: rank 0 waits for the table until aborted.
    let mut h = Comm::start_init_rank(backend(), 2, &id, 0, 0, nonblocking(), &boot);
    assert!(matches!(
        h.wait(Duration::from_millis(100)),
        Err(Error::InProgress { .. })
    ));
    let t0 = Instant::now();
    h.abort();
    match h.wait(Duration::from_secs(5)) {
        Err(
            e @ Error::Aborted {
                op: "init_rank",
                rank: 0,
            },
        ) => {
            assert_eq!(e.to_string(), "init_rank on rank 0: communicator aborted")
        }
        other => panic!("expected the init to be aborted, got {other:?}"),
    }
    assert!(t0.elapsed() < ABORT_BOUND, "abort took {:?}", t0.elapsed());
    assert!(matches!(h.async_error(), Ok(()) | Err(Error::InitFailed { .. })));
    // Dropping a pending handle aborts it too (the thread ends on its own).
    let (id, _root) = UniqueId::with_config(Some(LO), &boot).unwrap();
    let h = Comm::start_init_rank(backend(), 2, &id, 0, 0, nonblocking(), &boot);
    assert!(matches!(h.async_error(), Err(Error::InProgress { .. })));
    drop(h);
}

#[test]
fn nonblocking_split_is_polled_until_ready() {
    let n = 4;
    let comms = Comm::init_all_with_bootstrap(
        backend(),
        &vec![0; n],
        nonblocking(),
        &boot(Duration::from_secs(20)),
    )
    .unwrap();
    let colors: Vec<Option<u32>> = (0..n as u32).map(|r| Some(r / 2)).collect();
    let keys = reversed_keys(n);
    // All started from this thread: non-blocking (inherited config).
    let handles: Vec<_> = comms
        .iter()
        .map(|c| c.start_split(colors[c.rank() as usize], keys[c.rank() as usize], None))
        .collect();
    let t0 = Instant::now();
    while !handles.iter().all(|h| h.is_done()) {
        assert!(t0.elapsed() < Duration::from_secs(20), "never ready: {handles:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    for h in &handles {
        h.async_error().unwrap();
    }
    let children: Vec<_> = handles.into_iter().map(|h| h.take()).collect();
    let children: Vec<_> = children
        .into_iter()
        .map(|c| {
            let c = c.unwrap().unwrap();
            assert!(!c.config().blocking, "inherited config");
            Ok(Some(c))
        })
        .collect();
    // check_split compares timeouts with cfg(); nonblocking() has the same one.
    assert_eq!(check_split(&colors, &keys, children), 2);
}

#[test]
fn abort_unblocks_a_pending_split_and_the_parent_still_runs_collectives() {
    let comms = Comm::init_all_with_bootstrap(
        backend(),
        &[0, 0, 0],
        nonblocking(),
        &boot(Duration::from_secs(60)),
    )
    .unwrap();
    // Only rank 0 splits: it waits for the others until its handle is aborted.
    let mut h = comms[0].start_split(Some(0), 0, None);
    assert!(matches!(
        h.wait(Duration::from_millis(100)),
        Err(Error::InProgress { op: "split", .. })
    ));
    let t0 = Instant::now();
    h.abort();
    assert!(matches!(
        h.wait(Duration::from_secs(5)),
        Err(Error::Aborted { op: "split", rank: 0 })
    ));
    assert!(t0.elapsed() < ABORT_BOUND, "abort took {:?}", t0.elapsed());
    let refs: Vec<(u32, &Comm)> = comms.iter().map(|c| (c.rank(), c)).collect();
    check_sum(&refs);
    // The parent's host exchanges are unusable after the aborted one: refused at once.
    assert!(matches!(
        comms[0].split(Some(0), 0, None),
        Err(Error::InvalidArgument { op: "split", .. })
    ));
}

fn assert_names_missing(res: oxccl::Result<Option<Comm>>, rank: u32, missing: u32) {
    match res {
        Err(e @ Error::ControlTimeout { .. }) => {
            let msg = e.to_string();
            let Error::ControlTimeout {
                op,
                rank: r,
                missing: m,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!((op, r, m), ("split", rank, vec![missing]), "{msg}");
            assert!(
                msg.contains(&format!("[{missing}]")) && msg.contains("split"),
                "{msg}"
            );
        }
        other => panic!("rank {rank}: expected a timeout naming rank {missing}, got {other:?}"),
    }
}

#[test]
fn split_without_one_rank_times_out_naming_it() {
    let timeout = Duration::from_millis(300);
    let comms = init_all(3, timeout);
    let t0 = Instant::now();
    let res = split_all(&comms[..2], &[Some(0); 3], &[0; 3]);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    for (r, res) in res.into_iter().enumerate() {
        assert_names_missing(res, r as u32, 2);
    }
    // init_rank communicators: the same over the bootstrap.
    let comms = init_rank_comms(3, &boot(Duration::from_secs(3)));
    let t0 = Instant::now();
    let res = split_some(&[&comms[0], &comms[2]], &[Some(0); 3], &[0; 3]);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let ranks = [0u32, 2];
    for (i, res) in res.into_iter().enumerate() {
        assert_names_missing(res, ranks[i], 1);
    }
}

#[test]
fn abort_unblocks_ranks_waiting_in_split() {
    let comms = init_all(3, Duration::from_secs(60));
    let t0 = Instant::now();
    let res = std::thread::scope(|s| {
        let hs: Vec<_> = comms[..2]
            .iter()
            .map(|c| s.spawn(move || c.split(Some(0), 0, None)))
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        comms[2].abort();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    assert!(
        t0.elapsed() < ABORT_BOUND + Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
    for res in res {
        assert!(matches!(res, Err(Error::Aborted { op: "split", .. })), "{res:?}");
    }
}

#[test]
fn finalize_without_the_other_ranks_times_out_naming_them() {
    let comms = init_all(3, Duration::from_millis(300));
    match comms[1].finalize() {
        Err(e @ Error::ControlTimeout { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("finalize on rank 1:") && msg.contains("[0, 2]"),
                "{msg}"
            );
        }
        other => panic!("expected a timeout naming ranks 0 and 2, got {other:?}"),
    }
    // Finalized anyway: collectives are refused; destroy still works.
    assert!(comms[1].is_finalized());
    for c in comms {
        c.destroy().unwrap();
    }
}
