//! Errors of the transport operations: one enum per operation, each naming
//! the address involved so a log line says what to fix.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use plexus_net::{LinkError, SpecError, StackSpec, TransportProfile};

/// Why [`bind`](crate::tcp::TcpListener::bind) (or another transport's bind)
/// failed. Nothing is listening afterwards.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// The stack spec does not fit the transport: it names another one,
    /// or its first layer needs another unit than the transport carries.
    #[error("bind {addr}: {source}")]
    Spec {
        /// The address, with its scheme.
        addr: String,
        /// Why the spec does not fit.
        #[source]
        source: Box<SpecError>,
    },
    /// The address is not one the transport can bind (e.g. not an IP
    /// address and port).
    #[error("bind {addr}: {why}")]
    Address {
        /// The address, with its scheme.
        addr: String,
        /// What is wrong with it.
        why: String,
    },
    /// The transport needs configuration it was not given (`tls` and
    /// `quic` without a certificate).
    #[error("bind {addr}: {what}")]
    NotConfigured {
        /// The address, with its scheme.
        addr: String,
        /// What to configure.
        what: &'static str,
    },
    /// The operating system refused (address in use, permission denied...).
    #[error("bind {addr}: {source}")]
    Io {
        /// The address, with its scheme.
        addr: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The in-memory name is already bound on this hub.
    #[error("bind {addr}: name already bound on this hub")]
    AddrInUse {
        /// The address, with its scheme.
        addr: String,
    },
}

/// Why a `connect` failed. No link exists afterwards.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The stack spec does not fit the transport: it names another one,
    /// or its first layer needs another unit than the transport carries.
    #[error("connect {addr}: {source}")]
    Spec {
        /// The address, with its scheme.
        addr: String,
        /// Why the spec does not fit.
        #[source]
        source: Box<SpecError>,
    },
    /// The address is not one the transport can reach, or its host name
    /// does not resolve.
    #[error("connect {addr}: {why}")]
    Address {
        /// The address, with its scheme.
        addr: String,
        /// What is wrong with it.
        why: String,
    },
    /// The transport needs configuration it was not given (`tls` and
    /// `quic` without a certificate).
    #[error("connect {addr}: {what}")]
    NotConfigured {
        /// The address, with its scheme.
        addr: String,
        /// What to configure.
        what: &'static str,
    },
    /// The operating system refused (connection refused, unreachable...).
    #[error("connect {addr}: {source}")]
    Io {
        /// The address, with its scheme.
        addr: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Nothing is bound under this in-memory name, or it stopped listening.
    #[error("connect {addr}: no listener bound under this name")]
    NoListener {
        /// The address, with its scheme.
        addr: String,
    },
    /// The UDP endpoint already holds its maximum number of peers.
    #[error("connect {addr}: peer table full ({max} peers); raise UdpConfig::max_peers or close idle links")]
    PeerTableFull {
        /// The address, with its scheme.
        addr: String,
        /// The configured bound.
        max: usize,
    },
    /// The UDP endpoint already has a link to this peer.
    #[error("connect {addr}: a link to this peer already exists on the endpoint")]
    AlreadyConnected {
        /// The address, with its scheme.
        addr: String,
    },
    /// The TLS handshake failed or timed out: the server's certificate is
    /// untrusted, expired or not valid for the name, or the server refused
    /// ours. Nothing was sent.
    #[error("connect {addr}: TLS handshake failed: {source}")]
    Handshake {
        /// The address, with its scheme.
        addr: String,
        /// The cause (a rustls error inside an `io::Error`, or a timeout).
        #[source]
        source: io::Error,
    },
    /// The endpoint was shut down.
    #[error("connect {addr}: the endpoint is shut down")]
    EndpointClosed {
        /// The address, with its scheme.
        addr: String,
    },
    /// The server refused the protocol upgrade the transport asked for
    /// (a WebSocket transport's `101 Switching Protocols`), or answered
    /// something else.
    #[error("connect {addr}: upgrade refused: {why}")]
    Upgrade {
        /// The address, with its scheme.
        addr: String,
        /// What the server answered.
        why: String,
    },
}

