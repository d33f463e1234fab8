//! The requirements `ncclDevCommCreate` is given: NCCL's `ncclDevCommRequirements_t` (the
//! 2.29 layout of `host/capi/include/nccl.h`, from `NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER`)
//! mapped onto oxccl's [`DevCommRequirements`], or oxccl's own layout
//! (`OxcclDevCommRequirements` of `ptx/oxccl_device.h`) passed through.
//!
//! The two share the `{size, magic, version}` header and the magic; the version tells them
//! apart: oxccl's is [`DEVICE_API_VERSION`] (2), NCCL's an `NCCL_VERSION` code (22900 and
//! up since the header exists). NCCL's struct is read by its caller's `size` (2.29.2's
//! 72 bytes end at `ginCounterCount`; 2.29.7's 88 add the GIN connection fields; fields
//! the caller lacks keep the initializer's values); a caller newer than 2.29.7 is refused
//! as NCCL refuses one newer than itself.
//!
//! Mapping, as NCCL lays out its resource window:
//! - `resourceRequirementsList` is walked in order: each buffer starts at the running size
//!   rounded up to `max(128, bufferAlign)`; its `*outBufferHandle` = start / 128 (a handle
//!   counts 128-byte units of the resource window, whose caller region is oxccl's
//!   `[0, resource_bytes)`), written when the device communicator is made;
//! - `lsaBarrierCount` becomes oxccl's LSA barriers (`DevComm::lsa_barrier_*`);
//! - GIN requests (`barrierCount` hybrid barriers, `railGinBarrierCount`, `ginSignalCount`,
//!   `ginCounterCount`, `ginForceEnable`, a `ginConnectionType` other than NONE, a resource
//!   node's GIN signals or counters) are `ncclInvalidUsage`: there is no GIN transport; the
//!   GIN hints (`ginContextCount`, `ginExclusiveContexts`, `ginQueueDepth`) are ignored;
//! - multimem (`lsaMultimem`, a team requirement with `multimem`) is `ncclInvalidUsage`:
//!   oxccl makes no multicast objects (team requirements without it are accepted);
//! - `lsaLLA2ABlockCount`/`lsaLLA2ASlotCount` are `ncclInvalidUsage`: the device
//!   communicator has no built-in LL all-to-all handle (NCCL 2.29's neither); an LL
//!   all-to-all buffer comes from `ncclLLA2ACreateRequirement` in the resource list.

use std::ffi::{c_int, c_void};

use oxccl_device::api::abi::{DevCommRequirements, DEVICE_API_VERSION, DEV_COMM_REQUIREMENTS_MAGIC};

use super::error::CError;
use super::requirements::NcclDevResourceRequirements;
use super::types::VERSION_CODE;

/// NCCL 2.29.7's `ncclDevCommRequirements_t` (88 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclDevCommRequirements {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub resource_requirements_list: *mut NcclDevResourceRequirements,
    pub team_requirements_list: *mut NcclTeamRequirements,
    pub lsa_multimem: bool,
    pub barrier_count: c_int,
    pub lsa_barrier_count: c_int,
    pub rail_gin_barrier_count: c_int,
    pub lsa_lla2a_block_count: c_int,
    pub lsa_lla2a_slot_count: c_int,
    pub gin_force_enable: bool,
    pub gin_context_count: c_int,
    pub gin_signal_count: c_int,
    pub gin_counter_count: c_int,
    pub gin_connection_type: c_int,
    pub gin_exclusive_contexts: bool,
    pub gin_queue_depth: c_int,
}

/// NCCL's `ncclTeamRequirements_t` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclTeamRequirements {
    pub next: *mut NcclTeamRequirements,
    pub team: super::devapi::NcclTeam,
    pub multimem: bool,
    pub out_multimem_handle: *mut *mut c_void,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<NcclDevCommRequirements>() == 88);
    assert!(offset_of!(NcclDevCommRequirements, resource_requirements_list) == 16);
    assert!(offset_of!(NcclDevCommRequirements, lsa_multimem) == 32);
    assert!(offset_of!(NcclDevCommRequirements, lsa_barrier_count) == 40);
    assert!(offset_of!(NcclDevCommRequirements, gin_force_enable) == 56);
    assert!(offset_of!(NcclDevCommRequirements, gin_counter_count) == 68);
    assert!(offset_of!(NcclDevCommRequirements, gin_queue_depth) == 80);
    assert!(size_of::<NcclTeamRequirements>() == 32);
    assert!(offset_of!(NcclTeamRequirements, out_multimem_handle) == 24);
};

