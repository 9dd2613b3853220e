//! An observed-remove map from keys to CRDT values (after Almeida et al.
//! 2018, §6.4, "ORMap", for any [`Crdt`] value, not only causal ones).
//!
//! Keys form an add-wins set: an update adds its key with a fresh dot (and
//! supersedes the key's dots it saw), a remove removes the dots it saw, so
//! an update concurrent with a remove keeps the key. Values are CRDTs
//! joined pointwise, and what an update ships is the **nested delta** its
//! closure returns (plus the key's dot), never the whole value.
//!
//! # What a remove does to a value
//!
//! A join cannot forget what it merged, so a remove **hides** a key's
//! value; it does not erase it:
//!
//! - **Caveat** (as in Akka's ORMap): an update concurrent with a remove
//!   keeps the key *and its whole merged value*, including what was there
//!   before the remove.
//! - Unlike Akka, a key removed and updated again later also shows its
//!   former value, joined with the new update's delta. Starting a value
//!   afresh needs the value's own mutators (`ORSet::clear`, a new register
//!   value) or a new key. This is what keeps the map a join-semilattice
//!   with small deltas: a replica that dropped a removed value could not
//!   join a concurrent update's nested delta into it and reach the state of
//!   the replica that updated it; and a fresh value per re-add would restart
//!   the value's own counters and dots, which collide with the old ones
//!   when a concurrent update brings the old value back.
//! - **Memory**: a removed key's value stays in the state, hidden, and
//!   travels with full-state syncs. Maps whose keys come and go without end
//!   grow without end; prefer one key per long-lived entity.
//!
//! Guarantees: after every replica has merged every delta, a key is
//! present if and only if some update of it was seen by no remove of it
//! (nor by a later update, which replaces the dots it saw); a present
//! key's value is the join of every nested delta of every update of it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::crdt::context::check_dot;
use crate::crdt::{CausalContext, Crdt, Dot, Element, InvalidState, ReplicaId};

/// An observed-remove map of CRDT values (see the module docs for what a
/// remove does to a value).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct ORMap<K: Element, V: Crdt> {
    /// The present keys and the dots of the updates that keep each present
    /// (never empty).
    keys: BTreeMap<K, BTreeSet<Dot>>,
    /// The value of every key ever updated, present or hidden. An update
    /// ships its key's dot and entry together, so every present key has
    /// one.
    values: BTreeMap<K, V>,
    context: CausalContext,
}

// By hand: a derived `Default` would ask for `K: Default`.
impl<K: Element, V: Crdt> Default for ORMap<K, V> {
    fn default() -> Self {
        Self {
            keys: BTreeMap::new(),
            values: BTreeMap::new(),
            context: CausalContext::default(),
        }
    }
}

impl<K: Element, V: Crdt> ORMap<K, V> {
    /// Updates the value of `key` at `replica` and adds the key if absent.
    ///
    /// `f` gets the key's value (the bottom for a key never updated; the
    /// hidden value of a removed key), applies one of the value's mutators
    /// to it and returns that mutator's delta, e.g.
    /// `map.update(me, key, |c| c.increment(me, 1))`. The map joins the
    /// returned delta into its value (a change `f` makes without returning
    /// it is not kept). The map's delta holds the key's fresh dot, the dots
    /// it supersedes, and the nested delta.
    pub fn update<F>(&mut self, replica: ReplicaId, key: K, f: F) -> Self
    where
        F: FnOnce(&mut V) -> V,
    {
        let dot = self.context.next_dot(replica);
        let old = self
            .keys
            .insert(key.clone(), [dot].into())
            .unwrap_or_default();
        self.context.insert(dot);
        let value = self.values.entry(key.clone()).or_default();
        let mut scratch = value.clone();
        let nested = f(&mut scratch);
        value.merge(&nested);
        Self {
            keys: [(key.clone(), [dot].into())].into(),
            values: [(key, nested)].into(),
            context: CausalContext::from_dots(old.into_iter().chain([dot])),
        }
    }

