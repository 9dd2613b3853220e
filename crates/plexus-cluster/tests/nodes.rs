//! Three nodes in one process form a cluster over real TCP sockets; one is
//! killed, the others see it down; it comes back under a new incarnation.

mod common;

use std::time::Duration;

use common::updates::next_until;
use plexus_cluster::{Cluster, ClusterConfig, ClusterEvent, ClusterUpdate, MemberState};
use plexus_core::ActorSystem;
use plexus_remote::{Node, NodeConfig};
use tokio::sync::mpsc;

#[derive(Debug, PartialEq)]
enum Value {
    Counter(u64),
    Gauge(f64),
    Other,
}

/// What `cluster.record_metrics()` publishes, by `name{label=value,...}`,
/// through a debugging recorder installed around the call only.
fn recorded(cluster: &Cluster) -> std::collections::HashMap<String, Value> {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || cluster.record_metrics());
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let value = match value {
                DebugValue::Counter(n) => Value::Counter(n),
                DebugValue::Gauge(v) => Value::Gauge(v.into_inner()),
                DebugValue::Histogram(_) => Value::Other,
            };
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

fn quick(seeds: Vec<String>) -> ClusterConfig {
    let mut c = common::updates::quick("test").seeds(seeds);
    c.stable_after = Duration::from_millis(600);
    c.suspicion_mult = 1.0;
    c
}

async fn member(system: &ActorSystem, port: u16, seeds: Vec<String>) -> (Node, Cluster, String) {
    let node =
        Node::start(system, NodeConfig::default().cookie("cluster-test")).expect("node starts");
    let uri = node
        .listen(&format!("tcp://127.0.0.1:{port}"))
        .await
        .expect("listens");
    let cluster = Cluster::start(&node, system, quick(seeds)).expect("cluster starts");
    (node, cluster, uri)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_a_cluster_see_a_kill_and_a_rejoin() {
    let (sa, sb, sc) = (ActorSystem::new(), ActorSystem::new(), ActorSystem::new());
    let (_na, ca, a) = member(&sa, 0, Vec::new()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    ca.subscribe(sa.spawn_fn(move |u: ClusterUpdate, _ctx| {
        let _ = tx.send(u);
    }));
    let first = next_until(&mut rx, |_| true).await;
    assert!(matches!(first.event, ClusterEvent::Subscribed { ref local } if *local.address == *a));

    let (_nb, _cb, b) = member(&sb, 0, vec![a.clone()]).await;
    let (nc, cc, c) = member(&sc, 0, vec![a.clone()]).await;
    let up = next_until(&mut rx, |u| {
        u.members
            .iter()
            .filter(|m| m.state == MemberState::Up)
            .count()
            == 3
    })
    .await;
    assert_eq!(up.ring.members().len(), 3);
    let old_incarnation = up
        .members
        .iter()
        .find(|m| *m.address == *c)
        .map(|m| m.incarnation)
        .expect("c is a member");
    assert!(ca.owners(b"some key").len() == 3);

    // Kill c: no leave, its node gone.
    drop(cc);
    nc.shutdown().await;
    let down = next_until(
        &mut rx,
        |u| matches!(&u.event, ClusterEvent::MemberDowned { member, .. } if *member.address == *c),
    )
    .await;
    assert_eq!(down.ring.members().len(), 2);
    assert!(down.ring.members().iter().any(|m| **m == *b));
    // Its metrics (issue 31) say so too: two up, one downing seen, gossip
    // sent.
    let m = recorded(&ca);
    assert_eq!(
        m.get("plexus_cluster_members{state=up}"),
        Some(&Value::Gauge(2.0))
    );
    assert!(matches!(m.get("plexus_cluster_downings_total{}"), Some(Value::Counter(n)) if *n >= 1));
    assert!(
        matches!(m.get("plexus_cluster_gossip_sent_bytes_total{}"), Some(Value::Counter(n)) if *n > 0)
    );

    // c restarts on the same port: a new incarnation joins.
    let port: u16 = c
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    let sc2 = ActorSystem::new();
    let (_nc2, _cc2, c2) = member(&sc2, port, vec![a.clone()]).await;
    assert_eq!(c2, c);
    let back = next_until(&mut rx, |u| {
        matches!(&u.event, ClusterEvent::MemberUp(m) if *m.address == *c && m.incarnation > old_incarnation)
    })
    .await;
    assert_eq!(back.ring.members().len(), 3);
}

#[tokio::test]
async fn a_node_that_does_not_listen_cannot_start_a_cluster() {
    let system = ActorSystem::new();
    let node = Node::start(&system, NodeConfig::default()).expect("node starts");
    let e = Cluster::start(&node, &system, ClusterConfig::default()).expect_err("not listening");
    assert_eq!(
        e.to_string(),
        "start cluster: the node listens on no URI; call Node::listen first"
    );
}

/// A seed that is not a Plexus node (a port that answers with an HTTP
/// error) is retried without harm; with `form_after` the member forms its
/// own cluster once nobody admitted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_at_a_non_plexus_port_is_survived() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let port = listener.local_addr().expect("an address").port();
    let stranger = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let _ = s
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let system = ActorSystem::new();
    let node =
        Node::start(&system, NodeConfig::default().cookie("cluster-test")).expect("node starts");
    node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let mut config = quick(vec![format!("tcp://127.0.0.1:{port}")]);
    config.form_after = Some(Duration::from_secs(1));
    let cluster = Cluster::start(&node, &system, config).expect("cluster starts");
    let (tx, mut rx) = mpsc::unbounded_channel();
    cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
        let _ = tx.send(u);
    }));
    let formed = next_until(&mut rx, |u| matches!(u.event, ClusterEvent::Formed { .. })).await;
    assert_eq!(formed.local.state, MemberState::Up);
    stranger.abort();
}

