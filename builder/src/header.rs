//! `ptx/oxccl_device.h`: the C header of the Device API exports (`oxccl_dev_*` of
//! `oxccl_device::api::export`), for kernels written in C/CUDA, LLVM IR or a DSL and linked
//! against `ptx/oxccl_device.bc`.
//!
//! Everything numeric in it is taken from the device crate compiled for the host: the
//! constants from `oxccl_device::api`, the struct sizes, alignments and field offsets from
//! `size_of` / `align_of` / `offset_of!` of the Rust types, so the header cannot drift from
//! the layouts (and `_Static_assert`s in it make a C compiler check the same numbers). The
//! prototypes are [`PROTOTYPES`]; [`generate`] fails unless they name exactly
//! `oxccl_device::api::export::EXPORTED`, in its order, and the builder checks them against
//! the LLVM signatures of the bitcode ([`crate::export::check_signatures`]). The output is
//! deterministic (no date, path or toolchain in it).

use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};

use oxccl_device::abi::{Header, ABI_VERSION, ERR_ABORTED, ERR_TIMEOUT};
use oxccl_device::api::abi::{
    DevComm, DevCommRequirements, Team, WindowDesc, DEVICE_API_VERSION, DEV_COMM_REQUIREMENTS_MAGIC,
    GIN_TYPE_NONE, WIN_COLL_SYMMETRIC, WIN_DEFAULT, WIN_STRICT_ORDERING,
};
use oxccl_device::api::coop::{COOP_BLOCK, COOP_THREAD, COOP_WARP};
use oxccl_device::api::error::{DEV_ERR_INVALID_ARGUMENT, DEV_SUCCESS};
use oxccl_device::api::export::{OxcclLsaBarrierSession, EXPORTED, LSA_BARRIER_SESSION_BYTES};
use oxccl_device::api::MemOrder;

use crate::error::{Error, Result};

/// One exported function's C prototype.
#[derive(Debug, Clone, Copy)]
pub struct Prototype {
    pub name: &'static str,
    /// C return type.
    pub ret: &'static str,
    /// `(C type, parameter name)`.
    pub params: &'static [(&'static str, &'static str)],
    /// One-line comment.
    pub doc: &'static str,
}

const COMM: (&str, &str) = ("const OxcclDevComm*", "comm");
const WIN: (&str, &str) = ("const OxcclWindow*", "win");
const TEAM: (&str, &str) = ("const OxcclTeam*", "team");
const SESSION: (&str, &str) = ("OxcclLsaBarrierSession*", "s");
const ORDER: (&str, &str) = ("uint32_t", "order");

