//! OpenTelemetry for Plexus (feature `otel`): the trace context of a
//! message sent to another node is the OpenTelemetry context of the
//! sender's current `tracing` span, and the receiving actor's `handle`
//! span is that context's child, so a chain of asks across nodes is one
//! trace in any OpenTelemetry backend.
//!
//! An application sets up `tracing-opentelemetry` as usual (its layer on
//! the subscriber, a tracer from an SDK provider with the exporter of its
//! choice) and calls [`install`] once:
//!
//! ```no_run
//! use opentelemetry::trace::TracerProvider as _;
//! use tracing_subscriber::layer::SubscriberExt as _;
//!
//! let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
//!     // .with_batch_exporter(an OTLP exporter, ...)
//!     .build();
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("my-app")));
//! tracing::subscriber::set_global_default(subscriber).unwrap();
//! plexus::otel::install().unwrap();
//! ```
//!
//! What crosses the wire is `traceparent` only (trace id, span id, flags;
//! `docs/PROTOCOL.md`, `TRACE`): baggage and `tracestate` stay on the
//! sending node.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use plexus_core::trace::{Propagator, PropagatorAlreadySet, TraceContext};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The [`Propagator`] over `tracing-opentelemetry`: the current context is
/// the current `tracing` span's OpenTelemetry context.
#[derive(Debug, Default, Clone, Copy)]
pub struct OtelPropagator;

impl Propagator for OtelPropagator {
    fn current(&self) -> Option<TraceContext> {
        let cx = tracing::Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        if !sc.is_valid() {
            return None;
        }
        TraceContext::new(
            sc.trace_id().to_bytes(),
            sc.span_id().to_bytes(),
            sc.trace_flags().to_u8(),
        )
    }

    fn set_parent(&self, span: &tracing::Span, parent: TraceContext) {
        let remote = SpanContext::new(
            TraceId::from_bytes(parent.trace_id()),
            SpanId::from_bytes(parent.span_id()),
            TraceFlags::new(parent.flags()),
            true,
            TraceState::default(),
        );
        let cx = opentelemetry::Context::new().with_remote_span_context(remote);
        // Fails only if the span is disabled (filtered out) or the
        // subscriber has no OpenTelemetry layer: then there is nothing to
        // attach the context to.
        let _ = span.set_parent(cx);
    }
}

/// Installs [`OtelPropagator`] as the process's propagator.
///
/// # Errors
///
/// [`PropagatorAlreadySet`] if a propagator was installed before.
pub fn install() -> Result<(), PropagatorAlreadySet> {
    plexus_core::trace::set_propagator(OtelPropagator)
}
