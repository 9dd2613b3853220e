use super::*;
use crate::lease::Stamp;

const LEASE: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(2);

/// The first hand-off of a coordinator of epoch 0.
const H0: HandOffId = HandOffId(0);

/// The hand-off of the shard: in these tests the `n`th shard moved is
/// shard `n`, or it is the only one.
fn id(shard: u32) -> HandOffId {
    HandOffId(u64::from(shard))
}

fn region(n: u8) -> Arc<str> {
    format!("tcp://198.51.100.{n}:4000").into()
}

fn config(shards: u32) -> CoordinatorConfig {
    CoordinatorConfig {
        shards,
        lease: LEASE,
        margin: MARGIN,
        rebalance_every: Duration::from_secs(1),
        rebalance: Rebalance {
            threshold: 2,
            max_moves: 1,
        },
    }
}

fn outputs(c: &mut Coordinator) -> Vec<CoordinatorOutput> {
    std::iter::from_fn(|| c.poll_output()).collect()
}

fn home(to: Arc<str>, shard: u32, home: Arc<str>) -> CoordinatorOutput {
    CoordinatorOutput::Home {
        to,
        shard: ShardId(shard),
        home,
    }
}

/// Whether the coordinator told anyone a home.
fn answers_home(c: &mut Coordinator) -> bool {
    outputs(c)
        .iter()
        .any(|o| matches!(o, CoordinatorOutput::Home { .. }))
}

/// Both shards of two on region 0, which asked for them.
fn both_on_region_0(t0: Instant) -> (Coordinator, Instant) {
    let (mut c, now) = running(2, 1, t0);
    c.ask_home(region(0), ShardId(0), now);
    c.ask_home(region(0), ShardId(1), now);
    outputs(&mut c);
    (c, now)
}

/// The mark of an answer at `at` of a coordinator of epoch 0 started at
/// `t0`.
fn stamp_at(t0: Instant, at: Instant) -> Stamp {
    Stamp {
        epoch: 0,
        nanos: u64::try_from((at - t0).as_nanos()).unwrap() + 1,
    }
}

/// A coordinator whose start wait is over, with `regions` regions up.
fn running(shards: u32, regions: u8, t0: Instant) -> (Coordinator, Instant) {
    let mut c = Coordinator::new(config(shards), t0, 0);
    for r in 0..regions {
        c.region_up(region(r), t0);
    }
    // They all renew: a quorum from t0 on.
    for r in 0..regions {
        c.renew(region(r), 0, true, &[], Stamp::NONE, t0);
    }
    let now = t0 + 2 * LEASE + MARGIN;
    c.handle_timeout(now);
    outputs(&mut c);
    (c, now)
}

#[test]
fn a_new_coordinator_places_unreported_shards_only_after_old_leases_end() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(config(8), t0, 0);
    c.region_up(region(1), t0);
    c.renew(region(1), 0, true, &[ShardId(5)], Stamp::NONE, t0);
    outputs(&mut c);
    c.ask_home(region(1), ShardId(5), t0);
    c.ask_home(region(1), ShardId(6), t0);
    // A reported shard is answered at once; an unreported one may still be
    // hosted under an older coordinator's lease.
    assert_eq!(outputs(&mut c), [home(region(1), 5, region(1))]);
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    c.handle_timeout(t0 + 2 * LEASE + MARGIN - Duration::from_millis(1));
    assert!(!answers_home(&mut c));
    c.handle_timeout(t0 + 2 * LEASE + MARGIN);
    assert_eq!(outputs(&mut c), [home(region(1), 6, region(1))]);
}

#[test]
fn a_type_no_region_hosts_is_refused_a_lease_after_the_start() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(config(4), t0, 0);
    c.ask_home(region(7), ShardId(2), t0);
    assert_eq!(outputs(&mut c), []);
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    c.handle_timeout(t0 + LEASE);
    assert_eq!(
        outputs(&mut c),
        [CoordinatorOutput::NoHome {
            to: region(7),
            shard: ShardId(2),
        }]
    );
    // Asked again later: refused at once.
    c.ask_home(region(7), ShardId(3), t0 + LEASE);
    assert_eq!(outputs(&mut c).len(), 1);
}

