//! A cost model: how long one collective or send/recv would take, in microseconds, from the
//! tuner's choice for it. `ncclGroupSimulateEnd` reports it as `estimatedTime` for the
//! operations of a group it drops instead of launching.
//!
//! The model is deliberately simple: `time = alpha + bus_bytes / beta`, where
//! - `bus_bytes` is nccl-tests' bus traffic of the call for `n` ranks and `S` bytes (the
//!   per-rank count argument times the element size, as NCCL's API counts it): all-reduce
//!   `2 (n - 1) / n x S`; all-gather, reduce-scatter, all-to-all, gather and scatter
//!   `(n - 1) x S`; broadcast and reduce `S`; a send or receive `S`; and at least `S` (one
//!   rank still copies its data);
//! - `alpha` (latency, us) and `beta` (bandwidth, GB/s = bytes per ns) depend on the backend
//!   and on the tuner's algorithm and protocol ([`params`]): on the GPU they are rounded from
//!   the H200 runs in `benches/results/` (about 10 us per operation on two ranks; the
//!   classic kernels near the copy bandwidth, LL lines carrying half their bytes, staging
//!   copying every byte twice); on the CPU backend they are the order of magnitude of host
//!   threads on one machine.
//!
//! The estimate is for comparing groups and sizes, not a prediction of a given machine; the
//! symmetric kernels (buffers in registered windows) are costed as the classic ones.

use oxccl_device::abi::{
    COLL_ALL_GATHER, COLL_ALL_GATHER_V, COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_BROADCAST, COLL_GATHER,
    COLL_REDUCE, COLL_REDUCE_SCATTER, COLL_SCATTER,
};

use super::tuner::{Algo, Choice, Proto};
use crate::backend::BackendKind;

/// Latency (us) and bandwidth (GB/s) of one algorithm/protocol on one backend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub alpha_us: f64,
    pub beta_gbps: f64,
}

/// The model's constants (see the module documentation).
pub fn params(backend: BackendKind, algo: Algo, proto: Proto) -> Params {
    let (alpha_us, beta_gbps) = match (backend, algo, proto) {
        (BackendKind::Gpu, Algo::Direct, Proto::Ll) => (6.0, 100.0),
        (BackendKind::Gpu, Algo::Direct, Proto::Simple) => (10.0, 400.0),
        (BackendKind::Gpu, Algo::Staged, _) => (20.0, 200.0),
        (BackendKind::Cpu, Algo::Direct, Proto::Ll) => (30.0, 2.0),
        (BackendKind::Cpu, Algo::Direct, Proto::Simple) => (50.0, 4.0),
        (BackendKind::Cpu, Algo::Staged, _) => (100.0, 2.0),
    };
    Params { alpha_us, beta_gbps }
}

/// nccl-tests' bus bytes of collective `coll` (a `COLL_*` id) of `bytes` per rank (see the
/// module documentation), at least `bytes`.
pub fn bus_bytes(coll: u32, nranks: u32, bytes: u64) -> f64 {
    let (n, s) = (nranks.max(1) as f64, bytes as f64);
    let b = match coll {
        COLL_ALL_REDUCE => 2.0 * (n - 1.0) / n * s,
        COLL_ALL_GATHER | COLL_REDUCE_SCATTER | COLL_ALL_TO_ALL | COLL_GATHER | COLL_SCATTER
        | COLL_ALL_GATHER_V => (n - 1.0) * s,
        COLL_BROADCAST | COLL_REDUCE => s,
        _ => s,
    };
    b.max(s)
}

fn time_us(p: Params, bus: f64) -> f64 {
    // bytes / (GB/s) = ns; / 1000 = us.
    p.alpha_us + bus / p.beta_gbps / 1000.0
}

/// Microseconds of collective `coll` of `bytes` per rank on `nranks` ranks with the tuner's
/// `choice`, on `backend`.
pub fn collective_us(backend: BackendKind, coll: u32, nranks: u32, bytes: u64, choice: Choice) -> f64 {
    time_us(
        params(backend, choice.algo, choice.proto),
        bus_bytes(coll, nranks, bytes),
    )
}

/// Microseconds of one send or receive of `bytes` (through the staging buffers when the
/// communicator spans processes), on `backend`.
pub fn p2p_us(backend: BackendKind, bytes: u64, spanning: bool) -> f64 {
    let algo = if spanning { Algo::Staged } else { Algo::Direct };
    time_us(params(backend, algo, Proto::Simple), bytes as f64)
}

/// The time of a group: the operations of one communicator rank run one after the other
/// (one stream), the ranks in parallel, so the group takes the longest rank's sum. `ops` are
/// `(rank key, us)` pairs; an empty group takes 0.
pub fn group_us(ops: &[(u64, f64)]) -> f64 {
    let mut per: Vec<(u64, f64)> = Vec::new();
    for &(k, t) in ops {
        match per.iter_mut().find(|p| p.0 == k) {
            Some(p) => p.1 += t,
            None => per.push((k, t)),
        }
    }
    per.iter().map(|p| p.1).fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_device::abi::{ALGO_LL, ALGO_ONE_SHOT};

    fn simple() -> Choice {
        Choice {
            algo: Algo::Direct,
            proto: Proto::Simple,
            kernel_algo: ALGO_ONE_SHOT,
        }
    }

    #[test]
    fn bus_bytes_follow_nccl_tests() {
        assert_eq!(bus_bytes(COLL_ALL_REDUCE, 4, 1000), 1500.0);
        assert_eq!(bus_bytes(COLL_ALL_GATHER, 4, 1000), 3000.0);
        assert_eq!(bus_bytes(COLL_BROADCAST, 8, 1000), 1000.0);
        // One rank still copies its bytes.
        assert_eq!(bus_bytes(COLL_ALL_REDUCE, 1, 1000), 1000.0);
    }

    #[test]
    fn estimates_grow_with_size_and_include_latency() {
        let gpu = BackendKind::Gpu;
        let small = collective_us(gpu, COLL_ALL_REDUCE, 8, 8, simple());
        let large = collective_us(gpu, COLL_ALL_REDUCE, 8, 1 << 30, simple());
        assert!((10.0..11.0).contains(&small), "{small}");
        // 2 * 7/8 GiB at 400 GB/s: about 4.7 ms.
        assert!((large - 10.0 - 2.0 * 7.0 / 8.0 * (1u64 << 30) as f64 / 400e3).abs() < 1e-6);
        let ll = Choice {
            algo: Algo::Direct,
            proto: Proto::Ll,
            kernel_algo: ALGO_LL,
        };
        assert!(collective_us(gpu, COLL_ALL_REDUCE, 2, 256, ll) < small);
        assert!(p2p_us(BackendKind::Cpu, 1 << 20, true) > p2p_us(BackendKind::Cpu, 1 << 20, false));
    }

    #[test]
    fn a_group_takes_its_longest_rank() {
        assert_eq!(group_us(&[]), 0.0);
        assert_eq!(group_us(&[(1, 5.0), (2, 7.0), (1, 4.0)]), 9.0);
    }
}
