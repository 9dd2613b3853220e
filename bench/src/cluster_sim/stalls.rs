//! The `stalls` scenario (Lifeguard's experiment, Dadgar et al. 2018,
//! sec. 5): members stall for 2 s at random, about 10 % of them at any
//! time, on links losing 5 % of packets. Two kinds of stall:
//!
//! - `freeze`: the process stops (a GC pause, a suspended VM) and resumes
//!   with its overdue timers first, then everything queued;
//! - `slow`: the process runs but handles what it receives late (a starved
//!   process, the paper's "slow message processing"): packets to it take
//!   up to 2 s more while its own timers keep time, so it waits for acks
//!   that are queued, not lost.
//!
//! A *false failure* is a healthy member declared failed: a suspicion of it
//! matured (`MemberUnreachable`) somewhere, what the Lifeguard paper counts
//! as a false positive (memberlist's suspect → dead). Suspicions are
//! counted too; a suspicion is *false* when its target was not stalled at any time in
//! the [`WINDOW`] before it was raised: a healthy member accused, most
//! often by a watcher that was itself stalled and woke up to timeouts. A
//! member that really stopped answering for 2 s and is suspected was
//! watched correctly (it refutes as soon as it runs). Any downing in this
//! scenario is false: nobody crashes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus::cluster::sim::{index, ClusterSim};
use plexus::cluster::{ClusterConfig, ClusterEvent};
use plexus::sim::LinkModel;
use rand::Rng;

use super::lan;

/// How far back a target's own stall excuses its suspicion: the detector
/// needs about 2.4 s of silence, plus the indirect probe's 0.5 s, plus a
/// probe interval of slack.
const WINDOW: Duration = Duration::from_secs(5);

/// How a member stalls.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(super) enum StallKind {
    /// Stops entirely for 2 s.
    Freeze,
    /// Receives everything up to 2 s late.
    Slow,
}

pub(super) fn run(n: usize, minutes: u64, lifeguard: bool, seed: u64, kind: StallKind) {
    let wall = Instant::now();
    let mut config = ClusterConfig::default();
    config.lifeguard = lifeguard;
    let mut c = ClusterSim::new(n, config, seed, lan(0.0));
    c.sim.record_trace(false);
    let converged = c.run_until_converged(Duration::from_secs(600));
    c.sim.take_events();
    c.sim.set_default_link(lan(0.05));
    // The end of each member's last stall (the only one that can matter:
    // stalls of one member do not overlap and last 2 s < WINDOW).
    let mut stalled_until: Vec<Option<Duration>> = vec![None; n];
    let mut episodes: HashSet<(Arc<str>, u64)> = HashSet::new();
    let mut declared: HashSet<(Arc<str>, u64)> = HashSet::new();
    let mut false_failures = 0u64;
    let (mut suspicions, mut false_suspicions, mut downed, mut stalls) = (0u64, 0u64, 0u64, 0u64);
    // Every 100 ms, each running member stalls for 2 s with the probability
    // that keeps about 10 % of members stalled at any time.
    let p = 0.10 / 20.0;
    let stall = Duration::from_secs(2);
    let slow_link = LinkModel {
        jitter: stall,
        ..lan(0.05)
    };
    for _ in 0..minutes * 600 {
        let now = c.sim.elapsed();
        for (i, until) in stalled_until.iter_mut().enumerate() {
            let busy = until.is_some_and(|end| end > now);
            if let (StallKind::Slow, Some(end)) = (kind, *until) {
                if end <= now && end + Duration::from_millis(100) > now {
                    for j in (0..n).filter(|&j| j != i) {
                        c.sim.set_link(j, i, lan(0.05));
                    }
                }
            }
            if busy || !c.sim.rng().gen_bool(p) {
                continue;
            }
            match kind {
                StallKind::Freeze => c.sim.stall(i, stall),
                StallKind::Slow => {
                    for j in (0..n).filter(|&j| j != i) {
                        c.sim.set_link(j, i, slow_link.clone());
                    }
                }
            }
            *until = Some(now + stall);
            stalls += 1;
        }
        c.run_for(Duration::from_millis(100));
        // Events are counted as they come and dropped: an hour of a large
        // cluster raises far too many to keep.
        for r in c.sim.take_events() {
            match &r.event {
                ClusterEvent::MemberSuspected(m) => {
                    if !episodes.insert((Arc::clone(&m.address), m.incarnation)) {
                        continue;
                    }
                    suspicions += 1;
                    let excused = index(&m.address)
                        .and_then(|t| stalled_until.get(t).copied().flatten())
                        .is_some_and(|end| end + WINDOW >= r.at);
                    if !excused {
                        false_suspicions += 1;
                    }
                }
                ClusterEvent::MemberUnreachable(m) => {
                    if !declared.insert((Arc::clone(&m.address), m.incarnation)) {
                        continue;
                    }
                    let excused = index(&m.address)
                        .and_then(|t| stalled_until.get(t).copied().flatten())
                        .is_some_and(|end| end + WINDOW >= r.at);
                    if !excused {
                        false_failures += 1;
                    }
                }
                ClusterEvent::MemberDowned { .. } | ClusterEvent::SelfDowned { .. } => {
                    downed += 1;
                }
                _ => {}
            }
        }
    }
    let raised: u64 = (0..n)
        .filter_map(|i| c.member_view(i).map(|v| v.stats().suspicions_raised))
        .sum();
    println!(
        "RESULT workload=cluster-sim scenario=stalls kind={kind:?} members={n} minutes={minutes} lifeguard={lifeguard} \
         converged={converged} stalls={stalls} suspicions={suspicions} false_suspicions={false_suspicions} false_failures={false_failures} \
         accusations={raised} downed_events={downed} wall_s={:.1}",
        wall.elapsed().as_secs_f64()
    );
}
