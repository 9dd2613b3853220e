//! A multi-value register (Almeida et al. 2018, §6.3, "MVRegister": a
//! DotFun from dot to value with a causal context).
//!
//! A write replaces the values its replica has seen; writes that did not
//! see each other are all kept, and the reader (or the next writer, who
//! replaces them all) resolves the conflict. Nothing is decided by clocks.
//!
//! Guarantees: after every replica has merged every write, each holds
//! exactly the values of the writes that no other write saw.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::crdt::context::check_dot;
use crate::crdt::{CausalContext, Crdt, Dot, Element, InvalidState, ReplicaId};

/// A multi-value register.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct MvRegister<T: Element> {
    /// The concurrent writes not yet replaced, by dot.
    entries: BTreeMap<Dot, T>,
    context: CausalContext,
}

// By hand: a derived `Default` would ask for `T: Default`.
impl<T: Element> Default for MvRegister<T> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            context: CausalContext::default(),
        }
    }
}

impl<T: Element> MvRegister<T> {
    /// Writes `value` with a fresh dot of `replica`, replacing every value
    /// held here. The delta holds the value, and the replaced dots in its
    /// context.
    pub fn set(&mut self, replica: ReplicaId, value: T) -> Self {
        let dot = self.context.next_dot(replica);
        let old = std::mem::replace(&mut self.entries, [(dot, value.clone())].into());
        self.context.insert(dot);
        Self {
            entries: [(dot, value)].into(),
            context: CausalContext::from_dots(old.into_keys().chain([dot])),
        }
    }

    /// The values of the concurrent writes, in order, without duplicates
    /// (two replicas may write the same value concurrently). Empty before
    /// the first write.
    pub fn values(&self) -> Vec<&T> {
        let set: BTreeSet<&T> = self.entries.values().collect();
        set.into_iter().collect()
    }

    /// The dots this state has seen.
    pub fn context(&self) -> &CausalContext {
        &self.context
    }
}

impl<T: Element> Crdt for MvRegister<T> {
    const TYPE_NAME: &'static str = "MvRegister";

    /// The causal join of DotFuns (§5.2): an entry survives if both sides
    /// hold it, or one side holds it and the other has not seen its dot.
    fn merge(&mut self, other: &Self) {
        for (&d, v) in &other.entries {
            match self.entries.get_mut(&d) {
                // One dot, one write: values differ only in forged states;
                // keeping the greater keeps the join commutative anyway.
                Some(mine) if *mine < *v => *mine = v.clone(),
                Some(_) => {}
                None if !self.context.contains(d) => {
                    self.entries.insert(d, v.clone());
                }
                None => {}
            }
        }
        if !other.context.is_empty() {
            self.entries
                .retain(|d, _| other.entries.contains_key(d) || !other.context.contains(*d));
        }
        self.context.merge(&other.context);
    }

    /// The entries whose dot `have` has not seen, and the context's dots
    /// `have` lacks or holds alive while `self` saw them replaced.
    fn difference(&self, have: &Self) -> Option<Self> {
        let mut context = self.context.difference(&have.context);
        for &d in have.entries.keys() {
            if self.context.contains(d) && !self.entries.contains_key(&d) {
                context.insert(d);
            }
        }
        if context.is_empty() {
            return None;
        }
        let entries = self
            .entries
            .iter()
            .filter(|(&d, _)| context.contains(d))
            .map(|(&d, v)| (d, v.clone()))
            .collect();
        Some(Self { entries, context })
    }

    fn validate(&self) -> Result<(), InvalidState> {
        self.context.validate()?;
        for &d in self.entries.keys() {
            check_dot(&self.context, d)?;
        }
        Ok(())
    }

    fn version_of(&self, replica: ReplicaId) -> u64 {
        self.context.max_counter(replica)
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.context.mentions(removed)
    }

    /// Each value written by `removed` gets a fresh dot of `into` (the
    /// pruning replica), and the context forgets `removed`. A write that
    /// replaced such a value but had not reached the pruning replica when
    /// it pruned no longer replaces it: both values are then held, as for
    /// concurrent writes. Pruning a replica into itself changes nothing.
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId) {
        if removed == into {
            return;
        }
        let theirs: Vec<Dot> = self
            .entries
            .keys()
            .copied()
            .filter(|d| d.replica == removed)
            .collect();
        for d in theirs {
            if let Some(v) = self.entries.remove(&d) {
                let fresh = self.context.next_dot(into);
                self.context.insert(fresh);
                self.entries.insert(fresh, v);
            }
        }
        self.context.forget(removed);
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.entries.retain(|d, _| d.replica != removed);
        self.context.forget(removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);

    #[test]
    fn concurrent_writes_are_all_kept_until_a_write_replaces_them() {
        let mut a = MvRegister::default();
        let mut b = MvRegister::default();
        let da = a.set(A, 1u8);
        let db = b.set(B, 2u8);
        a.merge(&db);
        b.merge(&da);
        assert_eq!(a, b);
        assert_eq!(a.values(), [&1, &2]);
        let d = b.set(B, 3u8);
        a.merge(&d);
        assert_eq!(a.values(), [&3]);
        assert_eq!(a, b);
    }

    #[test]
    fn the_same_value_written_concurrently_reads_once() {
        let mut a = MvRegister::default();
        let mut b = MvRegister::default();
        let da = a.set(A, 7u8);
        b.set(B, 7u8);
        b.merge(&da);
        assert_eq!(b.values(), [&7]);
    }
}
