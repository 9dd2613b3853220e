//! Anti-entropy: digests of key buckets first, then key hashes of the
//! buckets that differ, then only the states that differ, each stripped of
//! what the other side already has. See the
//! [replicator's docs](super#how-state-spreads).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rand::Rng;

use super::error::PacketError;
use super::wire::{Body, WireEntry};
use super::{keys, Merged, Replicator, Traffic};

impl Replicator {
    /// How long a change keeps a key "hot": left to the deltas by
    /// anti-entropy with peers already in sync.
    pub(super) fn hot_window(&self) -> std::time::Duration {
        self.config.gossip_interval * 2
    }

    /// How long a round may take before another may start with that peer
    /// (its packets may have been lost; a round slower than this overlaps
    /// the next, which the random bucket offset keeps from repeating it).
    fn round_timeout(&self) -> std::time::Duration {
        self.config.gossip_interval * 3
    }

    /// Whether a round with `address` (started by either side) is under way.
    fn in_round(&self, now: Instant, address: &str) -> bool {
        let timeout = self.round_timeout();
        self.peers.get(address).is_some_and(|p| {
            [p.asking, p.answering]
                .into_iter()
                .flatten()
                .any(|t| now.saturating_duration_since(t) < timeout)
        })
    }

    /// Starts a round with `with` (a round going on: the one before it
    /// ended), or else with a peer that fell behind or a random peer, but
    /// never with one a round is under way with: one round at a time per
    /// pair of members, or rounds pile up resending the same buckets.
    pub(super) fn start_round(&mut self, now: Instant, with: Option<Arc<str>>) {
        let target = match with {
            Some(t) => Some(t),
            None => {
                let free: Vec<&Arc<str>> = self
                    .peers
                    .keys()
                    .filter(|a| !self.in_round(now, a))
                    .collect();
                let behind = free
                    .iter()
                    .find(|a| self.peers[**a].needs_sync)
                    .map(|a| Arc::clone(a));
                behind.or_else(|| {
                    if free.is_empty() {
                        return None;
                    }
                    let i = self.rng.gen_range(0..free.len());
                    Some(Arc::clone(free[i]))
                })
            }
        };
        let Some(target) = target else {
            return;
        };
        let Some(peer) = self.peers.get_mut(&target) else {
            return;
        };
        peer.needs_sync = false;
        peer.asking = Some(now);
        self.stats.anti_entropy_rounds += 1;
        let digests: Vec<(u32, u64)> = self
            .keys
            .digests()
            .iter()
            .enumerate()
            .filter(|(_, d)| **d != 0)
            .map(|(b, d)| (b as u32, *d))
            .collect();
        tracing::debug!(
            target: "plexus::data",
            with = %target,
            round = self.stats.anti_entropy_rounds,
            buckets = digests.len(),
            "anti-entropy round started"
        );
        self.send(
            &target,
            Body::Digests {
                buckets: self.keys.bucket_count(),
                digests,
            },
            Traffic::AntiEntropy,
        );
    }

    /// The round with `address` this member started ended; `more`: start
    /// the next at once.
    fn round_ended(&mut self, now: Instant, address: &Arc<str>, more: bool) {
        tracing::debug!(target: "plexus::data", with = %address, more, "anti-entropy round ended");
        if let Some(peer) = self.peers.get_mut(address) {
            peer.asking = None;
            if !more {
                peer.synced = true;
            }
        }
        if more {
            self.start_round(now, Some(Arc::clone(address)));
        }
    }

    /// Whether anti-entropy with `address` leaves `key` to the deltas.
    fn left_to_deltas(&self, now: Instant, address: &str, key: &str) -> bool {
        self.peers.get(address).is_some_and(|p| p.synced)
            && self
                .hot
                .get(key)
                .is_some_and(|at| now.saturating_duration_since(*at) < self.hot_window())
    }

