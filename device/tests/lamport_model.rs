//! Exhaustive-interleaving model of the Lamport protocol of `oxccl_device::coll::sym`
//! (sequentially consistent steps; the weak-memory side is argued in the module doc):
//! ranks run ops 0..K in order; op k uses buffer k % B and is one of the mailbox kernels,
//! as a per-rank program of steps over its lines (every rank runs the same kind for op k):
//! - one-shot: store the header line and one data line into every peer's buffer, then per
//!   peer wait for its header and its line, read each and re-poison it (separate steps);
//! - two-shot: the same with the first phase's line (block `q` to owner `q`), then store the
//!   reduced block as the second phase's line into every peer's buffer, then per peer wait
//!   for that line, read it and re-poison it;
//! - sparse two-shot (fewer lines than ranks, only rank 0's block has one): rank 0 waits for
//!   the other ranks' first-phase lines and sends them its second-phase line; the others
//!   send their line to rank 0 and wait for its result; every rank exchanges headers, taken
//!   before the second phase's waits (the only link between two ranks without a block).
//!
//! Every reachable state is explored; the checks: a reader never consumes a line of another
//! op (stale data), a writer never stores onto a line that is not poisoned (the
//! re-poisoning would race it and erase its data), and every interleaving finishes (no
//! deadlock). Mutations must be caught: one buffer, and a two-shot whose second phase
//! reuses the first phase's line.

use std::collections::HashSet;

/// The kind of one op (the same on every rank).
#[derive(Clone, Copy, Debug)]
enum Kind {
    OneShot,
    TwoShot,
    TwoShotSparse,
}

/// One step of a rank's program: store into `(peer, line)` of the peer's buffer, wait for
/// and read, or re-poison line `(src, line)` of this rank's own buffer.
#[derive(Clone, Copy, Debug)]
enum Step {
    Write(usize, usize),
    Read(usize, usize),
    Poison(usize, usize),
}

/// Lines of a slot in the model: the first phase's (and the one-shot's), the second
/// phase's, the header.
const LINES: usize = 3;
const HEADER: usize = 2;

/// Rank `r`'s steps for one op of `kind` on `n` ranks; `phase2` is the line the two-shot's
/// second phase uses (1; 0 is the mutation).
fn program(kind: Kind, r: usize, n: usize, phase2: usize) -> Vec<Step> {
    let peers: Vec<usize> = (1..n).map(|k| (r + k) % n).collect();
    let mut p = Vec::new();
    let take = |p: &mut Vec<Step>, q: usize, line: usize| {
        p.push(Step::Read(q, line));
        p.push(Step::Poison(q, line));
    };
    match kind {
        Kind::OneShot | Kind::TwoShot => {
            for &q in &peers {
                p.push(Step::Write(q, HEADER));
                p.push(Step::Write(q, 0));
            }
            for &q in &peers {
                take(&mut p, q, HEADER);
                take(&mut p, q, 0);
            }
            if let Kind::TwoShot = kind {
                for &q in &peers {
                    p.push(Step::Write(q, phase2));
                }
                for &q in &peers {
                    take(&mut p, q, phase2);
                }
            }
        }
        Kind::TwoShotSparse => {
            for &q in &peers {
                p.push(Step::Write(q, HEADER));
            }
            if r == 0 {
                for &q in &peers {
                    take(&mut p, q, HEADER);
                    take(&mut p, q, 0);
                }
                for &q in &peers {
                    p.push(Step::Write(q, phase2));
                }
            } else {
                p.push(Step::Write(0, 0));
                for &q in &peers {
                    take(&mut p, q, HEADER);
                }
                take(&mut p, 0, phase2);
            }
        }
    }
    p
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    pc: Vec<u16>,
    /// lines[((rank * buffers + buffer) * n + src) * LINES + line]: 0 = sentinel, k + 1 =
    /// data of op k.
    lines: Vec<u8>,
}

