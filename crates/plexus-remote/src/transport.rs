//! Listening and dialling per transport kind: the only place that knows
//! which `plexus-transport` module serves a scheme.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use plexus_net::{StackSpec, TransportKind};
#[cfg(feature = "quic")]
use plexus_transport::quic::{QuicConfig, QuicEndpoint};
#[cfg(feature = "tls")]
use plexus_transport::tls::{self, TlsConfig};
use plexus_transport::udp::{UdpConfig, UdpEndpoint};
use plexus_transport::{mem, tcp, uds, AcceptError, Link};

use crate::config::NodeConfig;
use crate::error::LinkError;

/// The in-memory namespace shared by every node of this process (`mem://`).
pub(crate) fn mem_hub() -> &'static mem::MemHub {
    static HUB: OnceLock<mem::MemHub> = OnceLock::new();
    HUB.get_or_init(mem::MemHub::new)
}

/// A bound listener.
pub(crate) enum Listener {
    Tcp(tcp::TcpListener),
    #[cfg(feature = "tls")]
    Tls(tls::TlsListener),
    Uds(uds::UdsListener),
    Udp(Arc<UdpEndpoint>),
    #[cfg(feature = "quic")]
    Quic(Arc<QuicEndpoint>),
    Mem(mem::MemListener),
}

/// A socket a node shares between listening and dialling (one per
/// scheme): its UDP or QUIC endpoint.
#[derive(Clone)]
pub(crate) enum Endpoint {
    Udp(Arc<UdpEndpoint>),
    #[cfg(feature = "quic")]
    Quic(Arc<QuicEndpoint>),
}

impl Listener {
    /// The endpoint to dial through, for transports that share one.
    pub(crate) fn endpoint(&self) -> Option<Endpoint> {
        match self {
            Self::Udp(ep) => Some(Endpoint::Udp(ep.clone())),
            #[cfg(feature = "quic")]
            Self::Quic(ep) => Some(Endpoint::Quic(ep.clone())),
            _ => None,
        }
    }
}

impl Listener {
    pub(crate) async fn accept(&self) -> Result<Link, AcceptError> {
        match self {
            Self::Tcp(l) => l.accept().await,
            #[cfg(feature = "tls")]
            Self::Tls(l) => loop {
                // A peer refused during its handshake (logged by the
                // transport) costs only its own connection.
                match l.accept().await {
                    Err(AcceptError::Handshake { .. }) => continue,
                    r => break r,
                }
            },
            #[cfg(feature = "quic")]
            Self::Quic(l) => loop {
                match l.accept().await {
                    Err(AcceptError::Handshake { .. }) => continue,
                    r => break r,
                }
            },
            Self::Uds(l) => l.accept().await,
            Self::Udp(l) => l.accept().await,
            Self::Mem(l) => l.accept().await,
        }
    }
}

/// Binds `addr` for `spec`; returns the listener and the address actually
/// bound (port 0 resolved).
pub(crate) async fn bind(
    spec: &StackSpec,
    addr: &str,
    config: &NodeConfig,
) -> Result<(Listener, String), String> {
    let link = config.link;
    match spec.transport() {
        TransportKind::Tcp => {
            let sa = socket_addr(addr)?;
            let l = tcp::TcpListener::bind_with(spec, sa, link)
                .await
                .map_err(|e| e.to_string())?;
            let bound = l.local_addr().to_string();
            Ok((Listener::Tcp(l), bound))
        }
        #[cfg(feature = "tls")]
        TransportKind::Tls => {
            let sa = socket_addr(addr)?;
            let l = tls::TlsListener::bind(spec, sa, tls_config(config)?, link)
                .await
                .map_err(|e| e.to_string())?;
            let bound = l.local_addr().to_string();
            Ok((Listener::Tls(l), bound))
        }
        TransportKind::Udp => {
            let sa = socket_addr(addr)?;
            let config = UdpConfig {
                link,
                ..UdpConfig::default()
            };
            let ep = UdpEndpoint::bind_with(spec, sa, config)
                .await
                .map_err(|e| e.to_string())?;
            let bound = ep.local_addr().to_string();
            Ok((Listener::Udp(Arc::new(ep)), bound))
        }
        #[cfg(feature = "quic")]
        TransportKind::Quic => {
            let sa = socket_addr(addr)?;
            let ep = QuicEndpoint::bind(spec, sa, tls_config(config)?, quic_config(config))
                .map_err(|e| e.to_string())?;
            let bound = ep.local_addr().to_string();
            Ok((Listener::Quic(Arc::new(ep)), bound))
        }
        TransportKind::Uds => {
            remove_stale_socket(addr);
            let l = uds::UdsListener::bind_with(spec, PathBuf::from(addr), link)
                .map_err(|e| e.to_string())?;
            Ok((Listener::Uds(l), addr.to_owned()))
        }
        TransportKind::Mem => {
            let l = mem_hub()
                .bind_with(spec, addr, link)
                .map_err(|e| e.to_string())?;
            Ok((Listener::Mem(l), addr.to_owned()))
        }
        other => Err(format!(
            "transport {other} is not available in this build (its cargo feature is off)"
        )),
    }
}

