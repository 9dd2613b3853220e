//! Shared end-to-end harness: a seeded workload of mixed-size messages, a
//! sender that sends it and a receiver that checks every message arrives
//! exactly once, in order, byte-identical.
#![allow(dead_code)]

pub mod tap;

use bytes::Bytes;
use plexus_transport::{Link, LinkReceiver, LinkSender};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Messages per end-to-end test (required by the issue).
pub const MESSAGES: usize = 100_000;

/// A deterministic stream of messages: slices of one random pool, so
/// making and checking a message costs no per-byte work in debug builds.
#[derive(Clone)]
pub struct Workload {
    pool: Bytes,
    rng: SmallRng,
    max_len: usize,
}

impl Workload {
    /// Sizes 1 B ..= `max_len`: 90 % up to 256 B, 9 % up to 4 KiB, 1 % up
    /// to `max_len`.
    pub fn new(seed: u64, max_len: usize) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
        let mut pool = vec![0u8; (1 << 20) + max_len];
        rng.fill(&mut pool[..]);
        Self {
            pool: pool.into(),
            rng: SmallRng::seed_from_u64(seed),
            max_len,
        }
    }

    pub fn next_message(&mut self) -> Bytes {
        let class = self.rng.gen_range(0..100);
        let max = match class {
            0 => self.max_len,
            1..=9 => 4096.min(self.max_len),
            _ => 256,
        };
        let len = self.rng.gen_range(1..=max);
        let off = self.rng.gen_range(0..1 << 20);
        self.pool.slice(off..off + len)
    }
}

pub async fn send_all(sender: LinkSender, mut w: Workload, n: usize) {
    for _ in 0..n {
        sender
            .send(w.next_message())
            .await
            .expect("link stays open while sending");
    }
}

/// Receives `n` messages and checks each against the workload.
pub async fn recv_all(mut receiver: LinkReceiver, mut w: Workload, n: usize) -> LinkReceiver {
    for i in 0..n {
        let got = receiver
            .recv_message()
            .await
            .unwrap_or_else(|e| panic!("message {i}: {e}"));
        let want = w.next_message();
        assert!(
            got == want,
            "message {i}: got {} bytes, want {} bytes (or different content)",
            got.len(),
            want.len()
        );
    }
    receiver
}

/// Sends `n` messages from `a` to `b` and (if `both`) from `b` to `a` at
/// the same time, checking all of them.
pub async fn exchange(a: Link, b: Link, seed: u64, max_len: usize, n: usize, both: bool) {
    let (a_tx, a_rx) = a.split();
    let (b_tx, b_rx) = b.split();
    let wa = Workload::new(seed, max_len);
    let wb = Workload::new(seed + 1, max_len);
    let ab_send = tokio::spawn(send_all(a_tx, wa.clone(), n));
    let ab_recv = tokio::spawn(recv_all(b_rx, wa, n));
    let (ba_send, ba_recv) = if both {
        (
            Some(tokio::spawn(send_all(b_tx, wb.clone(), n))),
            Some(tokio::spawn(recv_all(a_rx, wb, n))),
        )
    } else {
        drop(b_tx);
        (None, None)
    };
    ab_send.await.expect("sender a");
    ab_recv.await.expect("receiver b");
    if let (Some(s), Some(r)) = (ba_send, ba_recv) {
        s.await.expect("sender b");
        r.await.expect("receiver a");
    }
}

/// Every permit of the sender's buffer comes back: a message of `len` bytes
/// costing the whole buffer is sent (`send` waits on the buffer's
/// semaphore until every permit is back; a leak hangs here) and arrives at
/// `server`.
pub async fn assert_permits_returned(
    send: impl AsyncFnOnce(Bytes) -> bool,
    server: &mut Link,
    len: usize,
) {
    assert!(send(Bytes::from(vec![7u8; len])).await, "the link is open");
    let last = server.recv_message().await.expect("last message");
    assert_eq!(last.len(), len);
}
