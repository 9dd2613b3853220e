//! Metrics of a device server, published on demand through the `metrics`
//! facade by [`DeviceServer::record_metrics`]: devices tracked and the
//! tracker's counters ([`TrackerStats`]), as of the driver's last step.
//! Nothing is recorded per packet. Names, types and labels are listed in
//! `docs/METRICS.md`.

use metrics::{describe_counter, describe_gauge, Unit};

use crate::directory::DeviceDirectory;
use crate::server::DeviceServer;
use crate::tracker::TrackerStats;

/// `plexus_devices_tracked`: devices held by this server.
pub const TRACKED: &str = "plexus_devices_tracked";
/// `plexus_devices_reports_total`: reports received.
pub const REPORTS: &str = "plexus_devices_reports_total";
/// `plexus_devices_stale_reports_total`.
pub const STALE_REPORTS: &str = "plexus_devices_stale_reports_total";
/// `plexus_devices_registrations_total{where}`: `here` or `forwarded`.
pub const REGISTRATIONS: &str = "plexus_devices_registrations_total";
/// `plexus_devices_moved_total`.
pub const MOVED: &str = "plexus_devices_moved_total";
/// `plexus_devices_resends_total`.
pub const RESENDS: &str = "plexus_devices_resends_total";
/// `plexus_devices_refused_packets_total{why}`: `rate_limited` or `other`.
pub const REFUSED: &str = "plexus_devices_refused_packets_total";
/// `plexus_devices_lost_total`.
pub const LOST: &str = "plexus_devices_lost_total";
/// `plexus_devices_duplicates_stopped_total`.
pub const DUPLICATES: &str = "plexus_devices_duplicates_stopped_total";

/// Registers the HELP text of this crate's metrics with the current
/// recorder; [`DeviceServer::record_metrics`] calls it.
pub fn describe_metrics() {
    describe_gauge!(TRACKED, Unit::Count, "Devices this server tracks.");
    describe_counter!(
        REPORTS,
        Unit::Count,
        "Device reports received (of the outstanding request)."
    );
    describe_counter!(
        STALE_REPORTS,
        Unit::Count,
        "Reports of a request already answered."
    );
    describe_counter!(
        REGISTRATIONS,
        Unit::Count,
        "Device registrations: taken here, or forwarded to the owner."
    );
    describe_counter!(
        MOVED,
        Unit::Count,
        "Devices handed to another server after a ring change."
    );
    describe_counter!(
        RESENDS,
        Unit::Count,
        "Requests sent again after request_resend."
    );
    describe_counter!(
        REFUSED,
        Unit::Count,
        "Device packets refused: over the rate limit, or otherwise."
    );
    describe_counter!(
        LOST,
        Unit::Count,
        "Devices declared lost by the failure detector."
    );
    describe_counter!(
        DUPLICATES,
        Unit::Count,
        "Older drivers of a device told to stop."
    );
}

impl<D: DeviceDirectory + Clone> DeviceServer<D> {
    /// Publishes the tracker's view and counters through the `metrics`
    /// facade: devices tracked, reports, registrations, moves, resends,
    /// refusals, losses. Call it right before rendering metrics.
    pub fn record_metrics(&self) {
        describe_metrics();
        let s: TrackerStats = self.stats();
        metrics::gauge!(TRACKED).set(s.devices as f64);
        metrics::counter!(REPORTS).absolute(s.reports);
        metrics::counter!(STALE_REPORTS).absolute(s.stale_reports);
        metrics::counter!(REGISTRATIONS, "where" => "here").absolute(s.registrations);
        metrics::counter!(REGISTRATIONS, "where" => "forwarded").absolute(s.forwarded);
        metrics::counter!(MOVED).absolute(s.moved);
        metrics::counter!(RESENDS).absolute(s.resends);
        metrics::counter!(REFUSED, "why" => "rate_limited").absolute(s.rate_limited);
        metrics::counter!(REFUSED, "why" => "other")
            .absolute(s.refused.saturating_sub(s.rate_limited));
        metrics::counter!(LOST).absolute(s.lost);
        metrics::counter!(DUPLICATES).absolute(s.duplicates_stopped);
    }
}