/// The prototypes of every exported function, in `EXPORTED` order.
pub const PROTOTYPES: &[Prototype] = &[
    proto(
        "oxccl_dev_version",
        "uint32_t",
        &[],
        "OXCCL_DEVICE_API_VERSION of the linked library.",
    ),
    proto("oxccl_dev_rank", "uint32_t", &[COMM], "World rank."),
    proto("oxccl_dev_nranks", "uint32_t", &[COMM], "World size."),
    proto("oxccl_dev_lsa_rank", "uint32_t", &[COMM], "Rank in the LSA team."),
    proto("oxccl_dev_lsa_size", "uint32_t", &[COMM], "Size of the LSA team."),
    proto(
        "oxccl_dev_team_world",
        "void",
        &[COMM, ("OxcclTeam*", "out")],
        "The world team into *out.",
    ),
    proto(
        "oxccl_dev_team_lsa",
        "void",
        &[COMM, ("OxcclTeam*", "out")],
        "The LSA team into *out.",
    ),
    proto(
        "oxccl_dev_team_rail",
        "void",
        &[COMM, ("OxcclTeam*", "out")],
        "The rail team into *out.",
    ),
    proto(
        "oxccl_dev_team_rank_to_world",
        "uint32_t",
        &[COMM, TEAM, ("uint32_t", "r")],
        "World rank of team rank r.",
    ),
    proto(
        "oxccl_dev_team_world_to_rank",
        "int32_t",
        &[COMM, TEAM, ("uint32_t", "w")],
        "Team rank of world rank w, or -1 when w is not a member.",
    ),
    proto(
        "oxccl_dev_team_rank_to_lsa",
        "int32_t",
        &[COMM, TEAM, ("uint32_t", "r")],
        "LSA rank of team rank r, or -1 when it is not in this rank's LSA team.",
    ),
    proto(
        "oxccl_dev_team_peer",
        "uint32_t",
        &[TEAM, ("uint32_t", "k")],
        "Team rank k steps after this rank, cyclically.",
    ),
    proto(
        "oxccl_dev_local_ptr",
        "void*",
        &[WIN, ("uint64_t", "offset")],
        "This rank's byte offset of win.",
    ),
    proto(
        "oxccl_dev_lsa_ptr",
        "void*",
        &[WIN, ("uint64_t", "offset"), ("uint32_t", "lsa_peer")],
        "LSA peer lsa_peer's byte offset of win.",
    ),
    proto(
        "oxccl_dev_peer_ptr",
        "void*",
        &[COMM, WIN, ("uint64_t", "offset"), ("uint32_t", "world_peer")],
        "World peer world_peer's byte offset of win; NULL when not in the LSA team.",
    ),
    proto(
        "oxccl_dev_resource_ptr",
        "void*",
        &[COMM, ("uint64_t", "offset")],
        "This rank's byte offset of the resource window.",
    ),
    proto(
        "oxccl_dev_coop_thread_rank",
        "uint32_t",
        &[("uint32_t", "coop")],
        "The calling thread's rank in coop (OXCCL_COOP_*).",
    ),
    proto(
        "oxccl_dev_coop_size",
        "uint32_t",
        &[("uint32_t", "coop")],
        "Threads in coop.",
    ),
    proto(
        "oxccl_dev_coop_sync",
        "void",
        &[("uint32_t", "coop")],
        "Every thread of coop meets.",
    ),
    proto(
        "oxccl_dev_lsa_barrier_init",
        "uint32_t",
        &[SESSION, COMM, ("uint32_t", "coop"), ("uint32_t", "index")],
        "Start a session on LSA barrier index (every coop thread calls it): a status.",
    ),
    proto(
        "oxccl_dev_lsa_barrier_arrive",
        "void",
        &[SESSION, ORDER],
        "Arrive (order: OXCCL_MEMORY_ORDER_*).",
    ),
    proto(
        "oxccl_dev_lsa_barrier_wait",
        "uint32_t",
        &[SESSION, ORDER],
        "Wait for every LSA peer, with the communicator's timeout: a status.",
    ),
    proto(
        "oxccl_dev_lsa_barrier_wait_timeout",
        "uint32_t",
        &[SESSION, ORDER, ("uint64_t", "timeout_ns")],
        "Wait with timeout_ns (0 = never; aborts still end it): a status.",
    ),
    proto(
        "oxccl_dev_lsa_barrier_sync",
        "uint32_t",
        &[SESSION, ORDER],
        "Arrive, then wait: a status.",
    ),
    proto(
        "oxccl_dev_lsa_barrier_end",
        "void",
        &[SESSION],
        "End the session (every coop thread calls it; the coop meets): persists its epoch; *s is dead afterwards.",
    ),
];

const fn proto(
    name: &'static str,
    ret: &'static str,
    params: &'static [(&'static str, &'static str)],
    doc: &'static str,
) -> Prototype {
    Prototype {
        name,
        ret,
        params,
        doc,
    }
}

/// The LLVM IR type (nvptx64) a C type of the prototypes lowers to.
pub fn llvm_type(c: &str) -> &'static str {
    match c {
        "void" => "void",
        "uint32_t" | "int32_t" => "i32",
        "uint64_t" | "int64_t" => "i64",
        _ if c.ends_with('*') => "ptr",
        _ => "?",
    }
}

