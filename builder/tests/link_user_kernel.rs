//! A user kernel links against the exported Device API bitcode (`ptx/oxccl_device.bc`) and
//! assembles: `llvm-link user_kernel.ll --only-needed oxccl_device.bc`, `llc` for sm_90,
//! then ptxas (found as the builder finds it). Also: the generated C header compiles and
//! declares every export. Needs the llvm-tools component (skipped with a message without
//! it; CI installs it) and a built `ptx/oxccl_device.bc` (`cargo run -p oxccl-builder`).

use std::path::{Path, PathBuf};
use std::process::Command;

use oxccl_builder::{header, nvptx, ptxas, toolchain::Toolchain, BITCODE_FILE, HEADER_FILE};

/// The user kernel's entry point (`builder/tests/data/user_kernel.ll`).
const USER_KERNEL: &str = "oxccl_user_sum";

fn workspace() -> PathBuf {
    oxccl_builder::default_workspace()
}

/// `$sysroot/lib/rustlib/<host>/bin`, or None (with a skip message) without llvm-link/llc.
fn llvm_bin() -> Option<PathBuf> {
    let tc = Toolchain::query(&workspace()).expect("query the rust toolchain");
    let bin = tc.host_bin();
    let exe = std::env::consts::EXE_SUFFIX;
    for tool in ["llvm-link", "llc"] {
        if !bin.join(format!("{tool}{exe}")).is_file() {
            eprintln!(
                "SKIPPED: {tool} not found in {} (install with `rustup component add llvm-tools`)",
                bin.display()
            );
            return None;
        }
    }
    Some(bin)
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\n{text}",
        out.status
    );
    text
}

/// Links `user` (IR text) with the exported bitcode and compiles it to PTX in `dir`.
fn link_and_compile(bin: &Path, user: &Path, bitcode: &Path, dir: &Path) -> PathBuf {
    let linked = dir.join("linked.bc");
    let ptx = dir.join("user.ptx");
    run(
        Command::new(bin.join("llvm-link"))
            .arg(user)
            .arg("--only-needed")
            .arg(bitcode)
            .arg("-o")
            .arg(&linked),
        "llvm-link of the user kernel with oxccl_device.bc",
    );
    run(
        Command::new(bin.join("llc"))
            .arg("-march=nvptx64")
            .arg(format!("-mcpu={}", nvptx::TARGET_CPU))
            .arg(format!("-mattr={}", nvptx::PTX_FEATURE))
            .arg(&linked)
            .arg("-o")
            .arg(&ptx),
        "llc of the linked user kernel",
    );
    ptx
}

#[test]
fn user_kernel_links_against_the_device_bitcode() {
    let Some(bin) = llvm_bin() else { return };
    let ws = workspace();
    let bitcode = ws.join("ptx").join(BITCODE_FILE);
    assert!(
        bitcode.is_file(),
        "{} missing: build it with `cargo run -p oxccl-builder`",
        bitcode.display()
    );
    let user = ws.join("builder/tests/data/user_kernel.ll");
    let dir = tempfile::tempdir().unwrap();
    let ptx_path = link_and_compile(&bin, &user, &bitcode, dir.path());
    let ptx = std::fs::read_to_string(&ptx_path).unwrap();
    assert_eq!(
        ptxas::ptx_entries(&ptx),
        [USER_KERNEL],
        "only the user kernel is an entry"
    );
    for f in [
        "oxccl_dev_lsa_rank",
        "oxccl_dev_lsa_size",
        "oxccl_dev_lsa_ptr",
        "oxccl_dev_local_ptr",
        "oxccl_dev_lsa_barrier_init",
        "oxccl_dev_lsa_barrier_sync",
        "oxccl_dev_lsa_barrier_end",
        "oxccl_dev_version",
    ] {
        assert!(
            ptx.lines()
                .any(|l| l.contains(".func") && l.contains(&format!("{f}("))),
            "{f} is not defined in the linked PTX"
        );
    }
    assert!(
        !ptx.contains(".extern"),
        "the linked PTX has unresolved functions"
    );
    // The barrier's protocol instructions came along with the library code.
    for ins in ["st.release.sys", "ld.acquire.sys"] {
        assert!(ptx.contains(ins), "linked PTX lacks {ins}");
    }
    match ptxas::find(&ws).unwrap() {
        ptxas::Found::At(p) => {
            let cubin = dir.path().join("user.cubin");
            let usage = ptxas::run(&p, &ptx_path, nvptx::TARGET_CPU, &cubin, 1)
                .unwrap_or_else(|e| panic!("ptxas rejected the linked user kernel: {e}"));
            assert!(
                usage.iter().any(|u| u.entry && u.name == USER_KERNEL),
                "{usage:?}"
            );
            assert!(cubin.is_file());
        }
        ptxas::Found::Missing(searched) => eprintln!(
            "SKIPPED ptxas step: ptxas not found (searched {searched}; install with scripts/setup-ptxas.sh)"
        ),
    }
}

