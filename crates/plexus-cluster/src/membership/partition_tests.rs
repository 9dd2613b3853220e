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
            assert!(
                matches!(why, Some(DownReason::SplitBrain { .. })),
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