/// A field of a struct of the header.
struct Field {
    ctype: &'static str,
    name: &'static str,
    offset: usize,
    size: usize,
    align: usize,
}

/// A struct of the header, with its layout as Rust has it.
struct CStruct {
    name: &'static str,
    doc: &'static str,
    size: usize,
    align: usize,
    fields: Vec<Field>,
}

macro_rules! field {
    ($t:ty, $ctype:literal, $f:ident, $fty:ty) => {
        Field {
            ctype: $ctype,
            name: stringify!($f),
            offset: offset_of!($t, $f),
            size: size_of::<$fty>(),
            align: align_of::<$fty>(),
        }
    };
}

fn structs() -> Vec<CStruct> {
    vec![
        CStruct {
            name: "OxcclHeader",
            doc: "First fields of every versioned struct: its size and version as the writer knew them (OXCCL_DEVICE_API_VERSION in OxcclDevComm and OxcclWindow; OXCCL_ABI_VERSION in the kernels' argument structs).",
            size: size_of::<Header>(),
            align: align_of::<Header>(),
            fields: vec![
                field!(Header, "uint32_t", size, u32),
                field!(Header, "uint32_t", version, u32),
            ],
        },
        CStruct {
            name: "OxcclWindow",
            doc: "A registered window: LSA peer q's byte o is at local + (q - rank) * stride + o.",
            size: size_of::<WindowDesc>(),
            align: align_of::<WindowDesc>(),
            fields: vec![
                field!(WindowDesc, "OxcclHeader", header, Header),
                field!(WindowDesc, "uint64_t", local, u64),
                field!(WindowDesc, "uint64_t", stride, u64),
                field!(WindowDesc, "uint64_t", size, u64),
                field!(WindowDesc, "uint32_t", rank, u32),
                field!(WindowDesc, "uint32_t", nranks, u32),
                field!(WindowDesc, "uint32_t", flags, u32),
                field!(WindowDesc, "uint32_t", serial, u32),
            ],
        },
        CStruct {
            name: "OxcclDevCommRequirements",
            doc: "What a device communicator is asked for (initialize with OXCCL_DEV_COMM_REQUIREMENTS_INITIALIZER).",
            size: size_of::<DevCommRequirements>(),
            align: align_of::<DevCommRequirements>(),
            fields: vec![
                field!(DevCommRequirements, "uint64_t", size, u64),
                field!(DevCommRequirements, "uint32_t", magic, u32),
                field!(DevCommRequirements, "uint32_t", version, u32),
                field!(DevCommRequirements, "uint64_t", resource_bytes, u64),
                field!(DevCommRequirements, "uint32_t", lsa_barrier_count, u32),
                field!(DevCommRequirements, "uint32_t", barrier_count, u32),
                field!(DevCommRequirements, "uint32_t", gin_signal_count, u32),
                field!(DevCommRequirements, "uint32_t", gin_counter_count, u32),
                field!(DevCommRequirements, "uint32_t", lsa_multimem, u32),
                field!(DevCommRequirements, "uint32_t", reserved, u32),
            ],
        },
        CStruct {
            name: "OxcclDevComm",
            doc: "A device communicator (filled by the host, read by kernels).",
            size: size_of::<DevComm>(),
            align: align_of::<DevComm>(),
            fields: vec![
                field!(DevComm, "OxcclHeader", header, Header),
                field!(DevComm, "uint32_t", rank, u32),
                field!(DevComm, "uint32_t", nranks, u32),
                field!(DevComm, "uint32_t", lsa_rank, u32),
                field!(DevComm, "uint32_t", lsa_size, u32),
                field!(DevComm, "OxcclWindow", resource, WindowDesc),
                field!(DevComm, "uint64_t", lsa_barrier_offset, u64),
                field!(DevComm, "uint64_t", lsa_epoch_offset, u64),
                field!(DevComm, "uint32_t", lsa_barrier_count, u32),
                field!(DevComm, "uint32_t", gin_type, u32),
                field!(DevComm, "uint64_t", abort_flag, u64),
                field!(DevComm, "uint64_t", timeout_ns, u64),
            ],
        },
        CStruct {
            name: "OxcclTeam",
            doc: "A team: nranks ranks, this one rank, world ranks stride apart.",
            size: size_of::<Team>(),
            align: align_of::<Team>(),
            fields: vec![
                field!(Team, "uint32_t", nranks, u32),
                field!(Team, "uint32_t", rank, u32),
                field!(Team, "uint32_t", stride, u32),
            ],
        },
    ]
}

