//! The replicated types a replicator knows, behind one object-safe trait.
//!
//! A replicator holds keys of many CRDT types in one table and receives
//! states of them as bytes, so it needs each type's decoder by a tag that
//! travels with the bytes. The tag is the 64-bit XXH3 of the type's Rust
//! path (`std::any::type_name`), so `ORSet<String>` and `ORSet<u64>` are
//! different types on the wire. Every node of a cluster must therefore run
//! a build in which the replicated types have the same paths (the same
//! crate versions); a state of a type a node does not know is refused with
//! [`UnknownType`](crate::replicator::EntryError::UnknownType), and
//! anti-entropy delivers it again once the type is registered. The crate's
//! types without parameters (counters, flags) are always registered; a
//! generic one (`ORSet<String>`, `ORMap<String, GCounter>`) is registered
//! by using a key of it, or by `Replicator::register`, which every member
//! should do at start for the types it replicates (a member that has not
//! cannot acknowledge writes of them).

use std::any::Any;
use std::collections::HashMap;
use std::fmt;

use crate::crdt::{Crdt, InvalidState, ReplicaId};

/// A replicated type's tag on the wire (see the [module docs](self)).
pub type TypeTag = u64;

/// The tag of `T`.
pub fn type_tag<T: Crdt>() -> TypeTag {
    twox_hash::XxHash3_64::oneshot(std::any::type_name::<T>().as_bytes())
}

/// A CRDT state of a type known only at run time.
pub(crate) trait Data: Send + Sync + fmt::Debug {
    fn tag(&self) -> TypeTag;
    fn type_name(&self) -> &'static str;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn clone_box(&self) -> Box<dyn Data>;
    fn bottom(&self) -> Box<dyn Data>;
    fn is_bottom(&self) -> bool;
    /// Merges `other`, which must be of the same type (callers check tags).
    fn merge_dyn(&mut self, other: &dyn Data);
    fn difference_dyn(&self, have: &dyn Data) -> Option<Box<dyn Data>>;
    fn includes(&self, other: &dyn Data) -> bool;
    fn encode(&self) -> Vec<u8>;
    fn version_of(&self, replica: ReplicaId) -> u64;
    fn needs_pruning_from(&self, removed: ReplicaId) -> bool;
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId);
    fn prune_cleanup(&mut self, removed: ReplicaId);
}

/// The one implementation of [`Data`]: a typed state.
#[derive(Debug, Clone)]
pub(crate) struct Typed<T: Crdt>(pub T);

fn same<T: Crdt>(other: &dyn Data) -> &T {
    &other
        .as_any()
        .downcast_ref::<Typed<T>>()
        .expect("a replicator merges only states whose tags matched")
        .0
}

impl<T: Crdt> Data for Typed<T> {
    fn tag(&self) -> TypeTag {
        type_tag::<T>()
    }
    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn clone_box(&self) -> Box<dyn Data> {
        Box::new(self.clone())
    }
    fn bottom(&self) -> Box<dyn Data> {
        Box::new(Typed(T::default()))
    }
    fn is_bottom(&self) -> bool {
        self.0 == T::default()
    }
    fn merge_dyn(&mut self, other: &dyn Data) {
        self.0.merge(same::<T>(other));
    }
    fn difference_dyn(&self, have: &dyn Data) -> Option<Box<dyn Data>> {
        self.0
            .difference(same::<T>(have))
            .map(|d| Box::new(Typed(d)) as Box<dyn Data>)
    }
    fn includes(&self, other: &dyn Data) -> bool {
        same::<T>(other).difference(&self.0).is_none()
    }
    fn encode(&self) -> Vec<u8> {
        // Serialising an in-memory CRDT into a Vec cannot fail: its types
        // are maps, sets, integers and the user's serde types.
        postcard::to_stdvec(&self.0).unwrap_or_default()
    }
    fn version_of(&self, replica: ReplicaId) -> u64 {
        self.0.version_of(replica)
    }
    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.0.needs_pruning_from(removed)
    }
    fn prune(&mut self, removed: ReplicaId, into: ReplicaId) {
        self.0.prune(removed, into);
    }
    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.0.prune_cleanup(removed);
    }
}

/// Why bytes did not decode as a state of their tagged type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes are not an encoding of the type.
    #[error("not a valid encoding of {type_name}")]
    Malformed {
        /// The type the tag named.
        type_name: &'static str,
    },
    /// The bytes decode but break the type's invariants.
    #[error("invalid state of {type_name}: {source}")]
    Invalid {
        /// The type the tag named.
        type_name: &'static str,
        /// The broken invariant.
        source: InvalidState,
    },
}

type Decoder = fn(&[u8]) -> Result<Box<dyn Data>, DecodeError>;

fn decode<T: Crdt>(bytes: &[u8]) -> Result<Box<dyn Data>, DecodeError> {
    let type_name = std::any::type_name::<T>();
    let (value, rest) =
        postcard::take_from_bytes::<T>(bytes).map_err(|_| DecodeError::Malformed { type_name })?;
    if !rest.is_empty() {
        return Err(DecodeError::Malformed { type_name });
    }
    value
        .validate()
        .map_err(|source| DecodeError::Invalid { type_name, source })?;
    Ok(Box::new(Typed(value)))
}

/// The decoders of the types a replicator knows.
#[derive(Default, Clone)]
pub(crate) struct Registry {
    decoders: HashMap<TypeTag, (&'static str, Decoder)>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.decoders.values().map(|(name, _)| name))
            .finish()
    }
}

impl Registry {
    /// A registry of the crate's types that take no type parameter; the
    /// generic ones (sets, maps, registers of the user's types) are
    /// registered by using a key of them or by `Replicator::register`.
    pub(crate) fn with_builtins() -> Self {
        let mut r = Self::default();
        r.register::<crate::crdt::GCounter>();
        r.register::<crate::crdt::PNCounter>();
        r.register::<crate::crdt::Flag>();
        r.register::<crate::crdt::EwFlag>();
        r
    }

    pub(crate) fn register<T: Crdt>(&mut self) {
        self.decoders
            .entry(type_tag::<T>())
            .or_insert((std::any::type_name::<T>(), decode::<T>));
    }

    pub(crate) fn knows(&self, tag: TypeTag) -> bool {
        self.decoders.contains_key(&tag)
    }

    /// Decodes `bytes` as the type of `tag`; `None` when the tag is unknown.
    pub(crate) fn decode(
        &self,
        tag: TypeTag,
        bytes: &[u8],
    ) -> Option<Result<Box<dyn Data>, DecodeError>> {
        self.decoders.get(&tag).map(|(_, d)| d(bytes))
    }
}
