//! The cdylib through its C ABI: C programs (`tests/c/*.c`, C99 + pthreads, built with
//! `-Wall -Wextra -Werror` against `include/nccl.h` and linked with `-lnccl`) run on the CPU
//! backend (`OXCCL_BACKEND=cpu`), and the library's dynamic symbol table is checked against
//! `symbols.txt`.
//!
//! - `colls_threads` (1, 2, 3, 4 and 8 ranks as threads): every collective, operator and
//!   data type, in and out of place, counts 0 to 2^20 + 3, each element against a host
//!   reference;
//! - `init_all_group` (1, 2, 3, 4, 8): `ncclCommInitAll`, grouped collectives from one
//!   thread, `ncclCommSplit` (with `NCCL_SPLIT_NOCOLOR`), grouped `ncclCommInitRank`;
//! - `procs` (1 to 4 processes): ranks in forked processes, every collective;
//! - `shrink` (2, 3, 4): `ncclCommShrink` by the survivors while the excluded rank never
//!   calls, `NCCL_SHRINK_ABORT` of a collective stuck on it, non-blocking;
//! - `devapi` (1, 2, 3): `ncclCommQueryProperties`, `ncclMemAlloc`/`Free`,
//!   `ncclCommRegister`/`Deregister`, windows and their pointer getters, `ncclDevCommCreate`
//!   / `Destroy` with `NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER` and requirement helpers, the
//!   team helpers, each with its bad arguments;
//! - `misc_api` (1, 2, 3): `ncclCommInitRankScalable`, PreMulSum with host and device
//!   scalars, `ncclGroupSimulateEnd` (nothing launched), `ncclCommRevoke` on a live
//!   communicator;
//! - `config` (1, 2, 3): `ncclConfig_t` of the current, an older (2.17) and a newer caller,
//!   refused configs, non-blocking init/split/finalize;
//! - `bad_args`: exact error codes and last-error messages for bad arguments, never a crash;
//! - every name of `symbols.txt` and its `pnccl` twin is a defined function of the library,
//!   and no other `nccl*`/`pnccl*` symbol is exported (read with `nm -D`);
//! - the library's SONAME is `libnccl.so.2` (read from its ELF dynamic section here, and
//!   compared with `readelf -d` when binutils are installed), and `scripts/capi-lib.sh`,
//!   which adds the `libnccl.so.2` link next to it, exists and is executable.
//!
//! Integration tests of a cdylib crate do not get the cdylib built, so the first test that
//! needs it runs `cargo build -p oxccl-capi` with the profile (and target) this test was
//! built with; cargo does nothing when it is fresh. The programs are linked against it from
//! a temporary directory holding `libnccl.so` and `libnccl.so.2` (its SONAME) links, with
//! that directory as their rpath. Each run is killed after [`RUN_TIMEOUT`] (the programs'
//! own watchdogs fire first and say where they were).
//!
//! A test that needs a C compiler says "skipped: ..." and passes when there is none.

#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Wall-clock limit of one program run (their watchdogs: 60 s).
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

fn capi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
            "oxccl-capi-c-abi-{tag}-{}-{nanos}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The first of `$CC`, cc, gcc and clang that runs `--version`.
fn c_compiler() -> Option<String> {
    let from_env = std::env::var("CC").ok().filter(|s| !s.trim().is_empty());
    let cc = from_env
        .into_iter()
        .chain(["cc", "gcc", "clang"].iter().map(|s| s.to_string()))
        .find(|cc| {
            Command::new(cc)
                .arg("--version")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        });
    if cc.is_none() {
        println!("skipped: no C compiler ($CC, cc, gcc, clang) found");
    }
    cc
}

/// Where this test executable was built: `<target dir>[/<triple>]/<profile dir>/deps/`.
struct BuildDirs {
    /// `<target dir>[/<triple>]/<profile dir>`: where cargo puts `libnccl.so`.
    profile_dir: PathBuf,
    target_dir: PathBuf,
    triple: Option<String>,
    /// The `--profile` this test was built with (`cargo test`: test; `--release`: release).
    profile: String,
}

fn build_dirs() -> BuildDirs {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the test executable's directory");
    let profile_dir = deps
        .parent()
        .unwrap_or_else(|| panic!("{} has no parent", deps.display()))
        .to_path_buf();
    let dir_name = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_string();
    let above = profile_dir.parent().expect("a target directory").to_path_buf();
    // The target directory holds CACHEDIR.TAG; a `--target` build adds a triple directory.
    let (target_dir, triple) = if above.join("CACHEDIR.TAG").exists() {
        (above, None)
    } else {
        let triple = above.file_name().and_then(|n| n.to_str()).map(String::from);
        (above.parent().expect("a target directory").to_path_buf(), triple)
    };
    // `cargo test` builds with the test profile, whose directory is debug; every other
    // profile has its own directory name.
    let profile = match dir_name.as_str() {
        "debug" => "test".to_string(),
        other => other.to_string(),
    };
    BuildDirs {
        profile_dir,
        target_dir,
        triple,
        profile,
    }
}

