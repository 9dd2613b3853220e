//! Delta-state CRDTs (Almeida, Shoker and Baquero, "Delta State Replicated
//! Data Types", 2018).
//!
//! Every type here is a join-semilattice: [`Crdt::merge`] is its join, so
//! merging is commutative, associative and idempotent, and replicas that
//! have merged the same states hold the same value whatever the order,
//! duplication or repetition of the merges. A **mutator** (`increment`,
//! `add`, `remove`, `set`, ...) changes the state in place and returns a
//! **delta**: a state of the same type, usually tiny, whose merge into any
//! replica has the effect of the mutation. Deltas join into delta groups
//! like states do, so a replicator ships the join of the deltas a peer has
//! not acknowledged instead of the whole state, and falls back to the full
//! state (which is just the biggest delta) when it must.
//!
//! Replicas are named by [`ReplicaId`]: a cluster member's address and
//! incarnation hashed to 64 bits, so a restarted node is a new replica and
//! never reuses the version numbers of its former life.
//!
//! Types whose causality needs it (ORSet, MvRegister, EwFlag, ORMap) carry
//! a **causal context** (the dots, `(replica, counter)` pairs, the state has
//! seen), compacted to a version vector plus the dots beyond it.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

mod context;
mod element;
mod ew_flag;
mod flag;
mod gcounter;
mod gset;
mod lww_register;
mod mv_register;
mod ormap;
mod orset;
mod pncounter;

pub use context::{CausalContext, Dot};
pub use element::Element;
pub use ew_flag::EwFlag;
pub use flag::Flag;
pub use gcounter::GCounter;
pub use gset::GSet;
pub use lww_register::LwwRegister;
pub use mv_register::MvRegister;
pub use ormap::ORMap;
pub use orset::ORSet;
pub use pncounter::PNCounter;

/// A replica: the 64-bit hash of a member's address and incarnation.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaId(pub u64);

impl ReplicaId {
    /// The replica of the member at `address` in its life `incarnation`
    /// (BLAKE3 of both, first 8 bytes: two of a thousand replicas collide
    /// with a probability near 3 × 10⁻¹⁴).
    pub fn of_member(address: &str, incarnation: u64) -> Self {
        let mut h = blake3::Hasher::new();
        h.update(&(address.len() as u32).to_le_bytes());
        h.update(address.as_bytes());
        h.update(&incarnation.to_le_bytes());
        let mut out = [0u8; 8];
        out.copy_from_slice(&h.finalize().as_bytes()[..8]);
        Self(u64::from_le_bytes(out))
    }
}

impl fmt::Debug for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{:016x}", self.0)
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A decoded state that breaks its type's invariants (hostile or corrupt
/// input): it is refused before it is merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidState {
    /// An element carries a dot its own causal context does not include.
    #[error("an element's dot {replica:?}:{counter} is outside the state's causal context")]
    DotOutsideContext {
        /// The dot's replica.
        replica: ReplicaId,
        /// The dot's counter.
        counter: u64,
    },
    /// A dot or version counter of 0 (counters start at 1).
    #[error("a dot of {0:?} has counter 0 (counters start at 1)")]
    ZeroCounter(ReplicaId),
    /// A nested value of a map is invalid.
    #[error("the value of a map entry is invalid: {0}")]
    Nested(Box<InvalidState>),
    /// Something else the type forbids.
    #[error("{0}")]
    Other(&'static str),
}

/// A delta-state CRDT: a join-semilattice whose mutators return deltas.
///
/// Laws every implementation keeps (property-tested in `tests/laws.rs`):
/// `merge` is commutative, associative and idempotent; merging a mutation's
/// delta into an old copy of the state gives the mutated state; `Default`
/// is the bottom (merging it changes nothing).
pub trait Crdt:
    Clone + Default + PartialEq + fmt::Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// The type's name on the wire and in the durable store: a delta for a
    /// key holding another type is refused, not merged.
    const TYPE_NAME: &'static str;

    /// The join: afterwards `self` includes everything `self` or `other`
    /// included.
    fn merge(&mut self, other: &Self);

    /// The part of `self` that `have` does not include yet (an optimal
    /// delta, Enes et al., "Efficient Synchronization of State-based
    /// CRDTs", 2019): `have ⊔ d == have ⊔ self`, and `None` when `have`
    /// already includes all of `self`. A replicator uses it to strip from a
    /// received delta what the receiver had, before passing it on.
    fn difference(&self, have: &Self) -> Option<Self>;

    /// Checks the invariants a decoded state must keep before it is merged
    /// (dots inside the causal context, no counter 0, nested values valid).
    ///
    /// # Errors
    ///
    /// [`InvalidState`] names the broken invariant.
    fn validate(&self) -> Result<(), InvalidState>;

    /// The highest version number this state holds for the mutations of
    /// `replica` (a counter's entry, a causal context's entry; 0 for types
    /// without per-replica versions). A state from a peer that holds more of
    /// this replica's mutations than this replica ever made is from the
    /// future (forged, or from a replica id reused), and is refused.
    fn version_of(&self, replica: ReplicaId) -> u64;

    /// Whether the state holds anything of `removed` that pruning would
    /// fold away.
    fn needs_pruning_from(&self, removed: ReplicaId) -> bool;

    /// Folds what `removed` contributed into `into`'s share (a counter's
    /// entry is added to `into`'s, an element's dot of `removed` becomes a
    /// fresh dot of `into`), so the state keeps its value without naming
    /// `removed`. Done once, by one replica, after every replica has
    /// merged `removed`'s last state (the replicator's pruning protocol).
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId);

    /// Drops what `removed` contributed, without folding it anywhere: what
    /// a replica does to states that reach it after pruning was performed
    /// elsewhere (the pruning replica's share already holds it).
    fn prune_cleanup(&mut self, removed: ReplicaId);
}