    /// Removes `key` (as far as this replica has seen: a concurrent update
    /// keeps it), hiding its value. The delta holds the removed dots in its
    /// context. Removing an absent key returns the bottom.
    pub fn remove(&mut self, key: &K) -> Self {
        let old = self.keys.remove(key).unwrap_or_default();
        Self {
            keys: BTreeMap::new(),
            values: BTreeMap::new(),
            context: CausalContext::from_dots(old),
        }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.keys.get(key).and_then(|_| self.values.get(key))
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.keys.contains_key(key)
    }

    /// The present keys and their values, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.keys
            .keys()
            .filter_map(|k| self.values.get_key_value(k))
    }

    /// The present keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.keys.keys()
    }

    /// The number of present keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is present.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The number of values held, hidden ones (of removed keys) included:
    /// what the map costs, as opposed to [`ORMap::len`].
    pub fn values_held(&self) -> usize {
        self.values.len()
    }

    /// The dots this state has seen.
    pub fn context(&self) -> &CausalContext {
        &self.context
    }
}

impl<K: Element, V: Crdt> Crdt for ORMap<K, V> {
    const TYPE_NAME: &'static str = "ORMap";

    /// The keys' causal join (a DotMap of DotSets, §5.2) and the values'
    /// pointwise join.
    fn merge(&mut self, other: &Self) {
        for (k, theirs) in &other.keys {
            let fresh: Vec<Dot> = theirs
                .iter()
                .copied()
                .filter(|&d| !self.context.contains(d))
                .collect();
            if !fresh.is_empty() {
                self.keys.entry(k.clone()).or_default().extend(fresh);
            }
        }
        if !other.context.is_empty() {
            self.keys.retain(|k, dots| {
                let theirs = other.keys.get(k);
                dots.retain(|&d| {
                    theirs.is_some_and(|t| t.contains(&d)) || !other.context.contains(d)
                });
                !dots.is_empty()
            });
        }
        for (k, v) in &other.values {
            match self.values.get_mut(k) {
                Some(mine) => mine.merge(v),
                None => {
                    self.values.insert(k.clone(), v.clone());
                }
            }
        }
        self.context.merge(&other.context);
    }

    /// The key dots `have` has not seen, the context's dots `have` lacks or
    /// holds alive while `self` saw them removed, and each value's
    /// difference (the whole value for a key `have` never had).
    fn difference(&self, have: &Self) -> Option<Self> {
        let mut context = self.context.difference(&have.context);
        for (k, dots) in &have.keys {
            let mine = self.keys.get(k);
            for &d in dots {
                if self.context.contains(d) && !mine.is_some_and(|m| m.contains(&d)) {
                    context.insert(d);
                }
            }
        }
        let keys: BTreeMap<K, BTreeSet<Dot>> = self
            .keys
            .iter()
            .filter_map(|(k, dots)| {
                let dots: BTreeSet<Dot> = dots
                    .iter()
                    .copied()
                    .filter(|&d| context.contains(d))
                    .collect();
                (!dots.is_empty()).then(|| (k.clone(), dots))
            })
            .collect();
        let mut values: BTreeMap<K, V> = self
            .values
            .iter()
            .filter_map(|(k, v)| match have.values.get(k) {
                None => Some((k.clone(), v.clone())),
                Some(h) => v.difference(h).map(|d| (k.clone(), d)),
            })
            .collect();
        if context.is_empty() && values.is_empty() {
            return None;
        }
        // A present key has a value in every valid state: the bottom where
        // `have` holds all of it.
        for k in keys.keys() {
            values.entry(k.clone()).or_default();
        }
        Some(Self {
            keys,
            values,
            context,
        })
    }

    fn validate(&self) -> Result<(), InvalidState> {
        self.context.validate()?;
        let mut seen = BTreeSet::new();
        for (k, dots) in &self.keys {
            if dots.is_empty() {
                return Err(InvalidState::Other("an ORMap key without dots"));
            }
            if !self.values.contains_key(k) {
                return Err(InvalidState::Other("a present ORMap key without a value"));
            }
            for &d in dots {
                check_dot(&self.context, d)?;
                if !seen.insert(d) {
                    return Err(InvalidState::Other("one dot tags two ORMap keys"));
                }
            }
        }
        for v in self.values.values() {
            v.validate()
                .map_err(|e| InvalidState::Nested(Box::new(e)))?;
        }
        Ok(())
    }

