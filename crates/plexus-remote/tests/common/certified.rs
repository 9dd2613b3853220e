//! Nodes with TLS material (for `tls://` and `quic://`), on actor systems
//! with their certified ids, and the checks both schemes share.
#![allow(dead_code)] // not every includer starts one

use std::time::Duration;

use plexus_core::ActorSystem;
use plexus_remote::dev_certs::DevCa;
use plexus_remote::{Node, NodeConfig};

use super::service::{Counter, CounterActor};

/// A node configuration with a certificate for `name` signed by `ca`.
pub fn config(ca: &DevCa, name: &str, cookie: &str) -> NodeConfig {
    let tls = ca
        .node(name, 1)
        .expect("node certificate")
        .tls_config(ca)
        .expect("TLS config");
    NodeConfig::default().cookie(cookie).tls(tls)
}

/// An actor system with the node id `config`'s certificate certifies (a
/// node with TLS material must run on one), and its node.
pub fn certified_node(config: NodeConfig) -> (ActorSystem, Node) {
    let id = config.certified_node_id().expect("a TLS config");
    let system = ActorSystem::builder()
        .node_id(id)
        .build()
        .expect("actor system");
    let node = Node::start(&system, config).expect("start the node");
    (system, node)
}

/// A node without TLS material cannot listen on `scheme`, and the error
/// says what is missing.
pub async fn listen_without_certificate_says_what_is_missing(scheme: &str) {
    let a = ActorSystem::new();
    let na = Node::start(&a, NodeConfig::default()).expect("start");
    let error = na
        .listen(&format!("{scheme}://127.0.0.1:0"))
        .await
        .expect_err("no TLS material")
        .to_string();
    assert!(error.contains("NodeConfig::tls"), "{error}");
}

/// A node whose certificate another CA signed is refused over `scheme`
/// with the reason, and the endpoint keeps serving trusted nodes.
pub async fn another_ca_is_refused_and_the_endpoint_serves_on(scheme: &str, within: Duration) {
    let ca = DevCa::generate().expect("CA");
    let rogue = DevCa::generate().expect("rogue CA");
    let cookie = format!("{scheme}-test");
    let (_a, na) = certified_node(config(&rogue, "a", &cookie));
    let (b, nb) = certified_node(config(&ca, "b", &cookie));
    let uri_b = nb
        .listen(&format!("{scheme}://127.0.0.1:0"))
        .await
        .expect("listen");
    nb.publish(&b.spawn(CounterActor::default()), "counter")
        .expect("publish");
    let error = na
        .resolve::<Counter>(&format!("{uri_b}/counter"))
        .await
        .map(|_| ())
        .expect_err("untrusted node refused")
        .to_string();
    assert!(error.contains("UnknownIssuer"), "{error}");
    let (_c, nc) = certified_node(config(&ca, "c", &cookie));
    let remote = nc
        .resolve::<Counter>(&format!("{uri_b}/counter"))
        .await
        .expect("trusted node still served");
    assert_eq!(remote.ask(Counter::Get, within).await, Ok(0));
}
