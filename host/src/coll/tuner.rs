//! The tuner: for one call (collective, element size, bytes per rank, rank count, whether
//! the communicator spans processes) choose the algorithm and the protocol, the same on
//! every rank (it depends only on what matching calls agree on and on settings that must be
//! equal everywhere).
//!
//! Algorithms: `direct` (ranks load and store each other's buffers or inboxes; for the
//! all-reduce with the Simple protocol one-shot or two-shot by size, `oneshot`/`twoshot`
//! force one) and `staged` (communicators spanning processes: through each rank's staging
//! buffers, `super::staged`). Protocols: `ll` (flagged 16-byte lines into the peers' inboxes,
//! no barrier; the all-reduce only, `oxccl_device::coll::all_reduce_ll`) and `simple`
//! (barrier-framed loads and stores).
//!
//! | collective   | in-process            | spanning processes      |
//! |--------------|-----------------------|-------------------------|
//! | all-reduce   | direct/ll, direct/simple | direct/ll, staged/simple |
//! | the others   | direct/simple         | staged/simple           |
//!
//! Automatic choice for the all-reduce: LL up to `OXCCL_LL_THRESHOLD` bytes per rank (at
//! most the LL capacity `OXCCL_LL_MAX_BYTES`), else Simple (direct: one-shot up to
//! `OXCCL_ONESHOT_MAX_BYTES`, else two-shot). A forced LL above the capacity runs as
//! several LL operations of at most the capacity each.
//!
//! # Overrides (NCCL syntax)
//! `NCCL_ALGO` and `NCCL_PROTO` (or [`crate::Config::algo`] / [`crate::Config::proto`]):
//! `entry(;entry)*`, `entry = [collective:]list`, `list = [^]name(,name)*`. A list allows
//! the names in it, or with `^` everything but them; names are case-insensitive. An entry
//! without a collective applies to all of them, an entry with one (`allreduce:ll`) to that
//! collective only (later entries win). Collectives: `allreduce`, `broadcast`, `reduce`,
//! `allgather`, `reducescatter`, `alltoall`, `gather`, `scatter`, `allgatherv`. NCCL's
//! algorithm and protocol names that oxccl does not implement (`ring`, `tree`, `nvls`,
//! `ll128`, ...) are accepted in lists: excluding them changes nothing, and an entry that
//! allows only them is ignored with a warning (`NCCL_ALGO=Ring` set for NCCL keeps working:
//! on one node ring and tree would move more bytes than direct, which reads every input
//! byte once and writes every output byte once, see README). A per-collective entry must leave that collective something it implements
//! (`broadcast:ll` is an error); a global entry restricts only the collectives where it
//! leaves something (`NCCL_PROTO=ll` forces LL for the all-reduce, the others keep Simple).
//! A call for which the overrides leave no choice on its communicator (say `allreduce:staged`
//! on an in-process one) fails with an error naming the call and the rank.

use std::fmt;

use oxccl_device::abi::{
    ALGO_LL, ALGO_ONE_SHOT, ALGO_TWO_SHOT, COLL_ALL_GATHER, COLL_ALL_GATHER_V, COLL_ALL_REDUCE,
    COLL_ALL_TO_ALL, COLL_BROADCAST, COLL_GATHER, COLL_REDUCE, COLL_REDUCE_SCATTER, COLL_SCATTER,
};

/// The collectives the tuner knows, in `COLL_*` order, with their NCCL override names.
pub const COLLECTIVES: [(u32, &str); 9] = [
    (COLL_ALL_REDUCE, "allreduce"),
    (COLL_BROADCAST, "broadcast"),
    (COLL_REDUCE, "reduce"),
    (COLL_ALL_GATHER, "allgather"),
    (COLL_REDUCE_SCATTER, "reducescatter"),
    (COLL_ALL_TO_ALL, "alltoall"),
    (COLL_GATHER, "gather"),
    (COLL_SCATTER, "scatter"),
    (COLL_ALL_GATHER_V, "allgatherv"),
];