/// The first NCCL version whose requirements have the `{size, magic, version}` header.
const NCCL_HEADER_SINCE: u32 = 22900;
/// Bytes of the first such layout (2.29.2: up to `ginCounterCount`).
const NCCL_MIN_SIZE: usize = 72;
/// Most nodes followed in one requirement list (a longer one is taken for a cycle).
const MAX_NODES: usize = 1 << 16;
/// NCCL's resource handles count units of this many bytes.
const HANDLE_UNIT: usize = 128;

/// Requirements ready for `Comm::dev_comm_create*`.
#[derive(Debug)]
pub(crate) enum Reqs {
    /// oxccl's own layout, as the caller's bytes.
    Oxccl(Vec<u8>),
    /// NCCL's layout, mapped.
    Nccl(Mapped),
}

/// NCCL requirements mapped onto oxccl's.
#[derive(Debug)]
pub(crate) struct Mapped {
    pub reqs: DevCommRequirements,
    /// `(address of a caller's u32, handle)`: the resource handles to write once the
    /// device communicator exists.
    pub handles: Vec<(usize, u32)>,
}

impl Mapped {
    /// Write the resource handles into the caller's handle structs.
    ///
    /// # Safety
    /// The addresses came from the caller's requirement nodes, which nccl.h's contract
    /// keeps valid until `ncclDevCommCreate` completes.
    pub unsafe fn write_handles(&self) {
        for &(at, v) in &self.handles {
            // SAFETY: the caller's `outBufferHandle`, valid per the contract above.
            unsafe { std::ptr::write_unaligned(at as *mut u32, v) };
        }
    }
}

/// The initializer's values (`NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER`) for what a caller's
/// struct lacks.
fn initializer() -> NcclDevCommRequirements {
    NcclDevCommRequirements {
        size: std::mem::size_of::<NcclDevCommRequirements>(),
        magic: DEV_COMM_REQUIREMENTS_MAGIC,
        version: VERSION_CODE as u32,
        resource_requirements_list: std::ptr::null_mut(),
        team_requirements_list: std::ptr::null_mut(),
        lsa_multimem: false,
        barrier_count: 0,
        lsa_barrier_count: 0,
        rail_gin_barrier_count: 0,
        lsa_lla2a_block_count: 0,
        lsa_lla2a_slot_count: 0,
        gin_force_enable: false,
        gin_context_count: 4,
        gin_signal_count: 0,
        gin_counter_count: 0,
        gin_connection_type: 0,
        gin_exclusive_contexts: false,
        gin_queue_depth: 0,
    }
}

fn no_gin(op: &'static str, what: String) -> CError {
    CError::usage(
        op,
        format!(
            "{what} needs a GIN transport, and oxccl's communicators have none (ncclCommQueryProperties reports ginType NCCL_GIN_TYPE_NONE)"
        ),
    )
}

fn count(op: &'static str, name: &str, v: c_int) -> Result<u32, CError> {
    u32::try_from(v).map_err(|_| CError::arg(op, format!("{name} is {v}, negative")))
}

/// Read the requirements at `reqs` (non-null).
///
/// # Safety
/// `reqs` points to a requirements struct of either layout, readable for the bytes its own
/// `size` says, and its lists' nodes are valid (nccl.h's contract).
pub(crate) unsafe fn read(op: &'static str, reqs: *const c_void) -> Result<Reqs, CError> {
    let base = reqs as *const u8;
    // SAFETY: the 16-byte header leads both layouts.
    let (size, magic, version) = unsafe {
        (
            std::ptr::read_unaligned(base as *const u64) as usize,
            std::ptr::read_unaligned(base.add(8) as *const u32),
            std::ptr::read_unaligned(base.add(12) as *const u32),
        )
    };
    if magic != DEV_COMM_REQUIREMENTS_MAGIC {
        return Err(CError::arg(
            op,
            format!(
                "the requirements' magic is {magic:#x}, not {DEV_COMM_REQUIREMENTS_MAGIC:#x}: initialize them with NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER"
            ),
        ));
    }
    if version <= DEVICE_API_VERSION {
        if !(16..=1 << 16).contains(&size) {
            return Err(CError::arg(
                op,
                format!("oxccl requirements (version {version}) declare {size} bytes"),
            ));
        }
        // SAFETY: the caller's struct is `size` bytes (its own size field).
        let bytes = unsafe { std::slice::from_raw_parts(base, size) }.to_vec();
        return Ok(Reqs::Oxccl(bytes));
    }
    if version < NCCL_HEADER_SINCE {
        return Err(CError::arg(
            op,
            format!(
                "requirements of version {version} are neither oxccl's (version {DEVICE_API_VERSION}, OxcclDevCommRequirements) nor NCCL's (an NCCL_VERSION code from {NCCL_HEADER_SINCE}, NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER)"
            ),
        ));
    }
    if version > VERSION_CODE as u32 {
        return Err(CError::usage(
            op,
            format!(
                "the requirements come from the nccl.h of NCCL version {version}, newer than the 2.29.7 ({VERSION_CODE}) this library implements (NCCL refuses a caller newer than itself too): build against oxccl's nccl.h"
            ),
        ));
    }
    if size < NCCL_MIN_SIZE {
        return Err(CError::arg(
            op,
            format!("NCCL requirements (version {version}) of {size} bytes: the smallest NCCL 2.29 layout has {NCCL_MIN_SIZE}"),
        ));
    }
    let n = size.min(std::mem::size_of::<NcclDevCommRequirements>());
    map(op, &fields(base, n))
}

