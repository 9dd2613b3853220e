//! Virtual actors for a Plexus cluster: entities addressed by type and id,
//! wherever they live (issue 33).
//!
//! An entity id hashes to one of its type's shards ([`ShardId`]); a shard
//! is the unit of placement and hand-off, and one coordinator decides which
//! member hosts it ([`Allocation`]). `ALGORITHM.md` beside this crate holds
//! the design and its reasons: why a coordinator and not the ring alone,
//! the leases that keep an entity active on at most one member through
//! partitions and crashes, and the hand-off that moves a shard without
//! losing a message or handling one twice.
//!
//! What is here so far is sans-IO and deterministic: the shard of an id,
//! the coordinator's placement and rebalancing, the shard leases, the
//! coordinator's protocol (answers, renewals, hand-offs, re-homing after a
//! crash), and the region: its routing with its half of a hand-off, its
//! lease, its active entities (idle and least-recently-used passivation);
//! and the protocol's wire format.

#![forbid(unsafe_code)]

pub mod allocation;
pub mod coordinator;
pub mod entities;
pub mod envelope;
pub mod lease;
#[cfg(feature = "node")]
pub mod node;
pub mod region;
pub mod regions;
pub mod routing;
pub mod shard;
pub mod sim;
#[cfg(feature = "node")]
pub mod telemetry;
#[cfg(feature = "node")]
pub mod topics;
pub mod wire;

pub use allocation::{AllocateError, Allocation, Move, Placement, Rebalance};
pub use coordinator::{Coordinator, CoordinatorConfig, CoordinatorOutput};
pub use entities::{Entities, Touch};
pub use lease::{Grants, LeaseState, RegionLease, Stamp};
pub use region::{EntityError, Region, RegionConfig, RegionOutput};
pub use regions::{ConfigError, Event, Regions, RegionsStats, ShardingConfig};
pub use routing::{MarkerWait, RouteError, Routed, Routing, RoutingOutput};
pub use shard::{shard_of, EntityId, EntityIdError, ShardId, MAX_ID_LEN};