#[test]
fn a_move_is_begun_everywhere_stopped_by_the_old_home_then_announced() {
    let t0 = Instant::now();
    let (mut c, now) = both_on_region_0(t0);
    c.region_up(region(1), now);
    c.handle_timeout(now + Duration::from_secs(1));
    let begun = outputs(&mut c);
    assert_eq!(
        begun,
        [
            CoordinatorOutput::BeginHandOff {
                to: region(0),
                shard: ShardId(0),
                from: region(0),
                handoff: H0,
            },
            CoordinatorOutput::BeginHandOff {
                to: region(1),
                shard: ShardId(0),
                from: region(0),
                handoff: H0,
            },
        ]
    );
    // Asked meanwhile: no answer until the move is done.
    c.ask_home(region(1), ShardId(0), now);
    c.hand_off_ack(&region(0), ShardId(0), id(0));
    assert_eq!(outputs(&mut c), []);
    c.hand_off_ack(&region(1), ShardId(0), id(0));
    assert_eq!(
        outputs(&mut c),
        [CoordinatorOutput::HandOff {
            to: region(0),
            shard: ShardId(0),
            regions: vec![region(0), region(1)],
            handoff: H0,
        }]
    );
    // Only the old home's word counts.
    c.shard_stopped(&region(1), ShardId(0), id(0), now);
    assert_eq!(outputs(&mut c), []);
    c.shard_stopped(&region(0), ShardId(0), id(0), now);
    assert_eq!(
        outputs(&mut c),
        [home(region(0), 0, region(1)), home(region(1), 0, region(1))]
    );
    assert_eq!(c.allocation().home(ShardId(0)), Some(&region(1)));
    assert_eq!(c.handoffs(), 0);
}

#[test]
fn a_leaving_region_hands_over_all_its_shards_at_once() {
    let t0 = Instant::now();
    let (mut c, now) = both_on_region_0(t0);
    c.region_up(region(1), now);
    c.region_leaving(&region(0));
    let begun = outputs(&mut c);
    let begins = |shard| {
        [region(0), region(1)]
            .map(|to| CoordinatorOutput::BeginHandOff {
                to,
                shard: ShardId(shard),
                from: region(0),
                handoff: HandOffId(u64::from(shard)),
            })
            .to_vec()
    };
    assert_eq!(begun, [begins(0), begins(1)].concat(), "past max_moves: 1");
    for shard in [0, 1] {
        for r in [0, 1] {
            c.hand_off_ack(&region(r), ShardId(shard), id(shard));
        }
    }
    outputs(&mut c);
    c.shard_stopped(&region(0), ShardId(0), id(0), now);
    let drained = CoordinatorOutput::Drained { to: region(0) };
    assert!(!outputs(&mut c).contains(&drained));
    c.shard_stopped(&region(0), ShardId(1), id(1), now);
    assert!(
        outputs(&mut c).contains(&drained),
        "told once it hosts nothing"
    );
    assert_eq!(c.allocation().home(ShardId(0)), Some(&region(1)));
    assert_eq!(c.allocation().home(ShardId(1)), Some(&region(1)));
    // Nothing goes back to it, by allocation or rebalance.
    c.handle_timeout(now + Duration::from_secs(5));
    assert_eq!(c.handoffs(), 0);
}

#[test]
fn a_renewal_reporting_a_shard_homed_elsewhere_revokes_it() {
    let t0 = Instant::now();
    let (mut c, now) = both_on_region_0(t0);
    c.region_up(region(1), now);
    c.renew(
        region(0),
        2,
        true,
        &[ShardId(0), ShardId(1)],
        Stamp::NONE,
        now,
    );
    outputs(&mut c);
    // Region 1 claims shard 0 (a stale report), and an unknown one after
    // the map was rebuilt: neither is its own.
    c.renew(
        region(1),
        3,
        true,
        &[ShardId(0), ShardId(1)],
        Stamp::NONE,
        now,
    );
    assert_eq!(
        outputs(&mut c),
        [CoordinatorOutput::Renewed {
            to: region(1),
            seq: 3,
            revoked: vec![ShardId(0), ShardId(1)],
            stamp: stamp_at(t0, now),
        }]
    );
    assert_eq!(c.allocation().home(ShardId(0)), Some(&region(0)));
}

