//! Exhaustive-interleaving models of oxccl's two epoch barriers, in the spirit of
//! `lamport_model.rs`: every thread of every rank runs a small program transliterated from
//! the code (one instruction per shared-memory access, each an atomic, sequentially
//! consistent step), and every reachable state is explored.
//!
//! # What is modelled
//! 1. The Device API LSA barrier session (`device/src/api/barrier.rs`):
//!    `LsaBarrierSession::new` (every coop thread loads the persisted epoch of the barrier),
//!    `LsaBarrierSession::arrive` (`epoch += 1`, `Coop::sync`, coop thread `t` stores the
//!    epoch into line `(b, me)` of LSA peers `t, t + size, ...`, its own copy included),
//!    `LsaBarrierSession::wait_timeout` (coop thread `t` polls lines `(b, t), (b, t + size),
//!    ...` of its own copy with the rolling compare of `Waiter::wait_geq_with` in
//!    `device/src/prims/wait.rs`, then `Coop::sync_any`), and `Drop` /
//!    `LsaBarrierSession::end` (`persist`: coop thread 0 stores the epoch back into the
//!    rank's epoch slot, then the coop meets). Each rank runs several kernels in stream
//!    order, each with one or more sessions on the same barrier, each with one or more
//!    `sync`s; ranks run ahead of each other freely (a rank's next kernel only waits for its
//!    own previous kernel).
//! 2. The symmetric kernels' Simple barrier (`device/src/coll/sym/barrier.rs`: `arrive`,
//!    `wait`, `sync`) as `framed` in `device/src/coll/sym/simple.rs` uses it: the entry and
//!    the exit barrier of op `seq` at the epochs of `oxccl_device::abi::sym_epochs`
//!    (`device/src/abi/sym.rs`, called here, not copied), per block (block `b` of a rank
//!    meets block `b` of every rank on its own lines), with `seq` either given by the host
//!    or counted on the device by `seq_begin`/`seq_end` (`device/src/coll/sym/mod.rs`) over
//!    `epoch::begin_at`/`epoch::end_at` (`device/src/prims/epoch.rs`: every thread loads the
//!    block's slot, `bar.sync`; thread 0 stores `seq + 1`; thread 0 of block 0 also fills
//!    the slots of the blocks this launch does not have). Ops run back to back, with grids
//!    that may differ from op to op (the same on every rank); ranks run ahead freely.
//!
//! Thread-local computation (`epoch += 1`, choosing the epochs) is folded into the
//! preceding step; the code between barriers (the user's, the Simple pass) is one step that
//! touches nothing modelled (so that a thread can still be in it while others go on); `bar.sync`, `bar.red.or`, `Coop::sync`/`sync_any` are modelled as
//! meetings of the coop's threads, and the stream order between two kernels of a rank as a
//! meeting of all that rank's modelled threads (kernel `k + 1` starts after every thread of
//! kernel `k` finished).
//!
//! # Checks
//! - safety: no thread leaves a barrier instance (returns from `wait`) before every thread
//!   of every rank that takes part in that instance reached its `arrive` for it; in
//!   particular a rank that overtook into a later instance (or a later kernel) never lets a
//!   slow rank pass an earlier one, whatever the reuse of the one line per (barrier, peer);
//! - the lines' and slots' claim "values only grow": no store moves a word backwards (in
//!   the rolling order);
//! - the symmetric kernels' sequence numbers: every block of every rank runs op `k` with
//!   `seq = seq0 + k` (the device count agrees with the host's);
//! - liveness: every interleaving reaches the end (no reachable state where nobody can
//!   move, which, since polls that fail do not change the state, also rules out a spin
//!   that can never succeed).
//!
//! Both models also run with start values near the wrap of u64 (the LSA epochs from
//! `u64::MAX - 1`; `seq` from `2^63 - 2`, where `2 seq + 2` wraps to 0), as if that many
//! barriers had run before, so that the rolling compare is exercised where a plain `>=`
//! fails. Each model has mutations that the explorer must catch (tests
//! `*_mutation_*`), showing that it can fail.
//!
//! # What is abstracted
//! - Weak memory: the steps are sequentially consistent. The release/acquire and fence
//!   arguments that make the real (PTX, system-scope) accesses behave so for these
//!   protocols are made in the code's docs: "Memory ordering (what pairs with what)" in
//!   `device/src/api/barrier.rs`, the module doc of `device/src/coll/sym/barrier.rs`,
//!   "Memory ordering" in `device/src/coll/sym/mod.rs`, and "Ordering between launches" in
//!   `device/src/prims/epoch.rs`.
//! - Aborts, timeouts and the failure paths (a failed wait makes the rest of the op or
//!   session skip); `MemOrder` (it only chooses the ordering, not the steps); user data
//!   between barriers (the safety check above is what "the data is ready" rests on).
//! - The coop sizes and rank counts are small (see the tests); `Warp`/`Block` coops and
//!   `bar.sync` are the same meeting here.

