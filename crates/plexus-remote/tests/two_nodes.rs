//! Two nodes in one process over real links: publish, resolve, tell, ask,
//! refs inside messages, monitors, links, receipts, forged refs, errors.

use std::time::Duration;

use plexus_core::remote::ReceiptError;
use plexus_core::{Actor, ActorRef, ActorSystem, Context, Down, ExitReason, ReplyTo};
use plexus_remote::{LinkError, Node, NodeConfig, ResolveError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
enum Counter {
    Add(u64),
    Get(ReplyTo<u64>),
    /// Reply to the ref inside the message.
    Report(ActorRef<Total>),
    Crash,
}
plexus_core::remote_message!(Counter = "test.Counter");

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Total(u64);
plexus_core::remote_message!(Total = "test.Total");

#[derive(Serialize, Deserialize)]
struct Other;
plexus_core::remote_message!(Other = "test.Other");

#[derive(Default)]
struct CounterActor(u64);

impl Actor for CounterActor {
    type Msg = Counter;
    async fn handle(&mut self, msg: Counter, ctx: &mut Context<Counter>) {
        match msg {
            Counter::Add(n) => self.0 += n,
            Counter::Get(r) => r.send(self.0),
            Counter::Report(to) => to.tell(Total(self.0)),
            Counter::Crash => ctx.fail("asked to crash"),
        }
    }
}

const T: Duration = Duration::from_secs(5);

struct World {
    _a: ActorSystem,
    b: ActorSystem,
    na: Node,
    nb: Node,
    uri_b: String,
}

async fn world(scheme_listen: &str) -> World {
    let a = ActorSystem::new();
    let b = ActorSystem::new();
    let cfg = NodeConfig::default().cookie("test-cookie");
    let na = Node::start(&a, cfg.clone()).unwrap();
    let nb = Node::start(&b, cfg).unwrap();
    let uri_b = nb.listen(scheme_listen).await.unwrap();
    World {
        _a: a,
        b,
        na,
        nb,
        uri_b,
    }
}

async fn basic_exchange(scheme_listen: &str) {
    let w = world(scheme_listen).await;
    let counter = w.b.spawn(CounterActor::default());
    w.nb.publish(&counter, "counter").unwrap();
    let remote: ActorRef<Counter> = w.na.resolve(&format!("{}/counter", w.uri_b)).await.unwrap();
    assert!(remote.is_remote());
    assert_eq!(remote.id(), counter.id());
    for i in 1..=100 {
        remote.tell(Counter::Add(i));
    }
    assert_eq!(remote.ask(Counter::Get, T).await, Ok(5050));

    // A ref inside a message: the remote actor answers a local one.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = w._a.spawn_fn(move |t: Total, _ctx| {
        let _ = tx.send(t);
    });
    remote.tell(Counter::Report(sink));
    assert_eq!(rx.recv().await, Some(Total(5050)));

    // Receipts.
    assert_eq!(
        remote.tell_with_receipt(Counter::Add(1)).await,
        Ok(plexus_core::Receipt::Delivered)
    );

    // Monitor across nodes, Down when the actor stops.
    let down = remote.monitor();
    remote.tell(Counter::Crash);
    let down: Down = tokio::time::timeout(T, down).await.unwrap();
    assert_eq!(down.reason, ExitReason::Failed("asked to crash".into()));
    assert_eq!(down.id, counter.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tell_ask_refs_receipts_and_monitor_over_mem() {
    basic_exchange("mem://two-nodes-b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tell_ask_refs_receipts_and_monitor_over_tcp() {
    basic_exchange("tcp://127.0.0.1:0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tell_ask_refs_receipts_and_monitor_over_udp() {
    basic_exchange("udp://127.0.0.1:0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_errors_are_precise() {
    let w = world("tcp://127.0.0.1:0").await;
    let counter = w.b.spawn(CounterActor::default());
    w.nb.publish(&counter, "counter").unwrap();
    match w
        .na
        .resolve::<Counter>(&format!("{}/nobody", w.uri_b))
        .await
    {
        Err(ResolveError::NoSuchName { name, .. }) => assert_eq!(name, "nobody"),
        other => panic!("{other:?}"),
    }
    match w.na.resolve::<Other>(&format!("{}/counter", w.uri_b)).await {
        Err(e @ ResolveError::WrongType { .. }) => {
            let text = e.to_string();
            assert!(text.contains("expected test.Other"), "{text}");
            assert!(text.contains("accepts test.Counter"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // Nothing listens on this port.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err =
        w.na.resolve::<Counter>(&format!("tcp://{free}/counter"))
            .await
            .unwrap_err();
    assert!(
        matches!(
            &err,
            ResolveError::Link { source: LinkError::Connect(c), .. }
                if matches!(**c, plexus_transport::ConnectError::Io { .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("(os error "), "{err}");
    assert!(matches!(
        w.na.resolve::<Counter>("tcp://127.0.0.1:1/x").await,
        Err(ResolveError::Link { .. })
    ));
    assert!(matches!(
        w.na.resolve::<Counter>("nope://127.0.0.1:1/x").await,
        Err(ResolveError::UnknownScheme { .. })
    ));
    assert!(matches!(
        w.na.resolve::<Counter>(&w.uri_b).await,
        Err(ResolveError::BadUri { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_mismatch_is_named_on_both_sides() {
    let a = ActorSystem::new();
    let b = ActorSystem::new();
    let na = Node::start(&a, NodeConfig::default().cookie("one")).unwrap();
    let nb = Node::start(&b, NodeConfig::default().cookie("two")).unwrap();
    let uri = nb.listen("tcp://127.0.0.1:0").await.unwrap();
    let err = na
        .resolve::<Counter>(&format!("{uri}/counter"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("handshake failed"), "{text}");
    assert!(text.contains("cookie mismatch"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_ref_works_and_a_wrong_one_goes_down() {
    let w = world("tcp://127.0.0.1:0").await;
    let counter = w.b.spawn(CounterActor::default());
    w.nb.publish(&counter, "counter").unwrap();
    let forged: ActorRef<Counter> = w.na.forge(&format!("{}/counter", w.uri_b)).unwrap();
    forged.tell(Counter::Add(2));
    forged.tell(Counter::Add(3));
    assert_eq!(forged.ask(Counter::Get, T).await, Ok(5));
    let bad: ActorRef<Counter> = w.na.forge(&format!("{}/ghost", w.uri_b)).unwrap();
    let down = bad.monitor();
    bad.tell(Counter::Add(1));
    let down = tokio::time::timeout(T, down).await.unwrap();
    assert!(
        down.reason.to_string().contains("no actor named"),
        "{}",
        down.reason
    );
    assert!(!bad.is_alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipt_for_a_stopped_remote_actor_is_an_error() {
    let w = world("mem://receipts-b").await;
    let counter = w.b.spawn(CounterActor::default());
    w.nb.publish(&counter, "counter").unwrap();
    let remote: ActorRef<Counter> = w.na.resolve(&format!("{}/counter", w.uri_b)).await.unwrap();
    counter.stop();
    counter.monitor().await;
    let r = remote.tell_with_receipt(Counter::Add(1)).await;
    assert!(
        matches!(r, Err(ReceiptError::NoSuchActor | ReceiptError::Stopped)),
        "{r:?}"
    );
    assert!(w.b.dead_letters().count() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_shutdown_delivers_node_down_and_fails_asks() {
    let w = world("tcp://127.0.0.1:0").await;
    #[derive(Serialize, Deserialize)]
    struct Ask(ReplyTo<u64>);
    plexus_core::remote_message!(Ask = "test.Ask");
    let mut held = Vec::new();
    let (asked_tx, mut asked_rx) = tokio::sync::mpsc::unbounded_channel();
    let silent = w.b.spawn_fn(move |Ask(r), _ctx| {
        held.push(r);
        let _ = asked_tx.send(());
    });
    w.nb.publish(&silent, "silent").unwrap();
    let remote: ActorRef<Ask> = w.na.resolve(&format!("{}/silent", w.uri_b)).await.unwrap();
    let down = remote.monitor();
    let pending = {
        let r = remote.clone();
        tokio::spawn(async move { r.ask(Ask, Duration::from_secs(30)).await })
    };
    // The ask reached the silent actor: it is pending at the other node.
    asked_rx.recv().await.expect("the ask arrives");
    w.nb.shutdown().await;
    let down = tokio::time::timeout(T, down).await.unwrap();
    assert!(
        matches!(down.reason, ExitReason::NodeDown { .. }),
        "{:?}",
        down.reason
    );
    let asked = tokio::time::timeout(T, pending).await.unwrap().unwrap();
    assert!(asked.is_err(), "{asked:?}");
}

/// Sends once on the node's debug event "actor flooded; pausing the link":
/// a test waits for the pause instead of sleeping.
struct OnPause(std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for OnPause {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 |= format!("{value:?}").contains("pausing the link");
                }
            }
        }
        let mut pause = Message(false);
        event.record(&mut pause);
        if pause.0 {
            if let Some(tx) = self.0.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooded_actor_pauses_the_link_instead_of_growing_without_bound() {
    use tracing_subscriber::layer::SubscriberExt;
    let (paused_tx, paused) = tokio::sync::oneshot::channel();
    let on_pause = OnPause(std::sync::Mutex::new(Some(paused_tx)));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(on_pause))
        .expect("no other test of this file sets a subscriber");
    let w = world("tcp://127.0.0.1:0").await;
    let (gate_tx, gate_rx) = tokio::sync::oneshot::channel::<()>();
    let mut gate = Some(gate_rx);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    struct Slow {
        gate: Option<tokio::sync::oneshot::Receiver<()>>,
        seen: u64,
        done: tokio::sync::mpsc::UnboundedSender<u64>,
    }
    impl Actor for Slow {
        type Msg = Total;
        async fn handle(&mut self, Total(n): Total, _ctx: &mut Context<Total>) {
            if let Some(g) = self.gate.take() {
                let _ = g.await;
            }
            self.seen += 1;
            if n == 0 {
                let _ = self.done.send(self.seen);
            }
        }
    }
    let slow = w.b.spawn(Slow {
        gate: gate.take(),
        seen: 0,
        done: done_tx,
    });
    w.nb.publish(&slow, "slow").unwrap();
    let remote: ActorRef<Total> = w.na.resolve(&format!("{}/slow", w.uri_b)).await.unwrap();
    const N: u64 = 300_000;
    for i in (0..N).rev() {
        remote.tell(Total(i));
    }
    // The link pauses above the high-water mark; while the actor is gated
    // its queue cannot drain, so nothing more arrives.
    paused.await.expect("the link pauses");
    let queued = plexus_core::remote::control_of(&slow).queued();
    assert!(
        queued <= 150_000,
        "mailbox grew to {queued}: the link must pause above its high-water mark"
    );
    gate_tx.send(()).unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(60), done_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen, N, "nothing is lost while the link is paused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_connects_settle_on_one_link() {
    for round in 0..5 {
        let (a, b) = (ActorSystem::new(), ActorSystem::new());
        let cfg = NodeConfig::default().cookie("sim");
        let na = Node::start(&a, cfg.clone()).unwrap();
        let nb = Node::start(&b, cfg).unwrap();
        let ua = na.listen("tcp://127.0.0.1:0").await.unwrap();
        let ub = nb.listen("tcp://127.0.0.1:0").await.unwrap();
        let ca = a.spawn(CounterActor::default());
        let cb = b.spawn(CounterActor::default());
        na.publish(&ca, "c").unwrap();
        nb.publish(&cb, "c").unwrap();
        // Both dial each other at the same time.
        let (to_b, to_a) = (format!("{ub}/c"), format!("{ua}/c"));
        let (ra, rb) = tokio::join!(na.resolve::<Counter>(&to_b), nb.resolve::<Counter>(&to_a));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        ra.tell(Counter::Add(2));
        rb.tell(Counter::Add(3));
        assert_eq!(ra.ask(Counter::Get, T).await, Ok(2), "round {round}");
        assert_eq!(rb.ask(Counter::Get, T).await, Ok(3), "round {round}");
        // One link per node pair, whichever dial won.
        assert_eq!(na.link_count(), 1, "round {round}");
        assert_eq!(nb.link_count(), 1, "round {round}");
        assert_eq!(ra.ask(Counter::Get, T).await, Ok(2), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_held_while_connecting_are_bounded_and_then_dead_letters() {
    let a = ActorSystem::new();
    let na = Node::start(
        &a,
        NodeConfig::default()
            .pending_messages(8)
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(50)),
    )
    .unwrap();
    let mut letters = a.dead_letters().subscribe();
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // Nothing listens there: every message ends as a dead letter, either
    // refused at once (beyond the bound of 8 held) or when the connect
    // attempt holding it fails.
    let r: ActorRef<Counter> = na.forge(&format!("tcp://{free}/c")).unwrap();
    for i in 0..20 {
        r.tell(Counter::Add(i));
    }
    for n in 0..20 {
        let dl = tokio::time::timeout(T, letters.recv())
            .await
            .unwrap_or_else(|_| panic!("only {n} of 20 dead letters"))
            .unwrap();
        assert!(
            matches!(
                dl.reason,
                plexus_core::DeadLetterReason::SendBufferFull
                    | plexus_core::DeadLetterReason::Undeliverable
                    | plexus_core::DeadLetterReason::Stopped
            ),
            "{dl:?}"
        );
    }
    // The forged ref ends with a Down naming the failed resolve.
    let down = tokio::time::timeout(T, r.monitor()).await.unwrap();
    assert!(
        down.reason.to_string().contains("resolve tcp://"),
        "{}",
        down.reason
    );
}

#[test]
fn refs_to_remote_actors_work_from_plain_threads() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (w, counter) = rt.block_on(async {
        let w = world("tcp://127.0.0.1:0").await;
        let counter = w.b.spawn(CounterActor::default());
        w.nb.publish(&counter, "counter").unwrap();
        (w, counter)
    });
    // Forged on a plain thread: its connect starts on the node's runtime.
    let uri = format!("{}/counter", w.uri_b);
    let na = w.na.clone();
    std::thread::spawn(move || {
        let forged: ActorRef<Counter> = na.forge(&uri).unwrap();
        for i in 1..=4 {
            forged.tell(Counter::Add(i));
        }
    })
    .join()
    .unwrap();
    let total = rt.block_on(async {
        let r: ActorRef<Counter> = w.na.resolve(&format!("{}/counter", w.uri_b)).await.unwrap();
        // One peer link, FIFO: the forged tells were queued before this ask.
        r.ask(Counter::Get, T).await
    });
    assert_eq!(total, Ok(10));
    drop(counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_udp_scheme_carries_tell_ask_and_refs() {
    let psk = "7f".repeat(32);
    let spec = format!("udp / slicing / encryption(psk={psk}) / delivery / ordering");
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let cfg = NodeConfig::default().cookie("enc").scheme("sudp", spec);
    let na = Node::start(&a, cfg.clone()).unwrap();
    let nb = Node::start(&b, cfg).unwrap();
    let uri = nb.listen("sudp://127.0.0.1:0").await.unwrap();
    assert!(uri.starts_with("sudp://127.0.0.1:"), "{uri}");
    let counter = b.spawn(CounterActor::default());
    nb.publish(&counter, "counter").unwrap();
    let remote: ActorRef<Counter> = na.resolve(&format!("{uri}/counter")).await.unwrap();
    for i in 1..=100 {
        remote.tell(Counter::Add(i));
    }
    assert_eq!(remote.ask(Counter::Get, T).await, Ok(5050));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = a.spawn_fn(move |t: Total, _ctx| {
        let _ = tx.send(t);
    });
    remote.tell(Counter::Report(sink));
    assert_eq!(
        tokio::time::timeout(T, rx.recv()).await.unwrap(),
        Some(Total(5050))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_scheme_with_another_key_never_connects() {
    let spec = |k: &str| {
        format!(
            "udp / slicing / encryption(psk={}, handshake_timeout=1s) / delivery / ordering",
            k.repeat(32)
        )
    };
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let na = Node::start(
        &a,
        NodeConfig::default()
            .scheme("sudp", spec("11"))
            .connect_timeout(Duration::from_secs(3)),
    )
    .unwrap();
    let nb = Node::start(&b, NodeConfig::default().scheme("sudp", spec("22"))).unwrap();
    let uri = nb.listen("sudp://127.0.0.1:0").await.unwrap();
    let counter = b.spawn(CounterActor::default());
    nb.publish(&counter, "counter").unwrap();
    let err = na
        .resolve::<Counter>(&format!("{uri}/counter"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("resolve {uri}/counter")),
        "{text}"
    );
    assert_eq!(b.dead_letters().count(), 0);
    assert!(counter.is_alive());
}

/// A node that failed to dial an address once, then is dialled by the node
/// listening there, reaches it over that node's link. Over UDP one
/// endpoint holds one link per address, so a second dial is refused: the
/// failed dial's peer must not shadow the accepted link. (W5 with three
/// servers: a server forwarded a device's registration to its owner while
/// the device's own first packet was still in its handshake there; the
/// owner's dial of the device failed, and every ref forged again reused
/// that failed dial, so the owner never reached the device.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dial_does_not_shadow_the_link_of_a_node_that_dialled_us() {
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let cfg = NodeConfig::default()
        .cookie("shadow")
        .scheme("udp", "udp")
        .connect_timeout(Duration::from_millis(300));
    let nb = Node::start(&b, cfg.clone()).unwrap();
    let ub = nb.listen("udp://127.0.0.1:0").await.unwrap();
    let cb = b.spawn(CounterActor::default());
    nb.publish(&cb, "c").unwrap();
    // A silent socket holds A's future address: B's dial of it fails.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let to_a = format!("udp://{addr}/c");
    let failed: ActorRef<Counter> = nb.forge(&to_a).unwrap();
    let down = tokio::time::timeout(T, failed.monitor()).await.unwrap();
    assert!(
        down.reason.to_string().contains("resolve"),
        "{}",
        down.reason
    );
    drop(silent);
    // A starts there and dials B: B now has A's link, accepted.
    let na = Node::start(&a, cfg).unwrap();
    na.listen(&format!("udp://{addr}")).await.unwrap();
    let ca = a.spawn(CounterActor::default());
    na.publish(&ca, "c").unwrap();
    let rb: ActorRef<Counter> = na.resolve(&format!("{ub}/c")).await.unwrap();
    rb.tell(Counter::Add(1));
    assert_eq!(rb.ask(Counter::Get, T).await, Ok(1));
    // B forges a ref to A again: it goes over the accepted link.
    let ra: ActorRef<Counter> = nb.forge(&to_a).unwrap();
    ra.tell(Counter::Add(7));
    assert_eq!(ra.ask(Counter::Get, T).await, Ok(7));
    assert_eq!(nb.link_count(), 1);
}
