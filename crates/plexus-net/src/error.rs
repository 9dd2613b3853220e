//! Errors shared by all layers: refusing a send, rejecting input, closing a
//! link. Each layer has its own error enum (e.g.
//! [`FramingError`](crate::layers::framing::FramingError)) that
//! [`ReceiveError`] wraps.

use std::sync::Arc;

use crate::frame::Frame;
use crate::layers::batching::BatchingError;
use crate::layers::compression::CompressionError;
use crate::layers::delivery::DeliveryError;
use crate::layers::encryption::EncryptionError;
use crate::layers::framing::FramingError;
use crate::layers::heartbeat::HeartbeatError;
use crate::layers::ordering::OrderingError;
use crate::layers::slicing::SlicingError;

/// A send that was refused. Every variant hands the frame back unchanged and
/// says that no layer state changed, so the caller may retry it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StackSendError {
    /// A bounded send buffer is full. Nothing changed; retry after
    /// [`LinkEvent::SendReady`](crate::LinkEvent::SendReady).
    #[error("send buffer full: retry after SendReady")]
    WouldBlock(Frame),
    /// The message is larger than the stack can carry. Nothing changed.
    #[error("message of {} bytes exceeds the limit of {max} bytes", frame.len())]
    TooLarge {
        /// The refused frame.
        frame: Frame,
        /// The largest accepted length in bytes.
        max: usize,
    },
    /// The link was closed earlier ([`Stack::close_reason`](crate::Stack::close_reason)
    /// says why). Nothing changed.
    #[error("link closed")]
    Closed(Frame),
    /// A layer refused the frame for a reason of its own. The frame is handed
    /// back; layers above `layer` may have updated their state.
    #[error("layer {layer} refused the frame: {reason}")]
    Layer {
        /// The refusing layer's name.
        layer: &'static str,
        /// Why.
        reason: &'static str,
        /// The refused frame.
        frame: Frame,
    },
    /// The frame ends in a file region and `layer` does not pass regions
    /// ([`Layer::passes_file_regions`](crate::Layer::passes_file_regions)),
    /// or the driver has not said it writes them
    /// ([`Stack::accept_file_regions`](crate::Stack::accept_file_regions)):
    /// read it into memory first ([`Frame::load_file_region`]). Nothing
    /// changed.
    #[error("{layer} does not take file regions: read the region into memory first")]
    FileRegion {
        /// The first layer (from the bottom) that does not pass regions,
        /// or `transport`.
        layer: &'static str,
        /// The refused frame.
        frame: Frame,
    },
}

impl StackSendError {
    /// The frame handed back.
    pub fn into_frame(self) -> Frame {
        match self {
            StackSendError::WouldBlock(frame)
            | StackSendError::TooLarge { frame, .. }
            | StackSendError::Closed(frame)
            | StackSendError::Layer { frame, .. }
            | StackSendError::FileRegion { frame, .. } => frame,
        }
    }
}

/// Input rejected by a layer. A non-fatal error means the frame was dropped
/// (and counted in [`StackStats`](crate::StackStats)) and the link goes on;
/// a fatal one closes the link.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiveError {
    /// See [`FramingError`].
    #[error("framing: {0}")]
    Framing(#[from] FramingError),
    /// See [`SlicingError`].
    #[error("slicing: {0}")]
    Slicing(#[from] SlicingError),
    /// See [`DeliveryError`].
    #[error("delivery: {0}")]
    Delivery(#[from] DeliveryError),
    /// See [`OrderingError`].
    #[error("ordering: {0}")]
    Ordering(#[from] OrderingError),
    /// See [`CompressionError`].
    #[error("compression: {0}")]
    Compression(#[from] CompressionError),
    /// See [`HeartbeatError`].
    #[error("heartbeat: {0}")]
    Heartbeat(#[from] HeartbeatError),
    /// See [`EncryptionError`].
    #[error("encryption: {0}")]
    Encryption(#[from] EncryptionError),
    /// See [`BatchingError`].
    #[error("batching: {0}")]
    Batching(#[from] BatchingError),
    /// An error of a layer's own (a layer outside this crate).
    #[error("{layer}: {source}")]
    Custom {
        /// The layer's name.
        layer: &'static str,
        /// Why the input was rejected: the layer's own error type.
        source: LayerError,
        /// Whether the link must be closed.
        fatal: bool,
    },
}

impl ReceiveError {
    /// Whether the link must be closed (otherwise the frame was dropped).
    pub fn is_fatal(&self) -> bool {
        match self {
            ReceiveError::Framing(e) => e.is_fatal(),
            ReceiveError::Slicing(_) | ReceiveError::Delivery(_) => false,
            ReceiveError::Ordering(e) => e.is_fatal(),
            ReceiveError::Compression(_) | ReceiveError::Heartbeat(_) => false,
            ReceiveError::Encryption(e) => e.is_fatal(),
            ReceiveError::Batching(_) => true,
            ReceiveError::Custom { fatal, .. } => *fatal,
        }
    }
}

/// Why a link was closed. Once closed, a [`Stack`](crate::Stack) refuses all
/// input and its `handle_*` methods return this reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The peer sent input that cannot be recovered from (e.g. a stream
    /// frame announcing a length over the limit).
    #[error("peer sent corrupt input: {0}")]
    Corrupt(#[source] ReceiveError),
    /// The delivery layer retransmitted a message the configured number of
    /// times without an acknowledgement.
    #[error("delivery of message {seq} failed after {attempts} transmissions")]
    DeliveryFailed {
        /// Delivery sequence number of the message.
        seq: u64,
        /// Transmissions attempted.
        attempts: u32,
    },
    /// The encryption layer gave up: the handshake was not answered in time
    /// (unreachable peer or a different pre-shared key), or the nonce space
    /// of the session is used up.
    #[error("encryption: {0}")]
    Encryption(#[source] EncryptionError),
    /// Strict ordering waited longer than its gap timeout for a missing
    /// message.
    #[error("strict ordering waited {waited_ms} ms for message {missing}")]
    OrderingStalled {
        /// Sequence number of the missing message.
        missing: u64,
        /// How long it waited, in milliseconds.
        waited_ms: u64,
    },
    /// A layer ended the link for a reason of its own protocol (an HTTP
    /// layer after a `Connection: close` response, a timeout, a refused
    /// request); a layer of one's own uses it too.
    #[error("{layer}: {source}")]
    Layer {
        /// The layer's name.
        layer: &'static str,
        /// Why: the layer's own error type.
        source: LayerError,
    },
}

/// An error of a layer's own protocol, typed by the layer: boxed (tower's
/// `BoxError` shape) and shared, so the errors that carry it stay `Clone`.
/// [`downcast_ref`](Self::downcast_ref) gives the layer's type back, so an
/// application acts on a layer's meaning, never on its text.
#[derive(Clone)]
pub struct LayerError(Arc<dyn std::error::Error + Send + Sync>);

impl LayerError {
    /// Wraps a layer's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// The layer's error, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for LayerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for LayerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for LayerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The same error, or two that say the same (a layer's errors need not be
/// comparable).
impl PartialEq for LayerError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}
