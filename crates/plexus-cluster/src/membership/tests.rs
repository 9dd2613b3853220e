//! Membership on the simulator: joins, crashes, refutation, partitions,
//! leaving, bad input. Virtual time; each test runs in milliseconds.

use std::time::{Duration, Instant};

use plexus_sim::{check_seeds, LinkModel};

use super::*;
use crate::sim::{address, ClusterSim};
use crate::wire::Packet;

fn lan() -> LinkModel {
    LinkModel {
        latency: Duration::from_micros(500),
        jitter: Duration::from_micros(200),
        ..LinkModel::default()
    }
}

fn cluster(n: usize, seed: u64) -> ClusterSim {
    let mut c = ClusterSim::new(n, ClusterConfig::default(), seed, lan());
    assert!(
        c.run_until_converged(Duration::from_secs(60)),
        "seed {seed}: {n} members did not converge"
    );
    c
}

/// Asserts that exactly `side` consider themselves up; on failure prints
/// every event first, to read the run.
fn assert_only_up(c: &ClusterSim, side: &[usize]) {
    if c.self_up() != side {
        for r in c.events() {
            eprintln!("{:?} {} {:?}", r.at, r.process, r.event);
        }
    }
    assert_eq!(c.self_up(), side);
}

fn first_event_at(
    c: &ClusterSim,
    observer: usize,
    pred: impl Fn(&ClusterEvent) -> bool,
) -> Option<Duration> {
    c.events()
        .iter()
        .find(|r| r.process == observer && pred(&r.event))
        .map(|r| r.at)
}

#[test]
fn members_join_through_a_seed_and_all_see_each_other_up() {
    check_seeds(0..5, |seed| {
        let c = cluster(8, seed);
        for i in 0..8 {
            let view = c.member_view(i).expect("no crash in this test");
            assert_eq!(view.members().len(), 8);
            assert_eq!(view.local().state, MemberState::Up);
        }
        // Up-numbers are unique: each member went up once.
        let mut ups: Vec<u64> = (0..8)
            .map(|i| {
                c.member_view(0)
                    .and_then(|v| v.member(&address(i)))
                    .map(|m| m.up_number)
                    .unwrap_or(0)
            })
            .collect();
        ups.sort();
        ups.dedup();
        assert_eq!(ups.len(), 8);
        assert!(!ups.contains(&0));
    });
}

#[test]
fn a_crashed_member_is_suspected_by_all_within_6_s_then_downed() {
    check_seeds(0..5, |seed| {
        let mut c = cluster(6, seed);
        let crash_at = c.sim.elapsed();
        c.crash(4);
        c.run_for(Duration::from_secs(30));
        for observer in c.live() {
            let seen = first_event_at(
                &c,
                observer,
                |e| matches!(e, ClusterEvent::MemberSuspected(m) if *m.address == *"sim:4"),
            )
            .unwrap_or_else(|| panic!("member {observer} never suspected sim:4"));
            assert!(
                seen - crash_at <= Duration::from_secs(6),
                "{observer} after {:?}",
                seen - crash_at
            );
        }
        assert!(c.everyone_sees_down(4));
        assert_eq!(c.self_up().len(), 5);
    });
}

#[test]
fn a_stalled_member_refutes_its_suspicion_and_is_never_downed() {
    check_seeds(0..5, |seed| {
        let mut c = cluster(5, seed);
        c.sim.stall(2, Duration::from_secs(4));
        c.run_for(Duration::from_secs(30));
        let downed = c.events().iter().any(|r| {
            matches!(&r.event, ClusterEvent::MemberDowned { member, .. } if *member.address == *"sim:2")
                || (r.process == 2 && matches!(r.event, ClusterEvent::SelfDowned { .. }))
        });
        assert!(!downed, "the stalled member was downed");
        let refuted = c
            .events()
            .iter()
            .any(|r| r.process == 2 && matches!(r.event, ClusterEvent::Refuted { .. }));
        assert!(refuted, "a 4 s stall is suspected, and refuted");
        assert!(c.converged());
    });
}