/// The cdylib, built (or found fresh) by cargo once per test process.
fn cdylib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dirs = build_dirs();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(capi_dir())
            .args(["build", "-p", "oxccl-capi", "--profile", &dirs.profile])
            .arg("--target-dir")
            .arg(&dirs.target_dir);
        if let Some(t) = &dirs.triple {
            cmd.args(["--target", t]);
        }
        let started = Instant::now();
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cargo} to build the cdylib: {e}"));
        assert!(
            out.status.success(),
            "building the cdylib failed: {cmd:?}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = dirs.profile_dir.join("libnccl.so");
        assert!(
            lib.exists(),
            "{cmd:?} succeeded but {} does not exist",
            lib.display()
        );
        println!(
            "cdylib: {} (cargo build --profile {}: {:.1} s)",
            lib.display(),
            dirs.profile,
            started.elapsed().as_secs_f64()
        );
        lib
    })
}

/// A C program of `tests/c`, compiled and linked against the cdylib in its own temp dir.
struct Program {
    dir: TempDir,
    exe: PathBuf,
}

fn build_program(cc: &str, name: &str) -> Program {
    let lib = cdylib();
    let dir = TempDir::new(name);
    for link in ["libnccl.so", "libnccl.so.2"] {
        std::os::unix::fs::symlink(lib, dir.0.join(link)).unwrap_or_else(|e| panic!("symlink {link}: {e}"));
    }
    let src = capi_dir().join("tests/c").join(format!("{name}.c"));
    let exe = dir.0.join(name);
    let mut cmd = Command::new(cc);
    cmd.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-g"])
        .arg(format!("-I{}", capi_dir().join("include").display()))
        .arg(format!("-I{}", capi_dir().join("tests/c").display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", dir.0.display()))
        .arg("-lnccl")
        .arg(format!("-Wl,-rpath,{}", dir.0.display()))
        .arg("-pthread");
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "compiling {name}.c failed: {cmd:?}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Program { dir, exe }
}

/// What a run printed.
struct Output {
    stdout: String,
}

impl Program {
    /// Run with `args` on the CPU backend (plus `env`), killed after [`RUN_TIMEOUT`]; panics
    /// unless it exits 0.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let what = format!(
            "{} {}",
            self.exe.file_name().unwrap().to_string_lossy(),
            args.join(" ")
        );
        let mut cmd = Command::new(&self.exe);
        cmd.args(args)
            .current_dir(&self.dir.0)
            .env("OXCCL_BACKEND", "cpu")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a timeout kills forked children too.
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        let mut out_pipe = child.stdout.take().unwrap();
        let mut err_pipe = child.stderr.take().unwrap();
        let out_reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = out_pipe.read_to_end(&mut s);
            s
        });
        let err_reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = err_pipe.read_to_end(&mut s);
            s
        });
        let status = loop {
            if let Some(st) = child.try_wait().expect("waiting for the program") {
                break Some(st);
            }
            if started.elapsed() > RUN_TIMEOUT {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
        let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
        let elapsed = started.elapsed().as_secs_f64();
        match status {
            None => panic!(
                "{what}: timed out after {} s (killed)\nstdout:\n{stdout}\nstderr:\n{stderr}",
                RUN_TIMEOUT.as_secs()
            ),
            Some(st) if !st.success() => {
                panic!("{what}: {st} after {elapsed:.1} s\nstdout:\n{stdout}\nstderr:\n{stderr}")
            }
            Some(_) => {}
        }
        print!("{stdout}");
        println!("  ({what}: {elapsed:.1} s)");
        Output { stdout }
    }
}

/// Build `name` and run it with each rank count; each run must print its summary line,
/// `"{name}: {n} {unit}: ..."`, ending in OK.
fn run_ranks(name: &str, ranks: &[u32], unit: &str) {
    let Some(cc) = c_compiler() else { return };
    let prog = build_program(&cc, name);
    for n in ranks {
        let n = n.to_string();
        let out = prog.run(&[&n], &[]);
        let head = format!("{name}: {n} {unit}");
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&head) && l.contains("OK")),
            "{name} {n}: no \"{head}...OK\" summary in its output:\n{}",
            out.stdout
        );
    }
}

#[test]
fn colls_threads() {
    run_ranks("colls_threads", &[1, 2, 3, 4, 8], "ranks");
}

#[test]
fn init_all_group() {
    run_ranks("init_all_group", &[1, 2, 3, 4, 8], "ranks");
}

#[test]
fn procs() {
    run_ranks("procs", &[1, 2, 3, 4], "processes");
}

#[test]
fn shrink() {
    run_ranks("shrink", &[2, 3, 4], "ranks");
}

#[test]
fn devapi() {
    run_ranks("devapi", &[1, 2, 3], "ranks");
}

#[test]
fn misc_api() {
    run_ranks("misc_api", &[1, 2, 3], "ranks");
}

#[test]
fn config() {
    run_ranks("config", &[1, 2, 3], "ranks");
}

