//! The built-in transports as [`Transport`]s: what
//! [`TransportRegistry::default`](crate::TransportRegistry::default) holds
//! (`tcp`, `uds`, `udp`, `mem`), and `tls` and `quic`, which need a
//! certificate. Each only turns a URI address into its module's bind and
//! connect calls; nothing here is known to the node above.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use plexus_net::{StackSpec, TransportProfile};

#[cfg(feature = "quic")]
use crate::quic::{self, QuicConfig, QuicEndpoint};
use crate::registry::{BoxFuture, Dialer, Listener, Transport};
#[cfg(feature = "tls")]
use crate::tls::{self, TlsConfig};
use crate::udp::{self, UdpConfig, UdpEndpoint};
use crate::{mem, tcp, uds, AcceptError, BindError, ConnectError, Link, LinkConfig};

/// What a built-in listener accepts with.
trait Accept: Send + Sync + 'static {
    fn accept_link(&self) -> BoxFuture<'_, Result<Link, AcceptError>>;
}

/// A built-in listener with its address and dialer.
struct Bound<L> {
    listener: L,
    local: String,
    dialer: Arc<dyn Dialer>,
}

impl<L: Accept> Listener for Bound<L> {
    fn local_addr(&self) -> String {
        self.local.clone()
    }

    fn accept(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        self.listener.accept_link()
    }

    fn dialer(&self) -> Arc<dyn Dialer> {
        self.dialer.clone()
    }
}

fn bound<L: Accept>(listener: L, local: String, dialer: Arc<dyn Dialer>) -> Box<dyn Listener> {
    Box::new(Bound {
        listener,
        local,
        dialer,
    })
}

/// A future that is ready at once, for the methods of [`Transport`] that
/// need no waiting.
fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

/// `addr` as an IP address and port, for binding.
fn socket_addr(name: &str, addr: &str) -> Result<SocketAddr, BindError> {
    addr.parse().map_err(|_| BindError::Address {
        addr: format!("{name}://{addr}"),
        why: "not an IP address and port (like 127.0.0.1:4000)".into(),
    })
}

/// `addr` (`host:port`) resolved, for connecting.
async fn resolve(name: &str, addr: &str) -> Result<SocketAddr, ConnectError> {
    if let Ok(sa) = addr.parse() {
        return Ok(sa);
    }
    let failed = |why: String| ConnectError::Address {
        addr: format!("{name}://{addr}"),
        why,
    };
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| failed(format!("cannot resolve the host: {e}")))?
        .next()
        .ok_or_else(|| failed("the host resolves to no address".into()))
}

/// `tcp`: see [`crate::tcp`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpTransport;

struct TcpDialer {
    spec: StackSpec,
    link: LinkConfig,
}

impl TcpDialer {
    fn shared(spec: &StackSpec, link: LinkConfig) -> Arc<dyn Dialer> {
        Arc::new(Self {
            spec: spec.clone(),
            link,
        })
    }
}

impl Dialer for TcpDialer {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(async move {
            let sa = resolve(tcp::NAME, addr).await?;
            tcp::connect_with(&self.spec, sa, self.link).await
        })
    }
}

impl Accept for tcp::TcpListener {
    fn accept_link(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(self.accept())
    }
}

impl Transport for TcpTransport {
    fn name(&self) -> &str {
        tcp::NAME
    }

    fn profile(&self) -> TransportProfile {
        tcp::PROFILE
    }

    fn default_stack(&self) -> &str {
        "tcp / framing"
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let listener =
                tcp::TcpListener::bind_with(spec, socket_addr(tcp::NAME, addr)?, link).await?;
            let local = listener.local_addr().to_string();
            Ok(bound(listener, local, TcpDialer::shared(spec, link)))
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        ready(Ok(TcpDialer::shared(spec, link)))
    }
}

/// `uds`: Unix stream sockets, addressed by path; see [`crate::uds`].
/// A socket file left by a process that died is removed when the path is
/// bound again.
#[derive(Debug, Clone, Copy, Default)]
pub struct UdsTransport;

struct UdsDialer {
    spec: StackSpec,
    link: LinkConfig,
}

impl UdsDialer {
    fn shared(spec: &StackSpec, link: LinkConfig) -> Arc<dyn Dialer> {
        Arc::new(Self {
            spec: spec.clone(),
            link,
        })
    }
}

impl Dialer for UdsDialer {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(uds::connect_with(&self.spec, addr, self.link))
    }
}

impl Accept for uds::UdsListener {
    fn accept_link(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(self.accept())
    }
}

impl Transport for UdsTransport {
    fn name(&self) -> &str {
        uds::NAME
    }

    fn profile(&self) -> TransportProfile {
        uds::PROFILE
    }

    fn default_stack(&self) -> &str {
        "uds / framing"
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            remove_stale_socket(addr);
            let listener = uds::UdsListener::bind_with(spec, PathBuf::from(addr), link)?;
            Ok(bound(
                listener,
                addr.to_owned(),
                UdsDialer::shared(spec, link),
            ))
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        ready(Ok(UdsDialer::shared(spec, link)))
    }
}

