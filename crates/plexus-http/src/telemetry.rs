//! Metrics of the web server, through the `metrics` facade.
//!
//! Counts the server keeps anyway ([`HttpTotals`], and [`HttpsTotals`] and
//! [`WsTotals`] where used) are published on demand by their
//! `record_metrics`, which an exporter calls right before it renders.
//! Request latency has no counter to read: each server looks its
//! histogram handle up once (when it starts listening, per core in
//! per-core mode) and every finished request records into it, from the
//! times its connection's stack already has (no extra clock read).
//! Names, types and labels are listed in `docs/METRICS.md`.

use metrics::{describe_counter, describe_histogram, Unit};

use crate::layer::HttpTotals;
#[cfg(feature = "tls")]
use crate::server::HttpsTotals;
use crate::websocket::layer::WsTotals;

/// `plexus_http_requests_total`: requests received whole.
pub const REQUESTS: &str = "plexus_http_requests_total";
/// `plexus_http_responses_total{status}`: responses by status class
/// (`1xx` ... `5xx`), refusals' answers included.
pub const RESPONSES: &str = "plexus_http_responses_total";
/// `plexus_http_refused_total`.
pub const REFUSED: &str = "plexus_http_refused_total";
/// `plexus_http_request_timeouts_total`.
pub const TIMEOUTS: &str = "plexus_http_request_timeouts_total";
/// `plexus_http_request_seconds`: from a request received whole to its
/// response written.
pub const REQUEST_SECONDS: &str = "plexus_http_request_seconds";
/// `plexus_https_handshakes_total{outcome}`.
pub const HANDSHAKES: &str = "plexus_https_handshakes_total";
/// `plexus_ws_messages_total`.
pub const WS_MESSAGES: &str = "plexus_ws_messages_total";
/// `plexus_ws_closes_total{reason}`.
pub const WS_CLOSES: &str = "plexus_ws_closes_total";

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Registers the HELP text of this crate's metrics with the current
/// recorder; each `record_metrics` calls it.
pub fn describe_metrics() {
    describe_counter!(REQUESTS, Unit::Count, "HTTP requests received whole.");
    describe_counter!(
        RESPONSES,
        Unit::Count,
        "HTTP responses written, by status class (refusals' answers included)."
    );
    describe_counter!(
        REFUSED,
        Unit::Count,
        "HTTP requests refused by the decoder (malformed, too large, smuggling)."
    );
    describe_counter!(
        TIMEOUTS,
        Unit::Count,
        "HTTP requests not received whole within request_timeout."
    );
    describe_histogram!(
        REQUEST_SECONDS,
        Unit::Seconds,
        "Time from an HTTP request received whole to its response written."
    );
    describe_counter!(HANDSHAKES, Unit::Count, "HTTPS handshakes, by outcome.");
    describe_counter!(WS_MESSAGES, Unit::Count, "WebSocket messages received.");
    describe_counter!(
        WS_CLOSES,
        Unit::Count,
        "WebSocket connections closed, by reason."
    );
}

impl HttpTotals {
    /// Publishes the server's request counts through the `metrics`
    /// facade: requests, responses by status class, refusals, timeouts.
    /// Call it right before rendering metrics.
    pub fn record_metrics(&self) {
        describe_metrics();
        let s = self.snapshot();
        metrics::counter!(REQUESTS).absolute(s.requests);
        metrics::counter!(REFUSED).absolute(s.refused);
        metrics::counter!(TIMEOUTS).absolute(s.timeouts);
        for (class, label) in (1u16..).zip(CLASSES) {
            metrics::counter!(RESPONSES, "status" => label)
                .absolute(self.responses_in_class(class));
        }
    }
}

#[cfg(feature = "tls")]
impl HttpsTotals {
    /// Publishes the HTTPS port's handshake outcomes (`ok`, `failed`,
    /// `timed_out`, `plain_http`) through the `metrics` facade.
    pub fn record_metrics(&self) {
        describe_metrics();
        let s = self.snapshot();
        for (outcome, n) in [
            ("ok", s.handshakes),
            ("failed", s.failed),
            ("timed_out", s.timed_out),
            ("plain_http", s.plain_http),
        ] {
            metrics::counter!(HANDSHAKES, "outcome" => outcome).absolute(n);
        }
    }
}

impl WsTotals {
    /// Publishes the WebSocket counts through the `metrics` facade:
    /// messages received, closes by reason (`peer`, `protocol_error`,
    /// `invalid_payload`, `policy`, `too_big`).
    pub fn record_metrics(&self) {
        describe_metrics();
        let s = self.snapshot();
        metrics::counter!(WS_MESSAGES).absolute(s.messages);
        for (reason, n) in [
            ("peer", s.closed_by_peer),
            ("protocol_error", s.protocol_errors),
            ("invalid_payload", s.invalid_payloads),
            ("policy", s.policy),
            ("too_big", s.too_big),
        ] {
            metrics::counter!(WS_CLOSES, "reason" => reason).absolute(n);
        }
    }
}
