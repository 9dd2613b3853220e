//! `cluster-sim`: the cluster's figures at full size in the simulator (no
//! network, virtual time; `docs/CLUSTER.md`).
//!
//! For each size: rounds (gossip intervals) until every member sees every
//! other up after all join at once, the time until every live member
//! suspects and downs a crashed member, membership traffic per member per
//! second in steady state, and the wall time the run took. With
//! `--stalls`, an hour of 10 % of members stalling for 2 s at random with
//! 5 % packet loss, with Lifeguard on and off: false suspicions and false
//! downings.

use std::time::{Duration, Instant};

use plexus::cluster::sim::{address, ClusterSim};
use plexus::cluster::{ClusterConfig, ClusterEvent};
use plexus::sim::LinkModel;
use rand::Rng;

/// Arguments of `cluster-sim`.
#[derive(clap::Args)]
pub struct Args {
    /// Cluster sizes, comma-separated.
    #[arg(long, default_value = "8,32,128", value_delimiter = ',')]
    members: Vec<usize>,
    /// Seed of the first run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Crashes measured per size (one per run, seeds seed..seed+crashes).
    #[arg(long, default_value_t = 3)]
    crashes: u64,
    /// Run the stall scenario instead (10 % of members stall 2 s at random,
    /// 5 % loss) for this many simulated minutes, Lifeguard on and off.
    #[arg(long)]
    stalls: Option<u64>,
}

fn lan(loss: f64) -> LinkModel {
    LinkModel {
        loss,
        latency: Duration::from_micros(500),
        jitter: Duration::from_micros(200),
        ..LinkModel::default()
    }
}

/// Runs `cluster-sim`.
pub fn run(args: &Args) {
    if let Some(minutes) = args.stalls {
        for &n in &args.members {
            for lifeguard in [true, false] {
                stalls(n, minutes, lifeguard, args.seed);
            }
        }
        return;
    }
    for &n in &args.members {
        for s in 0..args.crashes {
            one(n, args.seed + s);
        }
    }
}

fn one(n: usize, seed: u64) {
    let wall = Instant::now();
    let config = ClusterConfig::default();
    let gossip = config.gossip_interval;
    let mut c = ClusterSim::new(n, config, seed, lan(0.0));
    c.sim.record_trace(false);
    let converged = c.run_until_converged(Duration::from_secs(600));
    let join_rounds = c.sim.elapsed().as_secs_f64() / gossip.as_secs_f64();
    // Steady state: traffic over one minute.
    let before: Vec<u64> = (0..n).map(|i| c.sim.traffic(i).bytes).collect();
    c.run_for(Duration::from_secs(60));
    let steady: f64 = (0..n)
        .map(|i| (c.sim.traffic(i).bytes - before[i]) as f64 / 60.0)
        .fold(0.0, f64::max);
    // A crash.
    let victim = c.sim.rng().gen_range(1..n);
    let victim_address = address(victim);
    c.sim.take_events();
    let crash_at = c.sim.elapsed();
    let before: Vec<u64> = (0..n).map(|i| c.sim.traffic(i).bytes).collect();
    c.crash(victim);
    c.run_for(Duration::from_secs(60));
    let busy: f64 = (0..n)
        .filter(|&i| i != victim)
        .map(|i| (c.sim.traffic(i).bytes - before[i]) as f64 / 60.0)
        .fold(0.0, f64::max);
    let when = |pred: &dyn Fn(&ClusterEvent) -> bool| -> Option<f64> {
        let mut latest = 0.0f64;
        for i in c.live() {
            let t = c
                .events()
                .iter()
                .find(|r| r.process == i && pred(&r.event))
                .map(|r| (r.at - crash_at).as_secs_f64())?;
            latest = latest.max(t);
        }
        Some(latest)
    };
    let suspected =
        when(&|e| matches!(e, ClusterEvent::MemberSuspected(m) if *m.address == *victim_address));
    let downed = when(
        &|e| matches!(e, ClusterEvent::MemberDowned { member, .. } if *member.address == *victim_address),
    );
    let fmt = |t: Option<f64>| t.map_or("never".to_owned(), |t| format!("{t:.2}"));
    println!(
        "RESULT workload=cluster-sim members={n} seed={seed} converged={converged} join_rounds={join_rounds:.0} \
         crash_suspected_by_all_s={} crash_downed_by_all_s={} steady_bytes_per_member_s_max={steady:.0} \
         crash_minute_bytes_per_member_s_max={busy:.0} simulated_s={:.0} wall_s={:.2}",
        fmt(suspected),
        fmt(downed),
        c.sim.elapsed().as_secs_f64(),
        wall.elapsed().as_secs_f64(),
    );
}

fn stalls(n: usize, minutes: u64, lifeguard: bool, seed: u64) {
    let wall = Instant::now();
    let mut config = ClusterConfig::default();
    config.lifeguard = lifeguard;
    let mut c = ClusterSim::new(n, config, seed, lan(0.0));
    c.sim.record_trace(false);
    let converged = c.run_until_converged(Duration::from_secs(600));
    c.sim.take_events();
    c.sim.set_default_link(lan(0.05));
    // Every 100 ms, each running member stalls for 2 s with the probability
    // that keeps about 10 % of members stalled at any time.
    let p = 0.10 / 20.0;
    for _ in 0..minutes * 600 {
        for i in 0..n {
            if !c.sim.is_stalled(i) && c.sim.rng().gen_bool(p) {
                c.sim.stall(i, Duration::from_secs(2));
            }
        }
        c.run_for(Duration::from_millis(100));
    }
    let suspicions = c
        .events()
        .iter()
        .filter(|r| matches!(r.event, ClusterEvent::MemberSuspected(_)))
        .count();
    let raised: u64 = (0..n)
        .filter_map(|i| c.member_view(i).map(|v| v.stats().suspicions_raised))
        .sum();
    let downed = c
        .events()
        .iter()
        .filter(|r| {
            matches!(
                r.event,
                ClusterEvent::SelfDowned { .. } | ClusterEvent::MemberDowned { .. }
            )
        })
        .count();
    println!(
        "RESULT workload=cluster-sim-stalls members={n} minutes={minutes} lifeguard={lifeguard} converged={converged} \
         suspicions_raised={raised} suspected_events={suspicions} downed_events={downed} wall_s={:.2}",
        wall.elapsed().as_secs_f64()
    );
}
