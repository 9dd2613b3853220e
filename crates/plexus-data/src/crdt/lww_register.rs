//! A last-writer-wins register (Shapiro et al. 2011, §3.2.1).
//!
//! Each write is stamped with a clock the caller supplies (a sans-IO type
//! reads no clock: wall-clock milliseconds are the usual choice) and the
//! writing replica; the join keeps the write with the greatest
//! `(clock, replica, value)`. The replica breaks ties between writes with
//! the same clock and the value breaks the last ones (one replica writing
//! twice with one clock), so the order is total and every replica keeps the
//! same write whatever the order of the merges.
//!
//! Guarantees: after every replica has merged every write, each holds the
//! write with the greatest stamp. A concurrent write with a smaller clock
//! is lost, by design; with skewed wall clocks, "last" means "greatest
//! clock", not "latest in real time".

use serde::{Deserialize, Serialize};

use crate::crdt::{Crdt, Element, InvalidState, ReplicaId};

/// A last-writer-wins register: empty, or one stamped value.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct LwwRegister<T: Element> {
    write: Option<Write<T>>,
}

/// A write and its stamp. Field order is the order of the join: clock,
/// then replica, then value.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
struct Write<T: Element> {
    clock: u64,
    replica: ReplicaId,
    value: T,
}

// By hand: a derived `Default` would ask for `T: Default`.
impl<T: Element> Default for LwwRegister<T> {
    fn default() -> Self {
        Self { write: None }
    }
}

impl<T: Element> LwwRegister<T> {
    /// Writes `value` at `clock`. The stored clock is
    /// `max(clock, current + 1)` (Akka's default clock), so a write always
    /// supersedes what this replica has seen, even if its clock lags. The
    /// delta is the new register.
    ///
    /// The clock saturates at `u64::MAX`; a write that still does not beat
    /// the current one there (a lower replica id, then a lower value)
    /// changes nothing and returns the bottom.
    pub fn set(&mut self, replica: ReplicaId, value: T, clock: u64) -> Self {
        let clock = match &self.write {
            Some(w) if w.clock >= clock => w.clock.saturating_add(1),
            _ => clock,
        };
        let write = Write {
            clock,
            replica,
            value,
        };
        if self.write.as_ref().is_some_and(|w| *w >= write) {
            return Self::default();
        }
        self.write = Some(write.clone());
        Self { write: Some(write) }
    }

    /// The value, if any was written.
    pub fn get(&self) -> Option<&T> {
        self.write.as_ref().map(|w| &w.value)
    }

    /// The winning write's clock and replica.
    pub fn timestamp(&self) -> Option<(u64, ReplicaId)> {
        self.write.as_ref().map(|w| (w.clock, w.replica))
    }
}

impl<T: Element> Crdt for LwwRegister<T> {
    const TYPE_NAME: &'static str = "LwwRegister";

    fn merge(&mut self, other: &Self) {
        if let Some(theirs) = &other.write {
            if self.write.as_ref().is_none_or(|mine| mine < theirs) {
                self.write = Some(theirs.clone());
            }
        }
    }

    /// The whole register if its write beats `have`'s.
    fn difference(&self, have: &Self) -> Option<Self> {
        let mine = self.write.as_ref()?;
        have.write
            .as_ref()
            .is_none_or(|theirs| theirs < mine)
            .then(|| self.clone())
    }

    fn validate(&self) -> Result<(), InvalidState> {
        Ok(())
    }

    /// 0: the clock is the caller's, not a count of this replica's writes.
    fn version_of(&self, _replica: ReplicaId) -> u64 {
        0
    }

    /// Never: the replica in a stamp only breaks ties. Renaming it would
    /// change which of two equal-clock writes wins at the pruned replica
    /// but not at the others, so the stamp keeps the removed replica's id.
    fn needs_pruning_from(&self, _removed: ReplicaId) -> bool {
        false
    }

    /// Nothing to do (see [`Crdt::needs_pruning_from`]).
    fn prune(&mut self, _removed: ReplicaId, _into: ReplicaId) {}

    fn prune_cleanup(&mut self, _removed: ReplicaId) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);

    #[test]
    fn the_greater_clock_wins_then_the_greater_replica() {
        let mut a = LwwRegister::<char>::default();
        let mut b = LwwRegister::default();
        let da = a.set(A, 'a', 10);
        let db = b.set(B, 'b', 10);
        a.merge(&db);
        b.merge(&da);
        assert_eq!(a, b);
        assert_eq!(a.get(), Some(&'b'));
        let d = a.set(A, 'l', 11);
        b.merge(&d);
        assert_eq!(b.get(), Some(&'l'));
    }

    #[test]
    fn a_lagging_clock_still_supersedes_what_the_replica_has_seen() {
        let mut r = LwwRegister::default();
        r.set(A, 1u8, 100);
        r.set(B, 2u8, 5);
        assert_eq!(r.get(), Some(&2));
        assert_eq!(r.timestamp(), Some((101, B)));
    }

    #[test]
    fn a_write_that_cannot_win_at_the_saturated_clock_changes_nothing() {
        let mut r = LwwRegister::default();
        r.set(B, 1u8, u64::MAX);
        assert_eq!(r.set(A, 2u8, 3), LwwRegister::default());
        assert_eq!(r.get(), Some(&1));
    }
}
