//! Pruning of removed members' entries (the two phases are in the
//! [envelope's docs](super::envelope)).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::envelope::{Envelope, Pruning};
use super::{keys, ReplicaId, Replicator};

impl Replicator {
    /// The member that prunes: the lowest address among the members.
    fn is_pruning_owner(&self) -> bool {
        self.peers
            .keys()
            .next()
            .is_none_or(|lowest| self.address < *lowest)
    }

    /// Every member's replica; `None` while some member's is not known
    /// yet (no packet from it arrived), since then no pruning may happen.
    fn member_replicas(&self) -> Option<BTreeSet<ReplicaId>> {
        self.peers
            .values()
            .map(|p| p.replica)
            .chain(std::iter::once(Some(self.replica)))
            .collect()
    }

    /// Starts pruning removed replicas (owner only) and performs prunings
    /// every member has seen.
    pub(super) fn prune(&mut self, _now: Instant) {
        if self.is_pruning_owner() && !self.removed.is_empty() {
            let removed: Vec<ReplicaId> = self.removed.iter().copied().collect();
            let mut starts: Vec<(Arc<str>, ReplicaId)> = Vec::new();
            let mut still_needed = BTreeSet::new();
            for (key, env) in self.keys.iter() {
                for &r in &removed {
                    if env.data.needs_pruning_from(r) {
                        still_needed.insert(r);
                        if !env.pruning.contains_key(&r) {
                            starts.push((Arc::clone(key), r));
                        }
                    }
                }
            }
            self.removed = still_needed;
            for (key, r) in starts {
                let marker = Pruning::Initialized {
                    owner: self.replica,
                    seen: [self.replica].into(),
                };
                self.keys
                    .get_mut(&key)
                    .expect("listed")
                    .pruning
                    .insert(r, marker.clone());
                self.log_marker(&key, r, marker);
                self.pruning_keys.insert(key);
            }
        }
        let Some(members) = self.member_replicas() else {
            return;
        };
        let keys: Vec<Arc<str>> = self.pruning_keys.iter().cloned().collect();
        for key in keys {
            let Some(env) = self.keys.get(&key) else {
                self.pruning_keys.remove(&key);
                continue;
            };
            let ready: Vec<ReplicaId> = env
                .pruning
                .iter()
                .filter_map(|(r, p)| match p {
                    Pruning::Initialized { owner, seen }
                        if *owner == self.replica && members.is_subset(seen) =>
                    {
                        Some(*r)
                    }
                    _ => None,
                })
                .collect();
            let pending = env
                .pruning
                .values()
                .any(|p| matches!(p, Pruning::Initialized { .. }));
            if ready.is_empty() {
                if !pending {
                    self.pruning_keys.remove(&key);
                }
                continue;
            }
            let replica = self.replica;
            let env = self.keys.get_mut(&key).expect("present");
            for r in &ready {
                env.data.prune(*r, replica);
                env.pruning
                    .insert(*r, Pruning::Performed { owner: replica });
            }
            // The fold is not a delta of any mutator: ship the whole state.
            let whole = env.clone();
            let size = keys::encode_entry(&key, &whole).data.len();
            self.log.append(Arc::clone(&key), whole, size);
            self.stats.prunings_performed += ready.len() as u64;
            self.note_changed(&key);
        }
    }

    /// After a merge into `key`: join the `seen` set of markers that lack
    /// this member.
    pub(super) fn after_merge(&mut self, key: &Arc<str>) {
        let Some(env) = self.keys.get(key) else {
            return;
        };
        let unseen: Vec<(ReplicaId, ReplicaId)> = env
            .pruning
            .iter()
            .filter_map(|(r, p)| match p {
                Pruning::Initialized { owner, seen } if !seen.contains(&self.replica) => {
                    Some((*r, *owner))
                }
                _ => None,
            })
            .collect();
        if unseen.is_empty() {
            return;
        }
        self.pruning_keys.insert(Arc::clone(key));
        for (removed, owner) in unseen {
            let marker = {
                let env = self.keys.get_mut(key).expect("present");
                let Some(Pruning::Initialized { seen, .. }) = env.pruning.get_mut(&removed) else {
                    continue;
                };
                seen.insert(self.replica);
                let seen = seen.clone();
                Pruning::Initialized { owner, seen }
            };
            self.log_marker(key, removed, marker);
        }
    }

    /// Puts a marker-only delta of `key` in the log.
    fn log_marker(&mut self, key: &Arc<str>, removed: ReplicaId, marker: Pruning) {
        let Some(env) = self.keys.get(key) else {
            return;
        };
        let mut delta = Envelope::new(env.data.bottom());
        delta.pruning.insert(removed, marker);
        self.log.append(Arc::clone(key), delta, 64);
        self.note_changed(key);
    }
}
