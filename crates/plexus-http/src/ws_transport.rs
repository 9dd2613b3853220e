//! `ws`: a transport whose links are WebSocket connections, so two nodes
//! talk through an HTTP port (and whatever proxies let WebSocket through).
//!
//! Register it in a node's [`TransportRegistry`](plexus_transport::TransportRegistry)
//! and `ws://host:port/name` is an actor URI: the dialler opens a TCP
//! connection, asks to upgrade on the transport's path (`/plexus` by
//! default) and, once the server answers `101`, the connection carries one
//! binary WebSocket message per link message. Under the spec's layers sits
//! a [`WebSocketLayer`]: masking, fragmentation, ping, the closing
//! handshake and its close codes (see [`websocket`](crate::websocket)).
//! A connection that does not upgrade properly within the handshake
//! timeout is answered with its status (404 for another path, 400, 426)
//! and dropped; the listener goes on.
//!
//! Profile: messages, reliable and ordered (TCP underneath); default stack
//! `ws`.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use plexus_net::{Guarantees, LinkContext, Stack, StackSpec, TransportProfile};
use plexus_transport::{
    AcceptError, BindError, ConnectError, Dialer, Link, LinkConfig, Listener, Transport,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::decoder::{Decoded, Limits, RequestDecoder};
use crate::response::{encode_response, Response};
use crate::websocket::handshake::{check_server_response, client_request, server_response};
use crate::websocket::layer::WebSocketLayer;
use crate::websocket::{Role, WsConfig};

/// The transport's name: its URI scheme.
pub const NAME: &str = "ws";

/// What the transport carries: whole messages, reliable and ordered.
pub const PROFILE: TransportProfile =
    TransportProfile::datagrams(None).with_guarantees(Guarantees::RELIABLE_ORDERED);

/// The `ws` transport. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct WsTransport {
    path: String,
    config: WsConfig,
    handshake_timeout: Duration,
}

