//! The rust toolchain the nested build uses: sysroot, host triple and the components that
//! building for `nvptx64-nvidia-cuda` needs (rust-src, llvm-bitcode-linker, llvm-tools).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The LLVM tools that `llvm-bitcode-linker` runs (from the llvm-tools component).
pub const LLVM_TOOLS: [&str; 3] = ["llvm-link", "opt", "llc"];
/// The LLVM tools (same component) the builder checks the exported bitcode with.
pub const CHECK_TOOLS: [&str; 2] = ["llvm-nm", "llvm-dis"];

/// What the builder needs to know about the toolchain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// `rustc --print sysroot`.
    pub sysroot: PathBuf,
    /// The host triple (`host:` of `rustc -vV`).
    pub host: String,
    /// The full `rustc -vV` answer; recorded so that a build can say which compiler made it.
    pub version: String,
}

impl Toolchain {
    /// Asks `rustc` (the one rustup resolves for the workspace, like the nested cargo will).
    pub fn query(workspace: &Path) -> Result<Toolchain> {
        let sysroot = rustc_output(workspace, &["--print", "sysroot"])?;
        let version = rustc_output(workspace, &["-vV"])?;
        let host = version
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .map(str::to_owned)
            .ok_or_else(|| Error::RustcQuery {
                command: "rustc -vV".into(),
                detail: "no `host:` line".into(),
            })?;
        Ok(Toolchain {
            sysroot: PathBuf::from(sysroot.trim()),
            host,
            version,
        })
    }

    /// `$sysroot/lib/rustlib/<host>/bin`: where rustc looks for the linker and its LLVM tools.
    pub fn host_bin(&self) -> PathBuf {
        self.sysroot.join("lib/rustlib").join(&self.host).join("bin")
    }

    /// The source of the standard library that `-Zbuild-std` compiles.
    pub fn rust_src(&self) -> PathBuf {
        self.sysroot.join("lib/rustlib/src/rust/library")
    }

    /// Checks that rust-src, llvm-bitcode-linker and llvm-tools are installed.
    pub fn check_components(&self) -> Result<()> {
        check_components(&self.sysroot, &self.host)
    }
}

/// Checks the components in the sysroot `sysroot` for host `host` (a parameter so that tests
/// can point it at a fake sysroot).
pub fn check_components(sysroot: &Path, host: &str) -> Result<()> {
    let core = sysroot.join("lib/rustlib/src/rust/library/core");
    if !core.join("Cargo.toml").is_file() {
        return Err(Error::RustSrcMissing { path: core });
    }
    let bin = sysroot.join("lib/rustlib").join(host).join("bin");
    let exe = std::env::consts::EXE_SUFFIX;
    let linker = format!("llvm-bitcode-linker{exe}");
    // rustc runs the linker from the self-contained folder; older toolchains had it in bin/.
    let searched = vec![bin.join("self-contained").join(&linker), bin.join(&linker)];
    if !searched.iter().any(|p| p.is_file()) {
        return Err(Error::BitcodeLinkerMissing { searched });
    }
    for tool in LLVM_TOOLS.into_iter().chain(CHECK_TOOLS) {
        if !bin.join(format!("{tool}{exe}")).is_file() {
            return Err(Error::LlvmToolsMissing { tool, dir: bin });
        }
    }
    Ok(())
}

fn rustc_output(workspace: &Path, args: &[&str]) -> Result<String> {
    let command = format!("rustc {}", args.join(" "));
    let mut cmd = Command::new("rustc");
    cmd.args(args).current_dir(workspace);
    crate::nvptx::scrub_env(&mut cmd);
    let out = cmd.output().map_err(|e| Error::RustcQuery {
        command: command.clone(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(Error::RustcQuery {
            command,
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    String::from_utf8(out.stdout).map_err(|e| Error::RustcQuery {
        command,
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "x86_64-unknown-linux-gnu";

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"").unwrap();
    }

    fn fake_sysroot(src: bool, linker: bool, tools: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path();
        if src {
            touch(&s.join("lib/rustlib/src/rust/library/core/Cargo.toml"));
        }
        let bin = s.join("lib/rustlib").join(HOST).join("bin");
        if linker {
            touch(&bin.join("self-contained/llvm-bitcode-linker"));
        }
        if tools {
            for t in LLVM_TOOLS.into_iter().chain(CHECK_TOOLS) {
                touch(&bin.join(t));
            }
        }
        dir
    }

    #[test]
    fn complete_sysroot_passes() {
        let s = fake_sysroot(true, true, true);
        check_components(s.path(), HOST).unwrap();
    }

    #[test]
    fn missing_rust_src_says_how_to_install() {
        let s = fake_sysroot(false, true, true);
        let e = check_components(s.path(), HOST).unwrap_err();
        assert!(matches!(e, Error::RustSrcMissing { .. }));
        let msg = e.to_string();
        assert!(msg.starts_with("rust-src component missing"), "{msg}");
        assert!(msg.contains("rustup component add rust-src"), "{msg}");
    }

    #[test]
    fn missing_linker_says_how_to_install() {
        let s = fake_sysroot(true, false, true);
        let e = check_components(s.path(), HOST).unwrap_err();
        assert!(matches!(e, Error::BitcodeLinkerMissing { .. }));
        let msg = e.to_string();
        assert!(
            msg.contains("rustup component add llvm-bitcode-linker llvm-tools"),
            "{msg}"
        );
        assert!(msg.contains("self-contained/llvm-bitcode-linker"), "{msg}");
    }

    #[test]
    fn missing_llvm_tools_says_how_to_install() {
        let s = fake_sysroot(true, true, false);
        let e = check_components(s.path(), HOST).unwrap_err();
        assert!(matches!(
            e,
            Error::LlvmToolsMissing {
                tool: "llvm-link",
                ..
            }
        ));
        assert!(e.to_string().contains("rustup component add llvm-tools"));
    }
}
