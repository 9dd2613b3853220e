//! `ws` and `wss`: transports whose links are WebSocket connections, so
//! two nodes talk through an HTTP(S) port (and whatever proxies let
//! WebSocket through).
//!
//! Register one in a node's [`TransportRegistry`](plexus_transport::TransportRegistry)
//! and `ws://host:port/name` (or `wss://`) is an actor URI: the dialler
//! opens a TCP connection (for `wss`, a mutually authenticated TLS 1.3
//! connection with the node's certificate, as `tls://`), asks to upgrade on
//! the transport's path (`/plexus` by default) and, once the server
//! answers `101`, the connection carries one binary WebSocket message per
//! link message. Under the spec's layers sits a [`WebSocketLayer`]:
//! masking, fragmentation, ping, the closing handshake and its close codes
//! (see [`websocket`](crate::websocket)).
//!
//! **One port for the web and the nodes.** With a [`WebServer`] attached
//! ([`WsTransport::web`]), the listener serves it too: a first request that
//! is not an upgrade on the transport's path goes to the web server whole,
//! on the same connection. Without one, such a connection is answered
//! with its status (404 for another path, 400 or 426 for a bad upgrade,
//! 408 for none in time) and dropped; the listener goes on.
//!
//! **Hostile peers.** Connections are opened (TLS handshake, first
//! request) in tasks of their own, at most [`MAX_HANDSHAKES`] at once, each
//! within the handshake timeout: a silent client costs one slot for that
//! long, not the listener.
//!
//! Profile: messages, reliable and ordered (TCP underneath); default stack
//! `ws` (or `wss`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use plexus_net::{Guarantees, LinkContext, Stack, StackSpec, TransportProfile};
#[cfg(feature = "tls")]
use plexus_transport::tls::TlsConfig;
use plexus_transport::{
    BindError, ConnectError, Dialer, Link, LinkConfig, Listener, PeerIdentity, Transport,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::server::WebServer;
use crate::websocket::handshake::{check_server_response, client_request, Extensions};
use crate::websocket::layer::{WebSocketLayer, WsTotals};
use crate::websocket::{Role, WsConfig};

mod accept;
mod prefixed;

pub use accept::MAX_HANDSHAKES;
use accept::{Accepting, WsListener};
pub(crate) use prefixed::Prefixed;

/// The plain transport's name: its URI scheme.
pub const NAME: &str = "ws";
/// The secure transport's name ([`WsTransport::secure`]).
pub const SECURE_NAME: &str = "wss";

/// What the transport carries: whole messages, reliable and ordered.
pub const PROFILE: TransportProfile =
    TransportProfile::datagrams(None).with_guarantees(Guarantees::RELIABLE_ORDERED);

/// The `ws` (or `wss`) transport. See the [module docs](self).
#[derive(Clone)]
pub struct WsTransport {
    path: String,
    config: WsConfig,
    handshake_timeout: Duration,
    #[cfg(feature = "tls")]
    tls: Option<TlsConfig>,
    web: Option<Arc<WebServer>>,
    totals: Arc<WsTotals>,
}

impl std::fmt::Debug for WsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsTransport")
            .field("scheme", &self.scheme())
            .field("path", &self.path)
            .field("config", &self.config)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("web", &self.web.is_some())
            .finish()
    }
}

impl Default for WsTransport {
    fn default() -> Self {
        Self {
            path: "/plexus".into(),
            config: WsConfig::default(),
            handshake_timeout: Duration::from_secs(5),
            #[cfg(feature = "tls")]
            tls: None,
            web: None,
            totals: Arc::default(),
        }
    }
}

impl WsTransport {
    /// `ws` with the defaults: path `/plexus`, 16 MiB messages, a 5 s
    /// opening handshake.
    pub fn new() -> Self {
        Self::default()
    }

    /// `wss`: as [`new`](Self::new), over TLS 1.3 with `tls` as identity
    /// and trust, both ways (mutual, as `tls://`: a dialled peer's
    /// certificate must be valid for the host of its URI, and links carry
    /// the peer's certificate for the node handshake to check). The TLS
    /// handshake counts in the handshake timeout's bound.
    #[cfg(feature = "tls")]
    pub fn secure(tls: TlsConfig) -> Self {
        Self {
            tls: Some(tls),
            ..Self::default()
        }
    }

    /// The path upgrades are asked and accepted on.
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// The WebSocket bounds of every connection, and whether it offers and
    /// accepts permessage-deflate ([`WsConfig::deflate`]; off by default:
    /// a stack compresses with its own `compression` layer).
    pub fn config(mut self, config: WsConfig) -> Self {
        self.config = config;
        self
    }

    /// How long a connection may take to upgrade (TLS handshake included),
    /// listening and dialling. Default 5 s.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Serves `server` on every port this transport listens on: requests
    /// other than the upgrade go to it (see the [module docs](self)).
    pub fn web(mut self, server: WebServer) -> Self {
        self.web = Some(Arc::new(server));
        self
    }

    /// What the WebSocket layers of this transport's connections counted so
    /// far (messages; connections closed by peers; connections we closed,
    /// by close code: protocol errors such as unmasked client frames,
    /// invalid UTF-8, ping floods, oversized frames). Shared by its clones:
    /// take it before registering the transport, it stays live.
    pub fn totals(&self) -> Arc<WsTotals> {
        self.totals.clone()
    }

