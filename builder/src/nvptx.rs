//! The nested cargo build of the device crate for `nvptx64-nvidia-cuda`.
//!
//! `cargo rustc --lib --crate-type cdylib` makes rustc link the crate (with
//! llvm-bitcode-linker) into one PTX module; `--emit=llvm-bc,link` also writes the device
//! crate's own LLVM bitcode. Code generation settings come from the `ptx` profile of the
//! workspace's root `Cargo.toml` (fat LTO, one codegen unit, opt-level 3, panic abort) and
//! from the flags below, passed in `CARGO_ENCODED_RUSTFLAGS` so that they apply to `core` too.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};
use crate::toolchain::Toolchain;

/// The rustc target.
pub const TARGET: &str = "nvptx64-nvidia-cuda";
/// The GPU architecture the PTX is generated for (H100/H200).
pub const TARGET_CPU: &str = "sm_90";
/// PTX ISA 8.1 (LLVM's default for sm_90 is 7.8): allows the sm_89+ fp8 `cvt` forms and is
/// loaded by the JIT of every CUDA 12.1+ driver (CUDA 13.0 / driver 580 included).
pub const PTX_FEATURE: &str = "+ptx81";

/// LLVM's loop-unroll cost threshold for device code (default 300).
pub const UNROLL_THRESHOLD: u32 = 2000;
/// The `.version` line the PTX must carry.
pub const PTX_VERSION_LINE: &str = ".version 8.1";
/// The cargo profile (defined in the workspace's root `Cargo.toml`).
pub const PROFILE: &str = "ptx";
/// What paths are rewritten to in the outputs (`--remap-path-prefix`).
pub const REMAP_WORKSPACE: &str = "/oxccl";
pub const REMAP_CARGO_HOME: &str = "/cargo";
pub const REMAP_SYSROOT: &str = "/rust";

/// Environment variables of an outer cargo (e.g. `cargo run -p oxccl-builder`) or of the
/// user that would change the nested build; every other `CARGO_*` is dropped as well,
/// except those in [`KEEP_CARGO_PREFIXES`].
const SCRUB: &[&str] = &[
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "RUSTC",
    "RUSTDOC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_BOOTSTRAP",
    "RUSTC_LINKER",
];
/// `CARGO_*` variables that only say where cargo's home is and how it reaches registries.
const KEEP_CARGO_PREFIXES: &[&str] = &[
    "CARGO_HOME",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_REGISTRIES_",
    "CARGO_REGISTRY_",
    "CARGO_TERM_",
];

/// Removes the variables that could leak into the nested build from `cmd`'s environment.
pub fn scrub_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let Some(k) = key.to_str() else { continue };
        let cargo = (k.starts_with("CARGO") || k.starts_with("__CARGO"))
            && !KEEP_CARGO_PREFIXES.iter().any(|p| k.starts_with(p));
        if cargo || SCRUB.contains(&k) {
            cmd.env_remove(&key);
        }
    }
}

/// The cargo home (`$CARGO_HOME`, else `$HOME/.cargo`), if it can be found.
pub fn cargo_home() -> Option<PathBuf> {
    let p = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    Some(p.canonicalize().unwrap_or(p))
}

/// The machine-specific path prefixes and what they become in the outputs, in the order
/// given to rustc (the last matching one wins).
pub fn remaps(workspace: &Path, toolchain: &Toolchain) -> Vec<(PathBuf, &'static str)> {
    let mut v = vec![(workspace.to_path_buf(), REMAP_WORKSPACE)];
    if let Some(home) = cargo_home() {
        v.push((home, REMAP_CARGO_HOME));
    }
    let sysroot = toolchain.sysroot.clone();
    v.push((sysroot.canonicalize().unwrap_or(sysroot), REMAP_SYSROOT));
    v
}

/// The rustc flags for every crate of the nested build (device crate, `core`, builtins).
pub fn rustflags(workspace: &Path, toolchain: &Toolchain) -> Vec<String> {
    let mut flags = vec![
        format!("-Ctarget-cpu={TARGET_CPU}"),
        format!("-Ctarget-feature={PTX_FEATURE}"),
        // GPU kernels index small per-thread arrays (peer addresses, 16-byte vectors) in
        // loops of constant trip count; unrolled fully they stay in registers, otherwise
        // they go to local memory (stack frame in ptxas' report).
        format!("-Cllvm-args=-unroll-threshold={UNROLL_THRESHOLD}"),
    ];
    for (from, to) in remaps(workspace, toolchain) {
        flags.push(format!("--remap-path-prefix={}={to}", from.display()));
    }
    flags
}

