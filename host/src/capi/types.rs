//! The C types of nccl.h that cross the ABI: result codes, the unique id, `ncclConfig_t`
//! with NCCL's size/magic/version parsing rule, `ncclSimInfo_t`, data types and operators.
//! Layouts are NCCL 2.29's (`host/capi/include/nccl.h`), pinned by the asserts below and by
//! the header test of `oxccl-capi`.

use std::ffi::{c_char, c_int, c_uint, CStr};

use oxccl_device::abi::{DataType, RedOp};

use super::error::CError;

/// `ncclResult_t`.
pub type NcclResult = c_int;
pub const SUCCESS: NcclResult = 0;
pub const UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const SYSTEM_ERROR: NcclResult = 2;
pub const INTERNAL_ERROR: NcclResult = 3;
pub const INVALID_ARGUMENT: NcclResult = 4;
pub const INVALID_USAGE: NcclResult = 5;
pub const REMOTE_ERROR: NcclResult = 6;
pub const IN_PROGRESS: NcclResult = 7;
/// `ncclNumResults` of 2.29.
pub const NUM_RESULTS: NcclResult = 8;

/// The version oxccl claims: NCCL 2.29.7 (`NCCL_VERSION(2, 29, 7)`).
pub const VERSION_CODE: c_int = 22907;
/// `NCCL_API_MAGIC`.
pub const API_MAGIC: c_uint = 0xcafe_beef;
/// `ncclSimInfo_t`'s magic.
pub const SIM_INFO_MAGIC: c_uint = 0x7468_5283;
/// `NCCL_CONFIG_UNDEF_INT`.
pub const UNDEF_INT: c_int = c_int::MIN;
/// `NCCL_SPLIT_NOCOLOR`.
pub const SPLIT_NOCOLOR: c_int = -1;
/// `NCCL_SHRINK_DEFAULT` / `NCCL_SHRINK_ABORT`.
pub const SHRINK_DEFAULT: c_int = 0;
pub const SHRINK_ABORT: c_int = 1;
/// `ncclNumOps`: the first value of operators made by `ncclRedOpCreatePreMulSum`.
pub const NUM_OPS: c_int = 5;
/// `ncclScalarDevice` / `ncclScalarHostImmediate`.
pub const SCALAR_DEVICE: c_int = 0;
pub const SCALAR_HOST_IMMEDIATE: c_int = 1;

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [c_char; 128],
}

/// `ncclConfig_t` as of 2.28/2.29 (`ncclConfig_v22800`, 88 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclConfig {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    pub split_share: c_int,
    pub traffic_class: c_int,
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
    pub graph_usage_mode: c_int,
    pub num_rma_ctx: c_int,
}

const _: () = {
    assert!(std::mem::size_of::<NcclConfig>() == 88);
    assert!(std::mem::offset_of!(NcclConfig, blocking) == 16);
    assert!(std::mem::offset_of!(NcclConfig, net_name) == 32);
    assert!(std::mem::offset_of!(NcclConfig, split_share) == 40);
    assert!(std::mem::offset_of!(NcclConfig, comm_name) == 48);
    assert!(std::mem::offset_of!(NcclConfig, collnet_enable) == 56);
    assert!(std::mem::offset_of!(NcclConfig, num_rma_ctx) == 84);
    assert!(std::mem::size_of::<NcclUniqueId>() == 128);
    assert!(std::mem::size_of::<NcclSimInfo>() == 24);
};

/// `ncclSimInfo_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclSimInfo {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimated_time: f32,
}

/// The fields of a caller's `ncclConfig_t` oxccl acts on, after parsing (`None`: unset).
/// The others are validated and have no effect (see README's C ABI section).
#[derive(Clone, Debug, Default)]
pub struct ParsedConfig {
    /// `blocking` (unset: the environment's default, `NCCL_COMM_BLOCKING`).
    pub blocking: Option<bool>,
    /// `commName`, for logs and error messages.
    pub name: Option<String>,
    /// `minCTAs` / `maxCTAs`: floor and cap of the blocks per rank per collective.
    pub min_ctas: Option<u32>,
    pub max_ctas: Option<u32>,
    /// `splitShare` / `shrinkShare`: accepted; oxccl never shares resources between a
    /// parent and a child communicator.
    pub split_share: Option<bool>,
    pub shrink_share: Option<bool>,
}

