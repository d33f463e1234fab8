//! The Device API's resource-requirement helpers: functions that fill an
//! `ncclDevResourceRequirements_t` (and the handle it points back to) for the caller to
//! chain into `ncclDevCommRequirements_t.resourceRequirementsList`.
//!
//! The LSA barrier and LL all-to-all helpers only compute sizes, so they do what NCCL 2.29
//! does, byte for byte. The GIN helpers ask for GIN signals or scratch that only a GIN
//! transport provides; oxccl has none on a communicator (`ginType` is
//! `NCCL_GIN_TYPE_NONE` in `ncclCommQueryProperties`), so they return `ncclInvalidUsage`
//! and say so, rather than handing out a requirement that no device communicator could
//! meet.

use std::ffi::{c_int, c_void};

use super::devapi::NcclTeam;
use super::error::CError;
use super::init::NcclComm;

/// NCCL 2.29's `ncclDevResourceRequirements_t` (56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclDevResourceRequirements {
    pub next: *mut NcclDevResourceRequirements,
    pub buffer_size: usize,
    pub buffer_align: usize,
    pub out_buffer_handle: *mut u32,
    pub gin_signal_count: c_int,
    pub gin_counter_count: c_int,
    pub out_gin_signal_start: *mut u32,
    pub out_gin_counter_start: *mut u32,
}

/// `ncclLsaBarrierHandle_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclLsaBarrierHandle {
    pub buf_handle: u32,
    pub n_barriers: c_int,
}

/// `ncclLLA2AHandle_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclLla2aHandle {
    pub buf_handle: u32,
    pub n_slots: u32,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<NcclDevResourceRequirements>() == 56);
    assert!(offset_of!(NcclDevResourceRequirements, out_buffer_handle) == 24);
    assert!(offset_of!(NcclDevResourceRequirements, gin_signal_count) == 32);
    assert!(offset_of!(NcclDevResourceRequirements, out_gin_counter_start) == 48);
    assert!(size_of::<NcclLsaBarrierHandle>() == 8);
    assert!(size_of::<NcclLla2aHandle>() == 8);
};

impl NcclDevResourceRequirements {
    fn buffer(size: usize, align: usize, handle: *mut u32) -> Self {
        Self {
            next: std::ptr::null_mut(),
            buffer_size: size,
            buffer_align: align,
            out_buffer_handle: handle,
            gin_signal_count: 0,
            gin_counter_count: 0,
            out_gin_signal_start: std::ptr::null_mut(),
            out_gin_counter_start: std::ptr::null_mut(),
        }
    }
}

/// Bytes of `n` LSA barriers of a team of `n_ranks`: per barrier three words of the
/// barrier's own state and one arrival word per rank (NCCL's layout).
pub fn lsa_barrier_bytes(n_ranks: usize, n: usize) -> Option<usize> {
    n.checked_mul(n_ranks.checked_add(3)?)?.checked_mul(4)
}

/// Bytes of an LL all-to-all over `n_blocks` blocks of `n_slots` slots: per block one
/// 16-byte header and two 16-byte LL lines per slot (double-buffered).
pub fn lla2a_bytes(n_blocks: usize, n_slots: usize) -> Option<usize> {
    n_blocks
        .checked_mul(n_slots.checked_mul(2)?.checked_add(1)?)?
        .checked_mul(16)
}

/// Slots for `max_elts` elements of up to `max_elt_size` bytes: one per 8 bytes.
pub fn lla2a_slots(max_elts: i64, max_elt_size: i64) -> i64 {
    max_elts * ((max_elt_size + 7) / 8)
}

fn non_negative(op: &'static str, what: &str, v: c_int) -> Result<usize, CError> {
    usize::try_from(v).map_err(|_| CError::arg(op, format!("{what} is {v}, negative")))
}

api! {
    /// `nBarriers` barriers over `team`; `outHandle->bufHandle` is set by
    /// `ncclDevCommCreate`.
    fn ncclLsaBarrierCreateRequirement / pncclLsaBarrierCreateRequirement(team: NcclTeam, n_barriers: c_int, out_handle: *mut NcclLsaBarrierHandle, out_req: *mut NcclDevResourceRequirements) {
        const OP: &str = "ncclLsaBarrierCreateRequirement";
        if out_handle.is_null() || out_req.is_null() {
            return Err(CError::arg(OP, "outHandle or outReq is NULL"));
        }
        let n = non_negative(OP, "nBarriers", n_barriers)?;
        let ranks = non_negative(OP, "team.nRanks", team.n_ranks)?;
        let bytes = lsa_barrier_bytes(ranks, n)
            .ok_or_else(|| CError::arg(OP, format!("{n} barriers of {ranks} ranks overflow")))?;
        // SAFETY: non-null; the caller's structs (nccl.h contract).
        unsafe {
            (*out_handle).n_barriers = n_barriers;
            out_req.write(NcclDevResourceRequirements::buffer(bytes, 4, std::ptr::addr_of_mut!((*out_handle).buf_handle)));
        }
        Ok(())
    }
}

