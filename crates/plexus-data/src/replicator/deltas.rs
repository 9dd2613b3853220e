//! The delta log and delta propagation: each peer gets the join of the
//! deltas it has not acknowledged, one group in flight at a time.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::envelope::Envelope;
use super::wire::{Body, WireEntry};
use super::{keys, Replicator, Traffic};

/// Deltas by sequence number, oldest first.
#[derive(Debug, Default)]
pub(crate) struct DeltaLog {
    entries: VecDeque<(u64, Arc<str>, Envelope, usize)>,
    /// The sequence number of the last delta appended (0: none yet).
    last: u64,
}

impl DeltaLog {
    pub(crate) fn last_seq(&self) -> u64 {
        self.last
    }

    /// The sequence number of the oldest delta kept (`last + 1` if none).
    pub(crate) fn first_seq(&self) -> u64 {
        self.entries.front().map_or(self.last + 1, |e| e.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn append(&mut self, key: Arc<str>, delta: Envelope, size: usize) -> u64 {
        self.last += 1;
        self.entries.push_back((self.last, key, delta, size));
        self.last
    }

    /// Drops the deltas every peer acknowledged (all of them if there is
    /// no peer: a newcomer is caught up by anti-entropy).
    pub(crate) fn gc(&mut self, acked: impl Iterator<Item = u64>) {
        let upto = acked.min().unwrap_or(self.last);
        while self.entries.front().is_some_and(|e| e.0 <= upto) {
            self.entries.pop_front();
        }
    }

    /// Drops the oldest deltas beyond `max`; returns the first kept.
    pub(crate) fn truncate(&mut self, max: usize) -> u64 {
        while self.entries.len() > max {
            self.entries.pop_front();
        }
        self.first_seq()
    }

    /// The join, per key, of the deltas after `acked`, up to about
    /// `max_bytes` of them (at least one); with the last sequence number
    /// covered.
    pub(crate) fn group(&self, acked: u64, max_bytes: usize) -> (u64, Vec<WireEntry>) {
        let start = self.entries.partition_point(|e| e.0 <= acked);
        let mut joined: Vec<(Arc<str>, Envelope)> = Vec::new();
        let mut index: HashMap<Arc<str>, usize> = HashMap::new();
        let mut bytes = 0;
        let mut to = acked;
        for (seq, key, delta, size) in self.entries.range(start..) {
            if bytes > 0 && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            to = *seq;
            match index.get(key) {
                Some(&i) => {
                    joined[i].1.merge(delta);
                }
                None => {
                    index.insert(Arc::clone(key), joined.len());
                    joined.push((Arc::clone(key), delta.clone()));
                }
            }
        }
        let entries = joined
            .iter()
            .map(|(k, d)| keys::encode_entry(k, d))
            .collect();
        (to, entries)
    }
}

impl Replicator {
    /// Sends each peer its next group if none is in flight, or the one in
    /// flight again if its ack is overdue (with back-off).
    pub(super) fn send_deltas(&mut self, now: Instant) {
        let first = self.log.truncate(self.config.max_delta_log);
        let last = self.log.last_seq();
        let addresses: Vec<Arc<str>> = self.peers.keys().cloned().collect();
        let mut groups: HashMap<u64, (u64, Vec<WireEntry>)> = HashMap::new();
        for address in addresses {
            let peer = self.peers.get_mut(&address).expect("listed");
            if peer.acked + 1 < first {
                // It missed deltas the log no longer has.
                peer.acked = first - 1;
                peer.needs_sync = true;
                peer.synced = false;
            }
            if peer.acked >= last {
                continue;
            }
            let due = match peer.in_flight {
                None => true,
                Some((_, sent)) => now >= sent + peer.backoff,
            };
            if !due {
                continue;
            }
            if peer.in_flight.is_some() {
                peer.backoff = (peer.backoff * 2).min(self.config.gossip_interval * 2);
            }
            let acked = peer.acked;
            let max = self.config.max_delta_bytes;
            let (to_seq, entries) = groups
                .entry(acked)
                .or_insert_with(|| self.log.group(acked, max))
                .clone();
            let peer = self.peers.get_mut(&address).expect("listed");
            peer.in_flight = Some((to_seq, now));
            self.send(&address, Body::Delta { to_seq, entries }, Traffic::Delta);
        }
        if self.peers.values().any(|p| p.needs_sync) {
            self.start_round(now, None);
        }
    }

    pub(super) fn on_delta_ack(&mut self, now: Instant, address: &Arc<str>, seq: u64) {
        let Some(peer) = self.peers.get_mut(address) else {
            return;
        };
        peer.acked = peer.acked.max(seq.min(self.log.last_seq()));
        if peer.in_flight.is_some_and(|(s, _)| s <= peer.acked) {
            peer.in_flight = None;
            peer.backoff = self.config.delta_interval * 2;
        }
        let more = peer.acked < self.log.last_seq() && peer.in_flight.is_none();
        let acked = peer.acked;
        self.log.gc(self.peers.values().map(|p| p.acked));
        if more && self.log.len() > 0 {
            let (to_seq, entries) = self.log.group(acked, self.config.max_delta_bytes);
            if let Some(peer) = self.peers.get_mut(address) {
                peer.in_flight = Some((to_seq, now));
            }
            self.send(address, Body::Delta { to_seq, entries }, Traffic::Delta);
        }
    }
}
