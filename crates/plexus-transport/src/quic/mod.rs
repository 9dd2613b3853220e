//! QUIC (quinn, rustls `ring` provider): one connection per peer, one
//! unidirectional stream per [`Strand`], unreliable datagrams on the side.
//!
//! ```text
//!  Link::send_on(strand, msg) ─▶ strand writer ─▶ uni stream of the strand ─┐
//!  Link::send_unreliable(msg) ─────────────▶ QUIC datagram ───────────┤ one QUIC
//!  Link::recv() ◀─ inbound queue ◀─ stream readers, datagrams ◀────────┘ connection
//! ```
//!
//! **Security.** TLS 1.3 with mutual authentication from the same
//! [`TlsConfig`] as the [`tls`](crate::tls) transport (cluster CA, node
//! certificate and key), ALPN [`ALPN`]. A peer without a certificate, with
//! one from another CA or an expired one is refused during the handshake:
//! [`QuicEndpoint::accept`] returns [`AcceptError::Handshake`] naming the
//! reason, [`QuicEndpoint::connect`] [`ConnectError::Handshake`]; the
//! endpoint keeps serving other peers. The peer's end-entity certificate is
//! kept on the link with the node id it certifies
//! ([`Link::peer_identity`]).
//!
//! **Strands.** Each strand is its own unidirectional QUIC stream, opened on
//! first use and kept for the connection's life. A stream starts with one
//! byte, the strand number, followed by the bytes of the strand's
//! [`Stack`](plexus_net::Stack): the `framing` layer (`len: u32 big-endian |
//! payload`) delimits messages on the stream, and the spec's layers run
//! above it, one instance per strand (`quic / compression` compresses each
//! strand's messages; any layer that takes messages fits, a user's own
//! too). Messages on one strand arrive in
//! order; strands do not wait for each other, so a 16 MiB message on one strand
//! does not hold up a small one on another: a strand writing a message of
//! 256 KiB or more lowers its stream's priority while it does, so other
//! strands' data goes first (a strand that never pauses can so delay bulk
//! transfers, never the reverse); streams of equal priority share the
//! connection round-robin, and each stream's flow-control window is a
//! fraction of the connection's. Bidirectional streams are not used (the
//! peer may open none).
//!
//! **Datagrams.** [`LinkSender::send_unreliable`](crate::LinkSender::send_unreliable)
//! sends one QUIC datagram (RFC 9221). The peer receives it as an ordinary
//! [`Received::Message`](crate::Received::Message); it may be lost, and it
//! may overtake or be overtaken by any other message.
//! Datagrams do not pass through the strands' layers: a layer that must
//! see every message (compression, a counter) sees those on strands.
//!
//! **Graceful close.** When the application is done sending
//! ([`Link::close`], or every sender dropped), the link finishes its strand
//! streams, waits until the peer acknowledged them, and finishes strand 0
//! last (opening it if it was never used): a peer that sees strand 0 end
//! knows every other stream is complete, and its receiver gets
//! [`CloseReason::PeerClosed`](crate::CloseReason::PeerClosed) after the
//! last message. Once a side has read everything, it opens one more stream
//! (first byte `0x80`, nothing else) to say so. The connection is closed
//! (`CONNECTION_CLOSE` with code 0) by the first side that has sent
//! everything, read everything and heard that the peer read everything:
//! no message is lost to the close. A side whose receiver was dropped
//! closes once it has sent everything and the peer has read it; until then
//! what arrives is discarded.
//!
//! **Hostile peers, bounded memory.** A peer may have at most
//! [`Strand::COUNT`] + 1 streams open (QUIC flow control throttles the rest:
//! its next `open` waits), and may open at most that many in the
//! connection's life; a second stream for a strand, a strand number out of
//! range, a message over [`QuicConfig::max_message_len`], a stream ending
//! inside a message, or partly sent messages on many strands at once (more
//! than two of the maximum length and 320 KiB per strand: our writers send
//! one large message at a time) close that connection with a logged
//! [`QuicError`]. Per
//! stream and per connection receive windows bound what the peer can send
//! ahead; readers stop reading while the link's receive buffer is full.
//! Handshakes run at most [`MAX_HANDSHAKES`] at a time, each bounded by
//! the [`TlsConfig`]'s handshake timeout.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use plexus_net::StackSpec;
//! use plexus_transport::quic::{QuicConfig, QuicEndpoint};
//! use plexus_transport::tls::TlsConfig;
//! use plexus_transport::Strand;
//!
//! let tls = TlsConfig::from_pem_files("n1.pem", "n1.key", "ca.pem")?;
//! let spec: StackSpec = "quic".parse()?;
//! let server = QuicEndpoint::bind(&spec, "127.0.0.1:0".parse()?, &tls, QuicConfig::default())?;
//! let client = QuicEndpoint::client(&spec, "127.0.0.1:0".parse()?, &tls, QuicConfig::default())?;
//! let link = client.connect(server.local_addr(), "localhost").await?;
//! link.send_on(Strand::for_key(7), bytes::Bytes::from_static(b"hi")).await?;
//! let mut accepted = server.accept().await?;
//! # Ok(()) }
//! ```

