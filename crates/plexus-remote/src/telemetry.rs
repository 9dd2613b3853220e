//! Metrics of a node's links and lanes, published on demand through the
//! `metrics` facade by [`Node::record_metrics`].
//!
//! Every figure is a counter a link or lane keeps anyway (see
//! [`LinkStats`](plexus_transport::LinkStats)): nothing is recorded per
//! message, so a node without a recorder pays nothing, and one with a
//! recorder pays once per scrape, in proportion to its links. Labels stay
//! low-cardinality: `peer` is the other node's id (one per node of the
//! cluster, stable across reconnects), `scheme` the link's transport,
//! `link` which of a session's links (`primary`, or the lane that has a
//! link of its own), `lane` a lane's name.
//!
//! The names, types and labels are listed in `docs/METRICS.md`.

use metrics::{describe_counter, describe_gauge, Unit};
use plexus_transport::LinkStats;

use crate::Node;

/// `plexus_links_up`: working links to other nodes.
pub const LINKS_UP: &str = "plexus_links_up";
/// `plexus_link_sent_messages_total{peer,scheme,link}`.
pub const SENT_MESSAGES: &str = "plexus_link_sent_messages_total";
/// `plexus_link_received_messages_total{peer,scheme,link}`.
pub const RECEIVED_MESSAGES: &str = "plexus_link_received_messages_total";
/// `plexus_link_sent_bytes_total{peer,scheme,link}`.
pub const SENT_BYTES: &str = "plexus_link_sent_bytes_total";
/// `plexus_link_received_bytes_total{peer,scheme,link}`.
pub const RECEIVED_BYTES: &str = "plexus_link_received_bytes_total";
/// `plexus_link_dropped_frames_total{peer,scheme,link}`.
pub const DROPPED_FRAMES: &str = "plexus_link_dropped_frames_total";
/// `plexus_link_retransmits_total{peer,scheme,link}`.
pub const RETRANSMITS: &str = "plexus_link_retransmits_total";
/// `plexus_link_retransmit_timeouts_total{peer,scheme,link}`.
pub const RETRANSMIT_TIMEOUTS: &str = "plexus_link_retransmit_timeouts_total";
/// `plexus_link_rtt_seconds{peer,scheme,link}`.
pub const RTT_SECONDS: &str = "plexus_link_rtt_seconds";
/// `plexus_link_send_buffer_full_total{peer,scheme}`.
pub const SEND_BUFFER_FULL: &str = "plexus_link_send_buffer_full_total";
/// `plexus_link_stray_answers_total{peer,scheme}`.
pub const STRAY_ANSWERS: &str = "plexus_link_stray_answers_total";
/// `plexus_lane_sent_messages_total{peer,lane}`.
pub const LANE_SENT_MESSAGES: &str = "plexus_lane_sent_messages_total";
/// `plexus_lane_queued_bytes{peer,lane,scheme}`.
pub const LANE_QUEUED_BYTES: &str = "plexus_lane_queued_bytes";
/// `plexus_lane_share{peer,lane,scheme}`: the adaptive split.
pub const LANE_SHARE: &str = "plexus_lane_share";
/// `plexus_lane_goodput_bytes_per_second{peer,lane,scheme}`.
pub const LANE_GOODPUT: &str = "plexus_lane_goodput_bytes_per_second";

/// Registers the HELP text of this crate's metrics with the current
/// recorder; [`Node::record_metrics`] calls it.
pub fn describe_metrics() {
    describe_gauge!(LINKS_UP, Unit::Count, "Working links to other nodes.");
    describe_counter!(
        SENT_MESSAGES,
        Unit::Count,
        "Messages taken from the link's send queue into its stack."
    );
    describe_counter!(
        RECEIVED_MESSAGES,
        Unit::Count,
        "Messages the link's stack handed up."
    );
    describe_counter!(
        SENT_BYTES,
        Unit::Bytes,
        "Payload bytes of the messages sent on the link."
    );
    describe_counter!(
        RECEIVED_BYTES,
        Unit::Bytes,
        "Payload bytes of the messages received on the link."
    );
    describe_counter!(
        DROPPED_FRAMES,
        Unit::Count,
        "Inbound frames the link's stack dropped (garbage, duplicates, failed authentication)."
    );
    describe_counter!(
        RETRANSMITS,
        Unit::Count,
        "Messages the delivery layer sent again (fast and after a timeout)."
    );
    describe_counter!(
        RETRANSMIT_TIMEOUTS,
        Unit::Count,
        "Retransmission timer expiries of the delivery layer."
    );
    describe_gauge!(
        RTT_SECONDS,
        Unit::Seconds,
        "Smoothed round-trip time the delivery layer measured."
    );
    describe_counter!(
        SEND_BUFFER_FULL,
        Unit::Count,
        "Messages to the peer refused because the link's send buffer was full."
    );
    describe_counter!(
        STRAY_ANSWERS,
        Unit::Count,
        "Answers from the peer (receipts, resolves, downs) for nothing that waited."
    );
    describe_counter!(
        LANE_SENT_MESSAGES,
        Unit::Count,
        "Frames sent on the lane in the current session."
    );
    describe_gauge!(
        LANE_QUEUED_BYTES,
        Unit::Bytes,
        "Bytes queued on a link of the lane that its stack has not taken yet."
    );
    describe_gauge!(
        LANE_SHARE,
        Unit::Count,
        "Share of the lane's frames given to the link (the adaptive split; 1 unless adaptive)."
    );
    describe_gauge!(
        LANE_GOODPUT,
        Unit::Bytes,
        "Goodput of an adaptive lane's link as its learner estimates it."
    );
}

