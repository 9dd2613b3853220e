//! Pruning of removed members' entries (the two phases are in the
//! [envelope's docs](super::envelope)).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::envelope::Pruning;
use super::{keys, ReplicaId, Replicator};

impl Replicator {
    /// The replica that prunes: the lowest-addressed member's, if known
    /// (any member that saw a replica go may start its pruning, naming
    /// this owner, since not every member heard from every replica).
    fn pruning_owner(&self) -> Option<ReplicaId> {
        match self.peers.iter().next() {
            Some((lowest, peer)) if *lowest < self.address => peer.replica,
            _ => Some(self.replica),
        }
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

    /// Starts pruning removed replicas and performs (owner only) the
    /// prunings every member has seen.
    pub(super) fn prune(&mut self, _now: Instant) {
        if let Some(owner) = self.pruning_owner().filter(|_| !self.removed.is_empty()) {
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
                    owner,
                    seen: [self.replica].into(),
                };
                self.keys
                    .get_mut(&key)
                    .expect("listed")
                    .pruning
                    .insert(r, marker.clone());
                self.log_whole(&key);
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
            self.log_whole(&key);
            self.stats.prunings_performed += ready.len() as u64;
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
        let env = self.keys.get_mut(key).expect("present");
        for (removed, _) in unseen {
            if let Some(Pruning::Initialized { seen, .. }) = env.pruning.get_mut(&removed) {
                seen.insert(self.replica);
            }
        }
        self.log_whole(key);
    }

    /// Puts the whole state of `key` in the log. Joining (or starting) a
    /// pruning ships this member's whole state with its `seen`: the owner
    /// must have merged every entry of the removed replica this member
    /// holds before it folds them, or the fold would miss them and the
    /// cleanup that follows would drop them here.
    fn log_whole(&mut self, key: &Arc<str>) {
        let Some(env) = self.keys.get(key) else {
            return;
        };
        let whole = env.clone();
        let size = keys::encode_entry(key, &whole).data.len();
        self.log.append(Arc::clone(key), whole, size);
        self.note_changed(key);
    }
}
