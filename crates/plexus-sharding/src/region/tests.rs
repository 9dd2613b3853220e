use super::*;
use crate::lease::Stamp;

const LEASE: Duration = Duration::from_secs(9);

/// The hand-off in these tests.
const H: HandOffId = HandOffId(7);

fn me() -> Arc<str> {
    "tcp://198.51.100.1:4000".into()
}

fn other() -> Arc<str> {
    "tcp://198.51.100.2:4000".into()
}

fn id(n: u32) -> EntityId {
    EntityId::new(&n.to_string()).unwrap()
}

fn config() -> RegionConfig {
    RegionConfig {
        shards: 4,
        held_limit: 8,
        max_active: 100,
        passivate_after: Duration::from_secs(5),
        lease: LEASE,
    }
}

fn outputs(r: &mut Region<u32>) -> Vec<RegionOutput<u32>> {
    std::iter::from_fn(|| r.poll_output()).collect()
}

fn renew(seq: u64, hosted: &[ShardId]) -> RegionOutput<u32> {
    RegionOutput::Renew {
        seq,
        leased: seq > 0,
        hosted: hosted.to_vec(),
        echo: Stamp::NONE,
    }
}

fn shard(n: u32) -> ShardId {
    shard_of("cart", &id(n), 4)
}

/// A region of "cart" with its first lease granted at `t0`.
fn leased(t0: Instant) -> Region<u32> {
    let mut r = Region::new(me(), "cart".into(), config(), t0);
    assert_eq!(outputs(&mut r), [renew(0, &[])]);
    r.renewed(0, &[], t0);
    r
}

#[test]
fn messages_before_the_first_lease_wait_for_it() {
    let t0 = Instant::now();
    let mut r = Region::new(me(), "cart".into(), config(), t0);
    assert_eq!(outputs(&mut r), [renew(0, &[])]);
    r.send(id(1), 10, t0);
    assert_eq!(outputs(&mut r), [RegionOutput::AskHome(shard(1))]);
    r.home_is(shard(1), me(), t0);
    r.send(id(1), 11, t0);
    assert_eq!(outputs(&mut r), []);
    r.renewed(0, &[], t0);
    assert_eq!(
        outputs(&mut r),
        [
            RegionOutput::Activate(id(1)),
            RegionOutput::Deliver {
                id: id(1),
                message: 10
            },
            RegionOutput::Deliver {
                id: id(1),
                message: 11
            },
        ]
    );
}

#[test]
fn a_remote_home_gets_the_message_forwarded() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    r.home_is(shard(2), other(), t0);
    r.send(id(2), 5, t0);
    assert_eq!(
        outputs(&mut r),
        [RegionOutput::Forward {
            to: other(),
            id: id(2),
            message: 5
        }]
    );
}

#[test]
fn messages_to_a_stopping_entity_wait_and_restart_it() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    r.home_is(shard(1), me(), t0);
    r.send(id(1), 1, t0);
    outputs(&mut r);
    let idle = t0 + Duration::from_secs(5);
    r.handle_timeout(idle);
    let out = outputs(&mut r);
    assert!(out.contains(&RegionOutput::Passivate(id(1))), "{out:?}");
    r.send(id(1), 2, idle);
    assert_eq!(outputs(&mut r), []);
    r.entity_stopped(&id(1), idle);
    assert_eq!(
        outputs(&mut r),
        [
            RegionOutput::Activate(id(1)),
            RegionOutput::Deliver {
                id: id(1),
                message: 2
            },
        ]
    );
}

#[test]
fn the_old_home_stops_a_shard_after_every_marker_and_not_before() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    let s = shard(1);
    r.home_is(s, me(), t0);
    r.send(id(1), 1, t0);
    outputs(&mut r);
    // The coordinator begins: this region holds its own messages, its own
    // marker is in at once.
    r.begin_hand_off(s, me(), H, t0);
    assert_eq!(outputs(&mut r), [RegionOutput::HandOffAck(s, H)]);
    r.send(id(1), 2, t0);
    assert_eq!(outputs(&mut r), [], "held for the new home");
    r.hand_off(s, H, [me(), other()]);
    assert_eq!(outputs(&mut r), []);
    // A message the other region sent before its marker is still handled
    // here, ahead of this region's own held one.
    r.arrived(id(1), 3, t0);
    assert_eq!(
        outputs(&mut r),
        [RegionOutput::Deliver {
            id: id(1),
            message: 3
        }]
    );
    r.marker(&other(), s, H);
    assert_eq!(outputs(&mut r), [RegionOutput::Passivate(id(1))]);
    r.entity_stopped(&id(1), t0);
    assert_eq!(outputs(&mut r), [RegionOutput::ShardStopped(s, H)]);
    assert_eq!(r.homed().count(), 0);
    // Stopped here: what arrives now is routed, behind the held one, to
    // the new home once it is named.
    r.arrived(id(1), 4, t0);
    assert_eq!(outputs(&mut r), []);
    r.home_is(s, other(), t0);
    let forward = |message| RegionOutput::Forward {
        to: other(),
        id: id(1),
        message,
    };
    assert_eq!(outputs(&mut r), [forward(2), forward(4)]);
}

