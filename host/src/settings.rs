//! Every setting a user can change, in one table (printed by `oxccl info`). NCCL's names are
//! kept where a setting has an NCCL equivalent. The functions here read the environment;
//! they are called when a communicator, backend or symmetric scratch is made (the
//! communicator's settings land in `crate::Config`), never per call: a `getenv` on the
//! launch path costs a scan of the environment and may race another thread's `setenv`.

/// One environment setting.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    pub name: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

/// All settings.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "NCCL_DEBUG",
        default: "WARN",
        help: "log level: VERSION, WARN, INFO, TRACE (mapped onto the tracing filter; RUST_LOG overrides)",
    },
    Setting {
        name: "NCCL_DEBUG_SUBSYS",
        default: "ALL",
        help: "comma-separated subsystems to log: INIT, COLL, P2P, ALLOC, WINDOW, CAPI (the C ABI's communicator calls); ALL for every one",
    },
    Setting {
        name: "OXCCL_BACKEND",
        default: "auto",
        help: "auto (GPU when a CUDA driver and a device are present, else CPU), gpu, or cpu",
    },
    Setting {
        name: "OXCCL_TIMEOUT_MS",
        default: "300000",
        help: "device wait timeout in milliseconds: a rank that does not reach a collective turns into an error naming it (0 = wait forever)",
    },
    Setting {
        name: "NCCL_COMM_BLOCKING",
        default: "1",
        help: "default of Config::blocking: 1 = Comm::start_init_*/start_split run on the calling thread, 0 = in the background (poll the InitHandle)",
    },
    Setting {
        name: "OXCCL_BOOTSTRAP_TIMEOUT_MS",
        default: "120000",
        help: "host waits in milliseconds: bootstrap rendezvous, all-gather, barrier, control messages (split, shrink, finalize's barrier); 0 = none",
    },
    Setting {
        name: "NCCL_SOCKET_IFNAME",
        default: "",
        help: "interfaces for bootstrap sockets: prefixes, `=name` for exact, `^` to exclude (default: first non-loopback)",
    },
    Setting {
        name: "NCCL_ALGO",
        default: "",
        help: "algorithms allowed (NCCL syntax: `direct,staged`, `^staged`, per collective `allreduce:direct;broadcast:staged`); oneshot/twoshot force direct's all-reduce variant; see `oxccl tuner`",
    },
    Setting {
        name: "NCCL_PROTO",
        default: "",
        help: "protocols allowed (NCCL syntax: `ll,simple`, `^ll`, per collective `allreduce:ll`); LL is the all-reduce's; see `oxccl tuner`",
    },
    Setting {
        name: "OXCCL_LL_MAX_BYTES",
        default: "65536",
        help: "LL capacity: bytes per rank one LL all-reduce carries (each inbox holds 2 x nranks x 2 x this; must be equal on every rank); larger forced-LL calls run in pieces",
    },
    Setting {
        name: "OXCCL_LL_THRESHOLD",
        default: "65536",
        help: "auto tuner: largest all-reduce (bytes per rank) that uses LL (capped by OXCCL_LL_MAX_BYTES)",
    },
    Setting {
        name: "OXCCL_ONESHOT_MAX_BYTES",
        default: "65536",
        help: "auto tuner: largest all-reduce (bytes per rank) that uses one-shot",
    },
    Setting {
        name: "OXCCL_SYM_LL_MAX_BYTES",
        default: "262144",
        help: "symmetric kernels: bytes per rank one LL or Lamport operation carries (sizes the scratch window made with the first registered window; equal on every rank)",
    },
    Setting {
        name: "OXCCL_SYM",
        default: "auto",
        help: "collectives on registered windows: auto (symmetric kernels chosen by size), off (never), or force one: simple, simple-oneshot, simple-twoshot, ll, lamport (all-reduce one-shot), ll-twoshot, lamport-twoshot (all-reduce two-shot); LL and Lamport past their capacity run Simple",
    },
    Setting {
        name: "OXCCL_SYM_CTAS",
        default: "0",
        help: "symmetric kernels: CTAs (blocks) per rank of every launch, equal on every rank (0 = the measured table that `oxccl tuner` prints; still capped by occupancy and OXCCL_MAX_BLOCKS / NCCL_MAX_CTAS)",
    },
    Setting {
        name: "OXCCL_SYM_PDL",
        default: "1",
        help: "symmetric kernels on the GPU: 1 = launch grids of at most half the blocks per rank that fit with programmatic dependent launch (the next op's blocks are scheduled while the previous op runs, and start once it completed), 0 = ordinary launches",
    },
    Setting {
        name: "OXCCL_SYM_GROUPED",
        default: "auto",
        help: "symmetric LL and Lamport kernels: the grouped kernels, which poll a line's peers four at a time (one-shot all-reduce and reduce-scatter with sum, all-gather): auto (from 7 ranks in one process, up to 32 KiB per rank, where they measured faster), on or 1 (wherever they apply), off or 0 (never)",
    },
    Setting {
        name: "OXCCL_STAGING_BYTES",
        default: "134217728",
        help: "communicators spanning processes: bytes of each of a rank's two staging buffers (must be equal on every rank)",
    },
    Setting {
        name: "OXCCL_MAX_BLOCKS",
        default: "0",
        help: "cap on blocks per rank per collective and send/recv group (0 = the backend's limit): the default of Config::max_blocks; wins over ncclConfig_t.maxCTAs",
    },
    Setting {
        name: "OXCCL_COPY_STORES",
        default: "auto",
        help: "GPU: cache policy of the payload stores of broadcast, all-gather, all-to-all, gather, scatter and all-gather-v: wb (write-back, st.global), cs (streaming, st.global.cs: evicted first) or auto (cs when the collective's data, count x size x ranks, is at least the device's L2 size, so nothing of it could stay in L2 for the next kernel anyway)",
    },
    Setting {
        name: "NCCL_MAX_CTAS",
        default: "0",
        help: "NCCL's name for OXCCL_MAX_BLOCKS (used when OXCCL_MAX_BLOCKS is not set)",
    },
    Setting {
        name: "NCCL_NVLS_ENABLE",
        default: "0",
        help: "accepted for NCCL compatibility: oxccl never uses NVLink SHARP / multicast objects (cuMulticastCreate is never called), whatever the value",
    },
    Setting {
        name: "NCCL_MULTI_RANK_GPU_ENABLE",
        default: "1",
        help: "accepted for NCCL compatibility: several ranks may share one GPU in oxccl (in one process or many, MPS recommended across processes), whatever the value",
    },
    Setting {
        name: "OXCCL_CPU_BLOCKS",
        default: "2",
        help: "CPU backend: host threads (blocks) per rank per collective",
    },
    Setting {
        name: "OXCCL_CPU_P2P_REFUSE",
        default: "",
        help: "CPU backend, fault injection: logical device pairs made unable to reach each other's memory, comma-separated `a>b` (a cannot access b) or `a<>b` (neither way); communicator init and `oxccl topo` then report them as a GPU machine without P2P between those devices",
    },
];

