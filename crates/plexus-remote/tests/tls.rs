//! Two nodes in one process over `tls://` (mutual TLS with a dev CA made
//! in-process): resolve and ask; a node without TLS material cannot listen
//! on `tls://`; a node whose certificate is from another CA is refused; a
//! node's id is the one its certificate certifies.
#![cfg(feature = "tls")]

mod common;

use std::time::Duration;

use common::certified::{self, certified_node};
use plexus_core::{Actor, ActorSystem, Context, ReplyTo};
use plexus_remote::dev_certs::DevCa;
use plexus_remote::{Node, NodeConfig};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
enum Echo {
    Twice(u64, ReplyTo<u64>),
}
plexus_core::remote_message!(Echo = "test.tls.Echo");

struct EchoActor;

impl Actor for EchoActor {
    type Msg = Echo;
    async fn handle(&mut self, msg: Echo, _: &mut Context<Echo>) {
        match msg {
            Echo::Twice(n, r) => r.send(n * 2),
        }
    }
}

const T: Duration = Duration::from_secs(5);

fn config(ca: &DevCa, name: &str) -> NodeConfig {
    certified::config(ca, name, "tls-test")
}

/// Listens on `tls://` and publishes an echo actor; its URI.
async fn echo_over_tls(system: &ActorSystem, node: &Node) -> String {
    let uri = node.listen("tls://127.0.0.1:0").await.expect("listen");
    node.publish(&system.spawn(EchoActor), "echo")
        .expect("publish");
    format!("{uri}/echo")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_resolve_and_ask_over_tls() {
    let ca = DevCa::generate().expect("CA");
    let (_a, na) = certified_node(config(&ca, "a"));
    let (b, nb) = certified_node(config(&ca, "b"));
    let echo = echo_over_tls(&b, &nb).await;
    assert!(echo.starts_with("tls://127.0.0.1:"), "{echo}");
    let remote = na.resolve::<Echo>(&echo).await.expect("resolve over tls");
    assert!(remote.is_remote());
    assert_eq!(remote.ask(|r| Echo::Twice(21, r), T).await, Ok(42));
    // The remote actor's id carries the certified node id.
    assert_eq!(remote.id().node(), nb.id());
    assert_eq!(na.connected_nodes(), vec![nb.id()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_system_without_the_certified_id_cannot_start_a_tls_node() {
    let ca = DevCa::generate().expect("CA");
    let cfg = config(&ca, "a");
    let certified = cfg.certified_node_id().expect("certified id");
    let random = ActorSystem::new();
    let error = Node::start(&random, cfg.clone()).expect_err("random id refused");
    match &error {
        plexus_remote::NodeError::IdentityMismatch {
            system,
            certified: c,
        } => {
            assert_eq!(*system, random.node_id());
            assert_eq!(*c, certified);
        }
        e => panic!("expected IdentityMismatch, got {e:?}"),
    }
    let text = error.to_string();
    assert!(text.contains(&certified.to_string()), "{text}");
    assert!(text.contains("ActorSystem::builder().node_id("), "{text}");
    let (_s, n) = certified_node(cfg);
    assert_eq!(n.id(), certified);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listen_without_certificate_says_what_is_missing() {
    certified::listen_without_certificate_says_what_is_missing("tls").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_certificate_from_another_ca_is_refused() {
    certified::another_ca_is_refused_and_the_endpoint_serves_on("tls", T).await;
}