pub(crate) mod driver;
mod socket;
mod strand_stack;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use plexus_net::{StackSpec, TransportProfile};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, VarInt};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::AbortHandle;

use crate::error::{AcceptError, BindError, ConnectError};
use crate::link::{Link, LinkConfig};
use crate::tls::TlsConfig;
use socket::QuicSocket;

#[cfg(doc)]
use crate::link::Strand;

/// A quinn endpoint on a socket bound by [`bind_socket`] (registered as
/// [`QuicSocket`]), accepting connections if `server` is given.
fn endpoint_on(
    addr: SocketAddr,
    server: Option<quinn::ServerConfig>,
) -> Result<quinn::Endpoint, BindError> {
    bind_socket(addr)
        .and_then(QuicSocket::new)
        .and_then(|socket| {
            quinn::Endpoint::new_with_abstract_socket(
                quinn::EndpointConfig::default(),
                server,
                Arc::new(socket),
                Arc::new(quinn::TokioRuntime),
            )
        })
        .map_err(|source| BindError::Io {
            addr: url(addr),
            source,
        })
}

/// Binds the endpoint's UDP socket with large kernel buffers (as the `udp`
/// transport does): with the default (~200 KiB) a burst of a large
/// congestion window overflows the receive queue while the task is busy,
/// and every such loss halves quinn's sending rate.
fn bind_socket(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = std::net::UdpSocket::bind(addr)?;
    let state = quinn_udp::UdpSocketState::new((&socket).into())?;
    for result in [
        state.set_recv_buffer_size((&socket).into(), crate::udp::SOCKET_BUFFER),
        state.set_send_buffer_size((&socket).into(), crate::udp::SOCKET_BUFFER),
    ] {
        if let Err(error) = result {
            tracing::debug!(target: "plexus::transport", %error, "quic socket buffer size not set");
        }
    }
    Ok(socket)
}

/// The ALPN protocol both sides must offer.
pub const ALPN: &[u8] = b"plexus/1";
/// Handshakes an endpoint runs at once; further peers wait in quinn's
/// bounded queue of incoming connections.
pub const MAX_HANDSHAKES: usize = 64;
/// Finished handshakes (links or errors) waiting for
/// [`QuicEndpoint::accept`].
const ACCEPT_QUEUE: usize = 16;
/// Incoming connections quinn holds before refusing more.
const MAX_INCOMING: usize = 256;

/// Application error codes of a QUIC `CONNECTION_CLOSE`.
pub(crate) mod code {
    /// Both sides are done.
    pub(crate) const DONE: u32 = 0;
    /// The peer broke the strand protocol (the reason says how).
    pub(crate) const PROTOCOL: u32 = 1;
    /// The local side gave up (endpoint closed, link dropped).
    pub(crate) const LOCAL: u32 = 2;
}

/// The transport's name: the first word of its stack specs.
pub const NAME: &str = "quic";

/// What the transport carries.
pub const PROFILE: TransportProfile =
    TransportProfile::datagrams(None).with_guarantees(plexus_net::Guarantees::RELIABLE_ORDERED);

fn url(addr: SocketAddr) -> String {
    format!("quic://{addr}")
}

/// Settings of a QUIC endpoint and of every link it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicConfig {
    /// Buffers of every link ([`LinkConfig`]). Default as `LinkConfig`.
    pub link: LinkConfig,
    /// Largest message on a strand, in bytes; enforced when sending
    /// ([`LinkSendError::TooLarge`](crate::LinkSendError::TooLarge)) and when
    /// receiving (the connection is closed). Default 16 MiB; at most
    /// `u32::MAX` (the strand format's length prefix), a larger value is
    /// taken as that.
    pub max_message_len: usize,
    /// Bytes a peer may send ahead on one stream (strand) before we read
    /// them. Default 4 MiB. Memory: at most this per open strand, and
    /// `receive_window` for all strands of a connection together.
    pub stream_receive_window: u32,
    /// Bytes a peer may send ahead on the whole connection. Default 8 MiB;
    /// bounds the memory one peer holds in quinn's buffers.
    pub receive_window: u32,
    /// Bytes we keep unacknowledged in flight, all strands together. Default
    /// 8 MiB.
    pub send_window: u64,
    /// Bytes of received datagrams waiting to be read (older ones are
    /// dropped first); 0 disables datagrams. Default 1 MiB.
    pub datagram_receive_buffer: usize,
    /// A connection that hears nothing for this long is dropped. Default
    /// 30 s.
    pub idle_timeout: Duration,
    /// Keep-alive packets are sent after this much silence. Default 5 s.
    pub keep_alive: Duration,
}

