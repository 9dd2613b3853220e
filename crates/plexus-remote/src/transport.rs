//! Listening and dialling per transport kind: the only place that knows
//! which `plexus-transport` module serves a scheme.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use plexus_net::{StackSpec, TransportKind};
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
    Tls(tls::TlsListener),
    Uds(uds::UdsListener),
    Udp(Arc<UdpEndpoint>),
    Mem(mem::MemListener),
}

impl Listener {
    pub(crate) async fn accept(&self) -> Result<Link, AcceptError> {
        match self {
            Self::Tcp(l) => l.accept().await,
            Self::Tls(l) => loop {
                // A peer refused during its handshake (logged by the
                // transport) costs only its own connection.
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
            "transport {other:?} is not available in this build"
        )),
    }
}

/// Dials `addr`. UDP links go out through `udp`, the node's UDP endpoint
/// for this spec (one socket for all peers).
pub(crate) async fn dial(
    spec: &StackSpec,
    addr: &str,
    config: &NodeConfig,
    udp: Option<Arc<UdpEndpoint>>,
) -> Result<Link, LinkError> {
    let link = config.link;
    match spec.transport() {
        TransportKind::Tcp => {
            let sa = resolve_host(addr).await?;
            Ok(tcp::connect_with(spec, sa, link).await?)
        }
        TransportKind::Tls => {
            let tls_config = tls_config(config).map_err(LinkError::Connect)?;
            let sa = resolve_host(addr).await?;
            Ok(tls::connect(spec, sa, server_name(addr), tls_config, link).await?)
        }
        TransportKind::Udp => {
            let sa = resolve_host(addr).await?;
            let ep = udp.ok_or_else(|| LinkError::Connect("no UDP endpoint".into()))?;
            Ok(ep.connect(sa).await?)
        }
        TransportKind::Uds => Ok(uds::connect_with(spec, addr, link).await?),
        TransportKind::Mem => Ok(mem_hub().connect(spec, addr)?),
        other => Err(LinkError::Address(format!(
            "transport {other:?} is not available in this build"
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

fn tls_config(config: &NodeConfig) -> Result<&TlsConfig, String> {
    config.tls.as_ref().ok_or_else(|| {
        "tls needs a certificate: NodeConfig::tls(TlsConfig::from_pem_files(cert, key, ca)) \
         (make dev ones with `plexus-certs`)"
            .to_owned()
    })
}

/// The host part of `host:port` (`[::1]:4000` → `::1`): the name the
/// peer's certificate must be valid for.
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
