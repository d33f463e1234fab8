//! [`Comm::split`] (NCCL's `ncclCommSplit`): every rank of a communicator calls it; the ranks
//! that pass the same color form a new communicator, ranked by (key, parent rank).
//!
//! Protocol, over the parent's control channel (two all-gathers among all parent ranks,
//! NOCOLOR ranks included, so nobody waits for a rank that only skipped):
//! 1. every rank publishes its [`SplitRecord`];
//! 2. the leader of each color (its lowest parent rank) starts a bootstrap root and
//!    publishes the [`UniqueId`] (or why it could not make one); the others publish nothing;
//! 3. every member calls [`Comm::init_rank_with`] with its color's id, its new rank, its own
//!    device and the parent's backend. Ranks of one process each call split from their own
//!    thread, so the members' inits meet.

use std::sync::Arc;

use crate::abort::AbortFlag;
use crate::bootstrap::{UniqueId, UNIQUE_ID_BYTES};
use crate::error::{Error, Result};

use super::{Comm, Config, Control, Group};

const OP: &str = "split";

/// What each rank publishes in step 1: 12 bytes, little-endian
/// `{has color: u32 (0 = NCCL_SPLIT_NOCOLOR), color: u32, key: i32}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SplitRecord {
    color: Option<u32>,
    key: i32,
}

const RECORD_BYTES: usize = 12;

impl SplitRecord {
    fn to_bytes(self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..4].copy_from_slice(&u32::from(self.color.is_some()).to_le_bytes());
        b[4..8].copy_from_slice(&self.color.unwrap_or(0).to_le_bytes());
        b[8..12].copy_from_slice(&self.key.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != RECORD_BYTES {
            return None;
        }
        let has = u32::from_le_bytes(b[0..4].try_into().ok()?);
        let color = u32::from_le_bytes(b[4..8].try_into().ok()?);
        Some(SplitRecord {
            color: (has != 0).then_some(color),
            key: i32::from_le_bytes(b[8..12].try_into().ok()?),
        })
    }
}

/// This rank's place in the split: its new rank, the new size and the leader's parent rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    rank: u32,
    nranks: u32,
    leader: u32,
}

/// Where parent rank `me` lands given every rank's record (`None` for NOCOLOR).
fn place(records: &[SplitRecord], me: u32) -> Option<Place> {
    let color = records[me as usize].color?;
    let mut members: Vec<(i32, u32)> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.color == Some(color))
        .map(|(q, r)| (r.key, q as u32))
        .collect();
    members.sort_unstable();
    let rank = members.iter().position(|&(_, q)| q == me)? as u32;
    let leader = members.iter().map(|&(_, q)| q).min()?;
    Some(Place {
        rank,
        nranks: members.len() as u32,
        leader,
    })
}

/// What a split needs of its parent rank, owned, so that a pending split can run on its own
/// thread while the parent stays usable.
pub(crate) struct Parent {
    pub(super) group: Arc<Group>,
    pub(super) control: Arc<Control>,
    pub(super) rank: u32,
    pub(super) nranks: u32,
    pub(super) device: usize,
}

impl Parent {
    pub fn of(c: &Comm) -> Self {
        Parent {
            group: c.group.clone(),
            control: c.control.clone(),
            rank: c.rank,
            nranks: c.nranks,
            device: c.device(),
        }
    }

    fn invalid(&self, what: String) -> Error {
        Error::InvalidArgument {
            op: OP,
            rank: self.rank,
            what,
        }
    }
}

impl Comm {
    /// NCCL's `ncclCommSplit`: collective over this communicator (every rank calls it, each
    /// from its own thread when several ranks live in this process). Ranks with the same
    /// `color` form a new communicator ranked by (`key`, parent rank); `color: None` is
    /// `NCCL_SPLIT_NOCOLOR`: the rank takes part and gets `Ok(None)`. The new communicator
    /// keeps this one's backend and each rank's device, and this one's config unless
    /// `config` is given. Host waits are bounded by the bootstrap timeout and cut short by
    /// [`Comm::abort`]; a rank that never calls split is named in [`Error::ControlTimeout`].
    /// After a failed split this communicator's host exchanges (split, finalize's barrier)
    /// are refused; its collectives keep working.
    pub fn split(&self, color: Option<u32>, key: i32, config: Option<Config>) -> Result<Option<Comm>> {
        self.check_live(OP)?;
        Parent::of(self).split(color, key, config, &AbortFlag::new())
    }
}