    /// The peer's digests: answer with key hashes of differing buckets, or
    /// the states of buckets it has nothing in.
    pub(super) fn on_digests(
        &mut self,
        now: Instant,
        from: &Arc<str>,
        buckets: u32,
        theirs: &[(u32, u64)],
    ) -> Result<(), PacketError> {
        let ours = self.keys.bucket_count();
        if buckets != ours || theirs.iter().any(|(b, _)| *b >= ours) {
            return Err(PacketError::Buckets {
                theirs: buckets,
                ours,
            });
        }
        let mut their_digests = vec![0u64; ours as usize];
        for &(b, d) in theirs {
            their_digests[b as usize] = d;
        }
        let theirs = their_digests;
        let mine = self.keys.digests().to_vec();
        let mut differing: Vec<usize> = (0..mine.len()).filter(|&b| mine[b] != theirs[b]).collect();
        if !differing.is_empty() {
            // Start at a random differing bucket, so two rounds that do
            // overlap (after a timeout) carry different buckets.
            let offset = self.rng.gen_range(0..differing.len());
            differing.rotate_left(offset);
        }
        if let Some(peer) = self.peers.get_mut(from) {
            peer.answering = (!differing.is_empty()).then_some(now);
        }
        let mut more = differing.len() > self.config.max_buckets_per_round;
        let mut keys = Vec::new();
        let mut pushed = Vec::new();
        let mut bytes = 0;
        for &bucket in differing.iter().take(self.config.max_buckets_per_round) {
            if theirs[bucket] == 0 {
                let names: Vec<Arc<str>> = self.keys.bucket_keys(bucket).cloned().collect();
                for name in names {
                    if bytes >= self.config.max_round_bytes {
                        more = true;
                        break;
                    }
                    let env = self.keys.get(&name).expect("bucket lists held keys");
                    let entry = keys::encode_entry(&name, env);
                    bytes += entry.data.len() + name.len();
                    pushed.push(entry);
                }
            } else {
                let hashes = self.keys.bucket_hashes(bucket);
                bytes += hashes.iter().map(|(k, _)| k.len() + 9).sum::<usize>();
                keys.push((
                    bucket as u32,
                    hashes
                        .into_iter()
                        .map(|(k, h)| (k.to_string(), h))
                        .collect(),
                ));
            }
        }
        self.send(
            from,
            Body::Keys {
                buckets,
                keys,
                pushed,
                more,
            },
            Traffic::AntiEntropy,
        );
        Ok(())
    }

    /// The peer's key hashes: send the states that differ, name the keys
    /// missing here.
    pub(super) fn on_keys(
        &mut self,
        now: Instant,
        from: &Arc<str>,
        buckets: u32,
        theirs: Vec<(u32, Vec<(String, u64)>)>,
        pushed: &[WireEntry],
        mut more: bool,
    ) -> Result<(), PacketError> {
        let ours = self.keys.bucket_count();
        if buckets != ours {
            return Err(PacketError::Buckets {
                theirs: buckets,
                ours,
            });
        }
        for entry in pushed {
            self.merge_logged(entry, from);
        }
        let mut entries = Vec::new();
        let mut want = Vec::new();
        let mut bytes = 0;
        for (bucket, their_keys) in theirs {
            if bucket >= ours {
                continue;
            }
            let their_keys: HashMap<String, u64> = their_keys.into_iter().collect();
            for (name, hash) in self.keys.bucket_hashes(bucket as usize) {
                if their_keys.get(&*name) == Some(&hash) || self.left_to_deltas(now, from, &name) {
                    continue;
                }
                if bytes >= self.config.max_round_bytes {
                    more = true;
                    break;
                }
                let env = self.keys.get(&name).expect("bucket lists held keys");
                let entry = keys::encode_entry(&name, env);
                bytes += entry.data.len() + name.len();
                entries.push(entry);
            }
            for name in their_keys.into_keys() {
                if self.keys.get(&name).is_none() {
                    want.push(name);
                }
            }
        }
        if entries.is_empty() && want.is_empty() {
            self.round_ended(now, from, more);
            return Ok(());
        }
        self.send(
            from,
            Body::States {
                entries,
                want,
                more,
            },
            Traffic::AntiEntropy,
        );
        Ok(())
    }

    /// The asker's states: merge them, answer with what it lacks of ours.
    pub(super) fn on_states(
        &mut self,
        from: &Arc<str>,
        entries: &[WireEntry],
        want: Vec<String>,
        mut more: bool,
    ) {
        let mut answer = Vec::new();
        let mut bytes = 0;
        for entry in entries {
            let theirs = match self.merge_entry(entry) {
                Ok(Merged::Changed(theirs) | Merged::Unchanged(theirs)) => theirs,
                Ok(Merged::Held) => continue,
                Err(error) => {
                    self.stats.entries_refused += 1;
                    tracing::warn!(target: "plexus::data", %error, from = %from, "replicated state refused");
                    continue;
                }
            };
            let Some(mine) = self.keys.get(&entry.key) else {
                continue;
            };
            if let Some(lacking) = mine.difference(&theirs) {
                let e = keys::encode_entry(&entry.key, &lacking);
                bytes += e.data.len() + e.key.len();
                answer.push(e);
            }
        }
        for name in want {
            if bytes >= self.config.max_round_bytes {
                more = true;
                break;
            }
            if let Some(env) = self.keys.get(&name) {
                let e = keys::encode_entry(&name, env);
                bytes += e.data.len() + e.key.len();
                answer.push(e);
            }
        }
        if let Some(peer) = self.peers.get_mut(from) {
            peer.answering = None;
        }
        self.send(
            from,
            Body::Reply {
                entries: answer,
                more,
            },
            Traffic::AntiEntropy,
        );
    }

    /// The round's last step: merge, and go on at once if more differs.
    pub(super) fn on_reply(
        &mut self,
        now: Instant,
        from: &Arc<str>,
        entries: &[WireEntry],
        more: bool,
    ) {
        for entry in entries {
            self.merge_logged(entry, from);
        }
        self.round_ended(now, from, more);
    }
}