    /// The URI scheme: `ws`, or `wss` over TLS.
    pub fn scheme(&self) -> &'static str {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return SECURE_NAME;
        }
        NAME
    }

    fn url(&self, addr: impl std::fmt::Display) -> String {
        format!("{}://{addr}", self.scheme())
    }

    fn stack(&self, spec: &StackSpec, role: Role, link_id: u64, extensions: Extensions) -> Stack {
        let ctx = LinkContext {
            now: Instant::now(),
            link_id,
        };
        let seed = match role {
            Role::Client => rand::random(),
            Role::Server => 0,
        };
        let mut layers: Vec<Box<dyn plexus_net::Layer>> = vec![Box::new(
            WebSocketLayer::new(role, self.config, seed)
                .with_extensions(extensions)
                .with_totals(self.totals.clone()),
        )];
        layers.extend(spec.build_layers(ctx));
        Stack::new(None, layers)
    }
}

impl Transport for WsTransport {
    fn name(&self) -> &str {
        self.scheme()
    }

    fn profile(&self) -> TransportProfile {
        PROFILE
    }

    fn default_stack(&self) -> &str {
        self.scheme()
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> plexus_transport::BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let socket: SocketAddr = addr.parse().map_err(|_| BindError::Address {
                addr: self.url(addr),
                why: "not a socket address (host:port)".into(),
            })?;
            let io = |source| BindError::Io {
                addr: self.url(socket),
                source,
            };
            let inner = tokio::net::TcpListener::bind(socket).await.map_err(io)?;
            let local = inner.local_addr().map_err(io)?;
            let ctx = Accepting {
                transport: self.clone(),
                spec: spec.clone(),
                link,
                local,
            };
            Ok(Box::new(WsListener::start(inner, ctx)) as Box<dyn Listener>)
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> plexus_transport::BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        let dialer: Arc<dyn Dialer> = Arc::new(WsDialer {
            spec: spec.clone(),
            link,
            transport: self.clone(),
        });
        Box::pin(std::future::ready(Ok(dialer)))
    }
}

struct WsDialer {
    spec: StackSpec,
    link: LinkConfig,
    transport: WsTransport,
}

impl WsDialer {
    async fn connect_to(&self, addr: &str) -> Result<Link, ConnectError> {
        let url = || self.transport.url(addr);
        let socket_addr = tokio::net::lookup_host(addr)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| ConnectError::Address {
                addr: url(),
                why: "not host:port, or the host does not resolve".into(),
            })?;
        let socket = TcpStream::connect(socket_addr)
            .await
            .map_err(|source| ConnectError::Io {
                addr: url(),
                source,
            })?;
        let _ = socket.set_nodelay(true);
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.transport.tls {
            let stream = tls
                .connect_stream(socket, plexus_transport::tls::server_name(addr))
                .await
                .map_err(|source| ConnectError::Handshake {
                    addr: url(),
                    source,
                })?;
            let identity = stream.peer_identity().clone();
            return self.upgrade(stream, addr, Some(identity)).await;
        }
        self.upgrade(socket, addr, None).await
    }

    /// Asks to upgrade on `io` and starts the link once the server agreed.
    async fn upgrade<S>(
        &self,
        mut io: S,
        addr: &str,
        identity: Option<PeerIdentity>,
    ) -> Result<Link, ConnectError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let url = || self.transport.url(addr);
        let (request, offer) = client_request(
            addr,
            &self.transport.path,
            rand::random(),
            &self.transport.config,
        );
        let handshake = async {
            io.write_all(&request).await?;
            io.flush().await?;
            let mut buf = BytesMut::with_capacity(1024);
            loop {
                match check_server_response(&mut buf, &offer) {
                    Ok(Some(extensions)) => return Ok(Ok((buf.freeze(), extensions))),
                    Ok(None) => {}
                    Err(e) => return Ok(Err(e.to_string())),
                }
                if io.read_buf(&mut buf).await? == 0 {
                    return Ok(Err("the server closed the connection".to_owned()));
                }
            }
        };
        let upgrade = |why: String| ConnectError::Upgrade { addr: url(), why };
        let (leftover, extensions) =
            match tokio::time::timeout(self.transport.handshake_timeout, handshake).await {
                Err(_) => return Err(upgrade("no answer in time".into())),
                Ok(Err(source)) => {
                    return Err(ConnectError::Io {
                        addr: url(),
                        source,
                    })
                }
                Ok(Ok(Err(why))) => return Err(upgrade(why)),
                Ok(Ok(Ok(agreed))) => agreed,
            };
        let stack = self
            .transport
            .stack(&self.spec, Role::Client, 0, extensions);
        let link = Link::over_stream(Prefixed::new(leftover, io), stack, url(), self.link);
        Ok(match identity {
            Some(identity) => link.with_identity(identity),
            None => link,
        })
    }
}

impl Dialer for WsDialer {
    fn connect<'a>(
        &'a self,
        addr: &'a str,
    ) -> plexus_transport::BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(self.connect_to(addr))
    }
}
