//! OpenTelemetry for Plexus (feature `otel`): the trace context of a
//! message sent to another node is the OpenTelemetry context of the
//! sender's current `tracing` span, and the receiving actor's `handle`
//! span is that context's child, so a chain of asks across nodes is one
//! trace in any OpenTelemetry backend.
//!
//! An application builds a tracer from an OpenTelemetry SDK provider with
//! the exporter of its choice (OTLP to a collector, ...), puts [`layer`]
//! on its `tracing` subscriber, and calls [`install`] once:
//!
//! ```no_run
//! use opentelemetry::trace::TracerProvider as _;
//! use tracing_subscriber::layer::SubscriberExt as _;
//!
//! let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
//!     // .with_batch_exporter(an OTLP exporter)
//!     .build();
//! let subscriber = tracing_subscriber::registry()
//!     .with(plexus::otel::layer(provider.tracer("my-app")));
//! tracing::subscriber::set_global_default(subscriber).unwrap();
//! plexus::otel::install().unwrap();
//! ```
//!
//! [`layer`] is `tracing-opentelemetry`'s layer without Plexus's own spans
//! but `handle`: those (a node's links, the cluster member, the
//! replicator) give log lines their context and live as long as the
//! process, so a message sent inside one would start an endless trace.
//! With the plain layer, every membership gossip would be traced.
//!
//! What crosses the wire is `traceparent` only (trace id, span id, flags;
//! `docs/PROTOCOL.md`, `TRACE`): baggage and `tracestate` stay on the
//! sending node.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use plexus_core::trace::{Propagator, PropagatorAlreadySet, TraceContext};
use tracing::{Metadata, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

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

/// `tracing-opentelemetry`'s layer exporting through `tracer`, for every
/// span but Plexus's own long-lived ones (targets `plexus*` other than
/// `plexus::actor`, the `handle` spans of traced messages). Events (log
/// lines) go to the enclosing exported span.
pub fn layer<S, T>(tracer: T) -> impl Layer<S>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
    T: opentelemetry::trace::Tracer + 'static,
    T::Span: Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter_fn(exported))
}

/// Whether [`layer`] exports what `meta` describes.
fn exported(meta: &Metadata<'_>) -> bool {
    !meta.is_span() || !meta.target().starts_with("plexus") || meta.target() == "plexus::actor"
}

/// Installs [`OtelPropagator`] as the process's propagator.
///
/// # Errors
///
/// [`PropagatorAlreadySet`] if a propagator was installed before.
pub fn install() -> Result<(), PropagatorAlreadySet> {
    plexus_core::trace::set_propagator(OtelPropagator)
}