api! {
    /// An LL all-to-all scratch of `nBlocks` blocks × `nSlots` slots; `outHandle->bufHandle`
    /// is set by `ncclDevCommCreate`.
    fn ncclLLA2ACreateRequirement / pncclLLA2ACreateRequirement(n_blocks: c_int, n_slots: c_int, out_handle: *mut NcclLla2aHandle, out_req: *mut NcclDevResourceRequirements) {
        const OP: &str = "ncclLLA2ACreateRequirement";
        if out_handle.is_null() || out_req.is_null() {
            return Err(CError::arg(OP, "outHandle or outReq is NULL"));
        }
        let blocks = non_negative(OP, "nBlocks", n_blocks)?;
        let slots = non_negative(OP, "nSlots", n_slots)?;
        let bytes = lla2a_bytes(blocks, slots)
            .ok_or_else(|| CError::arg(OP, format!("{blocks} blocks of {slots} slots overflow")))?;
        // SAFETY: non-null; the caller's structs (nccl.h contract).
        unsafe {
            (*out_handle).n_slots = slots as u32;
            out_req.write(NcclDevResourceRequirements::buffer(bytes, 16, std::ptr::addr_of_mut!((*out_handle).buf_handle)));
        }
        Ok(())
    }
}

/// Slots an LL all-to-all needs for `maxElts` elements of up to `maxEltSize` bytes (−1 for
/// negative arguments or a result beyond `int`, with the last error saying which).
#[no_mangle]
pub extern "C" fn ncclLLA2ACalcSlots(max_elts: c_int, max_elt_size: c_int) -> c_int {
    super::error::guard_value("ncclLLA2ACalcSlots", -1, || {
        if max_elts < 0 || max_elt_size < 0 {
            super::error::set_last(&format!(
                "ncclLLA2ACalcSlots: maxElts {max_elts} or maxEltSize {max_elt_size} is negative"
            ));
            return -1;
        }
        c_int::try_from(lla2a_slots(max_elts.into(), max_elt_size.into())).unwrap_or_else(|_| {
            super::error::set_last(&format!(
                "ncclLLA2ACalcSlots: {max_elts} elements of {max_elt_size} bytes need more than INT_MAX slots"
            ));
            -1
        })
    })
}

/// `ncclLLA2ACalcSlots` under its profiling name.
#[no_mangle]
pub extern "C" fn pncclLLA2ACalcSlots(max_elts: c_int, max_elt_size: c_int) -> c_int {
    ncclLLA2ACalcSlots(max_elts, max_elt_size)
}

fn no_gin(op: &'static str, what: &str) -> CError {
    CError::usage(
        op,
        format!(
            "{what} needs a GIN transport, and oxccl's communicators have none (ncclCommQueryProperties reports ginType NCCL_GIN_TYPE_NONE)"
        ),
    )
}

api! {
    fn ncclGinBarrierCreateRequirement / pncclGinBarrierCreateRequirement(comm: NcclComm, team: NcclTeam, n_barriers: c_int, out_handle: *mut c_void, out_req: *mut NcclDevResourceRequirements) {
        let _ = (comm, out_handle, out_req);
        Err(no_gin("ncclGinBarrierCreateRequirement", &format!("a GIN barrier ({n_barriers} barriers over a team of {} ranks)", team.n_ranks)))
    }
}

api! {
    fn ncclGinOutboxCreateRequirement / pncclGinOutboxCreateRequirement(n_blocks: c_int, size_log2: c_int, out_handle: *mut c_void, out_req: *mut NcclDevResourceRequirements) {
        let _ = (out_handle, out_req);
        Err(no_gin("ncclGinOutboxCreateRequirement", &format!("a GIN outbox ({n_blocks} blocks of 2^{size_log2} bytes)")))
    }
}

api! {
    fn ncclGinInboxA2ACreateRequirement / pncclGinInboxA2ACreateRequirement(peers: NcclTeam, n_blocks: c_int, size_log2: c_int, out_handle: *mut c_void, out_req: *mut NcclDevResourceRequirements) {
        let _ = (out_handle, out_req);
        Err(no_gin("ncclGinInboxA2ACreateRequirement", &format!("a GIN all-to-all inbox ({n_blocks} blocks of 2^{size_log2} bytes, {} peers)", peers.n_ranks)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_nccl() {
        assert_eq!(lsa_barrier_bytes(4, 2), Some(56));
        assert_eq!(lla2a_bytes(2, 8), Some(544));
        assert_eq!(lla2a_slots(4, 100), 52);
        assert_eq!(lla2a_slots(4, 8), 4);
        assert_eq!(lla2a_slots(3, 16), 6);
        assert_eq!(lsa_barrier_bytes(usize::MAX, 2), None);
    }

    #[test]
    fn helpers_fill_and_refuse() {
        let mut h = NcclLla2aHandle {
            buf_handle: 7,
            n_slots: 0,
        };
        let mut r = std::mem::MaybeUninit::<NcclDevResourceRequirements>::uninit();
        // SAFETY: valid out pointers.
        let rc = unsafe { ncclLLA2ACreateRequirement(2, 8, &mut h, r.as_mut_ptr()) };
        assert_eq!(rc, 0);
        // SAFETY: written on success.
        let r = unsafe { r.assume_init() };
        assert_eq!((r.buffer_size, r.buffer_align, h.n_slots), (544, 16, 8));
        assert_eq!(r.out_buffer_handle, std::ptr::addr_of_mut!(h.buf_handle));
        let mut r2 = r;
        // SAFETY: as above; a null handle is refused.
        let rc = unsafe { ncclLLA2ACreateRequirement(2, -1, &mut h, &mut r2) };
        assert_eq!(rc, 4);
        let t = NcclTeam {
            n_ranks: 2,
            rank: 0,
            stride: 1,
        };
        // SAFETY: the GIN helpers write nothing.
        let rc = unsafe {
            ncclGinBarrierCreateRequirement(std::ptr::null_mut(), t, 4, std::ptr::null_mut(), &mut r2)
        };
        assert_eq!(rc, 5);
        assert_eq!(ncclLLA2ACalcSlots(-1, 8), -1);
    }
}
