//! Members on nodes in this process, followed through their subscriptions.
#![allow(dead_code)] // not every includer uses every helper

use std::time::Duration;

use plexus_cluster::{Cluster, ClusterConfig, ClusterUpdate, MemberState};
use plexus_core::ActorSystem;
use tokio::sync::mpsc;

/// Guards turn a hang into a failure; the assertions wait for events.
pub const GUARD: Duration = Duration::from_secs(60);

/// Settings for tests: cluster `name`, timings five times quicker than the
/// defaults.
pub fn quick(name: &str) -> ClusterConfig {
    let mut c = ClusterConfig::default().name(name);
    c.probe_interval = Duration::from_millis(200);
    c.probe_timeout = Duration::from_millis(100);
    c.gossip_interval = Duration::from_millis(50);
    c.join_retry = Duration::from_millis(200);
    c
}

/// Every update `cluster` sends, on a channel.
pub fn subscribe(
    system: &ActorSystem,
    cluster: &Cluster,
) -> mpsc::UnboundedReceiver<ClusterUpdate> {
    let (tx, rx) = mpsc::unbounded_channel();
    cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
        let _ = tx.send(u);
    }));
    rx
}

/// The first update for which `done` holds (each one is shown to `done`).
pub async fn next_until(
    rx: &mut mpsc::UnboundedReceiver<ClusterUpdate>,
    mut done: impl FnMut(&ClusterUpdate) -> bool,
) -> ClusterUpdate {
    tokio::time::timeout(GUARD, async {
        loop {
            let u = rx.recv().await.expect("the subscriber runs");
            if done(&u) {
                return u;
            }
        }
    })
    .await
    .expect("the awaited cluster event came")
}

/// How many members the update lists as up.
pub fn ups(u: &ClusterUpdate) -> usize {
    u.members
        .iter()
        .filter(|m| m.state == MemberState::Up)
        .count()
}
