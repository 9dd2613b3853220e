//! The sections of [`Config`](super::Config) that are not a library's own
//! settings struct: the node (whose `NodeConfig` holds loaded keys and
//! transports, not file names), discovery, the store and the management
//! endpoint.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// The cookie a node uses when none is configured: fine on loopback,
/// refused on any other address (anyone who knows the default could join).
pub const DEFAULT_COOKIE: &str = "plexus";

/// `[node]`: where the node listens and how it proves it belongs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct NodeSettings {
    /// URIs to listen on; the first bound one is a member's address. One
    /// URI may be given as a string (`PLEXUS_NODE__LISTEN=tcp://...`).
    #[serde(deserialize_with = "one_or_many")]
    pub listen: Vec<String>,
    /// The cluster cookie, shared by every node of a deployment. A secret:
    /// prefer `PLEXUS_NODE__COOKIE` or `cookie_file`.
    pub cookie: String,
    /// A file whose content (trimmed) is the cookie; wins over `cookie`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cookie_file: Option<PathBuf>,
    /// Schemes of one's own: name = stack spec
    /// (`eudp = "udp / slicing / delivery / ordering"`).
    pub schemes: BTreeMap<String, String>,
    /// Certificates for `tls://`, `quic://` and `wss://`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
}

impl Default for NodeSettings {
    fn default() -> Self {
        Self {
            listen: vec!["tcp://127.0.0.1:0".to_owned()],
            cookie: DEFAULT_COOKIE.to_owned(),
            cookie_file: None,
            schemes: BTreeMap::new(),
            tls: None,
        }
    }
}

/// `[node.tls]`: PEM files of the node's certificate chain, its key and
/// the CA its peers' certificates must chain to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// The node's certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM); a secret, readable by the node's user only.
    pub key: PathBuf,
    /// The CA roots (PEM).
    pub ca: PathBuf,
}

impl NodeSettings {
    pub(super) fn read_secrets(&mut self) -> Result<(), ConfigError> {
        if let Some(file) = &self.cookie_file {
            self.cookie = read_secret("node.cookie_file", file)?;
        }
        Ok(())
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.listen.is_empty() {
            return Err(ConfigError::invalid(
                "node.listen",
                "must name at least one URI",
            ));
        }
        if self.cookie.is_empty() {
            return Err(ConfigError::invalid("node.cookie", "must not be empty"));
        }
        for uri in &self.listen {
            let parsed = plexus_remote::Uri::parse(uri).map_err(|e| {
                ConfigError::invalid("node.listen", format!("`{uri}` is not a node URI: {e}"))
            })?;
            if self.cookie == DEFAULT_COOKIE && !is_loopback(&parsed) {
                return Err(ConfigError::DefaultCookie {
                    listen: uri.clone(),
                });
            }
        }
        Ok(())
    }

    /// The node's [`NodeConfig`](plexus_remote::NodeConfig): cookie,
    /// schemes and TLS material.
    pub(super) fn node_config(&self) -> Result<plexus_remote::NodeConfig, ConfigError> {
        let mut config = plexus_remote::NodeConfig::default().cookie(self.cookie.clone());
        for (scheme, spec) in &self.schemes {
            config = config.scheme(scheme, spec);
        }
        if let Some(tls) = &self.tls {
            #[cfg(feature = "tls")]
            {
                let loaded =
                    plexus_transport::tls::TlsConfig::from_pem_files(&tls.cert, &tls.key, &tls.ca)
                        .map_err(|e| ConfigError::Tls {
                            cause: e.to_string(),
                        })?;
                config = config.tls(loaded);
            }
            #[cfg(not(feature = "tls"))]
            {
                let _ = tls;
                return Err(ConfigError::Tls {
                    cause: "this build has no TLS (the `tls` feature is off)".to_owned(),
                });
            }
        }
        Ok(config)
    }
}