#[test]
fn bad_args() {
    let Some(cc) = c_compiler() else { return };
    let prog = build_program(&cc, "bad_args");
    // Every failing call logs a warning: keep the log to errors.
    let out = prog.run(&[], &[("NCCL_DEBUG", "ABORT")]);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("bad_args: ") && l.ends_with(" checks OK")),
        "no summary in bad_args' output:\n{}",
        out.stdout
    );
}

/// The names listed in symbols.txt.
fn listed_symbols() -> Vec<String> {
    let path = capi_dir().join("symbols.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

#[test]
fn exported_symbols_match_symbols_txt() {
    let lib = cdylib();
    let out = match Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            println!("skipped: cannot run nm ({e})");
            return;
        }
    };
    assert!(
        out.status.success(),
        "nm -D --defined-only {} failed:\n{}",
        lib.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // Lines are `ADDRESS TYPE NAME` (NAME possibly with @VERSION).
    let mut functions = BTreeSet::new();
    let mut nccl_names = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.split_whitespace().rev();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name).to_string();
        if name.starts_with("nccl") || name.starts_with("pnccl") {
            nccl_names.insert(name.clone());
        }
        if kind == "T" || kind == "W" || kind == "i" {
            functions.insert(name);
        }
    }
    let listed = listed_symbols();
    assert_eq!(listed.len(), 68, "symbols.txt lists 68 functions");
    let mut want = BTreeSet::new();
    for name in &listed {
        want.insert(name.clone());
        want.insert(format!("p{name}"));
    }
    let missing: Vec<_> = want.iter().filter(|n| !functions.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "{} does not define these functions of symbols.txt (or their pnccl twins): {missing:?}",
        lib.display()
    );
    let extra: Vec<_> = nccl_names.difference(&want).collect();
    assert!(
        extra.is_empty(),
        "{} exports nccl*/pnccl* symbols that symbols.txt does not list: {extra:?}",
        lib.display()
    );
    assert_eq!(nccl_names.len(), 136);
    println!(
        "{}: {} nccl*/pnccl* functions, as symbols.txt says",
        lib.display(),
        nccl_names.len()
    );
}

/// The `DT_SONAME` of a 64-bit little-endian ELF shared object, read from its dynamic
/// section (`None` if it has none, or the file is not such an ELF).
fn elf_soname(bytes: &[u8]) -> Option<String> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(bytes.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(bytes.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?));
    // e_ident: magic, ELFCLASS64 (2), ELFDATA2LSB (1).
    if bytes.get(0..4)? != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return None;
    }
    let shoff = u64_at(0x28)? as usize;
    let shentsize = u16_at(0x3a)? as usize;
    let shnum = u16_at(0x3c)? as usize;
    let section = |i: usize| -> Option<(u32, usize, usize, u32)> {
        let h = shoff + i * shentsize;
        // (sh_type, sh_offset, sh_size, sh_link)
        Some((
            u32_at(h + 4)?,
            u64_at(h + 0x18)? as usize,
            u64_at(h + 0x20)? as usize,
            u32_at(h + 0x28)?,
        ))
    };
    const SHT_DYNAMIC: u32 = 6;
    const DT_NULL: u64 = 0;
    const DT_SONAME: u64 = 14;
    let (_, off, size, link) = (0..shnum).filter_map(section).find(|s| s.0 == SHT_DYNAMIC)?;
    let (_, str_off, str_size, _) = section(link as usize)?;
    for e in (off..off + size).step_by(16) {
        let tag = u64_at(e)?;
        if tag == DT_NULL {
            break;
        }
        if tag == DT_SONAME {
            let at = u64_at(e + 8)? as usize;
            let strtab = bytes.get(str_off..str_off + str_size)?;
            let name = strtab.get(at..)?;
            let end = name.iter().position(|&b| b == 0)?;
            return Some(String::from_utf8_lossy(&name[..end]).into_owned());
        }
    }
    None
}

#[test]
fn soname_is_libnccl_so_2() {
    let lib = cdylib();
    let bytes = std::fs::read(lib).unwrap_or_else(|e| panic!("read {}: {e}", lib.display()));
    let soname = elf_soname(&bytes);
    assert_eq!(
        soname.as_deref(),
        Some("libnccl.so.2"),
        "{}: SONAME from the ELF dynamic section",
        lib.display()
    );
    match Command::new("readelf").arg("-d").arg(lib).output() {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let line = text.lines().find(|l| l.contains("(SONAME)"));
            assert!(
                line.is_some_and(|l| l.contains("[libnccl.so.2]")),
                "readelf -d {}: SONAME line {line:?}",
                lib.display()
            );
            println!(
                "{}: SONAME libnccl.so.2 (ELF dynamic section and readelf -d)",
                lib.display()
            );
        }
        _ => println!(
            "{}: SONAME libnccl.so.2 (ELF dynamic section; readelf not available to compare)",
            lib.display()
        ),
    }
    let script = capi_dir().join("../../scripts/capi-lib.sh");
    let meta = std::fs::metadata(&script).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    use std::os::unix::fs::PermissionsExt;
    assert!(
        meta.permissions().mode() & 0o111 != 0,
        "{} is not executable",
        script.display()
    );
}
