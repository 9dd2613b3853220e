//! Metrics of a cluster member, published on demand through the `metrics`
//! facade by [`Cluster::record_metrics`]: members by state and the
//! member's counters ([`MembershipStats`]). Nothing is recorded as
//! packets come and go; a scrape reads the snapshot the driver keeps
//! anyway. Names, types and labels are listed in `docs/METRICS.md`.

use metrics::{describe_counter, describe_gauge, Unit};

use crate::member::MemberState;
use crate::membership::MembershipStats;
use crate::node::Cluster;

/// `plexus_cluster_members{state}`: members known, by state (`removed`
/// counts the tombstones kept).
pub const MEMBERS: &str = "plexus_cluster_members";
/// `plexus_cluster_suspicions_total`.
pub const SUSPICIONS: &str = "plexus_cluster_suspicions_total";
/// `plexus_cluster_refutations_total`.
pub const REFUTATIONS: &str = "plexus_cluster_refutations_total";
/// `plexus_cluster_downings_total`.
pub const DOWNINGS: &str = "plexus_cluster_downings_total";
/// `plexus_cluster_told_gone_total`: packets from a member downed or
/// removed here, answered by telling it so.
pub const TOLD_GONE: &str = "plexus_cluster_told_gone_total";
/// `plexus_cluster_gossip_sent_packets_total`.
pub const GOSSIP_PACKETS: &str = "plexus_cluster_gossip_sent_packets_total";
/// `plexus_cluster_gossip_sent_bytes_total`.
pub const GOSSIP_BYTES: &str = "plexus_cluster_gossip_sent_bytes_total";
/// `plexus_cluster_refused_total{what}`: `packet` or `claim`.
pub const REFUSED: &str = "plexus_cluster_refused_total";
/// `plexus_cluster_stalls_total`.
pub const STALLS: &str = "plexus_cluster_stalls_total";
/// `plexus_cluster_join_attempts_failed_total`.
pub const JOINS_FAILED: &str = "plexus_cluster_join_attempts_failed_total";
/// `plexus_cluster_unreachable_reports_total`.
pub const UNREACHABLE: &str = "plexus_cluster_unreachable_reports_total";

const STATES: [MemberState; 6] = [
    MemberState::Joining,
    MemberState::Up,
    MemberState::Suspect,
    MemberState::Leaving,
    MemberState::Down,
    MemberState::Removed,
];

/// Registers the HELP text of this crate's metrics with the current
/// recorder; [`Cluster::record_metrics`] calls it.
pub fn describe_metrics() {
    describe_gauge!(
        MEMBERS,
        Unit::Count,
        "Members this member knows, by state (removed: tombstones)."
    );
    describe_counter!(
        SUSPICIONS,
        Unit::Count,
        "Suspicions this member raised from its own failed probes."
    );
    describe_counter!(
        REFUTATIONS,
        Unit::Count,
        "Suspicions of itself this member refuted."
    );
    describe_counter!(DOWNINGS, Unit::Count, "Members this member saw downed.");
    describe_counter!(
        TOLD_GONE,
        Unit::Count,
        "Packets from a member downed or removed here, answered by telling it so."
    );
    describe_counter!(
        GOSSIP_PACKETS,
        Unit::Count,
        "Membership packets (probes, acks, gossip) sent."
    );
    describe_counter!(
        GOSSIP_BYTES,
        Unit::Bytes,
        "Bytes of membership packets sent."
    );
    describe_counter!(REFUSED, Unit::Count, "Input refused: packets (bad bytes, another cluster) and claims (forged, over the member bound).");
    describe_counter!(
        STALLS,
        Unit::Count,
        "Times this member found itself late to its own deadlines."
    );
    describe_counter!(JOINS_FAILED, Unit::Count, "Join attempts that failed.");
    describe_counter!(
        UNREACHABLE,
        Unit::Count,
        "Failures to reach a member the driver reported."
    );
}

impl Cluster {
    /// Publishes the member's view and counters through the `metrics`
    /// facade: members by state, suspicions, refutations, downings, gossip
    /// packets and bytes, refused input, stalls, failed joins. As of the
    /// driver's last step; call it right before rendering metrics.
    pub fn record_metrics(&self) {
        describe_metrics();
        let mut by_state = [0usize; STATES.len()];
        for m in self.members().iter() {
            if let Some(i) = STATES.iter().position(|s| *s == m.state) {
                by_state[i] += 1;
            }
        }
        for (state, n) in STATES.iter().zip(by_state) {
            metrics::gauge!(MEMBERS, "state" => state.name()).set(n as f64);
        }
        let s: MembershipStats = self.stats();
        metrics::counter!(SUSPICIONS).absolute(s.suspicions_raised);
        metrics::counter!(REFUTATIONS).absolute(s.refutations);
        metrics::counter!(DOWNINGS).absolute(s.downings);
        metrics::counter!(TOLD_GONE).absolute(s.told_gone);
        metrics::counter!(GOSSIP_PACKETS).absolute(s.packets_sent);
        metrics::counter!(GOSSIP_BYTES).absolute(s.bytes_sent);
        metrics::counter!(REFUSED, "what" => "packet").absolute(s.packets_refused);
        metrics::counter!(REFUSED, "what" => "claim").absolute(s.claims_refused);
        metrics::counter!(STALLS).absolute(s.stalls_noticed);
        metrics::counter!(JOINS_FAILED).absolute(s.join_attempts_failed);
        metrics::counter!(UNREACHABLE).absolute(s.unreachable_reports);
    }
}
