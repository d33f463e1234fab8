//! ptxas: finding it, assembling the PTX with `-v`, and reading what it says about each
//! function (registers, stack frame, spills).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// Environment variable that names a ptxas to use.
pub const ENV: &str = "OXCCL_PTXAS";
/// Where `scripts/setup-ptxas.sh` installs ptxas, relative to the workspace.
pub const WORKSPACE_PTXAS: &str = ".tools/ptxas/nvidia/cu13/bin/ptxas";
/// A machine-wide install of the same wheel.
pub const SYSTEM_PTXAS: &str = "/opt/oxccl-ptxas/nvidia/cu13/bin/ptxas";

/// The outcome of the search for ptxas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The ptxas to use.
    At(PathBuf),
    /// None found; the places searched, for the message.
    Missing(String),
}

/// Looks for ptxas: `$OXCCL_PTXAS`, `<workspace>/.tools/ptxas/…`, `/opt/oxccl-ptxas/…`,
/// then `ptxas` on `PATH`.
pub fn find(workspace: &Path) -> Result<Found> {
    let candidates = [workspace.join(WORKSPACE_PTXAS), PathBuf::from(SYSTEM_PTXAS)];
    find_in(std::env::var_os(ENV), &candidates, std::env::var_os("PATH"))
}

/// [`find`] with its inputs given: the value of `$OXCCL_PTXAS`, the fixed places, `$PATH`.
pub fn find_in(env: Option<OsString>, candidates: &[PathBuf], path: Option<OsString>) -> Result<Found> {
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(Found::At(p))
        } else {
            Err(Error::PtxasEnvInvalid { path: p })
        };
    }
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Ok(Found::At(p.clone()));
    }
    let name = format!("ptxas{}", std::env::consts::EXE_SUFFIX);
    let on_path = path
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(&name))
        .find(|p| p.is_file());
    Ok(match on_path {
        Some(p) => Found::At(p),
        None => {
            let mut searched = vec![format!("${ENV}")];
            searched.extend(candidates.iter().map(|p| p.display().to_string()));
            searched.push("PATH".into());
            Found::Missing(searched.join(", "))
        }
    })
}

/// What ptxas reports for one function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// The function's (PTX) name.
    pub name: String,
    /// A kernel (`.entry`), as opposed to a `.func`.
    pub entry: bool,
    /// Registers per thread (ptxas reports them for entries only).
    pub registers: Option<u32>,
    pub stack_frame: u64,
    pub spill_stores: u64,
    pub spill_loads: u64,
}

impl Usage {
    /// Whether the function spills registers to local memory.
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// Assembles `ptx` for `arch` with `-v` into `cubin` on `threads` threads (`-split-compile`;
/// 1: one, 0: one per CPU) and returns ptxas's report, in its order.
pub fn run(ptxas: &Path, ptx: &Path, arch: &str, cubin: &Path, threads: u32) -> Result<Vec<Usage>> {
    let mut cmd = Command::new(ptxas);
    if threads != 1 {
        cmd.arg("-split-compile").arg(threads.to_string());
    }
    let out = cmd
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg("-o")
        .arg(cubin)
        .arg(ptx)
        .output()
        .map_err(Error::io(ptxas))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(Error::Ptxas {
            ptx: ptx.to_path_buf(),
            status: out.status.to_string(),
            output: text,
        });
    }
    Ok(parse_verbose(&text))
}

/// Reads the output of `ptxas -v`.
pub fn parse_verbose(text: &str) -> Vec<Usage> {
    let mut all: Vec<Usage> = Vec::new();
    // Index in `all` of the function the next "stack frame" / "Used" line is about.
    let (mut props, mut entry) = (None::<usize>, None::<usize>);
    let index_of = |all: &mut Vec<Usage>, name: &str| match all.iter().position(|u| u.name == name) {
        Some(i) => i,
        None => {
            all.push(Usage {
                name: name.to_owned(),
                ..Usage::default()
            });
            all.len() - 1
        }
    };
    for line in text.lines() {
        let body = line.split_once(" : ").map_or(line, |(_, b)| b).trim();
        if let Some(rest) = body.strip_prefix("Compiling entry function ") {
            let name = rest.split('\'').nth(1).unwrap_or(rest);
            let i = index_of(&mut all, name);
            all[i].entry = true;
            entry = Some(i);
        } else if let Some(name) = body.strip_prefix("Function properties for ") {
            props = Some(index_of(&mut all, name.trim()));
        } else if body.contains("bytes stack frame") {
            if let Some(i) = props.take() {
                all[i].stack_frame = number_before(body, "bytes stack frame").unwrap_or(0);
                all[i].spill_stores = number_before(body, "bytes spill stores").unwrap_or(0);
                all[i].spill_loads = number_before(body, "bytes spill loads").unwrap_or(0);
            }
        } else if let Some(rest) = body.strip_prefix("Used ") {
            if let Some(i) = entry {
                all[i].registers = number_before(rest, "registers").map(|n| n as u32);
            }
        }
    }
    all
}

/// The number just before `unit` in `text` ("…, 12 bytes spill stores, …").
fn number_before(text: &str, unit: &str) -> Option<u64> {
    let head = &text[..text.find(unit)?];
    head.split(|c: char| c == ',' || c.is_whitespace())
        .rfind(|s| !s.is_empty())?
        .parse()
        .ok()
}

