//! A cluster of `tls://` nodes admits only certificates of its CA: three
//! members with the cluster's CA form it; a node whose certificate another
//! CA signed is refused at the handshake, so its joins never reach a
//! member, and a trusted member that joins after it is admitted while it
//! never appears.

mod common;

use common::updates::{next_until, subscribe, ups};
use plexus_cluster::node::ACTOR_NAME;
use plexus_cluster::{Cluster, ClusterConfig, ClusterPacket};
use plexus_core::ActorSystem;
use plexus_remote::dev_certs::DevCa;
use plexus_remote::{Node, NodeConfig};

fn quick(seeds: Vec<String>) -> ClusterConfig {
    common::updates::quick("tls-test").seeds(seeds)
}

/// A node with a certificate for `name` from `ca`, on the actor system
/// with the id the certificate certifies, listening on `tls://`.
async fn tls_node(ca: &DevCa, name: &str) -> (ActorSystem, Node, String) {
    let tls = ca
        .node(name, 1)
        .expect("node certificate")
        .tls_config(ca)
        .expect("TLS config");
    let config = NodeConfig::default().cookie("tls-cluster").tls(tls);
    let id = config.certified_node_id().expect("a certified id");
    let system = ActorSystem::builder()
        .node_id(id)
        .build()
        .expect("actor system");
    let node = Node::start(&system, config).expect("node starts");
    let uri = node.listen("tls://127.0.0.1:0").await.expect("listens");
    (system, node, uri)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_admits_only_certificates_of_its_ca() {
    let ca = DevCa::generate().expect("CA");
    let rogue_ca = DevCa::generate().expect("another CA");
    let (sa, na, a) = tls_node(&ca, "a").await;
    let ca_a = Cluster::start(&na, &sa, quick(Vec::new())).expect("cluster starts");
    let mut rx = subscribe(&sa, &ca_a);
    let (sb, nb, _) = tls_node(&ca, "b").await;
    let _cb = Cluster::start(&nb, &sb, quick(vec![a.clone()])).expect("cluster starts");
    next_until(&mut rx, |u| ups(u) == 2).await;

    // The rogue cannot even reach the cluster's actor: its certificate is
    // refused at the handshake, with the reason.
    let (sr, nr, rogue) = tls_node(&rogue_ca, "rogue").await;
    let error = nr
        .resolve::<ClusterPacket>(&format!("{a}/{ACTOR_NAME}"))
        .await
        .map(|_| ())
        .expect_err("a certificate of another CA is refused")
        .to_string();
    assert!(error.contains("UnknownIssuer"), "{error}");
    let _cr = Cluster::start(&nr, &sr, quick(vec![a.clone()])).expect("cluster starts");

    // A trusted member joining after the rogue is admitted; the rogue
    // never appears in any update.
    let (sc, nc, c) = tls_node(&ca, "c").await;
    let _cc = Cluster::start(&nc, &sc, quick(vec![a.clone()])).expect("cluster starts");
    let mut updates = Vec::new();
    let three = next_until(&mut rx, |u| {
        updates.push(u.members.iter().any(|m| *m.address == *rogue));
        ups(u) == 3
    })
    .await;
    assert!(three.members.iter().any(|m| *m.address == *c));
    assert!(
        !updates.iter().any(|&r| r),
        "the rogue appeared as a member"
    );
}
