//! Typed errors of the runtime's fallible operations.
//!
//! Each fallible operation has its own small enum. Errors of sends hand the
//! message back so the caller can retry or reroute it.

use std::fmt;
use std::time::Duration;

use crate::{ActorId, NodeId};

/// Why [`ActorRef::try_tell`](crate::ActorRef::try_tell) failed. The message
/// is handed back; nothing was enqueued.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum TrySendError<M> {
    /// The bounded mailbox is at capacity.
    #[error("send to actor {target}: mailbox full")]
    Full {
        /// The target actor.
        target: ActorId,
        /// The message, handed back.
        message: M,
    },
    /// The target has stopped.
    #[error("send to actor {target}: actor has stopped")]
    Stopped {
        /// The target actor.
        target: ActorId,
        /// The message, handed back.
        message: M,
    },
}

impl<M> TrySendError<M> {
    /// The message that was not sent.
    pub fn into_message(self) -> M {
        match self {
            Self::Full { message, .. } | Self::Stopped { message, .. } => message,
        }
    }
}

impl<M> fmt::Debug for TrySendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Messages need not be `Debug`; the display form says all that matters.
        write!(f, "TrySendError({self})")
    }
}

/// Why [`ActorRef::send`](crate::ActorRef::send) failed: the target stopped
/// before there was room. The message is handed back.
#[derive(thiserror::Error)]
#[error("send to actor {target}: actor has stopped")]
pub struct SendError<M> {
    /// The target actor.
    pub target: ActorId,
    /// The message, handed back.
    pub message: M,
}

impl<M> fmt::Debug for SendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SendError({self})")
    }
}

/// Why an [`ActorRef::ask`](crate::ActorRef::ask) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// No reply came within the timeout. The request may still be processed.
    #[error("ask actor {target}: no reply within {timeout:?}")]
    Timeout {
        /// The target actor.
        target: ActorId,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The target had stopped, or stopped before it replied.
    #[error("ask actor {target}: actor has stopped")]
    Stopped {
        /// The target actor.
        target: ActorId,
    },
    /// The target's bounded mailbox was full; the request was not enqueued.
    #[error("ask actor {target}: mailbox full")]
    MailboxFull {
        /// The target actor.
        target: ActorId,
    },
    /// The target is alive but dropped the [`ReplyTo`](crate::ReplyTo)
    /// without replying.
    #[error("ask actor {target}: request dropped without a reply")]
    NoReply {
        /// The target actor.
        target: ActorId,
    },
    /// The request could not be sent (for a remote actor: the send buffer
    /// of the link to its node was full, or the request cannot travel); it
    /// is a dead letter with this reason.
    #[error("ask actor {target}: request not sent: {reason}")]
    NotSent {
        /// The target actor.
        target: ActorId,
        /// Why, as the dead letter gives it.
        reason: crate::DeadLetterReason,
    },
    /// The link to the target's node was lost (or could not be made) with
    /// the request unanswered. The actor may be alive: the request may or
    /// may not have been handled, and a later ask may succeed once the
    /// node is reachable again.
    #[error("ask actor {target}: node {node} unreachable: {cause}")]
    NodeUnreachable {
        /// The target actor.
        target: ActorId,
        /// Its node.
        node: NodeId,
        /// Why the node could not be reached.
        cause: LinkCause,
    },
}

/// Why the link to another node ended or could not be made, as the layer
/// that runs links typed it (for a node's links, a `plexus::CloseCause` or a
/// `plexus::LinkError`): shared, so the errors that carry it stay `Clone`,
/// and [`downcast_ref`](Self::downcast_ref) gives the type back.
#[derive(Clone)]
pub struct LinkCause(std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl LinkCause {
    /// Wraps the link layer's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(error))
    }

    /// The link layer's error, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for LinkCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for LinkCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for LinkCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The same cause, or two that say the same (a link layer's errors need
/// not be comparable).
impl PartialEq for LinkCause {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}

impl Eq for LinkCause {}

/// Why a registry operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Another live actor holds the name.
    #[error("register name {name:?}: already taken by actor {holder}")]
    NameTaken {
        /// The name.
        name: String,
        /// The actor holding it.
        holder: ActorId,
    },
    /// The actor to register has already stopped.
    #[error("register name {name:?}: actor {id} has stopped")]
    ActorStopped {
        /// The name.
        name: String,
        /// The stopped actor.
        id: ActorId,
    },
    /// Names must be non-empty.
    #[error("register name: the name is empty")]
    EmptyName,
}

/// Why a registry lookup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LookupError {
    /// No live actor is registered under the name.
    #[error("look up {name:?}: no actor registered under this name")]
    NotFound {
        /// The name.
        name: String,
    },
    /// The actor registered under the name takes another message type.
    #[error("look up {name:?}: actor takes {actual}, not {expected}")]
    WrongType {
        /// The name.
        name: String,
        /// The message type the caller asked for.
        expected: &'static str,
        /// The message type of the registered ref.
        actual: &'static str,
    },
}

/// Why [`SpawnBuilder::spawn`](crate::SpawnBuilder::spawn) failed. No actor
/// was started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The system is shutting down or was shut down.
    #[error("spawn actor: the actor system is shutting down")]
    ShuttingDown,
    /// The requested name is taken.
    #[error("spawn actor: {0}")]
    Name(#[from] RegistryError),
    /// A detached actor's OS thread could not be started.
    #[error("spawn detached actor: cannot start its thread: {0}")]
    Thread(String),
    /// A mailbox capacity of zero was requested.
    #[error("spawn actor: a bounded mailbox needs a capacity of at least 1")]
    ZeroCapacity,
}

/// Why an actor system could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SystemError {
    /// Systems run on a tokio runtime; none was running on this thread.
    #[error("create actor system: no tokio runtime is running on this thread (start one with #[tokio::main] or Runtime::enter)")]
    NoRuntime,
}
