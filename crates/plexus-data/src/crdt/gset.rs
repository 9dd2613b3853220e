//! A grow-only set (Shapiro et al. 2011, §3.3.1): elements are added,
//! never removed; the join is the union. An inserted element is in every
//! replica that has merged the insert's delta.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::crdt::{Crdt, Element, InvalidState, ReplicaId};

/// A grow-only set.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct GSet<T: Element> {
    elements: BTreeSet<T>,
}

// By hand: a derived `Default` would ask for `T: Default`.
impl<T: Element> Default for GSet<T> {
    fn default() -> Self {
        Self {
            elements: BTreeSet::new(),
        }
    }
}

impl<T: Element> GSet<T> {
    /// Adds `element`; the delta is the one-element set.
    pub fn insert(&mut self, element: T) -> Self {
        self.elements.insert(element.clone());
        Self {
            elements: [element].into(),
        }
    }

    /// Whether `element` is in the set.
    pub fn contains(&self, element: &T) -> bool {
        self.elements.contains(element)
    }

    /// The elements, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.elements.iter()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }
}

impl<T: Element> Crdt for GSet<T> {
    const TYPE_NAME: &'static str = "GSet";

    fn merge(&mut self, other: &Self) {
        for e in &other.elements {
            if !self.elements.contains(e) {
                self.elements.insert(e.clone());
            }
        }
    }

    /// The elements `have` lacks.
    fn difference(&self, have: &Self) -> Option<Self> {
        let elements: BTreeSet<T> = self.elements.difference(&have.elements).cloned().collect();
        (!elements.is_empty()).then_some(Self { elements })
    }

    fn validate(&self) -> Result<(), InvalidState> {
        Ok(())
    }

    /// 0: the set does not name replicas.
    fn version_of(&self, _replica: ReplicaId) -> u64 {
        0
    }

    fn needs_pruning_from(&self, _removed: ReplicaId) -> bool {
        false
    }

    /// Nothing to do: the set does not name replicas.
    fn prune(&mut self, _removed: ReplicaId, _into: ReplicaId) {}

    fn prune_cleanup(&mut self, _removed: ReplicaId) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_of_concurrent_inserts() {
        let mut a = GSet::default();
        let mut b = GSet::default();
        let d1 = a.insert(1u8);
        let d2 = b.insert(2u8);
        a.merge(&d2);
        b.merge(&d1);
        assert_eq!(a, b);
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(a.difference(&GSet::default()), Some(a.clone()));
        assert_eq!(a.difference(&b), None);
    }
}
