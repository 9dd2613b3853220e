//! Two nodes on 127.0.0.1 under their own load and after idle time: what
//! `tell`, `send` and `tell_with_receipt` promise when the link's send
//! buffer is full, and refs that outlive a link closed as idle.
//!
//! The overload tests offer 16 MiB through a 64 KiB send buffer from a
//! current-thread runtime that does not yield while it tells: the link's
//! driver cannot drain meanwhile, so the buffer fills whatever the machine's
//! speed, and every message must still be accounted for.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plexus_core::remote::ReceiptError;
use plexus_core::{ActorRef, ActorSystem, AskError, DeadLetterReason, ExitReason, ReplyTo};
use plexus_remote::{Node, NodeConfig};
use plexus_transport::LinkConfig;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

#[path = "common/udp_idle.rs"]
mod udp_idle;
use udp_idle::transports_with_udp_idle;

/// Only guards against a hang; no test waits for it to pass.
const T: Duration = Duration::from_secs(60);

/// Messages offered by the overload tests, and their payload.
const COUNT: u64 = 16_384;
const PAD: usize = 1_000;

#[derive(Serialize, Deserialize)]
struct Chunk(u64, Vec<u8>);
plexus_core::remote_message!(Chunk = "overload.Chunk");

#[derive(Serialize, Deserialize)]
struct Ping(ReplyTo<u64>);
plexus_core::remote_message!(Ping = "overload.Ping");

/// What the sink saw: messages in increasing order (gaps allowed: dead
/// letters), never one twice.
struct Seen {
    received: u64,
    last: Option<u64>,
    expect: Option<(u64, oneshot::Sender<u64>)>,
}

fn small_buffers() -> LinkConfig {
    LinkConfig {
        send_buffer: 64 << 10,
        ..LinkConfig::default()
    }
}

/// A sink node on tcp://127.0.0.1 and a sender node, both with a 64 KiB
/// send buffer; the sender's ref to the sink and what the sink saw.
async fn pair() -> (
    (ActorSystem, Node),
    (ActorSystem, Node),
    ActorRef<Chunk>,
    Arc<Mutex<Seen>>,
) {
    let config = || NodeConfig::default().link_buffers(small_buffers());
    let sys_b = ActorSystem::new();
    let node_b = Node::start(&sys_b, config()).unwrap();
    let uri = node_b.listen("tcp://127.0.0.1:0").await.unwrap();
    let seen = Arc::new(Mutex::new(Seen {
        received: 0,
        last: None,
        expect: None,
    }));
    let s = seen.clone();
    let sink = sys_b.spawn_fn(move |Chunk(seq, _), _ctx| {
        let mut s = s.lock().unwrap();
        assert!(s.last.is_none_or(|l| seq > l), "{seq} after {:?}", s.last);
        s.last = Some(seq);
        s.received += 1;
        if s.expect.as_ref().is_some_and(|(n, _)| s.received == *n) {
            let (n, tx) = s.expect.take().unwrap();
            let _ = tx.send(n);
        }
    });
    node_b.publish(&sink, "sink").unwrap();
    node_b
        .publish(&sys_b.spawn_fn(|Ping(reply), _ctx| reply.send(7)), "pong")
        .unwrap();
    let sys_a = ActorSystem::new();
    let node_a = Node::start(&sys_a, config()).unwrap();
    let to: ActorRef<Chunk> = node_a.resolve(&format!("{uri}/sink")).await.unwrap();
    ((sys_a, node_a), (sys_b, node_b), to, seen)
}

/// Resolves once the sink has received `n` messages.
fn received(seen: &Mutex<Seen>, n: u64) -> oneshot::Receiver<u64> {
    let (tx, rx) = oneshot::channel();
    let mut s = seen.lock().unwrap();
    if s.received >= n {
        let _ = tx.send(s.received);
    } else {
        s.expect = Some((n, tx));
    }
    rx
}

