//! Bootstrap over real loopback sockets: rendezvous of 1..8 ranks as threads (and as child
//! processes), collectives and point-to-point against values computed here, timeouts that
//! name the missing rank, and rejection of wrong secrets, duplicates and garbage.
//! Only 127.0.0.1 / `lo` is ever used.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use oxccl::bootstrap::wire::{self, Auth, Kind, Role};
use oxccl::bootstrap::{Bootstrap, BootstrapError, Config, Peer, RejectReason, UniqueId};
use rand::{Rng, SeedableRng};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn config(timeout_ms: u64) -> Config {
    Config {
        timeout: Duration::from_millis(timeout_ms),
        ifname: None,
        abort: None,
    }
}

fn blobs(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| (0..rng.random_range(0..3000)).map(|_| rng.random()).collect())
        .collect()
}

/// Message from `src` to `dst`, independent of the code under test.
fn message(src: u32, dst: u32, k: u32) -> Vec<u8> {
    let mut rng =
        rand_chacha::ChaCha8Rng::seed_from_u64(((src as u64) << 32) | ((dst as u64) << 8) | k as u64);
    (0..rng.random_range(0..5000)).map(|_| rng.random()).collect()
}

/// Every rank: init, check the table, all_gather, barrier, send/recv to every rank (itself too).
fn run_rank(id: UniqueId, rank: u32, n: u32, cfg: Config, seed: u64) -> Result<(), BootstrapError> {
    let info = blobs(n as usize, seed);
    let gather = blobs(n as usize, seed + 1);
    let b = Bootstrap::init(&id, rank, n, &info[rank as usize], &cfg)?;
    assert_eq!((b.rank(), b.nranks()), (rank, n));
    assert_eq!(b.peer_infos(), info.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert!(b.peer_addr(rank).unwrap().ip().is_loopback());
    assert_eq!(b.all_gather(&gather[rank as usize])?, gather);
    b.barrier()?;
    for k in 0..2 {
        for dst in 0..n {
            b.send(dst, k as u64 * 100 + dst as u64, &message(rank, dst, k))?;
        }
    }
    // Receive in reverse peer order and tag order 1 then 0: the mailbox sorts by (peer, tag).
    for k in (0..2).rev() {
        for src in (0..n).rev() {
            assert_eq!(
                b.recv(src, k as u64 * 100 + rank as u64)?,
                message(src, rank, k),
                "{src}->{rank} #{k}"
            );
        }
    }
    assert_eq!(
        b.all_gather(&[rank as u8])?,
        (0..n).map(|r| vec![r as u8]).collect::<Vec<_>>()
    );
    b.barrier()
}

fn rendezvous(n: u32, cfg: Config, seed: u64) {
    let (id, root) = UniqueId::with_config(Some(LO), &cfg).unwrap();
    let id = UniqueId::from_bytes(&id.to_bytes()).unwrap();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let cfg = cfg.clone();
            thread::spawn(move || run_rank(id, r, n, cfg, seed))
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        h.join()
            .unwrap()
            .unwrap_or_else(|e| panic!("rank {r} of {n}: {e}"));
    }
    let report = root.wait().unwrap();
    assert_eq!(report.nranks, n);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
}

#[test]
fn ranks_1_to_8_rendezvous_and_exchange() {
    for n in 1..=8 {
        rendezvous(n, config(10_000), n as u64 * 17);
    }
}

#[test]
fn interface_filter_lo_is_used_for_listening() {
    let cfg = Config {
        timeout: Duration::from_secs(10),
        ifname: Some("lo".into()),
        abort: None,
    };
    rendezvous(3, cfg, 99);
}

#[test]
fn missing_rank_is_named_by_every_joined_rank() {
    let cfg = config(1000);
    let (id, root) = UniqueId::with_config(Some(LO), &cfg).unwrap();
    let t0 = Instant::now();
    let handles: Vec<_> = [0u32, 2, 3]
        .into_iter()
        .map(|r| {
            let cfg = cfg.clone();
            thread::spawn(move || Bootstrap::init(&id, r, 4, b"x", &cfg).map(|_| ()))
        })
        .collect();
    for h in handles {
        match h.join().unwrap() {
            Err(BootstrapError::MissingRanks {
                missing, nranks: 4, ..
            }) => assert_eq!(missing, vec![1]),
            other => panic!("expected MissingRanks, got {other:?}"),
        }
    }
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    match root.wait() {
        Err(e @ BootstrapError::RootTimeout { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("missing ranks [1]"), "{msg}");
        }
        other => panic!("expected RootTimeout, got {other:?}"),
    }
}

