//! Send/recv and groups on the CPU backend (the same device code the GPU runs): ring and
//! all-pairs exchanges against the senders' data for 1..8 ranks, sizes from 0 to several
//! MiB, a spread of data types; posting orders (receive before send, per-thread groups),
//! self sends, nested groups, two communicators in one group, groups larger than one launch,
//! collectives inside a group; errors (bad peers, group misuse, mismatched postings naming
//! both ranks, timeouts) and abort of a pending receive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::{check_send_recv, Case, P2pPattern, Ranks};
use oxccl::{group_end, group_start, Backend, Comm, Config, DataType, DeviceBuffer, Error, Op, RedOp};

fn ranks_with(n: usize, timeout: Duration) -> Ranks {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let cfg = Config {
        timeout_ns: timeout.as_nanos() as u64,
        ..Config::default()
    };
    Ranks::new(Comm::init_all_with(b, &vec![0; n], cfg).expect("init_all")).expect("streams")
}

fn ranks(n: usize) -> Ranks {
    ranks_with(n, Duration::from_secs(60))
}

fn case(dtype: DataType, count: usize, seed: u64) -> Case {
    Case {
        dtype,
        red: RedOp::Sum,
        count,
        in_place: false,
        seed,
    }
}

fn buf(c: &Comm, bytes: usize, fill: u8) -> DeviceBuffer {
    let mut b = DeviceBuffer::alloc(c.backend(), c.device(), bytes.max(1)).unwrap();
    b.fill(fill).unwrap();
    b
}

fn bytes_of(b: &DeviceBuffer, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    b.download(&mut v).unwrap();
    v
}

#[test]
fn ring_and_all_pairs_match_for_1_to_8_ranks() {
    let dtypes = [
        DataType::F32,
        DataType::U8,
        DataType::Bf16,
        DataType::I64,
        DataType::F8E4M3,
        DataType::F64,
        DataType::I32,
        DataType::F16,
    ];
    for n in 1..=8usize {
        let r = ranks(n);
        for (i, &count) in [0usize, 1, 7, 4099, 65_537].iter().enumerate() {
            let dt = dtypes[(n + i) % dtypes.len()];
            for pattern in [P2pPattern::Ring, P2pPattern::AllPairs] {
                let c = case(dt, count, (n * 100 + i) as u64);
                let checked = check_send_recv(&r, c, pattern)
                    .unwrap_or_else(|e| panic!("n={n} {pattern:?} {dt:?} count {count}: {e}"));
                let per = if pattern == P2pPattern::Ring { 1 } else { n };
                assert_eq!(checked, n * per * count);
            }
        }
    }
}

#[test]
fn several_mib_per_message() {
    let r = ranks(3);
    check_send_recv(&r, case(DataType::F32, (3 << 20) / 4 + 3, 7), P2pPattern::Ring).unwrap();
    check_send_recv(&r, case(DataType::U8, 2 << 20, 8), P2pPattern::AllPairs).unwrap();
}

/// Every rank in its own thread with its own group, posting the receive before the send.
#[test]
fn per_thread_groups_with_receive_before_send() {
    let n = 4;
    let r = ranks(n);
    let count = 1001;
    std::thread::scope(|s| {
        for (i, c) in r.comms.iter().enumerate() {
            let st = &r.streams[i];
            s.spawn(move || {
                let me = c.rank() as usize;
                let data: Vec<u8> = (0..count * 4).map(|k| (k * 7 + me) as u8).collect();
                let mut src = buf(c, count * 4, 0);
                src.upload(&data).unwrap();
                let mut dst = buf(c, count * 4, 0xff);
                group_start();
                c.recv(&mut dst, count, DataType::U32, ((me + n - 1) % n) as u32, st)
                    .unwrap();
                c.send(&src, count, DataType::U32, ((me + 1) % n) as u32, st)
                    .unwrap();
                group_end().unwrap();
                c.backend().synchronize(st).unwrap();
                c.async_error().unwrap();
                let from = (me + n - 1) % n;
                let want: Vec<u8> = (0..count * 4).map(|k| (k * 7 + from) as u8).collect();
                assert_eq!(bytes_of(&dst, count * 4), want, "rank {me}");
            });
        }
    });
}

