//! [`Comm::shrink`] (NCCL's `ncclCommShrink`): the ranks that survive a failure (or that
//! simply continue) make a new communicator without the excluded ones, which never take
//! part (they may be dead). New ranks are the survivors compacted in the order of their
//! parent ranks.
//!
//! Protocol, among the survivors only (point-to-point messages of the parent's control
//! channel, `Control::send_to` / `Control::recv_from`, never an exchange that would wait
//! for an excluded rank):
//! 1. every survivor checks the exclusion list locally and takes the next tag of the
//!    subset this list defines;
//! 2. the leader (the lowest surviving parent rank) starts a bootstrap root and sends each
//!    other survivor a [`Offer`]: the new [`UniqueId`] and the sorted exclusion list (or
//!    why it could not make an id);
//! 3. every other survivor waits for the offer (bounded by the bootstrap timeout, cut short
//!    by an abort; a timeout names the leader), checks that the leader excluded the same
//!    ranks, and every survivor calls [`Comm::init_rank_with`] with its new rank.
//!
//! The messages' tags depend on the exclusion list (and on how many shrinks with that list
//! this parent made), so a rank left out of one shrink still meets the others in the next,
//! and a survivor whose list differs from its leader's never takes that leader's offer: it
//! times out naming the leader (the others' init then times out naming it).
//!
//! [`ShrinkMode::Abort`] (NCCL's `NCCL_SHRINK_ABORT`) first aborts the parent's kernels (its
//! device abort flag, as `ncclCommRevoke`) and waits for its streams, so work stuck waiting
//! for a dead rank ends; the parent's collectives then fail with an abort error. With
//! [`ShrinkMode::Default`] the caller promises that no operation of the parent is in flight.
//! The child shares nothing with the parent (NCCL's `shrinkShare` has no effect).

use crate::abort::AbortFlag;
use crate::bootstrap::{UniqueId, UNIQUE_ID_BYTES};
use crate::error::{Error, Result};

use super::split::Parent;
use super::{Comm, Config};

pub(super) const OP: &str = "shrink";

/// What to do with the parent's work before shrinking (NCCL's `shrinkFlags`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShrinkMode {
    /// `NCCL_SHRINK_DEFAULT`: no operation of the parent is in flight.
    #[default]
    Default,
    /// `NCCL_SHRINK_ABORT`: abort the parent's kernels and wait for its streams first.
    Abort,
}

/// A survivor's view of the shrink: the surviving parent ranks in order, this rank's new
/// rank among them, and the sorted exclusion list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    survivors: Vec<u32>,
    new_rank: u32,
    excluded: Vec<u32>,
}

impl Plan {
    /// The plan of parent rank `me` of `nranks` excluding `exclude`, or why the list is
    /// not valid.
    pub(super) fn new(me: u32, nranks: u32, exclude: &[u32]) -> std::result::Result<Plan, String> {
        let mut excluded = exclude.to_vec();
        excluded.sort_unstable();
        if let Some(&bad) = excluded.iter().find(|&&q| q >= nranks) {
            return Err(format!("excluded rank {bad} is not below nranks {nranks}"));
        }
        if let Some(w) = excluded.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("rank {} is excluded twice", w[0]));
        }
        if excluded.binary_search(&me).is_ok() {
            return Err(format!(
                "rank {me} is in the exclusion list: excluded ranks must not call shrink (only the survivors do)"
            ));
        }
        let survivors: Vec<u32> = (0..nranks)
            .filter(|q| excluded.binary_search(q).is_err())
            .collect();
        let new_rank = survivors.iter().position(|&q| q == me).unwrap_or(0) as u32;
        Ok(Plan {
            survivors,
            new_rank,
            excluded,
        })
    }

    fn leader(&self) -> u32 {
        self.survivors[0]
    }
}

/// The leader's message to the other survivors, little-endian: `1u8, id (128 bytes),
/// count: u32, excluded ranks: count x u32`, or `0u8, why the leader could not make an id
/// (UTF-8)`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Offer {
    Id {
        id: [u8; UNIQUE_ID_BYTES],
        excluded: Vec<u32>,
    },
    Failed(String),
}

