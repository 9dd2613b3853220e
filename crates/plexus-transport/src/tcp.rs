//! TCP: one driver task per connection, `TCP_NODELAY` set, vectored writes
//! of whole frame chains, reads of 128 KiB per system call.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use bytes::Bytes;
//! use plexus_net::StackSpec;
//! use plexus_transport::tcp::{self, TcpListener};
//!
//! let spec: StackSpec = "tcp / framing".parse()?;
//! let listener = TcpListener::bind(&spec, "127.0.0.1:0".parse()?).await?;
//! let client = tcp::connect(&spec, listener.local_addr()).await?;
//! let mut server = listener.accept().await?;
//! client.send(Bytes::from_static(b"hello")).await?;
//! assert_eq!(server.recv_message().await?, "hello");
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use plexus_net::{LinkContext, StackSpec, TransportProfile};

use crate::conn::now;
use crate::error::{AcceptError, BindError, ConnectError};
use crate::link::{Link, LinkConfig};
use crate::stream;

/// The transport's name: the first word of its stack specs.
pub const NAME: &str = "tcp";

/// What the transport carries.
pub const PROFILE: TransportProfile = TransportProfile::byte_stream();

fn url(addr: SocketAddr) -> String {
    format!("tcp://{addr}")
}

/// Accepts TCP connections, each becoming a [`Link`] with its own stack
/// built from the listener's spec.
#[derive(Debug)]
pub struct TcpListener {
    inner: tokio::net::TcpListener,
    spec: StackSpec,
    config: LinkConfig,
    local: SocketAddr,
    next_link: AtomicU64,
}

impl TcpListener {
    /// Listens on `addr` with links built from `spec` (a `tcp / ...` spec)
    /// and default buffers.
    ///
    /// # Errors
    ///
    /// [`BindError`] if the spec is not for TCP or the OS refuses the
    /// address.
    pub async fn bind(spec: &StackSpec, addr: SocketAddr) -> Result<Self, BindError> {
        Self::bind_with(spec, addr, LinkConfig::default()).await
    }

    /// As [`bind`](TcpListener::bind), with `config` for every accepted link.
    ///
    /// # Errors
    ///
    /// As [`bind`](TcpListener::bind).
    pub async fn bind_with(
        spec: &StackSpec,
        addr: SocketAddr,
        config: LinkConfig,
    ) -> Result<Self, BindError> {
        let spec = &BindError::fit(spec, NAME, PROFILE, || url(addr))?;
        let inner = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| BindError::Io {
                addr: url(addr),
                source,
            })?;
        let std = inner.into_std().map_err(|source| BindError::Io {
            addr: url(addr),
            source,
        })?;
        Self::from_std(spec, std, config)
    }

    /// As [`bind_with`](TcpListener::bind_with), on a socket bound by the
    /// caller with options of its own (`SO_REUSEPORT` for one listener per
    /// core, a backlog, a device): it is made non-blocking and registered
    /// with the current runtime.
    ///
    /// # Errors
    ///
    /// As [`bind`](TcpListener::bind).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn from_std(
        spec: &StackSpec,
        listener: std::net::TcpListener,
        config: LinkConfig,
    ) -> Result<Self, BindError> {
        let local = listener.local_addr().map_err(|source| BindError::Io {
            addr: "tcp://(unbound socket)".into(),
            source,
        })?;
        let io = |source| BindError::Io {
            addr: url(local),
            source,
        };
        let spec = &BindError::fit(spec, NAME, PROFILE, || url(local))?;
        listener.set_nonblocking(true).map_err(io)?;
        let inner = tokio::net::TcpListener::from_std(listener).map_err(io)?;
        Ok(Self {
            inner,
            spec: spec.clone(),
            config,
            local,
            next_link: AtomicU64::new(0),
        })
    }

    /// The address the listener is bound to (with the actual port when bound
    /// to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Waits for the next connection and starts its driver.
    ///
    /// # Errors
    ///
    /// [`AcceptError::Io`] if accepting failed; the listener stays usable.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the driver task is spawned).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no connection is lost if the future is dropped.
    pub async fn accept(&self) -> Result<Link, AcceptError> {
        let (socket, peer) = self
            .inner
            .accept()
            .await
            .map_err(|source| AcceptError::Io {
                addr: url(self.local),
                source,
            })?;
        if let Err(error) = socket.set_nodelay(true) {
            tracing::debug!(target: "plexus::transport", %peer, %error, "set_nodelay failed");
        }
        let link_id = self.next_link.fetch_add(1, Ordering::Relaxed);
        let stack = self.spec.build_link(LinkContext {
            now: now(),
            link_id,
        });
        Ok(stream::spawn(
            stream::TcpSocket::new(socket),
            stack,
            url(peer).into(),
            self.config,
        ))
    }
}

/// Connects to `addr` with a stack built from `spec` (a `tcp / ...` spec)
/// and default buffers.
///
/// # Errors
///
/// [`ConnectError`] if the spec is not for TCP or the connection fails, e.g.
/// `connect tcp://127.0.0.1:4000: Connection refused (os error 111)`.
///
/// # Panics
///
/// Outside a tokio runtime (the driver task is spawned).
pub async fn connect(spec: &StackSpec, addr: SocketAddr) -> Result<Link, ConnectError> {
    connect_with(spec, addr, LinkConfig::default()).await
}

/// As [`connect`], with `config` for the link.
///
/// # Errors
///
/// As [`connect`].
///
/// # Panics
///
/// Outside a tokio runtime.
pub async fn connect_with(
    spec: &StackSpec,
    addr: SocketAddr,
    config: LinkConfig,
) -> Result<Link, ConnectError> {
    let spec = &ConnectError::fit(spec, NAME, PROFILE, || url(addr))?;
    let socket = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| ConnectError::Io {
            addr: url(addr),
            source,
        })?;
    if let Err(error) = socket.set_nodelay(true) {
        tracing::debug!(target: "plexus::transport", %addr, %error, "set_nodelay failed");
    }
    let stack = spec.build(now());
    Ok(stream::spawn(
        stream::TcpSocket::new(socket),
        stack,
        url(addr).into(),
        config,
    ))
}
