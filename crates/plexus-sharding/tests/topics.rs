//! Topics on three nodes over real TCP sockets: subscribers on two
//! members get every publication of two publishers once, in each
//! publisher's order; an unsubscribed member gets no more; bad names and
//! message types are refused.

mod common;

use common::GUARD;
use std::collections::BTreeSet;

use plexus_cluster::{Cluster, ClusterUpdate};
use plexus_core::{ActorRef, ActorSystem};
use plexus_data::node::Replication;
use plexus_data::ReplicatorConfig;
use plexus_remote::{Node, NodeConfig};
use plexus_sharding::topics::{TopicError, Topics};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Price {
    publisher: u8,
    seq: u32,
}
plexus_core::remote_message!(Price = "test.Price");

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Other;
plexus_core::remote_message!(Other = "test.OtherTopicMsg");

struct Member {
    system: ActorSystem,
    _node: Node,
    _cluster: Cluster,
    _data: Replication,
    topics: Topics,
    uri: String,
    ups: mpsc::UnboundedReceiver<ClusterUpdate>,
}

async fn member(seeds: Vec<String>) -> Member {
    let system = ActorSystem::new();
    let node =
        Node::start(&system, NodeConfig::default().cookie("topics-test")).expect("node starts");
    let uri = node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster = Cluster::start(&node, &system, common::quick("topics-test", seeds))
        .expect("cluster starts");
    let ups = common::updates(&system, &cluster);
    let data = Replication::start(&node, &system, &cluster, ReplicatorConfig::default(), None)
        .expect("replication starts");
    let topics = Topics::start(&node, &system, &cluster, &data);
    Member {
        system,
        _node: node,
        _cluster: cluster,
        _data: data,
        topics,
        uri,
        ups,
    }
}

async fn until_up(m: &mut Member, n: usize) {
    common::until_up(&mut m.ups, n).await;
}

fn subscriber(m: &Member) -> (ActorRef<Price>, mpsc::UnboundedReceiver<Price>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = m.system.spawn_fn(move |p: Price, _ctx| {
        let _ = tx.send(p);
    });
    (actor, rx)
}

async fn receive(rx: &mut mpsc::UnboundedReceiver<Price>, n: usize) -> Vec<Price> {
    let mut got = Vec::new();
    while got.len() < n {
        let p = tokio::time::timeout(GUARD, rx.recv())
            .await
            .expect("a publication arrives")
            .expect("open");
        got.push(p);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subscriber_gets_every_publication_once_in_each_publisher_s_order() {
    let mut a = member(Vec::new()).await;
    let mut b = member(vec![a.uri.clone()]).await;
    let mut c = member(vec![a.uri.clone()]).await;
    for m in [&mut a, &mut b, &mut c] {
        until_up(m, 3).await;
    }
    let at_a = a.topics.topic::<Price>("prices").unwrap();
    let at_b = b.topics.topic::<Price>("prices").unwrap();
    let at_c = c.topics.topic::<Price>("prices").unwrap();
    let (b1, mut b1_rx) = subscriber(&b);
    let (c1, mut c1_rx) = subscriber(&c);
    let (c2, mut c2_rx) = subscriber(&c);
    at_b.subscribe(b1.clone()).await.expect("at majority");
    at_c.subscribe(c1).await.expect("at majority");
    at_c.subscribe(c2).await.expect("at majority");
    // The publishers see both subscribing members (gossip brings them).
    for topic in [&at_a, &at_b] {
        let mut members = topic.members();
        tokio::time::timeout(GUARD, members.wait_for(|m| m.len() == 2))
            .await
            .expect("guard")
            .expect("open");
    }
    const EACH: u32 = 200;
    for seq in 0..EACH {
        at_a.publish(Price { publisher: 0, seq });
        at_b.publish(Price { publisher: 1, seq });
    }
    for rx in [&mut b1_rx, &mut c1_rx, &mut c2_rx] {
        let got = receive(rx, 2 * EACH as usize).await;
        let distinct: BTreeSet<(u8, u32)> = got.iter().map(|p| (p.publisher, p.seq)).collect();
        assert_eq!(distinct.len(), got.len(), "each once");
        for publisher in [0, 1] {
            let order: Vec<u32> = got
                .iter()
                .filter(|p| p.publisher == publisher)
                .map(|p| p.seq)
                .collect();
            assert_eq!(
                order,
                (0..EACH).collect::<Vec<_>>(),
                "publisher {publisher}'s order"
            );
        }
    }

    // b's only subscriber leaves: b leaves the registry, and gets no more.
    at_b.unsubscribe(&b1).await.expect("at majority");
    let mut members = at_a.members();
    tokio::time::timeout(GUARD, members.wait_for(|m| m.len() == 1))
        .await
        .expect("guard")
        .expect("open");
    at_a.publish(Price {
        publisher: 0,
        seq: EACH,
    });
    for rx in [&mut c1_rx, &mut c2_rx] {
        let last = receive(rx, 1).await;
        assert_eq!(last[0].seq, EACH);
    }
    assert!(b1_rx.try_recv().is_err(), "b was not sent it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_topic_names_and_message_types_are_refused() {
    let a = member(Vec::new()).await;
    for name in ["", "a/b", "with space", &"x".repeat(65)] {
        assert!(
            matches!(a.topics.topic::<Price>(name), Err(TopicError::BadName(_))),
            "{name:?}"
        );
    }
    a.topics.topic::<Price>("prices").unwrap();
    let other = a.topics.topic::<Other>("prices");
    assert!(
        matches!(other, Err(TopicError::MessageType { .. })),
        "{other:?}"
    );
}
