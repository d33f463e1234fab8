#![allow(clippy::needless_range_loop)] // pieces are indexed across every rank's plan
//! The staged schedule against a model: every rank's pieces are run over host byte arrays
//! (user memory with the send and receive buffers at their offsets, in place or not, and
//! the two staging halves), with each piece's kernel replaced by the collective's meaning on
//! the staging halves, and the result compared with the collective's meaning on the user
//! buffers. Reductions are modelled as a bytewise wrapping sum: pieces are cut at element
//! boundaries, so any elementwise operator gives the same answer piecewise and whole.

use proptest::prelude::*;

use super::*;

const COLLS: [u32; 9] = [
    COLL_ALL_REDUCE,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALL_GATHER,
    COLL_REDUCE_SCATTER,
    COLL_ALL_TO_ALL,
    COLL_GATHER,
    COLL_SCATTER,
    COLL_ALL_GATHER_V,
];

struct Rank {
    user: Vec<u8>,
    send: usize,
    recv: usize,
    s: Vec<u8>,
    r: Vec<u8>,
}

impl Rank {
    fn at(&mut self, l: Loc) -> (&mut Vec<u8>, usize) {
        match l {
            Loc::UserSend(o) => (&mut self.user, self.send + o),
            Loc::UserRecv(o) => (&mut self.user, self.recv + o),
            Loc::StageSend(o) => (&mut self.s, o),
            Loc::StageRecv(o) => (&mut self.r, o),
        }
    }

    fn apply(&mut self, moves: &[Move]) {
        for m in moves.iter().filter(|m| m.bytes > 0) {
            let (buf, o) = self.at(m.src);
            let data = buf[o..o + m.bytes].to_vec();
            let (buf, o) = self.at(m.dst);
            buf[o..o + m.bytes].copy_from_slice(&data);
        }
    }
}

fn sum(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![0u8; parts[0].len()];
    for p in parts {
        for (o, &b) in out.iter_mut().zip(p.iter()) {
            *o = o.wrapping_add(b);
        }
    }
    out
}

/// Elements of (send, recv) per rank.
fn lens(coll: u32, n: usize, count: usize, rank: usize, v: Option<(&[usize], &[usize])>) -> (usize, usize) {
    match coll {
        COLL_ALL_REDUCE | COLL_BROADCAST | COLL_REDUCE => (count, count),
        COLL_ALL_GATHER | COLL_GATHER => (count, n * count),
        COLL_REDUCE_SCATTER | COLL_SCATTER => (n * count, count),
        COLL_ALL_TO_ALL => (n * count, n * count),
        _ => {
            let (c, d) = v.unwrap();
            (c[rank], (0..n).map(|q| d[q] + c[q]).max().unwrap_or(0))
        }
    }
}

/// The send buffer's element offset from the receive buffer's in the in-place form (negative:
/// the receive buffer lies inside the send buffer).
fn in_place_shift(coll: u32, count: usize, rank: usize, v: Option<(&[usize], &[usize])>) -> Option<isize> {
    match coll {
        COLL_ALL_REDUCE | COLL_BROADCAST | COLL_REDUCE => Some(0),
        COLL_ALL_GATHER | COLL_GATHER => Some((rank * count) as isize),
        COLL_REDUCE_SCATTER | COLL_SCATTER => Some(-((rank * count) as isize)),
        COLL_ALL_GATHER_V => Some(v.unwrap().1[rank] as isize),
        _ => None,
    }
}