/// Why `accept` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptError {
    /// The listening socket reported an error. The listener may be retried;
    /// per-connection errors (e.g. a reset before accept) show up here too.
    #[error("accept on {addr}: {source}")]
    Io {
        /// The local address, with its scheme.
        addr: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A peer was refused during the TLS handshake (plain TCP bytes, no or
    /// an untrusted or expired certificate, timeout). Only that connection
    /// was dropped; the listener stays usable.
    #[error("accept {addr}: handshake with {peer} failed: {source}")]
    Handshake {
        /// The local address, with its scheme.
        addr: String,
        /// The peer's address.
        peer: String,
        /// The cause (a rustls error inside an `io::Error`, or a timeout).
        #[source]
        source: io::Error,
    },
    /// A peer's protocol upgrade (a WebSocket transport's opening
    /// handshake) was refused, or did not arrive in time; it was answered
    /// with a status saying why. Only that connection was dropped.
    #[error("accept {addr}: upgrade from {peer} refused: {why}")]
    Upgrade {
        /// The local address, with its scheme.
        addr: String,
        /// The peer's address.
        peer: String,
        /// Why.
        why: String,
    },
    /// The listener or endpoint was shut down; no more links will come.
    #[error("accept on {addr}: listener shut down")]
    Closed {
        /// The local address, with its scheme.
        addr: String,
    },
}

/// Why a link was closed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CloseReason {
    /// Every sender handle and the receiver were dropped, or
    /// [`Link::close`](crate::Link::close) was called.
    #[error("closed locally")]
    Local,
    /// The peer closed its side of the connection (end of stream).
    #[error("peer closed the connection")]
    PeerClosed,
    /// The stack closed the link (corrupt input, delivery failure, stalled
    /// ordering).
    #[error("{0}")]
    Protocol(#[from] LinkError),
    /// The socket failed.
    #[error("{0}")]
    Io(Arc<io::Error>),
    /// A UDP peer sent nothing for this long; its state was dropped.
    #[error("peer silent for {0:?}; state dropped")]
    IdleTimeout(Duration),
    /// The endpoint (UDP socket task, in-memory hub) that served the link
    /// was shut down.
    #[error("endpoint shut down")]
    EndpointClosed,
    /// The QUIC connection failed or the peer broke the strand protocol (see
    /// [`QuicError`](crate::quic::QuicError)).
    #[error("{0}")]
    #[cfg(feature = "quic")]
    Quic(Arc<crate::quic::QuicError>),
}

impl From<io::Error> for CloseReason {
    fn from(e: io::Error) -> Self {
        CloseReason::Io(Arc::new(e))
    }
}

/// A closed link: which peer, and why. Returned by
/// [`LinkReceiver::recv`](crate::LinkReceiver::recv) once every message that
/// arrived before the close has been received.
#[derive(Debug, Clone, thiserror::Error)]
#[error("link to {peer} closed: {reason}")]
pub struct LinkClosed {
    /// The peer address, with its scheme (`tcp://127.0.0.1:4000`).
    pub peer: Arc<str>,
    /// Why.
    pub reason: CloseReason,
}

/// A refused [`send`](crate::LinkSender::send). The message is handed back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkSendError {
    /// The message is larger than the stack carries
    /// ([`LinkSender::max_message_len`](crate::LinkSender::max_message_len)).
    /// Nothing was sent; split the message or use a stack with `slicing`.
    #[error("send to {peer}: message of {} bytes exceeds the stack's limit of {max} bytes", message.len())]
    TooLarge {
        /// The peer address.
        peer: Arc<str>,
        /// The refused message.
        message: Bytes,
        /// The limit in bytes.
        max: usize,
    },
    /// The link is closed; the message was not sent.
    #[error("send failed: {closed}")]
    Closed {
        /// The refused message.
        message: Bytes,
        /// Why the link closed.
        closed: LinkClosed,
    },
    /// The message ends in a file region ([`plexus_net::FileRegion`]) that
    /// this link does not write as it is, and reading it into memory
    /// failed (the file shrank, an I/O error). Nothing was sent.
    #[error("send to {peer}: read the message's file region: {source}")]
    FileRegion {
        /// The peer address.
        peer: Arc<str>,
        /// The message's bytes in front of the region.
        message: Bytes,
        /// The read's error.
        source: std::io::Error,
    },
}

impl LinkSendError {
    /// The message handed back.
    pub fn into_message(self) -> Bytes {
        match self {
            LinkSendError::TooLarge { message, .. }
            | LinkSendError::Closed { message, .. }
            | LinkSendError::FileRegion { message, .. } => message,
        }
    }