use std::collections::{BTreeMap, HashSet};

use oxccl_device::abi::sym_epochs;

// ---------------------------------------------------------------------------------------
// A tiny machine: threads with one register, a flat shared memory of u64 words.
// ---------------------------------------------------------------------------------------

/// A group of threads that meet at a `Sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    /// The coop (Device API) or the block (symmetric kernels): `Coop::sync`, `bar.sync`.
    Coop,
    /// Every modelled thread of the rank: the stream order between two kernels.
    Rank,
}

/// How a value is computed from the thread's register.
#[derive(Clone, Copy, Debug)]
enum Val {
    /// `reg + d` (wrapping).
    Reg(u64),
    /// The entry epoch of op `reg` (the model's epoch function).
    Entry,
    /// The exit epoch of op `reg`.
    Exit,
}

/// How a poll compares the value it read with its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    /// `(v - target) as i64 >= 0`, as `Waiter::wait_geq_with`.
    Rolling,
    /// `v >= target` (a mutation).
    Plain,
}

#[derive(Clone, Copy, Debug)]
enum Ins {
    // Shared steps (one atomic step each).
    /// Meet the thread's group.
    Sync(Group),
    /// `reg = mem[a]`.
    Load(usize),
    /// `mem[a] = v`.
    Store(usize, Val),
    /// Spin until `mem[a]` compares `>=` to `v`.
    Poll(usize, Val),
    /// The work between barriers (the user's code, the Simple pass): one step that changes
    /// nothing modelled, so that a thread can still be at it while others go on.
    Work,
    // Thread-local steps (folded into the preceding step).
    /// `reg += d` (wrapping).
    Add(u64),
    /// `reg = v`.
    Set(u64),
    /// Ghost: this thread reached `arrive` for barrier instance `i`.
    Arrive(usize),
    /// Ghost: this thread returned from `wait` for barrier instance `i`.
    Leave(usize),
    /// Ghost: the thread's register must be `v` (the sequence number of the op).
    Expect(u64),
}

impl Ins {
    fn local(self) -> bool {
        matches!(
            self,
            Ins::Add(_) | Ins::Set(_) | Ins::Arrive(_) | Ins::Leave(_) | Ins::Expect(_)
        )
    }
}

struct Thread {
    name: String,
    prog: Vec<Ins>,
    /// Members of this thread's groups (thread indices), [Coop, Rank].
    groups: [Vec<usize>; 2],
    /// `passed[pc][g]`: syncs of group `g` before `pc`.
    passed: Vec<[usize; 2]>,
}

struct Machine {
    threads: Vec<Thread>,
    mem0: Vec<u64>,
    names: Vec<String>,
    cmp: Cmp,
    epochs: fn(u64) -> (u64, u64),
}

/// What the explorer can find.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Bad {
    /// A thread left an instance before every participant arrived at it.
    EarlyPass,
    /// A reachable state where nobody can move and not everybody finished.
    Deadlock,
    /// A store moved a word backwards.
    WentBack,
    /// A block ran an op with the wrong sequence number.
    WrongSeq,
}

#[derive(Debug)]
struct Report {
    states: usize,
    /// The first example of each kind of violation found.
    bad: BTreeMap<Bad, String>,
}

impl Report {
    fn ok(&self) -> bool {
        self.bad.is_empty()
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    pc: Vec<u16>,
    reg: Vec<u64>,
    mem: Vec<u64>,
}

fn group_index(g: Group) -> usize {
    match g {
        Group::Coop => 0,
        Group::Rank => 1,
    }
}

impl Machine {
    /// Build from `(name, rank, coop, program)`; coop ids are per rank.
    fn new(
        threads: Vec<(String, usize, usize, Vec<Ins>)>,
        mem0: Vec<u64>,
        names: Vec<String>,
        cmp: Cmp,
        epochs: fn(u64) -> (u64, u64),
    ) -> Self {
        let keys: Vec<(usize, usize)> = threads.iter().map(|t| (t.1, t.2)).collect();
        let threads = threads
            .into_iter()
            .map(|(name, rank, coop, prog)| {
                let coop_members = (0..keys.len()).filter(|&u| keys[u] == (rank, coop)).collect();
                let rank_members = (0..keys.len()).filter(|&u| keys[u].0 == rank).collect();
                let mut passed = vec![[0usize; 2]];
                for ins in &prog {
                    let mut p = *passed.last().unwrap();
                    if let Ins::Sync(g) = ins {
                        p[group_index(*g)] += 1;
                    }
                    passed.push(p);
                }
                Thread {
                    name,
                    prog,
                    groups: [coop_members, rank_members],
                    passed,
                }
            })
            .collect::<Vec<_>>();
        for t in &threads {
            for g in 0..2 {
                for &u in &t.groups[g] {
                    assert_eq!(
                        t.passed.last().unwrap()[g],
                        threads[u].passed.last().unwrap()[g],
                        "{} and {} must meet equally often",
                        t.name,
                        threads[u].name
                    );
                }
            }
        }
        Machine {
            threads,
            mem0,
            names,
            cmp,
            epochs,
        }
    }

