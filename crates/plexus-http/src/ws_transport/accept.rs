//! The listening side: connections accepted in a background task, each
//! opened in a task of its own (TLS handshake for `wss`, then the first
//! request) at most [`MAX_HANDSHAKES`] at once, so a slow or silent client
//! holds one slot for at most the handshake timeout and never the others'
//! accepts. The first request decides what the connection is: an upgrade
//! on the transport's path becomes a link; with a web server attached,
//! anything else is handed to it whole; without one, it is answered with
//! the status that says why and closed.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use plexus_net::StackSpec;
use plexus_transport::handshakes::{Handshaken, Handshakes};
use plexus_transport::{AcceptError, Dialer, Link, LinkConfig, Listener, PeerIdentity};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::prefixed::Prefixed;
use super::{WsDialer, WsTransport};
use crate::decoder::{Decoded, Limits, RequestDecoder};
use crate::message::Request;
use crate::response::{encode_response, Response};
use crate::websocket::handshake::server_response;
use crate::websocket::Role;
use crate::RequestError;

/// Connections a listener opens at once (TLS handshake and first request);
/// further connections wait in the kernel's accept queue.
pub const MAX_HANDSHAKES: usize = 64;

/// What a listener shares with its connections' tasks.
pub(super) struct Accepting {
    pub(super) transport: WsTransport,
    pub(super) spec: StackSpec,
    pub(super) link: LinkConfig,
    pub(super) local: SocketAddr,
}

pub(super) struct WsListener {
    handshakes: Handshakes,
    dialer: Arc<dyn Dialer>,
}

impl WsListener {
    /// Starts accepting on `inner`.
    pub(super) fn start(inner: tokio::net::TcpListener, ctx: Accepting) -> Self {
        let dialer: Arc<dyn Dialer> = Arc::new(WsDialer {
            spec: ctx.spec.clone(),
            link: ctx.link,
            transport: ctx.transport.clone(),
        });
        let url = ctx.transport.url(ctx.local);
        let ctx = Arc::new(ctx);
        let handshakes = Handshakes::start(inner, url, MAX_HANDSHAKES, move |socket, peer, id| {
            let ctx = ctx.clone();
            async move { ctx.open(socket, peer, id).await }
        });
        Self { handshakes, dialer }
    }
}

impl Listener for WsListener {
    fn local_addr(&self) -> String {
        self.handshakes.local_addr().to_string()
    }

    fn accept(&self) -> plexus_transport::BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(self.handshakes.accept())
    }

    fn dialer(&self) -> Arc<dyn Dialer> {
        self.dialer.clone()
    }
}

/// What the first request on a connection turned out to be.
enum First {
    /// A whole request, the bytes it took, and what came after it.
    Request {
        request: Request,
        raw: Bytes,
        rest: Bytes,
    },
    /// A request whose body waits for `100 Continue`: only a web server
    /// can take it.
    Continue { raw: Bytes },
    /// Refused by the decoder.
    Malformed { error: RequestError, raw: Bytes },
    /// Closed before a whole request.
    Closed,
}

impl Accepting {
    fn refused(&self, peer: SocketAddr, why: impl Into<String>) -> AcceptError {
        AcceptError::Upgrade {
            addr: self.transport.url(self.local),
            peer: peer.to_string(),
            why: why.into(),
        }
    }

    async fn open(&self, socket: TcpStream, peer: SocketAddr, link_id: u64) -> Handshaken {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.transport.tls {
            return match tls.accept_stream(socket).await {
                Ok(stream) => {
                    let identity = stream.peer_identity().clone();
                    self.upgrade(stream, peer, link_id, Some(identity)).await
                }
                Err(source) => Handshaken::Refused(AcceptError::Handshake {
                    addr: self.transport.url(self.local),
                    peer: peer.to_string(),
                    source,
                }),
            };
        }
        self.upgrade(socket, peer, link_id, None).await
    }

