//! Distributed tracing: the trace context a message carries to another
//! node, in the shape of W3C Trace Context's `traceparent` (a 16-byte
//! trace id, the 8-byte id of the sender's span, and the trace flags).
//!
//! The runtime knows no tracing backend. A process installs one
//! [`Propagator`] (the facade's `otel` feature has OpenTelemetry's, over
//! `tracing-opentelemetry`), and then:
//! - a message sent to an actor on another node carries
//!   [`Propagator::current`], the context of the sender's current span,
//!   if there is one (the node puts it in the frame; `docs/PROTOCOL.md`,
//!   `TRACE`);
//! - the receiving actor handles that message inside a `handle` span
//!   (target `plexus::actor`, level info, with the actor's and the
//!   message's type names) made a child of the received context with
//!   [`Propagator::set_parent`]: what the handler logs, and what it sends
//!   on to other nodes, belongs to the sender's trace. An ask from A to B
//!   to C is one trace.
//!
//! Without a propagator, nothing is captured or sent: a message costs one
//! load of [`propagator`]'s cell. Messages between actors of one node
//! carry no context (they run where the sender's spans are visible, so a
//! local handler that wants the sender's span takes it in its message).
//!
//! The context is sampled or not by the sender's tracer ([`TraceContext::
//! flags`]); `tracestate` is not carried.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// A span's identity on the wire: W3C Trace Context's `traceparent`
/// (version 00) without its version. Both ids are non-zero (the standard's
/// rule for a valid context): [`TraceContext::new`] refuses others.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

/// The `sampled` bit of [`TraceContext::flags`].
pub const SAMPLED: u8 = 0x01;

impl TraceContext {
    /// A context, or `None` if either id is all zero (invalid in W3C Trace
    /// Context).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> Option<Self> {
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The trace's id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The id of the span the message was sent from: the parent of the
    /// receiving handler's span.
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// The trace flags ([`SAMPLED`] is the only one defined).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Whether the sender's tracer records this trace.
    pub fn is_sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceContext({self})")
    }
}

/// The `traceparent` header value: `00-<trace id>-<span id>-<flags>` in
/// lowercase hex.
impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        for b in self.trace_id {
            write!(f, "{b:02x}")?;
        }
        f.write_str("-")?;
        for b in self.span_id {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{:02x}", self.flags)
    }
}

/// Why a `traceparent` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceparentError {
    /// Not four dash-separated fields of 2, 32, 16 and 2 hex digits.
    #[error("a traceparent is 00-<32 hex digits>-<16 hex digits>-<2 hex digits>")]
    Shape,
    /// A version other than `00`.
    #[error("traceparent version {0:02x} is not supported (only 00)")]
    Version(u8),
    /// A trace id or span id of all zeros.
    #[error("a traceparent's trace id and span id must not be all zeros")]
    ZeroId,
}

impl FromStr for TraceContext {
    type Err = TraceparentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut fields = s.split('-');
        let (Some(version), Some(trace), Some(span), Some(flags), None) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return Err(TraceparentError::Shape);
        };
        let [version] = hex::<1>(version)?;
        if version != 0 {
            return Err(TraceparentError::Version(version));
        }
        let [flags] = hex::<1>(flags)?;
        Self::new(hex(trace)?, hex(span)?, flags).ok_or(TraceparentError::ZeroId)
    }
}

/// `N` bytes from exactly `2 N` lowercase hex digits.
fn hex<const N: usize>(s: &str) -> Result<[u8; N], TraceparentError> {
    let digits = s.as_bytes();
    if digits.len() != 2 * N {
        return Err(TraceparentError::Shape);
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(TraceparentError::Shape),
    };
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(out)
}

/// A tracing backend's side of context propagation. Install one per
/// process with [`set_propagator`].
pub trait Propagator: Send + Sync + 'static {
    /// The context of the calling thread's current span, if that span is
    /// traced: what a message sent now carries to its receiver.
    fn current(&self) -> Option<TraceContext>;

    /// Makes `span` (a receiving actor's `handle` span, not yet entered) a
    /// child of `parent`, a context received from another node.
    fn set_parent(&self, span: &tracing::Span, parent: TraceContext);
}

static PROPAGATOR: OnceLock<Box<dyn Propagator>> = OnceLock::new();

/// A propagator was installed already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a trace context propagator is installed already (one per process)")]
pub struct PropagatorAlreadySet;

/// Installs the process's propagator: from now on, messages to other
/// nodes carry the sender's trace context and traced messages are handled
/// in a span under it. One per process, like `tracing`'s global
/// subscriber.
///
/// # Errors
///
/// [`PropagatorAlreadySet`] if one was installed before.
pub fn set_propagator(propagator: impl Propagator) -> Result<(), PropagatorAlreadySet> {
    PROPAGATOR
        .set(Box::new(propagator))
        .map_err(|_| PropagatorAlreadySet)
}

/// The installed propagator, if any.
pub fn propagator() -> Option<&'static dyn Propagator> {
    PROPAGATOR.get().map(|p| &**p)
}

/// The context a message sent now carries: the current span's, if a
/// propagator is installed and the span is traced.
#[inline]
pub fn current() -> Option<TraceContext> {
    PROPAGATOR.get()?.current()
}

/// The span a traced message is handled in, a child of `parent`.
pub(crate) fn handle_span(
    actor: &'static str,
    message: &'static str,
    parent: TraceContext,
) -> tracing::Span {
    let span = tracing::info_span!(target: "plexus::actor", "handle", actor, message);
    if let Some(p) = propagator() {
        p.set_parent(&span, parent);
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx: TraceContext = text.parse().unwrap();
        assert_eq!(cx.to_string(), text);
        assert!(cx.is_sampled());
        assert_eq!(
            cx.span_id(),
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
    }

    #[test]
    fn bad_traceparents_are_refused_with_their_reason() {
        let refused = |s: &str| s.parse::<TraceContext>().unwrap_err();
        assert_eq!(
            refused("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            TraceparentError::Version(1)
        );
        assert_eq!(
            refused("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            TraceparentError::ZeroId
        );
        assert_eq!(
            refused("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
            TraceparentError::ZeroId
        );
        for shape in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-00",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert_eq!(refused(shape), TraceparentError::Shape, "{shape:?}");
        }
    }
}
