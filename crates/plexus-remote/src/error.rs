//! Errors of node operations. Each names the URI it concerns and what went
//! wrong, e.g. `resolve tcp://198.51.100.2:4000/pong: handshake failed:
//! cluster cookie mismatch`.

use std::sync::Arc;

use plexus_core::NodeId;
use plexus_net::SpecError;
use plexus_transport::{BindError, ConnectError, LinkClosed, LinkSendError};

use crate::close::CloseCause;

use crate::handshake::HandshakeError;
use crate::uri::UriError;

/// Why a node could not start or listen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A URI did not parse.
    #[error(transparent)]
    Uri(#[from] UriError),
    /// The scheme is neither built in nor configured.
    #[error("listen {uri}: unknown scheme {scheme:?}; configure it with NodeConfig::scheme")]
    UnknownScheme {
        /// The URI.
        uri: String,
        /// Its scheme.
        scheme: String,
    },
    /// The scheme's stack spec is invalid.
    #[error("scheme {scheme:?}: {source}")]
    Spec {
        /// The scheme.
        scheme: String,
        /// Why the spec is invalid.
        source: SpecError,
    },
    /// The address could not be bound.
    #[error("listen {uri}: {source}")]
    Bind {
        /// The URI.
        uri: String,
        /// The transport's error.
        source: BindError,
    },
    /// The node's TLS certificate certifies another node id than its actor
    /// system's: peers would refuse every link of this node.
    #[error(
        "start node: the actor system's node id {system} is not {certified}, the id of this \
         TLS configuration (its first 12 hex digits are derived from the certificate's public \
         key, the last 4 are this start's incarnation); create the system with that id: \
         ActorSystem::builder().node_id(config.certified_node_id().unwrap()).build()"
    )]
    IdentityMismatch {
        /// The actor system's id.
        system: NodeId,
        /// The configuration's id ([`NodeConfig::certified_node_id`](crate::NodeConfig::certified_node_id)).
        certified: NodeId,
    },
    /// Systems run on a tokio runtime; none was running.
    #[error("start node: no tokio runtime is running on this thread")]
    NoRuntime,
    /// A lane's configuration is invalid.
    #[error("start node: {0}")]
    Lane(#[from] LaneConfigError),
}

/// Why a lane mapping ([`NodeConfig::lane`](crate::NodeConfig::lane)) was
/// refused when the node started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaneConfigError {
    /// No such lane.
    #[error(transparent)]
    UnknownLane(#[from] plexus_core::UnknownLane),
    /// The lane names a scheme the node does not have.
    #[error("lane {lane}: unknown scheme {scheme:?}; configure it with NodeConfig::scheme")]
    UnknownScheme {
        /// The lane.
        lane: plexus_core::Lane,
        /// The scheme it names.
        scheme: String,
    },
    /// The lane's stack lacks a guarantee the lane needs (a control lane on
    /// a lossy stack), or an adaptive lane's candidate is not reliable (its
    /// receiver could wait for a lost frame forever).
    #[error(
        "lane {lane}: scheme {scheme:?} (`{stack}`) is not {missing}, which the {lane} lane          needs{why}"
    )]
    MissingGuarantee {
        /// The lane.
        lane: plexus_core::Lane,
        /// The scheme mapped to it.
        scheme: String,
        /// The scheme's stack.
        stack: String,
        /// What the stack lacks.
        missing: plexus_net::Guarantees,
        /// Why the lane needs it, if not the lane's own need.
        why: &'static str,
    },
    /// The lane is mapped to no scheme (an empty list).
    #[error("lane {lane}: no scheme given")]
    NoCandidates {
        /// The lane.
        lane: plexus_core::Lane,
    },
    /// More candidate stacks than an adaptive lane takes.
    #[error("lane {lane}: {given} candidate schemes, at most {max}")]
    TooManyCandidates {
        /// The lane.
        lane: plexus_core::Lane,
        /// How many were given.
        given: usize,
        /// The most allowed.
        max: usize,
    },
    /// Two lanes (or two candidates of one) name the same scheme: each
    /// lane connection needs a scheme of its own (a datagram socket
    /// carries one link per peer address).
    #[error("lanes {first} and {second} both name scheme {scheme:?}; give each its own scheme")]
    SharedScheme {
        /// The lane that named it first.
        first: plexus_core::Lane,
        /// The lane that named it again.
        second: plexus_core::Lane,
        /// The scheme.
        scheme: String,
    },
    /// The lane is mapped twice.
    #[error("lane {lane}: mapped twice")]
    Duplicate {
        /// The lane.
        lane: plexus_core::Lane,
    },
}

