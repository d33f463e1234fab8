//! Rank conversions between a [`Team`] and the world (NCCL's `ncclTeamRankToWorld`,
//! `ncclTeamRankToLsa`, `ncclTeamRankToTeam`, `ncclTeamRankIsMember`).
//!
//! A team is `nranks` ranks whose world ranks are `stride` apart, this rank being team rank
//! `rank`: team rank `r` is world rank `world_rank + (r - rank) * stride`, where
//! `world_rank` is this rank's ([`DevComm::rank`]). Conversions to a team return `None`
//! for world ranks that are not members.

use super::abi::{DevComm, Team};

impl Team {
    /// Whether team rank `r` exists (`r < nranks`).
    #[inline(always)]
    pub const fn contains(&self, r: u32) -> bool {
        r < self.nranks
    }

    /// World rank of team rank `r` (pure arithmetic, wrapping; `r` is not checked).
    #[inline(always)]
    pub const fn rank_to_world(&self, comm: &DevComm, r: u32) -> u32 {
        let delta = (r as i64 - self.rank as i64).wrapping_mul(self.stride as i64);
        (comm.rank as i64).wrapping_add(delta) as u32
    }

    /// Team rank of world rank `w`, if `w` is a member of this team.
    #[inline(always)]
    pub const fn world_to_rank(&self, comm: &DevComm, w: u32) -> Option<u32> {
        let delta = w as i64 - comm.rank as i64;
        if self.stride == 0 {
            return if delta == 0 && self.nranks > 0 {
                Some(self.rank)
            } else {
                None
            };
        }
        let s = self.stride as i64;
        if delta % s != 0 {
            return None;
        }
        let r = self.rank as i64 + delta / s;
        if r >= 0 && r < self.nranks as i64 {
            Some(r as u32)
        } else {
            None
        }
    }

    /// Whether world rank `w` is a member of this team.
    #[inline(always)]
    pub const fn is_member(&self, comm: &DevComm, w: u32) -> bool {
        self.world_to_rank(comm, w).is_some()
    }

    /// LSA rank of team rank `r`, if that rank is in this rank's LSA team.
    #[inline(always)]
    pub const fn rank_to_lsa(&self, comm: &DevComm, r: u32) -> Option<u32> {
        comm.team_lsa().world_to_rank(comm, self.rank_to_world(comm, r))
    }

    /// Rank in team `other` of team rank `r` of this team, if it is a member of `other`.
    #[inline(always)]
    pub const fn rank_to_team(&self, comm: &DevComm, r: u32, other: &Team) -> Option<u32> {
        other.world_to_rank(comm, self.rank_to_world(comm, r))
    }

    /// Team rank `k` steps after this rank, cyclically (`(rank + k) % nranks`; 0 for an
    /// empty team): the usual way to spread peers over threads.
    #[inline(always)]
    pub const fn peer(&self, k: u32) -> u32 {
        if self.nranks == 0 {
            return 0;
        }
        ((self.rank as u64 + k as u64) % self.nranks as u64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 8 ranks, LSA teams of 4 (ranks 0-3, 4-7); this is world rank `rank`.
    fn comm(rank: u32) -> DevComm {
        DevComm {
            rank,
            nranks: 8,
            lsa_rank: rank % 4,
            lsa_size: 4,
            ..DevComm::default()
        }
    }

    #[test]
    fn standard_teams() {
        let c = comm(6);
        assert_eq!(
            c.team_world(),
            Team {
                nranks: 8,
                rank: 6,
                stride: 1
            }
        );
        assert_eq!(
            c.team_lsa(),
            Team {
                nranks: 4,
                rank: 2,
                stride: 1
            }
        );
        assert_eq!(
            c.team_rail(),
            Team {
                nranks: 2,
                rank: 1,
                stride: 4
            }
        );
        assert_eq!(c.lsa_base(), 4);
        let empty = DevComm::default().team_rail();
        assert_eq!(empty.nranks, 0);
    }

    #[test]
    fn conversions_round_trip_for_every_rank_and_team() {
        for me in 0..8 {
            let c = comm(me);
            for team in [c.team_world(), c.team_lsa(), c.team_rail()] {
                let mut members = 0;
                for w in 0..8u32 {
                    if let Some(r) = team.world_to_rank(&c, w) {
                        members += 1;
                        assert!(team.contains(r));
                        assert_eq!(team.rank_to_world(&c, r), w);
                    }
                }
                assert_eq!(members, team.nranks, "{team:?} of rank {me}");
                for r in 0..team.nranks {
                    let w = team.rank_to_world(&c, r);
                    assert!(team.is_member(&c, w));
                    let lsa = team.rank_to_lsa(&c, r);
                    assert_eq!(lsa.is_some(), w / 4 == me / 4, "{team:?} r={r}");
                    if let Some(l) = lsa {
                        assert_eq!(l, w % 4);
                    }
                    assert_eq!(team.rank_to_team(&c, r, &c.team_world()), Some(w));
                }
            }
        }
    }

    #[test]
    fn non_members_and_peers() {
        let c = comm(1);
        let rail = c.team_rail();
        assert_eq!(rail.world_to_rank(&c, 5), Some(1));
        assert_eq!(rail.world_to_rank(&c, 2), None);
        assert_eq!(c.team_lsa().world_to_rank(&c, 4), None);
        assert_eq!(c.team_world().world_to_rank(&c, 8), None);
        assert_eq!(c.team_lsa().peer(3), 0);
        assert_eq!(Team::default().peer(3), 0);
    }
}
