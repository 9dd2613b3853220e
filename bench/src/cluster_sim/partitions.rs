//! The `partitions` scenario: seeded 60/40 partitions of a formed cluster,
//! symmetric and one-way (either direction), under one split-brain
//! strategy. A run passes when exactly the side the strategy documents
//! stays up (`docs/CLUSTER.md`) and, after the heal, every downed member
//! rejoins under a new incarnation (down-all: every member's life from
//! before the cut ends; the downed rejoin whoever is still up, so the heal
//! is not checked).

use std::time::{Duration, Instant};

use plexus::cluster::sim::ClusterSim;
use plexus::cluster::{ClusterConfig, ClusterEvent, SplitBrainStrategy};
use rand::seq::SliceRandom;
use rand::Rng;

use super::{lan, quantile, Args};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Symmetric,
    OneWay,
}

fn strategy(name: &str, n: usize) -> SplitBrainStrategy {
    match name {
        "keep-majority" => SplitBrainStrategy::KeepMajority,
        "static-quorum" => SplitBrainStrategy::StaticQuorum { size: n / 2 + 1 },
        "keep-oldest" => SplitBrainStrategy::KeepOldest {
            down_if_alone: true,
        },
        "down-all" => SplitBrainStrategy::DownAll,
        other => {
            eprintln!("cluster-sim: unknown strategy {other:?}");
            std::process::exit(2);
        }
    }
}

pub(super) fn run(args: &Args) {
    for &n in &args.members {
        let strategy = strategy(&args.strategy, n);
        for kind in [Kind::Symmetric, Kind::OneWay] {
            let wall = Instant::now();
            let (mut passed, mut rejoined) = (0u64, 0u64);
            let mut resolved_s = Vec::new();
            let mut failures = Vec::new();
            for k in 0..args.runs {
                let seed = args.seed + k;
                match one(n, seed, strategy, kind) {
                    Ok((t, back)) => {
                        passed += 1;
                        resolved_s.push(t);
                        rejoined += u64::from(back);
                    }
                    Err(why) => failures.push(format!("seed {seed}: {why}")),
                }
            }
            for f in failures.iter().take(5) {
                eprintln!("cluster-sim partitions {kind:?}: {f}");
            }
            println!(
                "RESULT workload=cluster-sim scenario=partitions members={n} strategy={strategy} kind={kind:?} \
                 runs={} as_documented={passed} rejoined={rejoined} resolved_s_p50={:.1} resolved_s_max={:.1} wall_s={:.1}",
                args.runs,
                quantile(&mut resolved_s, 0.5),
                quantile(&mut resolved_s, 1.0),
                wall.elapsed().as_secs_f64()
            );
        }
    }
}

