//! Dots and the causal context of the causal CRDTs (Almeida, Shoker and
//! Baquero, "Delta State Replicated Data Types", 2018, §5: causal CRDTs,
//! the dot stores DotSet, DotFun and DotMap).
//!
//! Every mutation of a causal CRDT is named by a fresh [`Dot`], the
//! replica's next counter. A [`CausalContext`] is the set of dots a state
//! has seen: a dot in the context but not in the state's dot store is one
//! the state has seen removed, which is how a join tells "removed here"
//! from "not seen here yet" without tombstones.
//!
//! The context is kept compact (§5.1, "compression of causal context"): a
//! version vector holds, per replica, the contiguous dots `1..=n`, and a
//! "cloud" holds the dots beyond a gap (a delta carries the dots of one
//! mutation, not the replica's whole history). After every change the
//! cloud's dots that extend a replica's contiguous run are folded into the
//! vector, so two contexts with the same dots have the same representation
//! (states compare and encode alike).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::crdt::{InvalidState, ReplicaId};

/// One mutation's name: the `counter`-th event of `replica` (counters start
/// at 1).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct Dot {
    /// The replica that made the mutation.
    pub replica: ReplicaId,
    /// Its sequence number at that replica, from 1.
    pub counter: u64,
}

impl Dot {
    /// The dot `counter` of `replica`.
    pub fn new(replica: ReplicaId, counter: u64) -> Self {
        Self { replica, counter }
    }
}

/// The dots a state has seen: a version vector plus the dots beyond it.
///
/// Invariants (checked by [`CausalContext::validate`]): no counter is 0,
/// and the representation is compact (no cloud dot is covered by, or
/// extends, its replica's vector entry).
#[derive(Clone, Default, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct CausalContext {
    /// Per replica, every dot `1..=n` has been seen.
    vv: BTreeMap<ReplicaId, u64>,
    /// Seen dots past a gap in their replica's run.
    cloud: BTreeSet<Dot>,
}

impl CausalContext {
    /// Whether the context holds no dot.
    pub fn is_empty(&self) -> bool {
        self.vv.is_empty() && self.cloud.is_empty()
    }

    /// Whether `dot` has been seen.
    pub fn contains(&self, dot: Dot) -> bool {
        dot.counter != 0
            && (self.vv.get(&dot.replica).is_some_and(|&n| dot.counter <= n)
                || self.cloud.contains(&dot))
    }

    /// The highest counter of `replica` seen (0 if none).
    pub fn max_counter(&self, replica: ReplicaId) -> u64 {
        let contiguous = self.vv.get(&replica).copied().unwrap_or(0);
        let beyond = self
            .cloud
            .range(Dot::new(replica, 0)..=Dot::new(replica, u64::MAX))
            .next_back()
            .map_or(0, |d| d.counter);
        contiguous.max(beyond)
    }

    /// The dot a new mutation of `replica` gets: one past the highest seen.
    ///
    /// A replica makes one dot per mutation, so 2⁶⁴ − 1 is out of reach;
    /// the counter saturates there rather than wrapping (a replicator
    /// refuses states claiming more of a replica's dots than it made).
    pub fn next_dot(&self, replica: ReplicaId) -> Dot {
        Dot::new(replica, self.max_counter(replica).saturating_add(1))
    }

    /// Adds one dot (counter 0 is ignored: it names nothing).
    pub fn insert(&mut self, dot: Dot) {
        if dot.counter == 0 {
            return;
        }
        let n = self.vv.get(&dot.replica).copied().unwrap_or(0);
        if dot.counter <= n {
            return;
        }
        if n.checked_add(1) == Some(dot.counter) {
            self.vv.insert(dot.replica, dot.counter);
            self.absorb(dot.replica);
        } else {
            self.cloud.insert(dot);
        }
    }

    /// A context holding exactly `dots`.
    pub fn from_dots(dots: impl IntoIterator<Item = Dot>) -> Self {
        let mut c = Self::default();
        for d in dots {
            c.insert(d);
        }
        c
    }

    /// The union: afterwards `self` has seen every dot `other` has.
    pub fn merge(&mut self, other: &Self) {
        for (&r, &n) in &other.vv {
            let e = self.vv.entry(r).or_insert(0);
            *e = (*e).max(n);
        }
        self.cloud.extend(other.cloud.iter().copied());
        self.compact();
    }

    /// The dots of `self` that `have` lacks, as a context. A replica's
    /// contiguous run is taken whole when `have`'s run is shorter (the
    /// run `1..=n` is one entry, its tail alone would be `n − m` cloud
    /// dots), so the result may also hold dots `have` has: a causal type's
    /// difference therefore carries every live dot of `self` the result
    /// covers, so that no dot `have` holds alive is taken for removed.
    pub fn difference(&self, have: &Self) -> Self {
        let vv = self
            .vv
            .iter()
            .filter(|(r, &n)| have.vv.get(r).copied().unwrap_or(0) < n)
            .map(|(&r, &n)| (r, n))
            .collect();
        let cloud = self
            .cloud
            .iter()
            .copied()
            .filter(|&d| !have.contains(d))
            .collect();
        let mut out = Self { vv, cloud };
        out.compact();
        out
    }

    /// Whether the context names any dot of `replica`.
    pub fn mentions(&self, replica: ReplicaId) -> bool {
        self.max_counter(replica) != 0
    }

    /// Drops every dot of `replica` (pruning a removed replica).
    pub fn forget(&mut self, replica: ReplicaId) {
        self.vv.remove(&replica);
        self.cloud.retain(|d| d.replica != replica);
    }

