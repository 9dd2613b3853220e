//! A peer's recent import (the proxy of the sender whose ref came last):
//! shared by consecutive messages, and let go when the link goes down, so
//! that the proxy, which holds the peer, does not keep it alive.

use std::time::Duration;

use plexus_core::{Actor, ActorRef, ActorSystem, Context};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::*;
use crate::{Node, NodeConfig};

#[derive(Serialize, Deserialize)]
struct Request(u64, ActorRef<Answer>);
plexus_core::remote_message!(Request = "test.peer.Request");

#[derive(Serialize, Deserialize)]
struct Answer(u64);
plexus_core::remote_message!(Answer = "test.peer.Answer");

struct Responder;

impl Actor for Responder {
    type Msg = Request;
    async fn handle(&mut self, Request(n, to): Request, _: &mut Context<Request>) {
        to.tell(Answer(n));
    }
}

const T: Duration = Duration::from_secs(10);

/// Node b's peer for node a.
fn peer_of(on: &Node, node: NodeId) -> Arc<Peer> {
    let peers = lock(&on.inner.peers);
    peers
        .by_node
        .iter()
        .find(|((n, _), _)| *n == node)
        .map(|(_, p)| p.canonical().clone())
        .expect("a peer for the node")
}

fn recent(peer: &Peer) -> Option<Arc<RemoteActor>> {
    lock(&peer.recent_import).clone()
}

/// Node a, with an actor that forwards the answers it gets to `answers`,
/// and node b, with a responder that a resolved over tcp.
struct Pair {
    _systems: (ActorSystem, ActorSystem),
    na: Node,
    nb: Node,
    responder: ActorRef<Request>,
    me: ActorRef<Answer>,
    answers: mpsc::UnboundedReceiver<u64>,
}

async fn pair() -> Pair {
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let cfg = NodeConfig::default().cookie("peer-test");
    let na = Node::start(&a, cfg.clone()).expect("node a");
    let nb = Node::start(&b, cfg).expect("node b");
    let uri_b = nb.listen("tcp://127.0.0.1:0").await.expect("listen");
    nb.publish(&b.spawn(Responder), "responder")
        .expect("publish");
    let responder = na
        .resolve(&format!("{uri_b}/responder"))
        .await
        .expect("resolve");
    let (tx, answers) = mpsc::unbounded_channel();
    let me = a.spawn_fn(move |Answer(n), _| {
        let _ = tx.send(n);
    });
    Pair {
        _systems: (a, b),
        na,
        nb,
        responder,
        me,
        answers,
    }
}

impl Pair {
    /// Sends request `n` with a's actor as the one to answer; its answer.
    async fn round_trip(&mut self, n: u64) -> Option<u64> {
        self.responder.tell(Request(n, self.me.clone()));
        tokio::time::timeout(T, self.answers.recv())
            .await
            .expect("in time")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recent_import_is_shared_by_requests_and_let_go_when_the_link_goes_down() {
    let mut p = pair().await;

    assert_eq!(p.round_trip(1).await, Some(1));
    let peer = peer_of(&p.nb, p.na.id());
    let first = recent(&peer).expect("the sender's proxy is kept");
    assert_eq!(first.id(), p.me.id());
    assert_eq!(p.round_trip(2).await, Some(2));
    let second = recent(&peer).expect("still kept");
    assert!(Arc::ptr_eq(&first, &second), "the second request reused it");
    // The link going down lets go of the import before it tells watchers:
    // a monitor's Down comes after.
    let watched: ActorRef<Answer> = plexus_core::remote::remote_ref(first.clone());
    let down = watched.monitor();
    drop((first, second));

    p.na.shutdown().await;
    let down = tokio::time::timeout(T, down).await.expect("Down in time");
    assert!(
        matches!(down.reason, plexus_core::ExitReason::NodeDown { .. }),
        "{:?}",
        down.reason
    );
    assert!(recent(&peer).is_none(), "let go once the link is down");
    assert!(peer.down.load(Ordering::Acquire));
}

/// A runtime that shuts down with the link up ends the read task without
/// `link_down`: the peer must still be freed.
#[test]
fn a_peer_is_freed_when_its_runtime_shuts_down_with_the_link_up() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let peer = rt.block_on(async {
        let mut p = pair().await;
        assert_eq!(p.round_trip(7).await, Some(7));
        let peer = peer_of(&p.nb, p.na.id());
        assert!(recent(&peer).is_some(), "the sender's proxy is kept");
        Arc::downgrade(&peer)
    });
    drop(rt);
    assert!(peer.upgrade().is_none(), "the peer outlived its runtime");
}