/// Why connecting to a node failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The transport could not connect.
    #[error(transparent)]
    Connect(Arc<ConnectError>),
    /// No socket to dial from could be opened (an ephemeral UDP socket,
    /// a QUIC client endpoint).
    #[error("cannot open a socket to dial from: {0}")]
    Dialer(Arc<BindError>),
    /// The scheme is neither a transport's nor configured.
    #[error("unknown scheme {0:?}")]
    UnknownScheme(String),
    /// The handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// No answer within the connect timeout.
    #[error("no handshake within {0:?}")]
    Timeout(std::time::Duration),
    /// The link closed.
    #[error("link closed: {0}")]
    Closed(CloseCause),
    /// Both nodes dialled at once; the peer closed this side's link as the
    /// duplicate, and the link it kept never came up within the connect
    /// timeout.
    #[error("a duplicate link was closed and the other never came up")]
    DuplicateNeverUp,
    /// A frame of the handshake or of a lane's setup could not be sent
    /// (the link refused it).
    #[error("send: {0}")]
    Send(Arc<LinkSendError>),
    /// The node is shutting down.
    #[error("node is shutting down")]
    ShuttingDown,
    /// The node at the address restarted: another node answers there now.
    #[error("node {old} restarted: node {new} answers at its address")]
    Restarted {
        /// The node that was there.
        old: NodeId,
        /// The node that answers now.
        new: NodeId,
    },
    /// The link to a node that does not listen (it dialled this node) is
    /// gone, and there is no address to dial it again.
    #[error("the link is gone and the node has no address to reconnect to")]
    NoAddress,
    /// The send buffer of the link was full (or, while the link was
    /// connecting, the frames held for it reached their bound): the request
    /// was not sent.
    #[error("send buffer full")]
    SendBufferFull,
    /// A lane connection of the session could not be set up (the session
    /// does not come up without it).
    #[error("lane {lane} over {scheme}: {source}")]
    Lane {
        /// The lane.
        lane: plexus_core::Lane,
        /// The scheme that carries it.
        scheme: String,
        /// Why.
        source: Box<LinkError>,
    },
}

impl From<LinkClosed> for LinkError {
    fn from(e: LinkClosed) -> Self {
        Self::Closed(CloseCause::Transport(e.reason))
    }
}

impl From<LinkSendError> for LinkError {
    fn from(e: LinkSendError) -> Self {
        match e {
            LinkSendError::Closed { closed, .. } => closed.into(),
            e => Self::Send(Arc::new(e)),
        }
    }
}

impl From<ConnectError> for LinkError {
    fn from(e: ConnectError) -> Self {
        Self::Connect(Arc::new(e))
    }
}

/// Why a resolve failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The URI did not parse, or names no actor.
    #[error("resolve {uri}: {why}")]
    BadUri {
        /// The text given.
        uri: String,
        /// What is wrong.
        why: String,
    },
    /// The scheme is neither built in nor configured.
    #[error("resolve {uri}: unknown scheme {scheme:?}")]
    UnknownScheme {
        /// The URI.
        uri: String,
        /// Its scheme.
        scheme: String,
    },
    /// No link to the node (cannot connect, handshake failed, ...).
    #[error("resolve {uri}: {source}")]
    Link {
        /// The URI.
        uri: String,
        /// Why.
        source: LinkError,
    },
    /// The node has nothing published under the name.
    #[error("resolve {uri}: no actor named {name:?} on that node")]
    NoSuchName {
        /// The URI.
        uri: String,
        /// The name.
        name: String,
    },
    /// The actor published there takes other message types.
    #[error("resolve {uri}: wrong message type: expected {expected}, the actor accepts {actual}")]
    WrongType {
        /// The URI.
        uri: String,
        /// The type asked for.
        expected: &'static str,
        /// The types it is published for.
        actual: String,
    },
    /// The node did not answer in time.
    #[error("resolve {uri}: no answer within {timeout:?}")]
    Timeout {
        /// The URI.
        uri: String,
        /// The timeout.
        timeout: std::time::Duration,
    },
}

/// Why a publish failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// Another actor is published under the name.
    #[error("publish {name:?}: already published for another actor")]
    NameTaken {
        /// The name.
        name: String,
    },
    /// Names are one non-empty URI path segment of at most 255 bytes.
    #[error("publish {name:?}: names must be one non-empty path segment of at most 255 bytes")]
    BadName {
        /// The name.
        name: String,
    },
    /// The actor has stopped.
    #[error("publish {name:?}: the actor has stopped")]
    Stopped {
        /// The name.
        name: String,
    },
}
