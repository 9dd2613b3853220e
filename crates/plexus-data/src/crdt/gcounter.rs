//! A grow-only counter (Shapiro et al., "A comprehensive study of
//! Convergent and Commutative Replicated Data Types", 2011, §3.1.1; its
//! delta version in Almeida et al. 2018, §4).
//!
//! Each replica counts its own increments in its own entry; the value is
//! the sum of the entries, the join the entry-wise maximum. Every increment
//! that reaches a replica is counted exactly once, however often, late or
//! out of order its delta arrives.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::crdt::{Crdt, InvalidState, ReplicaId};

/// A grow-only counter: a map from replica to the sum of its increments.
///
/// Entries are never 0 (an absent entry is 0), so equal counters have one
/// representation. An entry saturates at `u64::MAX`; [`GCounter::value`]
/// is the exact sum as a `u128`, which no sum of `u64` entries overflows.
#[derive(Clone, Default, PartialEq, Debug, Serialize, Deserialize)]
pub struct GCounter {
    entries: BTreeMap<ReplicaId, u64>,
}

impl GCounter {
    /// Adds `n` to `replica`'s entry; the delta is the new entry alone.
    /// `n == 0` changes nothing and returns the bottom.
    pub fn increment(&mut self, replica: ReplicaId, n: u64) -> Self {
        if n == 0 {
            return Self::default();
        }
        let e = self.entries.entry(replica).or_insert(0);
        // 2⁶⁴ increments of one replica are out of reach in practice; a
        // saturated entry stays a valid (if capped) state.
        *e = e.saturating_add(n);
        Self {
            entries: [(replica, *e)].into(),
        }
    }

    /// The sum of every replica's increments.
    pub fn value(&self) -> u128 {
        self.entries.values().map(|&v| u128::from(v)).sum()
    }

    /// The increments of `replica` this state holds.
    pub fn count_of(&self, replica: ReplicaId) -> u64 {
        self.entries.get(&replica).copied().unwrap_or(0)
    }

    /// The replicas with a non-zero entry, and their entries.
    pub fn entries(&self) -> impl Iterator<Item = (ReplicaId, u64)> + '_ {
        self.entries.iter().map(|(&r, &n)| (r, n))
    }
}

impl Crdt for GCounter {
    const TYPE_NAME: &'static str = "GCounter";

    fn merge(&mut self, other: &Self) {
        for (&r, &n) in &other.entries {
            let e = self.entries.entry(r).or_insert(0);
            *e = (*e).max(n);
        }
    }

    /// The entries of `self` above `have`'s.
    fn difference(&self, have: &Self) -> Option<Self> {
        let entries: BTreeMap<_, _> = self
            .entries
            .iter()
            .filter(|(r, &n)| n > have.count_of(**r))
            .map(|(&r, &n)| (r, n))
            .collect();
        (!entries.is_empty()).then_some(Self { entries })
    }

    fn validate(&self) -> Result<(), InvalidState> {
        match self.entries.iter().find(|(_, &n)| n == 0) {
            Some((&r, _)) => Err(InvalidState::ZeroCounter(r)),
            None => Ok(()),
        }
    }

    fn version_of(&self, replica: ReplicaId) -> u64 {
        self.count_of(replica)
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.entries.contains_key(&removed)
    }

    /// `removed`'s entry is added to `into`'s (saturating) and dropped.
    /// Pruning a replica into itself changes nothing.
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId) {
        if removed == into {
            return;
        }
        if let Some(n) = self.entries.remove(&removed) {
            let e = self.entries.entry(into).or_insert(0);
            *e = e.saturating_add(n);
        }
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.entries.remove(&removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);

    #[test]
    fn value_is_the_sum_of_increments_across_replicas() {
        let mut a = GCounter::default();
        let mut b = GCounter::default();
        let d1 = a.increment(A, 3);
        let d2 = b.increment(B, 4);
        let d3 = a.increment(A, 1);
        assert_eq!(
            d3,
            GCounter {
                entries: [(A, 4)].into()
            }
        );
        b.merge(&d3);
        b.merge(&d1);
        a.merge(&d2);
        assert_eq!(a, b);
        assert_eq!(a.value(), 8);
    }

    #[test]
    fn pruning_moves_the_removed_entry_into_the_survivor() {
        let mut c = GCounter::default();
        c.increment(A, 3);
        c.increment(B, 4);
        let mut other = c.clone();
        c.prune(B, A);
        assert_eq!(c.count_of(A), 7);
        assert!(!c.needs_pruning_from(B));
        other.prune_cleanup(B);
        other.merge(&c);
        assert_eq!(other.value(), 7);
    }

    #[test]
    fn entries_saturate_instead_of_wrapping() {
        let mut c = GCounter::default();
        c.increment(A, u64::MAX);
        c.increment(A, 5);
        assert_eq!(c.count_of(A), u64::MAX);
        c.increment(B, u64::MAX);
        assert_eq!(c.value(), 2 * u128::from(u64::MAX));
    }
}