#[test]
fn wrong_secret_is_rejected_and_genuine_ranks_complete() {
    let cfg = config(5000);
    let (id, root) = UniqueId::with_config(Some(LO), &cfg).unwrap();
    let mut forged = id.to_bytes();
    forged[8] ^= 0xff; // the secret starts at byte 8
    let forged = UniqueId::from_bytes(&forged).unwrap();
    match Bootstrap::init(&forged, 0, 2, b"", &cfg) {
        Err(BootstrapError::Rejected {
            rank: 0,
            peer: Peer::Root,
            reason: RejectReason::BadSecret,
            ..
        }) => {}
        other => panic!("expected a BadSecret rejection, got {other:?}"),
    }
    let h: Vec<_> = (0..2)
        .map(|r| thread::spawn(move || run_rank(id, r, 2, config(5000), 5)))
        .collect();
    for h in h {
        h.join().unwrap().unwrap();
    }
    let report = root.wait().unwrap();
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    assert!(report.rejected[0].1.contains("wrong secret"));
}

#[test]
fn duplicate_rank_and_nranks_mismatch_are_named() {
    let cfg = config(5000);
    let (id, root) = UniqueId::with_config(Some(LO), &cfg).unwrap();
    let first = thread::spawn(move || run_rank(id, 0, 2, config(5000), 7));
    thread::sleep(Duration::from_millis(300)); // rank 0 joins first
    match Bootstrap::init(&id, 0, 2, b"", &cfg) {
        Err(BootstrapError::Rejected {
            reason: RejectReason::DuplicateRank { rank: 0 },
            ..
        }) => {}
        other => panic!("expected DuplicateRank, got {other:?}"),
    }
    match Bootstrap::init(&id, 1, 3, b"", &cfg) {
        Err(
            e @ BootstrapError::Rejected {
                reason: RejectReason::NranksMismatch { .. },
                ..
            },
        ) => {
            assert!(
                e.to_string()
                    .contains("rank 1 says nranks 3 but rank 0 said nranks 2"),
                "{e}"
            );
        }
        other => panic!("expected NranksMismatch, got {other:?}"),
    }
    assert!(matches!(
        Bootstrap::init(&id, 2, 2, b"", &cfg),
        Err(BootstrapError::InvalidArgument { rank: 2, .. })
    ));
    run_rank(id, 1, 2, config(5000), 7).unwrap();
    first.join().unwrap().unwrap();
    assert_eq!(root.wait().unwrap().rejected.len(), 2);
}

fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.random()).collect()
}

#[test]
fn garbage_does_not_crash_or_hang_listeners() {
    let cfg = config(5000);
    let (id, root) = UniqueId::with_config(Some(LO), &cfg).unwrap();
    // Strays at the root: random bytes, a huge frame header, and a silent connection.
    let mut strays = Vec::new();
    for (i, bytes) in [
        garbage(1, 500),
        wire::encode_frame(Kind::Auth, 0, &[0; 64])[..16].to_vec(),
    ]
    .iter()
    .enumerate()
    {
        let mut s = TcpStream::connect(id.root_addr()).unwrap();
        s.write_all(bytes).unwrap_or_else(|e| panic!("stray {i}: {e}"));
        strays.push(s);
    }
    strays.push(TcpStream::connect(id.root_addr()).unwrap());
    // Each stray is judged on its own handshake thread: wait (boundedly) until the two that
    // sent bytes were refused, so that the report taken at the rendezvous counts them.
    let t0 = Instant::now();
    while root.refused_so_far() < 2 && t0.elapsed() < Duration::from_secs(10) {
        thread::sleep(Duration::from_millis(5));
    }
    let n = 3;
    let ranks: Vec<_> = (0..n)
        .map(|r| {
            let cfg = cfg.clone();
            thread::spawn(move || {
                let b = Bootstrap::init(&id, r, n, &[], &cfg)?;
                b.barrier()?; // rank 0 attacks rank 1 only after everyone is up
                if r == 0 {
                    let addr = b.peer_addr(1).unwrap();
                    TcpStream::connect(addr)
                        .unwrap()
                        .write_all(&garbage(2, 1000))
                        .unwrap();
                    // A well-formed Auth with the wrong secret gets a Reject frame back.
                    let mut s = TcpStream::connect(addr).unwrap();
                    let auth = Auth::new(Role::Peer, [0; 16], 0, n);
                    s.write_all(&wire::encode_frame(Kind::Auth, 0, &auth.encode()))
                        .unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut reply = Vec::new();
                    s.read_to_end(&mut reply).unwrap();
                    assert_eq!(
                        wire::decode_reject(&reply[wire::HEADER_LEN..]).unwrap(),
                        RejectReason::BadSecret
                    );
                }
                b.barrier()?;
                let got = b.all_gather(&[r as u8; 3])?;
                assert_eq!(got, (0..n).map(|x| vec![x as u8; 3]).collect::<Vec<_>>());
                if r == 1 {
                    // The garbage connection is judged by its own listener thread, which may
                    // still be reading it (until rank 0's close) when the barriers are done:
                    // wait for it, boundedly.
                    let t0 = Instant::now();
                    while b.rejected_connections() < 2 && t0.elapsed() < Duration::from_secs(10) {
                        thread::sleep(Duration::from_millis(5));
                    }
                    assert_eq!(b.rejected_connections(), 2);
                }
                b.barrier()
            })
        })
        .collect();
    for h in ranks {
        h.join().unwrap().unwrap();
    }
    let report = root.wait().unwrap();
    assert_eq!(report.nranks, n);
    assert!(report.rejected.len() >= 2, "{:?}", report.rejected);
    drop(strays);
}