/// Explores every interleaving of ops `kinds` (op k of kind `kinds[k]`) on `n` ranks with
/// `buffers` buffers; `Err` describes the first violation found.
fn explore(n: usize, kinds: &[Kind], buffers: usize, phase2: usize) -> Result<usize, String> {
    // Per rank: (op, step) in program order.
    let progs: Vec<Vec<(usize, Step)>> = (0..n)
        .map(|r| {
            kinds
                .iter()
                .enumerate()
                .flat_map(|(k, &kind)| program(kind, r, n, phase2).into_iter().map(move |s| (k, s)))
                .collect()
        })
        .collect();
    let at = |rank: usize, b: usize, src: usize, line: usize| ((rank * buffers + b) * n + src) * LINES + line;
    let init = State {
        pc: vec![0; n],
        lines: vec![0; n * buffers * n * LINES],
    };
    let mut seen = HashSet::new();
    let mut stack = vec![init];
    while let Some(s) = stack.pop() {
        if !seen.insert(s.clone()) {
            continue;
        }
        let mut moved = false;
        for (r, prog) in progs.iter().enumerate() {
            let pc = s.pc[r] as usize;
            let Some(&(k, step)) = prog.get(pc) else {
                continue;
            };
            let b = k % buffers;
            let mut t = s.clone();
            match step {
                Step::Write(q, line) => {
                    let i = at(q, b, r, line);
                    if t.lines[i] != 0 {
                        return Err(format!(
                            "rank {r} op {k} ({:?}) stores onto an unpoisoned line {line} of rank {q}",
                            kinds[k]
                        ));
                    }
                    t.lines[i] = k as u8 + 1;
                }
                Step::Read(q, line) => {
                    let v = s.lines[at(r, b, q, line)] as usize;
                    if v == 0 {
                        continue; // still polling
                    }
                    if v != k + 1 {
                        return Err(format!(
                            "rank {r} op {k} ({:?}) consumed data of op {} from {q}",
                            kinds[k],
                            v - 1
                        ));
                    }
                }
                Step::Poison(q, line) => t.lines[at(r, b, q, line)] = 0,
            }
            t.pc[r] += 1;
            moved = true;
            stack.push(t);
        }
        if !moved && (0..n).any(|r| (s.pc[r] as usize) < progs[r].len()) {
            return Err(format!("deadlock at {:?}", s.pc));
        }
    }
    Ok(seen.len())
}

#[test]
fn lamport_three_buffers_two_and_three_ranks() {
    let states = explore(2, &[Kind::OneShot; 7], 3, 1).unwrap();
    assert!(states > 100);
    explore(3, &[Kind::OneShot; 4], 3, 1).unwrap();
}

#[test]
fn lamport_two_shot_mixed_with_one_shot() {
    use Kind::*;
    let mixed = [
        TwoShot,
        OneShot,
        TwoShotSparse,
        TwoShot,
        TwoShotSparse,
        OneShot,
        TwoShot,
    ];
    let states = explore(2, &mixed, 3, 1).unwrap();
    assert!(states > 100);
    let states = explore(
        3,
        &[TwoShot, TwoShotSparse, OneShot, TwoShot, TwoShotSparse, OneShot],
        3,
        1,
    )
    .unwrap();
    assert!(states > 1000, "{states}");
    explore(3, &[TwoShotSparse, TwoShot, TwoShotSparse], 3, 1).unwrap();
}

#[test]
fn the_model_catches_a_single_buffer() {
    assert!(explore(2, &[Kind::OneShot; 4], 1, 1).is_err());
    // A two-shot alone couples two ranks tightly enough for one buffer; mixed with the
    // one-shot it is not.
    use Kind::*;
    assert!(explore(3, &[TwoShot, OneShot, TwoShot, OneShot], 1, 1).is_err());
}

#[test]
fn the_model_catches_a_second_phase_on_the_first_phase_line() {
    assert!(explore(2, &[Kind::TwoShot; 3], 3, 0).is_err());
    assert!(explore(3, &[Kind::TwoShot, Kind::OneShot], 3, 0).is_err());
}
