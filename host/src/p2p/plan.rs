//! How one rank's sends and receives of a group become kernel launches: which operations
//! share a launch, and how many blocks ("lanes") each gets. Pure functions of the operations
//! and the limits, tested here.
//!
//! Every operation of a launch runs at once (each on its own blocks), so a group that fits
//! in one launch completes in any posting order. A larger group (more than `max_ops`
//! operations) is cut into several launches, which run one after the other on the stream. To
//! keep that deadlock-free the cut must put matched operations into "the same" launch on both
//! sides, whatever the other ranks' groups look like. Each operation gets a key that the
//! matching operation on the peer shares: `(t / per_pair, d)`, where `d` is the ring distance
//! from sender to receiver (`(peer - rank) mod n` for a send, `(rank - peer) mod n` for a
//! receive) and `t` the operation's index among this group's operations with the same peer
//! and direction. Launches hold whole runs of keys in key order. Then the operations with
//! the smallest key not yet done are, on every rank, in the first launch not yet done, so they
//! all run and complete, and by induction every launch completes (provided matched
//! operations sit in groups of the same shape, as in NCCL's patterns: rings, all-pairs,
//! all-to-all built from sends and receives).

/// One operation as the planner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlanOp {
    pub recv: bool,
    pub peer: u32,
    pub bytes: u64,
    /// Index among this group's operations with the same peer and direction.
    pub pair_index: u32,
}

/// Limits of one launch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Operations per launch (at least 2).
    pub max_ops: usize,
    /// Blocks per launch (at least `max_ops`).
    pub max_blocks: u32,
    /// Most lanes of one send.
    pub max_lanes: u32,
    /// A send gets one lane per this many bytes (before the other limits).
    pub lane_bytes: u64,
    /// Whether sends may use several lanes (direct mode only).
    pub multi_lane: bool,
}

/// The launches of `ops` (indices into `ops`, each launch in posting order) for rank `rank`
/// of `nranks`.
pub(crate) fn launches(ops: &[PlanOp], rank: u32, nranks: u32, max_ops: usize) -> Vec<Vec<usize>> {
    let max_ops = max_ops.max(2);
    if ops.is_empty() {
        return Vec::new();
    }
    if ops.len() <= max_ops {
        return vec![(0..ops.len()).collect()];
    }
    let n = nranks.max(1) as u64;
    let per_pair = (max_ops / 2) as u32;
    let key = |o: &PlanOp| {
        let (a, b) = if o.recv { (rank, o.peer) } else { (o.peer, rank) };
        let d = (a as u64 + n - b as u64 % n) % n;
        (o.pair_index / per_pair, d)
    };
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| (key(&ops[i]), i));
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let k = key(&ops[order[i]]);
        let mut j = i;
        while j < order.len() && key(&ops[order[j]]) == k {
            j += 1;
        }
        // A key holds at most `per_pair` sends to one peer and `per_pair` receives from one
        // peer: never more than `max_ops`.
        match out.last_mut() {
            Some(l) if l.len() + (j - i) <= max_ops => l.extend_from_slice(&order[i..j]),
            _ => out.push(order[i..j].to_vec()),
        }
        i = j;
    }
    for l in &mut out {
        l.sort_unstable();
    }
    out
}

/// Lanes of each operation of one launch (`ops` are the launch's operations): receives get
/// one; sends one per `lane_bytes` of data, at most `max_lanes`, sharing what the block budget
/// leaves after one block per operation.
pub(crate) fn lanes(ops: &[PlanOp], lim: &Limits) -> Vec<u32> {
    let sends = ops.iter().filter(|o| !o.recv).count() as u32;
    let spare = lim.max_blocks.saturating_sub(ops.len() as u32);
    let extra = spare.checked_div(sends).unwrap_or(0);
    ops.iter()
        .map(|o| {
            if o.recv || !lim.multi_lane {
                return 1;
            }
            let want = o
                .bytes
                .div_ceil(lim.lane_bytes.max(1))
                .clamp(1, lim.max_lanes.max(1) as u64) as u32;
            want.min(1 + extra)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(recv: bool, peer: u32, pair_index: u32) -> PlanOp {
        PlanOp {
            recv,
            peer,
            bytes: 1 << 20,
            pair_index,
        }
    }

    /// All-pairs exchange of `n` ranks, `reps` operations per pair and direction.
    fn all_pairs(n: u32, reps: u32) -> Vec<PlanOp> {
        let mut v = Vec::new();
        for q in 0..n {
            for t in 0..reps {
                v.push(op(false, q, t));
                v.push(op(true, q, t));
            }
        }
        v
    }

    /// Launch index of every operation, keyed by (sender, receiver, pair index).
    fn placement(
        n: u32,
        reps: u32,
        max_ops: usize,
    ) -> std::collections::HashMap<(u32, u32, u32, bool), usize> {
        let mut m = std::collections::HashMap::new();
        for r in 0..n {
            let ops = all_pairs(n, reps);
            for (li, l) in launches(&ops, r, n, max_ops).iter().enumerate() {
                assert!(l.len() <= max_ops);
                for &i in l {
                    let o = ops[i];
                    let (s, d) = if o.recv { (o.peer, r) } else { (r, o.peer) };
                    m.insert((s, d, o.pair_index, o.recv), li);
                }
            }
        }
        m
    }

    #[test]
    fn small_groups_are_one_launch_in_posting_order() {
        let ops = all_pairs(4, 1);
        assert_eq!(launches(&ops, 2, 4, 64), vec![(0..8).collect::<Vec<_>>()]);
        assert!(launches(&[], 0, 1, 64).is_empty());
    }

    #[test]
    fn large_groups_keep_matched_operations_in_matching_launches() {
        for (n, reps, max_ops) in [(64, 1, 64), (8, 5, 8), (5, 3, 4), (3, 7, 2), (16, 2, 6)] {
            let m = placement(n, reps, max_ops);
            let mut covered = 0;
            for (&(s, d, t, recv), &li) in &m {
                if !recv {
                    // The send and its receive sit at the same position in their ranks'
                    // sequences of keys; their launch indices may differ only when one rank
                    // merged keys the other did not, which never happens for these
                    // symmetric groups.
                    assert_eq!(
                        m[&(s, d, t, true)],
                        li,
                        "n={n} reps={reps} max={max_ops} {s}->{d} #{t}"
                    );
                    covered += 1;
                }
            }
            assert_eq!(covered, (n * n * reps) as usize);
        }
    }

    #[test]
    fn lanes_share_the_block_budget() {
        let lim = Limits {
            max_ops: 64,
            max_blocks: 10,
            max_lanes: 8,
            lane_bytes: 1 << 16,
            multi_lane: true,
        };
        let ops = [op(false, 1, 0), op(true, 1, 0), op(false, 2, 0)];
        assert_eq!(lanes(&ops, &lim), vec![4, 1, 4]);
        let small = [
            PlanOp {
                bytes: 10,
                ..op(false, 1, 0)
            },
            op(true, 0, 0),
        ];
        assert_eq!(lanes(&small, &lim), vec![1, 1]);
        let staged = Limits {
            multi_lane: false,
            ..lim
        };
        assert_eq!(lanes(&ops, &staged), vec![1, 1, 1]);
        let many: Vec<PlanOp> = (0..10).map(|q| op(false, q, 0)).collect();
        assert!(lanes(&many, &lim).iter().all(|&l| l == 1));
    }
}
