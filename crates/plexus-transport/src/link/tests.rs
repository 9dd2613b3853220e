//! Receiving on the driver: a handler takes what arrives while the receiver waits
//! idle, never while the receiver holds or has queued items (that would
//! reorder them), and leaves what it does not handle to the receiver.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use super::{lock, DriverReceive, LinkReceiver, Received};
use crate::stream::tests::pair;
use crate::LinkConfig;

/// Takes messages until one starting with `slow`, which it leaves (with
/// everything behind it) to the receiver.
struct Recorder {
    taken: Arc<Mutex<Vec<Bytes>>>,
    /// Dropped with the handler: shows when that happens.
    _alive: Arc<()>,
}

impl DriverReceive for Recorder {
    fn receive(&mut self, batch: &mut VecDeque<Received>) {
        while let Some(Received::Message(m)) = batch.front() {
            if m.starts_with(b"slow") {
                return;
            }
            let Some(Received::Message(m)) = batch.pop_front() else {
                return;
            };
            lock(&self.taken).push(m);
        }
    }
}

/// Polls `cond` every millisecond for up to a second.
async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("timed out waiting until {what}");
}

fn queued(rx: &LinkReceiver) -> usize {
    lock(&rx.shared.inb).queue.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_side_handler_runs_only_while_the_receiver_waits_with_nothing_in_hand() {
    let (client, server) = pair(LinkConfig::default()).await;
    let (_client_tx, mut rx) = client.split();
    let taken = Arc::new(Mutex::new(Vec::new()));
    rx.receive_on_driver(Box::new(Recorder {
        taken: taken.clone(),
        _alive: Arc::new(()),
    }));
    let got = |n: usize| {
        let taken = taken.clone();
        move || lock(&taken).len() == n
    };

    server.try_send_copy(b"a").unwrap();
    until("the handler took a", got(1)).await;
    // Left by the handler: queued for the receiver.
    server.try_send_copy(b"slow 1").unwrap();
    until("slow 1 is queued", || queued(&rx) == 1).await;
    // Not taken by the handler: it would overtake the queued message.
    server.try_send_copy(b"b").unwrap();
    until("b is queued behind it", || queued(&rx) == 2).await;
    assert_eq!(*lock(&taken), [&b"a"[..]]);

    // The receiver takes both; holding `b`, it is busy: `c` is queued too.
    assert_eq!(rx.recv_message().await.unwrap(), &b"slow 1"[..]);
    server.try_send_copy(b"c").unwrap();
    until("c is queued", || queued(&rx) == 1).await;
    assert_eq!(rx.recv_message().await.unwrap(), &b"b"[..]);
    assert_eq!(rx.recv_message().await.unwrap(), &b"c"[..]);
    assert_eq!(lock(&taken).len(), 1);

    // Waiting again with nothing in hand: the handler takes what comes,
    // and the receiver gets only what the handler leaves.
    let shared = rx.shared.clone();
    let waiting = tokio::spawn(async move {
        let m = rx.recv_message().await.unwrap();
        (m, rx)
    });
    until("the receiver waits", || {
        let inb = lock(&shared.inb);
        inb.receiver.is_some() && !inb.receiver_busy
    })
    .await;
    server.try_send_copy(b"d").unwrap();
    until("the handler took d", got(2)).await;
    server.try_send_copy(b"slow 2").unwrap();
    let (m, rx) = waiting.await.unwrap();
    assert_eq!(m, &b"slow 2"[..]);
    assert_eq!(*lock(&taken), [&b"a"[..], &b"d"[..]]);
    drop(rx);
}

#[tokio::test]
async fn dropping_the_receiver_drops_its_driver_side_handler() {
    let (client, _server) = pair(LinkConfig::default()).await;
    let (_tx, mut rx) = client.split();
    let alive = Arc::new(());
    rx.receive_on_driver(Box::new(Recorder {
        taken: Arc::default(),
        _alive: alive.clone(),
    }));
    assert_eq!(Arc::strong_count(&alive), 2);
    drop(rx);
    // The handler may own handles of the link (a cycle through the link's
    // shared state): it must go with the receiver.
    assert_eq!(Arc::strong_count(&alive), 1);
}
