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

/// A rank dropped right after its own LL all-reduce finished, while its peers' kernels may
/// still store into its inbox (a block of a peer that carries no line still stores its
/// entry-barrier arrival): the inbox stays alive until those peers are dropped too. Before
/// in-process peers held each other's inboxes, about one round in 40 stored into freed
/// memory (a segmentation fault on the CPU backend).
#[test]
fn a_rank_dropped_right_after_its_all_reduce_leaves_its_peers_memory_to_finish() {
    let n = 3u32;
    let cfg = Config {
        proto: Some("LL".into()),
        ..comm_config()
    };
    for round in 0..60 {
        let (id, root) = UniqueId::with_config(Some(LO), &boot_config()).unwrap();
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let cfg = cfg.clone();
                std::thread::spawn(move || -> oxccl::Result<i32> {
                    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
                    let c = Comm::init_rank_with(b.clone(), n, &id, r, 0, cfg, &boot_config())?;
                    let s = b.create_stream(0)?;
                    let buf = b.alloc(0, 8)?;
                    b.upload(0, buf, &(r as i32 + 1).to_le_bytes())?;
                    // SAFETY: `buf` holds one i32, in place.
                    unsafe { c.all_reduce_raw(buf, buf, 1, DataType::I32, oxccl::Op::Sum, &s)? };
                    b.synchronize(&s)?;
                    let mut out = [0u8; 4];
                    b.download(0, &mut out, buf)?;
                    // Dropped at once, without waiting for the peers.
                    drop(c);
                    // SAFETY: our buffer; our stream is idle.
                    unsafe { b.free(0, buf, 8) };
                    Ok(i32::from_le_bytes(out))
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            let got = h
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round} rank {r}: {e}"));
            assert_eq!(got, 6, "round {round} rank {r}");
        }
        root.wait().unwrap();
    }
}