impl Default for QuicConfig {
    fn default() -> Self {
        Self {
            link: LinkConfig::default(),
            max_message_len: 16 << 20,
            stream_receive_window: 4 << 20,
            receive_window: 8 << 20,
            send_window: 8 << 20,
            datagram_receive_buffer: 1 << 20,
            idle_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(5),
        }
    }
}

impl QuicConfig {
    fn transport(&self) -> Arc<quinn::TransportConfig> {
        let mut t = quinn::TransportConfig::default();
        t.max_concurrent_uni_streams(VarInt::from_u32(driver::MAX_STREAMS as u32))
            .max_concurrent_bidi_streams(VarInt::from_u32(0))
            .stream_receive_window(VarInt::from_u32(self.stream_receive_window))
            .receive_window(VarInt::from_u32(self.receive_window))
            .send_window(self.send_window)
            .send_fairness(true)
            .keep_alive_interval(Some(self.keep_alive))
            .datagram_receive_buffer_size(
                (self.datagram_receive_buffer > 0).then_some(self.datagram_receive_buffer),
            );
        // Out of range only beyond 2^62 ms; fall back to quinn's default.
        if let Ok(idle) = IdleTimeout::try_from(self.idle_timeout) {
            t.max_idle_timeout(Some(idle));
        }
        Arc::new(t)
    }
}

/// Why a QUIC link was closed (inside
/// [`CloseReason::Quic`](crate::CloseReason::Quic)), or why a peer was
/// refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuicError {
    /// The connection failed or was closed by the peer (timeout, reset,
    /// the peer's own error).
    #[error("QUIC connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    /// The peer opened more streams than there are strands.
    #[error("peer opened {opened} streams; at most {max} (one per strand) are allowed")]
    TooManyStreams {
        /// Streams the peer opened.
        opened: usize,
        /// The bound ([`Strand::COUNT`]).
        max: usize,
    },
    /// The peer opened a second stream for a strand.
    #[error("peer opened a second stream for strand {strand}")]
    DuplicateStrand {
        /// The strand.
        strand: u8,
    },
    /// A stream named a strand that does not exist.
    #[error("peer opened a stream for strand {strand}; strands are 0..{max}")]
    BadStrand {
        /// The strand number sent.
        strand: u8,
        /// [`Strand::COUNT`].
        max: usize,
    },
    /// A strand's stack closed the link: the peer's bytes were corrupt
    /// (a message longer than the configured maximum, a layer's header it
    /// cannot read), or a layer ended the link for its own reason.
    #[error("strand {strand}: {source}")]
    Stack {
        /// The strand.
        strand: u8,
        /// Why its stack closed.
        #[source]
        source: plexus_net::LinkError,
    },
    /// A stream ended in the middle of a message.
    #[error("strand {strand}: stream ended inside a message")]
    Truncated {
        /// The strand.
        strand: u8,
    },
    /// Reading a stream failed (reset by the peer, connection lost).
    #[error("reading strand {strand}: {source}")]
    Read {
        /// The strand (255 while its first byte was not read).
        strand: u8,
        /// quinn's error.
        #[source]
        source: quinn::ReadError,
    },
    /// The peer's partly sent messages, all strands together, would take more
    /// memory than a well-behaved peer ever needs (see
    /// [`QuicConfig::max_message_len`]: about twice it, plus 320 KiB per
    /// strand).
    #[error(
        "strand {strand}: partly received messages would hold {bytes} bytes; at most {max} are allowed"
    )]
    TooMuchPartial {
        /// The strand whose message went over.
        strand: u8,
        /// The bytes it would take.
        bytes: usize,
        /// The budget.
        max: usize,
    },
    /// Writing a stream failed (stopped by the peer, connection lost).
    #[error("writing strand {strand}: {source}")]
    Write {
        /// The strand.
        strand: u8,
        /// quinn's error.
        #[source]
        source: quinn::WriteError,
    },
}