    /// The same error handing back `message` instead: for a sender that
    /// wrapped its message before this link refused it.
    pub fn with_message(self, message: Bytes) -> Self {
        match self {
            LinkSendError::TooLarge { peer, max, .. } => {
                LinkSendError::TooLarge { peer, message, max }
            }
            LinkSendError::Closed { closed, .. } => LinkSendError::Closed { message, closed },
            LinkSendError::FileRegion { peer, source, .. } => LinkSendError::FileRegion {
                peer,
                message,
                source,
            },
        }
    }
}

/// A refused [`try_send`](crate::LinkSender::try_send). The message is handed
/// back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkTrySendError {
    /// The link's send buffer is full (the peer or the network is slower
    /// than the sender). Nothing changed; retry later or use the async
    /// [`send`](crate::LinkSender::send), which waits for room.
    #[error("send to {peer}: send buffer full; retry later or await send()")]
    Full {
        /// The peer address.
        peer: Arc<str>,
        /// The refused message.
        message: Bytes,
    },
    /// See [`LinkSendError`].
    #[error(transparent)]
    Send(#[from] LinkSendError),
}

impl LinkTrySendError {
    /// The message handed back.
    pub fn into_message(self) -> Bytes {
        match self {
            LinkTrySendError::Full { message, .. } => message,
            LinkTrySendError::Send(e) => e.into_message(),
        }
    }

    /// The same error handing back `message` instead: for a sender that
    /// wrapped its message before this link refused it.
    pub fn with_message(self, message: Bytes) -> Self {
        match self {
            LinkTrySendError::Full { peer, .. } => LinkTrySendError::Full { peer, message },
            LinkTrySendError::Send(e) => LinkTrySendError::Send(e.with_message(message)),
        }
    }
}

/// A refused [`send_unreliable`](crate::LinkSender::send_unreliable). The
/// message is handed back; nothing was sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnreliableError {
    /// The link's transport has no unreliable datagrams (only `quic` has);
    /// send the message with [`send`](crate::LinkSender::send).
    #[error("send to {peer}: this transport has no unreliable datagrams; use send()")]
    Unsupported {
        /// The peer address.
        peer: Arc<str>,
        /// The refused message.
        message: Bytes,
    },
    /// The peer did not enable QUIC datagrams, or they are disabled
    /// locally.
    #[error("send to {peer}: the peer does not accept QUIC datagrams; use send()")]
    UnsupportedByPeer {
        /// The peer address.
        peer: Arc<str>,
        /// The refused message.
        message: Bytes,
    },
    /// The message does not fit one datagram on the current path.
    #[error("send to {peer}: message of {} bytes exceeds one datagram ({max} bytes now); use send()", message.len())]
    TooLarge {
        /// The peer address.
        peer: Arc<str>,
        /// The refused message.
        message: Bytes,
        /// The largest datagram payload now, in bytes.
        max: usize,
    },
    /// The link is closed.
    #[error("send to {peer}: link closed")]
    Closed {
        /// The peer address.
        peer: Arc<str>,
        /// The refused message.
        message: Bytes,
    },
}

impl UnreliableError {
    /// The message handed back.
    pub fn into_message(self) -> Bytes {
        match self {
            Self::Unsupported { message, .. }
            | Self::UnsupportedByPeer { message, .. }
            | Self::TooLarge { message, .. }
            | Self::Closed { message, .. } => message,
        }
    }
}

impl BindError {
    /// `spec` [fit](StackSpec::fit) to the transport `name` with `profile`,
    /// else [`BindError::Spec`] naming `addr` (built only then).
    pub(crate) fn fit(
        spec: &StackSpec,
        name: &str,
        profile: TransportProfile,
        addr: impl FnOnce() -> String,
    ) -> Result<StackSpec, Self> {
        spec.fit(name, profile).map_err(|source| Self::Spec {
            addr: addr(),
            source: Box::new(source),
        })
    }
}

impl ConnectError {
    /// `spec` [fit](StackSpec::fit) to the transport `name` with `profile`,
    /// else [`ConnectError::Spec`] naming `addr` (built only then).
    pub(crate) fn fit(
        spec: &StackSpec,
        name: &str,
        profile: TransportProfile,
        addr: impl FnOnce() -> String,
    ) -> Result<StackSpec, Self> {
        spec.fit(name, profile).map_err(|source| Self::Spec {
            addr: addr(),
            source: Box::new(source),
        })
    }
}