#[test]
fn keep_majority_downs_the_minority_which_rejoins_after_the_heal() {
    check_seeds(0..5, |seed| {
        let mut c = cluster(5, seed);
        c.sim.partition(&[0, 1, 2], &[3, 4]);
        c.run_for(Duration::from_secs(40));
        assert_only_up(&c, &[0, 1, 2]);
        for i in [3, 4] {
            let downed = c.events().iter().any(|r| {
                r.process == i
                    && matches!(
                        &r.event,
                        ClusterEvent::SelfDowned {
                            reason: DownReason::SplitBrain { .. }
                        }
                    )
            });
            assert!(downed, "member {i} did not down itself as the minority");
            for j in 0..3 {
                let state = c
                    .member_view(j)
                    .and_then(|v| v.member(&address(i)))
                    .map(|m| m.state);
                assert!(
                    matches!(state, Some(MemberState::Down | MemberState::Removed)),
                    "{j} sees {i} {state:?}"
                );
            }
        }
        c.sim.heal();
        assert!(
            c.run_until_converged(Duration::from_secs(60)),
            "the minority did not rejoin"
        );
        for i in [3, 4] {
            let incarnation = c.member_view(i).map(|v| v.local().incarnation).unwrap_or(0);
            assert!(
                incarnation > 1,
                "member {i} rejoined under incarnation {incarnation}"
            );
        }
    });
}

#[test]
fn an_asymmetric_partition_leaves_one_side_up() {
    check_seeds(0..5, |seed| {
        let mut c = cluster(5, seed);
        c.sim.partition_one_way(&[3, 4], &[0, 1, 2]);
        c.run_for(Duration::from_secs(40));
        assert_only_up(&c, &[0, 1, 2]);
    });
}

#[test]
fn a_leaving_member_is_removed_without_being_downed() {
    let mut c = cluster(4, 1);
    let now = c.sim.now();
    if let Some(p) = c.sim.process_mut(3) {
        p.membership.leave(now);
    }
    c.sim.wake(3);
    c.run_for(Duration::from_secs(15));
    assert!(c.member_view(3).is_some_and(|v| v.is_stopped()));
    c.crash(3);
    for i in 0..3 {
        let v = c.member_view(i).expect("runs");
        assert_eq!(
            v.member("sim:3").map(|m| m.state),
            Some(MemberState::Removed),
            "member {i}"
        );
    }
    assert!(!c
        .events()
        .iter()
        .any(|r| matches!(&r.event, ClusterEvent::MemberDowned { .. })));
}

/// A leave cut off by a partition after the others heard of it, before
/// its last word (`Removed`) reached them: the leaver stops on its own
/// deadline, and every member removes it `leave_timeout` after it heard
/// of the leave, rather than list it leaving for ever.
#[test]
fn a_leave_cut_off_by_a_partition_still_ends_in_removal() {
    check_seeds(0..5, |seed| {
        let mut c = cluster(4, seed);
        let now = c.sim.now();
        let start = c.sim.elapsed();
        if let Some(p) = c.sim.process_mut(3) {
            p.membership.leave(now);
        }
        c.sim.wake(3);
        c.run_for(Duration::from_millis(300));
        c.sim.partition(&[0, 1, 2], &[3]);
        for i in 0..3 {
            let state = c
                .member_view(i)
                .and_then(|v| v.member("sim:3"))
                .map(|m| m.state);
            assert_eq!(state, Some(MemberState::Leaving), "seed {seed}: member {i}");
        }
        c.run_for(Duration::from_secs(5));
        assert!(c.member_view(3).is_some_and(|v| v.is_stopped()));
        for i in 0..3 {
            let removed = first_event_at(
                &c,
                i,
                |e| matches!(e, ClusterEvent::MemberRemoved(m) if &*m.address == "sim:3"),
            );
            assert!(
                removed.is_some_and(|at| at - start <= Duration::from_secs(3)),
                "seed {seed}: member {i} removed the leaver at {removed:?}"
            );
        }
        assert_only_up(&c, &[0, 1, 2]);
        assert!(!c
            .events()
            .iter()
            .any(|r| matches!(&r.event, ClusterEvent::MemberDowned { .. })));
    });
}

