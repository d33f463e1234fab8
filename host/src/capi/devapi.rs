//! The host side of the Device API: `ncclCommQueryProperties`, `ncclDevCommCreate` /
//! `ncclDevCommDestroy`, the window pointer getters, and the team helpers.
//!
//! `ncclCommProperties_t` has NCCL 2.29's layout (each field written only when the caller's
//! `size` holds it). Requirements come in NCCL's layout (`NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER`
//! of our nccl.h, mapped by [`super::devreqs`]) or oxccl's; the device communicator is
//! oxccl's (`OxcclDevComm` in `ptx/oxccl_device.h`, read by the kernels that link
//! `ptx/oxccl_device.bc`): kernels built against NCCL's device headers cannot use it.

use std::ffi::{c_int, c_void};

use oxccl_device::api::abi::DevComm;

use super::error::{guard_value, put, set_last, CError};
use super::group;
use super::handle::{CComm, CWin};
use super::init::NcclComm;
use super::mem::NcclWindow;
use super::types::API_MAGIC;

/// NCCL 2.29's `ncclCommProperties_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclCommProperties {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub rank: c_int,
    pub n_ranks: c_int,
    pub cuda_dev: c_int,
    pub nvml_dev: c_int,
    pub device_api_support: bool,
    pub multimem_support: bool,
    pub gin_type: c_int,
    pub n_lsa_teams: c_int,
    pub host_rma_support: bool,
    pub railed_gin_type: c_int,
}

const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(NcclCommProperties, rank) == 16);
    assert!(offset_of!(NcclCommProperties, device_api_support) == 32);
    assert!(offset_of!(NcclCommProperties, gin_type) == 36);
    assert!(offset_of!(NcclCommProperties, host_rma_support) == 44);
    assert!(std::mem::size_of::<NcclCommProperties>() == 56);
};

/// `ncclTeam_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclTeam {
    pub n_ranks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

api! {
    fn ncclCommQueryProperties / pncclCommQueryProperties(comm: NcclComm, props: *mut NcclCommProperties) {
        const OP: &str = "ncclCommQueryProperties";
        if props.is_null() {
            return Err(CError::arg(OP, "props is NULL"));
        }
        let base = props as *mut u8;
        // SAFETY: non-null; the header is present in every version of the struct.
        let (size, magic) = unsafe {
            (std::ptr::read_unaligned(base as *const usize), std::ptr::read_unaligned(base.add(8) as *const u32))
        };
        if magic != API_MAGIC || size < 16 {
            return Err(CError::arg(OP, "props is not initialized (use NCCL_COMM_PROPERTIES_INITIALIZER)"));
        }
        let c = CComm::get(OP, super::key(comm))?.comm(OP)?;
        let p = c.query_properties();
        macro_rules! fill {
            ($field:ident, $v:expr) => {
                let off = std::mem::offset_of!(NcclCommProperties, $field);
                let v = $v;
                if size >= off + std::mem::size_of_val(&v) {
                    // SAFETY: the caller's struct holds the field (its size says so).
                    unsafe { std::ptr::write_unaligned(base.add(off) as *mut _, v) };
                }
            };
        }
        fill!(rank, p.rank as c_int);
        fill!(n_ranks, p.nranks as c_int);
        fill!(cuda_dev, p.cu_device);
        fill!(nvml_dev, p.nvml_device);
        fill!(device_api_support, p.device_api_support);
        fill!(multimem_support, p.multimem_support);
        fill!(gin_type, p.gin_type as c_int);
        fill!(n_lsa_teams, p.n_lsa_teams as c_int);
        fill!(host_rma_support, p.host_rma_support);
        fill!(railed_gin_type, p.railed_gin_type as c_int);
        Ok(())
    }
}

api! {
    /// Collective (every rank, same requirements); in a group `out` and the resource handles
    /// are written by the outermost `ncclGroupEnd`. `reqs` is NCCL's
    /// `ncclDevCommRequirements_t` (from `NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER`, mapped
    /// as [`super::devreqs`] says) or oxccl's own `OxcclDevCommRequirements`. `out` gets
    /// oxccl's device communicator (`OxcclDevComm` of `ptx/oxccl_device.h`, 112 bytes: less
    /// than NCCL's 224-byte `ncclDevComm`, so a caller's `ncclDevComm` holds it).
    fn ncclDevCommCreate / pncclDevCommCreate(comm: NcclComm, reqs: *const c_void, out: *mut DevComm) {
        const OP: &str = "ncclDevCommCreate";
        if reqs.is_null() || out.is_null() {
            return Err(CError::arg(OP, "reqs or outDevComm is NULL"));
        }
        let cc = CComm::get(OP, super::key(comm))?;
        // SAFETY: non-null; caller contract (an initialized struct of either layout).
        let reqs = unsafe { super::devreqs::read(OP, reqs) }?;
        let c = cc.comm(OP)?;
        let out = out as usize;
        group::run_or_defer(OP, move || {
            use super::devreqs::Reqs;
            let h = match &reqs {
                Reqs::Oxccl(bytes) => c.dev_comm_create_from_bytes(bytes)?,
                Reqs::Nccl(m) => c.dev_comm_create(&m.reqs)?,
            };
            if let Reqs::Nccl(m) = &reqs {
                // SAFETY: the caller's handle structs (nccl.h: valid until the call completes).
                unsafe { m.write_handles() };
            }
            // SAFETY: caller contract: `out` stays valid until the group ends.
            unsafe { (out as *mut DevComm).write_unaligned(h.dev_comm()) };
            cc.devcomms.lock().unwrap_or_else(|p| p.into_inner()).push(h);
            Ok(())
        })
    }
}

