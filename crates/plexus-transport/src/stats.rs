//! [`LinkStats`]: what a link carried and what its stack dropped, readable
//! from the link's handles while the driver owns the stack.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use plexus_net::layers::delivery::{Delivery, DeliveryStats};
use plexus_net::layers::encryption::{Encryption, EncryptionStats};
use plexus_net::Stack;

/// Counters of one link, for tests, metrics and operators: the messages
/// and bytes it carried each way, how many inbound frames its stack
/// dropped and why when the stack says (the `encryption` layer's counters:
/// bad tags, replays, stale nonces...), and the `delivery` layer's
/// retransmissions and RTT.
///
/// The message and byte counts are current: the driver adds each batch it
/// moves (one store per batch and direction, no lock). The stack's own
/// counters are a snapshot the driver refreshes whenever the stack drops
/// an inbound frame, and at the next batch it receives after someone read
/// the stats (and not otherwise, to keep the hot path free of it): the
/// drop counters are current; [`delivery`](LinkStats::delivery),
/// [`rtt`](LinkStats::rtt) and the other counters in
/// [`encryption`](LinkStats::encryption) (`sealed`, `opened`) are as of
/// the last drop or the first batch after the previous read, whichever
/// is later.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// Inbound frames the stack dropped without closing the link (garbage,
    /// duplicates, frames failing authentication...). See
    /// [`StackStats::dropped`](plexus_net::StackStats::dropped).
    pub dropped: u64,
    /// The counters of the stack's `encryption` layer, if it has one.
    pub encryption: Option<EncryptionStats>,
    /// The counters of the stack's `delivery` layer (retransmissions,
    /// duplicates), if it has one.
    pub delivery: Option<DeliveryStats>,
    /// The `delivery` layer's smoothed round-trip time, once measured.
    pub rtt: Option<Duration>,
    /// Messages the driver took from the application's send queue into
    /// the stack (counted as taken, in the batch that the length of each
    /// was read for anyway).
    pub messages_sent: u64,
    /// Their bytes (payload, before the stack's headers).
    pub bytes_sent: u64,
    /// Messages the stack handed up to the application.
    pub messages_received: u64,
    /// Their bytes (payload).
    pub bytes_received: u64,
}

impl LinkStats {
    pub(crate) fn of(stack: &Stack) -> Self {
        let delivery = stack.layer::<Delivery>();
        Self {
            dropped: stack.stats().dropped,
            encryption: stack.layer::<Encryption>().map(Encryption::stats),
            delivery: delivery.map(Delivery::stats),
            rtt: delivery.and_then(|d| d.rtt().srtt()),
            ..Self::default()
        }
    }
}

/// The live part of a link's counters: written by whoever holds the link's
/// stack (one writer at a time, under the link's lock or by its only
/// driver), read by [`LinkStats`] readers. A writer adds with a load and a
/// store, not a read-modify-write, since no two write at once.
#[derive(Default)]
pub(crate) struct Traffic {
    messages_sent: AtomicU64,
    bytes_sent: AtomicU64,
    messages_received: AtomicU64,
    bytes_received: AtomicU64,
    /// A reader asked for the stack's counters: the driver refreshes the
    /// snapshot at its next received batch.
    pub(crate) wanted: AtomicBool,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

impl Traffic {
    pub(crate) fn sent(&self, messages: u64, bytes: u64) {
        add(&self.messages_sent, messages);
        add(&self.bytes_sent, bytes);
    }

    pub(crate) fn received(&self, messages: u64, bytes: u64) {
        add(&self.messages_received, messages);
        add(&self.bytes_received, bytes);
    }

    /// `snapshot` with the live counts, and a refresh of the snapshot
    /// requested.
    pub(crate) fn read(&self, mut snapshot: LinkStats) -> LinkStats {
        self.wanted.store(true, Ordering::Relaxed);
        snapshot.messages_sent = self.messages_sent.load(Ordering::Relaxed);
        snapshot.bytes_sent = self.bytes_sent.load(Ordering::Relaxed);
        snapshot.messages_received = self.messages_received.load(Ordering::Relaxed);
        snapshot.bytes_received = self.bytes_received.load(Ordering::Relaxed);
        snapshot
    }
}