#[test]
fn recv_timeout_names_the_peer() {
    let cfg = config(600);
    let (id, root) = UniqueId::with_config(Some(LO), &cfg).unwrap();
    let other = thread::spawn(move || {
        let b = Bootstrap::init(&id, 1, 2, b"", &config(600)).unwrap();
        thread::sleep(Duration::from_millis(1200));
        drop(b);
    });
    let b = Bootstrap::init(&id, 0, 2, b"", &cfg).unwrap();
    let t0 = Instant::now();
    match b.recv(1, 42) {
        Err(
            e @ BootstrapError::Timeout {
                peer: Peer::Rank(1), ..
            },
        ) => assert!(e.to_string().contains("rank 1")),
        other => panic!("expected a timeout naming rank 1, got {other:?}"),
    }
    assert!(t0.elapsed() >= Duration::from_millis(550));
    assert!(matches!(
        b.send(2, 0, b""),
        Err(BootstrapError::InvalidArgument { .. })
    ));
    other.join().unwrap();
    root.wait().unwrap();
}

#[test]
fn config_reads_the_environment() {
    // The only test in this binary that touches the environment; the others pass Config.
    std::env::set_var("OXCCL_BOOTSTRAP_TIMEOUT_MS", "250");
    assert_eq!(Config::from_env().unwrap().timeout, Duration::from_millis(250));
    std::env::set_var("OXCCL_BOOTSTRAP_TIMEOUT_MS", "soon");
    assert!(matches!(
        Config::from_env(),
        Err(BootstrapError::InvalidSetting { .. })
    ));
    std::env::remove_var("OXCCL_BOOTSTRAP_TIMEOUT_MS");
    assert_eq!(Config::from_env().unwrap().timeout, Duration::from_secs(120));
}

const CHILD_ENV: &str = "OXCCL_BOOTSTRAP_TEST_CHILD";

/// Ranks as separate processes: this test re-runs itself with `CHILD_ENV` set to
/// `rank,nranks,id-hex`.
#[test]
fn multi_process_rendezvous() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let parts: Vec<&str> = spec.split(',').collect();
        let (rank, n): (u32, u32) = (parts[0].parse().unwrap(), parts[1].parse().unwrap());
        let bytes: Vec<u8> = (0..parts[2].len() / 2)
            .map(|i| u8::from_str_radix(&parts[2][2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let id = UniqueId::from_bytes(&bytes).unwrap();
        run_rank(id, rank, n, config(10_000), 1234).unwrap();
        return;
    }
    let n = 3;
    let (id, root) = UniqueId::with_config(Some(LO), &config(10_000)).unwrap();
    let hex: String = id.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|r| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "multi_process_rendezvous",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{r},{n},{hex}"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "child rank {r}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(root.wait().unwrap().nranks, n);
}

#[test]
fn unique_id_is_128_bytes_and_validated() {
    assert_eq!(std::mem::size_of::<UniqueId>(), 128);
    let (id, root) = UniqueId::with_config(Some(LO), &config(100)).unwrap();
    assert_eq!(id.root_addr().ip(), LO);
    assert!(matches!(
        UniqueId::from_bytes(&garbage(3, 128)),
        Err(BootstrapError::InvalidId { .. })
    ));
    assert!(matches!(
        UniqueId::from_bytes(b"short"),
        Err(BootstrapError::InvalidId { .. })
    ));
    drop(root); // stops the listener; never waited on
}
