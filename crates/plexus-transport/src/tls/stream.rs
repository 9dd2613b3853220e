//! A TLS connection before it becomes a link, for transports that speak a
//! protocol of their own over TLS first (the WebSocket upgrade of `wss`):
//! the same configuration, certificate checks and handshake bound as the
//! `tls` transport, as an [`AsyncRead`] + [`AsyncWrite`] stream.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use rustls::Connection;

use super::socket::TlsSocket;
use super::{peer_identity, timed_out, TlsConfig};
use crate::link::PeerIdentity;

/// An established TLS connection (mutually authenticated, TLS 1.3) over
/// TCP, read and written as plaintext. Build a link over it with
/// [`Link::over_stream`](crate::Link::over_stream) and
/// [`Link::with_identity`](crate::Link::with_identity).
pub struct TlsStream {
    inner: tokio_rustls::TlsStream<TcpStream>,
    identity: PeerIdentity,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream").finish_non_exhaustive()
    }
}

impl TlsStream {
    fn established(inner: tokio_rustls::TlsStream<TcpStream>) -> io::Result<Self> {
        let identity = peer_identity(inner.get_ref().1.peer_certificates())?;
        Ok(Self { inner, identity })
    }

    /// The certificate the peer presented, verified against the CA roots.
    pub fn peer_identity(&self) -> &PeerIdentity {
        &self.identity
    }

    /// The connection as the `tls` transport's stream driver takes it:
    /// rustls's state over the TCP socket, and the peer's identity.
    pub(super) fn into_socket(self) -> (TlsSocket, PeerIdentity) {
        let socket = match self.inner {
            tokio_rustls::TlsStream::Client(s) => {
                let (tcp, conn) = s.into_inner();
                TlsSocket::new(tcp, Connection::Client(conn))
            }
            tokio_rustls::TlsStream::Server(s) => {
                let (tcp, conn) = s.into_inner();
                TlsSocket::new(tcp, Connection::Server(conn))
            }
        };
        (socket, self.identity)
    }
}

impl TlsConfig {
    /// Runs the server side of a handshake on an accepted `socket`, within
    /// [`handshake_timeout`](Self::handshake_timeout): the peer must
    /// present a certificate chaining to the CA roots.
    ///
    /// # Errors
    ///
    /// The handshake's error (`TimedOut` past the bound, `InvalidData` for
    /// what rustls refused, `PermissionDenied` without a certificate).
    pub async fn accept_stream(&self, socket: TcpStream) -> io::Result<TlsStream> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.server.clone());
        let tls = tokio::time::timeout(self.handshake_timeout, acceptor.accept(socket))
            .await
            .map_err(|_| timed_out(self.handshake_timeout))??;
        TlsStream::established(tls.into())
    }

    /// Runs the client side of a handshake on a connected `socket`, within
    /// [`handshake_timeout`](Self::handshake_timeout): the server's
    /// certificate must be valid for `server_name` (a DNS name or an IP
    /// address) and chain to the CA roots; ours is presented.
    ///
    /// # Errors
    ///
    /// As [`accept_stream`](Self::accept_stream), and `InvalidInput` for a
    /// `server_name` that is no name.
    pub async fn connect_stream(
        &self,
        socket: TcpStream,
        server_name: &str,
    ) -> io::Result<TlsStream> {
        self.connect_named(socket, parse_server_name(server_name)?)
            .await
    }

    /// [`connect_stream`](Self::connect_stream) with the name parsed.
    pub(super) async fn connect_named(
        &self,
        socket: TcpStream,
        name: ServerName<'static>,
    ) -> io::Result<TlsStream> {
        let connector = tokio_rustls::TlsConnector::from(self.client.clone());
        let tls = tokio::time::timeout(self.handshake_timeout, connector.connect(name, socket))
            .await
            .map_err(|_| timed_out(self.handshake_timeout))??;
        TlsStream::established(tls.into())
    }
}

/// `server_name` as rustls takes it (a DNS name or an IP address).
pub(super) fn parse_server_name(server_name: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(server_name.to_owned()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{server_name:?} is not a valid server name: {e}"),
        )
    })
}

impl AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
