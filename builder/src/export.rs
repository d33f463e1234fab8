//! Checks of the exported bitcode (`ptx/oxccl_device.bc`) that users' kernels link against:
//! every `oxccl_dev_*` of `oxccl_device::api::export::EXPORTED` is defined with external
//! linkage, with the LLVM signature its C prototype in `oxccl_device.h` implies, and the
//! module has no unresolved symbol other than LLVM intrinsics (so that a user module linked
//! with it is complete).
//!
//! The bitcode rustc writes with `--emit=llvm-bc` under the `ptx` profile (fat LTO) is the
//! whole program after LTO: `core` and `compiler_builtins` are merged in and internalized,
//! and only the kernels and the `#[no_mangle]` exports keep external linkage. These checks
//! make the builder fail, with the names, if that ever stops being true.

use std::path::Path;
use std::process::Command;

use crate::error::{Error, Result};
use crate::header;

/// The exported Device API functions, as declared by the device crate.
pub fn exported() -> &'static [&'static str] {
    oxccl_device::api::export::EXPORTED
}

/// One symbol of `llvm-nm`'s output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NmSymbol {
    pub name: String,
    /// nm's type letter: `T` defined external function, `t` internal, `W` weak, `U` undefined...
    pub kind: char,
}

/// Reads `llvm-nm` output lines (`[address] TYPE name`).
pub fn parse_nm(text: &str) -> Vec<NmSymbol> {
    text.lines()
        .filter_map(|l| {
            let mut t: Vec<&str> = l.split_whitespace().collect();
            let name = t.pop()?;
            let kind = t.pop()?.chars().next()?;
            Some(NmSymbol {
                name: name.to_owned(),
                kind,
            })
        })
        .collect()
}

