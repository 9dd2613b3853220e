//! Nodes in one process over `quic://` (mutual TLS with a dev CA made
//! in-process): resolve, tell, ask, refs inside messages, per-actor order
//! while messages to several actors travel on several strands; a node
//! without TLS material cannot listen on `quic://`; a node whose
//! certificate is from another CA is refused.
#![cfg(feature = "quic")]

mod common;

use std::time::Duration;

use common::certified::{self, certified_node};
use common::service::{Counter, CounterActor, Total};
use plexus_core::{Actor, ActorRef, Context, ReplyTo};
use plexus_remote::dev_certs::DevCa;
use plexus_remote::NodeConfig;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

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
    certified::config(ca, name, "quic-test")
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
    assert_eq!(
        remote.tell_with_receipt(Counter::Add(1)).await,
        Ok(plexus_core::Receipt::Delivered)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_to_many_actors_keep_per_actor_order_across_strands() {
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
            // Actor 0 gets a large message now and then: its strand is busy
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
    certified::listen_without_certificate_says_what_is_missing("quic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_certificate_from_another_ca_is_refused_over_quic() {
    certified::another_ca_is_refused_and_the_endpoint_serves_on("quic", T).await;
}