/// A socket file left by a process that died (nothing accepts on it) is
/// removed so a restarted process can bind its path again. A live one is
/// left alone, and the bind then fails with "address in use".
fn remove_stale_socket(path: &str) {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        return;
    }
    if let Err(e) = std::os::unix::net::UnixStream::connect(path) {
        if e.kind() == std::io::ErrorKind::ConnectionRefused {
            tracing::info!(target: "plexus::transport", path, "removing a stale socket file");
            let _ = std::fs::remove_file(path);
        }
    }
}

/// `udp`: one socket per endpoint for every peer, shared by listening and
/// dialling; see [`crate::udp`]. The link buffers given to `listen`
/// and `dialer` replace those of the [`UdpConfig`].
#[derive(Debug, Clone, Copy, Default)]
pub struct UdpTransport {
    /// Peer table bounds, idle timeout, accept backlog.
    pub config: UdpConfig,
}

struct UdpDialer(Arc<UdpEndpoint>);

impl Dialer for UdpDialer {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(async move { self.0.connect(resolve(udp::NAME, addr).await?).await })
    }
}

impl Accept for Arc<UdpEndpoint> {
    fn accept_link(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(self.accept())
    }
}

impl UdpTransport {
    async fn endpoint(
        &self,
        spec: &StackSpec,
        addr: &str,
        link: LinkConfig,
    ) -> Result<Arc<UdpEndpoint>, BindError> {
        let config = UdpConfig {
            link,
            ..self.config
        };
        let endpoint = UdpEndpoint::bind_with(spec, socket_addr(udp::NAME, addr)?, config).await?;
        Ok(Arc::new(endpoint))
    }
}

impl Transport for UdpTransport {
    fn name(&self) -> &str {
        udp::NAME
    }

    fn profile(&self) -> TransportProfile {
        udp::PROFILE
    }

    fn default_stack(&self) -> &str {
        "udp / heartbeat / slicing / delivery / ordering / batching"
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let endpoint = self.endpoint(spec, addr, link).await?;
            let local = endpoint.local_addr().to_string();
            let dialer = Arc::new(UdpDialer(endpoint.clone()));
            Ok(bound(endpoint, local, dialer))
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        Box::pin(async move {
            let endpoint = self.endpoint(spec, "0.0.0.0:0", link).await?;
            Ok(Arc::new(UdpDialer(endpoint)) as Arc<dyn Dialer>)
        })
    }
}

/// `mem`: in-memory links within one process, addressed by name; see
/// [`crate::mem`]. [`Default`] uses one namespace for the whole
/// process, so every node of a process can reach the others' `mem://`
/// names.
#[derive(Debug, Clone)]
pub struct MemTransport {
    hub: mem::MemHub,
}

impl Default for MemTransport {
    fn default() -> Self {
        static HUB: OnceLock<mem::MemHub> = OnceLock::new();
        Self::new(HUB.get_or_init(mem::MemHub::new).clone())
    }
}

impl MemTransport {
    /// Links in `hub`'s namespace.
    pub fn new(hub: mem::MemHub) -> Self {
        Self { hub }
    }
}

struct MemDialer {
    hub: mem::MemHub,
    spec: StackSpec,
    link: LinkConfig,
}

impl Dialer for MemDialer {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(async move { self.hub.connect_with(&self.spec, addr, self.link) })
    }
}

impl Accept for mem::MemListener {
    fn accept_link(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(self.accept())
    }
}

impl Transport for MemTransport {
    fn name(&self) -> &str {
        mem::NAME
    }

    fn profile(&self) -> TransportProfile {
        mem::PROFILE
    }

    fn default_stack(&self) -> &str {
        "mem / ordering"
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let listener = self.hub.bind_with(spec, addr, link)?;
            let dialer = self.mem_dialer(spec, link);
            Ok(bound(listener, addr.to_owned(), dialer))
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        ready(Ok(self.mem_dialer(spec, link)))
    }
}

impl MemTransport {
    fn mem_dialer(&self, spec: &StackSpec, link: LinkConfig) -> Arc<dyn Dialer> {
        Arc::new(MemDialer {
            hub: self.hub.clone(),
            spec: spec.clone(),
            link,
        })
    }
}

/// What `tls` and `quic` say when used without a certificate.
#[cfg(feature = "tls")]
const NEEDS_CERTIFICATE: &str = "tls and quic need a certificate: \
     TlsConfig::from_pem_files(cert, key, ca) given to the transport (on a node: \
     NodeConfig::tls); make development ones with `plexus certs`";

/// `tls`: TLS 1.3 over TCP with mutual authentication; see
/// [`crate::tls`]. A dialled peer's certificate must be valid for the
/// host part of its address (`n1:4000` → `n1`).
#[cfg(feature = "tls")]
#[derive(Clone)]
pub struct TlsTransport {
    tls: Option<TlsConfig>,
}