/// NCCL algorithm names oxccl does not implement (accepted in override lists).
const NCCL_ONLY_ALGOS: &[&str] = &[
    "ring",
    "tree",
    "collnet",
    "collnetdirect",
    "collnet_direct",
    "collnetchain",
    "collnet_chain",
    "nvls",
    "nvlstree",
    "nvls_tree",
    "pat",
];

/// NCCL protocol names oxccl does not implement.
const NCCL_ONLY_PROTOS: &[&str] = &["ll128"];

/// An algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Ranks load and store each other's buffers (or, with LL, inboxes).
    Direct,
    /// Through the staging buffers of communicators spanning processes.
    Staged,
}

impl Algo {
    /// Name as in `NCCL_ALGO`.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Direct => "direct",
            Algo::Staged => "staged",
        }
    }
}

/// A protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// Flagged 16-byte lines, no barrier (all-reduce).
    Ll,
    /// Barrier-framed loads and stores.
    Simple,
}

impl Proto {
    /// Name as in `NCCL_PROTO`.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Ll => "ll",
            Proto::Simple => "simple",
        }
    }
}

/// What the tuner chose for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub algo: Algo,
    pub proto: Proto,
    /// The all-reduce kernel's algorithm id (`ALGO_LL`, `ALGO_ONE_SHOT`, `ALGO_TWO_SHOT`; for
    /// staged calls the variant its pieces use is chosen per piece; `u32::MAX` for the other
    /// collectives, whose kernels have one algorithm).
    pub kernel_algo: u32,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.algo.name(), self.proto.name())?;
        if self.algo == Algo::Direct && self.proto == Proto::Simple {
            match self.kernel_algo {
                ALGO_ONE_SHOT => f.write_str(" (one-shot)")?,
                ALGO_TWO_SHOT => f.write_str(" (two-shot)")?,
                _ => {}
            }
        }
        Ok(())
    }
}

/// The sizes the automatic choice uses (bytes per rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// LL capacity: the most bytes per rank one LL operation carries.
    pub ll_max: u64,
    /// Largest all-reduce the automatic choice runs with LL.
    pub ll_threshold: u64,
    /// Largest direct Simple all-reduce run one-shot.
    pub oneshot_max: u64,
}

impl Thresholds {
    /// Those of a communicator made with `cfg`.
    pub fn of(cfg: &crate::comm::Config) -> Self {
        Thresholds {
            ll_max: cfg.ll_capacity() as u64,
            ll_threshold: cfg.ll_threshold,
            oneshot_max: cfg.oneshot_max_bytes,
        }
    }
}

/// One call, as the tuner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// `COLL_*` id.
    pub coll: u32,
    /// Bytes per element.
    pub elem_size: usize,
    /// Bytes per rank (the all-reduce's input).
    pub bytes: u64,
    pub nranks: u32,
    /// Whether some rank lives in another process.
    pub spanning: bool,
}

/// Which algorithms (direct, staged) and protocols (ll, simple) the overrides allow for one
/// collective, and a forced direct Simple variant (`oneshot` / `twoshot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Allowed {
    direct: bool,
    staged: bool,
    ll: bool,
    simple: bool,
    variant: Option<u32>,
}

const ALL_ALLOWED: Allowed = Allowed {
    direct: true,
    staged: true,
    ll: true,
    simple: true,
    variant: None,
};

/// Parsed `NCCL_ALGO` / `NCCL_PROTO` overrides, per collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overrides {
    per: [Allowed; COLLECTIVES.len()],
    /// The texts parsed (for display).
    pub algo: Option<String>,
    pub proto: Option<String>,
}

impl Default for Overrides {
    fn default() -> Self {
        Overrides {
            per: [ALL_ALLOWED; COLLECTIVES.len()],
            algo: None,
            proto: None,
        }
    }
}

fn coll_index(coll: u32) -> Option<usize> {
    COLLECTIVES.iter().position(|c| c.0 == coll)
}

fn coll_by_name(name: &str) -> Option<usize> {
    let n: String = name.chars().filter(|c| *c != '_' && *c != '-').collect();
    COLLECTIVES.iter().position(|c| c.1 == n)
}

