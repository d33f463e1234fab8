//! oxccl-builder: builds the device crate (`device/`, `oxccl-device`) to PTX.
//!
//! Our counterpart of Rust-CUDA's `cuda_builder`. [`build`]:
//! 1. checks the toolchain (rust-src, llvm-bitcode-linker, llvm-tools);
//! 2. runs a nested `cargo rustc --crate-type cdylib` of the device crate for
//!    `nvptx64-nvidia-cuda` (sm_90, PTX ISA 8.1, profile `ptx`) in `target/ptx-build`;
//! 3. checks that the PTX and bitcode hold no machine-specific path, and that the bitcode
//!    exports every Device API function (`oxccl_device::api::export::EXPORTED`) with the
//!    header's signatures and needs nothing undefined ([`export`]); then writes them, byte
//!    for byte reproducibly, to `ptx/oxccl.ptx` and `ptx/oxccl_device.bc`, with the C header
//!    `ptx/oxccl_device.h` ([`header`]);
//! 4. when ptxas is found, assembles the PTX for sm_90 with `-v`, reports each kernel's
//!    registers, stack and spills, and fails if a kernel of
//!    `oxccl_device::kernels::HOT_KERNELS` spills.
//!
//! [`check`] does the same into a temporary folder and compares with the committed `ptx/`.

pub mod error;
pub mod export;
pub mod header;
pub mod nvptx;
pub mod ptxas;
pub mod toolchain;

use std::path::{Path, PathBuf};

pub use error::{Error, Result};
use toolchain::Toolchain;

/// The names of the files written into the output folder.
pub const PTX_FILE: &str = "oxccl.ptx";
/// The device crate's LLVM bitcode after LTO (kernels, Device API exports, `core` merged
/// in): what users' kernels link against.
pub const BITCODE_FILE: &str = "oxccl_device.bc";
/// The C header of the Device API exports of [`BITCODE_FILE`].
pub const HEADER_FILE: &str = "oxccl_device.h";

/// The kernels that must not spill, as declared by the device crate.
pub fn hot_kernels() -> &'static [&'static str] {
    oxccl_device::kernels::HOT_KERNELS
}

/// The workspace this builder was compiled in (the parent of `builder/`).
pub fn default_workspace() -> PathBuf {
    let builder = Path::new(env!("CARGO_MANIFEST_DIR"));
    builder.parent().unwrap_or(builder).to_path_buf()
}

/// Whether to run ptxas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtxasMode {
    /// Run it when found, otherwise say it was skipped.
    Auto,
    /// Fail when it is not found.
    Require,
    /// Do not run it.
    Skip,
}

/// What to build and where.
#[derive(Debug, Clone)]
pub struct Config {
    /// The workspace root (canonical).
    pub workspace: PathBuf,
    /// The device crate's folder.
    pub device_dir: PathBuf,
    /// The nested build's cargo target folder.
    pub target_dir: PathBuf,
    /// Where `oxccl.ptx`, `oxccl_device.bc` and `oxccl_device.h` are written (by [`build`]) or compared (by [`check`]).
    pub out_dir: PathBuf,
    pub ptxas: PtxasMode,
    /// ptxas's `-split-compile` (1: one thread, the default; 0: one per CPU).
    pub ptxas_threads: u32,
    pub hot_kernels: Vec<String>,
    /// Echo the nested cargo's output.
    pub verbose: bool,
}

impl Config {
    /// The standard layout of the workspace at `workspace`: `device/`, `target/ptx-build`, `ptx/`.
    pub fn new(workspace: &Path) -> Result<Config> {
        let workspace = workspace.canonicalize().map_err(Error::io(workspace))?;
        Ok(Config {
            device_dir: workspace.join("device"),
            target_dir: workspace.join("target/ptx-build"),
            out_dir: workspace.join("ptx"),
            workspace,
            ptxas: PtxasMode::Auto,
            ptxas_threads: 1,
            hot_kernels: hot_kernels().iter().map(|s| s.to_string()).collect(),
            verbose: false,
        })
    }
}

/// What ptxas said, or why it did not run.
#[derive(Debug, Clone)]
pub enum PtxasReport {
    Skipped(String),
    Ran {
        ptxas: PathBuf,
        usages: Vec<ptxas::Usage>,
    },
}