api! {
    fn ncclDevCommDestroy / pncclDevCommDestroy(comm: NcclComm, dev: *const DevComm) {
        const OP: &str = "ncclDevCommDestroy";
        if dev.is_null() {
            return Err(CError::arg(OP, "devComm is NULL"));
        }
        // SAFETY: non-null, caller contract.
        let want = unsafe { std::ptr::read_unaligned(dev) };
        let cc = CComm::get(OP, super::key(comm))?;
        let c = cc.comm_even_revoked(OP)?;
        let h = {
            let mut v = cc.devcomms.lock().unwrap_or_else(|p| p.into_inner());
            let i = v
                .iter()
                .position(|h| h.dev_comm() == want)
                .ok_or_else(|| CError::arg(OP, "devComm was not made by ncclDevCommCreate on this communicator"))?;
            v.swap_remove(i)
        };
        group::run_or_defer(OP, move || c.dev_comm_destroy(h).map_err(CError::from))
    }
}

fn window_ptr(
    op: &'static str,
    win: NcclWindow,
    out: *mut *mut c_void,
    f: impl FnOnce(&crate::window::Window) -> crate::Result<u64>,
) -> Result<(), CError> {
    if out.is_null() {
        return Err(CError::arg(op, "outPtr is NULL"));
    }
    let w = CWin::get(op, win as usize)?;
    let guard = w.window.lock().unwrap_or_else(|p| p.into_inner());
    let Some(window) = guard.as_ref() else {
        return Err(CError::arg(op, "the window was deregistered"));
    };
    let p = f(window)?;
    // SAFETY: checked non-null.
    unsafe { put(op, "outPtr", out, p as *mut c_void) }
}

api! {
    /// LSA peer `lsa_rank`'s address of byte `offset` of the window.
    fn ncclGetLsaDevicePointer / pncclGetLsaDevicePointer(win: NcclWindow, offset: usize, lsa_rank: c_int, out: *mut *mut c_void) {
        let peer = u32::try_from(lsa_rank).map_err(|_| CError::arg("ncclGetLsaDevicePointer", format!("lsaRank {lsa_rank} is negative")))?;
        window_ptr("ncclGetLsaDevicePointer", win, out, |w| w.lsa_ptr(peer, offset))
    }
}

api! {
    /// World rank `peer`'s address of byte `offset` of the window. NCCL gives NULL for a
    /// peer of the communicator outside this rank's LSA team (not load/store reachable):
    /// every rank of an oxccl communicator is in it, so the pointer is never NULL here. A
    /// peer outside the communicator or an offset past the peer's window is an invalid
    /// argument (as `ncclGetLsaDevicePointer`), not a NULL that reads as "unreachable".
    fn ncclGetPeerDevicePointer / pncclGetPeerDevicePointer(win: NcclWindow, offset: usize, peer: c_int, out: *mut *mut c_void) {
        let p = u32::try_from(peer).map_err(|_| CError::arg("ncclGetPeerDevicePointer", format!("peer {peer} is negative")))?;
        window_ptr("ncclGetPeerDevicePointer", win, out, |w| w.world_ptr(p, offset))
    }
}

api! {
    /// No multicast objects exist in oxccl: success with NULL, as NCCL without multimem.
    fn ncclGetLsaMultimemDevicePointer / pncclGetLsaMultimemDevicePointer(win: NcclWindow, offset: usize, out: *mut *mut c_void) {
        let _ = offset;
        window_ptr("ncclGetLsaMultimemDevicePointer", win, out, |_| Ok(0))
    }
}

api! {
    /// As `ncclGetLsaMultimemDevicePointer`.
    fn ncclGetMultimemDevicePointer / pncclGetMultimemDevicePointer(win: NcclWindow, offset: usize, mm: *mut c_void, out: *mut *mut c_void) {
        let _ = (offset, mm);
        window_ptr("ncclGetMultimemDevicePointer", win, out, |_| Ok(0))
    }
}