/// What the collective means on the staging halves of a piece (count `k`, or the piece's
/// all-gather-v layout), in place over `ranks`.
fn run_kernel(
    coll: u32,
    k: usize,
    es: usize,
    root: usize,
    pv: Option<&(Vec<usize>, Vec<usize>)>,
    ranks: &mut [Rank],
) {
    let n = ranks.len();
    let kb = k * es;
    let s: Vec<Vec<u8>> = ranks.iter().map(|r| r.s.clone()).collect();
    for (me, r) in ranks.iter_mut().enumerate() {
        match coll {
            COLL_ALL_REDUCE => {
                r.r[..kb].copy_from_slice(&sum(&s.iter().map(|x| &x[..kb]).collect::<Vec<_>>()))
            }
            COLL_BROADCAST => r.r[..kb].copy_from_slice(&s[root][..kb]),
            COLL_REDUCE if me == root => {
                r.r[..kb].copy_from_slice(&sum(&s.iter().map(|x| &x[..kb]).collect::<Vec<_>>()))
            }
            COLL_ALL_GATHER => (0..n).for_each(|q| r.r[q * kb..(q + 1) * kb].copy_from_slice(&s[q][..kb])),
            COLL_REDUCE_SCATTER => r.r[..kb].copy_from_slice(&sum(&s
                .iter()
                .map(|x| &x[me * kb..(me + 1) * kb])
                .collect::<Vec<_>>())),
            COLL_ALL_TO_ALL => {
                (0..n).for_each(|q| r.r[q * kb..(q + 1) * kb].copy_from_slice(&s[q][me * kb..(me + 1) * kb]))
            }
            COLL_GATHER if me == root => {
                (0..n).for_each(|q| r.r[q * kb..(q + 1) * kb].copy_from_slice(&s[q][..kb]))
            }
            COLL_SCATTER => r.r[..kb].copy_from_slice(&s[root][me * kb..(me + 1) * kb]),
            COLL_ALL_GATHER_V => {
                let (c, d) = pv.unwrap();
                for q in 0..n {
                    r.r[d[q] * es..(d[q] + c[q]) * es].copy_from_slice(&s[q][..c[q] * es]);
                }
            }
            _ => {}
        }
    }
}

/// What every rank's user receive buffer must hold afterwards, from the inputs `snd` (and its
/// own prior content `prior` where the collective leaves it alone).
fn expected(
    coll: u32,
    count: usize,
    es: usize,
    root: usize,
    v: Option<(&[usize], &[usize])>,
    snd: &[Vec<u8>],
    prior: &[Vec<u8>],
) -> Vec<Vec<u8>> {
    let n = snd.len();
    let cb = count * es;
    (0..n)
        .map(|me| {
            let mut out = prior[me].clone();
            match coll {
                COLL_ALL_REDUCE => out = sum(&snd.iter().map(|x| &x[..]).collect::<Vec<_>>()),
                COLL_BROADCAST => out = snd[root].clone(),
                COLL_REDUCE if me == root => out = sum(&snd.iter().map(|x| &x[..]).collect::<Vec<_>>()),
                COLL_ALL_GATHER => out = snd.concat(),
                COLL_REDUCE_SCATTER => {
                    out = sum(&snd.iter().map(|x| &x[me * cb..(me + 1) * cb]).collect::<Vec<_>>())
                }
                COLL_ALL_TO_ALL => {
                    out = (0..n)
                        .flat_map(|q| snd[q][me * cb..(me + 1) * cb].to_vec())
                        .collect()
                }
                COLL_GATHER if me == root => out = snd.concat(),
                COLL_SCATTER => out = snd[root][me * cb..(me + 1) * cb].to_vec(),
                COLL_ALL_GATHER_V => {
                    let (c, d) = v.unwrap();
                    for q in 0..n {
                        out[d[q] * es..(d[q] + c[q]) * es].copy_from_slice(&snd[q][..c[q] * es]);
                    }
                }
                _ => {}
            }
            out
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn run_case(
    coll: u32,
    n: usize,
    count: usize,
    es: usize,
    half: usize,
    root: usize,
    in_place: bool,
    agv: &[(usize, usize)],
    seed: u64,
) -> std::result::Result<(), String> {
    let (counts, displs): (Vec<usize>, Vec<usize>) = agv.iter().copied().unzip();
    let v = (coll == COLL_ALL_GATHER_V).then_some((&counts[..], &displs[..]));
    let in_place = in_place && in_place_shift(coll, count, 0, v).is_some();
    let mut rng = seed;
    let mut next = move || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) as u8
    };
    let mut ranks: Vec<Rank> = (0..n)
        .map(|me| {
            let (sl, rl) = lens(coll, n, count, me, v);
            let (sb, rb) = (sl * es, rl * es);
            let (send, recv, total) = if in_place {
                let shift = in_place_shift(coll, count, me, v).unwrap() * es as isize;
                if shift >= 0 {
                    (shift as usize, 0, rb.max(shift as usize + sb))
                } else {
                    (0, (-shift) as usize, sb.max(rb + (-shift) as usize))
                }
            } else {
                (0, sb, sb + rb)
            };
            Rank {
                user: (0..total).map(|_| next()).collect(),
                send,
                recv,
                s: vec![0xee; half],
                r: vec![0xdd; half],
            }
        })
        .collect();
    let snd: Vec<Vec<u8>> = (0..n)
        .map(|me| {
            let sb = lens(coll, n, count, me, v).0 * es;
            ranks[me].user[ranks[me].send..ranks[me].send + sb].to_vec()
        })
        .collect();
    let prior: Vec<Vec<u8>> = (0..n)
        .map(|me| {
            let rb = lens(coll, n, count, me, v).1 * es;
            ranks[me].user[ranks[me].recv..ranks[me].recv + rb].to_vec()
        })
        .collect();
    let plans: Vec<Vec<Piece>> = (0..n)
        .map(|me| {
            plan(&Shape {
                coll,
                count,
                nranks: n,
                rank: me,
                root,
                size: es,
                half,
                v,
            })
        })
        .collect::<std::result::Result<_, _>>()?;
    for me in 1..n {
        if plans[me].len() != plans[0].len() {
            return Err(format!(
                "rank {me} has {} pieces, rank 0 {}",
                plans[me].len(),
                plans[0].len()
            ));
        }
        for (a, b) in plans[me].iter().zip(&plans[0]) {
            if a.grid_bytes != b.grid_bytes || a.v != b.v || (coll != COLL_ALL_GATHER_V && a.count != b.count)
            {
                return Err(format!("rank {me} cuts different pieces than rank 0"));
            }
        }
    }
    for j in 0..plans[0].len() {
        for (me, r) in ranks.iter_mut().enumerate() {
            for m in plans[me][j].before.iter().chain(&plans[me][j].after) {
                for l in [m.dst, m.src] {
                    if let Loc::StageSend(o) | Loc::StageRecv(o) = l {
                        if o + m.bytes > half {
                            return Err(format!("piece {j} of rank {me} overruns the staging half"));
                        }
                    }
                }
            }
            r.apply(&plans[me][j].before);
        }
        run_kernel(
            coll,
            plans[0][j].count,
            es,
            root,
            plans[0][j].v.as_ref(),
            &mut ranks,
        );
        for (me, r) in ranks.iter_mut().enumerate() {
            r.apply(&plans[me][j].after);
        }
    }
    let want = expected(coll, count, es, root, v, &snd, &prior);
    for (me, r) in ranks.iter().enumerate() {
        let got = &r.user[r.recv..r.recv + want[me].len()];
        if got != &want[me][..] {
            let at = got.iter().zip(&want[me]).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!(
                "rank {me}: output differs at byte {at} ({} pieces)",
                plans[0].len()
            ));
        }
    }
    Ok(())
}