/// A rank sends to itself (with other traffic in the same group), several times to the same
/// peer in one group (matched in order), and a group larger than one launch (96 operations
/// per rank).
#[test]
fn self_sends_repeated_pairs_and_large_groups() {
    let n = 3;
    let r = ranks(n);
    let reps = 16; // 3 peers x 16 x 2 directions = 96 operations per rank
    let count = 33;
    let bytes = count * 2;
    let mut srcs = Vec::new();
    let mut dsts = Vec::new();
    for c in &r.comms {
        let me = c.rank() as usize;
        let data: Vec<u8> = (0..n * reps * bytes).map(|k| (k * 13 + me * 101) as u8).collect();
        let mut s = buf(c, data.len(), 0);
        s.upload(&data).unwrap();
        srcs.push((s, data));
        dsts.push(buf(c, n * reps * bytes, 0xff));
    }
    group_start();
    for (i, c) in r.comms.iter().enumerate() {
        for t in 0..reps {
            for q in 0..n {
                let off = ((q * reps + t) * bytes) as u64;
                // SAFETY: blocks of live buffers of n * reps * bytes.
                unsafe {
                    c.recv_raw(
                        dsts[i].ptr() + off,
                        count,
                        DataType::Bf16,
                        q as u32,
                        &r.streams[i],
                    )
                    .unwrap();
                    c.send_raw(
                        srcs[i].0.ptr() + off,
                        count,
                        DataType::Bf16,
                        q as u32,
                        &r.streams[i],
                    )
                    .unwrap();
                }
            }
        }
    }
    group_end().unwrap();
    r.sync().unwrap();
    for (i, c) in r.comms.iter().enumerate() {
        let me = c.rank() as usize;
        let got = bytes_of(&dsts[i], n * reps * bytes);
        for (q, (_, sent)) in srcs.iter().enumerate() {
            for t in 0..reps {
                // The t-th receive from q got q's t-th send to me: q's block (me, t).
                let mine = (q * reps + t) * bytes;
                let theirs = (me * reps + t) * bytes;
                assert_eq!(
                    &got[mine..mine + bytes],
                    &sent[theirs..theirs + bytes],
                    "rank {me} receive #{t} from {q}"
                );
            }
        }
    }
}

#[test]
fn nested_groups_launch_at_the_outermost_end() {
    let r = ranks(2);
    let count = 64;
    let srcs: Vec<DeviceBuffer> = r
        .comms
        .iter()
        .map(|c| buf(c, count * 4, c.rank() as u8 + 1))
        .collect();
    let mut dsts: Vec<DeviceBuffer> = r.comms.iter().map(|c| buf(c, count * 4, 0xff)).collect();
    assert_eq!(oxccl::group::group_depth(), 0);
    group_start();
    group_start();
    for (i, c) in r.comms.iter().enumerate() {
        let peer = 1 - c.rank();
        c.send(&srcs[i], count, DataType::F32, peer, &r.streams[i])
            .unwrap();
        c.recv(&mut dsts[i], count, DataType::F32, peer, &r.streams[i])
            .unwrap();
    }
    group_end().unwrap();
    assert_eq!(oxccl::group::group_depth(), 1);
    // Nothing launched yet: the streams are idle and the outputs still poisoned.
    r.sync().unwrap();
    for d in &dsts {
        assert_eq!(bytes_of(d, count * 4), vec![0xff; count * 4]);
    }
    group_end().unwrap();
    assert_eq!(oxccl::group::group_depth(), 0);
    r.sync().unwrap();
    for (i, d) in dsts.iter().enumerate() {
        assert_eq!(bytes_of(d, count * 4), vec![2 - i as u8; count * 4]);
    }
    match group_end() {
        Err(Error::InvalidUsage { op: "group_end", .. }) => {}
        other => panic!("group_end without group_start: {other:?}"),
    }
}

#[test]
fn two_communicators_in_one_group() {
    let a = ranks(2);
    let b = ranks(3);
    let count = 513;
    group_start();
    let mut bufs = Vec::new();
    for (set, tag) in [(&a, 10u8), (&b, 20u8)] {
        let n = set.n();
        for (i, c) in set.comms.iter().enumerate() {
            let me = c.rank() as usize;
            let src = buf(c, count, tag + me as u8);
            let mut dst = buf(c, count, 0xff);
            c.recv(
                &mut dst,
                count,
                DataType::I8,
                ((me + n - 1) % n) as u32,
                &set.streams[i],
            )
            .unwrap();
            c.send(&src, count, DataType::I8, ((me + 1) % n) as u32, &set.streams[i])
                .unwrap();
            bufs.push((tag, n, me, src, dst));
        }
    }
    group_end().unwrap();
    a.sync().unwrap();
    b.sync().unwrap();
    for (tag, n, me, _src, dst) in &bufs {
        let from = (me + n - 1) % n;
        assert_eq!(
            bytes_of(dst, count),
            vec![tag + from as u8; count],
            "tag {tag} rank {me}"
        );
    }
}

