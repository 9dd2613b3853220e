//! What the node tests share: quick cluster timings, and waiting for the
//! cluster to reach its size.

#![allow(dead_code)]

use std::time::Duration;

use plexus_cluster::{Cluster, ClusterConfig, ClusterUpdate, MemberState};
use plexus_core::SystemRef;
use tokio::sync::mpsc;

/// Guards turn a hang into a failure; the assertions wait for events.
pub const GUARD: Duration = Duration::from_secs(60);

/// Cluster timings fit for a test on one machine.
pub fn quick(name: &str, seeds: Vec<String>) -> ClusterConfig {
    let mut c = ClusterConfig::default().name(name).seeds(seeds);
    c.probe_interval = Duration::from_millis(200);
    c.probe_timeout = Duration::from_millis(100);
    c.gossip_interval = Duration::from_millis(50);
    c.join_retry = Duration::from_millis(200);
    c
}

/// `cluster`'s updates, as they come.
pub fn updates(system: &SystemRef, cluster: &Cluster) -> mpsc::UnboundedReceiver<ClusterUpdate> {
    let (tx, ups) = mpsc::unbounded_channel();
    cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
        let _ = tx.send(u);
    }));
    ups
}

/// Waits until the updates list `n` members up and no other but the
/// removed.
pub async fn until_up(ups: &mut mpsc::UnboundedReceiver<ClusterUpdate>, n: usize) {
    tokio::time::timeout(GUARD, async {
        loop {
            let u = ups.recv().await.expect("subscribed");
            let up = u
                .members
                .iter()
                .filter(|x| x.state == MemberState::Up)
                .count();
            let settled = u
                .members
                .iter()
                .all(|x| matches!(x.state, MemberState::Up | MemberState::Removed));
            if up == n && settled {
                return;
            }
        }
    })
    .await
    .expect("the cluster reached its size");
}
