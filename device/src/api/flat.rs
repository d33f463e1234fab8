//! One process's LSA team in one allocation (a "flat range"): what a host needs to build
//! [`DevComm`]s by hand, for tests, the CPU backend and `oxccl devapi-run`.
//!
//! Rank `q`'s resource window is bytes `[q * stride, q * stride + stride)` of the range:
//! `[barriers: count * lsa_size u64 lines][epochs: count u64][user: user_bytes]`, `stride`
//! rounded up to 4 KiB. The range must be zeroed before first use.

use super::abi::{DevComm, WindowDesc, WIN_COLL_SYMMETRIC};

/// Offsets of one rank's resource window in a flat range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatLayout {
    pub lsa_size: u32,
    pub barrier_count: u32,
    /// Offset of the barrier lines (0).
    pub barrier_offset: u64,
    /// Offset of the persisted epochs.
    pub epoch_offset: u64,
    /// Offset of the caller's bytes (128-byte aligned).
    pub user_offset: u64,
    /// Bytes per rank (4 KiB multiple): the window's stride.
    pub stride: u64,
}

impl FlatLayout {
    /// The layout for `lsa_size` ranks, `barrier_count` LSA barriers and `user_bytes` of the
    /// caller's own per rank.
    pub const fn new(lsa_size: u32, barrier_count: u32, user_bytes: u64) -> Self {
        let lines = 8 * barrier_count as u64 * lsa_size as u64;
        let epoch_offset = lines;
        let user_offset = (epoch_offset + 8 * barrier_count as u64).div_ceil(128) * 128;
        let stride = (user_offset + user_bytes).div_ceil(4096) * 4096;
        FlatLayout {
            lsa_size,
            barrier_count,
            barrier_offset: 0,
            epoch_offset,
            user_offset,
            stride: if stride == 0 { 4096 } else { stride },
        }
    }

    /// Bytes of the whole range.
    pub const fn total_bytes(&self) -> u64 {
        self.stride * self.lsa_size as u64
    }

    /// The device communicator of LSA rank `rank` (= world rank: one LSA team) for the
    /// range at address `base`; `abort_flag` is a `*const u32` address or 0.
    pub const fn dev_comm(&self, base: u64, rank: u32, abort_flag: u64, timeout_ns: u64) -> DevComm {
        DevComm {
            rank,
            nranks: self.lsa_size,
            lsa_rank: rank,
            lsa_size: self.lsa_size,
            resource: WindowDesc {
                local: base + rank as u64 * self.stride,
                stride: self.stride,
                size: self.stride,
                rank,
                nranks: self.lsa_size,
                flags: WIN_COLL_SYMMETRIC,
                ..WINDOW_DEFAULT
            },
            lsa_barrier_offset: self.barrier_offset,
            lsa_epoch_offset: self.epoch_offset,
            lsa_barrier_count: self.barrier_count,
            abort_flag,
            timeout_ns,
            ..DEV_COMM_DEFAULT
        }
    }

    /// The window over the callers' bytes of every rank (rank `rank`'s view).
    pub const fn user_window(&self, base: u64, rank: u32) -> WindowDesc {
        WindowDesc {
            local: base + rank as u64 * self.stride + self.user_offset,
            stride: self.stride,
            size: self.stride - self.user_offset,
            rank,
            nranks: self.lsa_size,
            flags: WIN_COLL_SYMMETRIC,
            ..WINDOW_DEFAULT
        }
    }
}

const WINDOW_DEFAULT: WindowDesc = WindowDesc {
    header: super::abi::device_api_header::<WindowDesc>(),
    local: 0,
    stride: 0,
    size: 0,
    rank: 0,
    nranks: 0,
    flags: 0,
    serial: 0,
};

const DEV_COMM_DEFAULT: DevComm = DevComm {
    header: super::abi::device_api_header::<DevComm>(),
    rank: 0,
    nranks: 0,
    lsa_rank: 0,
    lsa_size: 0,
    resource: WINDOW_DEFAULT,
    lsa_barrier_offset: 0,
    lsa_epoch_offset: 0,
    lsa_barrier_count: 0,
    gin_type: super::abi::GIN_TYPE_NONE,
    abort_flag: 0,
    timeout_ns: 0,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_aligned_and_disjoint() {
        let l = FlatLayout::new(4, 3, 100);
        assert_eq!(l.epoch_offset, 96);
        assert_eq!(l.user_offset, 128);
        assert_eq!(l.stride, 4096);
        assert_eq!(l.total_bytes(), 4 * 4096);
        let c = l.dev_comm(0x10000, 2, 0, 0);
        assert_eq!(c.resource.local, 0x10000 + 2 * 4096);
        assert_eq!(c.header, DevComm::default().header);
        assert_eq!(l.user_window(0x10000, 2).lsa_ptr(0, 0) as u64, 0x10000 + 128);
        assert_eq!(FlatLayout::new(1, 0, 0).stride, 4096);
    }
}
