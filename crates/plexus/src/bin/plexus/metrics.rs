//! The process's metrics: the libraries record through the `metrics`
//! facade; this installs the Prometheus recorder once per process and gives
//! the management endpoint what renders `/metrics`.

use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use plexus::management::MetricsRender;

/// The recorder's handle; `None` if another recorder was installed first
/// (the metrics then go there, and `/metrics` says so).
fn handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::warn!(target: "plexus::management", "no Prometheus recorder: {e}");
                None
            }
        })
        .clone()
}

/// What `/metrics` answers: the Prometheus text of what the management
/// endpoint's parts published just before (`Management` calls their
/// `record_metrics`).
pub fn render() -> MetricsRender {
    let handle = handle();
    Arc::new(move || match &handle {
        Some(h) => {
            // Histograms are folded in on demand, not by a thread of their own.
            h.run_upkeep();
            h.render()
        }
        None => "# another metrics recorder is installed in this process\n".to_owned(),
    })
}