/// Log lines written while a test runs, to assert what an operator sees.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn tell_beyond_the_send_buffer_makes_counted_dead_letters_logged_at_warn() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let ((sys_a, node_a), (_sys_b, _node_b), to, seen) = pair().await;
    let mut letters = sys_a.dead_letters().subscribe();
    let before = sys_a.dead_letters().count();
    for seq in 0..COUNT {
        to.tell(Chunk(seq, vec![0x5a; PAD]));
    }
    let dead = sys_a.dead_letters().count() - before;
    assert!(
        dead > 0,
        "16 MiB told at once must overflow a 64 KiB buffer"
    );
    // The subscriber holds the last 1,024 letters; the older ones it
    // reports as lagged.
    let letter = loop {
        match letters.recv().await {
            Ok(letter) => break letter,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(letter.reason, DeadLetterReason::SendBufferFull);
    // Every message is accounted for: delivered (in order, once) or a
    // counted dead letter.
    let delivered = tokio::time::timeout(T, received(&seen, COUNT - dead))
        .await
        .expect("the rest arrives")
        .unwrap();
    assert_eq!(delivered + dead, COUNT);
    let stats = node_a.link_stats();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].send_buffer_full, dead, "counted on the peer");
    let warns: Vec<_> = captured
        .lines()
        .into_iter()
        .filter(|l| l.contains("WARN") && l.contains("send buffer"))
        .collect();
    assert!(!warns.is_empty(), "logged at WARN");
    assert!(
        warns.len() < dead as usize,
        "rate-limited: {} lines for {dead} letters",
        warns.len()
    );
    assert!(warns[0].contains("since_last"), "{}", warns[0]);
}

#[tokio::test(flavor = "current_thread")]
async fn tell_with_receipt_on_a_full_send_buffer_fails_with_send_buffer_full() {
    let ((_sys_a, node_a), _b, to, _seen) = pair().await;
    for seq in 0..COUNT {
        to.tell(Chunk(seq, vec![0x5a; PAD]));
    }
    // Nothing has drained: this thread did not yield.
    let receipt = to.tell_with_receipt(Chunk(COUNT, vec![0x5a; PAD])).await;
    assert_eq!(receipt, Err(ReceiptError::SendBufferFull));
    assert!(node_a.link_stats()[0].send_buffer_full > 0);
}

#[tokio::test(flavor = "current_thread")]
async fn an_ask_on_a_full_send_buffer_fails_at_once_as_not_sent() {
    let ((sys_a, node_a), _b, to, _seen) = pair().await;
    let uri = node_a.link_stats()[0].peer.clone();
    let pong: ActorRef<Ping> = node_a
        .resolve(&format!("{uri}/pong"))
        .await
        .expect("resolve pong");
    for seq in 0..COUNT {
        to.tell(Chunk(seq, vec![0x5a; PAD]));
    }
    // Filled to the last byte: until a message smaller than the request is
    // refused too.
    let dead = sys_a.dead_letters().count();
    let mut seq = COUNT;
    while sys_a.dead_letters().count() == dead {
        to.tell(Chunk(seq, Vec::new()));
        seq += 1;
    }
    // Refused at once, not at the ask's (hour-long) timeout.
    let asked = pong.ask(Ping, Duration::from_secs(3600)).await;
    assert_eq!(
        asked,
        Err(AskError::NotSent {
            target: pong.id(),
            reason: DeadLetterReason::SendBufferFull
        })
    );
}

