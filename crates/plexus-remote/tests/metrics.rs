//! Metrics (issue 31): what `Node::record_metrics` publishes after two
//! nodes in one process exchanged messages over tcp and udp links, read
//! back through metrics-util's debugging recorder installed around the
//! call only (`record_metrics` is synchronous: it reads counters the links
//! keep anyway).

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use plexus_core::{Actor, ActorRef, ActorSystem, Context, ReplyTo};
use plexus_remote::{Node, NodeConfig};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
enum Counter {
    Add(u64),
    Get(ReplyTo<u64>),
}
plexus_core::remote_message!(Counter = "test.metrics.Counter");

#[derive(Default)]
struct CounterActor(u64);

impl Actor for CounterActor {
    type Msg = Counter;
    async fn handle(&mut self, msg: Counter, _ctx: &mut Context<Counter>) {
        match msg {
            Counter::Add(n) => self.0 += n,
            Counter::Get(r) => r.send(self.0),
        }
    }
}

const T: Duration = Duration::from_secs(5);

/// What `node.record_metrics()` publishes, by `name{label=value,...}`
/// (labels sorted).
fn recorded(node: &Node) -> HashMap<String, DebugValue> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || node.record_metrics());
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

fn counter(m: &HashMap<String, DebugValue>, key: &str) -> u64 {
    match m.get(key) {
        Some(DebugValue::Counter(v)) => *v,
        other => panic!("{key}: not a counter: {other:?} in {:?}", m.keys()),
    }
}

/// `a` tells 10 messages to an actor on `b` and asks once; returns the
/// nodes (and keeps the systems alive with them).
async fn exchange(listen: &str) -> (ActorSystem, ActorSystem, Node, Node, ActorRef<Counter>) {
    let a = ActorSystem::new();
    let b = ActorSystem::new();
    let cfg = NodeConfig::default().cookie("test-cookie");
    let na = Node::start(&a, cfg.clone()).unwrap();
    let nb = Node::start(&b, cfg).unwrap();
    let uri_b = nb.listen(listen).await.unwrap();
    let counter = b.spawn(CounterActor::default());
    nb.publish(&counter, "counter").unwrap();
    let remote: ActorRef<Counter> = na.resolve(&format!("{uri_b}/counter")).await.unwrap();
    for i in 1..=10 {
        remote.tell(Counter::Add(i));
    }
    assert_eq!(remote.ask(Counter::Get, T).await, Ok(55));
    (a, b, na, nb, remote)
}

async fn counts_messages_each_way(listen: &str, scheme: &str) {
    let (_a, _b, na, nb, remote) = exchange(listen).await;
    let (ma, mb) = (recorded(&na), recorded(&nb));
    let on_a = format!("{{link=primary,peer={},scheme={scheme}}}", nb.id());
    let on_b = format!("{{link=primary,peer={},scheme={scheme}}}", na.id());
    // 10 tells and an ask one way, at least the reply the other (the
    // handshake and resolve add their own).
    let sent = counter(&ma, &format!("plexus_link_sent_messages_total{on_a}"));
    let received = counter(&mb, &format!("plexus_link_received_messages_total{on_b}"));
    assert!(sent >= 11, "sent {sent}");
    assert!(received >= 11, "received {received}");
    assert!(counter(&mb, &format!("plexus_link_sent_messages_total{on_b}")) >= 1);
    assert!(counter(&ma, &format!("plexus_link_sent_bytes_total{on_a}")) > 0);
    assert!(counter(&mb, &format!("plexus_link_received_bytes_total{on_b}")) > 0);
    assert_eq!(
        counter(
            &ma,
            &format!(
                "plexus_link_send_buffer_full_total{{peer={},scheme={scheme}}}",
                nb.id()
            )
        ),
        0
    );
    assert!(
        matches!(ma.get("plexus_links_up{}"), Some(DebugValue::Gauge(v)) if v.into_inner() == 1.0)
    );
    let default_lane = format!(
        "plexus_lane_sent_messages_total{{lane=default,peer={}}}",
        nb.id()
    );
    assert!(counter(&ma, &default_lane) >= 10, "{default_lane}");

    // The stack's own counters (the delivery layer's RTT on udp) are as
    // of the first batch after a read: one more round trip brings them.
    assert_eq!(remote.ask(Counter::Get, T).await, Ok(55));
    let ma = recorded(&na);
    let rtt = ma.get(&format!("plexus_link_rtt_seconds{on_a}"));
    if scheme == "udp" {
        assert!(
            matches!(rtt, Some(DebugValue::Gauge(v)) if v.into_inner() > 0.0),
            "udp link without an RTT: {rtt:?}"
        );
        let _ = counter(&ma, &format!("plexus_link_retransmits_total{on_a}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_link_counts_messages_and_bytes_each_way() {
    counts_messages_each_way("tcp://127.0.0.1:0", "tcp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_link_counts_messages_and_has_an_rtt() {
    counts_messages_each_way("udp://127.0.0.1:0", "udp").await;
}