#[test]
fn piece_fingerprints_differ_by_piece_and_call() {
    let a = piece_fp(0x1234, 0);
    assert_ne!(a, piece_fp(0x1234, 1));
    assert_ne!(a, piece_fp(0x1235, 0));
    assert_eq!(a, piece_fp(0x1234, 0));
}

#[test]
fn too_small_staging_is_an_error_not_a_loop() {
    let s = Shape {
        coll: COLL_ALL_GATHER,
        count: 10,
        nranks: 8,
        rank: 0,
        root: 0,
        size: 8,
        half: 32,
        v: None,
    };
    assert!(plan(&s).unwrap_err().contains("OXCCL_STAGING_BYTES"));
}

#[test]
fn every_collective_over_many_pieces() {
    for coll in COLLS {
        for in_place in [false, true] {
            let agv = [(5, 20), (0, 0), (17, 1)];
            run_case(coll, 3, 13, 2, 24, 1, in_place, &agv, 7).unwrap_or_else(|e| panic!("coll {coll}: {e}"));
        }
    }
}

fn agv_layout(n: usize, max: usize) -> impl Strategy<Value = Vec<(usize, usize)>> {
    proptest::collection::vec((0..=max, 0..4usize), n).prop_map(|v| {
        // Displacements in rank order with random gaps (blocks never overlap).
        let mut at = 0;
        v.into_iter()
            .map(|(c, gap)| {
                at += gap;
                let d = at;
                at += c;
                (c, d)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn staged_schedule_matches_the_collective(
        coll_i in 0..COLLS.len(),
        n in 1usize..6,
        count in 0usize..70,
        es in prop::sample::select(vec![1usize, 2, 4, 8]),
        half_elems in 1usize..40,
        root_seed in 0usize..100,
        in_place in any::<bool>(),
        seed in any::<u64>(),
        agv in (1usize..6).prop_flat_map(|n| agv_layout(n, 30)),
    ) {
        let coll = COLLS[coll_i];
        let n = if coll == COLL_ALL_GATHER_V { agv.len() } else { n };
        // Enough for one element per rank, so that every shape can be staged.
        let half = es * n * half_elems;
        run_case(coll, n, count, es, half, root_seed % n, in_place, &agv, seed).map_err(TestCaseError::fail)?;
    }
}