/// Checks that the fields of `s` tile it as a C compiler would lay them out: in order,
/// without overlap, each at its natural alignment (no implicit padding but the tail).
fn check_layout(s: &CStruct) -> Result<()> {
    let mut end: usize = 0;
    for f in &s.fields {
        let expected = end.next_multiple_of(f.align);
        if f.offset != expected {
            return Err(Error::HeaderLayout {
                detail: format!(
                    "{}.{} is at offset {}, C would place it at {expected}",
                    s.name, f.name, f.offset
                ),
            });
        }
        if f.offset < end {
            return Err(Error::HeaderLayout {
                detail: format!("{}.{} overlaps the field before it", s.name, f.name),
            });
        }
        end = f.offset + f.size;
    }
    if end.next_multiple_of(s.align) != s.size {
        return Err(Error::HeaderLayout {
            detail: format!("{}: fields end at {end}, size is {}", s.name, s.size),
        });
    }
    Ok(())
}

/// Checks that [`PROTOTYPES`] names exactly `names`, in order.
pub fn check_prototypes(names: &[&str]) -> Result<()> {
    let have: Vec<&str> = PROTOTYPES.iter().map(|p| p.name).collect();
    if have == names {
        return Ok(());
    }
    let missing = names
        .iter()
        .filter(|n| !have.contains(n))
        .map(|s| s.to_string())
        .collect();
    let extra = have
        .iter()
        .filter(|n| !names.contains(n))
        .map(|s| s.to_string())
        .collect();
    Err(Error::HeaderPrototypes { missing, extra })
}