#[test]
fn an_operator_downs_a_member_everyone_agrees_and_it_rejoins() {
    check_seeds(0..3, |seed| {
        let mut c = cluster(4, seed);
        let now = c.sim.now();
        let old = c
            .member_view(0)
            .and_then(|v| v.member("sim:3"))
            .map(|m| m.incarnation)
            .expect("member 3 is known");
        let downed = c
            .sim
            .process_mut(0)
            .map(|p| p.membership.down(now, "sim:3"));
        assert_eq!(downed, Some(Ok(())));
        c.sim.wake(0);
        c.run_for(Duration::from_secs(5));
        // Every member heard it; member 3 learnt it was down and, rejoining
        // by default, came back in a new life.
        for i in 1..3 {
            assert!(
                first_event_at(&c, i, |e| matches!(e,
                    ClusterEvent::MemberDowned { member, .. }
                        if &*member.address == "sim:3" && member.incarnation == old))
                .is_some(),
                "seed {seed}: member {i} did not hear of the downing"
            );
        }
        assert!(first_event_at(&c, 3, |e| matches!(e, ClusterEvent::SelfDowned { .. })).is_some());
        assert!(c.run_until_converged(Duration::from_secs(30)));
        assert!(c
            .member_view(0)
            .and_then(|v| v.member("sim:3"))
            .is_some_and(|m| m.incarnation > old && m.state == MemberState::Up));
    });
}

#[test]
fn downing_an_unknown_or_down_member_is_refused() {
    let mut c = cluster(3, 4);
    let now = c.sim.now();
    let p = c.sim.process_mut(0).expect("runs");
    assert_eq!(
        p.membership.down(now, "sim:9"),
        Err(DownError::UnknownMember("sim:9".into()))
    );
    assert_eq!(p.membership.down(now, "sim:2"), Ok(()));
    assert!(matches!(
        p.membership.down(now, "sim:2"),
        Err(DownError::NotUp {
            state: MemberState::Down,
            ..
        })
    ));
}

#[test]
fn a_restarted_member_rejoins_under_a_new_incarnation() {
    let mut c = cluster(4, 2);
    c.crash(2);
    c.run_for(Duration::from_secs(30));
    assert!(c.everyone_sees_down(2));
    c.restart(2, None);
    assert!(c.run_until_converged(Duration::from_secs(30)));
    assert!(c
        .member_view(0)
        .and_then(|v| v.member("sim:2"))
        .is_some_and(|m| m.incarnation > 1));
}

#[test]
fn one_seed_gives_a_byte_identical_trace() {
    let run = || {
        let mut c = ClusterSim::new(
            10,
            ClusterConfig::default(),
            42,
            LinkModel {
                loss: 0.05,
                ..lan()
            },
        );
        c.run_for(Duration::from_secs(20));
        c.crash(7);
        c.run_for(Duration::from_secs(30));
        c.sim.trace().to_owned()
    };
    let (a, b) = (run(), run());
    assert!(a.lines().count() > 50);
    assert_eq!(a, b);
}

fn lone_member() -> Membership {
    Membership::new(ClusterConfig::default(), "sim:0", 5, Instant::now()).expect("valid")
}