impl Offer {
    fn to_bytes(&self) -> Vec<u8> {
        match self {
            Offer::Id { id, excluded } => {
                let mut b = Vec::with_capacity(1 + UNIQUE_ID_BYTES + 4 + 4 * excluded.len());
                b.push(1);
                b.extend_from_slice(id);
                b.extend_from_slice(&(excluded.len() as u32).to_le_bytes());
                for q in excluded {
                    b.extend_from_slice(&q.to_le_bytes());
                }
                b
            }
            Offer::Failed(why) => [&[0u8][..], why.as_bytes()].concat(),
        }
    }

    fn from_bytes(b: &[u8]) -> Option<Offer> {
        match b.split_first()? {
            (0, why) => Some(Offer::Failed(String::from_utf8_lossy(why).into_owned())),
            (1, rest) => {
                let id: [u8; UNIQUE_ID_BYTES] = rest.get(..UNIQUE_ID_BYTES)?.try_into().ok()?;
                let rest = &rest[UNIQUE_ID_BYTES..];
                let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
                let list = rest.get(4..)?;
                if list.len() != n.checked_mul(4)? {
                    return None;
                }
                let excluded = list
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Some(Offer::Id { id, excluded })
            }
            _ => None,
        }
    }
}

impl Comm {
    /// NCCL's `ncclCommShrink`: a new communicator of this one's ranks except `exclude`,
    /// called by every surviving rank (each from its own thread when several live in this
    /// process) and never by an excluded one; new ranks follow the parent ranks' order. The
    /// child keeps this communicator's backend, each rank's device, and this one's config
    /// unless `config` is given. See the module documentation for `mode` and the protocol;
    /// waits are bounded by the bootstrap timeout (an error names the rank that never came)
    /// and cut short by [`Comm::abort`]. Works after `ncclCommRevoke`-style kernel aborts and
    /// after a failed host exchange; refused after [`Comm::finalize`].
    pub fn shrink(&self, exclude: &[u32], mode: ShrinkMode, config: Option<Config>) -> Result<Comm> {
        let (parent, plan) = self.prepare_shrink(exclude, mode)?;
        parent.shrink(&plan, config, &AbortFlag::new())
    }

    /// The checks and the abort of [`Comm::shrink`], on the calling thread (the rest may run
    /// in the background: `Comm::start_shrink`).
    pub(super) fn prepare_shrink(&self, exclude: &[u32], mode: ShrinkMode) -> Result<(Parent, Plan)> {
        self.check_live(OP)?;
        let plan = Plan::new(self.rank(), self.count(), exclude).map_err(|what| Error::InvalidArgument {
            op: OP,
            rank: self.rank(),
            what,
        })?;
        if mode == ShrinkMode::Abort {
            self.abort_kernels();
            if let Err(e) = self.sync_streams() {
                // The aborted kernels end with this error; it is what was asked.
                tracing::debug!(target: "oxccl::init", rank = self.rank(), "shrink: parent's work aborted: {e}");
            }
        }
        Ok((Parent::of(self), plan))
    }
}