/// The header text.
pub fn generate() -> Result<String> {
    check_prototypes(EXPORTED)?;
    let mut h = String::new();
    let w = &mut h;
    for line in [
        "/* oxccl_device.h: the oxccl Device API for kernels linked against oxccl_device.bc.",
        " * Generated by oxccl-builder from device/src/api (do not edit).",
        " *",
        " * Link: llvm-link user.bc --only-needed oxccl_device.bc -o linked.bc, then",
        " * llc -march=nvptx64 -mcpu=sm_90 linked.bc. Structs are passed by pointer (generic",
        " * address space); every function is a device function (none is a kernel). Waits",
        " * return OXCCL_DEV_SUCCESS, OXCCL_DEV_ERR_TIMEOUT or OXCCL_DEV_ERR_ABORTED; none traps. */",
    ] {
        let _ = writeln!(w, "{line}");
    }
    let _ = writeln!(w, "#ifndef OXCCL_DEVICE_H\n#define OXCCL_DEVICE_H\n");
    let _ = writeln!(w, "#include <stddef.h>\n#include <stdint.h>\n");
    let _ = writeln!(w, "#ifdef __cplusplus\nextern \"C\" {{\n#endif\n");
    let _ = writeln!(w, "#if defined(__cplusplus)\n#define OXCCL_STATIC_ASSERT(c, m) static_assert(c, m)\n#define OXCCL_ALIGNOF(t) alignof(t)\n#define OXCCL_ALIGNAS(n) alignas(n)\n#else\n#define OXCCL_STATIC_ASSERT(c, m) _Static_assert(c, m)\n#define OXCCL_ALIGNOF(t) _Alignof(t)\n#define OXCCL_ALIGNAS(n) _Alignas(n)\n#endif\n");
    let _ = writeln!(w, "/* Versions. */");
    define(w, "OXCCL_DEVICE_API_VERSION", DEVICE_API_VERSION as u64);
    define(w, "OXCCL_ABI_VERSION", ABI_VERSION as u64);
    let _ = writeln!(w, "\n/* Window flags (OxcclWindow.flags). */");
    define(w, "OXCCL_WIN_DEFAULT", WIN_DEFAULT as u64);
    define(w, "OXCCL_WIN_COLL_SYMMETRIC", WIN_COLL_SYMMETRIC as u64);
    define(w, "OXCCL_WIN_STRICT_ORDERING", WIN_STRICT_ORDERING as u64);
    let _ = writeln!(w, "\n/* GIN types (OxcclDevComm.gin_type). */");
    define(w, "OXCCL_GIN_TYPE_NONE", GIN_TYPE_NONE as u64);
    let _ = writeln!(w, "\n/* Coops (the coop arguments). */");
    define(w, "OXCCL_COOP_THREAD", COOP_THREAD as u64);
    define(w, "OXCCL_COOP_WARP", COOP_WARP as u64);
    define(w, "OXCCL_COOP_BLOCK", COOP_BLOCK as u64);
    let _ = writeln!(
        w,
        "\n/* Memory orders (the order arguments; cuda::std::memory_order values). */"
    );
    define(w, "OXCCL_MEMORY_ORDER_RELAXED", MemOrder::Relaxed as u64);
    define(w, "OXCCL_MEMORY_ORDER_ACQUIRE", MemOrder::Acquire as u64);
    define(w, "OXCCL_MEMORY_ORDER_RELEASE", MemOrder::Release as u64);
    define(w, "OXCCL_MEMORY_ORDER_ACQ_REL", MemOrder::AcqRel as u64);
    let _ = writeln!(w, "\n/* Statuses. */");
    define(w, "OXCCL_DEV_SUCCESS", DEV_SUCCESS as u64);
    define(w, "OXCCL_DEV_ERR_TIMEOUT", ERR_TIMEOUT as u64);
    define(w, "OXCCL_DEV_ERR_ABORTED", ERR_ABORTED as u64);
    define(
        w,
        "OXCCL_DEV_ERR_INVALID_ARGUMENT",
        DEV_ERR_INVALID_ARGUMENT as u64,
    );
    let _ = writeln!(w, "\n/* Device communicator requirements. */");
    define(
        w,
        "OXCCL_DEV_COMM_REQUIREMENTS_MAGIC",
        DEV_COMM_REQUIREMENTS_MAGIC as u64,
    );
    define(
        w,
        "OXCCL_LSA_BARRIER_SESSION_BYTES",
        LSA_BARRIER_SESSION_BYTES as u64,
    );
    let _ = writeln!(w);
    for s in structs() {
        check_layout(&s)?;
        let _ = writeln!(w, "/* {} */\ntypedef struct {} {{", s.doc, s.name);
        for f in &s.fields {
            let _ = writeln!(w, "  {} {}; /* offset {} */", f.ctype, f.name, f.offset);
        }
        let _ = writeln!(w, "}} {};", s.name);
        let _ = writeln!(
            w,
            "OXCCL_STATIC_ASSERT(sizeof({0}) == {1}, \"sizeof({0})\");",
            s.name, s.size
        );
        let _ = writeln!(
            w,
            "OXCCL_STATIC_ASSERT(OXCCL_ALIGNOF({0}) == {1}, \"alignof({0})\");",
            s.name, s.align
        );
        for f in &s.fields {
            let _ = writeln!(
                w,
                "OXCCL_STATIC_ASSERT(offsetof({0}, {1}) == {2}, \"offsetof({0}, {1})\");",
                s.name, f.name, f.offset
            );
        }
        let _ = writeln!(w);
    }
    let _ = writeln!(w, "typedef OxcclWindow OxcclWindowDesc;\n");
    let session = (
        "OxcclLsaBarrierSession",
        size_of::<OxcclLsaBarrierSession>(),
        align_of::<OxcclLsaBarrierSession>(),
    );
    let _ = writeln!(
        w,
        "/* Opaque storage of an LSA barrier session (a local variable of the caller):\n * oxccl_dev_lsa_barrier_init fills it, oxccl_dev_lsa_barrier_end persists its epoch. */"
    );
    let _ = writeln!(
        w,
        "typedef struct {0} {{\n  OXCCL_ALIGNAS({2}) unsigned char opaque[{1}];\n}} {0};",
        session.0, session.1, session.2
    );
    let _ = writeln!(
        w,
        "OXCCL_STATIC_ASSERT(sizeof({0}) == OXCCL_LSA_BARRIER_SESSION_BYTES, \"sizeof({0})\");\nOXCCL_STATIC_ASSERT(OXCCL_ALIGNOF({0}) == {1}, \"alignof({0})\");\n",
        session.0, session.2
    );
    let _ = writeln!(
        w,
        "/* Initializer of OxcclDevCommRequirements for nothing (NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER). */\n\
         #define OXCCL_DEV_COMM_REQUIREMENTS_INITIALIZER \\\n  {{ sizeof(OxcclDevCommRequirements), OXCCL_DEV_COMM_REQUIREMENTS_MAGIC, OXCCL_DEVICE_API_VERSION, 0, 0, 0, 0, 0, 0, 0 }}\n"
    );
    let _ = writeln!(w, "#if defined(__CUDACC__)\n#define OXCCL_DEVICE_FN __device__\n#else\n#define OXCCL_DEVICE_FN\n#endif\n");
    let _ = writeln!(
        w,
        "/* The exported functions (device functions of oxccl_device.bc). */"
    );
    for p in PROTOTYPES {
        let params = if p.params.is_empty() {
            "void".to_owned()
        } else {
            p.params
                .iter()
                .map(|(t, n)| format!("{t} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            w,
            "/* {} */\nOXCCL_DEVICE_FN {} {}({params});",
            p.doc, p.ret, p.name
        );
    }
    let _ = writeln!(
        w,
        "\n#ifdef __cplusplus\n}}\n#endif\n\n#endif /* OXCCL_DEVICE_H */"
    );
    Ok(h)
}

fn define(w: &mut String, name: &str, v: u64) {
    if v >= 0x100 {
        let _ = writeln!(w, "#define {name} 0x{v:x}u");
    } else {
        let _ = writeln!(w, "#define {name} {v}u");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prototypes_are_the_exports() {
        check_prototypes(EXPORTED).unwrap();
        let e = check_prototypes(&["oxccl_dev_version", "oxccl_dev_new"]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("oxccl_dev_new"), "{msg}");
        assert!(msg.contains("oxccl_dev_rank"), "{msg}");
    }

    #[test]
    fn header_is_deterministic_and_declares_everything() {
        let h = generate().unwrap();
        assert_eq!(h, generate().unwrap());
        for name in EXPORTED {
            assert!(h.contains(&format!(" {name}(")), "{name} not declared");
        }
        assert!(h.contains("#define OXCCL_DEVICE_API_VERSION 2u"), "{h}");
        assert!(
            h.contains("OXCCL_STATIC_ASSERT(sizeof(OxcclDevComm) == 112"),
            "{h}"
        );
        assert!(h.contains("offsetof(OxcclDevComm, abort_flag) == 96"), "{h}");
    }

    #[test]
    fn every_c_type_has_an_llvm_type() {
        for p in PROTOTYPES {
            assert_ne!(llvm_type(p.ret), "?", "{}", p.name);
            for (t, _) in p.params {
                assert_ne!(llvm_type(t), "?", "{}: {t}", p.name);
            }
        }
    }
}
