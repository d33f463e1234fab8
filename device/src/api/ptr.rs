//! Window pointers (NCCL's `ncclGetLocalPointer`, `ncclGetLsaPointer`,
//! `ncclGetPeerPointer`): pure address arithmetic on the LSA team's flat range, no checks.
//!
//! A [`WindowDesc`] is one buffer per LSA rank, mapped `stride` bytes apart: LSA peer `q`'s
//! byte `o` is at `local + (q - rank) * stride + o` (wrapping 64-bit arithmetic), where
//! `rank` is this rank's LSA rank ([`WindowDesc::rank`]). The address is valid for `o`
//! below that peer's size (equal on every rank for `WIN_COLL_SYMMETRIC` windows).

use super::abi::{DevComm, WindowDesc};

impl WindowDesc {
    /// This rank's byte `offset` (`local + offset`).
    #[inline(always)]
    pub const fn local_ptr(&self, offset: u64) -> *mut u8 {
        self.local.wrapping_add(offset) as *mut u8
    }

    /// LSA peer `lsa_peer`'s byte `offset`: `local + (lsa_peer - rank) * stride + offset`.
    #[inline(always)]
    pub const fn lsa_ptr(&self, offset: u64, lsa_peer: u32) -> *mut u8 {
        let delta = (lsa_peer as i64 - self.rank as i64) as u64;
        self.local
            .wrapping_add(delta.wrapping_mul(self.stride))
            .wrapping_add(offset) as *mut u8
    }
}

impl DevComm {
    /// World peer `world_peer`'s byte `offset` of `win`, or null when that peer is not in
    /// this rank's LSA team (it can be reached only through the network).
    #[inline(always)]
    pub const fn peer_ptr(&self, win: &WindowDesc, offset: u64, world_peer: u32) -> *mut u8 {
        match self.team_lsa().world_to_rank(self, world_peer) {
            Some(q) => win.lsa_ptr(offset, q),
            None => core::ptr::null_mut(),
        }
    }

    /// This rank's byte `offset` of the resource window (the requirements' buffer).
    #[inline(always)]
    pub const fn resource_ptr(&self, offset: u64) -> *mut u8 {
        self.resource.local_ptr(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(rank: u32) -> WindowDesc {
        WindowDesc {
            local: 0x7000_0000_0000 + rank as u64 * (1 << 32) + 0x1000,
            stride: 1 << 32,
            size: 1 << 20,
            rank,
            nranks: 4,
            ..WindowDesc::default()
        }
    }

    #[test]
    fn lsa_pointers_agree_across_ranks() {
        for me in 0..4 {
            let w = window(me);
            assert_eq!(w.local_ptr(8) as u64, w.local + 8);
            assert_eq!(w.lsa_ptr(8, me), w.local_ptr(8));
            for q in 0..4 {
                // Every rank computes the same address for q's byte.
                assert_eq!(w.lsa_ptr(24, q), window(q).local_ptr(24), "{me} -> {q}");
            }
        }
    }

    #[test]
    fn arithmetic_wraps() {
        let w = WindowDesc {
            local: 8,
            stride: 16,
            rank: 1,
            ..WindowDesc::default()
        };
        assert_eq!(w.lsa_ptr(0, 0) as u64, 0u64.wrapping_sub(8));
        let w = WindowDesc {
            local: u64::MAX - 7,
            stride: 16,
            rank: 0,
            ..WindowDesc::default()
        };
        assert_eq!(w.lsa_ptr(0, 1) as u64, 8);
    }

    #[test]
    fn peer_pointers_go_through_the_lsa_team() {
        let comm = DevComm {
            rank: 5,
            nranks: 8,
            lsa_rank: 1,
            lsa_size: 4,
            ..DevComm::default()
        };
        let w = window(1);
        assert_eq!(comm.peer_ptr(&w, 0, 6), w.lsa_ptr(0, 2));
        assert_eq!(comm.peer_ptr(&w, 0, 4), w.lsa_ptr(0, 0));
        assert!(comm.peer_ptr(&w, 0, 3).is_null());
        assert!(comm.peer_ptr(&w, 0, 8).is_null());
    }
}