#[test]
fn a_hand_off_waiting_on_a_lost_message_is_asked_again() {
    let t0 = Instant::now();
    let (mut c, now) = both_on_region_0(t0);
    c.region_up(region(1), now);
    c.handle_timeout(now + Duration::from_secs(1));
    outputs(&mut c);
    c.hand_off_ack(&region(0), ShardId(0), id(0));
    // Region 1's ack was lost: the next tick asks it again.
    c.handle_timeout(now + Duration::from_secs(2));
    assert!(outputs(&mut c).contains(&CoordinatorOutput::BeginHandOff {
        to: region(1),
        shard: ShardId(0),
        from: region(0),
        handoff: H0,
    }));
    c.hand_off_ack(&region(1), ShardId(0), id(0));
    outputs(&mut c);
    // Then the old home's answer was lost: asked again.
    c.handle_timeout(now + Duration::from_secs(3));
    assert!(outputs(&mut c).contains(&CoordinatorOutput::HandOff {
        to: region(0),
        shard: ShardId(0),
        regions: vec![region(0), region(1)],
        handoff: H0,
    }));
}

#[test]
fn a_coordinator_hearing_from_a_minority_renews_no_lease() {
    let t0 = Instant::now();
    let (mut c, now) = running(1, 3, t0);
    // Only region 0 asks (the others are cut off from it): not renewed.
    c.renew(region(0), 1, true, &[], Stamp::NONE, now);
    assert!(matches!(
        outputs(&mut c).as_slice(),
        [CoordinatorOutput::NotRenewed { seq: 1, .. }]
    ));
    // A second region within the lease makes a majority of three.
    c.renew(
        region(1),
        1,
        true,
        &[],
        Stamp::NONE,
        now + Duration::from_secs(1),
    );
    assert_eq!(outputs(&mut c).len(), 1);
    // Later, region 0's asks alone are renewed no more.
    let later = now + LEASE + Duration::from_secs(2);
    c.renew(region(0), 2, true, &[], Stamp::NONE, later);
    assert!(matches!(
        outputs(&mut c).as_slice(),
        [CoordinatorOutput::NotRenewed { seq: 2, .. }]
    ));
}

#[test]
fn a_crashed_region_s_shards_wait_for_its_lease_and_the_margin() {
    let t0 = Instant::now();
    let (mut c, now) = running(1, 2, t0);
    c.ask_home(region(0), ShardId(0), now);
    assert_eq!(outputs(&mut c), [home(region(0), 0, region(0))]);
    let renewed = now + Duration::from_secs(3);
    c.renew(region(1), 1, true, &[], Stamp::NONE, renewed);
    outputs(&mut c);
    c.renew(region(0), 7, true, &[ShardId(0)], Stamp::NONE, renewed);
    assert_eq!(
        outputs(&mut c),
        [CoordinatorOutput::Renewed {
            to: region(0),
            seq: 7,
            revoked: vec![],
            stamp: stamp_at(t0, renewed),
        }]
    );
    c.region_gone(&region(0), renewed + Duration::from_secs(1));
    c.ask_home(region(1), ShardId(0), renewed + Duration::from_secs(1));
    assert_eq!(outputs(&mut c), []);
    assert_eq!(c.poll_timeout(), Some(now + Duration::from_secs(1)));
    c.handle_timeout(renewed + LEASE + MARGIN - Duration::from_millis(1));
    assert!(!answers_home(&mut c));
    c.handle_timeout(renewed + LEASE + MARGIN);
    assert_eq!(outputs(&mut c), [home(region(1), 0, region(1))]);
}

#[test]
fn a_hand_off_from_a_region_that_crashes_waits_for_its_lease() {
    let t0 = Instant::now();
    let (mut c, now) = both_on_region_0(t0);
    // Region 0 hosts them under a lease renewed now.
    c.renew(
        region(0),
        1,
        true,
        &[ShardId(0), ShardId(1)],
        Stamp::NONE,
        now,
    );
    c.region_up(region(1), now);
    c.handle_timeout(now + Duration::from_secs(1));
    outputs(&mut c);
    assert_eq!(c.handoffs(), 1);
    c.region_gone(&region(0), now + Duration::from_secs(1));
    assert_eq!(c.handoffs(), 0);
    c.ask_home(region(1), ShardId(0), now + Duration::from_secs(1));
    assert!(!answers_home(&mut c));
    c.handle_timeout(now + LEASE + MARGIN - Duration::from_millis(1));
    assert!(!answers_home(&mut c));
    c.handle_timeout(now + LEASE + MARGIN);
    let out = outputs(&mut c);
    assert!(out.contains(&home(region(1), 0, region(1))), "{out:?}");
}

