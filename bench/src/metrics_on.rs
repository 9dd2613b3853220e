//! `--metrics` (issue 31): W1 and W2 with a real recorder installed and
//! logging at info (as the `plexus` command runs), to measure what leaving
//! metrics and logs on costs. The recorder is
//! metrics-exporter-prometheus's (what the `plexus` command exports), set
//! globally in every process of the run: the flag reaches the node
//! processes the run starts through [`ENV`]. Each node publishes its
//! system's and node's metrics and renders the Prometheus text once a
//! second, as a scrape every second would.
//!
//! The scrape comes from a thread of its own, not a tokio timer: in the
//! `plexus` command a scrape is a request arriving on the management port
//! (an I/O event), and nothing there keeps a timer. A tokio timer pending
//! in every process would make each runtime park with a timeout (an
//! hrtimer set and cancelled in the kernel per park, seen in W1's
//! profile), a cost of the benchmark, not of metrics.
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use plexus::prelude::*;
use plexus::SystemRef;

/// The environment variable that hands `--metrics` to child processes.
const ENV: &str = "PLEXUS_BENCH_METRICS";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Turns metrics on for this process and the children it starts from now
/// on. Call before any thread or child starts.
pub fn enable() {
    // Edition 2021: safe; set before the runtime's threads start.
    std::env::set_var(ENV, "1");
    install();
}

/// Whether the parent process asked for metrics.
pub fn asked() -> bool {
    std::env::var_os(ENV).is_some()
}

/// Installs the recorder if the parent process asked for metrics.
pub fn install_if_asked() {
    if asked() {
        install();
    }
}

fn install() {
    if HANDLE.get().is_some() {
        return;
    }
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_ok() {
        let _ = HANDLE.set(handle);
    }
}

/// Stops the scraping thread when dropped.
pub struct Publisher(Option<std::sync::mpsc::Sender<()>>);

impl Drop for Publisher {
    fn drop(&mut self) {
        // The thread sees the channel closed at its next wait.
        self.0.take();
    }
}

/// With metrics on, publishes `system`'s and `node`'s metrics and renders
/// them once a second until the returned guard is dropped; otherwise does
/// nothing.
pub fn publish(system: &SystemRef, node: &Node) -> Publisher {
    let Some(handle) = HANDLE.get() else {
        return Publisher(None);
    };
    // `PLEXUS_BENCH_METRICS=recorder`: the recorder alone, nothing
    // published (to tell the cost of recording from that of scraping).
    if std::env::var(ENV).is_ok_and(|v| v == "recorder") {
        return Publisher(None);
    }
    let (system, node) = (system.clone(), node.clone());
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            stopped.recv_timeout(Duration::from_secs(1))
        {
            system.record_metrics();
            node.record_metrics();
            handle.run_upkeep();
            std::hint::black_box(handle.render());
        }
    });
    Publisher(Some(stop))
}