/// One partition: `Ok((seconds until the losing side downed itself,
/// whether the losers rejoined after the heal))` when exactly the expected
/// side stayed up.
fn one(
    n: usize,
    seed: u64,
    strategy: SplitBrainStrategy,
    kind: Kind,
) -> Result<(f64, bool), String> {
    let config = ClusterConfig::default().split_brain(strategy);
    let stable_after = config.stable_after;
    let mut c = ClusterSim::new(n, config, seed, lan(0.0));
    c.sim.record_trace(false);
    if !c.run_until_converged(Duration::from_secs(120)) {
        return Err("did not converge".into());
    }
    c.run_for(Duration::from_secs(5));
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(c.sim.rng());
    let (big, small) = order.split_at(n * 6 / 10);
    let (mut big, mut small) = (big.to_vec(), small.to_vec());
    big.sort_unstable();
    small.sort_unstable();
    // The oldest member: the lowest up-number, then the lowest address.
    let view = c.member_view(0).ok_or("member 0 crashed")?;
    let oldest = (0..n)
        .min_by_key(|&i| {
            let m = view.member(&plexus::cluster::sim::address(i));
            (
                m.map_or(u64::MAX, |m| m.up_number),
                plexus::cluster::sim::address(i),
            )
        })
        .ok_or("no members")?;
    let expected: Vec<usize> = match strategy {
        SplitBrainStrategy::KeepMajority | SplitBrainStrategy::StaticQuorum { .. } => big.clone(),
        SplitBrainStrategy::KeepOldest { .. } if big.contains(&oldest) => big.clone(),
        SplitBrainStrategy::KeepOldest { down_if_alone } if small.len() == 1 && down_if_alone => {
            big.clone()
        }
        SplitBrainStrategy::KeepOldest { .. } => small.clone(),
        _ => Vec::new(),
    };
    let before: Vec<u64> = (0..n)
        .map(|i| c.member_view(i).map_or(0, |v| v.local().incarnation))
        .collect();
    let since = c.sim.elapsed();
    c.sim.take_events();
    match kind {
        Kind::Symmetric => c.sim.partition(&big, &small),
        Kind::OneWay if c.sim.rng().gen_bool(0.5) => c.sim.partition_one_way(&big, &small),
        Kind::OneWay => c.sim.partition_one_way(&small, &big),
    }
    // Detection (a few seconds), suspicion, then stable_after: 30 s is
    // ample; the figure is when the last loser downed itself.
    c.run_for(Duration::from_secs(30) + stable_after);
    let up = c.self_up();
    if matches!(strategy, SplitBrainStrategy::DownAll) {
        // Every member's life from before the cut ended; with
        // `rejoin_when_downed` the downed rejoin whoever is still up, so
        // some may be up again, in a new life.
        let old = (0..n).filter(|&i| {
            c.member_view(i)
                .is_some_and(|v| v.local().incarnation == before[i])
        });
        let old: Vec<usize> = old.collect();
        let mut first: Vec<Option<f64>> = vec![None; n];
        for r in c.events() {
            if matches!(r.event, ClusterEvent::SelfDowned { .. }) && r.process < n {
                first[r.process].get_or_insert((r.at - since).as_secs_f64());
            }
        }
        let resolved = first.iter().flatten().fold(0.0f64, |a, &t| a.max(t));
        return if old.is_empty() {
            Ok((resolved, false))
        } else {
            Err(format!("{old:?} never downed themselves"))
        };
    }
    if up != expected {
        if std::env::var_os("DEBUG_PARTITION").is_some() {
            for r in c.events() {
                eprintln!("{:?} {} {:?}", r.at - since, r.process, r.event);
            }
        }
        return Err(format!("up {up:?}, expected {expected:?}"));
    }
    let losers: Vec<usize> = (0..n).filter(|i| !expected.contains(i)).collect();
    let resolved = c
        .events()
        .iter()
        .filter(|r| {
            losers.contains(&r.process) && matches!(r.event, ClusterEvent::SelfDowned { .. })
        })
        .map(|r| (r.at - since).as_secs_f64())
        .fold(0.0f64, f64::max);
    if matches!(strategy, SplitBrainStrategy::DownAll) {
        return Ok((resolved, false));
    }
    c.sim.heal();
    let back = c.run_until_converged(Duration::from_secs(120))
        && losers
            .iter()
            .all(|&i| c.member_view(i).is_some_and(|v| v.local().incarnation > 1));
    if !back && std::env::var_os("DEBUG_REJOIN").is_some() {
        eprintln!("seed {seed}: no rejoin; up {:?}", c.self_up());
        for r in c.events() {
            if losers.contains(&r.process) || matches!(r.event, ClusterEvent::MemberJoined(_)) {
                eprintln!("    {:?} {} {:?}", r.at - since, r.process, r.event);
            }
        }
        for i in 0..n {
            if let Some(v) = c.member_view(i) {
                eprintln!(
                    "  {i}: {:?} inc {} sees {:?}",
                    v.local().state,
                    v.local().incarnation,
                    v.members()
                        .iter()
                        .map(|m| (m.address.to_string(), m.state, m.incarnation))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
    Ok((resolved, back))
}