/// One link's counters, under `labels`.
fn record_link(labels: &[(&'static str, String); 3], s: &LinkStats) {
    metrics::counter!(SENT_MESSAGES, labels).absolute(s.messages_sent);
    metrics::counter!(RECEIVED_MESSAGES, labels).absolute(s.messages_received);
    metrics::counter!(SENT_BYTES, labels).absolute(s.bytes_sent);
    metrics::counter!(RECEIVED_BYTES, labels).absolute(s.bytes_received);
    metrics::counter!(DROPPED_FRAMES, labels).absolute(s.dropped);
    if let Some(d) = s.delivery {
        metrics::counter!(RETRANSMITS, labels).absolute(d.fast_retransmits + d.timeout_retransmits);
        metrics::counter!(RETRANSMIT_TIMEOUTS, labels).absolute(d.timeouts);
    }
    if let Some(rtt) = s.rtt {
        metrics::gauge!(RTT_SECONDS, labels).set(rtt.as_secs_f64());
    }
}

impl Node {
    /// Publishes the node's link and lane counters through the `metrics`
    /// facade (names in `docs/METRICS.md`): per peer link, messages and
    /// bytes each way, dropped frames, retransmissions and RTT (links with
    /// a `delivery` layer), refusals for a full send buffer; per lane,
    /// frames sent, queued bytes and, on an adaptive lane, each link's
    /// share and goodput. Call it right before rendering metrics; it does
    /// not publish the actor system's (see
    /// [`SystemRef::record_metrics`](plexus_core::SystemRef::record_metrics)).
    ///
    /// The retransmission counters and the RTT are as of the link's first
    /// received batch after the previous call (see
    /// [`LinkStats`](plexus_transport::LinkStats)); the others are current.
    pub fn record_metrics(&self) {
        describe_metrics();
        metrics::gauge!(LINKS_UP).set(self.link_count() as f64);
        for l in self.link_stats() {
            let labels = [
                ("peer", l.node.to_string()),
                ("scheme", l.scheme.clone()),
                ("link", "primary".to_owned()),
            ];
            record_link(&labels, &l.stats);
            let per_peer = [("peer", l.node.to_string()), ("scheme", l.scheme.clone())];
            metrics::counter!(SEND_BUFFER_FULL, &per_peer).absolute(l.send_buffer_full);
            metrics::counter!(STRAY_ANSWERS, &per_peer).absolute(l.stray_answers);
        }
        for lane in self.lane_stats() {
            let peer = lane.node.to_string();
            let name = lane.lane.name();
            metrics::counter!(LANE_SENT_MESSAGES, "peer" => peer.clone(), "lane" => name)
                .absolute(lane.frames);
            for c in &lane.carriers {
                let labels = [
                    ("peer", peer.clone()),
                    ("lane", name.to_owned()),
                    ("scheme", c.scheme.clone()),
                ];
                metrics::gauge!(LANE_QUEUED_BYTES, &labels).set(c.queued_bytes as f64);
                metrics::gauge!(LANE_SHARE, &labels).set(c.share);
                if let Some(g) = c.goodput_bytes_per_s {
                    metrics::gauge!(LANE_GOODPUT, &labels).set(g);
                }
                // A lane's own link (the primary's counters are published
                // above, under `link="primary"`).
                if c.guarantees.is_some() {
                    let labels = [
                        ("peer", peer.clone()),
                        ("scheme", c.scheme.clone()),
                        ("link", name.to_owned()),
                    ];
                    record_link(&labels, &c.stats);
                }
            }
        }
    }
}