/// The caller's fields within its first `n` bytes, the initializer's beyond (each read at
/// its offset with its own type; bools as bytes, any non-zero byte true, as C).
fn fields(base: *const u8, n: usize) -> NcclDevCommRequirements {
    use std::mem::offset_of as off;
    type R = NcclDevCommRequirements;
    let init = initializer();
    let int = |o: usize, d: c_int| -> c_int {
        // SAFETY: within the caller's `n` readable bytes.
        if o + 4 <= n {
            unsafe { std::ptr::read_unaligned(base.add(o) as *const c_int) }
        } else {
            d
        }
    };
    let ptr = |o: usize| -> usize {
        // SAFETY: as above.
        if o + 8 <= n {
            unsafe { std::ptr::read_unaligned(base.add(o) as *const usize) }
        } else {
            0
        }
    };
    let flag = |o: usize, d: bool| -> bool {
        // SAFETY: as above.
        if o < n {
            (unsafe { *base.add(o) }) != 0
        } else {
            d
        }
    };
    NcclDevCommRequirements {
        resource_requirements_list: ptr(off!(R, resource_requirements_list)) as *mut _,
        team_requirements_list: ptr(off!(R, team_requirements_list)) as *mut _,
        lsa_multimem: flag(off!(R, lsa_multimem), init.lsa_multimem),
        barrier_count: int(off!(R, barrier_count), init.barrier_count),
        lsa_barrier_count: int(off!(R, lsa_barrier_count), init.lsa_barrier_count),
        rail_gin_barrier_count: int(off!(R, rail_gin_barrier_count), init.rail_gin_barrier_count),
        lsa_lla2a_block_count: int(off!(R, lsa_lla2a_block_count), init.lsa_lla2a_block_count),
        lsa_lla2a_slot_count: int(off!(R, lsa_lla2a_slot_count), init.lsa_lla2a_slot_count),
        gin_force_enable: flag(off!(R, gin_force_enable), init.gin_force_enable),
        gin_context_count: int(off!(R, gin_context_count), init.gin_context_count),
        gin_signal_count: int(off!(R, gin_signal_count), init.gin_signal_count),
        gin_counter_count: int(off!(R, gin_counter_count), init.gin_counter_count),
        gin_connection_type: int(off!(R, gin_connection_type), init.gin_connection_type),
        gin_exclusive_contexts: flag(off!(R, gin_exclusive_contexts), init.gin_exclusive_contexts),
        gin_queue_depth: int(off!(R, gin_queue_depth), init.gin_queue_depth),
        ..init
    }
}