impl QuicError {
    /// Whether the peer broke the strand protocol (as opposed to the
    /// connection failing).
    fn is_protocol(&self) -> bool {
        !matches!(
            self,
            QuicError::Connection(_) | QuicError::Read { .. } | QuicError::Write { .. }
        )
    }
}

/// Why a TLS configuration could not be turned into a QUIC one.
fn crypto_error(addr: SocketAddr, e: impl std::fmt::Display) -> BindError {
    BindError::Io {
        addr: url(addr),
        source: io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TLS configuration unusable for QUIC: {e}"),
        ),
    }
}

/// One UDP socket serving QUIC connections: accepted ones
/// ([`accept`](Self::accept), when made with [`bind`](Self::bind)) and
/// dialled ones ([`connect`](Self::connect)). Every connection is one
/// [`Link`].
///
/// Dropping the endpoint stops accepting; existing links live on until
/// they close.
#[derive(Debug)]
pub struct QuicEndpoint {
    endpoint: quinn::Endpoint,
    local: SocketAddr,
    client: quinn::ClientConfig,
    config: QuicConfig,
    /// The stack of every link's strands (fit to the transport).
    spec: StackSpec,
    handshake_timeout: Duration,
    incoming: Option<tokio::sync::Mutex<mpsc::Receiver<Result<Link, AcceptError>>>>,
    task: Option<AbortHandle>,
}

impl Drop for QuicEndpoint {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// `spec` fit to the transport: `quic`, or `quic` with layers that take
/// messages (they run over framing on each strand).
fn check_spec(spec: &StackSpec, addr: SocketAddr) -> Result<StackSpec, BindError> {
    BindError::fit(spec, NAME, PROFILE, || url(addr))
}

impl QuicEndpoint {
    /// Binds `addr` to accept and dial QUIC connections with `tls` as
    /// identity and trust (mutual TLS) and `config` for every link. `spec`
    /// is `quic`, or `quic` with layers that take messages (each strand
    /// runs them over framing; QUIC brings its own reliability).
    ///
    /// # Errors
    ///
    /// [`BindError`] for another spec, a TLS configuration QUIC cannot use,
    /// or an address the OS refuses.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn bind(
        spec: &StackSpec,
        addr: SocketAddr,
        tls: &TlsConfig,
        config: QuicConfig,
    ) -> Result<Self, BindError> {
        let spec = check_spec(spec, addr)?;
        let mut crypto = (*tls.server).clone();
        crypto.alpn_protocols = vec![ALPN.to_vec()];
        let crypto = QuicServerConfig::try_from(crypto).map_err(|e| crypto_error(addr, e))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server
            .transport_config(config.transport())
            .migration(false)
            .max_incoming(MAX_INCOMING);
        let endpoint = endpoint_on(addr, Some(server))?;
        let mut this = Self::new(endpoint, addr, spec, tls, config)?;
        let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
        let task = tokio::spawn(accept_loop(
            this.endpoint.clone(),
            Arc::new(Accepting {
                timeout: this.handshake_timeout,
                config,
                spec: this.spec.clone(),
                local: this.local,
            }),
            tx,
        ))
        .abort_handle();
        this.incoming = Some(tokio::sync::Mutex::new(rx));
        this.task = Some(task);
        Ok(this)
    }