impl Parent {
    /// [`Comm::split`] of this parent rank, also giving up once `abort` is raised (a
    /// pending split's handle).
    pub fn split(
        &self,
        color: Option<u32>,
        key: i32,
        config: Option<Config>,
        abort: &AbortFlag,
    ) -> Result<Option<Comm>> {
        let _span =
            tracing::info_span!(target: "oxccl::init", "split", rank = self.rank, ?color, key).entered();
        let (me, n) = (self.rank, self.nranks);
        let waits = AbortFlag::watching(&[abort, self.control.abort_flag()]);
        let blobs = self
            .control
            .all_gather(OP, me, n, &SplitRecord { color, key }.to_bytes(), &waits)?;
        let mut records = Vec::with_capacity(n as usize);
        for (q, b) in blobs.iter().enumerate() {
            records.push(SplitRecord::from_bytes(b).ok_or_else(|| {
                self.invalid(format!(
                    "rank {q} sent a {}-byte split record, expected {RECORD_BYTES}",
                    b.len()
                ))
            })?);
        }
        let place = place(&records, me);
        let child_boot = self.control.child_config();
        // Step 2: leaders start a root and publish its id.
        let mut root = None;
        let mut id_blob = Vec::new();
        if place.is_some_and(|p| p.leader == me) {
            match UniqueId::with_config(Some(self.control.id_addr()), &child_boot) {
                Ok((id, r)) => {
                    root = Some(r);
                    id_blob.push(1);
                    id_blob.extend_from_slice(&id.to_bytes());
                }
                Err(e) => {
                    id_blob.push(0);
                    id_blob.extend_from_slice(e.to_string().as_bytes());
                }
            }
        }
        let ids = self.control.all_gather(OP, me, n, &id_blob, &waits)?;
        let Some(place) = place else {
            tracing::info!(target: "oxccl::init", rank = me, "split: no color, no communicator");
            return Ok(None);
        };
        let color = records[me as usize].color.unwrap_or(0);
        let from_leader = &ids[place.leader as usize];
        let id = match from_leader.split_first() {
            Some((1, bytes)) if bytes.len() == UNIQUE_ID_BYTES => {
                UniqueId::from_bytes(bytes).map_err(|source| Error::Control {
                    op: OP,
                    rank: me,
                    source,
                })?
            }
            Some((0, why)) => {
                return Err(Error::Init(format!(
                "split on rank {me}: rank {} (the leader of color {color}) could not start the bootstrap: {}",
                place.leader,
                String::from_utf8_lossy(why)
            )))
            }
            _ => {
                return Err(self.invalid(format!(
                    "rank {} (the leader of color {color}) sent {} bytes, not a unique id",
                    place.leader,
                    from_leader.len()
                )))
            }
        };
        // Step 3: the child's bootstrap honours `abort` and the parent's flag while it is
        // made, then only its own.
        let child_abort = AbortFlag::watching(&[&waits]);
        let config = config.unwrap_or_else(|| self.group.config.clone());
        let child = Comm::init_rank_with(
            self.group.backend.clone(),
            place.nranks,
            &id,
            place.rank,
            self.device,
            config,
            &child_boot.with_abort(Some(child_abort.clone())),
        );
        child_abort.detach();
        if let Some(root) = root {
            if child.is_ok() {
                if let Err(e) = root.wait() {
                    tracing::warn!(target: "oxccl::init", rank = me, "split: bootstrap root: {e}");
                }
            }
        }
        let child = child?;
        tracing::info!(target: "oxccl::init", rank = me, color, new_rank = place.rank, new_nranks = place.nranks, "split done");
        Ok(Some(child))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(color: Option<u32>, key: i32) -> SplitRecord {
        SplitRecord { color, key }
    }

    #[test]
    fn record_round_trips_and_rejects_other_sizes() {
        for r in [rec(None, -3), rec(Some(0), 0), rec(Some(u32::MAX), i32::MIN)] {
            assert_eq!(SplitRecord::from_bytes(&r.to_bytes()), Some(r));
        }
        assert_eq!(SplitRecord::from_bytes(&[0u8; 11]), None);
    }

    #[test]
    fn places_order_by_key_then_parent_rank_and_skip_nocolor() {
        let rs = [
            rec(Some(1), 5),
            rec(Some(0), 0),
            rec(Some(1), 5),
            rec(None, 0),
            rec(Some(1), -1),
        ];
        assert_eq!(place(&rs, 3), None);
        assert_eq!(
            place(&rs, 1),
            Some(Place {
                rank: 0,
                nranks: 1,
                leader: 1
            })
        );
        // Color 1: keys (5, r0), (5, r2), (-1, r4) -> order r4, r0, r2; leader r0.
        assert_eq!(
            place(&rs, 4),
            Some(Place {
                rank: 0,
                nranks: 3,
                leader: 0
            })
        );
        assert_eq!(
            place(&rs, 0),
            Some(Place {
                rank: 1,
                nranks: 3,
                leader: 0
            })
        );
        assert_eq!(
            place(&rs, 2),
            Some(Place {
                rank: 2,
                nranks: 3,
                leader: 0
            })
        );
    }
}
