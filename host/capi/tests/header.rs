//! Checks `include/nccl.h` and `symbols.txt` against NCCL 2.29.7's ABI.
//!
//! - the header compiles as C99/C11 and as C++11/C++17 with `-Wall -Wextra -Werror
//!   -pedantic`, without CUDA headers, with (stub) CUDA headers on the include path, and
//!   without its Device API section;
//! - a C program built from [`ABI`] prints struct sizes and offsets, enum values, macros and
//!   initializer fields, and each must equal NCCL 2.29.7's number (x86_64/aarch64 layout);
//!   the same program is built as C++ where a C++ compiler exists;
//! - `symbols.txt` names exactly the `nccl*` functions that the header declares, each with
//!   its `pnccl*` twin, and a C file taking the address of each one compiles.
//!
//! A test that needs a compiler says "skipped: ..." and passes when there is none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// NCCL 2.29.7's numbers: (name printed, C expression, value). Layouts are LP64.
/// `cfg`, `sim`, `dcr` and `props` are the initializers (see [`dump_program`]).
const ABI: &[(&str, &str, i64)] = &[
    // version
    ("NCCL_MAJOR", "NCCL_MAJOR", 2),
    ("NCCL_MINOR", "NCCL_MINOR", 29),
    ("NCCL_PATCH", "NCCL_PATCH", 7),
    ("strlen(NCCL_SUFFIX)", "sizeof(NCCL_SUFFIX) - 1", 0),
    ("NCCL_VERSION_CODE", "NCCL_VERSION_CODE", 22907),
    ("NCCL_VERSION(2,29,7)", "NCCL_VERSION(2, 29, 7)", 22907),
    ("NCCL_VERSION(2,8,4)", "NCCL_VERSION(2, 8, 4)", 2804),
    ("NCCL_VERSION(2,9,0)", "NCCL_VERSION(2, 9, 0)", 20900),
    ("NCCL_VERSION(3,0,1)", "NCCL_VERSION(3, 0, 1)", 30001),
    // constants
    ("NCCL_UNIQUE_ID_BYTES", "NCCL_UNIQUE_ID_BYTES", 128),
    ("NCCL_CONFIG_UNDEF_INT", "NCCL_CONFIG_UNDEF_INT", i32::MIN as i64),
    ("NCCL_CONFIG_UNDEF_PTR==NULL", "NCCL_CONFIG_UNDEF_PTR == NULL", 1),
    ("NCCL_COMM_NULL==NULL", "NCCL_COMM_NULL == NULL", 1),
    ("NCCL_SPLIT_NOCOLOR", "NCCL_SPLIT_NOCOLOR", -1),
    (
        "NCCL_UNDEF_FLOAT*1000",
        "(long long)(NCCL_UNDEF_FLOAT * 1000)",
        -1000,
    ),
    ("NCCL_API_MAGIC", "NCCL_API_MAGIC", 0xcafe_beef),
    ("NCCL_WIN_DEFAULT", "NCCL_WIN_DEFAULT", 0),
    ("NCCL_WIN_COLL_SYMMETRIC", "NCCL_WIN_COLL_SYMMETRIC", 1),
    ("NCCL_WIN_STRICT_ORDERING", "NCCL_WIN_STRICT_ORDERING", 2),
    ("NCCL_WIN_REQUIRED_ALIGNMENT", "NCCL_WIN_REQUIRED_ALIGNMENT", 4096),
    ("NCCL_CTA_POLICY_DEFAULT", "NCCL_CTA_POLICY_DEFAULT", 0),
    ("NCCL_CTA_POLICY_EFFICIENCY", "NCCL_CTA_POLICY_EFFICIENCY", 1),
    ("NCCL_CTA_POLICY_ZERO", "NCCL_CTA_POLICY_ZERO", 2),
    ("NCCL_SHRINK_DEFAULT", "NCCL_SHRINK_DEFAULT", 0),
    ("NCCL_SHRINK_ABORT", "NCCL_SHRINK_ABORT", 1),
    ("NCCL_REVOKE_DEFAULT", "NCCL_REVOKE_DEFAULT", 0),
    ("NCCL_SUSPEND_MEM", "NCCL_SUSPEND_MEM", 1),
    // ncclResult_t
    ("ncclSuccess", "ncclSuccess", 0),
    ("ncclUnhandledCudaError", "ncclUnhandledCudaError", 1),
    ("ncclSystemError", "ncclSystemError", 2),
    ("ncclInternalError", "ncclInternalError", 3),
    ("ncclInvalidArgument", "ncclInvalidArgument", 4),
    ("ncclInvalidUsage", "ncclInvalidUsage", 5),
    ("ncclRemoteError", "ncclRemoteError", 6),
    ("ncclInProgress", "ncclInProgress", 7),
    ("ncclNumResults", "ncclNumResults", 8),
    ("sizeof(ncclResult_t)", "sizeof(ncclResult_t)", 4),
    // ncclDataType_t
    ("ncclInt8", "ncclInt8", 0),
    ("ncclChar", "ncclChar", 0),
    ("ncclUint8", "ncclUint8", 1),
    ("ncclInt32", "ncclInt32", 2),
    ("ncclInt", "ncclInt", 2),
    ("ncclUint32", "ncclUint32", 3),
    ("ncclInt64", "ncclInt64", 4),
    ("ncclUint64", "ncclUint64", 5),
    ("ncclFloat16", "ncclFloat16", 6),
    ("ncclHalf", "ncclHalf", 6),
    ("ncclFloat32", "ncclFloat32", 7),
    ("ncclFloat", "ncclFloat", 7),
    ("ncclFloat64", "ncclFloat64", 8),
    ("ncclDouble", "ncclDouble", 8),
    ("ncclBfloat16", "ncclBfloat16", 9),
    ("ncclFloat8e4m3", "ncclFloat8e4m3", 10),
    ("ncclFloat8e5m2", "ncclFloat8e5m2", 11),
    ("ncclNumTypes", "ncclNumTypes", 12),
    ("sizeof(ncclDataType_t)", "sizeof(ncclDataType_t)", 4),
    // ncclRedOp_t
    ("ncclSum", "ncclSum", 0),
    ("ncclProd", "ncclProd", 1),
    ("ncclMax", "ncclMax", 2),
    ("ncclMin", "ncclMin", 3),
    ("ncclAvg", "ncclAvg", 4),
    ("ncclNumOps", "ncclNumOps", 5),
    ("ncclMaxRedOp", "ncclMaxRedOp", 0x7fff_ffff),
    ("ncclNumOps_dummy", "ncclNumOps_dummy", 5),
    ("sizeof(ncclRedOp_t)", "sizeof(ncclRedOp_t)", 4),
    // other enums
    ("ncclScalarDevice", "ncclScalarDevice", 0),
    ("ncclScalarHostImmediate", "ncclScalarHostImmediate", 1),
    ("ncclStatGpuMemSuspend", "ncclStatGpuMemSuspend", 0),
    ("ncclStatGpuMemSuspended", "ncclStatGpuMemSuspended", 1),
    ("ncclStatGpuMemPersist", "ncclStatGpuMemPersist", 2),
    ("ncclStatGpuMemTotal", "ncclStatGpuMemTotal", 3),
    // handles and small structs
    ("sizeof(ncclComm_t)", "sizeof(ncclComm_t)", 8),
    ("sizeof(ncclWindow_t)", "sizeof(ncclWindow_t)", 8),
    ("sizeof(ncclUniqueId)", "sizeof(ncclUniqueId)", 128),
    ("sizeof(ncclWaitSignalDesc_t)", "sizeof(ncclWaitSignalDesc_t)", 16),
    (
        "offsetof(ncclWaitSignalDesc_t,opCnt)",
        "offsetof(ncclWaitSignalDesc_t, opCnt)",
        0,
    ),
    (
        "offsetof(ncclWaitSignalDesc_t,peer)",
        "offsetof(ncclWaitSignalDesc_t, peer)",
        4,
    ),
    (
        "offsetof(ncclWaitSignalDesc_t,sigIdx)",
        "offsetof(ncclWaitSignalDesc_t, sigIdx)",
        8,
    ),
    (
        "offsetof(ncclWaitSignalDesc_t,ctx)",
        "offsetof(ncclWaitSignalDesc_t, ctx)",
        12,
    ),
    // ncclConfig_t (v22800 layout)
    ("sizeof(ncclConfig_t)", "sizeof(ncclConfig_t)", 88),
    ("offsetof(ncclConfig_t,size)", "offsetof(ncclConfig_t, size)", 0),
    ("offsetof(ncclConfig_t,magic)", "offsetof(ncclConfig_t, magic)", 8),
    (
        "offsetof(ncclConfig_t,version)",
        "offsetof(ncclConfig_t, version)",
        12,
    ),
    (
        "offsetof(ncclConfig_t,blocking)",
        "offsetof(ncclConfig_t, blocking)",
        16,
    ),
    (
        "offsetof(ncclConfig_t,cgaClusterSize)",
        "offsetof(ncclConfig_t, cgaClusterSize)",
        20,
    ),
    (
        "offsetof(ncclConfig_t,minCTAs)",
        "offsetof(ncclConfig_t, minCTAs)",
        24,
    ),
    (
        "offsetof(ncclConfig_t,maxCTAs)",
        "offsetof(ncclConfig_t, maxCTAs)",
        28,
    ),
    (
        "offsetof(ncclConfig_t,netName)",
        "offsetof(ncclConfig_t, netName)",
        32,
    ),
    (
        "offsetof(ncclConfig_t,splitShare)",
        "offsetof(ncclConfig_t, splitShare)",
        40,
    ),
    (
        "offsetof(ncclConfig_t,trafficClass)",
        "offsetof(ncclConfig_t, trafficClass)",
        44,
    ),
    (
        "offsetof(ncclConfig_t,commName)",
        "offsetof(ncclConfig_t, commName)",
        48,
    ),
    (
        "offsetof(ncclConfig_t,collnetEnable)",
        "offsetof(ncclConfig_t, collnetEnable)",
        56,
    ),
    (
        "offsetof(ncclConfig_t,CTAPolicy)",
        "offsetof(ncclConfig_t, CTAPolicy)",
        60,
    ),
    (
        "offsetof(ncclConfig_t,shrinkShare)",
        "offsetof(ncclConfig_t, shrinkShare)",
        64,
    ),
    (
        "offsetof(ncclConfig_t,nvlsCTAs)",
        "offsetof(ncclConfig_t, nvlsCTAs)",
        68,
    ),
    (
        "offsetof(ncclConfig_t,nChannelsPerNetPeer)",
        "offsetof(ncclConfig_t, nChannelsPerNetPeer)",
        72,
    ),
    (
        "offsetof(ncclConfig_t,nvlinkCentricSched)",
        "offsetof(ncclConfig_t, nvlinkCentricSched)",
        76,
    ),
    (
        "offsetof(ncclConfig_t,graphUsageMode)",
        "offsetof(ncclConfig_t, graphUsageMode)",
        80,
    ),
    (
        "offsetof(ncclConfig_t,numRmaCtx)",
        "offsetof(ncclConfig_t, numRmaCtx)",
        84,
    ),
    // NCCL_CONFIG_INITIALIZER
    ("cfg.size", "cfg.size", 88),
    ("cfg.magic", "cfg.magic", 0xcafe_beef),
    ("cfg.version", "cfg.version", 22907),
    ("cfg.blocking", "cfg.blocking", i32::MIN as i64),
    ("cfg.cgaClusterSize", "cfg.cgaClusterSize", i32::MIN as i64),
    ("cfg.minCTAs", "cfg.minCTAs", i32::MIN as i64),
    ("cfg.maxCTAs", "cfg.maxCTAs", i32::MIN as i64),
    ("cfg.netName==NULL", "cfg.netName == NULL", 1),
    ("cfg.splitShare", "cfg.splitShare", i32::MIN as i64),
    ("cfg.trafficClass", "cfg.trafficClass", i32::MIN as i64),
    ("cfg.commName==NULL", "cfg.commName == NULL", 1),
    ("cfg.collnetEnable", "cfg.collnetEnable", i32::MIN as i64),
    ("cfg.CTAPolicy", "cfg.CTAPolicy", i32::MIN as i64),
    ("cfg.shrinkShare", "cfg.shrinkShare", i32::MIN as i64),
    ("cfg.nvlsCTAs", "cfg.nvlsCTAs", i32::MIN as i64),
    (
        "cfg.nChannelsPerNetPeer",
        "cfg.nChannelsPerNetPeer",
        i32::MIN as i64,
    ),
    (
        "cfg.nvlinkCentricSched",
        "cfg.nvlinkCentricSched",
        i32::MIN as i64,
    ),
    ("cfg.graphUsageMode", "cfg.graphUsageMode", i32::MIN as i64),
    ("cfg.numRmaCtx", "cfg.numRmaCtx", i32::MIN as i64),
    // ncclSimInfo_t and NCCL_SIM_INFO_INITIALIZER
    ("sizeof(ncclSimInfo_t)", "sizeof(ncclSimInfo_t)", 24),
    (
        "offsetof(ncclSimInfo_t,magic)",
        "offsetof(ncclSimInfo_t, magic)",
        8,
    ),
    (
        "offsetof(ncclSimInfo_t,version)",
        "offsetof(ncclSimInfo_t, version)",
        12,
    ),
    (
        "offsetof(ncclSimInfo_t,estimatedTime)",
        "offsetof(ncclSimInfo_t, estimatedTime)",
        16,
    ),
    ("sim.size", "sim.size", 24),
    ("sim.magic", "sim.magic", 0x7468_5283),
    ("sim.version", "sim.version", 22907),
    (
        "sim.estimatedTime*1000",
        "(long long)(sim.estimatedTime * 1000)",
        -1000,
    ),
    // Device API, host side
    ("sizeof(ncclTeam_t)", "sizeof(ncclTeam_t)", 12),
    ("offsetof(ncclTeam_t,rank)", "offsetof(ncclTeam_t, rank)", 4),
    ("offsetof(ncclTeam_t,stride)", "offsetof(ncclTeam_t, stride)", 8),
    ("sizeof(ncclMultimemHandle_t)", "sizeof(ncclMultimemHandle_t)", 8),
    (
        "sizeof(ncclLsaBarrierHandle_t)",
        "sizeof(ncclLsaBarrierHandle_t)",
        8,
    ),
    (
        "sizeof(ncclGinBarrierHandle_t)",
        "sizeof(ncclGinBarrierHandle_t)",
        8,
    ),
    ("sizeof(ncclLLA2AHandle_t)", "sizeof(ncclLLA2AHandle_t)", 8),
    (
        "sizeof(ncclDevResourceHandle_t)",
        "sizeof(ncclDevResourceHandle_t)",
        4,
    ),
    ("NCCL_GIN_CONNECTION_NONE", "NCCL_GIN_CONNECTION_NONE", 0),
    ("NCCL_GIN_CONNECTION_FULL", "NCCL_GIN_CONNECTION_FULL", 1),
    ("NCCL_GIN_CONNECTION_RAIL", "NCCL_GIN_CONNECTION_RAIL", 2),
    ("NCCL_GIN_TYPE_NONE", "NCCL_GIN_TYPE_NONE", 0),
    ("NCCL_GIN_TYPE_PROXY", "NCCL_GIN_TYPE_PROXY", 2),
    ("NCCL_GIN_TYPE_GDAKI", "NCCL_GIN_TYPE_GDAKI", 3),
    (
        "sizeof(ncclDevResourceRequirements_t)",
        "sizeof(ncclDevResourceRequirements_t)",
        56,
    ),
    (
        "offsetof(ncclDevResourceRequirements_t,bufferSize)",
        "offsetof(ncclDevResourceRequirements_t, bufferSize)",
        8,
    ),
    (
        "offsetof(ncclDevResourceRequirements_t,bufferAlign)",
        "offsetof(ncclDevResourceRequirements_t, bufferAlign)",
        16,
    ),
    (
        "offsetof(ncclDevResourceRequirements_t,outBufferHandle)",
        "offsetof(ncclDevResourceRequirements_t, outBufferHandle)",
        24,
    ),
    (
        "offsetof(ncclDevResourceRequirements_t,ginSignalCount)",
        "offsetof(ncclDevResourceRequirements_t, ginSignalCount)",
        32,
    ),
    (
        "offsetof(ncclDevResourceRequirements_t,ginCounterCount)",
        "offsetof(ncclDevResourceRequirements_t, ginCounterCount)",
        36,
    ),
    (
        "offsetof(ncclDevResourceRequirements_t,outGinSignalStart)",
        "offsetof(ncclDevResourceRequirements_t, outGinSignalStart)",
        40,
    ),
    (
        "offsetof(ncclDevResourceRequirements_t,outGinCounterStart)",
        "offsetof(ncclDevResourceRequirements_t, outGinCounterStart)",
        48,
    ),
    (
        "sizeof(ncclTeamRequirements_t)",
        "sizeof(ncclTeamRequirements_t)",
        32,
    ),
    (
        "offsetof(ncclTeamRequirements_t,team)",
        "offsetof(ncclTeamRequirements_t, team)",
        8,
    ),
    (
        "offsetof(ncclTeamRequirements_t,multimem)",
        "offsetof(ncclTeamRequirements_t, multimem)",
        20,
    ),
    (
        "offsetof(ncclTeamRequirements_t,outMultimemHandle)",
        "offsetof(ncclTeamRequirements_t, outMultimemHandle)",
        24,
    ),
    (
        "sizeof(ncclDevCommRequirements_t)",
        "sizeof(ncclDevCommRequirements_t)",
        88,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,magic)",
        "offsetof(ncclDevCommRequirements_t, magic)",
        8,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,version)",
        "offsetof(ncclDevCommRequirements_t, version)",
        12,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,resourceRequirementsList)",
        "offsetof(ncclDevCommRequirements_t, resourceRequirementsList)",
        16,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,teamRequirementsList)",
        "offsetof(ncclDevCommRequirements_t, teamRequirementsList)",
        24,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,lsaMultimem)",
        "offsetof(ncclDevCommRequirements_t, lsaMultimem)",
        32,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,barrierCount)",
        "offsetof(ncclDevCommRequirements_t, barrierCount)",
        36,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,lsaBarrierCount)",
        "offsetof(ncclDevCommRequirements_t, lsaBarrierCount)",
        40,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,railGinBarrierCount)",
        "offsetof(ncclDevCommRequirements_t, railGinBarrierCount)",
        44,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,lsaLLA2ABlockCount)",
        "offsetof(ncclDevCommRequirements_t, lsaLLA2ABlockCount)",
        48,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,lsaLLA2ASlotCount)",
        "offsetof(ncclDevCommRequirements_t, lsaLLA2ASlotCount)",
        52,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,ginForceEnable)",
        "offsetof(ncclDevCommRequirements_t, ginForceEnable)",
        56,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,ginContextCount)",
        "offsetof(ncclDevCommRequirements_t, ginContextCount)",
        60,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,ginSignalCount)",
        "offsetof(ncclDevCommRequirements_t, ginSignalCount)",
        64,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,ginCounterCount)",
        "offsetof(ncclDevCommRequirements_t, ginCounterCount)",
        68,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,ginConnectionType)",
        "offsetof(ncclDevCommRequirements_t, ginConnectionType)",
        72,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,ginExclusiveContexts)",
        "offsetof(ncclDevCommRequirements_t, ginExclusiveContexts)",
        76,
    ),
    (
        "offsetof(ncclDevCommRequirements_t,ginQueueDepth)",
        "offsetof(ncclDevCommRequirements_t, ginQueueDepth)",
        80,
    ),
    ("dcr.size", "dcr.size", 88),
    ("dcr.magic", "dcr.magic", 0xcafe_beef),
    ("dcr.version", "dcr.version", 22907),
    (
        "dcr.resourceRequirementsList==NULL",
        "dcr.resourceRequirementsList == NULL",
        1,
    ),
    (
        "dcr.teamRequirementsList==NULL",
        "dcr.teamRequirementsList == NULL",
        1,
    ),
    ("dcr.lsaMultimem", "dcr.lsaMultimem", 0),
    ("dcr.barrierCount", "dcr.barrierCount", 0),
    ("dcr.lsaBarrierCount", "dcr.lsaBarrierCount", 0),
    ("dcr.railGinBarrierCount", "dcr.railGinBarrierCount", 0),
    ("dcr.lsaLLA2ABlockCount", "dcr.lsaLLA2ABlockCount", 0),
    ("dcr.lsaLLA2ASlotCount", "dcr.lsaLLA2ASlotCount", 0),
    ("dcr.ginForceEnable", "dcr.ginForceEnable", 0),
    ("dcr.ginContextCount", "dcr.ginContextCount", 4),
    ("dcr.ginSignalCount", "dcr.ginSignalCount", 0),
    ("dcr.ginCounterCount", "dcr.ginCounterCount", 0),
    ("dcr.ginConnectionType", "dcr.ginConnectionType", 0),
    ("dcr.ginExclusiveContexts", "dcr.ginExclusiveContexts", 0),
    ("dcr.ginQueueDepth", "dcr.ginQueueDepth", 0),
    ("sizeof(ncclCommProperties_t)", "sizeof(ncclCommProperties_t)", 56),
    (
        "offsetof(ncclCommProperties_t,magic)",
        "offsetof(ncclCommProperties_t, magic)",
        8,
    ),
    (
        "offsetof(ncclCommProperties_t,version)",
        "offsetof(ncclCommProperties_t, version)",
        12,
    ),
    (
        "offsetof(ncclCommProperties_t,rank)",
        "offsetof(ncclCommProperties_t, rank)",
        16,
    ),
    (
        "offsetof(ncclCommProperties_t,nRanks)",
        "offsetof(ncclCommProperties_t, nRanks)",
        20,
    ),
    (
        "offsetof(ncclCommProperties_t,cudaDev)",
        "offsetof(ncclCommProperties_t, cudaDev)",
        24,
    ),
    (
        "offsetof(ncclCommProperties_t,nvmlDev)",
        "offsetof(ncclCommProperties_t, nvmlDev)",
        28,
    ),
    (
        "offsetof(ncclCommProperties_t,deviceApiSupport)",
        "offsetof(ncclCommProperties_t, deviceApiSupport)",
        32,
    ),
    (
        "offsetof(ncclCommProperties_t,multimemSupport)",
        "offsetof(ncclCommProperties_t, multimemSupport)",
        33,
    ),
    (
        "offsetof(ncclCommProperties_t,ginType)",
        "offsetof(ncclCommProperties_t, ginType)",
        36,
    ),
    (
        "offsetof(ncclCommProperties_t,nLsaTeams)",
        "offsetof(ncclCommProperties_t, nLsaTeams)",
        40,
    ),
    (
        "offsetof(ncclCommProperties_t,hostRmaSupport)",
        "offsetof(ncclCommProperties_t, hostRmaSupport)",
        44,
    ),
    (
        "offsetof(ncclCommProperties_t,railedGinType)",
        "offsetof(ncclCommProperties_t, railedGinType)",
        48,
    ),
    ("props.size", "props.size", 56),
    ("props.magic", "props.magic", 0xcafe_beef),
    ("props.version", "props.version", 22907),
    ("props.rank", "props.rank", 0),
    ("props.nRanks", "props.nRanks", 0),
    ("props.deviceApiSupport", "props.deviceApiSupport", 0),
    ("props.ginType", "props.ginType", 0),
    ("props.railedGinType", "props.railedGinType", 0),
];

