//! A key's state as the replicator keeps and ships it: the CRDT and the
//! key's pruning markers.
//!
//! **Pruning** (after Akka Distributed Data's `RemovedNodePruning`): when a
//! member leaves the cluster for good, its replica's entries (a counter's
//! share, an element's dots) would stay in every state forever. One member,
//! the lowest-addressed, folds them into its own share, but only once every
//! member has merged the state with the removed replica's last entries, or
//! the fold would miss mutations still on their way. So the marker of a
//! removed replica goes through two phases, carried with the state:
//!
//! 1. `Initialized { owner, seen }`: the owner announces the pruning; every
//!    replica that merges a state carrying it adds itself to `seen` (and
//!    ships that, as a delta, to the others).
//! 2. `Performed { owner }`: once `seen` holds every member, the owner folds
//!    the removed replica's entries into its own ([`Crdt::prune`]). A
//!    replica merging a state that carries this marker drops the removed
//!    replica's entries from its own state and from anything it merges
//!    later ([`Crdt::prune_cleanup`]): the owner's share holds them now.
//!
//! Markers merge like a semilattice (`Performed` over `Initialized`, `seen`
//! sets by union, the lower owner wins a conflict) so they converge with the
//! data.
//!
//! [`Crdt::prune`]: crate::Crdt::prune
//! [`Crdt::prune_cleanup`]: crate::Crdt::prune_cleanup

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::crdt::ReplicaId;
use crate::registry::Data;

/// A removed replica's pruning phase. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pruning {
    /// `owner` will fold the removed replica's entries once `seen` holds
    /// every member.
    Initialized {
        /// The replica that will fold.
        owner: ReplicaId,
        /// The replicas that have merged the state carrying this marker.
        seen: BTreeSet<ReplicaId>,
    },
    /// `owner` folded them; everyone drops them.
    Performed {
        /// The replica that folded.
        owner: ReplicaId,
    },
}

impl Pruning {
    fn merge(&mut self, other: &Pruning) {
        match (&mut *self, other) {
            (Pruning::Performed { owner: a }, Pruning::Performed { owner: b }) => {
                *a = (*a).min(*b);
            }
            (Pruning::Performed { .. }, Pruning::Initialized { .. }) => {}
            (Pruning::Initialized { .. }, Pruning::Performed { .. }) => *self = other.clone(),
            (
                Pruning::Initialized { owner: a, seen: sa },
                Pruning::Initialized { owner: b, seen: sb },
            ) => {
                if *b < *a {
                    *a = *b;
                    *sa = sb.clone();
                } else if a == b {
                    sa.extend(sb.iter().copied());
                }
            }
        }
    }
}

/// The markers of a key, by removed replica.
pub type PruningMarkers = BTreeMap<ReplicaId, Pruning>;

/// A key's CRDT state with its pruning markers.
#[derive(Debug)]
pub(crate) struct Envelope {
    pub(crate) data: Box<dyn Data>,
    pub(crate) pruning: PruningMarkers,
}

impl Clone for Envelope {
    fn clone(&self) -> Self {
        Self {
            data: self.data.clone_box(),
            pruning: self.pruning.clone(),
        }
    }
}

impl Envelope {
    pub(crate) fn new(data: Box<dyn Data>) -> Self {
        Self {
            data,
            pruning: BTreeMap::new(),
        }
    }

    /// Replicas this state's pruning markers say were pruned.
    fn performed(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        self.pruning
            .iter()
            .filter(|(_, p)| matches!(p, Pruning::Performed { .. }))
            .map(|(r, _)| *r)
    }

    /// Merges `other` (same type) into `self`, dropping from both what
    /// performed prunings removed. Returns whether `self` changed.
    pub(crate) fn merge(&mut self, other: &Envelope) -> bool {
        let mut incoming = None;
        for removed in other.performed().chain(self.performed()) {
            if other.data.needs_pruning_from(removed) {
                incoming
                    .get_or_insert_with(|| other.data.clone_box())
                    .prune_cleanup(removed);
            }
        }
        let incoming: &dyn crate::registry::Data = match &incoming {
            Some(d) => d.as_ref(),
            None => other.data.as_ref(),
        };
        let mut changed = false;
        if !self.data.includes(incoming) {
            self.data.merge_dyn(incoming);
            changed = true;
        }
        for (removed, marker) in &other.pruning {
            match self.pruning.get_mut(removed) {
                Some(mine) => {
                    let before = mine.clone();
                    mine.merge(marker);
                    changed |= *mine != before;
                }
                None => {
                    self.pruning.insert(*removed, marker.clone());
                    changed = true;
                }
            }
        }
        let performed: Vec<ReplicaId> = self.performed().collect();
        for removed in performed {
            if self.data.needs_pruning_from(removed) {
                self.data.prune_cleanup(removed);
                changed = true;
            }
        }
        changed
    }

    /// What of `self` `have` lacks, as an envelope (`None`: nothing).
    pub(crate) fn difference(&self, have: &Envelope) -> Option<Envelope> {
        let data = self.data.difference_dyn(have.data.as_ref());
        let pruning: PruningMarkers = self
            .pruning
            .iter()
            .filter(|(r, p)| {
                have.pruning.get(r).is_none_or(|h| {
                    let mut merged = h.clone();
                    merged.merge(p);
                    merged != *h
                })
            })
            .map(|(r, p)| (*r, p.clone()))
            .collect();
        if data.is_none() && pruning.is_empty() {
            return None;
        }
        Some(Envelope {
            data: data.unwrap_or_else(|| self.data.bottom()),
            pruning,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn performed_overrides_initialized_and_the_lower_owner_wins() {
        let (a, b, c) = (ReplicaId(1), ReplicaId(2), ReplicaId(3));
        let mut p = Pruning::Initialized {
            owner: b,
            seen: [b].into(),
        };
        p.merge(&Pruning::Initialized {
            owner: b,
            seen: [c].into(),
        });
        assert_eq!(
            p,
            Pruning::Initialized {
                owner: b,
                seen: [b, c].into()
            }
        );
        p.merge(&Pruning::Initialized {
            owner: a,
            seen: [a].into(),
        });
        assert_eq!(
            p,
            Pruning::Initialized {
                owner: a,
                seen: [a].into()
            }
        );
        p.merge(&Pruning::Performed { owner: a });
        assert_eq!(p, Pruning::Performed { owner: a });
        p.merge(&Pruning::Initialized {
            owner: a,
            seen: [a, b, c].into(),
        });
        assert_eq!(p, Pruning::Performed { owner: a });
    }
}
