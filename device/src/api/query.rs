//! Getters on [`DevComm`]: who this rank is, in the world and in its LSA team, and the
//! three standard teams (NCCL's `ncclTeamWorld`, `ncclTeamLsa`, `ncclTeamRail`).

use super::abi::{DevComm, Team};

impl DevComm {
    /// World rank.
    #[inline(always)]
    pub const fn rank(&self) -> u32 {
        self.rank
    }

    /// World size.
    #[inline(always)]
    pub const fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Rank in the LSA team.
    #[inline(always)]
    pub const fn lsa_rank(&self) -> u32 {
        self.lsa_rank
    }

    /// Size of the LSA team.
    #[inline(always)]
    pub const fn lsa_size(&self) -> u32 {
        self.lsa_size
    }

    /// World rank of LSA rank 0 of this rank's LSA team.
    #[inline(always)]
    pub const fn lsa_base(&self) -> u32 {
        self.rank.wrapping_sub(self.lsa_rank)
    }

    /// Every rank: `{nranks, rank, 1}`.
    #[inline(always)]
    pub const fn team_world(&self) -> Team {
        Team {
            nranks: self.nranks,
            rank: self.rank,
            stride: 1,
        }
    }

    /// The LSA team: `{lsa_size, lsa_rank, 1}`.
    #[inline(always)]
    pub const fn team_lsa(&self) -> Team {
        Team {
            nranks: self.lsa_size,
            rank: self.lsa_rank,
            stride: 1,
        }
    }

    /// The rail team (this rank's peers at the same LSA rank in every LSA team):
    /// `{nranks / lsa_size, rank / lsa_size, lsa_size}` (empty when `lsa_size` is 0).
    #[inline(always)]
    pub const fn team_rail(&self) -> Team {
        if self.lsa_size == 0 {
            return Team {
                nranks: 0,
                rank: 0,
                stride: 0,
            };
        }
        Team {
            nranks: self.nranks / self.lsa_size,
            rank: self.rank / self.lsa_size,
            stride: self.lsa_size,
        }
    }
}
