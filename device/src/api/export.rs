//! The Device API as C functions (`oxccl_dev_*`), for kernels written in other languages
//! and linked against `ptx/oxccl_device.bc`; declared by `ptx/oxccl_device.h`.
//!
//! Conventions: structs by pointer (`const OxcclDevComm*`, `const OxcclWindow*`,
//! `OxcclTeam*` out-parameters); coops by kind (`OXCCL_COOP_THREAD`, `_WARP`, `_BLOCK`);
//! memory orders as `cuda::std::memory_order` values; statuses as `u32`
//! (`OXCCL_DEV_SUCCESS` 0, `OXCCL_DEV_ERR_TIMEOUT` 1, `OXCCL_DEV_ERR_ABORTED` 2,
//! `OXCCL_DEV_ERR_INVALID_ARGUMENT` 0x100). The barrier session is [`OxcclLsaBarrierSession`],
//! opaque storage of [`LSA_BARRIER_SESSION_BYTES`] that the caller owns (a local variable):
//! `init` fills it, `end` persists its epoch. None of these functions panics.

use core::ffi::c_void;

use super::abi::{DevComm, Team, WindowDesc, DEVICE_API_VERSION};
use super::barrier::{LsaBarrierSession, MemOrder};
use super::coop::{Coop, CoopAny, COOP_BLOCK};
use super::error::{DEV_ERR_INVALID_ARGUMENT, DEV_SUCCESS};

/// Bytes of [`OxcclLsaBarrierSession`] (`OXCCL_LSA_BARRIER_SESSION_BYTES`).
pub const LSA_BARRIER_SESSION_BYTES: usize = 96;

/// Opaque storage for an LSA barrier session of the C API (`OxcclLsaBarrierSession`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug)]
pub struct OxcclLsaBarrierSession {
    pub opaque: [u64; LSA_BARRIER_SESSION_BYTES / 8],
}

type Session = LsaBarrierSession<CoopAny>;

const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<OxcclLsaBarrierSession>() == LSA_BARRIER_SESSION_BYTES);
    assert!(size_of::<Session>() <= LSA_BARRIER_SESSION_BYTES);
    assert!(align_of::<Session>() <= align_of::<OxcclLsaBarrierSession>());
};

/// The status of a wait result.
#[inline(always)]
fn status(r: Result<(), super::DevError>) -> u32 {
    match r {
        Ok(()) => DEV_SUCCESS,
        Err(e) => e.code(),
    }
}

/// [`DEVICE_API_VERSION`] of this library (`OXCCL_DEVICE_API_VERSION` of its header).
#[no_mangle]
pub extern "C" fn oxccl_dev_version() -> u32 {
    DEVICE_API_VERSION
}

/// World rank.
///
/// # Safety
/// `comm` points to a valid `OxcclDevComm`.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_rank(comm: *const DevComm) -> u32 {
    // SAFETY: caller contract.
    unsafe { (*comm).rank() }
}

/// World size.
///
/// # Safety
/// `comm` points to a valid `OxcclDevComm`.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_nranks(comm: *const DevComm) -> u32 {
    // SAFETY: caller contract.
    unsafe { (*comm).nranks() }
}

/// Rank in the LSA team.
///
/// # Safety
/// `comm` points to a valid `OxcclDevComm`.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_rank(comm: *const DevComm) -> u32 {
    // SAFETY: caller contract.
    unsafe { (*comm).lsa_rank() }
}

/// Size of the LSA team.
///
/// # Safety
/// `comm` points to a valid `OxcclDevComm`.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_size(comm: *const DevComm) -> u32 {
    // SAFETY: caller contract.
    unsafe { (*comm).lsa_size() }
}

/// The world team into `*out`.
///
/// # Safety
/// `comm` points to a valid `OxcclDevComm`, `out` to writable `OxcclTeam` storage.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_team_world(comm: *const DevComm, out: *mut Team) {
    // SAFETY: caller contract.
    unsafe { out.write((*comm).team_world()) }
}

/// The LSA team into `*out`.
///
/// # Safety
/// As [`oxccl_dev_team_world`].
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_team_lsa(comm: *const DevComm, out: *mut Team) {
    // SAFETY: caller contract.
    unsafe { out.write((*comm).team_lsa()) }
}

/// The rail team into `*out`.
///
/// # Safety
/// As [`oxccl_dev_team_world`].
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_team_rail(comm: *const DevComm, out: *mut Team) {
    // SAFETY: caller contract.
    unsafe { out.write((*comm).team_rail()) }
}

