//! Unit tests: wire round trips, sans-IO handshakes on a simulated pair with fake time,
//! interface selection, and proptest fuzzing of the decoders and state machines.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::error::RejectReason;
use super::handshake::{Accepted, Acceptor, Connected, Connector, HandshakeError};
use super::net::{pick_address, IfFilter};
use super::root::Rendezvous;
use super::wire::{self, Auth, FrameDecoder, Kind, PeerEntry, Role};
use super::UniqueId;

const SECRET: [u8; 16] = [7; 16];

fn entry(port: u16, blob: &[u8]) -> PeerEntry {
    PeerEntry {
        addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        blob: blob.to_vec(),
    }
}

#[test]
fn frame_round_trip_in_single_bytes() {
    let mut bytes = wire::encode_frame(Kind::Data, 0xdead_beef_0123, b"hello");
    bytes.extend(wire::encode_frame(Kind::Coll, 1, b""));
    let mut d = FrameDecoder::new(1024);
    let mut frames = Vec::new();
    for b in bytes {
        d.push(&[b]).unwrap();
        while let Some(f) = d.next_frame().unwrap() {
            frames.push(f);
        }
    }
    assert_eq!(frames.len(), 2);
    assert_eq!(
        (frames[0].kind, frames[0].tag, &frames[0].payload[..]),
        (Kind::Data, 0xdead_beef_0123, &b"hello"[..])
    );
    assert_eq!((frames[1].kind, frames[1].payload.len()), (Kind::Coll, 0));
}

#[test]
fn oversized_frame_rejected_at_header() {
    let mut d = FrameDecoder::new(wire::AUTH_LEN);
    let frame = wire::encode_frame(Kind::Data, 0, &[0; 33]);
    assert_eq!(
        d.push(&frame[..wire::HEADER_LEN]),
        Err(wire::WireError::TooLarge { len: 33, cap: 32 })
    );
}

#[test]
fn addresses_and_tables_round_trip() {
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 4242);
    assert_eq!(wire::decode_addr(&wire::encode_addr(v6)).unwrap(), v6);
    let t = vec![
        entry(1, b"a"),
        PeerEntry {
            addr: v6,
            blob: vec![],
        },
        entry(3, &[9; 300]),
    ];
    assert_eq!(wire::decode_table(&wire::encode_table(&t)).unwrap(), t);
    for r in [
        RejectReason::BadSecret,
        RejectReason::DuplicateRank { rank: 3 },
        RejectReason::NranksMismatch {
            rank: 1,
            nranks: 4,
            first_rank: 0,
            first_nranks: 8,
        },
        RejectReason::Protocol { detail: "x".into() },
    ] {
        assert_eq!(wire::decode_reject(&wire::encode_reject(&r)).unwrap(), r);
    }
}

#[test]
fn unique_id_round_trip_and_garbage() {
    let id = UniqueId::from_parts("127.0.0.1:5000".parse().unwrap(), SECRET);
    let back = UniqueId::from_bytes(&id.to_bytes()).unwrap();
    assert_eq!(back, id);
    assert_eq!(back.secret(), SECRET);
    assert!(
        !format!("{id:?}").contains("7, 7"),
        "debug must not print the secret"
    );
    assert!(UniqueId::from_bytes(&[0; 128]).is_err());
    assert!(UniqueId::from_bytes(&[0; 12]).is_err());
    let mut b = id.to_bytes();
    b[100] = 1;
    assert!(UniqueId::from_bytes(&b).is_err());
}

/// Runs a connector against an acceptor in memory, one byte at a time, with fake time.
fn simulate(
    auth: Auth,
    join: Option<&PeerEntry>,
    mut acc: Acceptor,
) -> (
    Result<Accepted, HandshakeError>,
    Option<Result<Connected, HandshakeError>>,
) {
    let t0 = Instant::now();
    let (mut conn, hello) = Connector::new(auth, join, t0 + Duration::from_secs(5));
    let mut accepted = None;
    for b in &hello {
        match acc.handle_bytes(&[*b], t0) {
            Ok(None) => {}
            Ok(Some(a)) => accepted = Some(Ok(a)),
            Err(e) => {
                let reply = e.reply().unwrap();
                return (Err(e), Some(conn.handle_bytes(&reply, t0).map(|c| c.unwrap())));
            }
        }
    }
    let accepted = accepted.unwrap();
    let reply = match &accepted {
        Ok(Accepted::Peer { reply, .. }) => reply.clone(),
        _ => return (accepted, None),
    };
    (accepted, Some(conn.handle_bytes(&reply, t0).map(|c| c.unwrap())))
}

#[test]
fn peer_handshake_accepts_and_rejects() {
    let now = Instant::now() + Duration::from_secs(5);
    let (a, c) = simulate(
        Auth::new(Role::Peer, SECRET, 2, 4),
        None,
        Acceptor::peer(SECRET, 0, 4, now),
    );
    assert!(matches!(a, Ok(Accepted::Peer { rank: 2, .. })));
    assert_eq!(c, Some(Ok(Connected::Accepted)));
    let (a, c) = simulate(
        Auth::new(Role::Peer, [8; 16], 2, 4),
        None,
        Acceptor::peer(SECRET, 0, 4, now),
    );
    assert_eq!(a, Err(HandshakeError::Reject(RejectReason::BadSecret)));
    assert_eq!(c, Some(Err(HandshakeError::Rejected(RejectReason::BadSecret))));
    let (a, _) = simulate(
        Auth::new(Role::Peer, SECRET, 2, 8),
        None,
        Acceptor::peer(SECRET, 0, 4, now),
    );
    assert!(matches!(
        a,
        Err(HandshakeError::Reject(RejectReason::NranksMismatch {
            rank: 2,
            nranks: 8,
            ..
        }))
    ));
}