/// Functions declared by NCCL 2.29.7's nccl.h (50) plus the host-side Device API (18).
const EXPECTED_SYMBOL_COUNT: usize = 68;

fn capi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn include_dir() -> PathBuf {
    capi_dir().join("include")
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!(
            "oxccl-capi-header-{tag}-{}-{nanos}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        TempDir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
        }
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The first of `$var` and `candidates` that runs `--version`.
fn find_compiler(var: &str, candidates: &[&str]) -> Option<String> {
    let from_env = std::env::var(var).ok().filter(|s| !s.trim().is_empty());
    from_env
        .into_iter()
        .chain(candidates.iter().map(|s| s.to_string()))
        .find(|cc| {
            Command::new(cc)
                .arg("--version")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        })
}

fn c_compiler() -> Option<String> {
    let cc = find_compiler("CC", &["cc", "gcc", "clang"]);
    if cc.is_none() {
        println!("skipped: no C compiler ($CC, cc, gcc, clang) found");
    }
    cc
}

fn cxx_compiler() -> Option<String> {
    let cxx = find_compiler("CXX", &["c++", "g++", "clang++"]);
    if cxx.is_none() {
        println!("skipped: no C++ compiler ($CXX, c++, g++, clang++) found");
    }
    cxx
}

const WARNINGS: &[&str] = &["-Wall", "-Wextra", "-Werror", "-pedantic"];

/// Runs `compiler args...`; panics with its output when it fails.
fn run_compiler(compiler: &str, args: &[&str], what: &str) {
    let out = Command::new(compiler)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {compiler}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {compiler} {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Empty CUDA headers declaring only what nccl.h takes from them, to exercise the path
/// where `<cuda_runtime.h>` is found.
fn stub_cuda(dir: &TempDir) -> PathBuf {
    dir.write(
        "cuda/cuda_runtime.h",
        "#ifndef STUB_CUDA_RUNTIME_H\n#define STUB_CUDA_RUNTIME_H\n#include <stddef.h>\n\
         #define CUDART_VERSION 12080\ntypedef struct CUstream_st *cudaStream_t;\n#endif\n",
    );
    for name in ["cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"] {
        dir.write(&format!("cuda/{name}"), "/* stub */\n");
    }
    dir.0.join("cuda")
}

/// Syntax-checks nccl.h as `lang` under each standard, with and without stub CUDA headers
/// and with the Device API section left out.
fn syntax_check(compiler: &str, lang: &str, stds: &[&str], tag: &str) {
    let dir = TempDir::new(tag);
    let header = include_dir().join("nccl.h");
    let header = header.to_str().expect("utf-8 path");
    let cuda = stub_cuda(&dir);
    let cuda_inc = format!("-I{}", cuda.display());
    for std in stds {
        let std_flag = format!("-std={std}");
        let variants: [(&str, Vec<&str>); 3] = [
            ("without CUDA headers", vec![]),
            ("with CUDA headers", vec![cuda_inc.as_str()]),
            (
                "without the Device API section",
                vec!["-DOXCCL_NCCL_NO_DEVICE_API"],
            ),
        ];
        for (what, extra) in &variants {
            let mut args = vec![std_flag.as_str()];
            args.extend_from_slice(WARNINGS);
            args.extend(extra.iter().copied());
            args.extend_from_slice(&["-fsyntax-only", "-x", lang, header]);
            run_compiler(compiler, &args, &format!("nccl.h as {lang} {std} {what}"));
        }
    }
}

#[test]
fn header_compiles_as_c() {
    let Some(cc) = c_compiler() else { return };
    syntax_check(&cc, "c", &["c99", "c11"], "c");
}

#[test]
fn header_compiles_as_cxx() {
    let Some(cxx) = cxx_compiler() else { return };
    syntax_check(&cxx, "c++", &["c++11", "c++17"], "cxx");
}

/// A C (and C++) program printing `name value` for every entry of [`ABI`].
fn dump_program() -> String {
    let mut src = String::from(
        "#include <nccl.h>\n#include <stdio.h>\n#include <stddef.h>\n\n\
         static const ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;\n\
         static const ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;\n\
         static const ncclDevCommRequirements_t dcr = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;\n\
         static const ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;\n\n\
         static void show(const char *name, long long value) { printf(\"%s %lld\\n\", name, value); }\n\n\
         int main(void) {\n",
    );
    for (name, expr, _) in ABI {
        src.push_str(&format!("  show(\"{name}\", (long long)({expr}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    src
}

/// Builds the dump program with `compiler` as `lang`, runs it and compares with [`ABI`].
fn check_layout(compiler: &str, lang: &str, std: &str, tag: &str) {
    if !cfg!(target_pointer_width = "64") {
        println!("skipped: the expected layouts are those of 64-bit targets");
        return;
    }
    let dir = TempDir::new(tag);
    let src = dir.write("dump.c", &dump_program());
    let exe = dir.0.join("dump");
    let inc = format!("-I{}", include_dir().display());
    let std_flag = format!("-std={std}");
    let mut args = vec![std_flag.as_str()];
    args.extend_from_slice(WARNINGS);
    args.extend_from_slice(&[
        inc.as_str(),
        "-x",
        lang,
        src.to_str().unwrap(),
        "-o",
        exe.to_str().unwrap(),
    ]);
    run_compiler(compiler, &args, &format!("layout program as {lang}"));
    let out = Command::new(&exe)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
    assert!(
        out.status.success(),
        "layout program failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8 output");
    let got: BTreeMap<&str, i64> = stdout
        .lines()
        .map(|line| {
            let (name, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {line:?}"));
            (
                name,
                value
                    .parse()
                    .unwrap_or_else(|e| panic!("bad value in {line:?}: {e}")),
            )
        })
        .collect();
    let mut wrong = Vec::new();
    for (name, _, want) in ABI {
        match got.get(name) {
            Some(v) if v == want => {}
            Some(v) => wrong.push(format!("{name}: {v}, NCCL 2.29.7 has {want}")),
            None => wrong.push(format!("{name}: not printed")),
        }
    }
    assert!(
        wrong.is_empty(),
        "nccl.h ({lang}) differs from NCCL 2.29.7:\n{}",
        wrong.join("\n")
    );
    assert_eq!(got.len(), ABI.len(), "duplicate names in the ABI table");
}

#[test]
fn layout_and_constants_match_nccl_2_29_7_in_c() {
    let Some(cc) = c_compiler() else { return };
    check_layout(&cc, "c", "c99", "layout-c");
}

#[test]
fn layout_and_constants_match_nccl_2_29_7_in_cxx() {
    let Some(cxx) = cxx_compiler() else { return };
    check_layout(&cxx, "c++", "c++11", "layout-cxx");
}

/// The names listed in symbols.txt, in file order.
fn listed_symbols() -> Vec<String> {
    let path = capi_dir().join("symbols.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// nccl.h without comments and preprocessor lines (continuations included).
fn header_code(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            let end = after.find("*/").expect("unterminated comment in nccl.h");
            code.push(' ');
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else {
            let c = rest.chars().next().unwrap();
            code.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    let mut out = String::new();
    let mut continued = false;
    for line in code.lines() {
        let directive = continued || line.trim_start().starts_with('#');
        continued = directive && line.trim_end().ends_with('\\');
        if !directive {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Names of the functions nccl.h declares: identifiers starting with `nccl`/`pnccl` that
/// are followed by `(` in code (not in comments or macros).
fn declared_functions(code: &str) -> BTreeSet<String> {
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        if is_ident(bytes[i]) && (i == 0 || !is_ident(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            let ident = &code[start..i];
            let next = code[i..].trim_start().chars().next();
            if (ident.starts_with("nccl") || ident.starts_with("pnccl")) && next == Some('(') {
                names.insert(ident.to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn symbols_txt_matches_header_declarations() {
    let listed = listed_symbols();
    let mut sorted = listed.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        listed, sorted,
        "symbols.txt must be sorted (byte order) without duplicates"
    );
    assert_eq!(
        listed.len(),
        EXPECTED_SYMBOL_COUNT,
        "symbols.txt should list 68 names"
    );
    for name in &listed {
        assert!(
            name.starts_with("nccl"),
            "{name}: symbols.txt lists nccl* names only"
        );
    }

    let header = std::fs::read_to_string(include_dir().join("nccl.h")).expect("read nccl.h");
    let declared = declared_functions(&header_code(&header));
    let listed: BTreeSet<String> = listed.into_iter().collect();
    let declared_nccl: BTreeSet<String> = declared
        .iter()
        .filter(|n| n.starts_with("nccl"))
        .cloned()
        .collect();
    let declared_pnccl: BTreeSet<String> = declared
        .iter()
        .filter_map(|n| n.strip_prefix('p'))
        .map(String::from)
        .collect();
    let missing: Vec<_> = listed.difference(&declared_nccl).collect();
    assert!(
        missing.is_empty(),
        "listed in symbols.txt but not declared in nccl.h: {missing:?}"
    );
    let unlisted: Vec<_> = declared_nccl.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "declared in nccl.h but not listed in symbols.txt: {unlisted:?}"
    );
    let no_twin: Vec<_> = listed.difference(&declared_pnccl).collect();
    assert!(
        no_twin.is_empty(),
        "no pnccl twin declared in nccl.h: {no_twin:?}"
    );
    let lone_twin: Vec<_> = declared_pnccl.difference(&listed).collect();
    assert!(
        lone_twin.is_empty(),
        "pnccl twins of unlisted names in nccl.h: {lone_twin:?}"
    );

    // The compiler's view: every listed name and its twin is a function of nccl.h.
    let Some(cc) = c_compiler() else { return };
    let dir = TempDir::new("symbols");
    let mut src = String::from(
        "#include <nccl.h>\n\ntypedef void (*any_fn)(void);\n\nany_fn const oxccl_exports[] = {\n",
    );
    for name in &listed {
        src.push_str(&format!("  (any_fn)&{name},\n  (any_fn)&p{name},\n"));
    }
    src.push_str("};\n");
    let file = dir.write("symbols.c", &src);
    let inc = format!("-I{}", include_dir().display());
    let mut args = vec!["-std=c99"];
    args.extend_from_slice(WARNINGS);
    args.extend_from_slice(&[
        "-Wno-deprecated-declarations",
        inc.as_str(),
        "-fsyntax-only",
        file.to_str().unwrap(),
    ]);
    run_compiler(&cc, &args, "taking the address of every listed function");
}