/// Whether collective `coll` implements protocol LL.
fn has_ll(coll: u32) -> bool {
    coll == COLL_ALL_REDUCE
}

/// One parsed list: the names it names, and whether it excludes them.
struct List {
    exclude: bool,
    names: Vec<String>,
}

impl List {
    /// Whether the list allows only names of `nccl_only` (NCCL's algorithms or protocols that
    /// oxccl lacks); warns, naming `setting` = `value` and what oxccl `implements`, if so.
    fn only_nccl(&self, nccl_only: &[&str], setting: &str, value: &str, implements: &str) -> bool {
        let only = !self.exclude && self.names.iter().all(|n| nccl_only.contains(&n.as_str()));
        if only {
            tracing::warn!(
                target: "oxccl::init",
                "{setting}={value:?}: {} not implemented by oxccl on one node; the entry is ignored (oxccl implements {implements})",
                self.names.join(",")
            );
        }
        only
    }
}

fn parse_list(text: &str) -> Result<List, String> {
    let t = text.trim();
    let (exclude, body) = match t.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let names: Vec<String> = body
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    if names.is_empty() {
        return Err(format!("empty list in {text:?}"));
    }
    Ok(List { exclude, names })
}

/// Split `value` into (collective index or None for all, list).
fn entries(value: &str) -> Result<Vec<(Option<usize>, List)>, String> {
    let mut out = Vec::new();
    for entry in value.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (coll, list) = match entry.split_once(':') {
            Some((c, l)) => {
                let i = coll_by_name(c.trim()).ok_or_else(|| {
                    format!(
                        "unknown collective {:?} (known: {})",
                        c.trim(),
                        COLLECTIVES.map(|c| c.1).join(", ")
                    )
                })?;
                (Some(i), l)
            }
            None => (None, entry),
        };
        out.push((coll, parse_list(list)?));
    }
    if out.is_empty() {
        return Err("no entry".into());
    }
    Ok(out)
}

impl Overrides {
    /// Parse `algo` (`NCCL_ALGO` syntax) and `proto` (`NCCL_PROTO` syntax); `None` or an
    /// empty text allows everything. Errors name the setting and say what is wrong.
    pub fn parse(algo: Option<&str>, proto: Option<&str>) -> Result<Overrides, (&'static str, String)> {
        let mut o = Overrides {
            algo: algo.filter(|s| !s.trim().is_empty()).map(str::to_string),
            proto: proto.filter(|s| !s.trim().is_empty()).map(str::to_string),
            ..Overrides::default()
        };
        if let Some(a) = o.algo.clone() {
            o.apply_algo(&a).map_err(|m| ("NCCL_ALGO", m))?;
        }
        if let Some(p) = o.proto.clone() {
            o.apply_proto(&p).map_err(|m| ("NCCL_PROTO", m))?;
        }
        Ok(o)
    }

    fn apply_algo(&mut self, value: &str) -> Result<(), String> {
        for (coll, list) in entries(value)? {
            // NCCL_ALGO=Ring (or Tree, ...) from an environment set up for NCCL: those
            // algorithms move more bytes than direct on one node, so oxccl keeps its own
            // choice rather than failing (NCCL's setting is about NCCL's algorithms).
            if list.only_nccl(
                NCCL_ONLY_ALGOS,
                "NCCL_ALGO",
                value,
                "direct, oneshot, twoshot, staged",
            ) {
                continue;
            }
            let (mut d, mut one, mut two, mut st) = (false, false, false, false);
            for n in &list.names {
                match n.as_str() {
                    "direct" => d = true,
                    "staged" => st = true,
                    "oneshot" | "one-shot" | "one_shot" => one = true,
                    "twoshot" | "two-shot" | "two_shot" => two = true,
                    x if NCCL_ONLY_ALGOS.contains(&x) => {}
                    x => {
                        return Err(format!(
                            "unknown algorithm {x:?} (oxccl implements direct, oneshot, twoshot, staged)"
                        ))
                    }
                }
            }
            // `oneshot` / `twoshot` are the two variants of direct (the Simple all-reduce's).
            let (direct, staged, variant) = if list.exclude {
                let variant = match (one, two) {
                    (true, false) => Some(ALGO_TWO_SHOT),
                    (false, true) => Some(ALGO_ONE_SHOT),
                    _ => None,
                };
                (!(d || (one && two)), !st, variant)
            } else {
                let variant = match (d || (one && two), one, two) {
                    (false, true, false) => Some(ALGO_ONE_SHOT),
                    (false, false, true) => Some(ALGO_TWO_SHOT),
                    _ => None,
                };
                (d || one || two, st, variant)
            };
            if !direct && !staged {
                let what = if list.exclude { "excludes" } else { "allows only" };
                return Err(format!(
                    "{value:?} {what} algorithms oxccl does not implement or leaves none (oxccl implements direct, oneshot, twoshot, staged)"
                ));
            }
            for i in Self::targets(coll) {
                let a = &mut self.per[i];
                a.direct = direct;
                a.staged = staged;
                a.variant = variant;
            }
        }
        Ok(())
    }

