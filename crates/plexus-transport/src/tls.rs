//! TLS 1.3 over TCP (rustls, `ring` provider), mutual authentication
//! required: each side presents a certificate signed by the trusted CA.
//!
//! The handshake runs on `tokio-rustls`; the established connection is
//! then driven by the same stream driver as TCP: the rustls
//! [`Connection`](rustls::Connection) (a sans-IO state machine) sits between the driver's
//! readiness-based reads/writes and the TCP socket.
//!
//! ```text
//!  driver ── plaintext ──▶ rustls::Connection ── TLS records ──▶ TcpStream
//! ```
//!
//! **Hostile peers.** The listener accepts TCP connections in a background
//! task and runs each handshake in its own task, at most
//! [`MAX_HANDSHAKES`] at once, each bounded by
//! [`TlsConfig::handshake_timeout`] (default 10 s). A failed handshake
//! (plain TCP bytes, no client certificate, untrusted issuer, expired
//! certificate, timeout) is logged and returned by
//! [`TlsListener::accept`] as [`AcceptError::Handshake`]; the listener
//! keeps serving other peers.
//!
//! **Identity.** [`Link::peer_identity`] is the certificate the peer
//! presented (set on every link this module makes), [`TlsConfig::certificate`]
//! ours. What a certificate means is not this crate's business:
//! `plexus-remote` derives the node id it certifies (`plexus_remote::identity`)
//! and refuses a peer whose handshake claims another.
//!
//! # Development certificates
//!
//! The `plexus certs` binary of `plexus-remote` makes a dev CA and node
//! certificates (valid for the node's name, `localhost` and `127.0.0.1`,
//! for both server and client authentication):
//!
//! ```text
//! plexus certs ca --out certs/                       # certs/ca.pem, certs/ca.key
//! plexus certs node --ca certs/ --name n1 --out certs/n1 [--days 365]
//!                                                    # certs/n1/n1.pem, certs/n1/n1.key
//! ```
//!
//! The same in-process, for tests: `plexus_remote::dev_certs`.
//!
//! A node then loads `TlsConfig::from_pem_files("certs/n1/n1.pem",
//! "certs/n1/n1.key", "certs/ca.pem")`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use plexus_net::StackSpec;
//! use plexus_transport::tls::{self, TlsConfig, TlsListener};
//! use plexus_transport::LinkConfig;
//!
//! let tls = TlsConfig::from_pem_files("n1.pem", "n1.key", "ca.pem")?;
//! let spec: StackSpec = "tls / framing".parse()?;
//! let link_config = LinkConfig::default();
//! let listener = TlsListener::bind(&spec, "127.0.0.1:0".parse()?, &tls, link_config).await?;
//! let client = tls::connect(&spec, listener.local_addr(), "localhost", &tls, link_config).await?;
//! let server = listener.accept().await?;
//! # Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use plexus_net::{LinkContext, StackSpec, TransportProfile};
use rustls::client::WebPkiServerVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;

use crate::conn::now;
use crate::error::{AcceptError, BindError, ConnectError};
use crate::handshakes::{Handshaken, Handshakes};
use crate::link::PeerIdentity;
use crate::link::{Link, LinkConfig};
use crate::stream as driver;

mod socket;
mod stream;
use self::stream::parse_server_name;
pub use self::stream::TlsStream;

/// Handshakes a listener runs at once; further connections wait in the
/// kernel's accept queue.
pub const MAX_HANDSHAKES: usize = 64;

/// The transport's name: the first word of its stack specs.
pub const NAME: &str = "tls";

/// What the transport carries.
pub const PROFILE: TransportProfile = TransportProfile::byte_stream();