/// The member without seeds forms the cluster as it starts, before anyone
/// could subscribe: a subscriber still gets `Formed`, right after
/// `Subscribed`, and only once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_after_start_receives_formed() {
    let system = ActorSystem::new();
    let (_node, cluster, a) = member(&system, 0, Vec::new()).await;
    let mut rx = common::updates::subscribe(&system, &cluster);
    let first = next_until(&mut rx, |_| true).await;
    assert!(matches!(first.event, ClusterEvent::Subscribed { .. }));
    let formed = next_until(&mut rx, |_| true).await;
    assert!(
        matches!(&formed.event, ClusterEvent::Formed { local } if *local.address == *a && local.state == MemberState::Up),
        "{:?}",
        formed.event
    );
    assert_eq!(common::updates::ups(&formed), 1);

    // A joiner's Up reaches this subscriber; Formed came once before it.
    let sb = ActorSystem::new();
    let (_nb, _cb, b) = member(&sb, 0, vec![a.clone()]).await;
    let mut formed_again = false;
    next_until(&mut rx, |u| {
        formed_again |= matches!(u.event, ClusterEvent::Formed { .. });
        matches!(&u.event, ClusterEvent::MemberUp(m) if *m.address == *b)
    })
    .await;
    assert!(!formed_again);
}

/// A joiner's subscriber sees each member listed up only from that
/// member's `MemberUp` on, itself included, though the join reply brings
/// the whole cluster in one packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_lists_itself_up_only_from_its_own_member_up() {
    let (sa, sb, sc) = (ActorSystem::new(), ActorSystem::new(), ActorSystem::new());
    let (_na, _ca, a) = member(&sa, 0, Vec::new()).await;
    let (_nb, cb, _b) = member(&sb, 0, vec![a.clone()]).await;
    let mut rb = common::updates::subscribe(&sb, &cb);
    next_until(&mut rb, |u| common::updates::ups(u) == 2).await;

    let (_nc, cc, c) = member(&sc, 0, vec![a.clone()]).await;
    let mut rc = common::updates::subscribe(&sc, &cc);
    let mut reported: Vec<String> = Vec::new();
    let own = next_until(&mut rc, |u| {
        match &u.event {
            ClusterEvent::MemberUp(m) => reported.push(m.address.to_string()),
            // What the subscription starts from.
            ClusterEvent::Subscribed { .. } => reported.extend(
                u.members
                    .iter()
                    .filter(|m| m.state == MemberState::Up)
                    .map(|m| m.address.to_string()),
            ),
            _ => {}
        }
        for m in u.members.iter().filter(|m| m.state == MemberState::Up) {
            assert!(
                reported.iter().any(|r| **r == *m.address),
                "{} listed up before its member-up, with {:?}",
                m.address,
                u.event
            );
        }
        matches!(&u.event, ClusterEvent::MemberUp(m) if *m.address == *c)
    })
    .await;
    assert_eq!(common::updates::ups(&own), 3);
    assert_eq!(own.local.state, MemberState::Up);
}
