//! Unit and property tests of the tuner and of the override parser.

use proptest::prelude::*;

use super::*;

const TH: Thresholds = Thresholds {
    ll_max: 65536,
    ll_threshold: 16384,
    oneshot_max: 65536,
};

fn call(coll: u32, bytes: u64, spanning: bool) -> Call {
    Call {
        coll,
        elem_size: 4,
        bytes,
        nranks: 4,
        spanning,
    }
}

fn ov(algo: Option<&str>, proto: Option<&str>) -> Overrides {
    Overrides::parse(algo, proto).unwrap_or_else(|e| panic!("{algo:?} {proto:?}: {e:?}"))
}

fn pick(c: Call, o: &Overrides) -> (Algo, Proto, u32) {
    let ch = choose(&c, &TH, o).expect("a choice");
    (ch.algo, ch.proto, ch.kernel_algo)
}

#[test]
fn auto_choice_by_size() {
    let o = Overrides::default();
    assert_eq!(
        pick(call(COLL_ALL_REDUCE, 1024, false), &o),
        (Algo::Direct, Proto::Ll, ALGO_LL)
    );
    assert_eq!(
        pick(call(COLL_ALL_REDUCE, 16384, false), &o),
        (Algo::Direct, Proto::Ll, ALGO_LL)
    );
    assert_eq!(
        pick(call(COLL_ALL_REDUCE, 16385, false), &o),
        (Algo::Direct, Proto::Simple, ALGO_ONE_SHOT)
    );
    assert_eq!(
        pick(call(COLL_ALL_REDUCE, 65537, false), &o),
        (Algo::Direct, Proto::Simple, ALGO_TWO_SHOT)
    );
    assert_eq!(
        pick(call(COLL_ALL_REDUCE, 1024, true), &o),
        (Algo::Direct, Proto::Ll, ALGO_LL)
    );
    assert_eq!(pick(call(COLL_ALL_REDUCE, 1 << 20, true), &o).0, Algo::Staged);
    assert_eq!(pick(call(COLL_BROADCAST, 8, false), &o).1, Proto::Simple);
    assert_eq!(pick(call(COLL_BROADCAST, 8, true), &o).0, Algo::Staged);
}

#[test]
fn threshold_is_capped_by_the_capacity() {
    let th = Thresholds {
        ll_max: 4096,
        ll_threshold: 1 << 30,
        oneshot_max: 65536,
    };
    let o = Overrides::default();
    assert_eq!(
        choose(&call(COLL_ALL_REDUCE, 4096, false), &th, &o)
            .unwrap()
            .proto,
        Proto::Ll
    );
    assert_eq!(
        choose(&call(COLL_ALL_REDUCE, 4097, false), &th, &o)
            .unwrap()
            .proto,
        Proto::Simple
    );
}

#[test]
fn forced_protocols_and_algorithms() {
    let ll = ov(None, Some("LL"));
    // LL above the threshold and above the capacity (run in pieces).
    assert_eq!(pick(call(COLL_ALL_REDUCE, 1 << 20, false), &ll).1, Proto::Ll);
    // A global list keeps Simple for collectives without LL.
    assert_eq!(pick(call(COLL_ALL_GATHER, 64, false), &ll).1, Proto::Simple);
    let simple = ov(None, Some("^ll"));
    assert_eq!(pick(call(COLL_ALL_REDUCE, 8, false), &simple).1, Proto::Simple);
    assert_eq!(pick(call(COLL_ALL_REDUCE, 8, true), &simple).0, Algo::Staged);
    let per = ov(None, Some("allreduce:simple;broadcast:simple"));
    assert_eq!(pick(call(COLL_ALL_REDUCE, 8, false), &per).1, Proto::Simple);
    let two = ov(Some("twoshot"), None);
    assert_eq!(
        pick(call(COLL_ALL_REDUCE, 1 << 20, false), &two),
        (Algo::Direct, Proto::Simple, ALGO_TWO_SHOT)
    );
    // twoshot names direct: LL (direct) stays allowed for small sizes.
    assert_eq!(pick(call(COLL_ALL_REDUCE, 8, false), &two).1, Proto::Ll);
    let not_one = ov(Some("^oneshot"), Some("simple"));
    assert_eq!(pick(call(COLL_ALL_REDUCE, 8, false), &not_one).2, ALGO_TWO_SHOT);
    let staged = ov(Some("allreduce:staged"), None);
    assert_eq!(pick(call(COLL_ALL_REDUCE, 8, true), &staged).0, Algo::Staged);
    let e = choose(&call(COLL_ALL_REDUCE, 8, false), &TH, &staged).unwrap_err();
    assert!(e.contains("leave no algorithm"), "{e}");
    // NCCL names oxccl lacks: excluding them changes nothing, and an entry allowing only
    // them is ignored (an environment set up for NCCL keeps working), also per collective.
    for (a, p) in [
        ("^ring,tree", "^LL128"),
        ("Ring", "LL128"),
        ("tree,ring;allreduce:nvls", "allreduce:ll128"),
    ] {
        let x = ov(Some(a), Some(p));
        assert_eq!(x.per, Overrides::default().per, "{a} {p}");
    }
    // Mixed with a name oxccl implements, the oxccl name restricts as usual.
    assert_eq!(ov(Some("ring,staged"), None).per, ov(Some("staged"), None).per);
}

