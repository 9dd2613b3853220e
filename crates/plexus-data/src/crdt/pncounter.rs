//! A counter that goes up and down (Shapiro et al. 2011, §3.1.2): two
//! [`GCounter`]s, one of increments and one of decrements.
//!
//! The value is their difference. Like the grow-only counter, every
//! increment and decrement that reaches a replica counts exactly once.

use serde::{Deserialize, Serialize};

use crate::crdt::{Crdt, GCounter, InvalidState, ReplicaId};

/// A positive-negative counter: increments `p` minus decrements `n`.
#[derive(Clone, Default, PartialEq, Debug, Serialize, Deserialize)]
pub struct PNCounter {
    p: GCounter,
    n: GCounter,
}

impl PNCounter {
    /// Adds `n`; the delta holds `replica`'s new increment entry.
    pub fn increment(&mut self, replica: ReplicaId, n: u64) -> Self {
        Self {
            p: self.p.increment(replica, n),
            n: GCounter::default(),
        }
    }

    /// Subtracts `n`; the delta holds `replica`'s new decrement entry.
    pub fn decrement(&mut self, replica: ReplicaId, n: u64) -> Self {
        Self {
            p: GCounter::default(),
            n: self.n.increment(replica, n),
        }
    }

    /// Increments minus decrements (exact: each side is below 2¹²⁷).
    pub fn value(&self) -> i128 {
        // Each side sums u64 entries, one per replica: far below 2¹²⁷.
        let up = i128::try_from(self.p.value()).unwrap_or(i128::MAX);
        let down = i128::try_from(self.n.value()).unwrap_or(i128::MAX);
        up - down
    }

    /// The increments, as a grow-only counter.
    pub fn increments(&self) -> &GCounter {
        &self.p
    }

    /// The decrements, as a grow-only counter.
    pub fn decrements(&self) -> &GCounter {
        &self.n
    }
}

impl Crdt for PNCounter {
    const TYPE_NAME: &'static str = "PNCounter";

    fn merge(&mut self, other: &Self) {
        self.p.merge(&other.p);
        self.n.merge(&other.n);
    }

    fn difference(&self, have: &Self) -> Option<Self> {
        let p = self.p.difference(&have.p);
        let n = self.n.difference(&have.n);
        if p.is_none() && n.is_none() {
            return None;
        }
        Some(Self {
            p: p.unwrap_or_default(),
            n: n.unwrap_or_default(),
        })
    }

    fn validate(&self) -> Result<(), InvalidState> {
        self.p.validate()?;
        self.n.validate()
    }

    /// The replica's increment and decrement entries summed (each
    /// mutation raises one of them).
    fn version_of(&self, replica: ReplicaId) -> u64 {
        self.p
            .version_of(replica)
            .saturating_add(self.n.version_of(replica))
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.p.needs_pruning_from(removed) || self.n.needs_pruning_from(removed)
    }

    /// Both sides as [`GCounter::prune`]: the value is unchanged.
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId) {
        self.p.prune(removed, into);
        self.n.prune(removed, into);
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.p.prune_cleanup(removed);
        self.n.prune_cleanup(removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);

    #[test]
    fn value_is_increments_minus_decrements() {
        let mut a = PNCounter::default();
        let mut b = PNCounter::default();
        let d1 = a.increment(A, 10);
        let d2 = b.decrement(B, 15);
        a.merge(&d2);
        b.merge(&d1);
        assert_eq!(a, b);
        assert_eq!(a.value(), -5);
        assert_eq!(a.version_of(A), 10);
        assert_eq!(a.difference(&b), None);
    }
}
