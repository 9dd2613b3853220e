//! An add-wins observed-remove set (Almeida et al. 2018, §6.2, "AWSet":
//! a DotMap from element to DotSet with a causal context).
//!
//! Each add tags its element with a fresh [`Dot`]; a remove removes the
//! dots it has seen, so an add concurrent with a remove (whose dot the
//! remover had not seen) survives it: **add wins**. Sequentially, the last
//! operation wins. No tombstones are kept: a dot in the causal context but
//! in no element is a removed one.
//!
//! Guarantees: an element is present after every replica has merged every
//! delta if and only if some add of it was seen by no remove (or clear, or
//! later add, which replaces the dots it saw) of it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::crdt::context::check_dot;
use crate::crdt::{CausalContext, Crdt, Dot, Element, InvalidState, ReplicaId};

/// An add-wins observed-remove set.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct ORSet<T: Element> {
    /// Each present element and the dots of the adds that keep it present
    /// (never empty).
    entries: BTreeMap<T, BTreeSet<Dot>>,
    context: CausalContext,
}

// By hand: a derived `Default` would ask for `T: Default`.
impl<T: Element> Default for ORSet<T> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            context: CausalContext::default(),
        }
    }
}

impl<T: Element> ORSet<T> {
    /// Adds `element` with a fresh dot of `replica`. The delta holds the
    /// element with that dot, and the element's former dots in its context
    /// (the add supersedes them, so they do not pile up).
    pub fn add(&mut self, replica: ReplicaId, element: T) -> Self {
        let dot = self.context.next_dot(replica);
        let old = self
            .entries
            .insert(element.clone(), [dot].into())
            .unwrap_or_default();
        self.context.insert(dot);
        Self {
            entries: [(element, [dot].into())].into(),
            context: CausalContext::from_dots(old.into_iter().chain([dot])),
        }
    }

    /// Removes `element`: the delta is no element, with the removed dots in
    /// its context. Removing an absent element returns the bottom.
    pub fn remove(&mut self, element: &T) -> Self {
        let old = self.entries.remove(element).unwrap_or_default();
        Self {
            entries: BTreeMap::new(),
            context: CausalContext::from_dots(old),
        }
    }

    /// Removes every element (those seen here: concurrent adds survive).
    pub fn clear(&mut self) -> Self {
        let old = std::mem::take(&mut self.entries);
        Self {
            entries: BTreeMap::new(),
            context: CausalContext::from_dots(old.into_values().flatten()),
        }
    }

    /// Whether `element` is present.
    pub fn contains(&self, element: &T) -> bool {
        self.entries.contains_key(element)
    }

    /// The present elements, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.entries.keys()
    }

    /// The number of present elements.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no element is present.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The dots this state has seen.
    pub fn context(&self) -> &CausalContext {
        &self.context
    }
}

impl<T: Element> Crdt for ORSet<T> {
    const TYPE_NAME: &'static str = "ORSet";

    /// The causal join (§5.2): a dot survives if both sides hold it, or
    /// one side holds it and the other has not seen it.
    fn merge(&mut self, other: &Self) {
        for (e, theirs) in &other.entries {
            let fresh: Vec<Dot> = theirs
                .iter()
                .copied()
                .filter(|&d| !self.context.contains(d))
                .collect();
            if !fresh.is_empty() {
                self.entries.entry(e.clone()).or_default().extend(fresh);
            }
        }
        if !other.context.is_empty() {
            self.entries.retain(|e, dots| {
                let theirs = other.entries.get(e);
                dots.retain(|&d| {
                    theirs.is_some_and(|t| t.contains(&d)) || !other.context.contains(d)
                });
                !dots.is_empty()
            });
        }
        self.context.merge(&other.context);
    }

    /// The (element, dot) pairs whose dot `have` has not seen, and the
    /// context's dots `have` lacks or holds alive while `self` saw them
    /// removed (see [`CausalContext::difference`] for why it may also
    /// carry live dots `have` has).
    fn difference(&self, have: &Self) -> Option<Self> {
        let mut context = self.context.difference(&have.context);
        for (e, dots) in &have.entries {
            let mine = self.entries.get(e);
            for &d in dots {
                if self.context.contains(d) && !mine.is_some_and(|m| m.contains(&d)) {
                    context.insert(d);
                }
            }
        }
        if context.is_empty() {
            return None;
        }
        let entries = self
            .entries
            .iter()
            .filter_map(|(e, dots)| {
                let dots: BTreeSet<Dot> = dots
                    .iter()
                    .copied()
                    .filter(|&d| context.contains(d))
                    .collect();
                (!dots.is_empty()).then(|| (e.clone(), dots))
            })
            .collect();
        Some(Self { entries, context })
    }