#[test]
fn root_handshake_and_rendezvous() {
    let deadline = Instant::now() + Duration::from_secs(5);
    let e = entry(9, b"blob");
    let (a, _) = simulate(
        Auth::new(Role::Root, SECRET, 1, 2),
        Some(&e),
        Acceptor::root(SECRET, deadline),
    );
    let Ok(Accepted::Join { auth, entry: got }) = a else {
        panic!("{a:?}")
    };
    assert_eq!(got, e);
    let mut rv = Rendezvous::default();
    rv.join(&auth, got.clone()).unwrap();
    assert_eq!(rv.missing(), vec![0]);
    assert_eq!(
        rv.join(&auth, got.clone()),
        Err(RejectReason::DuplicateRank { rank: 1 })
    );
    let bad = Auth::new(Role::Root, SECRET, 0, 3);
    assert_eq!(
        rv.join(&bad, got.clone()),
        Err(RejectReason::NranksMismatch {
            rank: 0,
            nranks: 3,
            first_rank: 1,
            first_nranks: 2
        })
    );
    let out = Auth::new(Role::Root, SECRET, 5, 2);
    assert_eq!(
        rv.join(&out, got.clone()),
        Err(RejectReason::RankOutOfRange { rank: 5, nranks: 2 })
    );
    rv.join(&Auth::new(Role::Root, SECRET, 0, 2), entry(8, b""))
        .unwrap();
    assert!(rv.complete());
    assert_eq!(rv.table()[1], e);
}

#[test]
fn acceptor_times_out_with_fake_time() {
    let t0 = Instant::now();
    let mut acc = Acceptor::root(SECRET, t0 + Duration::from_secs(1));
    assert_eq!(acc.handle_bytes(&[1, 0], t0), Ok(None));
    assert_eq!(
        acc.handle_bytes(&[], t0 + Duration::from_secs(2)),
        Err(HandshakeError::Timeout)
    );
}

#[test]
fn interface_filters_follow_nccl_syntax() {
    let lo4 = ("lo".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    let lo6 = ("lo".to_string(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    let eth = ("eth0".to_string(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let eth1 = ("eth1".to_string(), IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1)));
    let dock = ("docker0".to_string(), IpAddr::V4(Ipv4Addr::new(172, 17, 0, 1)));
    let all = vec![lo6.clone(), lo4.clone(), dock.clone(), eth.clone(), eth1.clone()];
    assert_eq!(pick_address(&all, None), Some(eth.clone()));
    assert_eq!(
        pick_address(&[lo6.clone(), lo4.clone(), dock.clone()], None),
        Some(lo4.clone())
    );
    assert_eq!(pick_address(&all, Some("lo")), Some(lo4.clone()));
    assert_eq!(pick_address(&all, Some("=eth1")), Some(eth1.clone()));
    assert_eq!(pick_address(&all, Some("=eth")), None);
    assert_eq!(pick_address(&all, Some("^lo,eth")), Some(dock.clone()));
    assert_eq!(pick_address(&all, Some("^=eth0,lo,docker0")), Some(eth1));
    assert_eq!(IfFilter::parse("^=a, b").names, vec!["a", "b"]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary bytes in arbitrary chunks: no panic, and never more than one frame beyond the
    /// cap buffered.
    #[test]
    fn decoder_survives_garbage(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..32)) {
        let cap = 256;
        let mut d = FrameDecoder::new(cap);
        'outer: for c in &chunks {
            if d.push(c).is_err() { break; }
            loop {
                match d.next_frame() {
                    Ok(Some(f)) => prop_assert!(f.payload.len() <= cap),
                    Ok(None) => break,
                    Err(_) => break 'outer,
                }
            }
            prop_assert!(d.buffered() <= wire::HEADER_LEN + cap + 64);
        }
    }

    /// Garbage, possibly after a valid prefix, into both state machines: no panic; the acceptor
    /// either rejects with a reply frame, waits, or accepts only a genuine Auth.
    #[test]
    fn handshakes_survive_garbage(prefix in 0usize..80, garbage in prop::collection::vec(any::<u8>(), 0..200), root in any::<bool>()) {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(1);
        let auth = Auth::new(if root { Role::Root } else { Role::Peer }, SECRET, 1, 2);
        let (_, hello) = Connector::new(auth, Some(&entry(1, b"x")).filter(|_| root), deadline);
        let mut input = hello[..prefix.min(hello.len())].to_vec();
        input.extend(&garbage);
        let mut acc = if root { Acceptor::root(SECRET, deadline) } else { Acceptor::peer(SECRET, 0, 2, deadline) };
        for c in input.chunks(7) {
            match acc.handle_bytes(c, t0) {
                Ok(None) => {}
                Ok(Some(_)) => break,
                Err(e) => { prop_assert!(e.reply().is_some()); break; }
            }
        }
        let (mut conn, _) = Connector::new(auth, None, deadline);
        for c in garbage.chunks(5) {
            if !matches!(conn.handle_bytes(c, t0), Ok(None)) { break; }
        }
    }

    #[test]
    fn table_decoder_never_panics(p in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = wire::decode_table(&p);
        let _ = wire::decode_reject(&p);
        let _ = wire::decode_abort(&p);
        let _ = wire::decode_join(&p);
        let _ = UniqueId::from_bytes(&p);
    }
}