impl Default for WsTransport {
    fn default() -> Self {
        Self {
            path: "/plexus".into(),
            config: WsConfig::default(),
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

impl WsTransport {
    /// The transport with the defaults: path `/plexus`, 16 MiB messages, a
    /// 5 s opening handshake.
    pub fn new() -> Self {
        Self::default()
    }

    /// The path upgrades are asked and accepted on.
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// The WebSocket bounds of every connection.
    pub fn config(mut self, config: WsConfig) -> Self {
        self.config = config;
        self
    }

    fn stack(&self, spec: &StackSpec, role: Role, link_id: u64) -> Stack {
        let ctx = LinkContext {
            now: Instant::now(),
            link_id,
        };
        let seed = match role {
            Role::Client => rand::random(),
            Role::Server => 0,
        };
        let mut layers: Vec<Box<dyn plexus_net::Layer>> =
            vec![Box::new(WebSocketLayer::new(role, self.config, seed))];
        layers.extend(spec.build_layers(ctx));
        Stack::new(None, layers)
    }
}

fn url(addr: impl std::fmt::Display) -> String {
    format!("{NAME}://{addr}")
}

impl Transport for WsTransport {
    fn name(&self) -> &str {
        NAME
    }

    fn profile(&self) -> TransportProfile {
        PROFILE
    }

    fn default_stack(&self) -> &str {
        NAME
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> plexus_transport::BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let socket: SocketAddr = addr.parse().map_err(|_| BindError::Address {
                addr: url(addr),
                why: "not a socket address (host:port)".into(),
            })?;
            let inner = tokio::net::TcpListener::bind(socket)
                .await
                .map_err(|source| BindError::Io {
                    addr: url(socket),
                    source,
                })?;
            let local = inner.local_addr().map_err(|source| BindError::Io {
                addr: url(socket),
                source,
            })?;
            Ok(Box::new(WsListener {
                inner,
                local,
                spec: spec.clone(),
                link,
                transport: self.clone(),
                next_link: AtomicU64::new(0),
            }) as Box<dyn Listener>)
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

struct WsListener {
    inner: tokio::net::TcpListener,
    local: SocketAddr,
    spec: StackSpec,
    link: LinkConfig,
    transport: WsTransport,
    next_link: AtomicU64,
}

impl WsListener {
    async fn accept_one(&self) -> Result<Link, AcceptError> {
        let (mut socket, peer) = self
            .inner
            .accept()
            .await
            .map_err(|source| AcceptError::Io {
                addr: url(self.local),
                source,
            })?;
        let _ = socket.set_nodelay(true);
        let refused = |why: String| AcceptError::Upgrade {
            addr: url(self.local),
            peer: peer.to_string(),
            why,
        };
        let upgrade = tokio::time::timeout(
            self.transport.handshake_timeout,
            read_upgrade(&mut socket, &self.transport.path),
        )
        .await
        .unwrap_or(Err((
            Response::new(408, "no upgrade request in time\n"),
            "no upgrade request in time".to_owned(),
        )));
        let leftover = match upgrade {
            Ok((response, leftover)) => {
                write_response(&mut socket, &response, true)
                    .await
                    .map_err(|e| refused(e.to_string()))?;
                leftover
            }
            Err((response, why)) => {
                let _ = write_response(&mut socket, &response, false).await;
                tracing::debug!(target: "plexus::http", %peer, "refused a ws connection: {why}");
                return Err(refused(why));
            }
        };
        let id = self.next_link.fetch_add(1, Ordering::Relaxed);
        let stack = self.transport.stack(&self.spec, Role::Server, id);
        Ok(Link::over_stream(
            Prefixed::new(leftover, socket),
            stack,
            url(peer),
            self.link,
        ))
    }
}

impl Listener for WsListener {
    fn local_addr(&self) -> String {
        self.local.to_string()
    }

    fn accept(&self) -> plexus_transport::BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(self.accept_one())
    }

    fn dialer(&self) -> Arc<dyn Dialer> {
        Arc::new(WsDialer {
            spec: self.spec.clone(),
            link: self.link,
            transport: self.transport.clone(),
        })
    }
}

/// Reads an upgrade request on `path`: the `101` answer and the bytes
/// after the request, or the refusal to send and why.
async fn read_upgrade(
    socket: &mut TcpStream,
    path: &str,
) -> Result<(Response, Bytes), (Response, String)> {
    let mut decoder = RequestDecoder::new(Limits {
        max_body: 0,
        ..Limits::default()
    });
    let mut buf = BytesMut::with_capacity(1024);
    let request = loop {
        match decoder.decode(&mut buf) {
            Ok(Some(Decoded::Request(r))) => break r,
            Ok(Some(Decoded::Continue)) | Ok(None) => {}
            Err(e) => return Err((Response::new(e.status(), format!("{e}\n")), e.to_string())),
        }
        match socket.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                return Err((
                    Response::new(400, "closed before an upgrade request\n"),
                    "closed before an upgrade request".into(),
                ))
            }
            Ok(_) => {}
        }
    };
    if request.path() != path {
        return Err((
            Response::new(404, "no WebSocket endpoint here\n"),
            format!("upgrade asked on {:?}, not {path:?}", request.path()),
        ));
    }
    match server_response(&request) {
        Ok(response) => Ok((response, buf.freeze())),
        Err(e) => Err((e.response(), e.to_string())),
    }
}

async fn write_response(
    socket: &mut TcpStream,
    response: &Response,
    keep_alive: bool,
) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    encode_response(&mut out, response, keep_alive, false)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    socket.write_all(&out).await
}

struct WsDialer {
    spec: StackSpec,
    link: LinkConfig,
    transport: WsTransport,
}

impl WsDialer {
    async fn connect_to(&self, addr: &str) -> Result<Link, ConnectError> {
        let socket_addr = tokio::net::lookup_host(addr)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| ConnectError::Address {
                addr: url(addr),
                why: "not host:port, or the host does not resolve".into(),
            })?;
        let mut socket =
            TcpStream::connect(socket_addr)
                .await
                .map_err(|source| ConnectError::Io {
                    addr: url(addr),
                    source,
                })?;
        let _ = socket.set_nodelay(true);
        let (request, accept) = client_request(addr, &self.transport.path, rand::random());
        let handshake = async {
            socket.write_all(&request).await?;
            let mut buf = BytesMut::with_capacity(1024);
            loop {
                match check_server_response(&mut buf, &accept) {
                    Ok(Some(())) => return Ok(Ok(buf.freeze())),
                    Ok(None) => {}
                    Err(e) => return Ok(Err(e.to_string())),
                }
                if socket.read_buf(&mut buf).await? == 0 {
                    return Ok(Err("the server closed the connection".to_owned()));
                }
            }
        };
        let upgrade = |why: String| ConnectError::Upgrade {
            addr: url(addr),
            why,
        };
        let leftover = match tokio::time::timeout(self.transport.handshake_timeout, handshake).await
        {
            Err(_) => return Err(upgrade("no answer in time".into())),
            Ok(Err(source)) => {
                return Err(ConnectError::Io {
                    addr: url(addr),
                    source,
                })
            }
            Ok(Ok(Err(why))) => return Err(upgrade(why)),
            Ok(Ok(Ok(leftover))) => leftover,
        };
        let stack = self.transport.stack(&self.spec, Role::Client, 0);
        Ok(Link::over_stream(
            Prefixed::new(leftover, socket),
            stack,
            url(addr),
            self.link,
        ))
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

/// A stream whose first bytes were read already (after the opening
/// handshake's head): they are read again first.
struct Prefixed {
    prefix: Bytes,
    io: TcpStream,
}

impl Prefixed {
    fn new(prefix: Bytes, io: TcpStream) -> Self {
        Self { prefix, io }
    }
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let head = self.prefix.split_to(n);
            buf.put_slice(&head);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