/// Runs an LLVM tool and returns its stdout.
pub fn run_tool(tool: &Path, args: &[&std::ffi::OsStr]) -> Result<String> {
    let out = Command::new(tool).args(args).output().map_err(Error::io(tool))?;
    if !out.status.success() {
        return Err(Error::LlvmTool {
            command: format!(
                "{} {}",
                tool.display(),
                args.iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Functions every PTX consumer provides (ptxas and the driver's JIT resolve them as system
/// calls), so a bitcode that calls them still links anywhere: `vprintf`, CUDA's device
/// printf, which only the diagnostic timeline build (`OXCCL_SYM_TIMELINE`,
/// `oxccl_device::coll::sym::timeline`) calls.
pub const CUDA_SYSCALLS: &[&str] = &["vprintf"];

/// Checks `nm` (the `llvm-nm` listing of the bitcode at `bitcode`): every name of `names`
/// is a defined external function (`T`), and no symbol is undefined except LLVM intrinsics
/// and [`CUDA_SYSCALLS`].
pub fn check_symbols(bitcode: &Path, nm: &[NmSymbol], names: &[&str]) -> Result<()> {
    let missing: Vec<String> = names
        .iter()
        .filter(|n| !nm.iter().any(|s| s.name == **n && s.kind == 'T'))
        .map(|n| match nm.iter().find(|s| s.name == *n) {
            Some(s) => format!("{n} (nm type {})", s.kind),
            None => format!("{n} (absent)"),
        })
        .collect();
    if !missing.is_empty() {
        return Err(Error::ExportMissing {
            bitcode: bitcode.to_path_buf(),
            symbols: missing,
        });
    }
    let unresolved: Vec<String> = nm
        .iter()
        .filter(|s| {
            matches!(s.kind, 'U' | 'u' | 'w' | 'v')
                && !s.name.starts_with("llvm.")
                && !CUDA_SYSCALLS.contains(&s.name.as_str())
        })
        .map(|s| s.name.clone())
        .collect();
    if !unresolved.is_empty() {
        return Err(Error::ExportUnresolved {
            bitcode: bitcode.to_path_buf(),
            symbols: unresolved,
        });
    }
    Ok(())
}

/// The LLVM signature of a `define` line: `(return type, parameter types)`, attributes
/// dropped (`define noundef range(i32 0, 3) i32 @f(ptr noundef %s, i32 noundef %o) ...`
/// gives `("i32", ["ptr", "i32"])`).
pub fn parse_define(line: &str, name: &str) -> Option<(String, Vec<String>)> {
    let at = line.find(&format!("@{name}("))?;
    let ret = line[..at].split_whitespace().last()?.to_owned();
    let rest = &line[at + name.len() + 2..];
    let (mut depth, mut cur, mut params) = (0i32, String::new(), Vec::new());
    for c in rest.chars() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                params.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        params.push(cur);
    }
    let params = params
        .iter()
        .filter_map(|p| p.split_whitespace().next().map(str::to_owned))
        .collect();
    Some((ret, params))
}

/// Checks that the `define` of every prototype of the header in `ir` (the `llvm-dis` text
/// of the bitcode) has the LLVM types the prototype's C types lower to.
pub fn check_signatures(bitcode: &Path, ir: &str) -> Result<()> {
    let mut wrong = Vec::new();
    for p in header::PROTOTYPES {
        let found = ir
            .lines()
            .filter(|l| l.starts_with("define "))
            .find_map(|l| parse_define(l, p.name));
        let want = (
            header::llvm_type(p.ret).to_owned(),
            p.params
                .iter()
                .map(|(t, _)| header::llvm_type(t).to_owned())
                .collect::<Vec<_>>(),
        );
        match found {
            Some(f) if f == want => {}
            Some((r, ps)) => wrong.push(format!(
                "{}: bitcode has {r} ({}), header says {} ({})",
                p.name,
                ps.join(", "),
                want.0,
                want.1.join(", ")
            )),
            None => wrong.push(format!("{}: no define in the bitcode", p.name)),
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Error::ExportSignature {
            bitcode: bitcode.to_path_buf(),
            details: wrong,
        })
    }
}

/// All the checks on the bitcode at `bitcode`, with the LLVM tools of `llvm_bin`.
pub fn check_bitcode(llvm_bin: &Path, bitcode: &Path) -> Result<()> {
    let exe = std::env::consts::EXE_SUFFIX;
    let nm = run_tool(&llvm_bin.join(format!("llvm-nm{exe}")), &[bitcode.as_os_str()])?;
    check_symbols(bitcode, &parse_nm(&nm), exported())?;
    let ir = run_tool(
        &llvm_bin.join(format!("llvm-dis{exe}")),
        &["-o".as_ref(), "-".as_ref(), bitcode.as_os_str()],
    )?;
    check_signatures(bitcode, &ir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_internal_exports_are_named() {
        let nm = parse_nm("---------------- T oxccl_dev_rank\n---------------- t oxccl_dev_nranks\n");
        let p = Path::new("x.bc");
        check_symbols(p, &nm, &["oxccl_dev_rank"]).unwrap();
        let e = check_symbols(p, &nm, &["oxccl_dev_rank", "oxccl_dev_nranks", "oxccl_dev_x"]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("oxccl_dev_nranks (nm type t), oxccl_dev_x (absent)"),
            "{msg}"
        );
    }

    #[test]
    fn unresolved_symbols_fail_intrinsics_pass() {
        let nm = parse_nm(
            "---------------- T oxccl_dev_rank\n                 U llvm.umin.i64\n                 U vprintf\n                 U memcpy\n",
        );
        let e = check_symbols(Path::new("x.bc"), &nm, &["oxccl_dev_rank"]).unwrap_err();
        assert!(
            matches!(&e, Error::ExportUnresolved { symbols, .. } if symbols == &["memcpy"]),
            "{e}"
        );
    }

    #[test]
    fn define_lines_are_parsed() {
        let l = "define noundef range(i32 0, 3) i32 @oxccl_dev_lsa_barrier_wait_timeout(ptr noundef captures(none) %s, i32 noundef %order, i64 noundef %timeout_ns) unnamed_addr #0 {";
        assert_eq!(
            parse_define(l, "oxccl_dev_lsa_barrier_wait_timeout"),
            Some(("i32".into(), vec!["ptr".into(), "i32".into(), "i64".into()]))
        );
        let l = "define noundef i32 @oxccl_dev_version() unnamed_addr #5 {";
        assert_eq!(parse_define(l, "oxccl_dev_version"), Some(("i32".into(), vec![])));
        assert_eq!(parse_define(l, "oxccl_dev_rank"), None);
    }
}
