//! Metrics of a member's sharding, published on demand through the
//! `metrics` facade: active entities and shards per entity type, held
//! messages, activations, passivations, hand-offs, refusals, losses and
//! lapsed leases
//! ([`ShardingStats`]). Nothing is recorded per message.
//! [`Sharding::record_metrics`] asks the driver for its counters and
//! publishes them; [`record_sharding_stats`] publishes counters already
//! in hand. Names, types and labels are listed in `docs/METRICS.md`.

use metrics::{describe_counter, describe_gauge, Unit};

use crate::node::{Sharding, ShardingStats};

/// `plexus_sharding_entities{type}`: entities active here.
pub const ENTITIES: &str = "plexus_sharding_entities";
/// `plexus_sharding_shards{type}`: shards homed here.
pub const SHARDS: &str = "plexus_sharding_shards";
/// `plexus_sharding_held_messages`: messages waiting for a shard's home,
/// a hand-off or the first lease.
pub const HELD: &str = "plexus_sharding_held_messages";
/// `plexus_sharding_coordinator`: 1 while this member runs the
/// coordinators.
pub const COORDINATOR: &str = "plexus_sharding_coordinator";
/// `plexus_sharding_activations_total`.
pub const ACTIVATIONS: &str = "plexus_sharding_activations_total";
/// `plexus_sharding_passivations_total`.
pub const PASSIVATIONS: &str = "plexus_sharding_passivations_total";
/// `plexus_sharding_handoffs_total`: shards handed over from here.
pub const HANDOFFS: &str = "plexus_sharding_handoffs_total";
/// `plexus_sharding_refused_total{what}`: `message` (refused here),
/// `dropped` (refused with nobody waiting), `lost` (a waiting sender's
/// member went away), `packet` (malformed control packets).
pub const REFUSED: &str = "plexus_sharding_refused_total";
/// `plexus_sharding_lease_lapses_total`: leases that ran out before a
/// renewal was answered (their entities were stopped).
pub const LEASE_LAPSES: &str = "plexus_sharding_lease_lapses_total";
/// `plexus_sharding_unremembered_total`: writes of remembered entities
/// that did not reach a majority.
pub const UNREMEMBERED: &str = "plexus_sharding_unremembered_total";

/// Registers the HELP text of this crate's metrics with the current
/// recorder; [`record_sharding_stats`] calls it.
pub fn describe_metrics() {
    describe_gauge!(
        ENTITIES,
        Unit::Count,
        "Entities active on this member, by type."
    );
    describe_gauge!(SHARDS, Unit::Count, "Shards homed on this member, by type.");
    describe_gauge!(
        HELD,
        Unit::Count,
        "Messages held for a shard's home, a hand-off or the first lease."
    );
    describe_gauge!(
        COORDINATOR,
        Unit::Count,
        "1 while this member runs the shard coordinators."
    );
    describe_counter!(ACTIVATIONS, Unit::Count, "Entities activated here.");
    describe_counter!(PASSIVATIONS, Unit::Count, "Entities passivated here.");
    describe_counter!(HANDOFFS, Unit::Count, "Shards handed over from here.");
    describe_counter!(
        REFUSED,
        Unit::Count,
        "Messages refused here, dropped with nobody waiting, lost with their member; malformed packets."
    );
    describe_counter!(
        LEASE_LAPSES,
        Unit::Count,
        "Leases that ran out before a renewal was answered (their entities were stopped)."
    );
    describe_counter!(
        UNREMEMBERED,
        Unit::Count,
        "Writes of remembered entities that did not reach a majority (kept here, spread by gossip)."
    );
}

/// Publishes `s` through the `metrics` facade.
pub fn record_sharding_stats(s: &ShardingStats) {
    describe_metrics();
    let r = &s.regions;
    for (entity_type, n) in &r.active {
        metrics::gauge!(ENTITIES, "type" => entity_type.to_string()).set(*n as f64);
    }
    for (entity_type, n) in &r.shards {
        metrics::gauge!(SHARDS, "type" => entity_type.to_string()).set(*n as f64);
    }
    metrics::gauge!(HELD).set(r.held as f64);
    metrics::gauge!(COORDINATOR).set(if r.coordinator { 1.0 } else { 0.0 });
    metrics::counter!(ACTIVATIONS).absolute(r.activations);
    metrics::counter!(PASSIVATIONS).absolute(r.passivations);
    metrics::counter!(HANDOFFS).absolute(r.handoffs);
    metrics::counter!(REFUSED, "what" => "message").absolute(r.refusals);
    metrics::counter!(REFUSED, "what" => "dropped").absolute(s.dropped);
    metrics::counter!(REFUSED, "what" => "lost").absolute(s.lost);
    metrics::counter!(REFUSED, "what" => "packet").absolute(r.bad_packets);
    metrics::counter!(LEASE_LAPSES).absolute(r.lease_lapses);
    metrics::counter!(UNREMEMBERED).absolute(s.unremembered);
}

impl Sharding {
    /// Asks the driver for its counters and publishes them through the
    /// `metrics` facade (see [`record_sharding_stats`]).
    pub async fn record_metrics(&self) {
        let stats = self.stats().await;
        record_sharding_stats(&stats);
    }
}
