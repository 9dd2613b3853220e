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
    /// Starts a round with `with`, or with a peer that fell behind, or with
    /// a random peer.
    pub(super) fn start_round(&mut self, _now: Instant, with: Option<Arc<str>>) {
        let target = with.or_else(|| {
            let behind = self
                .peers
                .iter()
                .find(|(_, p)| p.needs_sync)
                .map(|(a, _)| Arc::clone(a));
            behind.or_else(|| {
                if self.peers.is_empty() {
                    return None;
                }
                let i = self.rng.gen_range(0..self.peers.len());
                self.peers.keys().nth(i).cloned()
            })
        });
        let Some(target) = target else {
            return;
        };
        if let Some(peer) = self.peers.get_mut(&target) {
            peer.needs_sync = false;
        }
        self.stats.anti_entropy_rounds += 1;
        let digests = self.keys.digests().to_vec();
        self.send(
            &target,
            Body::Digests {
                buckets: self.keys.bucket_count(),
                digests,
            },
            Traffic::AntiEntropy,
        );
    }

    /// The peer's digests: answer with key hashes of differing buckets, or
    /// the states of buckets it has nothing in.
    pub(super) fn on_digests(
        &mut self,
        from: &Arc<str>,
        buckets: u32,
        theirs: &[u64],
    ) -> Result<(), PacketError> {
        let ours = self.keys.bucket_count();
        if buckets != ours || theirs.len() != ours as usize {
            return Err(PacketError::Buckets {
                theirs: buckets,
                ours,
            });
        }
        let mine = self.keys.digests().to_vec();
        let differing: Vec<usize> = (0..mine.len()).filter(|&b| mine[b] != theirs[b]).collect();
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
                if their_keys.get(&*name) == Some(&hash) {
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
            if more {
                self.start_round(now, Some(Arc::clone(from)));
            }
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
                    tracing::warn!(%error, from = %from, "replicated state refused");
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
        if more {
            self.start_round(now, Some(Arc::clone(from)));
        }
    }
}