/// The host part of `host:port` (`[::1]:4000` → `::1`): the name a dialled
/// peer's certificate must be valid for (`tls`, `quic`, and transports of
/// one's own over TLS such as `wss`).
pub fn server_name(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn url(addr: SocketAddr) -> String {
    format!("tls://{addr}")
}

/// Why a [`TlsConfig`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// A PEM file could not be read.
    #[error("read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A PEM input is malformed or holds nothing usable.
    #[error("{what}: {detail}")]
    Pem {
        /// Which input (`certificate chain`, `private key`, `CA roots`).
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// rustls refused the material (key does not match the certificate,
    /// unsupported key type, CA certificate unparsable...).
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
    /// The certificate verifier could not be built from the CA roots.
    #[error("certificate verifier: {0}")]
    Verifier(String),
    /// The node's certificate does not parse as an X.509 end-entity
    /// certificate.
    #[error("certificate chain: the node's certificate does not parse: {0}")]
    EndEntity(String),
}

/// A node's TLS identity and trust: its certificate chain and private key
/// (presented both as server and as client: mutual TLS) and the CA roots
/// its peers' certificates must chain to. TLS 1.3 only.
///
/// Cheap to clone (the rustls configurations are shared).
#[derive(Clone)]
pub struct TlsConfig {
    pub(crate) server: Arc<ServerConfig>,
    pub(crate) client: Arc<ClientConfig>,
    pub(crate) handshake_timeout: Duration,
    /// The node's end-entity certificate.
    certificate: CertificateDer<'static>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Builds the configuration from in-memory PEM: `cert_chain` (the
    /// node's certificate first, then intermediates), `key` (PKCS#8, PKCS#1
    /// or SEC1) and `ca_roots` (one or more CA certificates).
    ///
    /// # Errors
    ///
    /// [`TlsConfigError`] if a PEM input is malformed or empty, or rustls
    /// refuses the material (e.g. the key does not match the certificate).
    pub fn from_pem(
        cert_chain: &[u8],
        key: &[u8],
        ca_roots: &[u8],
    ) -> Result<Self, TlsConfigError> {
        let chain = certs("certificate chain", cert_chain)?;
        let certificate = chain[0].clone();
        webpki::EndEntityCert::try_from(&certificate)
            .map_err(|e| TlsConfigError::EndEntity(format!("{e:?}")))?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsConfigError::Pem {
            what: "private key",
            detail: e.to_string(),
        })?;
        let mut roots = RootCertStore::empty();
        for ca in certs("CA roots", ca_roots)? {
            roots.add(ca)?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
        let server_verifier =
            WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_webpki_verifier(server_verifier)
            .with_client_auth_cert(chain, key)?;
        Ok(Self {
            server: Arc::new(server),
            client: Arc::new(client),
            handshake_timeout: Duration::from_secs(10),
            certificate,
        })
    }

    /// The node's end-entity certificate (the first of its chain), as its
    /// peers see it ([`Link::peer_identity`](crate::Link::peer_identity)).
    pub fn certificate(&self) -> &CertificateDer<'static> {
        &self.certificate
    }

    /// As [`from_pem`](TlsConfig::from_pem), reading the three PEM files.
    ///
    /// # Errors
    ///
    /// [`TlsConfigError::Read`] naming the file that could not be read, or
    /// as [`from_pem`](TlsConfig::from_pem).
    pub fn from_pem_files(
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
        ca_roots: impl AsRef<Path>,
    ) -> Result<Self, TlsConfigError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| TlsConfigError::Read {
                path: path.to_owned(),
                source,
            })
        };
        Self::from_pem(
            &read(cert_chain.as_ref())?,
            &read(key.as_ref())?,
            &read(ca_roots.as_ref())?,
        )
    }

    /// How long a handshake may take before the connection is dropped.
    /// Default 10 s. Bounds how long a silent peer holds one of the
    /// listener's [`MAX_HANDSHAKES`] slots.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }
}

fn certs(what: &'static str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::Pem {
            what,
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsConfigError::Pem {
            what,
            detail: "no PEM certificate found".into(),
        });
    }
    Ok(certs)
}

/// Accepts TLS connections, each becoming a [`Link`] with its own stack
/// built from the listener's spec once the handshake succeeded.
///
/// Dropping the listener stops accepting; handshakes in progress end
/// within their timeout.
#[derive(Debug)]
pub struct TlsListener {
    inner: Handshakes,
}

