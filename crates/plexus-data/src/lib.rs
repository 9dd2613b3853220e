//! Plexus replicated data: delta-state CRDTs and the replicator that shares
//! them across a cluster.
//!
//! ```text
//!  application actors: typed keys, update / get with consistency levels,
//!  subscriptions to changes
//!  ─────────────────────────────────────────────────────────────────────
//!  crdt (this crate)     GCounter · PNCounter · GSet · ORSet · LwwRegister
//!                        MvRegister · Flag · EwFlag · ORMap   (joins + deltas)
//!  ─────────────────────────────────────────────────────────────────────
//!  replicator (sans-IO)  delta buffers per peer with acks, anti-entropy by
//!                        key-range digests, consistency levels, pruning
//!  ─────────────────────────────────────────────────────────────────────
//!  a driver: the cluster's members on a Plexus node, or the simulator
//! ```
//!
//! Its own crate, not part of `plexus-cluster`: the data types are useful
//! without a cluster (and are tested without one), the durable store brings
//! an embedded database that a cluster without replicated data should not
//! carry, and the cluster's membership knows nothing of the data riding on
//! it (arrows point down).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod crdt;
#[cfg(feature = "node")]
pub mod node;
mod registry;
pub mod replicator;
pub mod sim;
#[cfg(feature = "store")]
pub mod store;
#[cfg(feature = "node")]
pub mod telemetry;

pub use crdt::{
    CausalContext, Crdt, Dot, Element, EwFlag, Flag, GCounter, GSet, InvalidState, LwwRegister,
    MvRegister, ORMap, ORSet, PNCounter, ReplicaId,
};
#[cfg(feature = "node")]
pub use node::Changed;
pub use registry::{type_tag, DecodeError, TypeTag};
pub use replicator::{
    Consistency, Event, GetError, Key, PacketError, Replicator, ReplicatorConfig, ReplicatorStats,
    RequestId, Transmit, UpdateError,
};