#[test]
fn a_message_forwarded_on_a_stale_route_is_routed_on() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    r.home_is(shard(2), other(), t0);
    r.arrived(id(2), 7, t0);
    assert_eq!(
        outputs(&mut r),
        [RegionOutput::Forward {
            to: other(),
            id: id(2),
            message: 7
        }]
    );
}

#[test]
fn a_marker_before_the_hand_off_is_kept() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    let s = shard(3);
    r.home_is(s, me(), t0);
    // A stale marker of another hand-off is not taken for this one's.
    r.marker(&other(), s, HandOffId(3));
    r.marker(&other(), s, H);
    r.hand_off(s, H, [other()]);
    assert_eq!(outputs(&mut r), [RegionOutput::ShardStopped(s, H)]);
}

#[test]
fn a_lost_lease_passivates_everything_and_holds_what_comes_after() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    r.home_is(shard(1), me(), t0);
    r.send(id(1), 1, t0);
    outputs(&mut r);
    // Renewals go out every third of the lease; none is answered.
    r.handle_timeout(t0 + LEASE / 3);
    assert_eq!(outputs(&mut r), [renew(1, &[shard(1)])]);
    assert!(r.poll_timeout() <= Some(t0 + LEASE));
    r.handle_timeout(t0 + LEASE);
    let out = outputs(&mut r);
    // Told (the operator's warning), with what it stops.
    assert!(
        out.contains(&RegionOutput::LeaseLapsed { active: 1 }),
        "{out:?}"
    );
    assert!(out.contains(&RegionOutput::Passivate(id(1))), "{out:?}");
    r.entity_stopped(&id(1), t0 + LEASE);
    // Held while no lease holds, up to the bound; refused beyond it.
    for n in 2..10 {
        r.send(id(1), n, t0 + LEASE);
    }
    r.send(id(1), 10, t0 + LEASE);
    assert_eq!(
        outputs(&mut r),
        [RegionOutput::Refuse {
            id: id(1),
            message: 10,
            error: EntityError::Unavailable
        }]
    );
    // Renewed: what waited is delivered, in order.
    let at = t0 + LEASE + Duration::from_secs(1);
    r.renew_now(at);
    let seq = outputs(&mut r)
        .iter()
        .find_map(|o| match o {
            RegionOutput::Renew { seq, .. } => Some(*seq),
            _ => None,
        })
        .unwrap();
    r.renewed(seq, &[], at);
    let delivered: Vec<u32> = outputs(&mut r)
        .into_iter()
        .filter_map(|o| match o {
            RegionOutput::Deliver { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, (2..10).collect::<Vec<_>>());
}

#[test]
fn a_downed_member_s_region_gives_up_its_shards() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    r.home_is(shard(1), me(), t0);
    r.send(id(1), 1, t0);
    outputs(&mut r);
    r.lose_lease(t0);
    let out = outputs(&mut r);
    assert!(out.contains(&RegionOutput::Passivate(id(1))), "{out:?}");
    // Its homes are asked for again: the coordinator moves them.
    assert!(out.contains(&RegionOutput::AskHome(shard(1))), "{out:?}");
    assert_eq!(r.homed().count(), 0);
}

#[test]
fn a_revoked_shard_is_given_up_before_the_lease_is_extended() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    r.home_is(shard(1), me(), t0);
    r.send(id(1), 1, t0);
    outputs(&mut r);
    r.handle_timeout(t0 + LEASE / 3);
    outputs(&mut r);
    r.renewed(1, &[shard(1)], t0 + LEASE / 3);
    let out = outputs(&mut r);
    assert_eq!(
        out,
        [
            RegionOutput::Passivate(id(1)),
            RegionOutput::AskHome(shard(1))
        ]
    );
    assert_eq!(r.homed().count(), 0);
}

#[test]
fn a_hand_off_of_a_shard_not_homed_here_is_answered_at_once() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    // Asked again after the first answer was lost.
    r.hand_off(shard(2), H, [me(), other()]);
    assert_eq!(outputs(&mut r), [RegionOutput::ShardStopped(shard(2), H)]);
}