/// The value of a setting (environment, else default).
pub fn get(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => SETTINGS
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.default.to_string())
            .unwrap_or_default(),
    }
}

fn get_u64(name: &str) -> u64 {
    let v = get(name);
    v.trim().parse().unwrap_or_else(|_| {
        let d = SETTINGS
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.default)
            .unwrap_or("0");
        tracing::warn!(setting = name, value = %v, "not a number, using the default {d}");
        d.parse().unwrap_or(0)
    })
}

/// `OXCCL_BACKEND`, lowercased.
pub fn backend_choice() -> String {
    get("OXCCL_BACKEND").to_ascii_lowercase()
}

/// `OXCCL_TIMEOUT_MS` in nanoseconds.
pub fn timeout_ns() -> u64 {
    get_u64("OXCCL_TIMEOUT_MS").saturating_mul(1_000_000)
}

/// `NCCL_COMM_BLOCKING`: false only for `0`.
pub fn comm_blocking() -> bool {
    get_u64("NCCL_COMM_BLOCKING") != 0
}

/// `OXCCL_ONESHOT_MAX_BYTES`.
pub fn oneshot_max_bytes() -> u64 {
    get_u64("OXCCL_ONESHOT_MAX_BYTES")
}

/// `OXCCL_SYM_LL_MAX_BYTES` (the default of `Config::sym_ll_max_bytes`).
pub fn sym_ll_max_bytes() -> usize {
    get_u64("OXCCL_SYM_LL_MAX_BYTES") as usize
}

/// The symmetric LL and Lamport capacity a setting of `bytes` gives: rounded up to 8, at
/// least 8.
pub fn sym_ll_capacity(bytes: usize) -> u64 {
    (bytes.div_ceil(8).max(1) * 8) as u64
}