/// Collectives inside a group are launched when called, the group's sends and receives at
/// its end: an all-reduce between a receive and a send on every rank completes.
#[test]
fn collectives_inside_a_group() {
    let r = ranks(3);
    let n = 3;
    let count = 100;
    let ones: Vec<DeviceBuffer> = r
        .comms
        .iter()
        .map(|c| {
            let mut b = buf(c, count * 4, 0);
            b.upload(
                &vec![1.0f32; count]
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<u8>>(),
            )
            .unwrap();
            b
        })
        .collect();
    let mut sums: Vec<DeviceBuffer> = r.comms.iter().map(|c| buf(c, count * 4, 0xff)).collect();
    let mut got: Vec<DeviceBuffer> = r.comms.iter().map(|c| buf(c, count * 4, 0xff)).collect();
    group_start();
    for (i, c) in r.comms.iter().enumerate() {
        let me = c.rank() as usize;
        let s = &r.streams[i];
        c.recv(&mut got[i], count, DataType::F32, ((me + n - 1) % n) as u32, s)
            .unwrap();
        c.all_reduce(&ones[i], &mut sums[i], count, DataType::F32, Op::Sum, s)
            .unwrap();
        c.send(&ones[i], count, DataType::F32, ((me + 1) % n) as u32, s)
            .unwrap();
    }
    group_end().unwrap();
    r.sync().unwrap();
    let f = |b: &DeviceBuffer| -> Vec<f32> {
        bytes_of(b, count * 4)
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    for i in 0..n {
        assert_eq!(f(&sums[i]), vec![3.0; count]);
        assert_eq!(f(&got[i]), vec![1.0; count]);
    }
}

#[test]
fn bad_arguments_and_group_misuse_are_reported() {
    let r = ranks(2);
    let c = &r.comms[0];
    let s = &r.streams[0];
    let b = buf(c, 64, 0);
    match c.send(&b, 16, DataType::F32, 2, s) {
        Err(
            e @ Error::InvalidArgument {
                op: "send", rank: 0, ..
            },
        ) => {
            assert!(e.to_string().contains("peer 2"), "{e}")
        }
        other => panic!("peer out of range: {other:?}"),
    }
    let mut m = buf(c, 64, 0);
    match c.recv(&mut m, 17, DataType::F32, 1, s) {
        Err(Error::InvalidArgument {
            op: "recv", rank: 0, ..
        }) => {}
        other => panic!("buffer too small: {other:?}"),
    }
    // One communicator rank, two streams, one group.
    let s2 = c.create_stream().unwrap();
    group_start();
    c.send(&b, 1, DataType::F32, 0, s).unwrap();
    let e = c.recv(&mut m, 1, DataType::F32, 0, &s2);
    // Complete the self exchange posted first, so that the group ends cleanly.
    c.recv(&mut m, 1, DataType::F32, 0, s).unwrap();
    group_end().unwrap();
    match e {
        Err(Error::InvalidUsage { op: "recv", .. }) => {}
        other => panic!("two streams in a group: {other:?}"),
    }
    r.sync().unwrap();
}

/// Rank 0 sends 100 f32 to rank 1, which receives 50 f32 (and, second pair, i32 where f32
/// is sent): both ranks report the mismatch naming each other and both postings, nothing is
/// written, and the ranks neither hang nor stop matching later operations.
#[test]
fn mismatched_postings_name_both_ranks() {
    for (theirs_count, theirs_dt) in [(50usize, DataType::F32), (100, DataType::I32)] {
        let r = ranks(2);
        let src = buf(&r.comms[0], 400, 7);
        let mut dst = buf(&r.comms[1], 400, 0xff);
        let t0 = Instant::now();
        group_start();
        r.comms[0]
            .send(&src, 100, DataType::F32, 1, &r.streams[0])
            .unwrap();
        r.comms[1]
            .recv(&mut dst, theirs_count, theirs_dt, 0, &r.streams[1])
            .unwrap();
        group_end().unwrap();
        let errs: Vec<String> = r
            .comms
            .iter()
            .zip(&r.streams)
            .map(|(c, s)| {
                c.backend().synchronize(s).unwrap();
                match c.async_error() {
                    Err(e @ Error::P2pMismatch { .. }) => e.to_string(),
                    other => panic!("rank {}: expected a mismatch, got {other:?}", c.rank()),
                }
            })
            .collect();
        assert!(t0.elapsed() < Duration::from_secs(10));
        let theirs = format!("{theirs_count} {} elements", theirs_dt.name());
        assert!(errs[0].starts_with("send on rank 0 (peer 1)"), "{}", errs[0]);
        assert!(errs[1].starts_with("recv on rank 1 (peer 0)"), "{}", errs[1]);
        for e in &errs {
            assert!(e.contains("100 f32 elements") && e.contains(&theirs), "{e}");
        }
        assert_eq!(bytes_of(&dst, 400), vec![0xff; 400], "nothing may be written");
        // The next pair is matched as usual.
        let mut dst2 = buf(&r.comms[1], 400, 0xff);
        group_start();
        r.comms[1]
            .recv(&mut dst2, 100, DataType::F32, 0, &r.streams[1])
            .unwrap();
        r.comms[0]
            .send(&src, 100, DataType::F32, 1, &r.streams[0])
            .unwrap();
        group_end().unwrap();
        for (c, s) in r.comms.iter().zip(&r.streams) {
            c.backend().synchronize(s).unwrap();
        }
        assert_eq!(bytes_of(&dst2, 400), vec![7; 400]);
    }
}

#[test]
fn a_receive_without_a_send_times_out_naming_the_peer() {
    let r = ranks_with(2, Duration::from_millis(300));
    let mut dst = buf(&r.comms[1], 64, 0xff);
    r.comms[1]
        .recv(&mut dst, 16, DataType::U32, 0, &r.streams[1])
        .unwrap();
    r.comms[1].backend().synchronize(&r.streams[1]).unwrap();
    match r.comms[1].async_error() {
        Err(
            e @ Error::P2pTimeout {
                op: "recv",
                rank: 1,
                peer: 0,
                ..
            },
        ) => {
            assert!(
                e.to_string()
                    .contains("a recv of 16 u32 elements (64 bytes) from rank 0"),
                "{e}"
            )
        }
        other => panic!("expected a timeout naming rank 0, got {other:?}"),
    }
}

/// Ranks 0 and 1 wait for receives from rank 2, which never sends; an abort returns every
/// rank's stream within 100 ms and each reports the abort of its receive.
#[test]
fn abort_during_a_pending_receive_returns_quickly_on_every_rank() {
    let r = ranks(3);
    let mut dsts: Vec<DeviceBuffer> = r.comms.iter().map(|c| buf(c, 4096, 0xff)).collect();
    group_start();
    for (i, d) in dsts.iter_mut().enumerate().take(2) {
        r.comms[i].recv(d, 1024, DataType::F32, 2, &r.streams[i]).unwrap();
    }
    // Rank 2 is busy with an exchange with itself that does complete.
    let src = buf(&r.comms[2], 4096, 3);
    r.comms[2]
        .send(&src, 1024, DataType::F32, 2, &r.streams[2])
        .unwrap();
    r.comms[2]
        .recv(&mut dsts[2], 1024, DataType::F32, 2, &r.streams[2])
        .unwrap();
    group_end().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    r.comms[0].abort();
    let waits: Vec<Duration> = std::thread::scope(|s| {
        let hs: Vec<_> = r
            .comms
            .iter()
            .zip(&r.streams)
            .map(|(c, st)| {
                s.spawn(move || {
                    c.backend().synchronize(st).unwrap();
                    t0.elapsed()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, w) in waits.iter().enumerate() {
        assert!(*w < Duration::from_millis(100), "rank {i} returned after {w:?}");
    }
    for c in &r.comms[..2] {
        match c.async_error() {
            Err(Error::Aborted { op: "recv", rank }) if rank == c.rank() => {}
            other => panic!("rank {}: expected an aborted recv, got {other:?}", c.rank()),
        }
    }
    assert_eq!(bytes_of(&dsts[2], 4096), vec![3; 4096]);
}

#[test]
fn operations_of_a_communicator_dropped_before_group_end_are_not_launched() {
    let mut r = ranks(1);
    let c = r.comms.pop().unwrap();
    let s = r.streams.pop().unwrap();
    let b = buf(&c, 64, 0);
    let mut d = buf(&c, 64, 0xff);
    group_start();
    c.send(&b, 16, DataType::U8, 0, &s).unwrap();
    c.recv(&mut d, 16, DataType::U8, 0, &s).unwrap();
    drop(c);
    match group_end() {
        Err(e @ Error::InvalidUsage { op: "group_end", .. }) => {
            assert!(e.to_string().contains("2 send/recv operations"), "{e}")
        }
        other => panic!("expected the dropped communicator to be reported, got {other:?}"),
    }
}