#[tokio::test(flavor = "current_thread")]
async fn send_waits_for_room_and_loses_nothing() {
    let ((sys_a, node_a), _b, to, seen) = pair().await;
    let before = sys_a.dead_letters().count();
    for seq in 0..COUNT {
        to.send(Chunk(seq, vec![0x5a; PAD]))
            .await
            .unwrap_or_else(|e| panic!("send {seq}: {e}"));
    }
    let delivered = tokio::time::timeout(T, received(&seen, COUNT))
        .await
        .expect("everything arrives")
        .unwrap();
    assert_eq!(delivered, COUNT);
    assert_eq!(sys_a.dead_letters().count(), before, "no dead letter");
    assert_eq!(node_a.link_stats()[0].send_buffer_full, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_works_after_its_udp_link_was_closed_as_idle() {
    // No heartbeat layer: nothing crosses an unused link, so each side
    // drops it after the idle timeout (2 s: long enough that a handshake
    // on a loaded machine is not cut short as idle).
    let config = || {
        NodeConfig::default()
            .scheme("udp", "udp / slicing / delivery / ordering / batching")
            .transports(transports_with_udp_idle(Duration::from_secs(2)))
    };
    let (sys_a, sys_b) = (ActorSystem::new(), ActorSystem::new());
    let node_a = Node::start(&sys_a, config()).unwrap();
    let node_b = Node::start(&sys_b, config()).unwrap();
    let uri_a = node_a.listen("udp://127.0.0.1:0").await.unwrap();
    let uri_b = node_b.listen("udp://127.0.0.1:0").await.unwrap();
    let pong = |sys: &ActorSystem| sys.spawn_fn(|Ping(reply), _ctx| reply.send(7));
    node_a.publish(&pong(&sys_a), "pong").unwrap();
    node_b.publish(&pong(&sys_b), "pong").unwrap();
    let on_b: ActorRef<Ping> = node_a.resolve(&format!("{uri_b}/pong")).await.unwrap();
    let on_a: ActorRef<Ping> = node_b.resolve(&format!("{uri_a}/pong")).await.unwrap();
    assert_eq!(on_b.ask(Ping, T).await, Ok(7));

    // Both sides see their link closed as idle (a monitor is told: the
    // link it relied on is gone), and the refs stay alive.
    let (down_a, down_b) = tokio::join!(on_b.monitor(), on_a.monitor());
    for down in [down_a, down_b] {
        match down.reason {
            ExitReason::NodeDown { cause, .. } => assert!(cause.contains("idle"), "{cause}"),
            other => panic!("expected NodeDown, got {other:?}"),
        }
    }
    assert!(on_b.is_alive() && on_a.is_alive());
    assert_eq!(on_b.ask(Ping, T).await, Ok(7), "the link is dialled again");
    assert_eq!(on_a.ask(Ping, T).await, Ok(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_to_a_node_that_cannot_be_reached_fails_with_node_unreachable() {
    let config = || {
        NodeConfig::default()
            .scheme("udp", "udp / slicing / delivery / ordering / batching")
            .transports(transports_with_udp_idle(Duration::from_secs(2)))
            .connect_timeout(Duration::from_millis(300))
    };
    let (sys_a, sys_b) = (ActorSystem::new(), ActorSystem::new());
    let node_a = Node::start(&sys_a, config()).unwrap();
    let node_b = Node::start(&sys_b, config()).unwrap();
    let uri_b = node_b.listen("udp://127.0.0.1:0").await.unwrap();
    node_b
        .publish(&sys_b.spawn_fn(|Ping(reply), _ctx| reply.send(7)), "pong")
        .unwrap();
    let on_b: ActorRef<Ping> = node_a.resolve(&format!("{uri_b}/pong")).await.unwrap();
    let down = on_b.monitor();
    assert_eq!(on_b.ask(Ping, T).await, Ok(7));
    // The link closes as idle, then node b goes away for good: the next
    // ask dials it again and cannot reach it.
    down.await;
    node_b.shutdown().await;
    sys_b.shutdown().await;
    match on_b.ask(Ping, T).await {
        Err(AskError::NodeUnreachable { node, cause, .. }) => {
            assert_eq!(node, on_b.id().node());
            assert!(
                cause.downcast_ref::<plexus_remote::LinkError>().is_some(),
                "the connect's typed error: {cause:?}"
            );
        }
        other => panic!("expected NodeUnreachable, got {other:?}"),
    }
}