    fn validate(&self) -> Result<(), InvalidState> {
        self.context.validate()?;
        let mut seen = BTreeSet::new();
        for dots in self.entries.values() {
            if dots.is_empty() {
                return Err(InvalidState::Other("an ORSet element without dots"));
            }
            for &d in dots {
                check_dot(&self.context, d)?;
                if !seen.insert(d) {
                    return Err(InvalidState::Other("one dot tags two ORSet elements"));
                }
            }
        }
        Ok(())
    }

    fn version_of(&self, replica: ReplicaId) -> u64 {
        self.context.max_counter(replica)
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.context.mentions(removed)
    }

    /// Each element tagged by `removed` gets one fresh dot of `into` in
    /// place of `removed`'s dots, and the context forgets `removed`.
    /// `into` must be the pruning replica (its fresh dots are then unique).
    /// An element whose only dots were `removed`'s is re-added by `into`:
    /// a remove of it that the pruning replica had not seen when it pruned
    /// loses against that add, as against any concurrent add. Pruning a
    /// replica into itself changes nothing.
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId) {
        if removed == into {
            return;
        }
        for dots in self.entries.values_mut() {
            let before = dots.len();
            dots.retain(|d| d.replica != removed);
            if dots.len() != before {
                let fresh = self.context.next_dot(into);
                self.context.insert(fresh);
                dots.insert(fresh);
            }
        }
        self.context.forget(removed);
    }

    /// Drops `removed`'s dots (an element left without dots goes: the
    /// pruning replica's fresh dot brings it back) and context entries.
    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.entries.retain(|_, dots| {
            dots.retain(|d| d.replica != removed);
            !dots.is_empty()
        });
        self.context.forget(removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);

    #[test]
    fn a_concurrent_add_wins_over_a_remove() {
        let mut a = ORSet::default();
        let d = a.add(A, 'x');
        let mut b = a.clone();
        let rm = a.remove(&'x');
        let re = b.add(B, 'x');
        a.merge(&re);
        b.merge(&rm);
        assert_eq!(a, b);
        assert!(a.contains(&'x'));
        // The first add's dot is gone: both the remove and the re-add saw it.
        assert_eq!(a.entries[&'x'].len(), 1);
        let mut late = ORSet::default();
        late.merge(&rm);
        late.merge(&d);
        assert!(
            !late.contains(&'x'),
            "a remove that saw the add removes it, in any order"
        );
    }

    #[test]
    fn add_supersedes_the_elements_former_dots() {
        let mut a = ORSet::default();
        a.add(A, 1u8);
        let d = a.add(A, 1u8);
        assert_eq!(a.entries[&1].len(), 1);
        assert!(d.context.contains(Dot::new(A, 1)));
        let mut b = ORSet::default();
        b.add(A, 1u8);
        b.merge(&d);
        assert_eq!(b, a);
    }

    #[test]
    fn clear_keeps_unseen_adds() {
        let mut a = ORSet::default();
        a.add(A, 1u8);
        a.add(A, 2u8);
        let mut b = a.clone();
        let c = a.clear();
        let d = b.add(B, 3u8);
        b.merge(&c);
        a.merge(&d);
        assert_eq!(a, b);
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), [3]);
    }

    #[test]
    fn validate_refuses_a_dot_outside_the_context() {
        let mut s = ORSet::default();
        s.add(A, 1u8);
        s.entries.insert(2, [Dot::new(B, 4)].into());
        assert_eq!(
            s.validate(),
            Err(InvalidState::DotOutsideContext {
                replica: B,
                counter: 4
            })
        );
    }

    #[test]
    fn pruning_re_tags_the_removed_replicas_elements() {
        let mut s = ORSet::default();
        s.add(A, 1u8);
        s.add(B, 2u8);
        let mut other = s.clone();
        s.prune(B, A);
        assert!(!s.needs_pruning_from(B));
        assert_eq!(s.entries[&2].iter().next(), Some(&Dot::new(A, 2)));
        other.prune_cleanup(B);
        other.merge(&s);
        assert_eq!(other, s);
        assert_eq!(other.len(), 2);
    }
}