#[test]
fn bad_packets_are_refused_with_typed_errors() {
    let mut m = lone_member();
    let now = Instant::now();
    assert!(matches!(
        m.handle_packet(now, b"\x01"),
        Err(PacketError::Decode(_))
    ));
    let foreign = Packet {
        cluster: "other".into(),
        from: "sim:9".into(),
        from_incarnation: 1,
        from_life: 1,
        body: Body::Gossip,
        entries: vec![Member::joining("sim:9", 1, 1)],
    };
    let e = m
        .handle_packet(now, &foreign.encode())
        .expect_err("another cluster");
    assert_eq!(
        e.to_string(),
        "packet from sim:9 of cluster `other`, this is cluster `plexus`"
    );
    assert_eq!(m.members().len(), 1, "nothing of a refused packet is kept");
    assert_eq!(m.stats().packets_refused, 2);
}

#[test]
fn forged_claims_about_this_member_are_ignored() {
    let mut m = lone_member();
    let now = Instant::now();
    let forged = Packet {
        cluster: "plexus".into(),
        from: "sim:9".into(),
        from_incarnation: 1,
        from_life: 1,
        body: Body::Gossip,
        entries: vec![Member {
            state: MemberState::Down,
            ..Member::joining("sim:0", u64::MAX - 1, 1)
        }],
    };
    m.handle_packet(now, &forged.encode())
        .expect("a well-formed packet");
    assert_eq!(m.local().state, MemberState::Up);
    assert_eq!(m.local().incarnation, 5);
    assert_eq!(m.stats().claims_refused, 1);
    // A real suspicion is refuted by raising the incarnation.
    let suspicion = Packet {
        entries: vec![Member {
            state: MemberState::Suspect,
            ..Member::joining("sim:0", 5, 1)
        }],
        ..forged
    };
    m.handle_packet(now, &suspicion.encode())
        .expect("a well-formed packet");
    assert_eq!(m.local().incarnation, 6);
}

#[test]
fn memory_is_bounded_by_max_members() {
    let config = ClusterConfig {
        max_members: 10,
        ..ClusterConfig::default()
    };
    let mut m = Membership::new(config, "sim:0", 1, Instant::now()).expect("valid");
    let now = Instant::now();
    for batch in 0..10 {
        let packet = Packet {
            cluster: "plexus".into(),
            from: "sim:9".into(),
            from_incarnation: 1,
            from_life: 1,
            body: Body::Gossip,
            entries: (0..20)
                .map(|i| Member::joining(format!("x{batch}-{i}"), 1, 1))
                .collect(),
        };
        m.handle_packet(now, &packet.encode()).expect("well-formed");
    }
    assert_eq!(m.members().len(), 11);
    assert_eq!(m.stats().claims_refused, 190);
}

#[test]
fn a_seed_that_answers_nothing_is_retried_and_form_after_forms() {
    let config = ClusterConfig {
        seeds: vec!["sim:5".into(), "sim:6".into()],
        form_after: Some(Duration::from_secs(3)),
        ..ClusterConfig::default()
    };
    let start = Instant::now();
    let mut m = Membership::new(config, "sim:0", 1, start).expect("valid");
    let mut sent = Vec::new();
    let mut now = start;
    while m.local().state == MemberState::Joining {
        now = m.poll_timeout().expect("joining has deadlines");
        m.handle_timeout(now);
        while let Some(t) = m.poll_transmit() {
            sent.push(t.to.to_string());
        }
    }
    assert_eq!(&sent[..3], ["sim:5", "sim:6", "sim:5"]);
    assert_eq!(now - start, Duration::from_secs(3));
    assert!(matches!(m.poll_event(), Some(ClusterEvent::Formed { .. })));
}

/// Accusations member 0 raises while it hears nothing for 4 s (every
/// link into it cut), in a cluster of 8.
fn accusations_while_deaf(seed: u64, lifeguard: bool) -> u64 {
    let config = ClusterConfig {
        lifeguard,
        ..ClusterConfig::default()
    };
    let mut c = ClusterSim::new(8, config, seed, lan());
    assert!(c.run_until_converged(Duration::from_secs(60)));
    let before = c.member_view(0).map_or(0, |v| v.stats().suspicions_raised);
    let others: Vec<usize> = (1..8).collect();
    c.sim.partition_one_way(&others, &[0]);
    c.run_for(Duration::from_secs(4));
    c.member_view(0).map_or(0, |v| v.stats().suspicions_raised) - before
}

