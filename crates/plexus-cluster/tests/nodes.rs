//! Three nodes in one process form a cluster over real TCP sockets; one is
//! killed, the others see it down; it comes back under a new incarnation.

mod common;

use std::time::Duration;

use common::updates::next_until;
use plexus_cluster::{Cluster, ClusterConfig, ClusterEvent, ClusterUpdate, MemberState};
use plexus_core::ActorSystem;
use plexus_remote::{Node, NodeConfig};
use tokio::sync::mpsc;

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