    fn apply_proto(&mut self, value: &str) -> Result<(), String> {
        for (coll, list) in entries(value)? {
            if list.only_nccl(NCCL_ONLY_PROTOS, "NCCL_PROTO", value, "ll, simple") {
                continue;
            }
            let (mut ll, mut simple) = (false, false);
            for n in &list.names {
                match n.as_str() {
                    "ll" => ll = true,
                    "simple" => simple = true,
                    x if NCCL_ONLY_PROTOS.contains(&x) => {}
                    x => return Err(format!("unknown protocol {x:?} (oxccl implements ll, simple)")),
                }
            }
            if list.exclude {
                ll = !ll;
                simple = !simple;
            }
            if !ll && !simple {
                return Err(format!(
                    "{value:?} leaves no protocol oxccl implements (ll, simple)"
                ));
            }
            for i in Self::targets(coll) {
                let c = COLLECTIVES[i].0;
                let usable = simple || (ll && has_ll(c));
                if !usable {
                    if coll.is_some() {
                        return Err(format!(
                            "{value:?}: {} implements simple only (ll is the all-reduce's)",
                            COLLECTIVES[i].1
                        ));
                    }
                    // A global list restricts only the collectives where it leaves something.
                    continue;
                }
                let a = &mut self.per[i];
                a.ll = ll;
                a.simple = simple;
            }
        }
        Ok(())
    }

    fn targets(coll: Option<usize>) -> Vec<usize> {
        match coll {
            Some(i) => vec![i],
            None => (0..COLLECTIVES.len()).collect(),
        }
    }

    fn allowed(&self, coll: u32) -> Allowed {
        coll_index(coll).map_or(ALL_ALLOWED, |i| self.per[i])
    }

    /// The direct Simple variant forced for `coll` (`oneshot` / `twoshot` in `NCCL_ALGO`).
    pub fn direct_variant(&self, coll: u32) -> Option<u32> {
        self.allowed(coll).variant
    }

    /// True when nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self.algo.is_none() && self.proto.is_none()
    }
}

/// The candidates of `call` on its communicator, best first for its size.
fn candidates(call: &Call, th: &Thresholds) -> Vec<Choice> {
    let ll = Choice {
        algo: Algo::Direct,
        proto: Proto::Ll,
        kernel_algo: ALGO_LL,
    };
    let variant = if call.bytes <= th.oneshot_max {
        ALGO_ONE_SHOT
    } else {
        ALGO_TWO_SHOT
    };
    let simple = if call.spanning {
        Choice {
            algo: Algo::Staged,
            proto: Proto::Simple,
            kernel_algo: variant,
        }
    } else {
        Choice {
            algo: Algo::Direct,
            proto: Proto::Simple,
            kernel_algo: variant,
        }
    };
    if call.coll != COLL_ALL_REDUCE {
        // The other collectives' kernels have a single algorithm.
        return vec![Choice {
            kernel_algo: u32::MAX,
            ..simple
        }];
    }
    if call.bytes <= th.ll_threshold.min(th.ll_max) {
        vec![ll, simple]
    } else {
        vec![simple, ll]
    }
}

