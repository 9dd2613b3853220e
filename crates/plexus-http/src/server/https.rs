//! HTTPS for browsers: [`WebServer::listen_https`] (and
//! [`listen_https_per_core`](WebServer::listen_https_per_core)) serve the
//! server's routes and files over TLS 1.2 or 1.3 with a certificate chain
//! and key from PEM ([`HttpsConfig`]), asking no client certificate
//! (unlike `tls://` and `wss://`, whose links are between certified
//! nodes), with ALPN `http/1.1`. What a user sees is documented on
//! `listen_https`; how it is done:
//!
//! ```text
//!  accept task (plexus_transport::handshakes, ≤ max_handshakes at once)
//!    └─ a task per connection: peek the first byte
//!         ├─ an HTTP method's letter ─► 400 "use https://", lingering close
//!         └─ rustls handshake (tokio-rustls, ring), within the timeout
//!              └─ WebServer::serve_stream: a `tcp / http` link over the
//!                 TLS stream, the same layer, routes and totals as `listen`
//! ```
//!
//! Every outcome of a handshake is counted in [`HttpsTotals`] before the
//! connection is dropped, and logged at debug level: failed handshakes
//! are routine (browsers abort speculative connections, scanners probe).
//! No link comes out of the `Handshakes` queue (each connection is handed
//! to the web server or dropped by its own task); the listener's future
//! only drains accept errors so that the accepting never waits on a full
//! queue.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use plexus_transport::handshakes::{Handshaken, Handshakes};
use plexus_transport::{AcceptError, BindError};
use rustls::ServerConfig;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::per_core::{self, PerCoreServer};
use super::{parse_addr, ServeError, WebServer};
use crate::response::{encode_response, Response};

/// The first byte of a TLS connection: a record of content type
/// `handshake` (RFC 8446, section 5.1; RFC 5246, section 6.2.1).
const TLS_HANDSHAKE: u8 = 22;

/// Most bytes read from a plain-HTTP client after its `400` while waiting
/// for it to close.
const PLAIN_DRAIN: usize = 64 << 10;

/// Why an [`HttpsConfig`] could not be built. Nothing was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpsConfigError {
    /// A PEM file could not be read.
    #[error("load HTTPS {what} from {}: {source}", path.display())]
    Read {
        /// `certificate` or `private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A PEM input is malformed or holds no certificate (or no key).
    #[error("load HTTPS {what}{}: {detail}", from(.path.as_deref()))]
    Pem {
        /// `certificate` or `private key`.
        what: &'static str,
        /// The file, if the PEM came from one.
        path: Option<PathBuf>,
        /// What is wrong.
        detail: String,
    },
    /// rustls refused the pair: the key does not match the certificate,
    /// or its type is not supported.
    #[error("HTTPS certificate and private key{} refused: {detail}", from_pair(.paths.as_ref()))]
    Refused {
        /// The certificate and key files, if they came from files.
        paths: Option<(PathBuf, PathBuf)>,
        /// rustls's reason.
        detail: String,
    },
}

fn from(path: Option<&Path>) -> String {
    path.map_or_else(String::new, |p| format!(" from {}", p.display()))
}

fn from_pair(paths: Option<&(PathBuf, PathBuf)>) -> String {
    paths.map_or_else(String::new, |(cert, key)| {
        format!(" ({}, {})", cert.display(), key.display())
    })
}

/// An HTTPS listener's certificate, key and bounds, and its handshake
/// totals. See [`WebServer::listen_https`].
///
/// Cheap to clone; clones share the rustls configuration and the totals.
#[derive(Clone)]
pub struct HttpsConfig {
    tls: Arc<ServerConfig>,
    handshake_timeout: Duration,
    max_handshakes: usize,
    totals: Arc<HttpsTotals>,
}

impl std::fmt::Debug for HttpsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsConfig")
            .field("handshake_timeout", &self.handshake_timeout)
            .field("max_handshakes", &self.max_handshakes)
            .finish_non_exhaustive()
    }
}