/// An endpoint for dialling only (a node that does not listen on the
/// scheme): an ephemeral UDP socket, or a QUIC endpoint that refuses
/// incoming connections.
pub(crate) async fn dial_endpoint(
    spec: &StackSpec,
    config: &NodeConfig,
) -> Result<Endpoint, String> {
    match spec.transport() {
        #[cfg(feature = "quic")]
        TransportKind::Quic => {
            let sa = socket_addr("0.0.0.0:0")?;
            let ep = QuicEndpoint::client(spec, sa, tls_config(config)?, quic_config(config))
                .map_err(|e| e.to_string())?;
            Ok(Endpoint::Quic(Arc::new(ep)))
        }
        _ => {
            let (listener, _) = bind(spec, "0.0.0.0:0", config).await?;
            listener
                .endpoint()
                .ok_or_else(|| "not a UDP or QUIC scheme".to_owned())
        }
    }
}

#[cfg(feature = "quic")]
fn quic_config(config: &NodeConfig) -> QuicConfig {
    QuicConfig {
        link: config.link,
        ..config.quic
    }
}

/// Dials `addr`. UDP and QUIC links go out through `endpoint`, the node's
/// endpoint for this spec (one socket for all peers).
pub(crate) async fn dial(
    spec: &StackSpec,
    addr: &str,
    config: &NodeConfig,
    endpoint: Option<Endpoint>,
) -> Result<Link, LinkError> {
    let link = config.link;
    match spec.transport() {
        TransportKind::Tcp => {
            let sa = resolve_host(addr).await?;
            Ok(tcp::connect_with(spec, sa, link).await?)
        }
        #[cfg(feature = "tls")]
        TransportKind::Tls => {
            let tls_config = tls_config(config).map_err(LinkError::Connect)?;
            let sa = resolve_host(addr).await?;
            Ok(tls::connect(spec, sa, server_name(addr), tls_config, link).await?)
        }
        TransportKind::Udp => {
            let sa = resolve_host(addr).await?;
            let Some(Endpoint::Udp(ep)) = endpoint else {
                return Err(LinkError::Connect("no UDP endpoint".into()));
            };
            Ok(ep.connect(sa).await?)
        }
        #[cfg(feature = "quic")]
        TransportKind::Quic => {
            let sa = resolve_host(addr).await?;
            let Some(Endpoint::Quic(ep)) = endpoint else {
                return Err(LinkError::Connect("no QUIC endpoint".into()));
            };
            Ok(ep.connect(sa, server_name(addr)).await?)
        }
        TransportKind::Uds => Ok(uds::connect_with(spec, addr, link).await?),
        TransportKind::Mem => Ok(mem_hub().connect(spec, addr)?),
        other => Err(LinkError::Address(format!(
            "transport {other} is not available in this build (its cargo feature is off)"
        ))),
    }
}

/// A socket file left by a process that died (nothing accepts on it) is
/// removed so a restarted node can bind its address again. A live one is
/// left alone, and the bind then fails with "address in use".
fn remove_stale_socket(path: &str) {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        return;
    }
    if let Err(e) = std::os::unix::net::UnixStream::connect(path) {
        if e.kind() == std::io::ErrorKind::ConnectionRefused {
            tracing::info!(target: "plexus::remote", path, "removing a stale socket file");
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(feature = "tls")]
fn tls_config(config: &NodeConfig) -> Result<&TlsConfig, String> {
    config.tls.as_ref().ok_or_else(|| {
        "tls and quic need a certificate: NodeConfig::tls(TlsConfig::from_pem_files(cert, key, ca)) \
         (make dev ones with `plexus-certs`)"
            .to_owned()
    })
}

/// The host part of `host:port` (`[::1]:4000` → `::1`): the name the
/// peer's certificate must be valid for.
#[cfg(feature = "tls")]
fn server_name(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn socket_addr(addr: &str) -> Result<SocketAddr, String> {
    addr.parse()
        .map_err(|_| format!("{addr:?} is not an IP address and port (like 127.0.0.1:4000)"))
}

async fn resolve_host(addr: &str) -> Result<SocketAddr, LinkError> {
    if let Ok(sa) = addr.parse() {
        return Ok(sa);
    }
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| LinkError::Connect(format!("cannot resolve {addr}: {e}")))?
        .next()
        .ok_or_else(|| LinkError::Connect(format!("{addr} resolves to no address")))
}
