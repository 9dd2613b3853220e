//! Nodes in one process over `quic://` (mutual TLS with a dev CA made
//! in-process): resolve, tell, ask, refs inside messages, per-actor order
//! while messages to several actors travel on several lanes; a node
//! without TLS material cannot listen on `quic://`; a node whose
//! certificate is from another CA is refused.

#[path = "common/certified.rs"]
mod certified;

use std::time::Duration;

use certified::certified_node;
use plexus_core::{Actor, ActorRef, ActorSystem, Context, ReplyTo};
use plexus_remote::{Node, NodeConfig};
use plexus_transport::dev_certs::DevCa;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Serialize, Deserialize)]
enum Counter {
    Add(u64),
    Get(ReplyTo<u64>),
    /// Reply to the ref inside the message.
    Report(ActorRef<Total>),
}
plexus_core::remote_message!(Counter = "test.quic.Counter");

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Total(u64);
plexus_core::remote_message!(Total = "test.quic.Total");

#[derive(Default)]
struct CounterActor(u64);

impl Actor for CounterActor {
    type Msg = Counter;
    async fn handle(&mut self, msg: Counter, _: &mut Context<Counter>) {
        match msg {
            Counter::Add(n) => self.0 += n,
            Counter::Get(r) => r.send(self.0),
            Counter::Report(to) => to.tell(Total(self.0)),
        }
    }
}

/// Checks that numbered messages come in order.
#[derive(Serialize, Deserialize)]
enum Seq {
    Next(u64, Vec<u8>),
    /// (messages, out-of-order ones)
    Check(ReplyTo<(u64, u64)>),
}
plexus_core::remote_message!(Seq = "test.quic.Seq");

#[derive(Default)]
struct SeqActor {
    next: u64,
    wrong: u64,
}

impl Actor for SeqActor {
    type Msg = Seq;
    async fn handle(&mut self, msg: Seq, _: &mut Context<Seq>) {
        match msg {
            Seq::Next(i, _) => {
                if i != self.next {
                    self.wrong += 1;
                }
                self.next = i + 1;
            }
            Seq::Check(r) => r.send((self.next, self.wrong)),
        }
    }
}

const T: Duration = Duration::from_secs(10);

fn config(ca: &DevCa, name: &str) -> NodeConfig {
    let tls = ca
        .node(name, 1)
        .expect("node certificate")
        .tls_config(ca)
        .expect("TLS config");
    NodeConfig::default().cookie("quic-test").tls(tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_resolve_tell_ask_and_pass_refs_over_quic() {
    let ca = DevCa::generate().expect("CA");
    let (a, na) = certified_node(config(&ca, "a"));
    let (b, nb) = certified_node(config(&ca, "b"));
    let uri_b = nb.listen("quic://127.0.0.1:0").await.expect("listen");
    assert!(uri_b.starts_with("quic://127.0.0.1:"), "{uri_b}");
    let counter = b.spawn(CounterActor::default());
    nb.publish(&counter, "counter").expect("publish");

    let remote: ActorRef<Counter> = na
        .resolve(&format!("{uri_b}/counter"))
        .await
        .expect("resolve over quic");
    assert!(remote.is_remote());
    assert_eq!(remote.id(), counter.id());
    for i in 1..=1000 {
        remote.tell(Counter::Add(i));
    }
    assert_eq!(remote.ask(Counter::Get, T).await, Ok(500_500));

    // A ref inside a message: the remote actor answers a local one.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sink = a.spawn_fn(move |t: Total, _ctx| {
        let _ = tx.send(t);
    });
    remote.tell(Counter::Report(sink));
    assert_eq!(
        tokio::time::timeout(T, rx.recv()).await.expect("in time"),
        Some(Total(500_500))
    );
    assert_eq!(remote.tell_with_receipt(Counter::Add(1)).await, Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_to_many_actors_keep_per_actor_order_across_lanes() {
    let ca = DevCa::generate().expect("CA");
    let (_a, na) = certified_node(config(&ca, "a"));
    let (b, nb) = certified_node(config(&ca, "b"));
    let uri_b = nb.listen("quic://127.0.0.1:0").await.expect("listen");
    let mut remotes = Vec::new();
    for k in 0..8 {
        nb.publish(&b.spawn(SeqActor::default()), &format!("seq{k}"))
            .expect("publish");
        let r: ActorRef<Seq> = na
            .resolve(&format!("{uri_b}/seq{k}"))
            .await
            .expect("resolve");
        remotes.push(r);
    }
    const N: u64 = 2_000;
    for i in 0..N {
        for (k, r) in remotes.iter().enumerate() {
            // Actor 0 gets a large message now and then: its lane is busy
            // while the others go on.
            let pad = if k == 0 && i % 500 == 0 { 1 << 20 } else { 0 };
            r.tell(Seq::Next(i, vec![0; pad]));
        }
    }
    for r in &remotes {
        assert_eq!(r.ask(Seq::Check, T).await, Ok((N, 0)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_listen_without_certificate_says_what_is_missing() {
    let a = ActorSystem::new();
    let na = Node::start(&a, NodeConfig::default()).expect("start");
    let error = na
        .listen("quic://127.0.0.1:0")
        .await
        .expect_err("no TLS material")
        .to_string();
    assert!(error.contains("NodeConfig::tls"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_certificate_from_another_ca_is_refused_over_quic() {
    let ca = DevCa::generate().expect("CA");
    let rogue = DevCa::generate().expect("rogue CA");
    let (_a, na) = certified_node(config(&rogue, "a"));
    let (b, nb) = certified_node(config(&ca, "b"));
    let uri_b = nb.listen("quic://127.0.0.1:0").await.expect("listen");
    nb.publish(&b.spawn(CounterActor::default()), "counter")
        .expect("publish");
    let error = na
        .resolve::<Counter>(&format!("{uri_b}/counter"))
        .await
        .map(|_| ())
        .expect_err("untrusted node refused")
        .to_string();
    assert!(error.contains("UnknownIssuer"), "{error}");
    // The endpoint keeps serving trusted nodes.
    let (_c, nc) = certified_node(config(&ca, "c"));
    let remote = nc
        .resolve::<Counter>(&format!("{uri_b}/counter"))
        .await
        .expect("trusted node still served");
    assert_eq!(remote.ask(Counter::Get, T).await, Ok(0));
}
