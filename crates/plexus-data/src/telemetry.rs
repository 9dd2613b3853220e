//! Metrics of a replicator, published on demand through the `metrics`
//! facade: keys held, members counted, packets and bytes by kind of
//! traffic, deltas merged, anti-entropy rounds, prunings, refusals
//! ([`ReplicatorStats`]). Nothing is recorded per packet.
//! [`Replication::record_metrics`] asks the replicator for its counters
//! and publishes them; [`record_replicator_stats`] publishes counters
//! already in hand (e.g. from a simulation). Names, types and labels are
//! listed in `docs/METRICS.md`.

use metrics::{describe_counter, describe_gauge, Unit};

use crate::node::Replication;
use crate::replicator::ReplicatorStats;

/// `plexus_data_keys`: keys held.
pub const KEYS: &str = "plexus_data_keys";
/// `plexus_data_members`: members counted (this one included).
pub const MEMBERS: &str = "plexus_data_members";
/// `plexus_data_sent_packets_total`.
pub const SENT_PACKETS: &str = "plexus_data_sent_packets_total";
/// `plexus_data_received_packets_total`.
pub const RECEIVED_PACKETS: &str = "plexus_data_received_packets_total";
/// `plexus_data_sent_bytes_total{traffic}`: `delta`, `anti_entropy`,
/// `request`.
pub const SENT_BYTES: &str = "plexus_data_sent_bytes_total";
/// `plexus_data_received_bytes_total`.
pub const RECEIVED_BYTES: &str = "plexus_data_received_bytes_total";
/// `plexus_data_merged_deltas_total`: key states merged that changed
/// something.
pub const MERGED: &str = "plexus_data_merged_deltas_total";
/// `plexus_data_anti_entropy_rounds_total`.
pub const ANTI_ENTROPY_ROUNDS: &str = "plexus_data_anti_entropy_rounds_total";
/// `plexus_data_prunings_total`.
pub const PRUNINGS: &str = "plexus_data_prunings_total";
/// `plexus_data_refused_total{what}`: `packet` or `entry`.
pub const REFUSED: &str = "plexus_data_refused_total";

/// Registers the HELP text of this crate's metrics with the current
/// recorder; [`record_replicator_stats`] calls it.
pub fn describe_metrics() {
    describe_gauge!(KEYS, Unit::Count, "Keys the replicator holds.");
    describe_gauge!(
        MEMBERS,
        Unit::Count,
        "Members the replicator counts (itself included)."
    );
    describe_counter!(SENT_PACKETS, Unit::Count, "Replicator packets sent.");
    describe_counter!(
        RECEIVED_PACKETS,
        Unit::Count,
        "Replicator packets received."
    );
    describe_counter!(
        SENT_BYTES,
        Unit::Bytes,
        "Bytes of replicator packets sent, by traffic: deltas (and acks), anti-entropy, requests."
    );
    describe_counter!(
        RECEIVED_BYTES,
        Unit::Bytes,
        "Bytes of replicator packets received."
    );
    describe_counter!(
        MERGED,
        Unit::Count,
        "Key states (deltas, anti-entropy) merged that changed something."
    );
    describe_counter!(
        ANTI_ENTROPY_ROUNDS,
        Unit::Count,
        "Anti-entropy rounds started."
    );
    describe_counter!(PRUNINGS, Unit::Count, "Prunings this member performed.");
    describe_counter!(
        REFUSED,
        Unit::Count,
        "Input refused: whole packets, or key states."
    );
}

/// Publishes `s` through the `metrics` facade.
pub fn record_replicator_stats(s: &ReplicatorStats) {
    describe_metrics();
    metrics::gauge!(KEYS).set(s.keys as f64);
    metrics::gauge!(MEMBERS).set(s.members as f64);
    metrics::counter!(SENT_PACKETS).absolute(s.packets_sent);
    metrics::counter!(RECEIVED_PACKETS).absolute(s.packets_received);
    metrics::counter!(SENT_BYTES, "traffic" => "delta").absolute(s.delta_bytes_sent);
    metrics::counter!(SENT_BYTES, "traffic" => "anti_entropy").absolute(s.anti_entropy_bytes_sent);
    metrics::counter!(SENT_BYTES, "traffic" => "request").absolute(s.request_bytes_sent);
    metrics::counter!(RECEIVED_BYTES).absolute(s.bytes_received);
    metrics::counter!(MERGED).absolute(s.entries_merged);
    metrics::counter!(ANTI_ENTROPY_ROUNDS).absolute(s.anti_entropy_rounds);
    metrics::counter!(PRUNINGS).absolute(s.prunings_performed);
    metrics::counter!(REFUSED, "what" => "packet").absolute(s.packets_refused);
    metrics::counter!(REFUSED, "what" => "entry").absolute(s.entries_refused);
}

impl Replication {
    /// Asks the replicator for its counters and publishes them through
    /// the `metrics` facade (see [`record_replicator_stats`]). Async
    /// because the replicator's state lives in its driver; the values are
    /// recorded after the answer, in the caller's context (its recorder).
    pub async fn record_metrics(&self) {
        let stats = self.stats().await;
        record_replicator_stats(&stats);
    }
}