/// Cache policy of the copy collectives' payload stores (`OXCCL_COPY_STORES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyStores {
    /// Streaming stores when the collective's data is at least the L2 size.
    Auto,
    /// Plain write-back stores (`st.global`).
    WriteBack,
    /// Streaming stores (`st.global.cs`).
    Streaming,
}

/// `OXCCL_COPY_STORES`; another value than `auto`, `wb` or `cs` is warned about and `auto`
/// used.
pub fn copy_stores() -> CopyStores {
    let v = get("OXCCL_COPY_STORES").trim().to_ascii_lowercase();
    match v.as_str() {
        "auto" => CopyStores::Auto,
        "wb" => CopyStores::WriteBack,
        "cs" => CopyStores::Streaming,
        _ => {
            tracing::warn!(setting = "OXCCL_COPY_STORES", value = %v, "expected auto, wb or cs, using auto");
            CopyStores::Auto
        }
    }
}

/// `OXCCL_SYM` (lowercase).
pub fn sym_choice() -> String {
    get("OXCCL_SYM").trim().to_ascii_lowercase()
}

/// `OXCCL_SYM_CTAS` (0: the table).
pub fn sym_ctas() -> u32 {
    get_u64("OXCCL_SYM_CTAS").min(u32::MAX as u64) as u32
}

/// `OXCCL_SYM_PDL`: false only for `0`.
pub fn sym_pdl() -> bool {
    get_u64("OXCCL_SYM_PDL") != 0
}

/// `OXCCL_SYM_GROUPED` (as set; parsed by `Config::sym_policy`).
pub fn sym_grouped() -> String {
    get("OXCCL_SYM_GROUPED")
}

/// `OXCCL_STAGING_BYTES`, at least 4096.
pub fn staging_bytes() -> usize {
    (get_u64("OXCCL_STAGING_BYTES") as usize).max(4096)
}

/// `OXCCL_MAX_BLOCKS`, else `NCCL_MAX_CTAS` (0 = none).
pub fn max_blocks() -> u32 {
    if std::env::var("OXCCL_MAX_BLOCKS").is_ok_and(|v| !v.is_empty()) {
        get_u64("OXCCL_MAX_BLOCKS") as u32
    } else {
        get_u64("NCCL_MAX_CTAS") as u32
    }
}

/// `OXCCL_CPU_BLOCKS`, at least 1.
pub fn cpu_blocks() -> u32 {
    (get_u64("OXCCL_CPU_BLOCKS") as u32).clamp(1, oxccl_device::abi::MAX_BLOCKS as u32)
}

/// Largest LL capacity accepted (bytes per rank).
pub const LL_MAX_BYTES_LIMIT: usize = 16 << 20;

/// An LL capacity as used: rounded up to whole 8-byte lines, within `[8, LL_MAX_BYTES_LIMIT]`.
pub fn ll_capacity(bytes: usize) -> usize {
    bytes.clamp(8, LL_MAX_BYTES_LIMIT).div_ceil(8) * 8
}

/// `OXCCL_LL_MAX_BYTES`, as [`ll_capacity`] uses it.
pub fn ll_max_bytes() -> usize {
    ll_capacity(get_u64("OXCCL_LL_MAX_BYTES") as usize)
}

/// `OXCCL_LL_THRESHOLD`.
pub fn ll_threshold() -> u64 {
    get_u64("OXCCL_LL_THRESHOLD")
}

/// `NCCL_ALGO` as set (`None` when unset or empty).
pub fn algo_env() -> Option<String> {
    std::env::var("NCCL_ALGO").ok().filter(|v| !v.trim().is_empty())
}

/// `NCCL_PROTO` as set (`None` when unset or empty).
pub fn proto_env() -> Option<String> {
    std::env::var("NCCL_PROTO").ok().filter(|v| !v.trim().is_empty())
}

/// Render the table with current values.
pub fn table() -> String {
    let mut out = String::new();
    for s in SETTINGS {
        let cur = std::env::var(s.name).ok();
        out.push_str(&format!(
            "{:<26} = {:<10} (default {}{})\n    {}\n",
            s.name,
            cur.clone().unwrap_or_else(|| s.default.to_string()),
            s.default,
            if cur.is_some() { ", set" } else { "" },
            s.help
        ));
    }
    out
}