/// Lifeguard (sec. 4.1): a member whose helpers do not even nack is the
/// likely culprit and holds its accusations; plain SWIM accuses everyone
/// it waited for.
#[test]
fn a_member_that_hears_nothing_holds_its_accusations_with_lifeguard() {
    check_seeds(0..5, |seed| {
        assert_eq!(accusations_while_deaf(seed, true), 0);
        assert!(accusations_while_deaf(seed, false) > 0);
    });
}

/// A packet of `from` (life and incarnation 1) claiming itself up.
fn packet_of_live(from: &str, body: Body) -> Packet {
    Packet {
        cluster: "plexus".into(),
        from: from.into(),
        from_incarnation: 1,
        from_life: 1,
        body,
        entries: vec![Member {
            state: MemberState::Up,
            ..Member::joining(from, 1, 1)
        }],
    }
}

/// Whether one of `m`'s transmits tells `to` that it is `state`.
fn tells(m: &mut Membership, to: &str, state: MemberState) -> Option<Vec<u8>> {
    std::iter::from_fn(|| m.poll_transmit()).find_map(|t| {
        let packet = Packet::decode(&t.packet).expect("its own packets decode");
        let told = *t.to == *to
            && packet
                .entries
                .iter()
                .any(|e| *e.address == *to && e.state == state && e.life == 1);
        told.then(|| t.packet.to_vec())
    })
}

#[test]
fn a_member_downed_or_removed_here_that_speaks_as_live_is_told_and_goes_down() {
    let mut m = lone_member();
    let now = Instant::now();
    m.handle_packet(now, &packet_of_live("sim:9", Body::Gossip).encode())
        .expect("well-formed");
    assert_eq!(m.down(now, "sim:9"), Ok(()));
    while m.poll_transmit().is_some() {}

    // Cut off while its downing spread, it probes as a live member: the
    // answer carries its record, and it goes down on hearing it.
    let ping = packet_of_live("sim:9", Body::Ping { seq: 1 });
    m.handle_packet(now, &ping.encode()).expect("well-formed");
    let told = tells(&mut m, "sim:9", MemberState::Down).expect("told it is down");
    assert_eq!(m.stats().told_gone, 1);
    let mut downed = Membership::new(ClusterConfig::default(), "sim:9", 1, now).expect("valid");
    assert_eq!(downed.local().state, MemberState::Up);
    downed.handle_packet(now, &told).expect("well-formed");
    assert_eq!(downed.local().state, MemberState::Down);
    assert!(std::iter::from_fn(|| downed.poll_event())
        .any(|e| matches!(e, ClusterEvent::SelfDowned { .. })));

    // Removed (a tombstone): told all the same, as long as the record is
    // kept.
    let later = now + ClusterConfig::default().remove_after + Duration::from_secs(1);
    m.handle_timeout(later);
    assert_eq!(
        m.member("sim:9").map(|r| r.state),
        Some(MemberState::Removed)
    );
    while m.poll_transmit().is_some() {}
    m.handle_packet(later, &packet_of_live("sim:9", Body::Gossip).encode())
        .expect("well-formed");
    assert!(tells(&mut m, "sim:9", MemberState::Removed).is_some());

    // A new life at the address is not told about the old one.
    let new_life = Packet {
        from_incarnation: 7,
        from_life: 7,
        ..packet_of_live("sim:9", Body::Ping { seq: 2 })
    };
    m.handle_packet(later, &new_life.encode())
        .expect("well-formed");
    assert_eq!(m.stats().told_gone, 2);
}