impl Parent {
    /// The rendezvous and init of [`Comm::shrink`] for this surviving rank, also giving up
    /// once `abort` is raised (a pending shrink's handle).
    pub(super) fn shrink(&self, plan: &Plan, config: Option<Config>, abort: &AbortFlag) -> Result<Comm> {
        let me = self.rank;
        let _span =
            tracing::info_span!(target: "oxccl::init", "shrink", rank = me, excluded = ?plan.excluded)
                .entered();
        let waits = AbortFlag::watching(&[abort, self.control.abort_flag()]);
        let tag = self.control.next_subset_tag(&plan.excluded);
        let child_boot = self.control.child_config();
        let leader = plan.leader();
        let mut root = None;
        let id = if me == leader {
            let (offer, id) = match UniqueId::with_config(Some(self.control.id_addr()), &child_boot) {
                Ok((id, r)) => {
                    root = Some(r);
                    let offer = Offer::Id {
                        id: id.to_bytes(),
                        excluded: plan.excluded.clone(),
                    };
                    (offer, Ok(id))
                }
                Err(e) => (
                    Offer::Failed(e.to_string()),
                    Err(Error::Init(format!(
                        "shrink on rank {me}: could not start the bootstrap: {e}"
                    ))),
                ),
            };
            let bytes = offer.to_bytes();
            for &q in &plan.survivors[1..] {
                if waits.is_raised() {
                    return Err(Error::Aborted { op: OP, rank: me });
                }
                self.control.send_to(OP, me, q, tag, &bytes)?;
            }
            id?
        } else {
            let b = self.control.recv_from(OP, me, leader, tag, &waits)?;
            match Offer::from_bytes(&b) {
                Some(Offer::Id { id, excluded }) if excluded == plan.excluded => {
                    UniqueId::from_bytes(&id).map_err(|source| Error::Control { op: OP, rank: me, source })?
                }
                Some(Offer::Id { excluded, .. }) => {
                    return Err(Error::InvalidArgument {
                        op: OP,
                        rank: me,
                        what: format!(
                            "rank {leader} (the lowest surviving rank) excluded ranks {excluded:?} but this rank excluded {:?}: every survivor must pass the same list",
                            plan.excluded
                        ),
                    })
                }
                Some(Offer::Failed(why)) => {
                    return Err(Error::Init(format!(
                        "shrink on rank {me}: rank {leader} (the lowest surviving rank) could not start the bootstrap: {why}"
                    )))
                }
                None => {
                    return Err(Error::InvalidArgument {
                        op: OP,
                        rank: me,
                        what: format!("rank {leader} sent {} bytes that are not a shrink offer", b.len()),
                    })
                }
            }
        };
        let child_abort = AbortFlag::watching(&[&waits]);
        let config = config.unwrap_or_else(|| self.group.config.clone());
        let n = plan.survivors.len() as u32;
        let child = Comm::init_rank_with(
            self.group.backend.clone(),
            n,
            &id,
            plan.new_rank,
            self.device,
            config,
            &child_boot.with_abort(Some(child_abort.clone())),
        );
        child_abort.detach();
        if let (Some(root), true) = (root, child.is_ok()) {
            if let Err(e) = root.wait() {
                tracing::warn!(target: "oxccl::init", rank = me, "shrink: bootstrap root: {e}");
            }
        }
        let child = child?;
        tracing::info!(target: "oxccl::init", rank = me, new_rank = plan.new_rank, new_nranks = n, "shrink done");
        Ok(child)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_compact_survivors_in_parent_order() {
        let p = Plan::new(3, 6, &[4, 1]).unwrap();
        assert_eq!(p.survivors, vec![0, 2, 3, 5]);
        assert_eq!((p.new_rank, p.leader()), (2, 0));
        assert_eq!(p.excluded, vec![1, 4]);
        let p = Plan::new(2, 3, &[0]).unwrap();
        assert_eq!((p.new_rank, p.leader(), p.survivors.len()), (1, 1, 2));
        assert_eq!(Plan::new(0, 1, &[]).unwrap().survivors, vec![0]);
    }

    #[test]
    fn bad_lists_are_refused_with_the_reason() {
        assert!(Plan::new(0, 4, &[4]).unwrap_err().contains("not below nranks 4"));
        assert!(Plan::new(0, 4, &[2, 2]).unwrap_err().contains("twice"));
        assert!(Plan::new(1, 4, &[1]).unwrap_err().contains("must not call"));
    }

    #[test]
    fn offers_round_trip_and_garbage_is_refused() {
        let o = Offer::Id {
            id: [7; UNIQUE_ID_BYTES],
            excluded: vec![1, 5],
        };
        assert_eq!(Offer::from_bytes(&o.to_bytes()), Some(o.clone()));
        let f = Offer::Failed("no interface".into());
        assert_eq!(Offer::from_bytes(&f.to_bytes()), Some(f));
        let mut b = o.to_bytes();
        b.pop();
        assert_eq!(Offer::from_bytes(&b), None);
        assert_eq!(Offer::from_bytes(&[2]), None);
        assert_eq!(Offer::from_bytes(&[]), None);
    }
}
