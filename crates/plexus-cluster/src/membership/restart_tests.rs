//! A member restarted at its address as a new life, on the simulator: the
//! old life is downed and removed, the new one joins and goes up, every
//! member reports the same events, and nobody suspects the new life.

use std::time::Duration;

use plexus_sim::{check_seeds, LinkModel};

use super::*;
use crate::sim::ClusterSim;

fn lan() -> LinkModel {
    LinkModel {
        latency: Duration::from_micros(500),
        jitter: Duration::from_micros(200),
        ..LinkModel::default()
    }
}

/// A lifecycle event about a member: its kind and the incarnation.
type Step = (&'static str, u64);

/// What `observer` reported about `address` from `since` on: the events
/// that change who is in the cluster (suspicion is each member's own
/// observation, and not compared).
fn lifecycle(c: &ClusterSim, observer: usize, address: &str, since: Duration) -> Vec<Step> {
    c.events()
        .iter()
        .filter(|r| r.process == observer && r.at >= since)
        .filter_map(|r| match &r.event {
            ClusterEvent::MemberJoined(m) => Some(("joined", m)),
            ClusterEvent::MemberUp(m) => Some(("up", m)),
            ClusterEvent::MemberLeaving(m) => Some(("leaving", m)),
            ClusterEvent::MemberDowned { member, .. } => Some(("downed", member)),
            ClusterEvent::MemberRemoved(m) => Some(("removed", m)),
            _ => None,
        })
        .filter(|(_, m)| *m.address == *address)
        .map(|(kind, m)| (kind, m.incarnation))
        .collect()
}

/// Suspicions of `address` at `incarnation` or later, as `(observer,
/// event)`.
fn suspicions(c: &ClusterSim, address: &str, incarnation: u64) -> Vec<(usize, ClusterEvent)> {
    c.events()
        .iter()
        .filter(|r| match &r.event {
            ClusterEvent::MemberSuspected(m) | ClusterEvent::MemberUnreachable(m) => {
                *m.address == *address && m.incarnation >= incarnation
            }
            _ => false,
        })
        .map(|r| (r.process, r.event.clone()))
        .collect()
}

/// Five members; member 2 crashes and is restarted at its address `after`
/// the crash; 30 s later every survivor must have reported the old life
/// downed and removed and the new one joined and up, in that order, and
/// nobody may have suspected the new life (nor may it have had to refute).
fn restart_after(seed: u64, after: Duration) {
    let mut c = ClusterSim::new(5, ClusterConfig::default(), seed, lan());
    assert!(c.run_until_converged(Duration::from_secs(60)));
    let old = c.member_view(2).map_or(0, |v| v.local().incarnation);
    let crashed_at = c.sim.elapsed();
    c.crash(2);
    c.run_for(after);
    c.restart(2, None);
    let new = c.member_view(2).map_or(0, |v| v.local().incarnation);
    assert!(new > old);
    c.run_for(Duration::from_secs(30));
    assert!(
        c.converged(),
        "seed {seed}: not converged after the restart"
    );
    let expected = vec![
        ("downed", old),
        ("removed", old),
        ("joined", new),
        ("up", new),
    ];
    for observer in [0, 1, 3, 4] {
        assert_eq!(
            lifecycle(&c, observer, "sim:2", crashed_at),
            expected,
            "seed {seed}, restart {after:?} after the crash: member {observer}"
        );
    }
    assert_eq!(suspicions(&c, "sim:2", new), vec![], "seed {seed}");
    let refuted = c
        .events()
        .iter()
        .any(|r| r.process == 2 && matches!(r.event, ClusterEvent::Refuted { .. }));
    assert!(
        !refuted,
        "seed {seed}: the new life had to refute a suspicion"
    );
    assert_eq!(c.member_view(2).map(|v| v.local().incarnation), Some(new));
}

#[test]
fn a_member_restarted_before_anyone_noticed_is_replaced_everywhere() {
    check_seeds(0..10, |seed| {
        restart_after(seed, Duration::from_millis(100))
    });
}

#[test]
fn a_member_restarted_while_suspected_is_replaced_everywhere() {
    check_seeds(0..10, |seed| restart_after(seed, Duration::from_secs(1)));
    check_seeds(0..10, |seed| restart_after(seed, Duration::from_secs(4)));
}

#[test]
fn a_member_restarted_after_its_downing_is_replaced_everywhere() {
    check_seeds(0..10, |seed| restart_after(seed, Duration::from_secs(12)));
    // After the old life's removal too.
    check_seeds(0..5, |seed| restart_after(seed, Duration::from_secs(25)));
}

/// A member restarted at its address whose join reply is lost (the link
/// from its admitter to it is down for a while) while the leader promotes
/// it: it goes up only once admitted, holding its admitter's view, never
/// up on the promotion alone knowing next to nobody (it would act as a
/// cluster of its own: run the sharding's coordinators, say).
#[test]
fn a_restarted_member_is_up_only_with_the_clusters_view() {
    check_seeds(0..5, |seed| {
        let mut c = ClusterSim::new(5, ClusterConfig::default(), seed, lan());
        assert!(c.run_until_converged(Duration::from_secs(60)));
        c.crash(2);
        c.run_for(Duration::from_millis(100));
        let restarted = c.sim.elapsed();
        c.restart(2, Some(0));
        c.sim.partition_one_way(&[0], &[2]);
        c.run_for(Duration::from_secs(5));
        c.sim.heal();
        c.run_for(Duration::from_secs(20));
        assert!(c.converged(), "seed {seed}: not converged after the heal");
        let own: Vec<&ClusterEvent> = c
            .events()
            .iter()
            .filter(|r| r.process == 2 && r.at >= restarted)
            .map(|r| &r.event)
            .filter(|e| {
                matches!(e, ClusterEvent::Admitted { .. })
                    || matches!(e, ClusterEvent::MemberUp(m) if &*m.address == "sim:2")
            })
            .collect();
        assert!(
            matches!(own.first(), Some(ClusterEvent::Admitted { .. })),
            "seed {seed}: up before it was admitted: {own:?}"
        );
    });
}