#[test]
fn invalid_values_are_errors_naming_the_setting() {
    for (algo, proto, setting, needle) in [
        (Some("rong"), None, "NCCL_ALGO", "unknown algorithm"),
        (Some("^direct,staged"), None, "NCCL_ALGO", "leaves none"),
        (None, Some("ll129"), "NCCL_PROTO", "unknown protocol"),
        (None, Some("^ll,simple"), "NCCL_PROTO", "leaves no protocol"),
        (None, Some("broadcast:ll"), "NCCL_PROTO", "simple only"),
        (None, Some("allredcue:ll"), "NCCL_PROTO", "unknown collective"),
        (None, Some("allreduce:"), "NCCL_PROTO", "empty list"),
    ] {
        let (s, m) = Overrides::parse(algo, proto).expect_err("invalid");
        assert_eq!(s, setting, "{algo:?} {proto:?}");
        assert!(m.contains(needle), "{algo:?} {proto:?}: {m}");
    }
    assert!(Overrides::parse(Some(""), Some("  ")).unwrap().is_empty());
}

#[test]
fn table_lists_every_collective_and_the_thresholds() {
    let t = table(&TH, &Overrides::default(), 8, 4, 1 << 20);
    assert!(t.contains("OXCCL_LL_MAX_BYTES = 65536"));
    for (_, name) in COLLECTIVES {
        assert!(t.contains(name), "{name} missing:\n{t}");
    }
    assert!(t.contains("direct/ll"));
    assert!(t.contains("staged/simple"));
}

fn name_strategy() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "ll", "LL", "simple", "Simple", "ll128", "direct", "staged", "oneshot", "twoshot", "ring", "tree",
        "bogus",
    ])
    .prop_map(str::to_string)
}

fn value_strategy() -> impl Strategy<Value = String> {
    let coll = prop::option::of(prop::sample::select(vec![
        "allreduce",
        "broadcast",
        "all_gather",
        "reducescatter",
        "nope",
    ]));
    let entry =
        (coll, any::<bool>(), prop::collection::vec(name_strategy(), 1..4)).prop_map(|(c, ex, names)| {
            let list = format!("{}{}", if ex { "^" } else { "" }, names.join(","));
            match c {
                Some(c) => format!("{c}:{list}"),
                None => list,
            }
        });
    prop::collection::vec(entry, 1..4).prop_map(|v| v.join(";"))
}

proptest! {
    /// Whatever the overrides, parsing never panics, and a choice, when there is one, is a
    /// candidate of the communicator that the overrides allow, and is the same for the same
    /// call (ranks agree).
    #[test]
    fn choices_respect_the_overrides(
        algo in prop::option::of(value_strategy()),
        proto in prop::option::of(value_strategy()),
        coll in prop::sample::select(COLLECTIVES.map(|c| c.0).to_vec()),
        bytes in 0u64..(1 << 22),
        spanning in any::<bool>(),
    ) {
        let Ok(o) = Overrides::parse(algo.as_deref(), proto.as_deref()) else {
            return Ok(());
        };
        let c = call(coll, bytes, spanning);
        if let Ok(ch) = choose(&c, &TH, &o) {
            let a = o.allowed(coll);
            let algo_ok = match ch.algo { Algo::Direct => a.direct, Algo::Staged => a.staged };
            let proto_ok = match ch.proto { Proto::Ll => a.ll, Proto::Simple => a.simple };
            prop_assert!(algo_ok);
            prop_assert!(proto_ok);
            prop_assert!(ch.proto == Proto::Simple || coll == COLL_ALL_REDUCE);
            prop_assert!(!(spanning && ch.algo == Algo::Direct && ch.proto == Proto::Simple));
            prop_assert!(spanning || ch.algo != Algo::Staged);
            prop_assert_eq!(Ok(ch), choose(&c, &TH, &o));
        }
    }

    /// Without overrides every call has a choice, LL exactly up to the effective threshold.
    #[test]
    fn auto_always_chooses(bytes in 0u64..(1 << 24), spanning in any::<bool>()) {
        let ch = choose(&call(COLL_ALL_REDUCE, bytes, spanning), &TH, &Overrides::default()).unwrap();
        prop_assert_eq!(ch.proto == Proto::Ll, bytes <= TH.ll_threshold.min(TH.ll_max));
    }
}