/// The names of the kernels (`.entry` directives) of a PTX module, in order.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in ptx.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut tokens = code.split_whitespace();
        if tokens.by_ref().any(|t| t == ".entry") {
            if let Some(t) = tokens.next() {
                let name = t.split('(').next().unwrap_or(t);
                if !name.is_empty() {
                    names.push(name.to_owned());
                }
            }
        }
    }
    names
}

/// A table of the kernels' resource use, one row per `.entry`, hot kernels marked `*`.
pub fn table(usages: &[Usage], hot: &[&str]) -> String {
    let kernels: Vec<&Usage> = usages.iter().filter(|u| u.entry).collect();
    let width = kernels.iter().map(|u| u.name.len()).max().unwrap_or(0).max(6);
    let mut s = format!(
        "  {:<width$}  {:>4}  {:>5}  {:>12}  {:>11}\n",
        "kernel", "regs", "stack", "spill stores", "spill loads"
    );
    for u in kernels {
        let mark = if hot.contains(&u.name.as_str()) { '*' } else { ' ' };
        let regs = u.registers.map_or("?".to_owned(), |r| r.to_string());
        let _ = writeln!(
            s,
            "{mark} {:<width$}  {regs:>4}  {:>5}  {:>12}  {:>11}",
            u.name, u.stack_frame, u.spill_stores, u.spill_loads
        );
    }
    s
}

/// Fails on the first hot kernel that spills.
pub fn check_hot(usages: &[Usage], hot: &[&str]) -> Result<()> {
    match usages
        .iter()
        .find(|u| u.entry && u.spills() && hot.contains(&u.name.as_str()))
    {
        Some(u) => Err(Error::HotKernelSpills {
            kernel: u.name.clone(),
            stores: u.spill_stores,
            loads: u.spill_loads,
            registers: u.registers.unwrap_or(0),
            table: table(usages, hot).trim_end().to_owned(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = include_str!("../tests/data/ptxas-v-sm90.txt");

    #[test]
    fn parses_captured_ptxas_output() {
        let u = parse_verbose(SAMPLE);
        let spilly = u.iter().find(|u| u.name == "oxccl_spilly").unwrap();
        assert!(spilly.entry);
        assert_eq!(spilly.registers, Some(255));
        assert_eq!(
            (spilly.stack_frame, spilly.spill_stores, spilly.spill_loads),
            (2192, 2288, 2784)
        );
        let add = u.iter().find(|u| u.name == "oxccl_add").unwrap();
        assert_eq!(
            *add,
            Usage {
                name: "oxccl_add".into(),
                entry: true,
                registers: Some(10),
                ..Usage::default()
            }
        );
        let f = u.iter().find(|u| u.name.ends_with("panic_bounds_check")).unwrap();
        assert!(!f.entry);
        assert_eq!(f.registers, None);
        assert_eq!(u.iter().filter(|u| u.entry).count(), 3);
    }

    #[test]
    fn hot_spills_fail_cold_spills_pass() {
        let u = parse_verbose(SAMPLE);
        check_hot(&u, &["oxccl_add", "oxccl_checked"]).unwrap();
        let e = check_hot(&u, &["oxccl_add", "oxccl_spilly"]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("hot kernel oxccl_spilly spills registers: 2288 bytes spill stores, 2784 bytes spill loads (255 registers)\n"),
            "{msg}"
        );
        assert!(msg.contains("* oxccl_spilly"), "{msg}");
        let t = table(&u, &["oxccl_spilly"]);
        assert!(t.contains("* oxccl_spilly"), "{t}");
        assert!(!t.contains("panic_bounds_check"), "{t}");
    }

    #[test]
    fn finds_ptxas_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a/ptxas"), dir.path().join("b/ptxas"));
        let missing = find_in(None, std::slice::from_ref(&a), None).unwrap();
        let Found::Missing(searched) = missing else {
            panic!("{missing:?}")
        };
        assert_eq!(searched, format!("$OXCCL_PTXAS, {}, PATH", a.display()));
        std::fs::create_dir_all(b.parent().unwrap()).unwrap();
        std::fs::write(&b, b"").unwrap();
        let on_path = Some(OsString::from(b.parent().unwrap()));
        assert_eq!(
            find_in(None, std::slice::from_ref(&a), on_path.clone()).unwrap(),
            Found::At(b.clone())
        );
        assert_eq!(
            find_in(Some(b.clone().into()), &[], None).unwrap(),
            Found::At(b.clone())
        );
        let e = find_in(Some(a.clone().into()), &[b], on_path).unwrap_err();
        assert!(matches!(e, Error::PtxasEnvInvalid { .. }), "{e}");
    }

    #[test]
    fn extracts_entry_names() {
        let ptx = "\t// .globl\toxccl_add // -- Begin function oxccl_add\n\
                   .func _RNvNtCs_4core9panicking9panic_fmt\n()\n.noreturn;\n\
                   .visible .entry oxccl_add(\n\t.param .u64 oxccl_add_param_0\n)\n\
                   .entry plain_kernel (\n.weak .entry weak_k()\n// .entry commented(\n";
        assert_eq!(ptx_entries(ptx), ["oxccl_add", "plain_kernel", "weak_k"]);
    }
}
