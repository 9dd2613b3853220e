//! The Prometheus recorder behind the alternation's switch.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::alternate::ON;

/// The Prometheus recorder behind a switch: every handle it gives out
/// records only while [`ON`] (handles are cached by their users, so the
/// switch is in the handle, not in the registration).
pub(super) struct Switched(pub(super) PrometheusRecorder);

struct SwitchedCounter(Counter);
struct SwitchedGauge(Gauge);
struct SwitchedHistogram(Histogram);

fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

impl CounterFn for SwitchedCounter {
    fn increment(&self, value: u64) {
        if on() {
            self.0.increment(value);
        }
    }
    fn absolute(&self, value: u64) {
        if on() {
            self.0.absolute(value);
        }
    }
}

impl GaugeFn for SwitchedGauge {
    fn increment(&self, value: f64) {
        if on() {
            self.0.increment(value);
        }
    }
    fn decrement(&self, value: f64) {
        if on() {
            self.0.decrement(value);
        }
    }
    fn set(&self, value: f64) {
        if on() {
            self.0.set(value);
        }
    }
}

impl HistogramFn for SwitchedHistogram {
    fn record(&self, value: f64) {
        if on() {
            self.0.record(value);
        }
    }
}

impl Recorder for Switched {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_counter(key, unit, description);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_histogram(key, unit, description);
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(SwitchedCounter(
            self.0.register_counter(key, metadata),
        )))
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(SwitchedGauge(
            self.0.register_gauge(key, metadata),
        )))
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(SwitchedHistogram(
            self.0.register_histogram(key, metadata),
        )))
    }
}