impl TlsListener {
    /// Listens on `addr` with links built from `spec` (a `tls / ...` spec),
    /// `tls` as identity and trust, and `config` for every accepted link.
    ///
    /// # Errors
    ///
    /// [`BindError`] if the spec is not for TLS or the OS refuses the
    /// address.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the accepting task is spawned).
    pub async fn bind(
        spec: &StackSpec,
        addr: SocketAddr,
        tls: &TlsConfig,
        config: LinkConfig,
    ) -> Result<Self, BindError> {
        let spec = &BindError::fit(spec, NAME, PROFILE, || url(addr))?;
        let inner = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| BindError::Io {
                addr: url(addr),
                source,
            })?;
        let local = inner.local_addr().map_err(|source| BindError::Io {
            addr: url(addr),
            source,
        })?;
        let ctx = Arc::new(Accepting {
            tls: tls.clone(),
            spec: spec.clone(),
            config,
            local,
        });
        let inner = Handshakes::start(
            inner,
            url(local),
            MAX_HANDSHAKES,
            move |socket, peer, id| {
                let ctx = ctx.clone();
                async move {
                    match handshake(&ctx, socket, peer, id).await {
                        Ok(link) => Handshaken::Link(link),
                        Err(error) => Handshaken::Refused(error),
                    }
                }
            },
        );
        Ok(Self { inner })
    }

    /// The address the listener is bound to (with the actual port when bound
    /// to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    /// Waits for the next connection whose handshake finished, successfully
    /// or not.
    ///
    /// # Errors
    ///
    /// [`AcceptError::Handshake`] for a peer refused during the handshake
    /// (the listener stays usable: call `accept` again),
    /// [`AcceptError::Io`] if accepting failed, [`AcceptError::Closed`] if
    /// the accepting task ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no connection is lost if the future is dropped.
    pub async fn accept(&self) -> Result<Link, AcceptError> {
        self.inner.accept().await
    }
}

struct Accepting {
    tls: TlsConfig,
    spec: StackSpec,
    config: LinkConfig,
    local: SocketAddr,
}

async fn handshake(
    ctx: &Accepting,
    socket: TcpStream,
    peer: SocketAddr,
    link_id: u64,
) -> Result<Link, AcceptError> {
    let failed = |source| AcceptError::Handshake {
        addr: url(ctx.local),
        peer: peer.to_string(),
        source,
    };
    let (socket, identity) = ctx
        .tls
        .accept_stream(socket)
        .await
        .map_err(failed)?
        .into_socket();
    let stack = ctx.spec.build_link(LinkContext {
        now: now(),
        link_id,
    });
    Ok(driver::spawn(socket, stack, url(peer).into(), ctx.config).with_identity(identity))
}

fn timed_out(after: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no TLS handshake within {after:?}"),
    )
}

/// Connects to `addr`, verifies that the server's certificate is valid for
/// `server_name` (a DNS name or an IP address) and chains to the CA roots of
/// `tls`, presents the certificate of `tls`, and starts a link with a stack
/// built from `spec` (a `tls / ...` spec).
///
/// # Errors
///
/// [`ConnectError::Spec`] for another spec,
/// [`ConnectError::Io`] if the TCP connection fails,
/// [`ConnectError::Handshake`] if the TLS handshake fails (e.g. `connect
/// tls://127.0.0.1:4000: TLS handshake failed: invalid peer certificate:
/// UnknownIssuer`), or times out.
///
/// TLS 1.3 finishes the client's side of the handshake before the server
/// checks the client's certificate: a server refusing ours shows up as the
/// link closing right away, not as an error here.
///
/// # Panics
///
/// Outside a tokio runtime (the driver task is spawned).
pub async fn connect(
    spec: &StackSpec,
    addr: SocketAddr,
    server_name: &str,
    tls: &TlsConfig,
    config: LinkConfig,
) -> Result<Link, ConnectError> {
    let spec = &ConnectError::fit(spec, NAME, PROFILE, || url(addr))?;
    let failed = |source| ConnectError::Handshake {
        addr: url(addr),
        source,
    };
    let name = parse_server_name(server_name).map_err(failed)?;
    let socket = TcpStream::connect(addr)
        .await
        .map_err(|source| ConnectError::Io {
            addr: url(addr),
            source,
        })?;
    if let Err(error) = socket.set_nodelay(true) {
        tracing::debug!(target: "plexus::transport", %addr, %error, "set_nodelay failed");
    }
    let (socket, identity) = tls
        .connect_named(socket, name)
        .await
        .map_err(failed)?
        .into_socket();
    let stack = spec.build(now());
    Ok(driver::spawn(socket, stack, url(addr).into(), config).with_identity(identity))
}

/// The identity of the peer's end-entity certificate (verified by rustls
/// against the CA roots during the handshake).
fn peer_identity(chain: Option<&[CertificateDer<'static>]>) -> io::Result<PeerIdentity> {
    let cert = chain.and_then(<[_]>::first).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the peer presented no certificate",
        )
    })?;
    Ok(PeerIdentity {
        certificate: cert.clone(),
    })
}