/// The team functions return values, not results: a bad communicator gives an empty team
/// (and the last error says why).
fn team_of(op: &'static str, comm: NcclComm, f: impl FnOnce(&crate::Comm) -> NcclTeam) -> NcclTeam {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        CComm::get(op, super::key(comm))
            .and_then(|c| c.comm(op))
            .map(|c| f(&c))
    }));
    match r {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            set_last(&e.message);
            NcclTeam::default()
        }
        Err(_) => {
            set_last(&format!("{op}: internal error"));
            NcclTeam::default()
        }
    }
}

macro_rules! team_fn {
    ($name:ident / $pname:ident, $doc:literal, |$c:ident| $body:expr) => {
        #[doc = $doc]
        #[no_mangle]
        pub unsafe extern "C" fn $name(comm: NcclComm) -> NcclTeam {
            team_of(stringify!($name), comm, |$c| $body)
        }
        #[doc = concat!("`", stringify!($name), "` under its profiling name.")]
        #[no_mangle]
        pub unsafe extern "C" fn $pname(comm: NcclComm) -> NcclTeam {
            // SAFETY: as the function it forwards to.
            unsafe { $name(comm) }
        }
    };
}

team_fn!(ncclTeamWorld / pncclTeamWorld, "Every rank.", |c| NcclTeam {
    n_ranks: c.count() as c_int,
    rank: c.rank() as c_int,
    stride: 1,
});
team_fn!(
    ncclTeamLsa / pncclTeamLsa,
    "The load/store team: every rank (one node).",
    |c| NcclTeam {
        n_ranks: c.count() as c_int,
        rank: c.rank() as c_int,
        stride: 1,
    }
);
team_fn!(
    ncclTeamRail / pncclTeamRail,
    "The rail team: this rank alone (one node).",
    |c| NcclTeam {
        n_ranks: 1,
        rank: 0,
        stride: c.count() as c_int,
    }
);

/// `base + (r - team.rank) * team.stride` in checked arithmetic; `None` on overflow.
fn team_rank_to(base: c_int, team: NcclTeam, r: c_int) -> Option<c_int> {
    r.checked_sub(team.rank)?
        .checked_mul(team.stride)?
        .checked_add(base)
}

/// World rank of rank `r` of `team` (as seen from this rank): `rank + (r - team.rank) *
/// stride`; -1 (with the last error saying why) for a bad communicator or a team whose
/// arithmetic overflows `int`.
#[no_mangle]
pub unsafe extern "C" fn ncclTeamRankToWorld(comm: NcclComm, team: NcclTeam, r: c_int) -> c_int {
    const OP: &str = "ncclTeamRankToWorld";
    guard_value(OP, -1, || {
        let me = match CComm::get(OP, super::key(comm)).and_then(|c| c.comm(OP)) {
            Ok(c) => c.rank() as c_int,
            Err(e) => {
                set_last(&e.message);
                return -1;
            }
        };
        team_rank_to(me, team, r).unwrap_or_else(|| {
            set_last(&format!(
                "{OP}: rank {r} of team {{nRanks {}, rank {}, stride {}}} from world rank {me} overflows int",
                team.n_ranks, team.rank, team.stride
            ));
            -1
        })
    })
}

/// `ncclTeamRankToWorld` under its profiling name.
#[no_mangle]
pub unsafe extern "C" fn pncclTeamRankToWorld(comm: NcclComm, team: NcclTeam, r: c_int) -> c_int {
    // SAFETY: as above.
    unsafe { ncclTeamRankToWorld(comm, team, r) }
}

/// LSA rank of rank `r` of `team`: `lsaRank + (r - team.rank) * stride` (every rank is in
/// the one LSA team here, so the LSA rank is the world rank); -1 as for
/// `ncclTeamRankToWorld`.
#[no_mangle]
pub unsafe extern "C" fn ncclTeamRankToLsa(comm: NcclComm, team: NcclTeam, r: c_int) -> c_int {
    const OP: &str = "ncclTeamRankToLsa";
    guard_value(OP, -1, || {
        let me = match CComm::get(OP, super::key(comm)).and_then(|c| c.comm(OP)) {
            Ok(c) => c.rank() as c_int,
            Err(e) => {
                set_last(&e.message);
                return -1;
            }
        };
        team_rank_to(me, team, r).unwrap_or_else(|| {
            set_last(&format!(
                "{OP}: rank {r} of team {{nRanks {}, rank {}, stride {}}} from LSA rank {me} overflows int",
                team.n_ranks, team.rank, team.stride
            ));
            -1
        })
    })
}

/// `ncclTeamRankToLsa` under its profiling name.
#[no_mangle]
pub unsafe extern "C" fn pncclTeamRankToLsa(comm: NcclComm, team: NcclTeam, r: c_int) -> c_int {
    // SAFETY: as above.
    unsafe { ncclTeamRankToLsa(comm, team, r) }
}
