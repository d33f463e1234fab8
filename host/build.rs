//! Embeds `ptx/oxccl.sm_90.cubin` only when its stamp matches the PTX being embedded, so a
//! cubin left over from older device code is never loaded (the PTX is then JIT-compiled).

use std::path::Path;

fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn main() {
    let ptx_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ptx");
    let (ptx, cubin, stamp) = (
        ptx_dir.join("oxccl.ptx"),
        ptx_dir.join("oxccl.sm_90.cubin"),
        ptx_dir.join("oxccl.sm_90.cubin.ptxhash"),
    );
    for p in [&ptx, &cubin, &stamp] {
        println!("cargo::rerun-if-changed={}", p.display());
    }
    println!("cargo::rustc-check-cfg=cfg(oxccl_cubin)");
    let fresh = match (
        std::fs::read(&ptx),
        std::fs::read_to_string(&stamp),
        cubin.exists(),
    ) {
        (Ok(p), Ok(s), true) => format!("{:016x}", fnv1a64(&p)) == s.trim(),
        _ => false,
    };
    if fresh {
        println!("cargo::rustc-cfg=oxccl_cubin");
    } else if cubin.exists() {
        println!("cargo::warning=ptx/oxccl.sm_90.cubin is stale (made from other PTX): not embedded; run the builder with ptxas to refresh it");
    }
}