    fn val(&self, v: Val, reg: u64) -> u64 {
        match v {
            Val::Reg(d) => reg.wrapping_add(d),
            Val::Entry => (self.epochs)(reg).0,
            Val::Exit => (self.epochs)(reg).1,
        }
    }

    fn geq(&self, v: u64, target: u64) -> bool {
        match self.cmp {
            Cmp::Rolling => (v.wrapping_sub(target) as i64) >= 0,
            Cmp::Plain => v >= target,
        }
    }

    /// Syncs of group `g` that thread `u` has reached (passed, or is waiting at).
    fn reached(&self, s: &State, u: usize, g: usize) -> usize {
        let t = &self.threads[u];
        let pc = s.pc[u] as usize;
        let at = matches!(t.prog.get(pc), Some(Ins::Sync(h)) if group_index(*h) == g);
        t.passed[pc][g] + at as usize
    }

    /// Whether thread `u` reached its `Arrive(i)` (or has none: it does not take part).
    fn arrived(&self, s: &State, u: usize, i: usize) -> bool {
        let t = &self.threads[u];
        match t.prog.iter().position(|x| matches!(x, Ins::Arrive(j) if *j == i)) {
            Some(at) => (s.pc[u] as usize) > at,
            None => true,
        }
    }

    /// Run thread `u`'s local instructions from its pc, checking the ghosts.
    fn fold(&self, s: &mut State, u: usize, bad: &mut BTreeMap<Bad, String>) {
        let t = &self.threads[u];
        while let Some(&ins) = t.prog.get(s.pc[u] as usize) {
            if !ins.local() {
                break;
            }
            match ins {
                Ins::Add(d) => s.reg[u] = s.reg[u].wrapping_add(d),
                Ins::Set(v) => s.reg[u] = v,
                Ins::Arrive(_) => {}
                Ins::Leave(i) => {
                    if let Some(w) = (0..self.threads.len()).find(|&w| !self.arrived(s, w, i)) {
                        bad.entry(Bad::EarlyPass).or_insert_with(|| {
                            format!(
                                "{} left barrier instance {i} before {} arrived at it ({})",
                                t.name,
                                self.threads[w].name,
                                self.describe(s)
                            )
                        });
                    }
                }
                Ins::Expect(v) => {
                    if s.reg[u] != v {
                        bad.entry(Bad::WrongSeq).or_insert_with(|| {
                            format!("{} runs with seq {} instead of {v}", t.name, s.reg[u])
                        });
                    }
                }
                _ => unreachable!(),
            }
            s.pc[u] += 1;
        }
    }

    fn describe(&self, s: &State) -> String {
        let pcs: Vec<String> = self
            .threads
            .iter()
            .enumerate()
            .map(|(u, t)| format!("{}@{}/{} reg {}", t.name, s.pc[u], t.prog.len(), s.reg[u]))
            .collect();
        let mem: Vec<String> = s
            .mem
            .iter()
            .zip(&self.names)
            .map(|(v, n)| format!("{n}={v}"))
            .collect();
        format!("threads [{}] memory [{}]", pcs.join(", "), mem.join(", "))
    }