fn map(op: &'static str, r: &NcclDevCommRequirements) -> Result<Reqs, CError> {
    let gin_asks = [
        ("barrierCount (hybrid LSA + GIN barriers)", r.barrier_count),
        ("railGinBarrierCount", r.rail_gin_barrier_count),
        ("ginSignalCount", r.gin_signal_count),
        ("ginCounterCount", r.gin_counter_count),
    ];
    for (name, v) in gin_asks {
        if v != 0 {
            count(op, name, v)?;
            return Err(no_gin(op, format!("{name} = {v}")));
        }
    }
    if r.gin_force_enable {
        return Err(no_gin(op, "ginForceEnable".into()));
    }
    if r.gin_connection_type != 0 {
        return Err(no_gin(op, format!("ginConnectionType {}", r.gin_connection_type)));
    }
    if r.lsa_multimem {
        return Err(CError::usage(
            op,
            "lsaMultimem asks for a multicast object, and oxccl makes none (ncclCommQueryProperties reports multimemSupport false)",
        ));
    }
    if r.lsa_lla2a_block_count != 0 || r.lsa_lla2a_slot_count != 0 {
        return Err(CError::usage(
            op,
            format!(
                "lsaLLA2ABlockCount {} / lsaLLA2ASlotCount {}: oxccl's device communicator has no built-in LL all-to-all handle; chain one made by ncclLLA2ACreateRequirement into resourceRequirementsList",
                r.lsa_lla2a_block_count, r.lsa_lla2a_slot_count
            ),
        ));
    }
    let lsa_barriers = count(op, "lsaBarrierCount", r.lsa_barrier_count)?;
    // Team requirements: multimem is refused; the others ask for nothing oxccl lacks.
    let mut t = r.team_requirements_list as *const NcclTeamRequirements;
    let mut i = 0;
    while !t.is_null() {
        if i == MAX_NODES {
            return Err(CError::arg(
                op,
                format!("teamRequirementsList has more than {MAX_NODES} nodes (a cycle?)"),
            ));
        }
        use std::mem::offset_of;
        let at = t as *const u8;
        // SAFETY: a node of the caller's list (nccl.h's contract), read field by field (the
        // bool as a byte).
        let (next, team_ranks, multimem) = unsafe {
            (
                std::ptr::read_unaligned(at as *const *const NcclTeamRequirements),
                std::ptr::read_unaligned(at.add(offset_of!(NcclTeamRequirements, team)) as *const c_int),
                *at.add(offset_of!(NcclTeamRequirements, multimem)) != 0,
            )
        };
        if multimem {
            return Err(CError::usage(
                op,
                format!(
                    "teamRequirementsList node {i} asks for multimem on a team of {team_ranks} ranks, and oxccl makes no multicast objects"
                ),
            ));
        }
        t = next;
        i += 1;
    }
    // Resource requirements: NCCL's layout of the resource window.
    let mut handles = Vec::new();
    let mut total: usize = 0;
    let mut p = r.resource_requirements_list as *const NcclDevResourceRequirements;
    let mut i = 0;
    while !p.is_null() {
        if i == MAX_NODES {
            return Err(CError::arg(
                op,
                format!("resourceRequirementsList has more than {MAX_NODES} nodes (a cycle?)"),
            ));
        }
        // SAFETY: a node of the caller's list (nccl.h's contract).
        let node = unsafe { std::ptr::read_unaligned(p) };
        if node.gin_signal_count != 0 || node.gin_counter_count != 0 {
            return Err(no_gin(
                op,
                format!(
                    "resourceRequirementsList node {i} ({} GIN signals, {} GIN counters)",
                    node.gin_signal_count, node.gin_counter_count
                ),
            ));
        }
        let align = node.buffer_align.max(HANDLE_UNIT);
        let overflow = || {
            CError::arg(
                op,
                format!("resourceRequirementsList node {i}: the resource window overflows"),
            )
        };
        let start = total.checked_add(align - 1).ok_or_else(overflow)? / align * align;
        if !node.out_buffer_handle.is_null() {
            let h = u32::try_from(start / HANDLE_UNIT).map_err(|_| overflow())?;
            handles.push((node.out_buffer_handle as usize, h));
        }
        total = start.checked_add(node.buffer_size).ok_or_else(overflow)?;
        p = node.next;
        i += 1;
    }
    let resource_bytes = total
        .checked_add(HANDLE_UNIT - 1)
        .map(|t| t / HANDLE_UNIT * HANDLE_UNIT);
    let resource_bytes =
        resource_bytes.ok_or_else(|| CError::arg(op, "the resource window overflows"))? as u64;
    let mut reqs = DevCommRequirements::new();
    reqs.resource_bytes = resource_bytes;
    reqs.lsa_barrier_count = lsa_barriers;
    Ok(Reqs::Nccl(Mapped { reqs, handles }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_struct(r: &NcclDevCommRequirements) -> Result<Reqs, CError> {
        // SAFETY: a whole struct with valid (or null) lists.
        unsafe { read("t", r as *const NcclDevCommRequirements as *const c_void) }
    }

    fn node(
        size: usize,
        align: usize,
        out: *mut u32,
        next: *mut NcclDevResourceRequirements,
    ) -> NcclDevResourceRequirements {
        NcclDevResourceRequirements {
            next,
            buffer_size: size,
            buffer_align: align,
            out_buffer_handle: out,
            gin_signal_count: 0,
            gin_counter_count: 0,
            out_gin_signal_start: std::ptr::null_mut(),
            out_gin_counter_start: std::ptr::null_mut(),
        }
    }

    #[test]
    fn nccl_initializer_maps_to_nothing() {
        match read_struct(&initializer()).unwrap() {
            Reqs::Nccl(m) => {
                assert_eq!(m.reqs, DevCommRequirements::new());
                assert!(m.handles.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn resource_list_is_laid_out_as_nccl_does() {
        let (mut h1, mut h2, mut h3) = (99u32, 99u32, 99u32);
        let mut c = node(10, 4096, &mut h3, std::ptr::null_mut());
        let mut b = node(200, 16, &mut h2, &mut c);
        let mut a = node(56, 4, &mut h1, &mut b);
        let mut r = initializer();
        r.resource_requirements_list = &mut a;
        r.lsa_barrier_count = 3;
        let Reqs::Nccl(m) = read_struct(&r).unwrap() else {
            panic!("not NCCL's")
        };
        // a at 0 (56 bytes), b at 128 (200 bytes, to 328), c at 4096 (10 bytes) -> 4224.
        assert_eq!(m.reqs.resource_bytes, 4224);
        assert_eq!(m.reqs.lsa_barrier_count, 3);
        // SAFETY: the handles point at h1..h3, alive here.
        unsafe { m.write_handles() };
        assert_eq!((h1, h2, h3), (0, 1, 32));
    }

    #[test]
    fn gin_multimem_lla2a_and_versions_are_refused_with_reasons() {
        let usage = |r: &NcclDevCommRequirements, needle: &str| {
            let e = read_struct(r).unwrap_err();
            assert_eq!(e.code, super::super::types::INVALID_USAGE, "{}", e.message);
            assert!(e.message.contains(needle), "{}", e.message);
        };
        let mut r = initializer();
        r.gin_signal_count = 2;
        usage(&r, "GIN");
        let mut r = initializer();
        r.barrier_count = 1;
        usage(&r, "GIN");
        let mut r = initializer();
        r.gin_connection_type = 1;
        usage(&r, "GIN");
        let mut r = initializer();
        r.lsa_multimem = true;
        usage(&r, "multicast");
        let mut r = initializer();
        r.lsa_lla2a_block_count = 2;
        usage(&r, "ncclLLA2ACreateRequirement");
        let mut r = initializer();
        r.version = 23100;
        usage(&r, "newer");
        let mut r = initializer();
        r.version = 500;
        assert_eq!(
            read_struct(&r).unwrap_err().code,
            super::super::types::INVALID_ARGUMENT
        );
        let mut r = initializer();
        r.lsa_barrier_count = -1;
        assert!(read_struct(&r).unwrap_err().message.contains("negative"));
        let mut n = node(8, 8, std::ptr::null_mut(), std::ptr::null_mut());
        n.gin_counter_count = 1;
        let mut r = initializer();
        r.resource_requirements_list = &mut n;
        usage(&r, "GIN");
    }

    #[test]
    fn older_nccl_caller_and_oxccl_layout() {
        // 2.29.2's 72 bytes: the GIN connection fields are not read (garbage after them).
        let mut raw = [0xffu8; 88];
        let r = initializer();
        // SAFETY: plain bytes of a repr(C) struct.
        let bytes = unsafe { std::slice::from_raw_parts(&r as *const _ as *const u8, 72) };
        raw[..72].copy_from_slice(bytes);
        raw[0..8].copy_from_slice(&72u64.to_le_bytes());
        raw[12..16].copy_from_slice(&22902u32.to_le_bytes());
        // SAFETY: 88 readable bytes.
        assert!(matches!(
            unsafe { read("t", raw.as_ptr() as *const c_void) },
            Ok(Reqs::Nccl(_))
        ));
        let own = DevCommRequirements::new();
        // SAFETY: a whole struct.
        let got = unsafe { read("t", &own as *const DevCommRequirements as *const c_void) }.unwrap();
        assert!(matches!(got, Reqs::Oxccl(b) if b.len() == std::mem::size_of::<DevCommRequirements>()));
    }
}