#[test]
fn header_compiles_and_declares_every_export() {
    let h = header::generate().unwrap();
    for name in oxccl_device::api::export::EXPORTED {
        assert!(
            h.contains(&format!(" {name}(")),
            "{name} not declared in the header"
        );
    }
    let committed = workspace().join("ptx").join(HEADER_FILE);
    if let Ok(c) = std::fs::read_to_string(&committed) {
        assert!(
            c == h,
            "{} is stale: regenerate it with `cargo run -p oxccl-builder`",
            committed.display()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(HEADER_FILE), &h).unwrap();
    let c = dir.path().join("use.c");
    std::fs::write(
        &c,
        "#include \"oxccl_device.h\"\n\
         static OxcclDevCommRequirements reqs = OXCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;\n\
         uint32_t use(const OxcclDevComm* comm, OxcclLsaBarrierSession* s) {\n\
         \x20 uint32_t st = oxccl_dev_lsa_barrier_init(s, comm, OXCCL_COOP_BLOCK, 0);\n\
         \x20 if (st == OXCCL_DEV_SUCCESS) st = oxccl_dev_lsa_barrier_sync(s, OXCCL_MEMORY_ORDER_ACQ_REL);\n\
         \x20 oxccl_dev_lsa_barrier_end(s);\n\
         \x20 return st + reqs.version + (uint32_t)comm->resource.rank;\n\
         }\n",
    )
    .unwrap();
    for (cc, std) in [("cc", "-std=c11"), ("c++", "-std=c++11")] {
        let mut cmd = Command::new(cc);
        cmd.args(["-fsyntax-only", "-Wall", "-Wextra", "-Werror", std]);
        if cc == "c++" {
            cmd.args(["-x", "c++"]);
        }
        cmd.arg(&c);
        match cmd.output() {
            Err(e) => eprintln!("SKIPPED {cc} check of {HEADER_FILE}: cannot run {cc}: {e}"),
            Ok(out) => assert!(
                out.status.success(),
                "{cc} rejects {HEADER_FILE}:\n{}\n{h}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}

#[test]
fn bitcode_checks_pass_on_the_export_and_name_what_is_wrong() {
    let Some(bin) = llvm_bin() else { return };
    let bitcode = workspace().join("ptx").join(BITCODE_FILE);
    assert!(
        bitcode.is_file(),
        "{} missing: build it with `cargo run -p oxccl-builder`",
        bitcode.display()
    );
    oxccl_builder::export::check_bitcode(&bin, &bitcode).unwrap();
    // A library that lacks the exports and calls an undefined function.
    let dir = tempfile::tempdir().unwrap();
    let ll = dir.path().join("bad.ll");
    std::fs::write(
        &ll,
        "target triple = \"nvptx64-nvidia-cuda\"\n\
         declare i32 @missing_helper(i32)\n\
         define i32 @oxccl_dev_version() {\n  %v = call i32 @missing_helper(i32 1)\n  ret i32 %v\n}\n",
    )
    .unwrap();
    let bad = dir.path().join("bad.bc");
    run(
        Command::new(bin.join("llvm-as")).arg(&ll).arg("-o").arg(&bad),
        "llvm-as of a bad library",
    );
    let e = oxccl_builder::export::check_bitcode(&bin, &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not export every Device API function"), "{e}");
    assert!(e.contains("oxccl_dev_rank (absent)"), "{e}");
    assert!(!e.contains("oxccl_dev_version"), "{e}");
}