#[test]
fn a_type_hosted_nowhere_has_its_messages_refused() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    r.send(id(1), 1, t0);
    r.send(id(1), 2, t0);
    assert_eq!(outputs(&mut r), [RegionOutput::AskHome(shard(1))]);
    r.no_home(shard(1));
    let refused: Vec<(u32, EntityError)> = outputs(&mut r)
        .into_iter()
        .filter_map(|o| match o {
            RegionOutput::Refuse { message, error, .. } => Some((message, error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        [(1, EntityError::NoRegion), (2, EntityError::NoRegion)]
    );
    // The next message asks again.
    r.send(id(1), 3, t0);
    assert_eq!(outputs(&mut r), [RegionOutput::AskHome(shard(1))]);
}

#[test]
fn a_full_buffer_refuses_the_message_with_its_shard() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    for n in 0..8 {
        r.send(id(1), n, t0);
    }
    outputs(&mut r);
    r.send(id(1), 8, t0);
    assert_eq!(
        outputs(&mut r),
        [RegionOutput::Refuse {
            id: id(1),
            message: 8,
            error: EntityError::Route(RouteError::HandOffBufferFull {
                shard: shard(1),
                limit: 8
            }),
        }]
    );
}

mod property {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Send(u32),
        Arrived(u32),
        Home(u32, bool),
        Begin(u32),
        Advance(u64),
        StopAll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u32..6).prop_map(Op::Send),
            3 => (0u32..6).prop_map(Op::Arrived),
            2 => (0u32..4, any::<bool>()).prop_map(|(s, mine)| Op::Home(s, mine)),
            1 => (0u32..4).prop_map(Op::Begin),
            1 => (0u64..4_000).prop_map(Op::Advance),
            1 => Just(Op::StopAll),
        ]
    }

    proptest! {
        /// Whatever the order of messages (sent here or forwarded here),
        /// homes, hand-offs, idleness and stops: each message ends up
        /// delivered, forwarded or refused exactly once, and each entity
        /// gets each sender's messages in the order they were sent.
        #[test]
        fn each_message_once_and_in_order_per_entity(ops in proptest::collection::vec(op(), 0..150)) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut r = leased(t0);
            let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
            let mut delivered: BTreeMap<EntityId, Vec<u32>> = BTreeMap::new();
            let mut running: BTreeSet<EntityId> = BTreeSet::new();
            let mut stopping: BTreeSet<EntityId> = BTreeSet::new();
            let mut next = 0u32;
            // Messages another region forwarded here (the other sender).
            let mut forwarded: BTreeSet<u32> = BTreeSet::new();
            let pump = |r: &mut Region<u32>,
                            seen: &mut BTreeMap<u32, u32>,
                            delivered: &mut BTreeMap<EntityId, Vec<u32>>,
                            running: &mut BTreeSet<EntityId>,
                            stopping: &mut BTreeSet<EntityId>,
                            now: Instant| {
                while let Some(o) = r.poll_output() {
                    match o {
                        RegionOutput::Deliver { id, message } => {
                            assert!(running.contains(&id), "delivered to {id}, not running");
                            *seen.entry(message).or_default() += 1;
                            delivered.entry(id).or_default().push(message);
                        }
                        RegionOutput::Forward { message, .. } | RegionOutput::Refuse { message, .. } => {
                            *seen.entry(message).or_default() += 1;
                        }
                        RegionOutput::Activate(id) => {
                            assert!(running.insert(id));
                        }
                        RegionOutput::Passivate(id) => {
                            assert!(running.remove(&id));
                            stopping.insert(id);
                        }
                        RegionOutput::Renew { seq, .. } => r.renewed(seq, &[], now),
                        _ => {}
                    }
                }
            };
            for op in ops {
                match op {
                    Op::Send(n) => {
                        r.send(id(n), next, now);
                        next += 1;
                    }
                    Op::Arrived(n) => {
                        r.arrived(id(n), next, now);
                        forwarded.insert(next);
                        next += 1;
                    }
                    Op::Home(s, mine) => r.home_is(ShardId(s), if mine { me() } else { other() }, now),
                    Op::Begin(s) => r.begin_hand_off(ShardId(s), me(), H, now),
                    Op::Advance(ms) => {
                        now += Duration::from_millis(ms);
                        r.handle_timeout(now);
                    }
                    Op::StopAll => {
                        for id in std::mem::take(&mut stopping) {
                            r.entity_stopped(&id, now);
                        }
                    }
                }
                pump(&mut r, &mut seen, &mut delivered, &mut running, &mut stopping, now);
            }
            // Every shard gets a home, every stop is reported: nothing is
            // left waiting.
            for round in 0..3 {
                for s in 0..4 {
                    r.home_is(ShardId(s), if round == 0 { me() } else { other() }, now);
                }
                pump(&mut r, &mut seen, &mut delivered, &mut running, &mut stopping, now);
                for id in std::mem::take(&mut stopping) {
                    r.entity_stopped(&id, now);
                }
                pump(&mut r, &mut seen, &mut delivered, &mut running, &mut stopping, now);
            }
            prop_assert_eq!(seen.len() as u32, next, "some message never came out");
            prop_assert!(seen.values().all(|&n| n == 1), "a message came out twice");
            // In order per sender: a forwarded message that came before
            // its sender's marker is handled here while this region's own
            // wait for the new home.
            for (id, messages) in delivered {
                for from_other in [false, true] {
                    let sent: Vec<u32> = messages
                        .iter()
                        .copied()
                        .filter(|m| forwarded.contains(m) == from_other)
                        .collect();
                    prop_assert!(sent.windows(2).all(|w| w[0] < w[1]), "{id}: {messages:?}");
                }
            }
        }
    }
}