    /// Checks the invariants a decoded context must keep.
    ///
    /// # Errors
    ///
    /// [`InvalidState::ZeroCounter`] for a counter 0,
    /// [`InvalidState::Other`] for a representation that is not compact.
    pub fn validate(&self) -> Result<(), InvalidState> {
        for (&r, &n) in &self.vv {
            if n == 0 {
                return Err(InvalidState::ZeroCounter(r));
            }
        }
        for d in &self.cloud {
            if d.counter == 0 {
                return Err(InvalidState::ZeroCounter(d.replica));
            }
            let n = self.vv.get(&d.replica).copied().unwrap_or(0);
            if d.counter <= n.saturating_add(1) {
                return Err(InvalidState::Other(
                    "a causal context's cloud holds a dot its version vector covers or extends",
                ));
            }
        }
        Ok(())
    }

    /// Folds the cloud into the vector where runs have become contiguous.
    fn compact(&mut self) {
        if self.cloud.is_empty() {
            return;
        }
        let cloud = std::mem::take(&mut self.cloud);
        for d in cloud {
            if d.counter == 0 {
                continue;
            }
            let n = self.vv.get(&d.replica).copied().unwrap_or(0);
            if d.counter <= n {
                continue;
            }
            // The cloud iterates in (replica, counter) order, so a run
            // `n+1, n+2, ...` is absorbed in one pass.
            if n.checked_add(1) == Some(d.counter) {
                self.vv.insert(d.replica, d.counter);
            } else {
                self.cloud.insert(d);
            }
        }
    }

    /// After `replica`'s vector entry grew, absorbs the cloud dots that now
    /// continue it.
    fn absorb(&mut self, replica: ReplicaId) {
        while let Some(&n) = self.vv.get(&replica) {
            let Some(next) = n.checked_add(1) else { return };
            if !self.cloud.remove(&Dot::new(replica, next)) {
                return;
            }
            self.vv.insert(replica, next);
        }
    }
}

/// A dot of a decoded dot store must be named (counter ≥ 1) and seen.
pub(crate) fn check_dot(context: &CausalContext, d: Dot) -> Result<(), InvalidState> {
    if d.counter == 0 {
        return Err(InvalidState::ZeroCounter(d.replica));
    }
    if !context.contains(d) {
        return Err(InvalidState::DotOutsideContext {
            replica: d.replica,
            counter: d.counter,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);

    #[test]
    fn dots_past_a_gap_wait_in_the_cloud_until_the_gap_fills() {
        let mut c = CausalContext::from_dots([Dot::new(A, 3), Dot::new(A, 1)]);
        assert!(c.contains(Dot::new(A, 1)) && c.contains(Dot::new(A, 3)));
        assert!(!c.contains(Dot::new(A, 2)));
        assert_eq!(c.cloud.len(), 1);
        c.insert(Dot::new(A, 2));
        assert!(c.cloud.is_empty());
        assert_eq!(c.vv.get(&A), Some(&3));
        assert_eq!(c.next_dot(A), Dot::new(A, 4));
        c.validate().unwrap();
    }

    #[test]
    fn merge_compacts_runs_that_meet() {
        let mut a = CausalContext::from_dots([Dot::new(A, 1), Dot::new(B, 2)]);
        let b = CausalContext::from_dots([Dot::new(A, 2), Dot::new(B, 1), Dot::new(A, 5)]);
        a.merge(&b);
        assert_eq!(a.vv.get(&A), Some(&2));
        assert_eq!(a.vv.get(&B), Some(&2));
        assert_eq!(
            a.cloud.iter().copied().collect::<Vec<_>>(),
            [Dot::new(A, 5)]
        );
        assert_eq!(a.max_counter(A), 5);
        a.validate().unwrap();
    }

    #[test]
    fn difference_takes_a_longer_run_whole_and_missing_cloud_dots() {
        let mine =
            CausalContext::from_dots((1..=4).map(|c| Dot::new(A, c)).chain([Dot::new(B, 7)]));
        let have = CausalContext::from_dots([Dot::new(A, 1), Dot::new(A, 2)]);
        let d = mine.difference(&have);
        assert_eq!(d, mine);
        assert!(mine.difference(&mine).is_empty());
        let mut joined = have.clone();
        joined.merge(&d);
        let mut expected = have;
        expected.merge(&mine);
        assert_eq!(joined, expected);
    }

    #[test]
    fn validate_refuses_counter_zero_and_uncompacted_forms() {
        let zero = CausalContext {
            vv: [(A, 0)].into(),
            cloud: BTreeSet::new(),
        };
        assert_eq!(zero.validate(), Err(InvalidState::ZeroCounter(A)));
        let covered = CausalContext {
            vv: [(A, 3)].into(),
            cloud: [Dot::new(A, 2)].into(),
        };
        assert!(covered.validate().is_err());
        let extends = CausalContext {
            vv: [(A, 3)].into(),
            cloud: [Dot::new(A, 4)].into(),
        };
        assert!(extends.validate().is_err());
        let gap = CausalContext {
            vv: [(A, 3)].into(),
            cloud: [Dot::new(A, 5)].into(),
        };
        gap.validate().unwrap();
    }

    #[test]
    fn forget_drops_every_dot_of_a_replica() {
        let mut c = CausalContext::from_dots([Dot::new(A, 1), Dot::new(A, 3), Dot::new(B, 1)]);
        assert!(c.mentions(A));
        c.forget(A);
        assert!(!c.mentions(A));
        assert!(c.contains(Dot::new(B, 1)));
    }
}
