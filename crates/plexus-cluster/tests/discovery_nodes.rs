//! Members started with a discovery over real TCP sockets: three that all
//! discover all three form one cluster (the lowest forms it); a discovery
//! that fails is retried until it answers.
#![cfg(feature = "node")]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::updates::{next_until, subscribe, ups};
use plexus_cluster::discovery::{Discovered, Discovery, DiscoveryError, StaticSeeds};
use plexus_cluster::{Cluster, ClusterConfig, MemberState};
use plexus_core::ActorSystem;
use plexus_remote::{Node, NodeConfig};

fn quick() -> ClusterConfig {
    let mut c = common::updates::quick("discovery-test");
    c.join_retry = Duration::from_millis(100);
    c
}

async fn listening(system: &ActorSystem) -> (Node, String) {
    let node =
        Node::start(system, NodeConfig::default().cookie("discovery-test")).expect("node starts");
    let uri = node.listen("tcp://127.0.0.1:0").await.expect("listens");
    (node, uri)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_that_discover_each_other_form_one_cluster() {
    let systems = [ActorSystem::new(), ActorSystem::new(), ActorSystem::new()];
    let mut nodes = Vec::new();
    for s in &systems {
        nodes.push(listening(s).await);
    }
    let all: Vec<String> = nodes.iter().map(|(_, uri)| uri.clone()).collect();
    let lowest = all.iter().min().expect("three").clone();
    let mut members = Vec::new();
    for ((node, _), system) in nodes.iter().zip(&systems) {
        let cluster = Cluster::start_with_discovery(
            node,
            system,
            quick(),
            Box::new(StaticSeeds::new(all.clone())),
        )
        .expect("cluster starts");
        let rx = subscribe(system, &cluster);
        members.push((cluster, rx));
    }
    for (cluster, rx) in &mut members {
        let u = next_until(rx, |u| ups(u) == 3).await;
        assert_eq!(u.members.len(), 3);
        // The first member up (up-number 1) is the one that formed the
        // cluster: the lowest address.
        let first = u
            .members
            .iter()
            .min_by_key(|m| m.up_number)
            .expect("three members");
        assert_eq!(*first.address, *lowest);
        assert_eq!(cluster.local().state, MemberState::Up);
    }
}

/// Fails its first `failures` runs, then answers `seeds`.
struct Flaky {
    calls: AtomicUsize,
    failures: usize,
    seeds: Vec<String>,
}

impl Discovery for Flaky {
    fn discover(&self) -> Discovered<'_> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if call < self.failures {
                Err(DiscoveryError::Empty {
                    name: self.describe(),
                })
            } else {
                Ok(self.seeds.clone())
            }
        })
    }

    fn describe(&self) -> String {
        String::from("flaky test discovery")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_discovery_is_retried_until_it_answers() {
    let system = ActorSystem::new();
    let (node, uri) = listening(&system).await;
    let flaky = Arc::new(Flaky {
        calls: AtomicUsize::new(0),
        failures: 3,
        seeds: vec![uri.clone()],
    });
    /// Shares the test's `Flaky` with the driver.
    struct Shared(Arc<Flaky>);
    impl Discovery for Shared {
        fn discover(&self) -> Discovered<'_> {
            self.0.discover()
        }
    }
    let mut config = quick();
    // Alone: it may form as the only seed.
    config.bootstrap_min_seeds = 1;
    let cluster =
        Cluster::start_with_discovery(&node, &system, config, Box::new(Shared(Arc::clone(&flaky))))
            .expect("cluster starts");
    let mut rx = subscribe(&system, &cluster);
    let u = next_until(&mut rx, |u| u.local.state == MemberState::Up).await;
    assert_eq!(u.members.len(), 1, "formed a cluster of its own");
    assert!(
        flaky.calls.load(Ordering::SeqCst) > 3,
        "it was asked again after each failure"
    );
}