impl HttpsConfig {
    /// Builds the configuration from in-memory PEM: `cert_chain` (the
    /// server's certificate first, then the intermediates a browser needs
    /// to reach its roots) and `key` (PKCS#8, PKCS#1 or SEC1). TLS 1.2 and
    /// 1.3 with rustls's defaults (`ring` provider), no client
    /// authentication, ALPN `http/1.1`; a 10 s handshake timeout and 64
    /// handshakes at once.
    ///
    /// # Errors
    ///
    /// [`HttpsConfigError`] if a PEM input is malformed or empty, or rustls
    /// refuses the pair (e.g. the key does not match the certificate).
    pub fn from_pem(cert_chain: &[u8], key: &[u8]) -> Result<Self, HttpsConfigError> {
        Self::build(cert_chain, key, None)
    }

    /// As [`from_pem`](Self::from_pem), reading the two PEM files.
    ///
    /// # Errors
    ///
    /// [`HttpsConfigError::Read`] naming the file that could not be read,
    /// or as [`from_pem`](Self::from_pem), naming the files.
    pub fn from_pem_files(
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self, HttpsConfigError> {
        let (cert_path, key_path) = (cert_chain.as_ref(), key.as_ref());
        let read = |what, path: &Path| {
            std::fs::read(path).map_err(|source| HttpsConfigError::Read {
                what,
                path: path.to_owned(),
                source,
            })
        };
        Self::build(
            &read("certificate", cert_path)?,
            &read("private key", key_path)?,
            Some((cert_path, key_path)),
        )
    }

    fn build(
        cert_chain: &[u8],
        key: &[u8],
        paths: Option<(&Path, &Path)>,
    ) -> Result<Self, HttpsConfigError> {
        let pem_error = |what, path: Option<&Path>, e: pem::Error| HttpsConfigError::Pem {
            what,
            path: path.map(Path::to_owned),
            detail: match e {
                pem::Error::NoItemsFound => format!("no PEM {what} found"),
                e => e.to_string(),
            },
        };
        let chain = CertificateDer::pem_slice_iter(cert_chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error("certificate", paths.map(|p| p.0), e))?;
        if chain.is_empty() {
            return Err(pem_error(
                "certificate",
                paths.map(|p| p.0),
                pem::Error::NoItemsFound,
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| pem_error("private key", paths.map(|p| p.1), e))?;
        let refused = |e: rustls::Error| HttpsConfigError::Refused {
            paths: paths.map(|(c, k)| (c.to_owned(), k.to_owned())),
            detail: match e {
                rustls::Error::InconsistentKeys(_) => {
                    "the private key is not the certificate's".to_owned()
                }
                e => e.to_string(),
            },
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(refused)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(refused)?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            tls: Arc::new(tls),
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 64,
            totals: Arc::default(),
        })
    }

    /// How long a connection may take from its accept to a finished TLS
    /// handshake. Default 10 s. Bounds how long a client that says nothing
    /// holds one of the listener's handshake slots.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How many handshakes a listener runs at once (in per-core mode, each
    /// thread's listener); further connections wait in the kernel's accept
    /// queue. Default 64, at least 1. Each costs a task and a rustls
    /// connection (tens of KiB) while it lasts.
    pub fn max_handshakes(mut self, max: usize) -> Self {
        self.max_handshakes = max.max(1);
        self
    }

    /// What the listeners of this configuration (and of its clones)
    /// counted so far: take it before listening, it stays live.
    pub fn totals(&self) -> Arc<HttpsTotals> {
        self.totals.clone()
    }
}

/// Handshake counters of the HTTPS listeners of one [`HttpsConfig`]; the
/// requests they serve count in [`WebServer::totals`].
#[derive(Debug, Default)]
pub struct HttpsTotals {
    handshakes: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    plain_http: AtomicU64,
}

/// A snapshot of [`HttpsTotals`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpsStats {
    /// Handshakes completed: connections handed to the web server.
    pub handshakes: u64,
    /// Handshakes that failed: rustls refused what the client sent (no
    /// TLS, no common version or cipher suite, an alert such as a browser's
    /// `bad_certificate`), or the client closed first (browsers close
    /// speculative connections they did not use).
    pub failed: u64,
    /// Connections without a finished handshake within the timeout.
    pub timed_out: u64,
    /// Clients that spoke plain HTTP to the port (answered `400`).
    pub plain_http: u64,
}

impl HttpsTotals {
    /// The totals so far.
    pub fn snapshot(&self) -> HttpsStats {
        HttpsStats {
            handshakes: self.handshakes.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            timed_out: self.timed_out.load(Ordering::Relaxed),
            plain_http: self.plain_http.load(Ordering::Relaxed),
        }
    }
}

impl WebServer {
    /// Listens on `addr` (`0.0.0.0:443`; port 0 picks one) for HTTPS with
    /// `config`'s certificate, and serves until the runtime stops. Returns
    /// the address bound.
    ///
    /// After its TLS handshake (1.2 or 1.3, no client certificate, ALPN
    /// `http/1.1`), a connection is served as one on the plain port is:
    /// the same `http` layer, routes, keep-alive and
    /// [`totals`](Self::totals). Static files at or above the sendfile
    /// threshold are read into memory by the connection's sender (TLS
    /// encrypts in user space).
    ///
    /// Connections are accepted in a background task and handshaken in
    /// tasks of their own, at most [`HttpsConfig::max_handshakes`] at
    /// once, each within [`HttpsConfig::handshake_timeout`]: a client that
    /// never finishes its handshake holds one slot for that long, never
    /// the listener. Failed handshakes are counted
    /// ([`HttpsConfig::totals`]) and logged at debug level (browsers abort
    /// handshakes routinely). A client speaking plain HTTP to the port is
    /// answered `400` saying to use `https://`, and closed.
    ///
    /// ```no_run
    /// # use plexus_http::server::{HttpsConfig, WebServer};
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let https = HttpsConfig::from_pem_files("cert.pem", "key.pem")?;
    /// let bound = WebServer::new()
    ///     .static_dir("/", "./public", 64 << 20)?
    ///     .listen_https("0.0.0.0:8443", https)
    ///     .await?;
    /// println!("serving on https://{bound}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServeError`] naming the address and the cause.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub async fn listen_https(
        self,
        addr: &str,
        config: HttpsConfig,
    ) -> Result<SocketAddr, ServeError> {
        let socket = parse_addr(addr)?;
        let bind_err = |source| bind_error(socket, source);
        let listener = tokio::net::TcpListener::bind(socket)
            .await
            .map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        tokio::spawn(serve(Arc::new(self), listener, local, config));
        Ok(local)
    }

