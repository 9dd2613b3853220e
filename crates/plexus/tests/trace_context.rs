//! Tracing across nodes (issue 31; feature `otel`): three nodes in one
//! process over TCP, spans exported to the OpenTelemetry SDK's in-memory
//! exporter. One ask from A to B, whose handler asks C, is one trace: B's
//! `handle` span is a child of A's span, C's of B's, both with a remote
//! parent (the context crossed the wire: nothing else links them). A tell
//! carries its context too; a message sent outside any span, or inside one
//! of Plexus's own, carries none.

use std::time::Duration;

use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use plexus::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

const T: Duration = Duration::from_secs(10);

#[derive(Serialize, Deserialize)]
enum Leaf {
    Get(ReplyTo<u64>),
    /// Answered once every earlier message was handled (its span closed).
    Flush(ReplyTo<()>),
}
plexus::remote_message!(Leaf = "test.trace.Leaf");

#[derive(Serialize, Deserialize)]
enum Middle {
    /// Asks the leaf, answers with its value plus one.
    Ask(ReplyTo<u64>),
    Notify,
    Flush(ReplyTo<()>),
}
plexus::remote_message!(Middle = "test.trace.Middle");

struct LeafActor;

impl Actor for LeafActor {
    type Msg = Leaf;
    async fn handle(&mut self, msg: Leaf, _: &mut Context<Leaf>) {
        match msg {
            Leaf::Get(reply) => {
                tracing::info!("leaf answers");
                reply.send(41);
            }
            Leaf::Flush(reply) => reply.send(()),
        }
    }
}

struct MiddleActor {
    leaf: ActorRef<Leaf>,
    notified: mpsc::UnboundedSender<()>,
}

impl Actor for MiddleActor {
    type Msg = Middle;
    async fn handle(&mut self, msg: Middle, _: &mut Context<Middle>) {
        match msg {
            Middle::Ask(reply) => {
                let v = self.leaf.ask(Leaf::Get, T).await.expect("the leaf answers");
                reply.send(v + 1);
            }
            Middle::Notify => {
                let _ = self.notified.send(());
            }
            Middle::Flush(reply) => reply.send(()),
        }
    }
}

async fn node(system: &ActorSystem) -> (Node, String) {
    let node = Node::start(system, NodeConfig::default().cookie("trace-test")).unwrap();
    let uri = node.listen("tcp://127.0.0.1:0").await.unwrap();
    (node, uri)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ask_from_a_to_b_to_c_is_one_trace() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber =
        tracing_subscriber::registry().with(plexus::otel::layer(provider.tracer("trace-test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    plexus::otel::install().unwrap();

    let (a, b, c) = (ActorSystem::new(), ActorSystem::new(), ActorSystem::new());
    let (na, _) = node(&a).await;
    let (nb, uri_b) = node(&b).await;
    let (nc, uri_c) = node(&c).await;
    let leaf = c.spawn(LeafActor);
    nc.publish(&leaf, "leaf").unwrap();
    let leaf_from_b: ActorRef<Leaf> = nb.resolve(&format!("{uri_c}/leaf")).await.unwrap();
    let (notified, mut notifications) = mpsc::unbounded_channel();
    let middle = b.spawn(MiddleActor {
        leaf: leaf_from_b,
        notified,
    });
    nb.publish(&middle, "middle").unwrap();
    let middle_from_a: ActorRef<Middle> = na.resolve(&format!("{uri_b}/middle")).await.unwrap();
    let leaf_from_a: ActorRef<Leaf> = na.resolve(&format!("{uri_c}/leaf")).await.unwrap();

    // Outside any span, or inside one of Plexus's own (log context, not
    // exported): no context travels, no span is made anywhere.
    assert_eq!(middle_from_a.ask(Middle::Ask, T).await, Ok(42));
    let internal = tracing::info_span!(target: "plexus::cluster", "cluster");
    let answer = middle_from_a.ask(Middle::Ask, T).instrument(internal).await;
    assert_eq!(answer, Ok(42));
    // One ask in a span of A's.
    let checkout = tracing::info_span!("checkout");
    let answer = middle_from_a
        .ask(Middle::Ask, T)
        .instrument(checkout.clone())
        .await;
    assert_eq!(answer, Ok(42));
    // A tell in another span.
    let notify = tracing::info_span!("notify");
    notify.in_scope(|| middle_from_a.tell(Middle::Notify));
    notifications.recv().await.unwrap();
    drop((checkout, notify));
    // Every handler before these has returned and its span has closed.
    middle_from_a.ask(Middle::Flush, T).await.unwrap();
    leaf_from_a.ask(Leaf::Flush, T).await.unwrap();
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let named =
        |name: &str| -> Vec<&SpanData> { spans.iter().filter(|s| s.name == name).collect() };
    let [checkout] = named("checkout")[..] else {
        panic!("one checkout span: {spans:#?}")
    };
    let [notify] = named("notify")[..] else {
        panic!("one notify span: {spans:#?}")
    };
    let handled = named("handle");
    assert_eq!(handled.len(), 3, "B's ask, C's get, B's notify: {spans:#?}");
    let child_of = |parent: &SpanData| -> &SpanData {
        let children: Vec<&&SpanData> = handled
            .iter()
            .filter(|s| s.parent_span_id == parent.span_context.span_id())
            .collect();
        assert_eq!(children.len(), 1, "one handle span under {}", parent.name);
        children[0]
    };
    let trace = checkout.span_context.trace_id();
    let on_b = child_of(checkout);
    let on_c = child_of(on_b);
    for (span, actor) in [(on_b, "MiddleActor"), (on_c, "LeafActor")] {
        assert_eq!(span.span_context.trace_id(), trace, "one trace");
        assert!(span.parent_span_is_remote, "the parent came over the wire");
        assert!(
            span.attributes
                .iter()
                .any(|kv| kv.key.as_str() == "actor" && kv.value.as_str().ends_with(actor)),
            "{span:#?}"
        );
    }
    assert_eq!(
        checkout.parent_span_id,
        SpanId::INVALID,
        "A's span is the root"
    );
    let notified = child_of(notify);
    assert_eq!(
        notified.span_context.trace_id(),
        notify.span_context.trace_id()
    );
    assert_ne!(notify.span_context.trace_id(), trace, "a trace of its own");
    assert!(notified.parent_span_is_remote);

    for system in [a, b, c] {
        system.shutdown().await;
    }
}