#[test]
fn a_hand_off_to_a_region_that_left_goes_elsewhere_at_once() {
    let t0 = Instant::now();
    let (mut c, now) = both_on_region_0(t0);
    c.region_up(region(1), now);
    c.handle_timeout(now + Duration::from_secs(1));
    outputs(&mut c);
    c.region_up(region(2), now);
    c.region_gone(&region(1), now);
    c.hand_off_ack(&region(0), ShardId(0), id(0));
    let out = outputs(&mut c);
    // Region 2 came after the hand-off began: no marker is awaited from it.
    assert_eq!(
        out,
        [CoordinatorOutput::HandOff {
            to: region(0),
            shard: ShardId(0),
            regions: vec![region(0)],
            handoff: H0,
        }]
    );
    c.shard_stopped(&region(0), ShardId(0), id(0), now);
    assert_eq!(c.allocation().home(ShardId(0)), Some(&region(2)));
    let out = outputs(&mut c);
    assert!(out.contains(&home(region(2), 0, region(2))), "{out:?}");
}

#[test]
fn renewals_that_waited_in_a_link_do_not_make_a_majority() {
    let t0 = Instant::now();
    let (mut c, now) = running(1, 3, t0);
    // The regions renew; 1 and 2 keep the marks of the answers.
    let mut marks = Vec::new();
    for r in [0, 1, 2] {
        c.renew(region(r), 1, true, &[], Stamp::NONE, now);
        match outputs(&mut c).as_slice() {
            [CoordinatorOutput::Renewed { stamp, .. }
            | CoordinatorOutput::NotRenewed { stamp, .. }] => marks.push(*stamp),
            other => panic!("{other:?}"),
        }
    }
    let marks = &marks[1..];
    // Cut off for two leases, their next renewals (sent before the cut,
    // echoing those marks) arrive only now: old news, no majority.
    let late = now + 2 * LEASE;
    for (r, mark) in [1, 2].into_iter().zip(marks) {
        c.renew(region(r), 2, true, &[], *mark, late);
    }
    c.renew(region(0), 2, true, &[], Stamp::NONE, late);
    let answers = outputs(&mut c);
    assert!(
        answers
            .iter()
            .all(|o| matches!(o, CoordinatorOutput::NotRenewed { .. })),
        "{answers:?}"
    );
    // Regions that still follow it echo the fresh marks: a majority again.
    let fresh: Vec<Stamp> = answers
        .iter()
        .filter_map(|o| match o {
            CoordinatorOutput::NotRenewed { stamp, .. } => Some(*stamp),
            _ => None,
        })
        .collect();
    let again = late + Duration::from_secs(1);
    c.renew(region(1), 3, true, &[], fresh[0], again);
    outputs(&mut c);
    c.renew(region(2), 3, true, &[], fresh[1], again);
    assert!(
        matches!(
            outputs(&mut c).as_slice(),
            [CoordinatorOutput::Renewed { seq: 3, .. }]
        ),
        "renewed once a majority follows again"
    );
}

#[test]
fn a_coordinator_whose_member_is_cut_off_renews_no_lease() {
    let t0 = Instant::now();
    // Alone: its own region is every region it heard of, a majority of
    // one, but its member suspects most of the cluster.
    let (mut c, now) = running(1, 1, t0);
    c.set_cut_off(true);
    c.renew(region(0), 1, true, &[], Stamp::NONE, now);
    assert!(
        matches!(
            outputs(&mut c).as_slice(),
            [CoordinatorOutput::NotRenewed { seq: 1, .. }]
        ),
        "no lease while cut off"
    );
    // The suspicions are refuted: it renews again.
    c.set_cut_off(false);
    c.renew(region(0), 2, true, &[], Stamp::NONE, now);
    assert!(matches!(
        outputs(&mut c).as_slice(),
        [CoordinatorOutput::Renewed { seq: 2, .. }]
    ));
}