    /// [`listen_https`](Self::listen_https) in per-core mode (see
    /// [`listen_per_core`](Self::listen_per_core)): each thread accepts
    /// and handshakes on its own `SO_REUSEPORT` listener, with its own
    /// bound of [`max_handshakes`](HttpsConfig::max_handshakes); the
    /// totals are shared. Needs no runtime of its own.
    ///
    /// # Errors
    ///
    /// As [`listen_per_core`](Self::listen_per_core).
    pub fn listen_https_per_core(
        self,
        addr: &str,
        threads: usize,
        config: HttpsConfig,
    ) -> Result<PerCoreServer, ServeError> {
        let socket = parse_addr(addr)?;
        let server = Arc::new(self);
        per_core::start(socket, threads, "https", |listener, local| {
            let bind_err = |source| bind_error(local, source);
            listener.set_nonblocking(true).map_err(bind_err)?;
            let listener = tokio::net::TcpListener::from_std(listener).map_err(bind_err)?;
            Ok(serve(server.clone(), listener, local, config.clone()))
        })
    }
}

fn bind_error(addr: SocketAddr, source: io::Error) -> ServeError {
    ServeError::from_bind(
        addr,
        BindError::Io {
            addr: format!("https://{addr}"),
            source,
        },
    )
}

/// Starts accepting on `listener` (in the current runtime) and returns
/// what keeps the accepting going: dropping it stops the listener.
fn serve(
    server: Arc<WebServer>,
    listener: tokio::net::TcpListener,
    local: SocketAddr,
    config: HttpsConfig,
) -> impl Future<Output = ()> + Send + 'static {
    let max = config.max_handshakes;
    let opening = Arc::new(Opening {
        acceptor: TlsAcceptor::from(config.tls.clone()),
        server,
        config,
    });
    let handshakes = Handshakes::start(
        listener,
        format!("https://{local}"),
        max,
        move |socket, peer, _link_id| {
            let opening = opening.clone();
            async move {
                opening.open(socket, peer).await;
                // Nothing for the listener: the connection went to the web
                // server, or was counted and logged by `open`.
                Handshaken::HandedOver
            }
        },
    );
    async move {
        // No link comes out; accept errors do (logged by `Handshakes`), and
        // are taken so that its queue never fills and stops the accepting.
        while !matches!(handshakes.accept().await, Err(AcceptError::Closed { .. })) {}
    }
}

