//! The all-reduce on the CPU backend (the same device code the GPU runs), against the host
//! reference: random sizes, rank counts, data types, operators, in place and out of place.

use std::sync::Arc;

use oxccl::backend::cpu::CpuBackend;
use oxccl::harness::{check_all_reduce, Case, Ranks};
use oxccl::{Backend, Comm, Config, DataType, RedOp};
use proptest::prelude::*;

fn ranks(n: usize) -> Ranks {
    ranks_proto(n, None)
}

/// Ranks whose all-reduces use protocol `proto` (`NCCL_PROTO` syntax; `None`: the tuner's
/// choice, LL for the small sizes here).
fn ranks_proto(n: usize, proto: Option<&str>) -> Ranks {
    let b: Arc<dyn Backend> = Arc::new(CpuBackend::new());
    let cfg = Config {
        timeout_ns: 60_000_000_000,
        proto: proto.map(str::to_string),
        ..Config::default()
    };
    Ranks::new(Comm::init_all_with(b, &vec![0; n], cfg).expect("init_all")).expect("streams")
}

fn dtype() -> impl Strategy<Value = DataType> {
    prop::sample::select(DataType::ALL.to_vec())
}

fn red_op() -> impl Strategy<Value = RedOp> {
    prop::sample::select(RedOp::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random rank counts 1..=8, sizes 0..5000 elements, every dtype and operator.
    #[test]
    fn random_cases_match_reference(
        n in 1usize..=8,
        count in prop_oneof![0usize..40, 40usize..5000],
        dt in dtype(),
        red in red_op(),
        in_place in any::<bool>(),
        seed in any::<u64>(),
        simple in any::<bool>(),
    ) {
        let r = ranks_proto(n, simple.then_some("simple"));
        let checked = check_all_reduce(&r, Case { dtype: dt, red, count, in_place, seed });
        prop_assert!(checked.is_ok(), "{:?}", checked.err());
    }
}

/// Every data type x operator on 3 ranks, one odd size, both placements, with the Simple and
/// the LL protocol; then several back-to-back calls on the same communicator (epochs
/// advance, inboxes are reused).
#[test]
fn every_dtype_and_op() {
    for proto in ["simple", "ll"] {
        every_dtype_and_op_with(proto);
    }
}

fn every_dtype_and_op_with(proto: &str) {
    let r = ranks_proto(3, Some(proto));
    let mut seed = 10;
    for dt in DataType::ALL {
        for red in RedOp::ALL {
            for in_place in [false, true] {
                seed += 1;
                let c = Case {
                    dtype: dt,
                    red,
                    count: 1031,
                    in_place,
                    seed,
                };
                check_all_reduce(&r, c).unwrap_or_else(|e| panic!("{dt:?} {red:?} in_place={in_place}: {e}"));
            }
        }
    }
}

/// A few MiB with 8 ranks: two-shot, all blocks busy, ragged chunk ends.
#[test]
fn multi_mib_eight_ranks() {
    let r = ranks(8);
    for (dt, count) in [
        (DataType::F32, (3 << 20) / 4 + 7),
        (DataType::Bf16, (2 << 20) / 2 + 1),
    ] {
        check_all_reduce(
            &r,
            Case {
                dtype: dt,
                red: RedOp::Sum,
                count,
                in_place: false,
                seed: 5,
            },
        )
        .unwrap();
        check_all_reduce(
            &r,
            Case {
                dtype: dt,
                red: RedOp::Max,
                count,
                in_place: true,
                seed: 6,
            },
        )
        .unwrap();
    }
}