#[cfg(feature = "tls")]
impl TlsTransport {
    /// With `tls` as identity and trust.
    pub fn new(tls: TlsConfig) -> Self {
        Self { tls: Some(tls) }
    }

    /// Without a certificate: every listen and dial fails with an error
    /// saying what to configure (a node registers this one when it was
    /// given no certificate, so `tls://` URIs say why they fail).
    pub fn without_certificate() -> Self {
        Self { tls: None }
    }

    fn tls_dialer(&self, spec: &StackSpec, link: LinkConfig) -> Arc<dyn Dialer> {
        Arc::new(TlsDialer {
            spec: spec.clone(),
            tls: self.tls.clone(),
            link,
        })
    }
}

#[cfg(feature = "tls")]
struct TlsDialer {
    spec: StackSpec,
    tls: Option<TlsConfig>,
    link: LinkConfig,
}

#[cfg(feature = "tls")]
impl Dialer for TlsDialer {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(async move {
            let Some(tls) = &self.tls else {
                return Err(ConnectError::NotConfigured {
                    addr: format!("tls://{addr}"),
                    what: NEEDS_CERTIFICATE,
                });
            };
            let sa = resolve(tls::NAME, addr).await?;
            tls::connect(&self.spec, sa, tls::server_name(addr), tls, self.link).await
        })
    }
}

#[cfg(feature = "tls")]
impl Accept for tls::TlsListener {
    fn accept_link(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(self.accept())
    }
}

#[cfg(feature = "tls")]
impl Transport for TlsTransport {
    fn name(&self) -> &str {
        tls::NAME
    }

    fn profile(&self) -> TransportProfile {
        tls::PROFILE
    }

    fn default_stack(&self) -> &str {
        "tls / framing"
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let Some(tls) = &self.tls else {
                return Err(BindError::NotConfigured {
                    addr: format!("tls://{addr}"),
                    what: NEEDS_CERTIFICATE,
                });
            };
            let sa = socket_addr(tls::NAME, addr)?;
            let listener = tls::TlsListener::bind(spec, sa, tls, link).await?;
            let local = listener.local_addr().to_string();
            Ok(bound(listener, local, self.tls_dialer(spec, link)))
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        ready(Ok(self.tls_dialer(spec, link)))
    }
}

/// `quic`: one QUIC endpoint per node for every peer, each strand on its own
/// stream; see [`crate::quic`]. The link buffers given to `listen`
/// and `dialer` replace those of the [`QuicConfig`].
#[cfg(feature = "quic")]
#[derive(Clone)]
pub struct QuicTransport {
    tls: Option<TlsConfig>,
    config: QuicConfig,
}

#[cfg(feature = "quic")]
impl QuicTransport {
    /// With `tls` as identity and trust and `config` for the endpoint.
    pub fn new(tls: TlsConfig, config: QuicConfig) -> Self {
        Self {
            tls: Some(tls),
            config,
        }
    }

    /// Without a certificate (see [`TlsTransport::without_certificate`]).
    pub fn without_certificate() -> Self {
        Self {
            tls: None,
            config: QuicConfig::default(),
        }
    }

    fn tls(&self, addr: &str) -> Result<&TlsConfig, BindError> {
        self.tls.as_ref().ok_or_else(|| BindError::NotConfigured {
            addr: format!("quic://{addr}"),
            what: NEEDS_CERTIFICATE,
        })
    }
}

#[cfg(feature = "quic")]
struct QuicDialer(Arc<QuicEndpoint>);

#[cfg(feature = "quic")]
impl Dialer for QuicDialer {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(async move {
            let sa = resolve(quic::NAME, addr).await?;
            self.0.connect(sa, tls::server_name(addr)).await
        })
    }
}

#[cfg(feature = "quic")]
impl Accept for Arc<QuicEndpoint> {
    fn accept_link(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(self.accept())
    }
}

#[cfg(feature = "quic")]
impl Transport for QuicTransport {
    fn name(&self) -> &str {
        quic::NAME
    }

    fn profile(&self) -> TransportProfile {
        quic::PROFILE
    }

    fn default_stack(&self) -> &str {
        "quic"
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let tls = self.tls(addr)?;
            let sa = socket_addr(quic::NAME, addr)?;
            let config = QuicConfig {
                link,
                ..self.config
            };
            let endpoint = Arc::new(QuicEndpoint::bind(spec, sa, tls, config)?);
            let local = endpoint.local_addr().to_string();
            let dialer = Arc::new(QuicDialer(endpoint.clone()));
            Ok(bound(endpoint, local, dialer))
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        Box::pin(async move {
            let tls = self.tls("0.0.0.0:0")?;
            let sa = socket_addr(quic::NAME, "0.0.0.0:0")?;
            let config = QuicConfig {
                link,
                ..self.config
            };
            let endpoint = QuicEndpoint::client(spec, sa, tls, config)?;
            Ok(Arc::new(QuicDialer(Arc::new(endpoint))) as Arc<dyn Dialer>)
        })
    }
}