    /// Binds `addr` for dialling only: incoming connections are refused.
    ///
    /// # Errors
    ///
    /// As [`bind`](Self::bind).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn client(
        spec: &StackSpec,
        addr: SocketAddr,
        tls: &TlsConfig,
        config: QuicConfig,
    ) -> Result<Self, BindError> {
        let spec = check_spec(spec, addr)?;
        let endpoint = endpoint_on(addr, None)?;
        Self::new(endpoint, addr, spec, tls, config)
    }

    fn new(
        endpoint: quinn::Endpoint,
        addr: SocketAddr,
        spec: StackSpec,
        tls: &TlsConfig,
        config: QuicConfig,
    ) -> Result<Self, BindError> {
        let local = endpoint.local_addr().map_err(|source| BindError::Io {
            addr: url(addr),
            source,
        })?;
        let mut crypto = (*tls.client).clone();
        crypto.alpn_protocols = vec![ALPN.to_vec()];
        let crypto = QuicClientConfig::try_from(crypto).map_err(|e| crypto_error(addr, e))?;
        let mut client = quinn::ClientConfig::new(Arc::new(crypto));
        client.transport_config(config.transport());
        Ok(Self {
            endpoint,
            local,
            client,
            config,
            spec,
            handshake_timeout: tls.handshake_timeout,
            incoming: None,
            task: None,
        })
    }

    /// The address the endpoint is bound to (the actual port when bound to
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Waits for the next connection whose handshake finished, successfully
    /// or not.
    ///
    /// # Errors
    ///
    /// [`AcceptError::Handshake`] for a peer refused during the handshake
    /// (no certificate, untrusted or expired one, wrong ALPN, timeout); the
    /// endpoint stays usable: call `accept` again. [`AcceptError::Closed`]
    /// if the endpoint was made with [`client`](Self::client) or shut down.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no connection is lost if the future is dropped.
    pub async fn accept(&self) -> Result<Link, AcceptError> {
        let closed = || AcceptError::Closed {
            addr: url(self.local),
        };
        let Some(incoming) = &self.incoming else {
            return Err(closed());
        };
        let mut incoming = incoming.lock().await;
        incoming.recv().await.unwrap_or_else(|| Err(closed()))
    }

    /// Connects to `addr`, verifies that the server's certificate is valid
    /// for `server_name` (a DNS name or an IP address) and chains to the CA
    /// roots, presents our certificate, and returns the link.
    ///
    /// # Errors
    ///
    /// [`ConnectError::Handshake`] naming the reason (e.g. `invalid peer
    /// certificate: Expired`), or a timeout; [`ConnectError::EndpointClosed`]
    /// after [`close`](Self::close).
    ///
    /// TLS 1.3 finishes the client's side of the handshake before the
    /// server checks the client's certificate: a server refusing ours shows
    /// up as the link closing right away, not as an error here.
    pub async fn connect(&self, addr: SocketAddr, server_name: &str) -> Result<Link, ConnectError> {
        let failed = |e: String| ConnectError::Handshake {
            addr: url(addr),
            source: io::Error::other(e),
        };
        let connecting = self
            .endpoint
            .connect_with(self.client.clone(), addr, server_name)
            .map_err(|e| match e {
                quinn::ConnectError::EndpointStopping => {
                    ConnectError::EndpointClosed { addr: url(addr) }
                }
                e => failed(e.to_string()),
            })?;
        let conn = tokio::time::timeout(self.handshake_timeout, connecting)
            .await
            .map_err(|_| {
                failed(format!(
                    "no QUIC handshake within {:?}",
                    self.handshake_timeout
                ))
            })?
            .map_err(|e| failed(e.to_string()))?;
        let identity = driver::peer_identity(&conn).map_err(failed)?;
        Ok(driver::spawn(
            conn,
            &self.config,
            &self.spec,
            url(addr).into(),
            identity,
        ))
    }

    /// Closes every connection of the endpoint at once (unsent data is
    /// dropped) and stops accepting.
    pub fn close(&self) {
        self.endpoint
            .close(VarInt::from_u32(code::LOCAL), b"endpoint closed");
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

struct Accepting {
    timeout: Duration,
    config: QuicConfig,
    spec: StackSpec,
    local: SocketAddr,
}

async fn accept_loop(
    endpoint: quinn::Endpoint,
    ctx: Arc<Accepting>,
    tx: mpsc::Sender<Result<Link, AcceptError>>,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        // The semaphore is never closed.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let incoming = tokio::select! {
            () = tx.closed() => return,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => return,
            },
        };
        let ctx = ctx.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let result = handshake(&ctx, incoming).await;
            if let Err(error) = &result {
                tracing::warn!(target: "plexus::transport", %error, "quic peer refused");
            }
            let _ = tx.send(result).await;
            drop(slot);
        });
    }
}

async fn handshake(ctx: &Accepting, incoming: quinn::Incoming) -> Result<Link, AcceptError> {
    let peer = incoming.remote_address();
    let failed = |e: String| AcceptError::Handshake {
        addr: url(ctx.local),
        peer: peer.to_string(),
        source: io::Error::other(e),
    };
    let connecting = incoming.accept().map_err(|e| failed(e.to_string()))?;
    let conn = tokio::time::timeout(ctx.timeout, connecting)
        .await
        .map_err(|_| failed(format!("no QUIC handshake within {:?}", ctx.timeout)))?
        .map_err(|e| failed(e.to_string()))?;
    let identity = driver::peer_identity(&conn).map_err(failed)?;
    Ok(driver::spawn(
        conn,
        &ctx.config,
        &ctx.spec,
        url(peer).into(),
        identity,
    ))
}