/// Campaign seed 0: a `Home` the coordinator sent to this member's
/// previous life (before it saw it downed and re-homed the shard), held in
/// a link through a partition, reaches the region after its member was
/// downed and rejoined. Taken, it would host the shard beside its new home.
#[test]
fn a_home_meant_for_the_previous_life_is_not_taken() {
    let t0 = Instant::now();
    let mut r = leased(t0);
    let s = shard(1);
    r.home_is(s, me(), t0);
    r.send(id(1), 10, t0);
    assert!(outputs(&mut r).contains(&RegionOutput::Activate(id(1))));
    // Downed: everything stops.
    r.lose_lease(t0);
    r.entity_stopped(&id(1), t0);
    outputs(&mut r);
    // The stale `Home` arrives: not taken, the message waits for a home.
    let t1 = t0 + Duration::from_secs(1);
    r.home_is(s, me(), t1);
    r.send(id(1), 11, t1);
    let out = outputs(&mut r);
    assert!(
        !out.iter()
            .any(|o| matches!(o, RegionOutput::Activate(_) | RegionOutput::Deliver { .. })),
        "{out:?}"
    );
    assert_eq!(r.homed().count(), 0);
    // The new life's first renewal is answered: `Home`s are taken again.
    r.renew_now(t1);
    let seq = outputs(&mut r)
        .into_iter()
        .find_map(|o| match o {
            RegionOutput::Renew { seq, .. } => Some(seq),
            _ => None,
        })
        .expect("a renewal");
    r.renewed(seq, &[], t1);
    r.home_is(s, me(), t1);
    assert_eq!(
        outputs(&mut r),
        [
            RegionOutput::Activate(id(1)),
            RegionOutput::Deliver {
                id: id(1),
                message: 11
            },
        ]
    );
}

#[test]
fn an_old_home_that_does_not_host_the_shard_starts_nothing_for_the_hand_off() {
    // Campaign seed 1398: a region whose lease ran out held a message for
    // a shard it no longer hosted; the coordinator then moved the shard
    // away from it (it was the old home). The message went to the old
    // home, itself, and started the entity there, and the hand-off,
    // finding the shard not hosted, reported it stopped at once: the new
    // home started the entity a second time.
    let t0 = Instant::now();
    let mut r = leased(t0);
    r.send(id(1), 10, t0);
    r.send(id(1), 11, t0);
    assert_eq!(outputs(&mut r), [RegionOutput::AskHome(shard(1))]);
    r.begin_hand_off(shard(1), me(), H, t0);
    let out = outputs(&mut r);
    assert!(
        !out.iter()
            .any(|o| matches!(o, RegionOutput::Activate(_) | RegionOutput::Deliver { .. })),
        "{out:?}"
    );
    assert!(
        out.contains(&RegionOutput::HandOffAck(shard(1), H)),
        "{out:?}"
    );
    r.hand_off(shard(1), H, [me()]);
    assert_eq!(outputs(&mut r), [RegionOutput::ShardStopped(shard(1), H)]);
    // The new home gets them, in order.
    r.home_is(shard(1), other(), t0);
    assert_eq!(
        outputs(&mut r),
        [
            RegionOutput::Forward {
                to: other(),
                id: id(1),
                message: 10
            },
            RegionOutput::Forward {
                to: other(),
                id: id(1),
                message: 11
            }
        ]
    );
}
