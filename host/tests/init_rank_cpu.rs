//! `Comm::init_rank` on the CPU backend: ranks meet through the TCP bootstrap (loopback), one
//! thread per rank; the resulting communicators run collectives checked against the host
//! reference. Ranks in another process are reported as unreachable, naming them.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use oxccl::backend::cpu::CpuBackend;
use oxccl::bootstrap::{self, UniqueId};
use oxccl::harness::{check_all_reduce, Case, Ranks};
use oxccl::{Backend, Comm, Config, DataType, Error, RedOp};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn boot_config() -> bootstrap::Config {
    bootstrap::Config::default().with_timeout(Duration::from_secs(20))
}

fn comm_config() -> Config {
    Config {
        timeout_ns: 60_000_000_000,
    }
}

fn init(n: u32, id: &UniqueId, rank: u32) -> oxccl::Result<Comm> {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    Comm::init_rank_with(b, n, id, rank, 0, comm_config(), &boot_config())
}

#[test]
fn ranks_as_threads_build_a_working_communicator() {
    for n in [1u32, 3, 5] {
        let (id, root) = UniqueId::with_config(Some(LO), &boot_config()).unwrap();
        let handles: Vec<_> = (0..n)
            .map(|r| std::thread::spawn(move || init(n, &id, r)))
            .collect();
        let comms: Vec<Comm> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        root.wait().unwrap();
        for (r, c) in comms.iter().enumerate() {
            assert_eq!((c.rank(), c.count()), (r as u32, n));
        }
        let ranks = Ranks::new(comms).unwrap();
        for (i, (dt, red)) in [
            (DataType::F32, RedOp::Sum),
            (DataType::Bf16, RedOp::Max),
            (DataType::I64, RedOp::Prod),
        ]
        .into_iter()
        .enumerate()
        {
            let case = Case {
                dtype: dt,
                red,
                count: 4099,
                in_place: i % 2 == 1,
                seed: i as u64,
            };
            check_all_reduce(&ranks, case).unwrap();
        }
    }
}

#[test]
fn bad_rank_is_an_error() {
    let (id, _root) = UniqueId::with_config(Some(LO), &boot_config()).unwrap();
    assert!(matches!(init(2, &id, 2), Err(Error::Init(_))));
}

const CHILD_ENV: &str = "OXCCL_INIT_RANK_TEST_CHILD";

/// Rank 1 in a child process: both ranks must report the other as unreachable.
#[test]
fn ranks_in_other_processes_are_reported() {
    if let Ok(hex) = std::env::var(CHILD_ENV) {
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let id = UniqueId::from_bytes(&bytes).unwrap();
        match init(2, &id, 1) {
            Err(Error::Unreachable { rank: 1, what }) if what.contains("[0]") => return,
            other => panic!("child: expected rank 0 reported unreachable, got {other:?}"),
        }
    }
    let (id, root) = UniqueId::with_config(Some(LO), &boot_config()).unwrap();
    let hex: String = id.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ranks_in_other_processes_are_reported",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, hex)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    match init(2, &id, 0) {
        Err(e @ Error::Unreachable { rank: 0, .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("[1]") && msg.contains("other processes"), "{msg}");
        }
        other => panic!("expected rank 1 reported unreachable, got {other:?}"),
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "child: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    root.wait().unwrap();
}