/// Where the nested build leaves its results.
#[derive(Debug, Clone)]
pub struct DeviceArtifacts {
    /// The linked PTX module.
    pub ptx: PathBuf,
    /// The device crate's LLVM bitcode.
    pub bitcode: PathBuf,
}

/// Builds the device crate at `device_dir` into `target_dir`.
pub fn build_device(
    workspace: &Path,
    device_dir: &Path,
    target_dir: &Path,
    toolchain: &Toolchain,
    verbose: bool,
) -> Result<DeviceArtifacts> {
    let manifest = device_dir.join("Cargo.toml");
    let crate_name = lib_name(&manifest)?;
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace)
        .arg("rustc")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--lib", "--crate-type", "cdylib", "--target", TARGET])
        .args(["--profile", PROFILE, "-Zbuild-std=core"])
        .arg("--target-dir")
        .arg(target_dir)
        .args(["--", "--emit=llvm-bc,link"]);
    scrub_env(&mut cmd);
    cmd.env("RUSTC_BOOTSTRAP", "1")
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            rustflags(workspace, toolchain).join("\x1f"),
        )
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let command = format!("cargo rustc --manifest-path {}", manifest.display());
    let mut child = cmd.spawn().map_err(|source| Error::CargoSpawn {
        command: command.clone(),
        source,
    })?;
    let mut stderr = String::new();
    if let Some(pipe) = child.stderr.take() {
        for line in BufReader::new(pipe).lines() {
            let line = line.map_err(|source| Error::CargoSpawn {
                command: command.clone(),
                source,
            })?;
            if verbose {
                eprintln!("{line}");
            }
            stderr.push_str(&line);
            stderr.push('\n');
        }
    }
    let status = child
        .wait()
        .map_err(|source| Error::CargoSpawn { command, source })?;
    if !status.success() {
        return Err(Error::Compile {
            status: status.to_string(),
            stderr,
        });
    }
    let out = target_dir.join(TARGET).join(PROFILE);
    let artifacts = DeviceArtifacts {
        ptx: out.join(format!("{crate_name}.ptx")),
        bitcode: out.join("deps").join(format!("{crate_name}.bc")),
    };
    for p in [&artifacts.ptx, &artifacts.bitcode] {
        if !p.is_file() {
            return Err(Error::ArtifactMissing { path: p.clone() });
        }
    }
    Ok(artifacts)
}

/// The library crate name of the package whose manifest is `manifest`: `[lib] name`, else
/// `[package] name` with `-` turned into `_`.
pub fn lib_name(manifest: &Path) -> Result<String> {
    let text = std::fs::read_to_string(manifest).map_err(Error::io(manifest))?;
    lib_name_from_toml(&text).ok_or_else(|| Error::ManifestName {
        path: manifest.to_path_buf(),
    })
}

fn lib_name_from_toml(text: &str) -> Option<String> {
    let (mut section, mut package, mut lib) = (String::new(), None, None);
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() != "name" {
            continue;
        }
        let value = value.trim().trim_matches('"').to_owned();
        match section.as_str() {
            "package" => package = Some(value),
            "lib" => lib = Some(value),
            _ => {}
        }
    }
    lib.or(package).map(|n| n.replace('-', "_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lib_name_from_package() {
        let t = "[package]\nname = \"oxccl-device\"\nversion.workspace = true\n\n[lib]\ncrate-type = [\"rlib\"]\n[dependencies]\nname = \"x\"\n";
        assert_eq!(lib_name_from_toml(t).as_deref(), Some("oxccl_device"));
    }

    #[test]
    fn lib_name_prefers_lib_section() {
        let t = "[package]\nname = \"a-b\"\n[lib]\nname = \"c_d\"\n";
        assert_eq!(lib_name_from_toml(t).as_deref(), Some("c_d"));
        assert_eq!(lib_name_from_toml("[workspace]\n"), None);
    }
}
