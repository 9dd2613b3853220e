//! Receiving on the driver: a handler takes what arrives while the receiver waits
//! idle, never while the receiver holds or has queued items (that would
//! reorder them), and leaves what it does not handle to the receiver.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{lock, DriverReceive, LinkReceiver, Received};
use crate::stream::tests::pair;
use crate::LinkConfig;

/// Takes messages until one starting with `slow`, which it leaves (with
/// everything behind it) to the receiver.
struct Recorder {
    taken: Arc<Mutex<Vec<Bytes>>>,
    /// Told of each message taken.
    took: Option<mpsc::UnboundedSender<()>>,
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
            if let Some(took) = &self.took {
                let _ = took.send(());
            }
        }
    }
}

fn queued(rx: &LinkReceiver) -> usize {
    lock(&rx.shared.inb).queue.len()
}

/// Waits until the driver has queued `n` items for the receiver (woken by
/// each hand-over, not polled).
async fn until_queued(rx: &LinkReceiver, n: usize) {
    loop {
        let handed = rx.shared.on_queued.notified();
        tokio::pin!(handed);
        handed.as_mut().enable();
        if queued(rx) == n {
            return;
        }
        handed.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_side_handler_runs_only_while_the_receiver_waits_with_nothing_in_hand() {
    let (client, server) = pair(LinkConfig::default()).await;
    let (_client_tx, mut rx) = client.split();
    let taken = Arc::new(Mutex::new(Vec::new()));
    let (took_tx, mut took) = mpsc::unbounded_channel();
    rx.receive_on_driver(Box::new(Recorder {
        taken: taken.clone(),
        took: Some(took_tx),
        _alive: Arc::new(()),
    }));

    server.try_send_copy(b"a").unwrap();
    took.recv().await.expect("the handler took a");
    // Left by the handler: queued for the receiver.
    server.try_send_copy(b"slow 1").unwrap();
    until_queued(&rx, 1).await;
    // Not taken by the handler: it would overtake the queued message.
    server.try_send_copy(b"b").unwrap();
    until_queued(&rx, 2).await;
    assert_eq!(*lock(&taken), [&b"a"[..]]);

    // The receiver takes both; holding `b`, it is busy: `c` is queued too.
    assert_eq!(rx.recv_message().await.unwrap(), &b"slow 1"[..]);
    server.try_send_copy(b"c").unwrap();
    until_queued(&rx, 1).await;
    assert_eq!(rx.recv_message().await.unwrap(), &b"b"[..]);
    assert_eq!(rx.recv_message().await.unwrap(), &b"c"[..]);
    assert_eq!(lock(&taken).len(), 1);

    // Waiting again with nothing in hand (polled once: it waits): the
    // handler takes what comes, and the receiver gets only what the
    // handler leaves.
    let mut waiting = std::pin::pin!(rx.recv_message());
    let first = std::future::poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx).is_pending()));
    assert!(first.await, "nothing for the receiver yet");
    server.try_send_copy(b"d").unwrap();
    took.recv().await.expect("the handler took d");
    server.try_send_copy(b"slow 2").unwrap();
    assert_eq!(waiting.await.unwrap(), &b"slow 2"[..]);
    assert_eq!(*lock(&taken), [&b"a"[..], &b"d"[..]]);
}

#[tokio::test]
async fn dropping_the_receiver_drops_its_driver_side_handler() {
    let (client, _server) = pair(LinkConfig::default()).await;
    let (_tx, mut rx) = client.split();
    let alive = Arc::new(());
    rx.receive_on_driver(Box::new(Recorder {
        took: None,
        taken: Arc::default(),
        _alive: alive.clone(),
    }));
    assert_eq!(Arc::strong_count(&alive), 2);
    drop(rx);
    // The handler may own handles of the link (a cycle through the link's
    // shared state): it must go with the receiver.
    assert_eq!(Arc::strong_count(&alive), 1);
}
