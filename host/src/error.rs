//! Errors: one variant per failing operation, with the context a user needs (rank, peer,
//! device, what was searched). Messages are lowercase without a trailing period.

/// Result alias.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can fail in oxccl.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library could not be loaded.
    #[error(
        "cuda driver not available: could not load any of {searched:?}; install the NVIDIA driver \
         or add the directory holding libcuda.so.1 to LD_LIBRARY_PATH (the CPU backend works without it)"
    )]
    CudaDriverMissing { searched: Vec<String> },

    /// A CUDA driver call failed.
    #[error("cuda {op} failed on device {device}: {message}")]
    Cuda {
        op: &'static str,
        device: i32,
        message: String,
    },

    /// No GPU is visible.
    #[error("no cuda device found (cuDeviceGetCount returned 0)")]
    NoCudaDevice,

    /// A device index out of range.
    #[error("device {device} does not exist ({count} available on backend {backend})")]
    NoSuchDevice {
        device: usize,
        count: usize,
        backend: &'static str,
    },

    /// The embedded PTX could not be loaded by the driver.
    #[error("loading the oxccl PTX module on device {device} failed: {message}")]
    ModuleLoad { device: i32, message: String },

    /// A setting (environment variable or its `Config` field) has a value oxccl cannot use.
    #[error("invalid {setting}={value:?}: {what}")]
    InvalidSetting {
        setting: &'static str,
        value: String,
        what: String,
    },

    /// An argument was invalid.
    #[error("{op} on rank {rank}: invalid argument: {what}")]
    InvalidArgument {
        op: &'static str,
        rank: u32,
        what: String,
    },

    /// A device wait passed its timeout.
    #[error("{op} on rank {rank}: timed out waiting for rank {peer} (block {block}, epoch {epoch}); the peer did not reach the same call")]
    Timeout {
        op: &'static str,
        rank: u32,
        peer: u32,
        block: u32,
        epoch: u64,
    },

    /// A symmetric kernel's wait passed its timeout: `what` is the call this rank made
    /// (`op` with its count, type, operator and protocol), `seq` its number among the
    /// communicator's symmetric operations.
    #[error("{op} on rank {rank}: timed out waiting for rank {peer} in {what} (block {block}, symmetric operation {seq}); the peer did not reach the same call")]
    SymTimeout {
        op: &'static str,
        rank: u32,
        peer: u32,
        block: u32,
        seq: u64,
        what: String,
    },

    /// The communicator was aborted.
    #[error("{op} on rank {rank}: communicator aborted")]
    Aborted { op: &'static str, rank: u32 },

    /// Ranks called different operations in the same slot: another collective, count, data
    /// type, operator, root or algorithm override. `ours` and `theirs` say what each called,
    /// as far as the fingerprints keep it (`crate::coll::describe_call`).
    #[error("{op} on rank {rank}: rank {peer} called {theirs} while rank {rank} called {ours} (mismatched collective)")]
    Mismatch {
        op: &'static str,
        rank: u32,
        peer: u32,
        ours: String,
        theirs: String,
        /// The peer's fingerprint as its kernel published it.
        theirs_fingerprint: u64,
    },

    /// Ranks called different symmetric collectives (window buffers) in the same op: another
    /// collective, count, data type, operator or kernel. Reported by each rank that saw a
    /// peer's header line; neither side's output is valid.
    #[error("{op} on rank {rank}: rank {peer} called {theirs} while this rank called {ours} (mismatched symmetric collective)")]
    SymMismatch {
        op: &'static str,
        rank: u32,
        peer: u32,
        ours: String,
        theirs: String,
    },

    /// A send and the receive it was matched with (the `k`-th send from one rank to another
    /// and the `k`-th receive of the other from the first) were posted with different counts
    /// or data types. Reported on both ranks; neither moved any data.
    #[error("{op} on rank {rank} (peer {peer}): mismatched send/recv: rank {rank} posted {ours}, rank {peer} posted {theirs}")]
    P2pMismatch {
        op: &'static str,
        rank: u32,
        peer: u32,
        ours: String,
        theirs: String,
    },

    /// A send or receive waited for its peer past the timeout.
    #[error("{op} on rank {rank} (peer {peer}): timed out waiting for rank {peer}: {what}")]
    P2pTimeout {
        op: &'static str,
        rank: u32,
        peer: u32,
        what: String,
    },

    /// Wrong use of the group calls (`group_end` without `group_start`, mixing streams of one
    /// communicator in a group).
    #[error("{op}: {what}")]
    InvalidUsage { op: &'static str, what: String },

    /// A kernel on the CPU backend panicked (a device trap).
    #[error("{op} on rank {rank}: kernel failed on the cpu backend: {message}")]
    CpuKernelPanic {
        op: &'static str,
        rank: u32,
        message: String,
    },

    /// Memory allocation failed.
    #[error("allocating {bytes} bytes on device {device} ({backend}) failed: {message}")]
    Alloc {
        bytes: usize,
        device: usize,
        backend: &'static str,
        message: String,
    },

    /// A host copy larger than the device buffer.
    #[error("{op} of {len} bytes does not fit a {capacity}-byte buffer on device {device}")]
    BufferTooSmall {
        op: &'static str,
        len: usize,
        capacity: usize,
        device: usize,
    },

    /// A verification against the host reference failed.
    #[error("verification failed: {0}")]
    Verify(String),

    /// The bootstrap (rendezvous, exchange of peer information) failed.
    #[error("communicator init on rank {rank}: bootstrap: {source}")]
    Bootstrap {
        rank: u32,
        #[source]
        source: crate::bootstrap::BootstrapError,
    },

    /// Ranks that cannot reach each other's memory (reported, never guessed).
    #[error("communicator init on rank {rank}: {what}")]
    Unreachable { rank: u32, what: String },

    /// A non-blocking operation (a pending init or split, see `InitHandle`) has not finished
    /// yet (NCCL's `ncclInProgress`).
    #[error("{op} on rank {rank}: in progress")]
    InProgress { op: &'static str, rank: u32 },

    /// A call on a communicator after `Comm::finalize`.
    #[error("{op} on rank {rank}: the communicator was finalized (only destroy is valid after finalize)")]
    Finalized { op: &'static str, rank: u32 },

    /// A host-side exchange among the ranks of a communicator (split, finalize) passed its
    /// timeout (`OXCCL_BOOTSTRAP_TIMEOUT_MS`) before the ranks in `missing` joined it.
    #[error("{op} on rank {rank}: timed out after {timeout:?} waiting for ranks {missing:?}; they did not call {op}")]
    ControlTimeout {
        op: &'static str,
        rank: u32,
        missing: Vec<u32>,
        timeout: std::time::Duration,
    },

    /// A host-side exchange among the ranks of a communicator failed in the bootstrap layer.
    #[error("{op} on rank {rank}: {source}")]
    Control {
        op: &'static str,
        rank: u32,
        #[source]
        source: crate::bootstrap::BootstrapError,
    },

    /// What a pending init's `async_error` reports once it failed (the error itself is
    /// returned by `InitHandle::wait` and `InitHandle::take`).
    #[error("{op} on rank {rank} failed: {message}")]
    InitFailed {
        op: &'static str,
        rank: u32,
        message: String,
    },

    /// Communicator creation failed.
    /// Setting up or using a transport between processes failed.
    #[error("{op} on rank {rank} (peer {}): {what}", peer_name(*.peer))]
    Transport {
        op: &'static str,
        rank: u32,
        peer: u32,
        what: String,
    },

    #[error("communicator init: {0}")]
    Init(String),

    /// An address range handed to a window operation is not (wholly) memory from
    /// `Comm::mem_alloc` (plain device memory, a `Vec`, a freed block, a gap between blocks).
    #[error("{op} on rank {rank}: address {addr:#x} ({bytes} bytes) is not window memory: {what}")]
    NotWindowMemory {
        op: &'static str,
        rank: u32,
        addr: u64,
        bytes: usize,
        what: String,
    },

    /// A pointer asked of a window lies outside what the peer registered.
    #[error("{op} on rank {rank} (peer {peer}): offset {offset} is outside the peer's {size}-byte window")]
    WindowBounds {
        op: &'static str,
        rank: u32,
        peer: u32,
        offset: u64,
        size: u64,
    },

    /// The ranks of a window registration (or of a device communicator's creation) disagree,
    /// or a peer's registration cannot be mapped here.
    #[error("{op} on rank {rank} (peer {}): {what}", peer_name(*.peer))]
    Window {
        op: &'static str,
        rank: u32,
        peer: u32,
        what: String,
    },

    /// A window mapping call of the CPU backend failed (the GPU's report [`Error::Cuda`]).
    #[error("{op} on cpu device {device}: {what}")]
    WindowMap {
        op: &'static str,
        device: usize,
        what: String,
    },

    /// A caller's versioned struct (device communicator requirements) cannot be read: wrong
    /// magic, a size its version does not allow, or a newer version than this library's.
    #[error("{op} on rank {rank}: {what}")]
    LayoutVersion {
        op: &'static str,
        rank: u32,
        what: String,
    },

    /// A feature this build does not have (GIN resources without a GIN transport).
    #[error("{op} on rank {rank}: not supported on this build: {what}")]
    Unsupported {
        op: &'static str,
        rank: u32,
        what: String,
    },
}

/// A peer rank in a message (`u32::MAX`: none).
fn peer_name(p: u32) -> String {
    if p == u32::MAX {
        "none".into()
    } else {
        p.to_string()
    }
}
