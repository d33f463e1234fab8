//! `Comm::init_rank` on the CPU backend: ranks meet through the TCP bootstrap (loopback), one
//! thread per rank; the resulting communicators run collectives checked against the host
//! reference. Ranks in other processes: `procs_cpu.rs`.

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
        ..Config::default()
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
