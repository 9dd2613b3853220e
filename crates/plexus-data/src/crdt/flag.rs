//! A one-way flag (Akka's `Flag`): it starts disabled and, once enabled
//! anywhere, is enabled everywhere that merges the enable; it never goes
//! back. The join is logical or.

use serde::{Deserialize, Serialize};

use crate::crdt::{Crdt, InvalidState, ReplicaId};

/// A flag that can only be switched on.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Flag {
    enabled: bool,
}

impl Flag {
    /// Switches the flag on; the delta is an enabled flag.
    pub fn enable(&mut self) -> Self {
        self.enabled = true;
        Self { enabled: true }
    }

    /// Whether the flag is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }
}

impl Crdt for Flag {
    const TYPE_NAME: &'static str = "Flag";

    fn merge(&mut self, other: &Self) {
        self.enabled |= other.enabled;
    }

    fn difference(&self, have: &Self) -> Option<Self> {
        (self.enabled && !have.enabled).then_some(*self)
    }

    fn validate(&self) -> Result<(), InvalidState> {
        Ok(())
    }

    /// 0: the flag does not name replicas.
    fn version_of(&self, _replica: ReplicaId) -> u64 {
        0
    }

    fn needs_pruning_from(&self, _removed: ReplicaId) -> bool {
        false
    }

    /// Nothing to do: the flag does not name replicas.
    fn prune(&mut self, _removed: ReplicaId, _into: ReplicaId) {}

    fn prune_cleanup(&mut self, _removed: ReplicaId) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_enabled_stays_enabled() {
        let mut a = Flag::default();
        let d = a.enable();
        let mut b = Flag::default();
        b.merge(&d);
        b.merge(&Flag::default());
        assert!(b.is_enabled());
        assert_eq!(d.difference(&b), None);
        assert_eq!(d.difference(&Flag::default()), Some(d));
    }
}
