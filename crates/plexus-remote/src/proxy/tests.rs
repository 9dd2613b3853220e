//! The strand a forged ref's frames take (the state machine alone), and the
//! order of messages sent to one actor through a forged ref and a ref by
//! id over `quic`, where strands are separate streams.

use plexus_core::NodeId;

use super::*;
use crate::peer::{name_key, strand_of};

/// A name and a serial whose strands differ, and the target on node 7.
fn target() -> (Strand, ActorId) {
    let name_strand = Strand::for_key(name_key("pong"));
    let serial = (1..)
        .find(|s| Strand::for_key(*s) != name_strand)
        .expect("some serial has another strand"); // 63 strands
    (name_strand, ActorId::new(NodeId::from_u64(7), serial))
}

/// The strand a ref made by id sends the target's frames on.
fn strand_by_id(id: ActorId) -> Strand {
    strand_of(&WireFrame::Stop {
        target: id.serial(),
        kill: false,
    })
}

fn unresolved() -> NamedState {
    NamedState::Unresolved {
        watchers: Vec::new(),
    }
}

#[test]
fn forged_ref_takes_its_targets_strand_once_the_resolve_fenced_the_name_strand() {
    let (name_strand, id) = target();
    let mut st = unresolved();
    assert_eq!(st.route(), Route::Start);
    st.on_start();
    // A message sent before the resolve's RESOLVE, by name.
    assert_eq!(st.route(), Route::Name(None));
    assert_eq!(st.route().strand(name_strand), name_strand);
    st.on_sent_on_name_strand();
    st.on_fence_sent();
    let (_, more) = st.on_resolved(id);
    assert!(!more, "nothing went on the name's strand after the RESOLVE");
    assert_eq!(st.route(), Route::Serial(id));
    // The same strand as the frames of a ref made by id.
    assert_eq!(st.route().strand(name_strand), strand_by_id(id));
}

#[test]
fn forged_ref_keeps_the_name_strand_until_a_fence_covers_every_frame_on_it() {
    let (name_strand, id) = target();
    let mut st = unresolved();
    st.on_start();
    st.on_fence_sent();
    // A message after the RESOLVE: the answer does not cover it.
    st.on_sent_on_name_strand();
    let (_, more) = st.on_resolved(id);
    assert!(more);
    assert_eq!(st.route(), Route::Name(Some(id)));
    assert_eq!(st.route().strand(name_strand), name_strand);
    // Fence, then another message: the fence's answer is not enough.
    st.on_fence_sent();
    st.on_sent_on_name_strand();
    assert!(!st.on_fence_answered());
    assert_eq!(st.route(), Route::Name(Some(id)));
    // A fence with nothing after it settles the ref.
    st.on_fence_sent();
    assert!(st.on_fence_answered());
    assert_eq!(st.route(), Route::Serial(id));
    assert_eq!(st.route().strand(name_strand), strand_by_id(id));
}

#[test]
fn failed_forged_ref_sends_nothing() {
    let mut st = unresolved();
    st.on_start();
    st.on_fence_sent();
    let watchers = st.on_failed(ExitReason::Failed("no such name".into()));
    assert!(watchers.is_empty());
    assert_eq!(st.route(), Route::Failed);
}

/// Over QUIC, where each strand is its own stream.
#[cfg(feature = "quic")]
mod over_quic {
    use std::time::Duration;

    use crate::dev_certs::DevCa;
    use plexus_core::remote;
    use plexus_core::{Actor, ActorRef, ActorSystem, Context, ReplyTo};
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::uri::Uri;
    use crate::{Node, NodeConfig};

    /// Checks that numbered messages come in order.
    #[derive(Serialize, Deserialize)]
    enum Seq {
        Next(u64, Vec<u8>),
        /// (messages, out-of-order ones)
        Check(ReplyTo<(u64, u64)>),
    }
    plexus_core::remote_message!(Seq = "test.proxy.Seq");

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

    fn quic_node(ca: &DevCa, name: &str) -> (ActorSystem, Node) {
        let tls = ca
            .node(name, 1)
            .expect("node certificate")
            .tls_config(ca)
            .expect("TLS config");
        let config = NodeConfig::default().cookie("proxy-test").tls(tls);
        let id = config.certified_node_id().expect("a TLS config");
        let system = ActorSystem::builder()
            .node_id(id)
            .build()
            .expect("actor system");
        let node = Node::start(&system, config).expect("start the node");
        (system, node)
    }

    /// What `Node::forge` makes, with the proxy kept to wait for its settling.
    fn forge(node: &Node, uri: &str) -> (Arc<RemoteActor>, ActorRef<Seq>) {
        let parsed = Uri::parse(uri).expect("actor URI");
        let name = parsed.name.clone().expect("a name");
        let peer = node.inner.dial_peer(&parsed.scheme, &parsed.addr, None);
        let id = ActorId::new(NodeId::from_u64(0), remote::type_id_of(uri));
        let proxy = RemoteActor::forged::<Seq>(&node.inner, id, peer, name, uri.to_owned());
        (proxy.clone(), remote::remote_ref(proxy))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_through_a_forged_ref_and_a_ref_by_id_stay_in_order_over_quic() {
        let ca = DevCa::generate().expect("CA");
        let (_a, na) = quic_node(&ca, "a");
        let (b, nb) = quic_node(&ca, "b");
        let uri_b = nb.listen("quic://127.0.0.1:0").await.expect("listen");
        let seq = b.spawn(SeqActor::default());
        // A name whose strand is not the actor's.
        let name = (0..)
            .map(|k| format!("seq{k}"))
            .find(|n| Strand::for_key(name_key(n)) != Strand::for_key(seq.id().serial()))
            .expect("some name has another strand"); // 63 strands
        nb.publish(&seq, &name).expect("publish");
        let uri = format!("{uri_b}/{name}");
        let by_id: ActorRef<Seq> = na.resolve(&uri).await.expect("resolve");
        let (proxy, forged) = forge(&na, &uri);

        // The first messages go by name, then (once resolved) by serial on
        // the name's strand, while the resolve races them; then the ref settles
        // on the actor's strand.
        const FIRST: u64 = 100;
        for i in 0..FIRST {
            forged.tell(Seq::Next(i, Vec::new()));
        }
        let settled = &proxy.named.as_ref().expect("a forged proxy").settled;
        tokio::time::timeout(T, settled.notified())
            .await
            .expect("the forged ref settles");

        // Both refs in turn; the forged one sends a large message now and then,
        // which would let the next ones through the other ref overtake it if
        // the two took different strands.
        const N: u64 = 2_000;
        for i in FIRST..N {
            if i % 2 == 1 {
                let pad = if i % 250 == 1 { 1 << 20 } else { 0 };
                forged.tell(Seq::Next(i, vec![0; pad]));
            } else {
                by_id.tell(Seq::Next(i, Vec::new()));
            }
        }
        assert_eq!(by_id.ask(Seq::Check, T).await, Ok((N, 0)));
    }
}
