//! The `size` and `hour` scenarios: joining, crash detection and traffic
//! against the cluster size.

use std::time::{Duration, Instant};

use plexus::cluster::sim::{address, ClusterSim};
use plexus::cluster::{ClusterConfig, ClusterEvent};
use rand::seq::SliceRandom;
use rand::Rng;

use super::{first_by_each, lan, plot, quantile, Args};

/// One size's measurements over all its runs.
#[derive(Default)]
pub(super) struct Point {
    pub(super) members: usize,
    pub(super) mass_join_rounds: Vec<f64>,
    pub(super) single_join_rounds: Vec<f64>,
    pub(super) seen: Vec<f64>,
    pub(super) downed: Vec<f64>,
    pub(super) bytes: Vec<f64>,
}

pub(super) fn run(args: &Args) {
    let mut points = Vec::new();
    for &n in &args.members {
        let wall = Instant::now();
        let mut p = Point {
            members: n,
            ..Point::default()
        };
        for k in 0..args.runs {
            one(n, args.seed + k, args.crashes, &mut p);
        }
        let never = |v: &[f64]| v.iter().filter(|t| t.is_infinite()).count();
        println!(
            "RESULT workload=cluster-sim scenario=size members={n} runs={} crashes={} \
             mass_join_rounds_median={:.0} single_join_rounds_median={:.0} single_join_rounds_max={:.0} \
             crash_seen_by_all_s_p50={:.2} crash_seen_by_all_s_p99={:.2} crash_seen_by_all_s_max={:.2} crash_never_seen={} \
             crash_downed_by_all_s_p50={:.2} crash_downed_by_all_s_max={:.2} \
             bytes_per_member_s_max={:.0} wall_s={:.1}",
            args.runs,
            p.seen.len(),
            quantile(&mut p.mass_join_rounds, 0.5),
            quantile(&mut p.single_join_rounds, 0.5),
            quantile(&mut p.single_join_rounds, 1.0),
            quantile(&mut p.seen, 0.5),
            quantile(&mut p.seen, 0.99),
            quantile(&mut p.seen, 1.0),
            never(&p.seen),
            quantile(&mut p.downed, 0.5),
            quantile(&mut p.downed, 1.0),
            quantile(&mut p.bytes, 1.0),
            wall.elapsed().as_secs_f64(),
        );
        points.push(p);
    }
    if let Some(path) = &args.plot {
        match plot::draw(path, args.font.as_deref(), &points) {
            Ok(()) => println!("PLOT {}", path.display()),
            Err(e) => eprintln!("cluster-sim: no plot: {e}"),
        }
    }
}

/// Rounds of `interval` until `done`, at most `limit` rounds (infinity if
/// it never happened).
fn rounds_until(
    c: &mut ClusterSim,
    interval: Duration,
    limit: u32,
    done: impl Fn(&ClusterSim) -> bool,
) -> f64 {
    for r in 0..=limit {
        if done(c) {
            return f64::from(r);
        }
        c.run_for(interval);
    }
    f64::INFINITY
}

fn one(n: usize, seed: u64, crashes: usize, p: &mut Point) {
    let config = ClusterConfig::default();
    let gossip = config.gossip_interval;
    let mut c = ClusterSim::new(n, config, seed, lan(0.0));
    c.sim.record_trace(false);
    // Everyone joins at once through member 0.
    p.mass_join_rounds
        .push(rounds_until(&mut c, gossip, 3_000, ClusterSim::converged));
    // Steady state: traffic over one minute.
    let before: Vec<u64> = (0..n).map(|i| c.sim.traffic(i).bytes).collect();
    c.run_for(Duration::from_secs(60));
    for (i, b) in before.iter().enumerate() {
        p.bytes.push((c.sim.traffic(i).bytes - b) as f64 / 60.0);
    }
    // One member joins the formed cluster through a random member.
    let through = c.sim.rng().gen_range(0..n);
    let new = c.join(through);
    p.single_join_rounds
        .push(rounds_until(&mut c, gossip, 3_000, |c| {
            c.everyone_sees_up(new)
        }));
    c.run_for(Duration::from_secs(10));
    // Crashes, one after the other, each given 30 s to be seen and downed.
    let mut candidates: Vec<usize> = c.live();
    candidates.shuffle(c.sim.rng());
    for victim in candidates.into_iter().take(crashes.min(n / 2)) {
        let a = address(victim);
        let since = c.sim.elapsed();
        c.sim.take_events();
        c.crash(victim);
        let before: Vec<(usize, u64)> = c
            .live()
            .iter()
            .map(|&i| (i, c.sim.traffic(i).bytes))
            .collect();
        c.run_for(Duration::from_secs(30));
        let observers = c.live();
        let about = |m: &plexus::cluster::Member| *m.address == *a;
        let seen = first_by_each(c.events(), &observers, since, |e| match e {
            ClusterEvent::MemberSuspected(m) | ClusterEvent::MemberUnreachable(m) => about(m),
            ClusterEvent::MemberDowned { member, .. } | ClusterEvent::MemberRemoved(member) => {
                about(member)
            }
            _ => false,
        });
        let downed = first_by_each(
            c.events(),
            &observers,
            since,
            |e| matches!(e, ClusterEvent::MemberDowned { member, .. } if about(member)),
        );
        p.seen.push(seen.unwrap_or(f64::INFINITY));
        p.downed.push(downed.unwrap_or(f64::INFINITY));
        for (i, b) in before {
            p.bytes.push((c.sim.traffic(i).bytes - b) as f64 / 30.0);
        }
    }
}

/// `hour`: `minutes` of a steady `n`-member cluster with 1 % loss; the
/// wall time it took.
pub(super) fn hour(n: usize, minutes: u64, seed: u64) {
    let wall = Instant::now();
    let mut c = ClusterSim::new(n, ClusterConfig::default(), seed, lan(0.01));
    c.sim.record_trace(false);
    let converged = c.run_until_converged(Duration::from_secs(600));
    c.run_for(Duration::from_secs(60 * minutes));
    let downed = c
        .events()
        .iter()
        .filter(|r| {
            matches!(
                r.event,
                ClusterEvent::MemberDowned { .. } | ClusterEvent::SelfDowned { .. }
            )
        })
        .count();
    println!(
        "RESULT workload=cluster-sim scenario=hour members={n} minutes={minutes} loss=0.01 converged={converged} \
         still_converged={} downed_events={downed} simulated_s={:.0} wall_s={:.2}",
        c.converged(),
        c.sim.elapsed().as_secs_f64(),
        wall.elapsed().as_secs_f64(),
    );
}
