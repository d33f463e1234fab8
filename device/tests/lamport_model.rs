//! Exhaustive-interleaving model of the Lamport protocol of `oxccl_device::coll::sym`
//! (sequentially consistent steps; the weak-memory side is argued in the module doc):
//! ranks run ops 0..K in order; op k uses buffer k % B; each op stores one line into every
//! peer's buffer, then, per peer, waits for its line, reads it, and re-poisons it (two
//! separate steps). Every reachable state is explored; the checks: a reader never consumes
//! a line of another op (stale data), a writer never stores onto a line that is not
//! poisoned (the re-poisoning would race it and erase its data), and every interleaving
//! finishes (no deadlock). A mutation with one buffer must be caught.

use std::collections::HashSet;

#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    pc: Vec<usize>,
    /// lines[rank][buffer][src]: 0 = sentinel, k + 1 = data of op k.
    lines: Vec<Vec<Vec<usize>>>,
}

/// Explores every interleaving; `Err` describes the first violation found.
fn explore(n: usize, ops: usize, buffers: usize) -> Result<usize, String> {
    let peers = n - 1;
    let steps = peers + 2 * peers; // writes, then (read, poison) per peer
    let init = State {
        pc: vec![0; n],
        lines: vec![vec![vec![0; n]; buffers]; n],
    };
    let mut seen = HashSet::new();
    let mut stack = vec![init];
    while let Some(s) = stack.pop() {
        if !seen.insert(s.clone()) {
            continue;
        }
        let mut moved = false;
        for r in 0..n {
            let pc = s.pc[r];
            if pc == ops * steps {
                continue;
            }
            let (k, step) = (pc / steps, pc % steps);
            let b = k % buffers;
            let mut t = s.clone();
            if step < peers {
                let q = (r + 1 + step) % n;
                if t.lines[q][b][r] != 0 {
                    return Err(format!(
                        "rank {r} op {k} stores onto an unpoisoned line of rank {q}"
                    ));
                }
                t.lines[q][b][r] = k + 1;
            } else {
                let j = (step - peers) / 2;
                let q = (r + 1 + j) % n;
                let v = s.lines[r][b][q];
                if (step - peers).is_multiple_of(2) {
                    if v == 0 {
                        continue; // still polling
                    }
                    if v != k + 1 {
                        return Err(format!("rank {r} op {k} consumed data of op {} from {q}", v - 1));
                    }
                } else {
                    t.lines[r][b][q] = 0; // re-poison
                }
            }
            t.pc[r] += 1;
            moved = true;
            stack.push(t);
        }
        if !moved && s.pc.iter().any(|&p| p != ops * steps) {
            return Err(format!("deadlock at {:?}", s.pc));
        }
    }
    Ok(seen.len())
}

#[test]
fn lamport_three_buffers_two_and_three_ranks() {
    let states = explore(2, 7, 3).unwrap();
    assert!(states > 100);
    explore(3, 4, 3).unwrap();
}

#[test]
fn the_model_catches_a_single_buffer() {
    assert!(explore(2, 4, 1).is_err());
}
