use super::*;
use proptest::prelude::*;

fn region(n: u8) -> Arc<str> {
    format!("tcp://198.51.100.{n}:4000").into()
}

fn outputs<M>(r: &mut Routing<M>) -> Vec<RoutingOutput<M>> {
    std::iter::from_fn(|| r.poll_output()).collect()
}

#[test]
fn an_unknown_home_is_asked_once_and_its_messages_leave_in_order() {
    let mut r = Routing::new(8);
    let s = ShardId(3);
    assert_eq!(r.route(s, 1), Ok(Routed::Held));
    assert_eq!(r.route(s, 2), Ok(Routed::Held));
    assert_eq!(outputs(&mut r), [RoutingOutput::AskHome(s)]);
    r.home_is(s, region(1));
    assert_eq!(
        outputs(&mut r),
        [
            RoutingOutput::Send(region(1), 1),
            RoutingOutput::Send(region(1), 2)
        ]
    );
    assert_eq!(r.route(s, 3), Ok(Routed::To(region(1), 3)));
}

#[test]
fn a_hand_off_marks_the_old_home_and_holds_until_the_new_one() {
    let mut r = Routing::new(8);
    let s = ShardId(0);
    r.home_is(s, region(1));
    assert_eq!(r.route(s, 1), Ok(Routed::To(region(1), 1)));
    r.begin_hand_off(s, region(1), HandOffId(1));
    assert_eq!(
        outputs(&mut r),
        [
            RoutingOutput::Marker {
                shard: s,
                to: region(1),
                handoff: HandOffId(1),
            },
            RoutingOutput::HandOffAck(s, HandOffId(1))
        ]
    );
    assert_eq!(r.route(s, 2), Ok(Routed::Held));
    r.home_is(s, region(2));
    assert_eq!(outputs(&mut r), [RoutingOutput::Send(region(2), 2)]);
}

#[test]
fn a_full_buffer_refuses_with_the_shard_and_the_bound() {
    let mut r = Routing::new(2);
    let s = ShardId(1);
    r.route(s, 1).unwrap();
    r.route(s, 2).unwrap();
    assert_eq!(
        r.route(s, 3),
        Err((RouteError::HandOffBufferFull { shard: s, limit: 2 }, 3))
    );
    assert_eq!(r.held(s), 2);
}

#[test]
fn a_gone_region_s_shards_are_asked_for_again() {
    let mut r = Routing::new(8);
    r.home_is(ShardId(0), region(1));
    r.home_is(ShardId(1), region(2));
    r.region_gone(&region(1));
    assert_eq!(outputs(&mut r), [RoutingOutput::AskHome(ShardId(0))]);
    assert_eq!(r.route(ShardId(0), 7), Ok(Routed::Held));
    assert_eq!(r.route(ShardId(1), 8), Ok(Routed::To(region(2), 8)));
}

#[test]
fn the_old_home_stops_after_every_marker_or_departure() {
    let mut wait = MarkerWait::new(ShardId(4), HandOffId(1), [region(1), region(2), region(3)]);
    assert!(!wait.marker(&region(1)));
    assert!(!wait.marker(&region(1)), "a marker counts once");
    assert!(!wait.region_gone(&region(3)));
    assert!(wait.marker(&region(2)));
    assert_eq!(wait.shard(), ShardId(4));
}

#[derive(Debug, Clone)]
enum Op {
    Route(u32),
    Home(u32, u8),
    Begin(u32),
    Gone(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..4).prop_map(Op::Route),
        2 => (0u32..4, 0u8..3).prop_map(|(s, r)| Op::Home(s, r)),
        1 => (0u32..4).prop_map(Op::Begin),
        1 => (0u8..3).prop_map(Op::Gone),
    ]
}

proptest! {
    /// Every message routed is handed on once or refused, and each shard's
    /// messages are handed on in the order they were routed, through
    /// unknown homes, hand-offs and departures in any order.
    #[test]
    fn each_message_once_and_in_order_per_shard(ops in proptest::collection::vec(op(), 0..200)) {
        let mut r: Routing<(u32, u64)> = Routing::new(16);
        let mut next = 0u64;
        let mut handed: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut routed: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let take = |r: &mut Routing<(u32, u64)>, handed: &mut BTreeMap<u32, Vec<u64>>| {
            while let Some(o) = r.poll_output() {
                if let RoutingOutput::Send(_, (s, n)) = o {
                    handed.entry(s).or_default().push(n);
                }
            }
        };
        for op in ops {
            match op {
                Op::Route(s) => {
                    next += 1;
                    match r.route(ShardId(s), (s, next)) {
                        Ok(Routed::To(_, (s2, n))) => {
                            prop_assert_eq!(s2, s);
                            routed.entry(s).or_default().push(n);
                            handed.entry(s).or_default().push(n);
                        }
                        Ok(Routed::Held) => routed.entry(s).or_default().push(next),
                        Err((RouteError::HandOffBufferFull { .. }, (s2, n))) => {
                            prop_assert_eq!((s2, n), (s, next));
                            prop_assert_eq!(r.held(ShardId(s)), 16);
                        }
                    }
                }
                Op::Home(s, n) => r.home_is(ShardId(s), region(n)),
                Op::Begin(s) => r.begin_hand_off(ShardId(s), region(1), HandOffId(1)),
                Op::Gone(n) => r.region_gone(&region(n)),
            }
            take(&mut r, &mut handed);
        }
        // Name a home for every shard: whatever is held leaves.
        for s in 0..4 {
            r.home_is(ShardId(s), region(9));
        }
        take(&mut r, &mut handed);
        prop_assert_eq!(handed, routed);
    }
}
