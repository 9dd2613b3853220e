//! `--metrics` (issue 31): W1 and W2 with a real recorder installed and
//! logging at info (as the `plexus` command runs), to measure what leaving
//! metrics and logs on costs. The recorder is
//! metrics-exporter-prometheus's (what the `plexus` command exports), set
//! globally in every process of the run: the flag reaches the node
//! processes the run starts through [`ENV`]. Each node publishes its
//! system's and node's metrics and renders the Prometheus text once a
//! second, as a scrape every second would.
//!
//! `--metrics-alternate` measures the same cost inside one run: every
//! process of it switches metrics and logs on and off together, by the
//! wall clock, in windows of a second (odd windows on), and the workload counts
//! what it did in each kind of window (see [`Phases`]). Between runs of
//! one build W1 moves ±10-20 %; within a run, between neighbouring
//! windows, far less, so a cost of a few percent shows. Off, the recorder
//! stays installed but hands every record to nothing (one atomic load
//! more than no recorder), the log filter is at warn and nothing scrapes.
//!
//! The scrape comes from a thread of its own, not a tokio timer: in the
//! `plexus` command a scrape is a request arriving on the management port
//! (an I/O event), and nothing there keeps a timer. A tokio timer pending
//! in every process would make each runtime park with a timeout (an
//! hrtimer set and cancelled in the kernel per park, seen in W1's
//! profile), a cost of the benchmark, not of metrics.
mod alternate;
mod switched;

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use plexus::prelude::*;
use plexus::SystemRef;

pub use alternate::{phase_at, set_log_switch, Phases};
use switched::Switched;

/// The environment variable that hands `--metrics` to child processes.
const ENV: &str = "PLEXUS_BENCH_METRICS";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The value of [`ENV`] for `--metrics-alternate`.
const ALTERNATE: &str = "alternate";

/// Turns metrics on for this process and the children it starts from now
/// on (`alternate`: on and off by turns, see the module docs). Call before
/// any thread or child starts.
pub fn enable(alternate: bool) {
    // Edition 2021: safe; set before the runtime's threads start.
    std::env::set_var(ENV, if alternate { ALTERNATE } else { "1" });
    install();
}

/// Whether the parent process asked for metrics.
pub fn asked() -> bool {
    std::env::var_os(ENV).is_some()
}

/// Whether the parent process asked for metrics on and off by turns.
pub fn alternating() -> bool {
    std::env::var(ENV).is_ok_and(|v| v == ALTERNATE)
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
    let installed = if alternating() {
        metrics::set_global_recorder(Switched(recorder)).is_ok()
    } else {
        metrics::set_global_recorder(recorder).is_ok()
    };
    if installed {
        let _ = HANDLE.set(handle);
        if alternating() {
            alternate::start();
        }
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
            stopped.recv_timeout(if alternating() {
                alternate::until_next_scrape()
            } else {
                Duration::from_secs(1)
            })
        {
            system.record_metrics();
            node.record_metrics();
            handle.run_upkeep();
            std::hint::black_box(handle.render());
        }
    });
    Publisher(Some(stop))
}