    /// Explore every interleaving.
    fn explore(&self) -> Report {
        let mut bad = BTreeMap::new();
        let n = self.threads.len();
        let mut init = State {
            pc: vec![0; n],
            reg: vec![0; n],
            mem: self.mem0.clone(),
        };
        for u in 0..n {
            self.fold(&mut init, u, &mut bad);
        }
        let mut seen = HashSet::new();
        let mut stack = vec![init];
        while let Some(s) = stack.pop() {
            if seen.contains(&s) {
                continue;
            }
            let mut moved = false;
            for u in 0..n {
                let t = &self.threads[u];
                let pc = s.pc[u] as usize;
                let Some(&ins) = t.prog.get(pc) else { continue };
                let mut next = s.clone();
                match ins {
                    Ins::Sync(g) => {
                        let g = group_index(g);
                        let j = t.passed[pc][g];
                        if t.groups[g].iter().any(|&w| self.reached(&s, w, g) <= j) {
                            continue;
                        }
                    }
                    Ins::Work => {}
                    Ins::Load(a) => next.reg[u] = s.mem[a],
                    Ins::Store(a, v) => {
                        let new = self.val(v, s.reg[u]);
                        if (new.wrapping_sub(s.mem[a]) as i64) < 0 {
                            bad.entry(Bad::WentBack).or_insert_with(|| {
                                format!(
                                    "{} stores {new} over {} into {} ({})",
                                    t.name,
                                    s.mem[a],
                                    self.names[a],
                                    self.describe(&s)
                                )
                            });
                        }
                        next.mem[a] = new;
                    }
                    Ins::Poll(a, v) => {
                        if !self.geq(s.mem[a], self.val(v, s.reg[u])) {
                            continue; // still spinning
                        }
                    }
                    _ => unreachable!("local instructions are folded"),
                }
                next.pc[u] += 1;
                self.fold(&mut next, u, &mut bad);
                moved = true;
                stack.push(next);
            }
            if !moved && (0..n).any(|u| (s.pc[u] as usize) < self.threads[u].prog.len()) {
                bad.entry(Bad::Deadlock)
                    .or_insert_with(|| format!("deadlock: {}", self.describe(&s)));
            }
            seen.insert(s);
        }
        Report {
            states: seen.len(),
            bad,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Model 1: the Device API LSA barrier session (device/src/api/barrier.rs).
// ---------------------------------------------------------------------------------------

/// Departures from the code, each of which the explorer must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LsaMutation {
    None,
    /// `wait` polls for `epoch - 1`.
    WaitPrevEpoch,
    /// `persist` does not store the epoch back.
    NoPersist,
    /// A plain `>=` instead of the rolling compare.
    PlainCompare,
    /// `arrive` stores without `Coop::sync` first.
    NoArriveSync,
    /// `persist` without the `Coop::sync` after thread 0's store (the code before the fix
    /// committed with this model: a next session's `new` in the same kernel could load the
    /// old epoch in coop threads other than 0).
    NoEndSync,
}

#[derive(Clone, Copy, Debug)]
struct LsaCfg {
    ranks: usize,
    /// Threads of each rank's coop (`Coop::size`).
    coop: usize,
    kernels: usize,
    /// Sessions on the barrier per kernel, one after the other.
    sessions: usize,
    /// `sync`s (arrive + wait) per session.
    syncs: usize,
    /// The persisted epochs and every line start here (0: as the host zeroes them).
    start: u64,
    mutation: LsaMutation,
}

/// Line `(b, s)` of rank `q`'s copy (one barrier `b`).
fn lsa_line(c: &LsaCfg, q: usize, s: usize) -> usize {
    q * c.ranks + s
}

/// Rank `r`'s persisted epoch slot of the barrier.
fn lsa_slot(c: &LsaCfg, r: usize) -> usize {
    c.ranks * c.ranks + r
}

/// `LsaBarrierSession::new`: every coop thread loads the persisted epoch.
fn lsa_new(p: &mut Vec<Ins>, c: &LsaCfg, me: usize) {
    p.push(Ins::Load(lsa_slot(c, me)));
}

/// `LsaBarrierSession::arrive`.
fn lsa_arrive(p: &mut Vec<Ins>, c: &LsaCfg, me: usize, t: usize, inst: usize) {
    p.push(Ins::Arrive(inst));
    p.push(Ins::Add(1)); // self.epoch = self.epoch.wrapping_add(1)
    if c.mutation != LsaMutation::NoArriveSync {
        p.push(Ins::Sync(Group::Coop)); // self.coop.sync()
    }
    let mut q = t; // q = thread_rank; while q < lsa_size
    while q < c.ranks {
        p.push(Ins::Store(lsa_line(c, q, me), Val::Reg(0))); // line(q, me) = epoch
        q += c.coop;
    }
}

/// `LsaBarrierSession::wait_timeout` (no failure).
fn lsa_wait(p: &mut Vec<Ins>, c: &LsaCfg, me: usize, t: usize, inst: usize) {
    let target = match c.mutation {
        LsaMutation::WaitPrevEpoch => Val::Reg(u64::MAX), // epoch - 1
        _ => Val::Reg(0),
    };
    let mut s = t;
    while s < c.ranks {
        p.push(Ins::Poll(lsa_line(c, me, s), target)); // wait_geq(line(me, s), epoch)
        s += c.coop;
    }
    p.push(Ins::Sync(Group::Coop)); // self.coop.sync_any(err.is_some())
    p.push(Ins::Leave(inst));
}

/// `Drop for LsaBarrierSession` (`persist`), which `end` runs.
fn lsa_end(p: &mut Vec<Ins>, c: &LsaCfg, me: usize, t: usize) {
    if t == 0 && c.mutation != LsaMutation::NoPersist {
        p.push(Ins::Store(lsa_slot(c, me), Val::Reg(0)));
    }
    if c.mutation != LsaMutation::NoEndSync {
        p.push(Ins::Sync(Group::Coop));
    }
}

fn lsa_machine(c: &LsaCfg) -> Machine {
    let mut threads = Vec::new();
    for me in 0..c.ranks {
        for t in 0..c.coop {
            let mut p = Vec::new();
            let mut inst = 0;
            for k in 0..c.kernels {
                if k > 0 {
                    p.push(Ins::Sync(Group::Rank)); // stream order: the previous kernel ended
                }
                for _ in 0..c.sessions {
                    lsa_new(&mut p, c, me);
                    for _ in 0..c.syncs {
                        p.push(Ins::Work); // the user's code before the barrier
                                           // LsaBarrierSession::sync = arrive + wait
                        lsa_arrive(&mut p, c, me, t, inst);
                        lsa_wait(&mut p, c, me, t, inst);
                        inst += 1;
                    }
                    lsa_end(&mut p, c, me, t);
                }
            }
            threads.push((format!("rank {me} thread {t}"), me, 0, p));
        }
    }
    let mut names = Vec::new();
    for q in 0..c.ranks {
        for s in 0..c.ranks {
            names.push(format!("line[{q}][{s}]"));
        }
    }
    for r in 0..c.ranks {
        names.push(format!("epoch[{r}]"));
    }
    let cmp = match c.mutation {
        LsaMutation::PlainCompare => Cmp::Plain,
        _ => Cmp::Rolling,
    };
    let mem0 = vec![c.start; names.len()];
    Machine::new(threads, mem0, names, cmp, sym_epochs) // (no `Val::Entry`/`Exit` here)
}

fn lsa(c: LsaCfg) -> Report {
    let r = lsa_machine(&c).explore();
    println!("lsa {c:?}: {} states, {:?}", r.states, r.bad);
    r
}

const LSA: LsaCfg = LsaCfg {
    ranks: 2,
    coop: 1,
    kernels: 3,
    sessions: 1,
    syncs: 1,
    start: 0,
    mutation: LsaMutation::None,
};

#[test]
fn lsa_two_ranks_thread_coop_three_kernels() {
    let r = lsa(LsaCfg {
        kernels: 4,
        syncs: 2,
        ..LSA
    });
    assert!(r.ok(), "{:?}", r.bad);
    assert!(r.states > 100);
}

#[test]
fn lsa_three_ranks_thread_coop() {
    let r = lsa(LsaCfg {
        ranks: 3,
        kernels: 3,
        ..LSA
    });
    assert!(r.ok(), "{:?}", r.bad);
}

#[test]
fn lsa_two_thread_coop_two_sessions_per_kernel() {
    let r = lsa(LsaCfg {
        coop: 2,
        kernels: 2,
        sessions: 2,
        ..LSA
    });
    assert!(r.ok(), "{:?}", r.bad);
}

#[test]
fn lsa_coop_wider_than_the_team_and_three_ranks_two_threads() {
    let r = lsa(LsaCfg {
        coop: 3,
        kernels: 2,
        sessions: 2,
        ..LSA
    });
    assert!(r.ok(), "{:?}", r.bad);
    let r = lsa(LsaCfg {
        ranks: 3,
        coop: 2,
        kernels: 2,
        ..LSA
    });
    assert!(r.ok(), "{:?}", r.bad);
}

#[test]
fn lsa_near_the_wrap() {
    for start in [u64::MAX - 1, (1 << 63) - 2] {
        let r = lsa(LsaCfg {
            kernels: 4,
            syncs: 2,
            start,
            ..LSA
        });
        assert!(r.ok(), "start {start}: {:?}", r.bad);
        let r = lsa(LsaCfg {
            coop: 2,
            kernels: 2,
            sessions: 2,
            start,
            ..LSA
        });
        assert!(r.ok(), "start {start}: {:?}", r.bad);
    }
}

#[test]
fn lsa_mutation_waiting_for_the_previous_epoch_is_caught() {
    let r = lsa(LsaCfg {
        mutation: LsaMutation::WaitPrevEpoch,
        ..LSA
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
}

#[test]
fn lsa_mutation_not_persisting_the_epoch_is_caught() {
    let r = lsa(LsaCfg {
        mutation: LsaMutation::NoPersist,
        ..LSA
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
}

#[test]
fn lsa_mutation_plain_compare_near_the_wrap_is_caught() {
    let r = lsa(LsaCfg {
        start: u64::MAX - 1,
        mutation: LsaMutation::PlainCompare,
        ..LSA
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
    // Far from the wrap a plain compare is as good (the lines only grow).
    assert!(lsa(LsaCfg {
        mutation: LsaMutation::PlainCompare,
        ..LSA
    })
    .ok());
}

#[test]
fn lsa_mutation_arriving_before_the_coop_meets_is_caught() {
    let r = lsa(LsaCfg {
        coop: 2,
        kernels: 1,
        mutation: LsaMutation::NoArriveSync,
        ..LSA
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
}

/// The bug this model found: `persist` (drop / `end`) stored the epoch from coop thread 0
/// without the coop meeting afterwards (NCCL's session destructor ends with `coop.sync()`),
/// so a second session on the same barrier in the same kernel could load the old epoch in
/// the other coop threads: they store an older epoch over a newer one in the peers' lines
/// and take old lines for the new instance (a rank passes before its peer arrived), and
/// the peer may then wait for an epoch that never comes.
#[test]
fn lsa_mutation_no_sync_after_persist_is_caught() {
    let r = lsa(LsaCfg {
        coop: 2,
        kernels: 1,
        sessions: 2,
        mutation: LsaMutation::NoEndSync,
        ..LSA
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
    assert!(r.bad.contains_key(&Bad::Deadlock), "{r:?}");
    // With two syncs in the first session the stale epoch is two behind: it also moves a
    // peer's line backwards.
    let r = lsa(LsaCfg {
        coop: 2,
        kernels: 1,
        sessions: 2,
        syncs: 2,
        mutation: LsaMutation::NoEndSync,
        ..LSA
    });
    assert!(r.bad.contains_key(&Bad::WentBack), "{r:?}");
    // One session per kernel hides it: the stream order separates the store and the loads.
    assert!(lsa(LsaCfg {
        coop: 2,
        kernels: 3,
        mutation: LsaMutation::NoEndSync,
        ..LSA
    })
    .ok());
}

// ---------------------------------------------------------------------------------------
// Model 2: the symmetric kernels' Simple barrier (device/src/coll/sym/barrier.rs).
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SymMutation {
    None,
    /// The exit wait polls for the entry epoch (`exit - 1`).
    ExitWaitsForEntry,
    /// Epochs `(seq + 1, seq + 2)`: op `seq`'s exit is op `seq + 1`'s entry.
    EpochsNotDoubled,
    /// `seq_end` does not advance the device's sequence slots.
    NoSeqPersist,
    /// `end_at` does not fill the slots of the blocks the launch does not have.
    NoSlotFill,
    /// A plain `>=` instead of the rolling compare.
    PlainCompare,
    /// `arrive` stores without the `bar.sync` first.
    NoArriveSync,
    /// `wait` returns without the `bar.sync` (or-reduction) after the polls.
    NoWaitSync,
}

#[derive(Clone, Copy, Debug)]
struct SymCfg {
    ranks: usize,
    /// Threads per block (`block_dim`); thread `t < ranks` serves peer `t`.
    threads: usize,
    /// Blocks of each op's grid (the same on every rank), one entry per op.
    grids: &'static [usize],
    /// `seq` from the device's slots (`SymArgs::state` set) rather than the arguments.
    device_seq: bool,
    /// The first op's `seq` (lines and slots start as if ops `0..seq0` had run).
    seq0: u64,
    mutation: SymMutation,
}

impl SymCfg {
    fn blocks(&self) -> usize {
        self.grids.iter().copied().max().unwrap()
    }
}

/// Line `(block, src)` of the barrier lines in rank `q`'s copy of the area.
fn sym_line(c: &SymCfg, q: usize, b: usize, s: usize) -> usize {
    (q * c.blocks() + b) * c.ranks + s
}

/// Rank `r`'s sequence slot of block `b` (`SymArgs::state`).
fn sym_slot(c: &SymCfg, r: usize, b: usize) -> usize {
    c.ranks * c.blocks() * c.ranks + r * c.blocks() + b
}

fn sym_mutated_epochs(seq: u64) -> (u64, u64) {
    (seq.wrapping_add(1), seq.wrapping_add(2))
}

/// Barrier instance `(op, block, exit)`.
fn sym_inst(c: &SymCfg, op: usize, b: usize, exit: bool) -> usize {
    (op * c.blocks() + b) * 2 + exit as usize
}

/// `barrier::arrive(c, epoch)`.
fn sym_arrive(p: &mut Vec<Ins>, c: &SymCfg, me: usize, b: usize, t: usize, e: Val, inst: usize) {
    p.push(Ins::Arrive(inst));
    if c.mutation != SymMutation::NoArriveSync {
        p.push(Ins::Sync(Group::Coop)); // c.ctx.sync_threads()
    }
    let mut tt = t;
    while tt < c.ranks {
        // fence.acq_rel.sys (nothing under SC), st.release.sys of line (b, me) of rank tt
        p.push(Ins::Store(sym_line(c, tt, b, me), e));
        tt += c.threads;
    }
}

/// `barrier::wait(c, epoch)` (no failure).
fn sym_wait(p: &mut Vec<Ins>, c: &SymCfg, me: usize, b: usize, t: usize, e: Val, inst: usize) {
    let mut tt = t;
    while tt < c.ranks {
        p.push(Ins::Poll(sym_line(c, me, b, tt), e)); // wait_geq_acquire_sys
        tt += c.threads;
    }
    if c.mutation != SymMutation::NoWaitSync {
        p.push(Ins::Sync(Group::Coop)); // c.ctx.sync_threads_or(failed)
    }
    p.push(Ins::Leave(inst));
}

/// One launch of a Simple kernel by thread `t` of block `b`: `seq_begin`, `framed`'s entry
/// barrier, (the pass), exit barrier, `seq_end`.
fn sym_launch(p: &mut Vec<Ins>, c: &SymCfg, me: usize, b: usize, t: usize, op: usize) {
    let grid = c.grids[op];
    let seq = c.seq0.wrapping_add(op as u64);
    if c.device_seq {
        // epoch::begin_at: every thread loads the block's slot, then bar.sync.
        p.push(Ins::Load(sym_slot(c, me, b)));
        p.push(Ins::Sync(Group::Coop));
    } else {
        p.push(Ins::Set(seq)); // a.seq
    }
    p.push(Ins::Expect(seq));
    // framed: let (entry, exit) = sym_epochs(c.a.seq); sync(entry); pass; sync(exit)
    sym_arrive(p, c, me, b, t, Val::Entry, sym_inst(c, op, b, false));
    sym_wait(p, c, me, b, t, Val::Entry, sym_inst(c, op, b, false));
    p.push(Ins::Work); // reduce_copy
    let exit_target = match c.mutation {
        SymMutation::ExitWaitsForEntry => Val::Entry,
        _ => Val::Exit,
    };
    sym_arrive(p, c, me, b, t, Val::Exit, sym_inst(c, op, b, true));
    sym_wait(p, c, me, b, t, exit_target, sym_inst(c, op, b, true));
    // seq_end -> epoch::end_at(ctx, slots, seq, 1): thread 0 only.
    if c.device_seq && t == 0 && c.mutation != SymMutation::NoSeqPersist {
        p.push(Ins::Store(sym_slot(c, me, b), Val::Reg(1)));
        if b == 0 && c.mutation != SymMutation::NoSlotFill {
            for j in grid..c.blocks() {
                p.push(Ins::Store(sym_slot(c, me, j), Val::Reg(1)));
            }
        }
    }
}

fn sym_machine(c: &SymCfg) -> Machine {
    let epochs: fn(u64) -> (u64, u64) = match c.mutation {
        SymMutation::EpochsNotDoubled => sym_mutated_epochs,
        _ => sym_epochs,
    };
    let mut threads = Vec::new();
    for me in 0..c.ranks {
        for b in 0..c.blocks() {
            for t in 0..c.threads {
                let mut p = Vec::new();
                for op in 0..c.grids.len() {
                    if op > 0 {
                        p.push(Ins::Sync(Group::Rank)); // stream order
                    }
                    if b < c.grids[op] {
                        sym_launch(&mut p, c, me, b, t, op);
                    }
                }
                threads.push((format!("rank {me} block {b} thread {t}"), me, b, p));
            }
        }
    }
    let mut names = Vec::new();
    let mut mem0 = Vec::new();
    // As if ops 0..seq0 had run with every block (the area starts zeroed: seq0 = 0 gives 0).
    let line0 = epochs(c.seq0.wrapping_sub(1)).1;
    for q in 0..c.ranks {
        for b in 0..c.blocks() {
            for s in 0..c.ranks {
                names.push(format!("line[{q}][{b}][{s}]"));
                mem0.push(line0);
            }
        }
    }
    for r in 0..c.ranks {
        for b in 0..c.blocks() {
            names.push(format!("seq[{r}][{b}]"));
            mem0.push(c.seq0);
        }
    }
    let cmp = match c.mutation {
        SymMutation::PlainCompare => Cmp::Plain,
        _ => Cmp::Rolling,
    };
    Machine::new(threads, mem0, names, cmp, epochs)
}

fn sym(c: SymCfg) -> Report {
    let r = sym_machine(&c).explore();
    println!("sym {c:?}: {} states, {:?}", r.states, r.bad);
    r
}

const SYM: SymCfg = SymCfg {
    ranks: 2,
    threads: 2,
    grids: &[1, 1, 1],
    device_seq: true,
    seq0: 0,
    mutation: SymMutation::None,
};

/// Near the wrap of the epochs: op `2^63 - 1` has exit epoch 0.
const SYM_WRAP: u64 = (1 << 63) - 2;

#[test]
fn sym_two_ranks_one_block_four_ops() {
    for device_seq in [true, false] {
        let r = sym(SymCfg {
            grids: &[1, 1, 1, 1],
            device_seq,
            ..SYM
        });
        assert!(r.ok(), "{:?}", r.bad);
        assert!(r.states > 100);
    }
}

#[test]
fn sym_two_ranks_two_blocks_grids_change() {
    let r = sym(SymCfg {
        threads: 1,
        grids: &[2, 1, 2],
        ..SYM
    });
    assert!(r.ok(), "{:?}", r.bad);
    // Two threads per block and two blocks: 3.5 million states (seconds in release, too slow
    // for a debug test run); one thread per block covers the blocks' independence, the
    // one-block tests cover the threads of a block.
}

#[test]
fn sym_three_ranks_and_narrow_blocks() {
    let r = sym(SymCfg {
        ranks: 3,
        threads: 1,
        grids: &[1, 1, 1],
        ..SYM
    });
    assert!(r.ok(), "{:?}", r.bad);
    // Fewer threads than ranks: thread t serves peers t, t + block_dim, ...
    let r = sym(SymCfg {
        ranks: 3,
        threads: 2,
        grids: &[1, 1],
        ..SYM
    });
    assert!(r.ok(), "{:?}", r.bad);
}

#[test]
fn sym_near_the_wrap() {
    for device_seq in [true, false] {
        let r = sym(SymCfg {
            grids: &[1, 1, 1, 1],
            device_seq,
            seq0: SYM_WRAP,
            ..SYM
        });
        assert!(r.ok(), "{:?}", r.bad);
    }
    let r = sym(SymCfg {
        threads: 1,
        grids: &[2, 1, 2],
        seq0: SYM_WRAP,
        ..SYM
    });
    assert!(r.ok(), "{:?}", r.bad);
}

#[test]
fn sym_mutation_exit_waiting_for_the_entry_epoch_is_caught() {
    let r = sym(SymCfg {
        mutation: SymMutation::ExitWaitsForEntry,
        ..SYM
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
}

#[test]
fn sym_mutation_epochs_not_doubled_is_caught() {
    let r = sym(SymCfg {
        mutation: SymMutation::EpochsNotDoubled,
        ..SYM
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
}

#[test]
fn sym_mutation_not_advancing_the_device_seq_is_caught() {
    let r = sym(SymCfg {
        mutation: SymMutation::NoSeqPersist,
        ..SYM
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
    assert!(r.bad.contains_key(&Bad::WrongSeq), "{r:?}");
}

#[test]
fn sym_mutation_not_filling_the_absent_blocks_slots_is_caught() {
    let r = sym(SymCfg {
        threads: 1,
        grids: &[2, 1, 2],
        mutation: SymMutation::NoSlotFill,
        ..SYM
    });
    // Only the sequence number is wrong: block 1's slot and lines advance together, so its
    // barriers still hold (the LL tag or Lamport buffer of that op would not).
    assert_eq!(r.bad.keys().collect::<Vec<_>>(), [&Bad::WrongSeq], "{r:?}");
}

#[test]
fn sym_mutation_plain_compare_near_the_wrap_is_caught() {
    let r = sym(SymCfg {
        seq0: SYM_WRAP,
        mutation: SymMutation::PlainCompare,
        ..SYM
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
    assert!(sym(SymCfg {
        mutation: SymMutation::PlainCompare,
        ..SYM
    })
    .ok());
}

#[test]
fn sym_mutation_arriving_before_the_block_meets_is_caught() {
    let r = sym(SymCfg {
        grids: &[1, 1],
        mutation: SymMutation::NoArriveSync,
        ..SYM
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
}

#[test]
fn sym_mutation_leaving_wait_before_the_block_meets_is_caught() {
    let r = sym(SymCfg {
        grids: &[1, 1],
        mutation: SymMutation::NoWaitSync,
        ..SYM
    });
    assert!(r.bad.contains_key(&Bad::EarlyPass), "{r:?}");
}
