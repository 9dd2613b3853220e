//! An enable-wins flag (Almeida et al. 2018, §6.1, "EWFlag": a DotSet with
//! a causal context).
//!
//! Enabling adds a fresh dot (and drops the dots this replica held);
//! disabling removes the dots it has seen. An enable concurrent with a
//! disable (its dot unseen by the disabler) survives it: **enable wins**.
//! Sequentially, the last operation wins.
//!
//! Guarantees: after every replica has merged every delta, the flag is on
//! if and only if some enable was seen by no other enable or disable.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::crdt::context::check_dot;
use crate::crdt::{CausalContext, Crdt, Dot, InvalidState, ReplicaId};

/// An enable-wins flag.
#[derive(Clone, Default, PartialEq, Debug, Serialize, Deserialize)]
pub struct EwFlag {
    /// The dots of the enables that keep the flag on.
    dots: BTreeSet<Dot>,
    context: CausalContext,
}

impl EwFlag {
    /// Switches the flag on with a fresh dot of `replica`. The delta holds
    /// that dot, and the dots it supersedes in its context.
    pub fn enable(&mut self, replica: ReplicaId) -> Self {
        let dot = self.context.next_dot(replica);
        let old = std::mem::replace(&mut self.dots, [dot].into());
        self.context.insert(dot);
        Self {
            dots: [dot].into(),
            context: CausalContext::from_dots(old.into_iter().chain([dot])),
        }
    }

    /// Switches the flag off (as far as this replica has seen: a concurrent
    /// enable wins). The delta holds the removed dots in its context.
    pub fn disable(&mut self) -> Self {
        let old = std::mem::take(&mut self.dots);
        Self {
            dots: BTreeSet::new(),
            context: CausalContext::from_dots(old),
        }
    }

    /// Whether the flag is on.
    pub fn is_enabled(&self) -> bool {
        !self.dots.is_empty()
    }

    /// The dots this state has seen.
    pub fn context(&self) -> &CausalContext {
        &self.context
    }
}

impl Crdt for EwFlag {
    const TYPE_NAME: &'static str = "EwFlag";

    /// The causal join of DotSets (§5.2).
    fn merge(&mut self, other: &Self) {
        for &d in &other.dots {
            if !self.context.contains(d) {
                self.dots.insert(d);
            }
        }
        if !other.context.is_empty() {
            self.dots
                .retain(|d| other.dots.contains(d) || !other.context.contains(*d));
        }
        self.context.merge(&other.context);
    }

    /// The dots `have` has not seen, and the context's dots `have` lacks or
    /// holds alive while `self` saw them removed.
    fn difference(&self, have: &Self) -> Option<Self> {
        let mut context = self.context.difference(&have.context);
        for &d in &have.dots {
            if self.context.contains(d) && !self.dots.contains(&d) {
                context.insert(d);
            }
        }
        if context.is_empty() {
            return None;
        }
        let dots = self
            .dots
            .iter()
            .copied()
            .filter(|&d| context.contains(d))
            .collect();
        Some(Self { dots, context })
    }

    fn validate(&self) -> Result<(), InvalidState> {
        self.context.validate()?;
        for &d in &self.dots {
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

    /// `removed`'s enables become one fresh enable of `into` (the pruning
    /// replica), and the context forgets `removed`: a disable the pruning
    /// replica had not seen when it pruned loses against it, as against a
    /// concurrent enable. Pruning a replica into itself changes nothing.
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId) {
        if removed == into {
            return;
        }
        let before = self.dots.len();
        self.dots.retain(|d| d.replica != removed);
        if self.dots.len() != before {
            let fresh = self.context.next_dot(into);
            self.context.insert(fresh);
            self.dots.insert(fresh);
        }
        self.context.forget(removed);
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.dots.retain(|d| d.replica != removed);
        self.context.forget(removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);

    #[test]
    fn a_concurrent_enable_wins_over_a_disable() {
        let mut a = EwFlag::default();
        a.enable(A);
        let mut b = a.clone();
        let off = a.disable();
        let on = b.enable(B);
        a.merge(&on);
        b.merge(&off);
        assert_eq!(a, b);
        assert!(a.is_enabled());
        let off = a.disable();
        b.merge(&off);
        assert!(!b.is_enabled());
    }
}