/// World rank of team rank `r` of `team`.
///
/// # Safety
/// `comm` and `team` point to valid structs.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_team_rank_to_world(
    comm: *const DevComm,
    team: *const Team,
    r: u32,
) -> u32 {
    // SAFETY: caller contract.
    unsafe { (*team).rank_to_world(&*comm, r) }
}

/// Team rank of world rank `w` in `team`, or -1 when `w` is not a member.
///
/// # Safety
/// `comm` and `team` point to valid structs.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_team_world_to_rank(
    comm: *const DevComm,
    team: *const Team,
    w: u32,
) -> i32 {
    // SAFETY: caller contract.
    match unsafe { (*team).world_to_rank(&*comm, w) } {
        Some(r) => r as i32,
        None => -1,
    }
}

/// LSA rank of team rank `r` of `team`, or -1 when that rank is not in this rank's LSA team.
///
/// # Safety
/// `comm` and `team` point to valid structs.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_team_rank_to_lsa(comm: *const DevComm, team: *const Team, r: u32) -> i32 {
    // SAFETY: caller contract.
    match unsafe { (*team).rank_to_lsa(&*comm, r) } {
        Some(l) => l as i32,
        None => -1,
    }
}

/// Team rank `k` steps after this rank in `team`, cyclically.
///
/// # Safety
/// `team` points to a valid `OxcclTeam`.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_team_peer(team: *const Team, k: u32) -> u32 {
    // SAFETY: caller contract.
    unsafe { (*team).peer(k) }
}

/// This rank's byte `offset` of `win`.
///
/// # Safety
/// `win` points to a valid `OxcclWindow`.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_local_ptr(win: *const WindowDesc, offset: u64) -> *mut c_void {
    // SAFETY: caller contract.
    unsafe { (*win).local_ptr(offset) as *mut c_void }
}

/// LSA peer `lsa_peer`'s byte `offset` of `win`.
///
/// # Safety
/// `win` points to a valid `OxcclWindow`.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_ptr(
    win: *const WindowDesc,
    offset: u64,
    lsa_peer: u32,
) -> *mut c_void {
    // SAFETY: caller contract.
    unsafe { (*win).lsa_ptr(offset, lsa_peer) as *mut c_void }
}

/// World peer `world_peer`'s byte `offset` of `win`; null when the peer is not in the LSA
/// team.
///
/// # Safety
/// `comm` and `win` point to valid structs.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_peer_ptr(
    comm: *const DevComm,
    win: *const WindowDesc,
    offset: u64,
    world_peer: u32,
) -> *mut c_void {
    // SAFETY: caller contract.
    unsafe { (*comm).peer_ptr(&*win, offset, world_peer) as *mut c_void }
}

/// This rank's byte `offset` of the resource window.
///
/// # Safety
/// `comm` points to a valid `OxcclDevComm`.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_resource_ptr(comm: *const DevComm, offset: u64) -> *mut c_void {
    // SAFETY: caller contract.
    unsafe { (*comm).resource_ptr(offset) as *mut c_void }
}

/// The calling thread's rank in coop `coop` (`OXCCL_COOP_*`).
#[no_mangle]
pub extern "C" fn oxccl_dev_coop_thread_rank(coop: u32) -> u32 {
    CoopAny::new(coop).thread_rank()
}

/// Threads in coop `coop`.
#[no_mangle]
pub extern "C" fn oxccl_dev_coop_size(coop: u32) -> u32 {
    CoopAny::new(coop).size()
}

/// Every thread of coop `coop` meets.
#[no_mangle]
pub extern "C" fn oxccl_dev_coop_sync(coop: u32) {
    CoopAny::new(coop).sync()
}

