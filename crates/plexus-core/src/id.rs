//! Identities of nodes and actors.
//!
//! An [`ActorId`] is stable for the whole life of an actor, across restarts by
//! its supervisor, and unique across nodes: it pairs the [`NodeId`] of the
//! system that spawned the actor with a per-system serial number. Remote refs
//! (a later layer) carry the same id, so equality and hashing of
//! [`ActorRef`](crate::ActorRef)s do not depend on where the actor lives.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};

use serde::{Deserialize, Serialize};

/// Identity of one actor system (one node of a distributed system).
///
/// Chosen at random when the system is created, so two processes, or two
/// systems in one process, practically never share one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(u64);

impl NodeId {
    /// A fresh random node id.
    pub fn random() -> Self {
        // `RandomState` is seeded from the OS once per process and then
        // advanced per instance, so this is unique per call without pulling in
        // an RNG crate.
        let mut h = RandomState::new().build_hasher();
        h.write_u64(std::process::id().into());
        Self(h.finish())
    }

    /// The id with the given raw value (as carried on the wire).
    pub const fn from_u64(raw: u64) -> Self {
        Self(raw)
    }

    /// The raw value of this id.
    pub const fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Stable identity of one actor: the node that spawned it and a serial number.
///
/// Displayed as `<serial>@<node>`, e.g. `17@5e0c1d2a9b3f4e61`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ActorId {
    node: NodeId,
    serial: u64,
}

impl ActorId {
    /// The id of actor number `serial` of node `node`.
    pub const fn new(node: NodeId, serial: u64) -> Self {
        Self { node, serial }
    }

    /// The node that spawned this actor.
    pub const fn node(self) -> NodeId {
        self.node
    }

    /// The actor's serial number within its node.
    pub const fn serial(self) -> u64 {
        self.serial
    }
}

impl fmt::Debug for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.serial, self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_node_ids_differ() {
        assert_ne!(NodeId::random(), NodeId::random());
    }

    #[test]
    fn actor_id_displays_serial_at_node() {
        let id = ActorId::new(NodeId::from_u64(0xab), 7);
        assert_eq!(id.to_string(), "7@00000000000000ab");
    }
}
