//! Two nodes in one process over `tls://` (mutual TLS with a dev CA made
//! in-process): resolve and ask; a node without TLS material cannot listen
//! on `tls://`; a node whose certificate is from another CA is refused.

use std::time::Duration;

use plexus_core::{Actor, ActorSystem, Context, ReplyTo};
use plexus_remote::{Node, NodeConfig};
use plexus_transport::dev_certs::DevCa;
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
    let tls = ca
        .node(name, 1)
        .expect("node certificate")
        .tls_config(ca)
        .expect("TLS config");
    NodeConfig::default().cookie("tls-test").tls(tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_resolve_and_ask_over_tls() {
    let ca = DevCa::generate().expect("CA");
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let na = Node::start(&a, config(&ca, "a")).expect("start a");
    let nb = Node::start(&b, config(&ca, "b")).expect("start b");
    let uri_b = nb.listen("tls://127.0.0.1:0").await.expect("listen");
    assert!(uri_b.starts_with("tls://127.0.0.1:"), "{uri_b}");
    let echo = b.spawn(EchoActor);
    nb.publish(&echo, "echo").expect("publish");
    let remote = na
        .resolve::<Echo>(&format!("{uri_b}/echo"))
        .await
        .expect("resolve over tls");
    assert!(remote.is_remote());
    assert_eq!(remote.ask(|r| Echo::Twice(21, r), T).await, Ok(42));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listen_without_certificate_says_what_is_missing() {
    let a = ActorSystem::new();
    let na = Node::start(&a, NodeConfig::default()).expect("start");
    let error = na
        .listen("tls://127.0.0.1:0")
        .await
        .expect_err("no TLS material")
        .to_string();
    assert!(error.contains("NodeConfig::tls"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_certificate_from_another_ca_is_refused() {
    let ca = DevCa::generate().expect("CA");
    let rogue = DevCa::generate().expect("rogue CA");
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let na = Node::start(&a, config(&rogue, "a")).expect("start a");
    let nb = Node::start(&b, config(&ca, "b")).expect("start b");
    let uri_b = nb.listen("tls://127.0.0.1:0").await.expect("listen");
    nb.publish(&b.spawn(EchoActor), "echo").expect("publish");
    let error = na
        .resolve::<Echo>(&format!("{uri_b}/echo"))
        .await
        .map(|_| ())
        .expect_err("untrusted node refused")
        .to_string();
    assert!(error.contains("UnknownIssuer"), "{error}");
    // The listener keeps serving trusted nodes.
    let nc = Node::start(&ActorSystem::new(), config(&ca, "c")).expect("start c");
    let remote = nc
        .resolve::<Echo>(&format!("{uri_b}/echo"))
        .await
        .expect("trusted node still served");
    assert_eq!(remote.ask(|r| Echo::Twice(1, r), T).await, Ok(2));
}
