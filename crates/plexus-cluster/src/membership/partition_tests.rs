//! Split brain on the simulator: seeded 60/40 partitions of ten members,
//! symmetric and one-way, under each strategy; exactly the documented side
//! stays up, and after the heal the losers rejoin under new incarnations.
//! (`plexus-bench cluster-sim --scenario partitions` runs the same at
//! 1,000 seeds per kind.)

use std::time::Duration;

use plexus_sim::{check_seeds, LinkModel};
use rand::seq::SliceRandom;
use rand::Rng;

use super::*;
use crate::sim::{address, ClusterSim};
use crate::split_brain::SplitBrainStrategy;
use crate::wire::Packet;

const N: usize = 10;

fn lan() -> LinkModel {
    LinkModel {
        latency: Duration::from_micros(500),
        jitter: Duration::from_micros(200),
        ..LinkModel::default()
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Symmetric,
    OneWay,
}

/// Forms ten members, splits them 6/4 at random (by the simulator's
/// seeded RNG), and returns the cluster and both sides (sorted).
fn split(
    seed: u64,
    strategy: SplitBrainStrategy,
    kind: Kind,
) -> (ClusterSim, Vec<usize>, Vec<usize>) {
    let config = ClusterConfig::default().split_brain(strategy);
    let mut c = ClusterSim::new(N, config, seed, lan());
    assert!(
        c.run_until_converged(Duration::from_secs(60)),
        "seed {seed}: no convergence"
    );
    c.run_for(Duration::from_secs(5));
    let mut order: Vec<usize> = (0..N).collect();
    order.shuffle(c.sim.rng());
    let (mut big, mut small) = (order[..6].to_vec(), order[6..].to_vec());
    big.sort_unstable();
    small.sort_unstable();
    match kind {
        Kind::Symmetric => c.sim.partition(&big, &small),
        Kind::OneWay if c.sim.rng().gen_bool(0.5) => c.sim.partition_one_way(&big, &small),
        Kind::OneWay => c.sim.partition_one_way(&small, &big),
    }
    (c, big, small)
}

fn only_up(c: &ClusterSim, side: &[usize], seed: u64) {
    assert_eq!(
        c.self_up(),
        side,
        "seed {seed}: the wrong members stayed up"
    );
}

fn heal_and_rejoin(c: &mut ClusterSim, losers: &[usize], seed: u64) {
    c.sim.heal();
    assert!(
        c.run_until_converged(Duration::from_secs(120)),
        "seed {seed}: the losing side did not rejoin after the heal"
    );
    for &i in losers {
        let incarnation = c.member_view(i).map_or(0, |v| v.local().incarnation);
        assert!(
            incarnation > 1,
            "seed {seed}: {i} rejoined under {incarnation}"
        );
    }
}

fn keep_majority(kind: Kind) {
    check_seeds(0..30, |seed| {
        let (mut c, big, small) = split(seed, SplitBrainStrategy::KeepMajority, kind);
        c.run_for(Duration::from_secs(40));
        only_up(&c, &big, seed);
        for &i in &small {
            let why = c.events().iter().rev().find_map(|r| match &r.event {
                ClusterEvent::SelfDowned { reason } if r.process == i => Some(reason.clone()),
                _ => None,
            });
            // Across a one-way partition the majority's claims may reach
            // the minority: a member told that the majority downed it goes
            // down on that word (whatever it refuted meanwhile), perhaps
            // before its own resolver would have; the claim may come
            // through any member that heard it, of either side.
            let told =
                matches!(kind, Kind::OneWay) && matches!(why, Some(DownReason::ReportedBy(_)));
            assert!(
                told || matches!(why, Some(DownReason::SplitBrain { .. })),
                "seed {seed}: {i} did not down itself as the minority ({why:?})"
            );
        }
        heal_and_rejoin(&mut c, &small, seed);
    });
}

#[test]
fn keep_majority_keeps_exactly_the_majority_of_symmetric_partitions() {
    keep_majority(Kind::Symmetric);
}

#[test]
fn keep_majority_keeps_exactly_the_majority_of_one_way_partitions() {
    keep_majority(Kind::OneWay);
}

#[test]
fn static_quorum_and_keep_oldest_keep_the_documented_side() {
    check_seeds(0..10, |seed| {
        let quorum = SplitBrainStrategy::StaticQuorum { size: 6 };
        let (mut c, big, small) = split(seed, quorum, Kind::Symmetric);
        c.run_for(Duration::from_secs(40));
        only_up(&c, &big, seed);
        heal_and_rejoin(&mut c, &small, seed);

        let oldest = SplitBrainStrategy::KeepOldest {
            down_if_alone: true,
        };
        let (mut c, big, small) = split(seed, oldest, Kind::Symmetric);
        // Member 0 formed the cluster: it is the oldest.
        let (stay, lose) = if big.contains(&0) {
            (big, small)
        } else {
            (small, big)
        };
        c.run_for(Duration::from_secs(40));
        only_up(&c, &stay, seed);
        heal_and_rejoin(&mut c, &lose, seed);
    });
}

#[test]
fn down_all_downs_both_sides() {
    check_seeds(0..5, |seed| {
        let (mut c, _, _) = split(seed, SplitBrainStrategy::DownAll, Kind::Symmetric);
        c.run_for(Duration::from_secs(40));
        only_up(&c, &[], seed);
    });
}

/// A member downed by a losing side must not carry that side's claims
/// into the cluster after the heal: nobody on the winning side is downed
/// after the partition heals.
#[test]
fn the_winning_side_is_not_downed_after_the_heal() {
    check_seeds(0..10, |seed| {
        let (mut c, big, small) = split(seed, SplitBrainStrategy::KeepMajority, Kind::Symmetric);
        c.run_for(Duration::from_secs(40));
        c.sim.take_events();
        heal_and_rejoin(&mut c, &small, seed);
        let names: Vec<String> = big.iter().map(|&i| address(i)).collect();
        let downed = c.events().iter().find(|r| match &r.event {
            ClusterEvent::MemberDowned { member, .. } => {
                names.contains(&member.address.to_string())
            }
            ClusterEvent::SelfDowned { .. } => big.contains(&r.process),
            _ => false,
        });
        assert!(downed.is_none(), "seed {seed}: {downed:?}");
    });
}

/// A member cut off from all the others (its helpers answer nothing, not
/// even a nack) holds its accusations one round at most (Lifeguard slows
/// an unhealthy member's accusations, it does not silence them): it
/// suspects its predecessors within a few probe intervals and downs itself
/// as the minority. (Holding until its health was exhausted kept it from
/// suspecting anyone for some 45 probe intervals.)
#[test]
fn an_isolated_member_suspects_within_two_rounds_and_downs_itself() {
    check_seeds(0..10, |seed| {
        let mut c = ClusterSim::new(5, ClusterConfig::default(), seed, lan());
        assert!(c.run_until_converged(Duration::from_secs(60)));
        c.run_for(Duration::from_secs(5));
        let cut = c.sim.elapsed();
        c.sim.partition(&[0, 1, 2, 3], &[4]);
        c.run_for(Duration::from_secs(40));
        let first = |pred: &dyn Fn(&ClusterEvent) -> bool, process: Option<usize>| {
            c.events()
                .iter()
                .filter(|r| r.at >= cut && process.is_none_or(|p| r.process == p))
                .find(|r| pred(&r.event))
                .map(|r| r.at - cut)
        };
        let suspected = first(&|e| matches!(e, ClusterEvent::MemberSuspected(_)), Some(4));
        let self_downed = first(
            &|e| {
                matches!(
                    e,
                    ClusterEvent::SelfDowned {
                        reason: DownReason::SplitBrain { .. }
                    }
                )
            },
            Some(4),
        );
        let downed = first(
            &|e| matches!(e, ClusterEvent::MemberDowned { member, .. } if &*member.address == "sim:4"),
            None,
        );
        let suspected = suspected.unwrap_or_else(|| panic!("seed {seed}: 4 suspected no one"));
        let downed = downed.unwrap_or_else(|| panic!("seed {seed}: the majority kept 4"));
        // It no longer counts the others as up by the time the majority
        // acts on its own suspicion (`stable_after` after it matured).
        assert!(
            suspected < downed,
            "seed {seed}: 4 suspected no one for {suspected:?}, downed by the others after {downed:?}"
        );
        // Its own suspicions take longest to mature (nobody confirms them),
        // then its resolver sweeps: nobody answers, it is the minority.
        assert!(
            self_downed.is_some_and(|d| d <= Duration::from_secs(25)),
            "seed {seed}: 4 did not down itself ({self_downed:?})"
        );
    });
}

/// `Down` is final for a life: a member downed while cut off, that
/// refuted a suspicion meanwhile (a higher incarnation of the same life,
/// unaware of its downing), is not taken back by the others after the
/// heal; it learns of its downing from the `Down` claim and comes back as
/// a new life. (The refutation used to supersede the downing: the others
/// listed it up again under the life they had downed.)
#[test]
fn a_downed_member_that_refuted_meanwhile_comes_back_only_as_a_new_life() {
    check_seeds(0..5, |seed| {
        let mut c = ClusterSim::new(5, ClusterConfig::default(), seed, lan());
        assert!(c.run_until_converged(Duration::from_secs(60)));
        let cut = c.sim.elapsed();
        c.sim.partition(&[0, 1, 2, 3], &[4]);
        let now = c.sim.now();
        let downed = c
            .sim
            .process_mut(0)
            .map(|p| p.membership.down(now, "sim:4"));
        assert_eq!(downed, Some(Ok(())));
        c.sim.wake(0);
        // A suspicion of it reaches it on its side (one raised before the
        // cut, say): it refutes.
        let suspicion = Packet {
            cluster: "plexus".into(),
            from: "sim:3".into(),
            from_incarnation: 1,
            from_life: 1,
            body: Body::Gossip,
            entries: vec![Member {
                state: MemberState::Suspect,
                up_number: 5,
                ..Member::joining("sim:4", 1, 1)
            }],
        };
        if let Some(p) = c.sim.process_mut(4) {
            p.membership
                .handle_packet(now, &suspicion.encode())
                .expect("a well-formed packet");
            assert_eq!(p.membership.local().incarnation, 2, "seed {seed}");
        }
        c.sim.wake(4);
        c.run_for(Duration::from_secs(2));
        c.sim.heal();
        c.run_for(Duration::from_secs(20));
        let back_in_old_life = c.events().iter().find(|r| {
            r.at >= cut
                && match &r.event {
                    ClusterEvent::MemberJoined(m)
                    | ClusterEvent::MemberUp(m)
                    | ClusterEvent::MemberReachable(m) => &*m.address == "sim:4" && m.life == 1,
                    _ => false,
                }
        });
        assert!(
            back_in_old_life.is_none(),
            "seed {seed}: the downed life came back: {back_in_old_life:?}"
        );
        assert!(
            c.events().iter().any(|r| r.process == 4
                && r.at >= cut
                && matches!(r.event, ClusterEvent::SelfDowned { .. })),
            "seed {seed}: 4 never learnt it was downed"
        );
        assert!(c.converged(), "seed {seed}: 4 did not come back");
        for i in 0..4 {
            let life = c
                .member_view(i)
                .and_then(|v| v.member("sim:4"))
                .map(|m| m.life);
            assert!(life > Some(1), "seed {seed}: {i} lists 4 in life {life:?}");
        }
    });
}