/// Whether the URI's host is a loopback address (`127.0.0.0/8`, `::1`,
/// `localhost`), or a Unix socket or in-memory endpoint (not reachable
/// from another machine).
fn is_loopback(uri: &plexus_remote::Uri) -> bool {
    if matches!(uri.scheme.as_str(), "uds" | "mem") {
        return true;
    }
    // `host:port`, `[v6]:port`.
    let host = match uri.addr.rsplit_once(':') {
        Some((host, _port)) => host,
        None => uri.addr.as_str(),
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// `[discovery]`: seeds found in DNS, rerun at every join retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct DiscoverySettings {
    /// SRV records to read (a Kubernetes headless Service's named port:
    /// `_<port>._tcp.<service>.<namespace>.svc.cluster.local`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_srv: Option<String>,
    /// A/AAAA records to read, each member on `port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<String>,
    /// The port of the members `dns` finds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The scheme of discovered seed URIs.
    pub scheme: String,
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        Self {
            dns_srv: None,
            dns: None,
            port: None,
            scheme: "tcp".to_owned(),
        }
    }
}

impl DiscoverySettings {
    /// The DNS discovery these settings name, if any.
    ///
    /// # Errors
    ///
    /// [`DiscoveryError`](plexus_cluster::DiscoveryError) if the system's
    /// resolver configuration cannot be read.
    pub fn build(
        &self,
    ) -> Result<Option<Box<dyn plexus_cluster::discovery::Discovery>>, plexus_cluster::DiscoveryError>
    {
        use plexus_cluster::discovery::DnsDiscovery;
        let builder = match (&self.dns_srv, &self.dns, self.port) {
            (Some(name), _, _) => DnsDiscovery::srv(name.clone()),
            (None, Some(name), Some(port)) => DnsDiscovery::hosts(name.clone(), port),
            // `validate` refuses `dns` without `port`.
            _ => return Ok(None),
        };
        let discovery = builder.scheme(self.scheme.clone()).build()?;
        Ok(Some(Box::new(discovery)))
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        match (&self.dns_srv, &self.dns, self.port) {
            (Some(_), Some(_), _) => Err(ConfigError::invalid(
                "discovery.dns",
                "give dns_srv or dns, not both",
            )),
            (None, Some(_), None) => Err(ConfigError::invalid(
                "discovery.port",
                "is needed with discovery.dns",
            )),
            _ => Ok(()),
        }
    }
}

/// `[store]`: the durable store of replicated data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct StoreSettings {
    /// The store's file; none: durable keys are kept in memory only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Create the file as a new, empty store if it is missing or empty
    /// (default: refuse, so a member whose file was lost does not come up
    /// without its durable keys).
    pub create: bool,
}

/// `[management]`: the HTTP endpoint operators and orchestrators use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ManagementSettings {
    /// Serve the endpoint.
    pub enabled: bool,
    /// Address and port; loopback unless configured otherwise.
    pub bind: SocketAddr,
    /// The bearer token that state-changing calls (leave, down, data
    /// writes) need. A secret: prefer `PLEXUS_MANAGEMENT__TOKEN` or
    /// `token_file`. None: those calls are refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file whose content (trimmed) is the token; wins over `token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
}

impl Default for ManagementSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            bind: SocketAddr::from(([127, 0, 0, 1], 8558)),
            token: None,
            token_file: None,
        }
    }
}

impl ManagementSettings {
    pub(super) fn read_secrets(&mut self) -> Result<(), ConfigError> {
        if let Some(file) = &self.token_file {
            self.token = Some(read_secret("management.token_file", file)?);
        }
        Ok(())
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.token.as_deref().is_some_and(|t| t.len() < 16) {
            return Err(ConfigError::invalid(
                "management.token",
                "must be at least 16 characters",
            ));
        }
        Ok(())
    }
}

/// A list, or one string as a list of one (what an environment variable
/// gives).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// The trimmed content of a secret's file.
fn read_secret(key: &'static str, file: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Secret {
        key,
        file: file.to_owned(),
        source,
    })?;
    let secret = text.trim().to_owned();
    if secret.is_empty() {
        return Err(ConfigError::invalid(
            key,
            format!("{} is empty", file.display()),
        ));
    }
    Ok(secret)
}
