//! Why a link between two nodes ended, as types: what watchers, receipts,
//! resolves and asks waiting on the link are failed with, and what the
//! session acts on (a peer's `GOODBYE(duplicate)` hands the session over to
//! the surviving link; anything else is the node going down or idle).

use std::time::Duration;

use plexus_core::Lane;

use crate::selector::ResequenceError;
use crate::wire::{GoodbyeCode, WireError};

/// Why a peer's established link ended.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CloseCause {
    /// The transport closed the link: the peer went away, a socket or
    /// stack error.
    #[error(transparent)]
    Transport(#[from] plexus_transport::CloseReason),
    /// The peer closed the link on purpose.
    #[error("peer said goodbye: {0}")]
    Goodbye(GoodbyeCode),
    /// The peer broke the wire protocol; the link can no longer be trusted.
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    /// No traffic crossed the link for this long and the transport dropped
    /// it (a UDP peer's idle timeout, with no `heartbeat` layer to keep it
    /// alive): the node is not known to be gone.
    #[error("no traffic for {0:?}: link closed as idle, dialled again on the next send")]
    Idle(Duration),
    /// The heartbeat layer declared the peer unreachable.
    #[error("heartbeat: node unreachable (phi {phi:.1})")]
    Unreachable {
        /// The accrual failure detector's suspicion level.
        phi: f64,
    },
}

impl CloseCause {
    /// The peer closed this link as the loser of a duplicate-connect
    /// tie-break: another link to the same node takes over.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, CloseCause::Goodbye(GoodbyeCode::Duplicate))
    }
}

/// How a peer broke the protocol on an established link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A frame did not decode.
    #[error(transparent)]
    Malformed(#[from] WireError),
    /// A handshake frame (`HELLO`, `AUTH`, `REJECT`, `BIND`, `LANES`) after
    /// the handshake.
    #[error("{kind} frame on an established link")]
    HandshakeFrame {
        /// The frame's kind.
        kind: &'static str,
    },
    /// A `TRACE` frame carried a frame that is not a message.
    #[error("a TRACE frame around a {kind} frame (only MESSAGE and NAMED are traced)")]
    TracedNonMessage {
        /// The carried frame's kind.
        kind: &'static str,
    },
    /// A `SEQUENCED` frame named a lane that does not exist.
    #[error("SEQUENCED frame on lane {0}, which does not exist")]
    UnknownLane(u8),
    /// A lane's frames came out of order beyond its resequencing bounds.
    #[error("the {lane} lane's resequencing buffer: {source}")]
    Resequencing {
        /// The lane.
        lane: Lane,
        /// What overflowed.
        source: ResequenceError,
    },
}