/// The choice for `call`, or why the overrides leave none.
pub fn choose(call: &Call, th: &Thresholds, ov: &Overrides) -> Result<Choice, String> {
    let a = ov.allowed(call.coll);
    let cands = candidates(call, th);
    cands
        .iter()
        .copied()
        .find(|c| {
            (match c.algo {
                Algo::Direct => a.direct,
                Algo::Staged => a.staged,
            }) && (match c.proto {
                Proto::Ll => a.ll,
                Proto::Simple => a.simple,
            })
        })
        .map(|mut c| {
            if c.algo == Algo::Direct && c.proto == Proto::Simple && call.coll == COLL_ALL_REDUCE {
                if let Some(v) = a.variant {
                    c.kernel_algo = v;
                }
            }
            c
        })
        .ok_or_else(|| {
            format!(
                "the overrides (NCCL_ALGO={:?}, NCCL_PROTO={:?}) leave no algorithm/protocol for this call (candidates on this communicator: {})",
                ov.algo.as_deref().unwrap_or(""),
                ov.proto.as_deref().unwrap_or(""),
                cands.iter().map(|c| format!("{}/{}", c.algo.name(), c.proto.name())).collect::<Vec<_>>().join(", ")
            )
        })
}

/// The tuner table: for every collective and size bucket (powers of 4 from 1 KiB... up to
/// `max`), the choice, in-process and spanning, for `nranks` ranks of element size
/// `elem_size`.
pub fn table(th: &Thresholds, ov: &Overrides, nranks: u32, elem_size: usize, max: u64) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "thresholds (bytes per rank): LL capacity OXCCL_LL_MAX_BYTES = {}, auto LL up to OXCCL_LL_THRESHOLD = {} (effective {}), direct one-shot up to OXCCL_ONESHOT_MAX_BYTES = {}\n",
        th.ll_max,
        th.ll_threshold,
        th.ll_threshold.min(th.ll_max),
        th.oneshot_max
    ));
    out.push_str(&format!(
        "overrides: NCCL_ALGO = {}, NCCL_PROTO = {}\n",
        ov.algo.as_deref().unwrap_or("(auto)"),
        ov.proto.as_deref().unwrap_or("(auto)")
    ));
    out.push_str(&format!("{nranks} ranks, {elem_size}-byte elements; a forced LL above the capacity runs as several LL operations\n"));
    let mut sizes = Vec::new();
    let mut s = 1024u64;
    while s <= max {
        sizes.push(s);
        s = s.saturating_mul(4);
    }
    for &edge in &[th.ll_threshold.min(th.ll_max), th.oneshot_max] {
        for e in [edge, edge + 1] {
            if e > 0 && e <= max && !sizes.contains(&e) {
                sizes.push(e);
            }
        }
    }
    sizes.sort_unstable();
    out.push_str(&format!(
        "{:<14} {:>12}  {:<26} {:<26}\n",
        "collective", "bytes", "in-process", "spanning processes"
    ));
    let pick = |coll, bytes, spanning| {
        let call = Call {
            coll,
            elem_size,
            bytes,
            nranks,
            spanning,
        };
        match choose(&call, th, ov) {
            Ok(c) => c.to_string(),
            Err(_) => "error: none allowed".into(),
        }
    };
    for &bytes in &sizes {
        out.push_str(&format!(
            "{:<14} {:>12}  {:<26} {:<26}\n",
            "allreduce",
            bytes,
            pick(COLL_ALL_REDUCE, bytes, false),
            pick(COLL_ALL_REDUCE, bytes, true)
        ));
    }
    // The other collectives have one protocol and algorithm per communicator kind.
    for (coll, name) in &COLLECTIVES[1..] {
        out.push_str(&format!(
            "{:<14} {:>12}  {:<26} {:<26}\n",
            name,
            "any",
            pick(*coll, 1024, false),
            pick(*coll, 1024, true)
        ));
    }
    out
}

#[cfg(test)]
mod tests;