    /// Reads the first request on `io` and upgrades, hands over or refuses.
    async fn upgrade<S>(
        &self,
        mut io: S,
        peer: SocketAddr,
        link_id: u64,
        identity: Option<PeerIdentity>,
    ) -> Handshaken
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let transport = &self.transport;
        let limits = match &transport.web {
            Some(web) => *web.limits(),
            None => Limits {
                max_body: 0,
                ..Limits::default()
            },
        };
        let first = tokio::time::timeout(
            transport.handshake_timeout,
            read_first(&mut io, limits, transport.web.is_some()),
        )
        .await;
        let refusal = match first {
            Err(_) => (
                Response::new(408, "no upgrade request in time\n"),
                "no upgrade request in time".to_owned(),
            ),
            Ok(First::Closed) => {
                return Handshaken::Refused(self.refused(peer, "closed before a request"))
            }
            Ok(First::Continue { raw }) | Ok(First::Malformed { raw, .. })
                if transport.web.is_some() =>
            {
                return self.to_web(io, raw, peer);
            }
            Ok(First::Continue { .. }) => (
                Response::new(417, "no request body expected here\n"),
                "an upgrade request with a body".to_owned(),
            ),
            Ok(First::Malformed { error, .. }) => (
                Response::new(error.status(), format!("{error}\n")),
                error.to_string(),
            ),
            Ok(First::Request { request, raw, rest }) => {
                if request.path() != transport.path {
                    if transport.web.is_some() {
                        return self.to_web(io, raw, peer);
                    }
                    (
                        Response::new(404, "no WebSocket endpoint here\n"),
                        format!(
                            "upgrade asked on {:?}, not {:?}",
                            request.path(),
                            transport.path
                        ),
                    )
                } else {
                    match server_response(&request, &transport.config) {
                        Ok((switching, extensions)) => {
                            if let Err(e) = write_response(&mut io, &switching, true).await {
                                return Handshaken::Refused(self.refused(peer, e.to_string()));
                            }
                            let stack =
                                transport.stack(&self.spec, Role::Server, link_id, extensions);
                            let mut link = Link::over_stream(
                                Prefixed::new(rest, io),
                                stack,
                                transport.url(peer),
                                self.link,
                            );
                            if let Some(identity) = identity {
                                link = link.with_identity(identity);
                            }
                            return Handshaken::Link(link);
                        }
                        Err(e) => (e.response(), e.to_string()),
                    }
                }
            }
        };
        let (response, why) = refusal;
        // Best effort: the refusal is what the peer gets to read.
        let _ = tokio::time::timeout(
            transport.handshake_timeout,
            write_response(&mut io, &response, false),
        )
        .await;
        Handshaken::Refused(self.refused(peer, why))
    }

    fn to_web<S>(&self, io: S, raw: Bytes, peer: SocketAddr) -> Handshaken
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        if let Some(web) = &self.transport.web {
            let scheme = if self.transport.scheme() == super::SECURE_NAME {
                "https"
            } else {
                "http"
            };
            web.clone()
                .serve_stream(Prefixed::new(raw, io), format!("{scheme}://{peer}"));
        }
        Handshaken::HandedOver
    }
}

/// Reads until the first request on `io` is whole (or refused, or needs a
/// `100 Continue` that only a web server would send), keeping every byte
/// read so that the connection can be handed over as it came.
async fn read_first<S: AsyncRead + Unpin>(io: &mut S, limits: Limits, web: bool) -> First {
    let mut decoder = RequestDecoder::new(limits);
    let mut buf = BytesMut::with_capacity(1024);
    // Only kept when there is someone to hand the connection to.
    let mut raw = BytesMut::new();
    loop {
        match decoder.decode(&mut buf) {
            Ok(Some(Decoded::Request(request))) => {
                return First::Request {
                    request,
                    raw: raw.freeze(),
                    rest: buf.freeze(),
                }
            }
            Ok(Some(Decoded::Continue)) => return First::Continue { raw: raw.freeze() },
            Ok(None) => {}
            Err(error) => {
                return First::Malformed {
                    error,
                    raw: raw.freeze(),
                }
            }
        }
        let before = buf.len();
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return First::Closed,
            Ok(_) if web => raw.extend_from_slice(&buf[before..]),
            Ok(_) => {}
        }
    }
}

async fn write_response<S: AsyncWrite + Unpin>(
    io: &mut S,
    response: &Response,
    keep_alive: bool,
) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    encode_response(&mut out, response, keep_alive, false)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    io.write_all(&out).await?;
    io.flush().await
}
