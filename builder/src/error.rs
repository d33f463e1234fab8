//! The builder's error type: one variant per operation that can fail.

use std::path::PathBuf;

/// Everything that can make a build or a check fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `rustc` could not be run or did not answer `--print sysroot` / `-vV`.
    #[error("cannot query the rust toolchain with `{command}`: {detail}")]
    RustcQuery { command: String, detail: String },

    /// The `rust-src` component (needed by `-Zbuild-std=core`) is not installed.
    #[error(
        "rust-src component missing (no {}): run `rustup component add rust-src`",
        path.display()
    )]
    RustSrcMissing { path: PathBuf },

    /// rustc links nvptx64 code with `llvm-bitcode-linker`, which is not installed.
    #[error(
        "llvm-bitcode-linker component missing (searched {}): run `rustup component add llvm-bitcode-linker llvm-tools`",
        searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    BitcodeLinkerMissing { searched: Vec<PathBuf> },

    /// `llvm-bitcode-linker` calls `llvm-link`, `opt` and `llc` from the llvm-tools component.
    #[error(
        "llvm-tools component missing (no {tool} in {}): run `rustup component add llvm-tools`",
        dir.display()
    )]
    LlvmToolsMissing { tool: &'static str, dir: PathBuf },

    /// The device crate's `Cargo.toml` has no package name the builder can read.
    #[error("cannot read the package name from {}", path.display())]
    ManifestName { path: PathBuf },

    /// The nested `cargo` could not be started.
    #[error("cannot run `{command}`: {source}")]
    CargoSpawn {
        command: String,
        #[source]
        source: std::io::Error,
    },

    /// The nested cargo build of the device crate failed; `stderr` is cargo's and rustc's output.
    #[error("compiling the device crate for nvptx64 failed ({status}):\n{stderr}")]
    Compile { status: String, stderr: String },

    /// The build finished but an expected artifact is not there.
    #[error("build artifact missing: {}", path.display())]
    ArtifactMissing { path: PathBuf },

    /// An output contains an absolute path or another machine-specific string.
    #[error("{} is not reproducible: it contains {needle:?}", path.display())]
    NotReproducible { path: PathBuf, needle: String },

    /// Reading, writing, copying or creating a file or folder failed.
    #[error("i/o error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// `OXCCL_PTXAS` names a file that does not exist.
    #[error("OXCCL_PTXAS points to {}, which does not exist", path.display())]
    PtxasEnvInvalid { path: PathBuf },

    /// `--require-ptxas` was given and no ptxas was found.
    #[error(
        "ptxas not found (searched {searched}); install it with scripts/setup-ptxas.sh or set OXCCL_PTXAS"
    )]
    PtxasNotFound { searched: String },

    /// ptxas could not be run, or rejected the PTX.
    #[error("ptxas failed on {} ({status}):\n{output}", ptx.display())]
    Ptxas {
        ptx: PathBuf,
        status: String,
        output: String,
    },

    /// A kernel named in `oxccl_device::kernels::HOT_KERNELS` is not an `.entry` of the PTX.
    #[error("hot kernel {kernel} is not an .entry of the ptx (entries: {entries})")]
    HotKernelMissing { kernel: String, entries: String },

    /// A hot kernel spills registers to local memory.
    #[error(
        "hot kernel {kernel} spills registers: {stores} bytes spill stores, {loads} bytes spill loads ({registers} registers)\n{table}"
    )]
    HotKernelSpills {
        kernel: String,
        stores: u64,
        loads: u64,
        registers: u32,
        /// ptxas's report of all kernels ([`crate::ptxas::table`]).
        table: String,
    },

    /// The PTX does not declare the PTX ISA version the builder asks for.
    #[error("{} declares {found:?}, expected {expected:?}", path.display())]
    PtxVersion {
        path: PathBuf,
        found: String,
        expected: &'static str,
    },

    /// An LLVM tool (llvm-nm, llvm-dis) failed on the bitcode.
    #[error("`{command}` failed ({status}): {stderr}")]
    LlvmTool {
        command: String,
        status: String,
        stderr: String,
    },

    /// A Device API export of `oxccl_device::api::export::EXPORTED` is not a defined external
    /// function of the bitcode.
    #[error(
        "{} does not export every Device API function: {}",
        bitcode.display(),
        symbols.join(", ")
    )]
    ExportMissing { bitcode: PathBuf, symbols: Vec<String> },

    /// The bitcode needs symbols it does not define (a user module linked with it would be
    /// incomplete).
    #[error(
        "{} has unresolved symbols (not LLVM intrinsics): {}",
        bitcode.display(),
        symbols.join(", ")
    )]
    ExportUnresolved { bitcode: PathBuf, symbols: Vec<String> },

    /// An export's LLVM signature differs from its prototype in the header.
    #[error(
        "exports of {} do not match the header's prototypes:\n{}",
        bitcode.display(),
        details.join("\n")
    )]
    ExportSignature { bitcode: PathBuf, details: Vec<String> },

    /// The header's prototypes do not name exactly `EXPORTED`, in order.
    #[error(
        "header prototypes differ from oxccl_device::api::export::EXPORTED (in order): missing [{}], extra [{}]",
        missing.join(", "),
        extra.join(", ")
    )]
    HeaderPrototypes {
        missing: Vec<String>,
        extra: Vec<String>,
    },

    /// A struct of the header would not have the Rust layout in C.
    #[error("generating oxccl_device.h: {detail}")]
    HeaderLayout { detail: String },

    /// `--check`: the fresh build differs from the committed files.
    #[error(
        "committed ptx differs from a fresh build: {}; rebuild with `cargo run -p oxccl-builder` and commit the result",
        files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    CheckMismatch { files: Vec<PathBuf> },
}

impl Error {
    /// Wraps an `std::io::Error` with the path it concerns.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

/// The builder's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