/// Start a session on LSA barrier `index` of `comm` for coop `coop` (every thread of the
/// coop calls it): `OXCCL_DEV_SUCCESS`, or `OXCCL_DEV_ERR_INVALID_ARGUMENT` (null pointer,
/// `index >= lsa_barrier_count`, a coop other than `OXCCL_COOP_THREAD` / `_WARP` / `_BLOCK`,
/// or a `comm` whose header is not a device communicator of this layout: another size or a
/// version newer than this bitcode's), leaving `*s` untouched.
///
/// # Safety
/// `comm` is null or points to a valid `OxcclDevComm` as made by the host (see
/// [`LsaBarrierSession::new`]); `s` is null or points to writable session storage.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_barrier_init(
    s: *mut OxcclLsaBarrierSession,
    comm: *const DevComm,
    coop: u32,
    index: u32,
) -> u32 {
    if s.is_null() || comm.is_null() {
        return DEV_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, valid by the caller contract.
    let comm = unsafe { &*comm };
    let h = comm.header;
    if index >= comm.lsa_barrier_count
        || coop > COOP_BLOCK
        || h.size as usize != core::mem::size_of::<DevComm>()
        || h.version > DEVICE_API_VERSION
    {
        return DEV_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: `new`'s contract holds by ours; the storage is large and aligned enough
    // (asserted above) and holds no live session (`init` starts one).
    unsafe { (s as *mut Session).write(Session::new(CoopAny::new(coop), comm, index)) };
    DEV_SUCCESS
}

/// Arrive at the barrier (`order`: `cuda::std::memory_order` value).
///
/// # Safety
/// `s` points to a session started by [`oxccl_dev_lsa_barrier_init`] and not ended.
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_barrier_arrive(s: *mut OxcclLsaBarrierSession, order: u32) {
    // SAFETY: caller contract: a live session.
    unsafe { (*(s as *mut Session)).arrive(MemOrder::from_u32(order)) }
}

/// Wait for every LSA peer's arrival, with the communicator's timeout: a status.
///
/// # Safety
/// As [`oxccl_dev_lsa_barrier_arrive`].
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_barrier_wait(s: *mut OxcclLsaBarrierSession, order: u32) -> u32 {
    // SAFETY: caller contract: a live session.
    status(unsafe { (*(s as *mut Session)).try_wait(MemOrder::from_u32(order)) })
}

/// Wait with timeout `timeout_ns` (0 = never; the abort flag is still polled): a status.
///
/// # Safety
/// As [`oxccl_dev_lsa_barrier_arrive`].
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_barrier_wait_timeout(
    s: *mut OxcclLsaBarrierSession,
    order: u32,
    timeout_ns: u64,
) -> u32 {
    // SAFETY: caller contract: a live session.
    status(unsafe { (*(s as *mut Session)).wait_timeout(MemOrder::from_u32(order), timeout_ns) })
}

/// Arrive, then wait: a status.
///
/// # Safety
/// As [`oxccl_dev_lsa_barrier_arrive`].
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_barrier_sync(s: *mut OxcclLsaBarrierSession, order: u32) -> u32 {
    // SAFETY: caller contract: a live session.
    status(unsafe { (*(s as *mut Session)).try_sync(MemOrder::from_u32(order)) })
}

/// End the session (every thread of the coop): persist its epoch for the next session on
/// the barrier (this kernel's or the next kernel's). `*s` is dead afterwards.
///
/// # Safety
/// As [`oxccl_dev_lsa_barrier_arrive`].
#[no_mangle]
pub unsafe extern "C" fn oxccl_dev_lsa_barrier_end(s: *mut OxcclLsaBarrierSession) {
    // SAFETY: caller contract: a live session, read out once (dropping it persists).
    unsafe { (s as *mut Session).read() }.end()
}

/// The names of every exported function, in header order (checked against the PTX by the
/// builder).
pub const EXPORTED: &[&str] = &[
    "oxccl_dev_version",
    "oxccl_dev_rank",
    "oxccl_dev_nranks",
    "oxccl_dev_lsa_rank",
    "oxccl_dev_lsa_size",
    "oxccl_dev_team_world",
    "oxccl_dev_team_lsa",
    "oxccl_dev_team_rail",
    "oxccl_dev_team_rank_to_world",
    "oxccl_dev_team_world_to_rank",
    "oxccl_dev_team_rank_to_lsa",
    "oxccl_dev_team_peer",
    "oxccl_dev_local_ptr",
    "oxccl_dev_lsa_ptr",
    "oxccl_dev_peer_ptr",
    "oxccl_dev_resource_ptr",
    "oxccl_dev_coop_thread_rank",
    "oxccl_dev_coop_size",
    "oxccl_dev_coop_sync",
    "oxccl_dev_lsa_barrier_init",
    "oxccl_dev_lsa_barrier_arrive",
    "oxccl_dev_lsa_barrier_wait",
    "oxccl_dev_lsa_barrier_wait_timeout",
    "oxccl_dev_lsa_barrier_sync",
    "oxccl_dev_lsa_barrier_end",
];