/// What a build did.
#[derive(Debug, Clone)]
pub struct Report {
    pub ptx: PathBuf,
    pub bitcode: PathBuf,
    pub header: PathBuf,
    pub ptx_bytes: usize,
    pub bitcode_bytes: usize,
    pub header_bytes: usize,
    /// The kernels (`.entry`) of the PTX.
    pub entries: Vec<String>,
    pub ptxas: PtxasReport,
    pub toolchain: Toolchain,
}

/// The sm_90 machine code ptxas made from the PTX (loaded by the GPU backend on sm_90
/// devices, so that no JIT compilation happens at start-up).
pub const CUBIN_FILE: &str = "oxccl.sm_90.cubin";

/// FNV-1a 64 of the PTX the cubin was assembled from; the host embeds the cubin only when
/// it matches the PTX it embeds, so a stale cubin is never loaded.
pub const CUBIN_STAMP_FILE: &str = "oxccl.sm_90.cubin.ptxhash";

/// FNV-1a, 64 bits.
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Builds the device crate and writes `oxccl.ptx`, `oxccl_device.bc` and `oxccl_device.h`
/// into `cfg.out_dir`.
pub fn build(cfg: &Config) -> Result<Report> {
    let toolchain = Toolchain::query(&cfg.workspace)?;
    toolchain.check_components()?;
    let art = nvptx::build_device(
        &cfg.workspace,
        &cfg.device_dir,
        &cfg.target_dir,
        &toolchain,
        cfg.verbose,
    )?;
    let ptx = std::fs::read(&art.ptx).map_err(Error::io(&art.ptx))?;
    let bitcode = std::fs::read(&art.bitcode).map_err(Error::io(&art.bitcode))?;
    let ptx_text = String::from_utf8_lossy(&ptx);
    check_ptx_version(&art.ptx, &ptx_text)?;
    let needles = machine_strings(&cfg.workspace, &toolchain);
    check_reproducible(&art.ptx, &ptx, &needles)?;
    check_reproducible(&art.bitcode, &bitcode, &needles)?;
    export::check_bitcode(&toolchain.host_bin(), &art.bitcode)?;
    let header = header::generate()?;
    let entries = ptxas::ptx_entries(&ptx_text);
    if let Some(k) = cfg.hot_kernels.iter().find(|k| !entries.contains(k)) {
        return Err(Error::HotKernelMissing {
            kernel: k.clone(),
            entries: entries.join(", "),
        });
    }
    std::fs::create_dir_all(&cfg.out_dir).map_err(Error::io(&cfg.out_dir))?;
    let out_ptx = cfg.out_dir.join(PTX_FILE);
    let out_bc = cfg.out_dir.join(BITCODE_FILE);
    write_atomic(&out_ptx, &ptx)?;
    write_atomic(&out_bc, &bitcode)?;
    let out_h = cfg.out_dir.join(HEADER_FILE);
    write_atomic(&out_h, header.as_bytes())?;
    let report = run_ptxas(cfg, &out_ptx)?;
    Ok(Report {
        ptx: out_ptx,
        bitcode: out_bc,
        header: out_h,
        ptx_bytes: ptx.len(),
        bitcode_bytes: bitcode.len(),
        header_bytes: header.len(),
        entries,
        ptxas: report,
        toolchain,
    })
}

/// Builds into a temporary folder and fails if the result differs from the files in
/// `cfg.out_dir` (the committed `ptx/`).
pub fn check(cfg: &Config) -> Result<Report> {
    let tmp = tempfile::tempdir().map_err(Error::io(std::env::temp_dir()))?;
    let fresh = Config {
        out_dir: tmp.path().to_path_buf(),
        ..cfg.clone()
    };
    let mut report = build(&fresh)?;
    let mut differ = Vec::new();
    let mut names = vec![PTX_FILE, BITCODE_FILE, HEADER_FILE];
    if matches!(report.ptxas, PtxasReport::Ran { .. }) {
        names.extend([CUBIN_FILE, CUBIN_STAMP_FILE]);
    }
    for name in names {
        let committed = cfg.out_dir.join(name);
        let new = std::fs::read(tmp.path().join(name)).map_err(Error::io(tmp.path().join(name)))?;
        if std::fs::read(&committed).ok().as_deref() != Some(&new[..]) {
            differ.push(committed);
        }
    }
    if !differ.is_empty() {
        return Err(Error::CheckMismatch { files: differ });
    }
    report.ptx = cfg.out_dir.join(PTX_FILE);
    report.bitcode = cfg.out_dir.join(BITCODE_FILE);
    report.header = cfg.out_dir.join(HEADER_FILE);
    Ok(report)
}