/// What a listener's handshake tasks share.
struct Opening {
    server: Arc<WebServer>,
    acceptor: TlsAcceptor,
    config: HttpsConfig,
}

impl Opening {
    /// Runs the handshake on `socket` and hands the connection to the web
    /// server, or counts and logs why not. The socket is dropped only
    /// after it is counted.
    async fn open(&self, socket: TcpStream, peer: SocketAddr) {
        let deadline = Instant::now() + self.config.handshake_timeout;
        let mut first = [0u8; 1];
        match tokio::time::timeout_at(deadline, socket.peek(&mut first)).await {
            Err(_) => return self.timed_out(peer),
            Ok(Ok(0)) => return self.failed(peer, &"closed before a handshake"),
            Ok(Err(e)) => return self.failed(peer, &e),
            Ok(Ok(_)) if first[0] != TLS_HANDSHAKE && first[0].is_ascii_uppercase() => {
                return self.plain_http(socket, peer, deadline).await
            }
            Ok(Ok(_)) => {}
        }
        let accept = self.acceptor.accept(socket).into_fallible();
        tokio::pin!(accept);
        match tokio::time::timeout_at(deadline, &mut accept).await {
            Ok(Ok(stream)) => {
                self.config
                    .totals
                    .handshakes
                    .fetch_add(1, Ordering::Relaxed);
                self.server
                    .clone()
                    .serve_stream(stream, format!("https://{peer}"));
            }
            Ok(Err((error, _socket))) => self.failed(peer, &error),
            Err(_) => self.timed_out(peer),
        }
    }

    fn failed(&self, peer: SocketAddr, error: &dyn std::fmt::Display) {
        self.config.totals.failed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "plexus::http", %peer, %error, "HTTPS handshake failed");
    }

    fn timed_out(&self, peer: SocketAddr) {
        self.config.totals.timed_out.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            target: "plexus::http",
            %peer,
            timeout = ?self.config.handshake_timeout,
            "no HTTPS handshake in time"
        );
    }

    /// Answers a client that speaks plain HTTP `400`, then waits (until
    /// `deadline`) for it to close: closing with its request unread would
    /// reset the connection, and the answer might be lost.
    async fn plain_http(&self, mut socket: TcpStream, peer: SocketAddr, deadline: Instant) {
        self.config
            .totals
            .plain_http
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "plexus::http", %peer, "plain HTTP on the HTTPS port");
        let response = Response::new(400, "This port speaks HTTPS: use an https:// address.\n")
            .header("Content-Type", "text/plain; charset=utf-8");
        let mut out = BytesMut::new();
        if encode_response(&mut out, &response, false, false).is_err() {
            // A body of bytes and valid header fields always encode.
            return;
        }
        let answer = async {
            socket.write_all(&out).await?;
            socket.shutdown().await?;
            let mut buf = [0u8; 4096];
            let mut drained = 0;
            while drained < PLAIN_DRAIN {
                match socket.read(&mut buf).await? {
                    0 => break,
                    n => drained += n,
                }
            }
            Ok::<_, io::Error>(())
        };
        // The client's to read or not.
        let _ = tokio::time::timeout_at(deadline, answer).await;
    }
}