/// The NCCL version (as `NCCL_VERSION(X,Y,Z)` codes) from which each field is read: a
/// caller built against an older header may have the field's bytes (padding, say) but not
/// its meaning. `splitShare` and `commName` are read whenever the caller's size covers them,
/// as NCCL does.
fn field_since(offset: usize) -> u32 {
    match offset {
        16 => 21400,
        20..=39 => 21700,
        40 | 48 => 0,
        44 => 22500,
        56..=71 => 22700,
        72..=79 => 22800,
        _ => 22900,
    }
}

/// NCCL's rule for a caller's config: read `size` and `magic` first, copy at most our own
/// size (a newer caller's extra fields are ignored, an older caller's missing ones stay
/// unset), clear fields newer than the caller's `version`, then validate what is set.
///
/// # Safety
/// `cfg` is null or points to at least `size_of::<usize>() + 8` readable bytes, and to `size`
/// readable bytes as its first field says.
pub unsafe fn parse_config(op: &'static str, cfg: *const NcclConfig) -> Result<ParsedConfig, CError> {
    if cfg.is_null() {
        return Ok(ParsedConfig::default());
    }
    let base = cfg as *const u8;
    // SAFETY: the header (size, magic, version) is present in every version of the struct.
    let (size, magic, version) = unsafe {
        (
            std::ptr::read_unaligned(base as *const usize),
            std::ptr::read_unaligned(base.add(8) as *const c_uint),
            std::ptr::read_unaligned(base.add(12) as *const c_uint),
        )
    };
    if magic != API_MAGIC {
        return Err(CError::arg(
            op,
            format!(
                "the ncclConfig_t's magic is {magic:#x}, not {API_MAGIC:#x}: initialize it with NCCL_CONFIG_INITIALIZER"
            ),
        ));
    }
    if size < 16 {
        return Err(CError::arg(
            op,
            format!("the ncclConfig_t's size field is {size}, below its own header"),
        ));
    }
    let mut own = NcclConfig {
        size: std::mem::size_of::<NcclConfig>(),
        magic,
        version,
        blocking: UNDEF_INT,
        cga_cluster_size: UNDEF_INT,
        min_ctas: UNDEF_INT,
        max_ctas: UNDEF_INT,
        net_name: std::ptr::null(),
        split_share: UNDEF_INT,
        traffic_class: UNDEF_INT,
        comm_name: std::ptr::null(),
        collnet_enable: UNDEF_INT,
        cta_policy: UNDEF_INT,
        shrink_share: UNDEF_INT,
        nvls_ctas: UNDEF_INT,
        n_channels_per_net_peer: UNDEF_INT,
        nvlink_centric_sched: UNDEF_INT,
        graph_usage_mode: UNDEF_INT,
        num_rma_ctx: UNDEF_INT,
    };
    let n = size.min(std::mem::size_of::<NcclConfig>());
    let dst = &mut own as *mut NcclConfig as *mut u8;
    // Copy field by field (4-byte and 8-byte fields), keeping our defaults for fields the
    // caller's struct lacks or that are newer than its version.
    let fields: [(usize, usize); 19] = [
        (0, 8),
        (8, 4),
        (12, 4),
        (16, 4),
        (20, 4),
        (24, 4),
        (28, 4),
        (32, 8),
        (40, 4),
        (44, 4),
        (48, 8),
        (56, 4),
        (60, 4),
        (64, 4),
        (68, 4),
        (72, 4),
        (76, 4),
        (80, 4),
        (84, 4),
    ];
    for (off, len) in fields.into_iter().skip(3) {
        if off + len <= n && field_since(off) <= version {
            // SAFETY: `off + len <= size` readable bytes of the caller; our struct has them.
            unsafe { std::ptr::copy_nonoverlapping(base.add(off), dst.add(off), len) };
        }
    }
    let set = |v: c_int| v != UNDEF_INT;
    let bad = |field: &str, v: c_int, want: &str| {
        CError::arg(op, format!("ncclConfig_t.{field} = {v} is invalid ({want})"))
    };
    if set(own.blocking) && !(0..=1).contains(&own.blocking) {
        return Err(bad("blocking", own.blocking, "0 or 1"));
    }
    if set(own.cga_cluster_size) && !(0..=8).contains(&own.cga_cluster_size) {
        return Err(bad("cgaClusterSize", own.cga_cluster_size, "0 to 8"));
    }
    if set(own.min_ctas) && own.min_ctas < 1 {
        return Err(bad("minCTAs", own.min_ctas, "at least 1"));
    }
    if set(own.max_ctas) && own.max_ctas < 1 {
        return Err(bad("maxCTAs", own.max_ctas, "at least 1"));
    }
    if set(own.min_ctas) && set(own.max_ctas) && own.min_ctas > own.max_ctas {
        return Err(bad("minCTAs", own.min_ctas, "at most maxCTAs"));
    }
    if set(own.split_share) && !(0..=1).contains(&own.split_share) {
        return Err(bad("splitShare", own.split_share, "0 or 1"));
    }
    if set(own.collnet_enable) && !(0..=1).contains(&own.collnet_enable) {
        return Err(bad("collnetEnable", own.collnet_enable, "0 or 1"));
    }
    if set(own.cta_policy) && !(0..=3).contains(&own.cta_policy) {
        return Err(bad(
            "CTAPolicy",
            own.cta_policy,
            "a combination of NCCL_CTA_POLICY_* bits",
        ));
    }
    if set(own.shrink_share) && !(0..=1).contains(&own.shrink_share) {
        return Err(bad("shrinkShare", own.shrink_share, "0 or 1"));
    }
    if set(own.graph_usage_mode) && !(0..=2).contains(&own.graph_usage_mode) {
        return Err(bad("graphUsageMode", own.graph_usage_mode, "0, 1 or 2"));
    }
    if set(own.num_rma_ctx) && own.num_rma_ctx < 1 {
        return Err(bad("numRmaCtx", own.num_rma_ctx, "at least 1"));
    }
    let name = if own.comm_name.is_null() {
        None
    } else {
        // SAFETY: a NUL-terminated string of the caller (nccl.h's contract).
        Some(
            unsafe { CStr::from_ptr(own.comm_name) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    Ok(ParsedConfig {
        blocking: set(own.blocking).then_some(own.blocking == 1),
        name,
        min_ctas: set(own.min_ctas).then_some(own.min_ctas as u32),
        max_ctas: set(own.max_ctas).then_some(own.max_ctas as u32),
        split_share: set(own.split_share).then_some(own.split_share == 1),
        shrink_share: set(own.shrink_share).then_some(own.shrink_share == 1),
    })
}

/// `ncclDataType_t` → oxccl's type.
pub fn dtype(op: &'static str, v: c_int) -> Result<DataType, CError> {
    DataType::ALL
        .into_iter()
        .find(|d| *d as c_int == v)
        .ok_or_else(|| CError::arg(op, format!("invalid data type {v} (ncclDataType_t is 0 to 11)")))
}

/// A built-in `ncclRedOp_t` (0..4) → oxccl's operator kind; `None` for values from
/// `ncclRedOpCreatePreMulSum`.
pub fn builtin_op(v: c_int) -> Option<RedOp> {
    [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg]
        .into_iter()
        .find(|r| *r as c_int == v)
}

/// `ncclGetErrorString`'s strings (static, NUL-terminated).
pub fn error_string(code: NcclResult) -> &'static CStr {
    match code {
        SUCCESS => c"no error",
        UNHANDLED_CUDA_ERROR => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        INTERNAL_ERROR => c"internal error - please report this issue to the oxccl developers",
        INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        REMOTE_ERROR => c"remote process exited or there was a network error",
        IN_PROGRESS => c"NCCL operation in progress",
        _ => c"unknown result code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn initializer() -> NcclConfig {
        NcclConfig {
            size: std::mem::size_of::<NcclConfig>(),
            magic: API_MAGIC,
            version: VERSION_CODE as u32,
            blocking: UNDEF_INT,
            cga_cluster_size: UNDEF_INT,
            min_ctas: UNDEF_INT,
            max_ctas: UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: UNDEF_INT,
            traffic_class: UNDEF_INT,
            comm_name: std::ptr::null(),
            collnet_enable: UNDEF_INT,
            cta_policy: UNDEF_INT,
            shrink_share: UNDEF_INT,
            nvls_ctas: UNDEF_INT,
            n_channels_per_net_peer: UNDEF_INT,
            nvlink_centric_sched: UNDEF_INT,
            graph_usage_mode: UNDEF_INT,
            num_rma_ctx: UNDEF_INT,
        }
    }

    #[test]
    fn current_config_parses_and_validates() {
        let mut c = initializer();
        c.blocking = 0;
        c.comm_name = c"pg0".as_ptr();
        // SAFETY: a whole struct.
        let p = unsafe { parse_config("t", &c) }.unwrap();
        assert_eq!(p.blocking, Some(false));
        assert_eq!(p.name.as_deref(), Some("pg0"));
        assert_eq!((p.min_ctas, p.max_ctas, p.split_share), (None, None, None));
        c.min_ctas = 2;
        c.max_ctas = 6;
        c.split_share = 1;
        // SAFETY: as above.
        let p = unsafe { parse_config("t", &c) }.unwrap();
        assert_eq!(
            (p.min_ctas, p.max_ctas, p.split_share),
            (Some(2), Some(6), Some(true))
        );
        c.max_ctas = 0;
        // SAFETY: as above.
        let e = unsafe { parse_config("t", &c) }.unwrap_err();
        assert_eq!(e.code, INVALID_ARGUMENT);
        assert!(e.message.contains("maxCTAs"), "{}", e.message);
    }

    #[test]
    fn older_caller_reads_only_its_fields() {
        // A 2.14 caller: size, magic, version, blocking (20 bytes), then whatever follows
        // in its memory (here garbage that must not be read).
        let mut raw = [0xffu8; 88];
        raw[0..8].copy_from_slice(&20usize.to_le_bytes());
        raw[8..12].copy_from_slice(&API_MAGIC.to_le_bytes());
        raw[12..16].copy_from_slice(&21400u32.to_le_bytes());
        raw[16..20].copy_from_slice(&0i32.to_le_bytes());
        // SAFETY: 88 readable bytes (more than the caller's size says).
        let p = unsafe { parse_config("t", raw.as_ptr() as *const NcclConfig) }.unwrap();
        assert_eq!(p.blocking, Some(false));
        assert_eq!(p.name, None);
        // A 2.17-sized struct that claims version 2.14: the 2.17 fields are not read even
        // though they are inside its size (here invalid values).
        raw[0..8].copy_from_slice(&40usize.to_le_bytes());
        // SAFETY: as above.
        assert!(unsafe { parse_config("t", raw.as_ptr() as *const NcclConfig) }.is_ok());
    }

    #[test]
    fn newer_caller_extra_fields_ignored_and_bad_magic_refused() {
        let mut raw = [0u8; 128];
        let c = initializer();
        // SAFETY: plain bytes of a repr(C) struct.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                &c as *const NcclConfig as *const u8,
                std::mem::size_of::<NcclConfig>(),
            )
        };
        raw[..88].copy_from_slice(bytes);
        raw[0..8].copy_from_slice(&128usize.to_le_bytes());
        raw[12..16].copy_from_slice(&23100u32.to_le_bytes());
        raw[88..].fill(0x5a);
        // SAFETY: 128 readable bytes.
        assert!(unsafe { parse_config("t", raw.as_ptr() as *const NcclConfig) }.is_ok());
        raw[8] ^= 1;
        // SAFETY: as above.
        let e = unsafe { parse_config("t", raw.as_ptr() as *const NcclConfig) }.unwrap_err();
        assert!(e.message.contains("magic"), "{}", e.message);
    }

    #[test]
    fn types_and_ops_map_to_nccl_values() {
        assert_eq!(dtype("t", 9).unwrap(), DataType::Bf16);
        assert_eq!(dtype("t", 12).unwrap_err().code, INVALID_ARGUMENT);
        assert_eq!(builtin_op(4), Some(RedOp::Avg));
        assert_eq!(builtin_op(5), None);
        let mut seen = std::collections::HashSet::new();
        for c in 0..NUM_RESULTS {
            assert!(seen.insert(error_string(c).to_bytes()));
        }
    }
}