fn run_ptxas(cfg: &Config, ptx: &Path) -> Result<PtxasReport> {
    if cfg.ptxas == PtxasMode::Skip {
        return Ok(PtxasReport::Skipped("skipped: --no-ptxas".into()));
    }
    let path = match ptxas::find(&cfg.workspace)? {
        ptxas::Found::At(p) => p,
        ptxas::Found::Missing(searched) if cfg.ptxas == PtxasMode::Require => {
            return Err(Error::PtxasNotFound { searched })
        }
        ptxas::Found::Missing(searched) => {
            return Ok(PtxasReport::Skipped(format!(
                "skipped: ptxas not found (searched {searched}; install with scripts/setup-ptxas.sh)"
            )))
        }
    };
    let cubin = cfg.out_dir.join(CUBIN_FILE);
    let tmp = cfg.out_dir.join(format!("{CUBIN_FILE}.tmp"));
    let usages = ptxas::run(&path, ptx, nvptx::TARGET_CPU, &tmp, cfg.ptxas_threads)?;
    std::fs::rename(&tmp, &cubin).map_err(Error::io(&cubin))?;
    let ptx_bytes = std::fs::read(ptx).map_err(Error::io(ptx))?;
    let stamp = cfg.out_dir.join(CUBIN_STAMP_FILE);
    write_atomic(&stamp, format!("{:016x}\n", fnv1a64(&ptx_bytes)).as_bytes())?;
    let hot: Vec<&str> = cfg.hot_kernels.iter().map(String::as_str).collect();
    ptxas::check_hot(&usages, &hot)?;
    Ok(PtxasReport::Ran { ptxas: path, usages })
}

fn check_ptx_version(path: &Path, ptx: &str) -> Result<()> {
    let found = ptx
        .lines()
        .find(|l| l.trim_start().starts_with(".version"))
        .unwrap_or("")
        .trim();
    if found == nvptx::PTX_VERSION_LINE {
        Ok(())
    } else {
        Err(Error::PtxVersion {
            path: path.to_path_buf(),
            found: found.to_owned(),
            expected: nvptx::PTX_VERSION_LINE,
        })
    }
}

/// The machine-specific strings that must not appear in the outputs.
fn machine_strings(workspace: &Path, toolchain: &Toolchain) -> Vec<String> {
    let mut v: Vec<PathBuf> = nvptx::remaps(workspace, toolchain)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    v.push(toolchain.sysroot.clone());
    v.extend(std::env::var_os("HOME").map(PathBuf::from));
    v.push(std::env::temp_dir());
    let mut s: Vec<String> = v
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches('/').to_owned())
        .filter(|s| s.len() > 1)
        .collect();
    s.sort();
    s.dedup();
    s
}

/// Fails if `bytes` contains one of `needles`.
pub fn check_reproducible(path: &Path, bytes: &[u8], needles: &[String]) -> Result<()> {
    for n in needles {
        if bytes.windows(n.len()).any(|w| w == n.as_bytes()) {
            return Err(Error::NotReproducible {
                path: path.to_path_buf(),
                needle: n.clone(),
            });
        }
    }
    Ok(())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(Error::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(Error::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_machine_paths() {
        let needles = vec!["/home/me/oxccl".to_owned()];
        let p = Path::new("x.bc");
        check_reproducible(p, b"\0/oxccl/device/src/lib.rs\0", &needles).unwrap();
        let e = check_reproducible(p, b"\0/home/me/oxccl/device\0", &needles).unwrap_err();
        assert!(e.to_string().contains("is not reproducible"), "{e}");
    }

    #[test]
    fn ptx_version_is_checked() {
        let p = Path::new("x.ptx");
        check_ptx_version(p, "//\n.version 8.1\n.target sm_90\n").unwrap();
        let e = check_ptx_version(p, ".version 7.8\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.ptx declares \".version 7.8\", expected \".version 8.1\""
        );
    }
}