    /// The greater of the context's counter and the values' versions.
    fn version_of(&self, replica: ReplicaId) -> u64 {
        self.values
            .values()
            .map(|v| v.version_of(replica))
            .fold(self.context.max_counter(replica), u64::max)
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.context.mentions(removed)
            || self.values.values().any(|v| v.needs_pruning_from(removed))
    }

    /// Each key tagged by `removed` gets one fresh dot of `into` (the
    /// pruning replica) in place of `removed`'s dots, the context forgets
    /// `removed`, and every value, hidden ones included, is pruned as its
    /// type says. A remove the pruning replica had not seen when it pruned
    /// loses against the fresh dot, as against a concurrent update.
    /// Pruning a replica into itself changes nothing.
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId) {
        if removed == into {
            return;
        }
        for dots in self.keys.values_mut() {
            let before = dots.len();
            dots.retain(|d| d.replica != removed);
            if dots.len() != before {
                let fresh = self.context.next_dot(into);
                self.context.insert(fresh);
                dots.insert(fresh);
            }
        }
        self.context.forget(removed);
        for v in self.values.values_mut() {
            v.prune(removed, into);
        }
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.keys.retain(|_, dots| {
            dots.retain(|d| d.replica != removed);
            !dots.is_empty()
        });
        self.context.forget(removed);
        for v in self.values.values_mut() {
            v.prune_cleanup(removed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdt::GCounter;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);
    const K: u8 = 7;

    fn count(m: &ORMap<u8, GCounter>, k: u8) -> Option<u128> {
        m.get(&k).map(|v| v.value())
    }

    #[test]
    fn updates_ship_nested_deltas_and_join_pointwise() {
        let mut a = ORMap::default();
        let mut b = ORMap::default();
        let d1 = a.update(A, K, |c: &mut GCounter| c.increment(A, 2));
        b.merge(&d1);
        let d2 = b.update(B, K, |c| c.increment(B, 3));
        let d3 = a.update(A, K, |c| c.increment(A, 1));
        assert_eq!(d3.values[&K], GCounter::default().increment(A, 3));
        a.merge(&d2);
        b.merge(&d3);
        assert_eq!(a, b);
        assert_eq!(count(&a, K), Some(6));
    }

    #[test]
    fn an_update_concurrent_with_a_remove_keeps_the_merged_value() {
        let mut a = ORMap::default();
        a.update(A, K, |c: &mut GCounter| c.increment(A, 5));
        let mut b = a.clone();
        let rm = a.remove(&K);
        assert_eq!(count(&a, K), None);
        assert_eq!(a.values_held(), 1);
        let up = b.update(B, K, |c| c.increment(B, 1));
        a.merge(&up);
        b.merge(&rm);
        assert_eq!(a, b);
        assert_eq!(count(&a, K), Some(6));
    }

    #[test]
    fn a_removed_key_updated_again_shows_its_former_value() {
        let mut a = ORMap::default();
        a.update(A, K, |c: &mut GCounter| c.increment(A, 5));
        a.remove(&K);
        a.update(A, K, |c| c.increment(A, 1));
        assert_eq!(count(&a, K), Some(6));
    }

    #[test]
    fn validate_refuses_an_invalid_nested_value_and_a_key_without_value() {
        let mut m: ORMap<u8, GCounter> = ORMap::default();
        m.update(A, 1, |c| c.increment(A, 1));
        let mut forged = m.clone();
        let bad: GCounter = postcard::from_bytes(&[1, 2, 0]).expect("one entry, counter 0");
        forged.values.insert(1, bad);
        assert!(matches!(forged.validate(), Err(InvalidState::Nested(_))));
        let mut forged = m.clone();
        forged.values.clear();
        assert!(forged.validate().is_err());
        m.validate().unwrap();
    }
}
