//! Why actors stop, and the notifications other actors receive about it.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{ActorId, NodeId};

/// Why an actor stopped.
///
/// Reasons are *normal* (the actor finished, or was asked to stop) or
/// *abnormal* (it failed). Only abnormal reasons propagate over links and
/// trigger [`Restart::OnFailure`](crate::RestartPolicy::OnFailure).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ExitReason {
    /// The actor stopped itself with [`Context::stop`](crate::Context::stop).
    Normal,
    /// Another party asked it to stop with [`ActorRef::stop`](crate::ActorRef::stop).
    Stopped,
    /// The system shut down.
    Shutdown,
    /// It was killed with [`ActorRef::kill`](crate::ActorRef::kill), or its
    /// system was dropped without a graceful shutdown. Abnormal.
    Killed,
    /// A handler or hook panicked; the payload is the panic message. Abnormal.
    Panicked(String),
    /// The actor failed with [`Context::fail`](crate::Context::fail). Abnormal.
    Failed(String),
    /// A linked actor exited abnormally and this one does not trap exits.
    /// Abnormal.
    Linked {
        /// The linked actor that exited first.
        from: ActorId,
        /// Why it exited.
        reason: Box<ExitReason>,
    },
    /// Its supervisor gave up: more than `max_restarts` restarts within
    /// `within`. Abnormal.
    RestartLimit {
        /// Restarts allowed in the window.
        max_restarts: u32,
        /// The window.
        within: Duration,
        /// The failure that exceeded the limit.
        last: Box<ExitReason>,
    },
    /// The actor's node became unreachable: its link closed or its
    /// heartbeat failed. Abnormal. The actor may still be running there.
    NodeDown {
        /// The node.
        node: NodeId,
        /// What the link reported.
        cause: Box<str>,
    },
}

impl ExitReason {
    /// Whether this reason is a failure (propagates over links, counts for
    /// restart-on-failure).
    pub fn is_abnormal(&self) -> bool {
        !matches!(self, Self::Normal | Self::Stopped | Self::Shutdown)
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Normal => f.write_str("stopped normally"),
            Self::Stopped => f.write_str("stopped on request"),
            Self::Shutdown => f.write_str("system shut down"),
            Self::Killed => f.write_str("killed"),
            Self::Panicked(m) => write!(f, "panicked: {m}"),
            Self::Failed(m) => write!(f, "failed: {m}"),
            Self::Linked { from, reason } => write!(f, "linked actor {from} exited ({reason})"),
            Self::RestartLimit {
                max_restarts,
                within,
                last,
            } => write!(
                f,
                "restart limit reached ({max_restarts} restarts within {within:?}); last failure: {last}"
            ),
            Self::NodeDown { node, cause } => write!(f, "node {node} unreachable: {cause}"),
        }
    }
}

/// Notification that a monitored actor stopped. Delivered exactly once per
/// monitor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Down {
    /// The actor that stopped.
    pub id: ActorId,
    /// Why it stopped.
    pub reason: ExitReason,
}

/// Exit signal from a linked actor, seen by actors that trap exits
/// (see [`Context::trap_exits`](crate::Context::trap_exits)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// The linked actor that exited.
    pub from: ActorId,
    /// Why it exited.
    pub reason: ExitReason,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_are_abnormal() {
        assert!(!ExitReason::Normal.is_abnormal());
        assert!(!ExitReason::Stopped.is_abnormal());
        assert!(!ExitReason::Shutdown.is_abnormal());
        assert!(ExitReason::Killed.is_abnormal());
        assert!(ExitReason::Panicked("x".into()).is_abnormal());
        assert!(ExitReason::Failed("x".into()).is_abnormal());
    }
}
