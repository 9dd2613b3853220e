//! Seeds from DNS: A/AAAA records of a name, or SRV records (what a
//! Kubernetes headless Service publishes for a named port), through
//! hickory-resolver.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{NameServerConfigGroup, ResolveHosts, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{Name, RData};
use hickory_resolver::proto::{ProtoError, ProtoErrorKind};
use hickory_resolver::{ResolveError, TokioResolver};

use super::{seed_list, Discovered, Discovery, DiscoveryError, DEFAULT_MAX_SEEDS};

/// Answers are cached at most this long, so a discovery run every
/// `join_retry` sees new members soon.
const MAX_POSITIVE_TTL: Duration = Duration::from_secs(5);
/// "No such name" is cached at most this long (a headless Service has no
/// records until its first pod gets an address).
const MAX_NEGATIVE_TTL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
enum Query {
    /// A and AAAA records of `name`, each `<scheme>://<ip>:<port>`.
    Hosts { name: String, port: u16 },
    /// SRV records of `name`, each target's addresses with the record's
    /// port (or the target's name, with `target_names`).
    Srv { name: String, target_names: bool },
}

/// Seeds from DNS records, as a Kubernetes headless Service (or Consul's
/// DNS interface, or any zone) publishes them.
///
/// - [`DnsDiscovery::srv`]: the SRV records of a name such as
///   `_plexus._tcp.plexus.default.svc.cluster.local` (Kubernetes publishes
///   them for a Service's named port: `_<port name>._<protocol>.<service>.
///   <namespace>.svc.<cluster domain>`). Each record's target is resolved
///   to its addresses (from the answer's additional records when the
///   server sent them, else by an A/AAAA lookup), each giving
///   `<scheme>://<ip>:<port>`, so members listening on their pod IP find
///   their own address among the seeds. [`DnsBuilder::srv_target_names`]
///   keeps `<scheme>://<target>:<port>` instead.
/// - [`DnsDiscovery::hosts`]: the A and AAAA records of a name
///   (`plexus.default.svc.cluster.local`), each `<scheme>://<ip>:<port>`
///   with one port for all.
///
/// Answers go through [`seed_list`]: sorted, deduplicated, at most
/// `max_seeds` (default 64; a larger answer is cut to the lowest, with a
/// warning). No records is [`DiscoveryError::Empty`]; a failed lookup is
/// [`DiscoveryError::Failed`] naming the name. SRV records with port 0 or
/// the target `.` ("no service", RFC 2782) are skipped, and so is a
/// target without addresses (with a warning).
///
/// ```no_run
/// # fn main() -> Result<(), plexus_cluster::discovery::DiscoveryError> {
/// use plexus_cluster::discovery::DnsDiscovery;
///
/// let dns = DnsDiscovery::srv("_plexus._tcp.plexus.default.svc.cluster.local").build()?;
/// let hosts = DnsDiscovery::hosts("plexus.default.svc.cluster.local", 4000)
///     .scheme("tcp")
///     .max_seeds(32)
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DnsDiscovery {
    resolver: TokioResolver,
    query: Query,
    scheme: String,
    max_seeds: usize,
}

/// Settings of a [`DnsDiscovery`]; [`DnsBuilder::build`] makes it.
#[derive(Debug, Clone)]
#[must_use]
pub struct DnsBuilder {
    query: Query,
    scheme: String,
    max_seeds: usize,
    nameservers: Option<Vec<SocketAddr>>,
}

impl DnsDiscovery {
    /// Seeds from the SRV records of `name`, resolved to addresses.
    pub fn srv(name: impl Into<String>) -> DnsBuilder {
        DnsBuilder::new(Query::Srv {
            name: name.into(),
            target_names: false,
        })
    }

    /// Seeds from the A and AAAA records of `name`, all on `port`.
    pub fn hosts(name: impl Into<String>, port: u16) -> DnsBuilder {
        DnsBuilder::new(Query::Hosts {
            name: name.into(),
            port,
        })
    }

    fn name(&self) -> &str {
        match &self.query {
            Query::Hosts { name, .. } | Query::Srv { name, .. } => name,
        }
    }

    async fn lookup_hosts(&self, name: &str, port: u16) -> Result<Vec<String>, DiscoveryError> {
        let what = self.describe();
        let ips = self
            .resolver
            .lookup_ip(name)
            .await
            .map_err(|e| lookup_error(&what, e))?;
        let scheme = &self.scheme;
        seed_list(
            &what,
            ips.iter()
                .map(|ip| format!("{scheme}://{}", SocketAddr::new(ip, port))),
            self.max_seeds,
        )
    }

    async fn lookup_srv(
        &self,
        name: &str,
        target_names: bool,
    ) -> Result<Vec<String>, DiscoveryError> {
        let what = self.describe();
        let lookup = self
            .resolver
            .srv_lookup(name)
            .await
            .map_err(|e| lookup_error(&what, e))?;
        // (target, port) pairs, sorted and bounded before any further
        // lookup, so a huge answer costs at most `max_seeds` of them.
        let mut targets: BTreeSet<(Name, u16)> = BTreeSet::new();
        for srv in lookup.iter() {
            if srv.port() == 0 || srv.target().is_root() {
                continue;
            }
            targets.insert((srv.target().to_lowercase(), srv.port()));
            if targets.len() > self.max_seeds {
                targets.pop_last();
            }
        }
        if targets.is_empty() {
            return Err(DiscoveryError::Empty { name: what });
        }
        let scheme = &self.scheme;
        if target_names {
            return seed_list(
                &what,
                targets.iter().map(|(target, port)| {
                    let host = target.to_utf8();
                    format!("{scheme}://{}:{port}", host.trim_end_matches('.'))
                }),
                self.max_seeds,
            );
        }
        // Addresses the server sent along (Kubernetes does), by name.
        let mut known: BTreeMap<Name, Vec<IpAddr>> = BTreeMap::new();
        for record in lookup.as_lookup().records() {
            let ip = match record.data() {
                RData::A(a) => IpAddr::V4(a.0),
                RData::AAAA(a) => IpAddr::V6(a.0),
                _ => continue,
            };
            let ips = known.entry(record.name().to_lowercase()).or_default();
            if ips.len() < self.max_seeds {
                ips.push(ip);
            }
        }
        let mut seeds = Vec::new();
        for (target, port) in &targets {
            let ips = match known.get(target) {
                Some(ips) => ips.clone(),
                None => match self.resolver.lookup_ip(target.clone()).await {
                    Ok(found) => found.iter().take(self.max_seeds).collect(),
                    Err(e) => {
                        tracing::warn!(target: "plexus::cluster", %what, srv_target = %target, error = %e, "discovery: skipped an SRV target without addresses");
                        continue;
                    }
                },
            };
            seeds.extend(
                ips.into_iter()
                    .map(|ip| format!("{scheme}://{}", SocketAddr::new(ip, *port))),
            );
        }
        seed_list(&what, seeds, self.max_seeds)
    }
}

impl Discovery for DnsDiscovery {
    fn discover(&self) -> Discovered<'_> {
        Box::pin(async move {
            match &self.query {
                Query::Hosts { name, port } => self.lookup_hosts(name, *port).await,
                Query::Srv { name, target_names } => self.lookup_srv(name, *target_names).await,
            }
        })
    }

    fn describe(&self) -> String {
        let kind = match self.query {
            Query::Hosts { .. } => "a/aaaa",
            Query::Srv { .. } => "srv",
        };
        format!("dns {kind} {}", self.name())
    }
}

/// No records (the name exists without them, or does not exist) is an
/// empty answer; anything else (a server failure, a refusal, no server
/// reached) a failure of the lookup.
fn lookup_error(what: &str, e: ResolveError) -> DiscoveryError {
    let no_records = e.proto().map(ProtoError::kind).is_some_and(|k| {
        matches!(
            k,
            ProtoErrorKind::NoRecordsFound {
                response_code: ResponseCode::NoError | ResponseCode::NXDomain,
                ..
            }
        )
    });
    if no_records {
        DiscoveryError::Empty {
            name: what.to_owned(),
        }
    } else {
        DiscoveryError::Failed {
            name: what.to_owned(),
            source: Box::new(e),
        }
    }
}

impl DnsBuilder {
    fn new(query: Query) -> Self {
        Self {
            query,
            scheme: String::from("tcp"),
            max_seeds: DEFAULT_MAX_SEEDS,
            nameservers: None,
        }
    }

    /// The scheme of the seed URIs (`tcp`, `udp`, `tls`, `quic`, ...).
    /// Default `tcp`.
    pub fn scheme(mut self, scheme: impl Into<String>) -> Self {
        self.scheme = scheme.into();
        self
    }

    /// Most seeds kept from one answer (at least 1). Default 64, about
    /// 64 × 40 bytes; a larger answer is cut to the lowest addresses.
    pub fn max_seeds(mut self, max_seeds: usize) -> Self {
        self.max_seeds = max_seeds.max(1);
        self
    }

    /// SRV mode: seeds name the records' targets
    /// (`tcp://plexus-0.plexus.default.svc.cluster.local:4000`) rather
    /// than their addresses. Members must then listen under those names
    /// for the bootstrap rule to find their own address among the seeds.
    /// Default off. No effect in A/AAAA mode.
    pub fn srv_target_names(mut self) -> Self {
        if let Query::Srv { target_names, .. } = &mut self.query {
            *target_names = true;
        }
        self
    }

    /// Asks these nameservers (UDP, then TCP for a truncated answer) with
    /// no search domains and no hosts file, instead of the system's
    /// settings (`/etc/resolv.conf`). Default: the system's.
    pub fn nameservers(mut self, servers: impl IntoIterator<Item = SocketAddr>) -> Self {
        self.nameservers = Some(servers.into_iter().collect());
        self
    }

    /// The discovery.
    ///
    /// # Errors
    ///
    /// [`DiscoveryError::Failed`] when the system's resolver settings
    /// cannot be read.
    pub fn build(self) -> Result<DnsDiscovery, DiscoveryError> {
        let provider = TokioConnectionProvider::default();
        let mut builder = match &self.nameservers {
            Some(servers) => {
                let mut group = NameServerConfigGroup::new();
                for s in servers {
                    group.merge(NameServerConfigGroup::from_ips_clear(
                        &[s.ip()],
                        s.port(),
                        true,
                    ));
                }
                let config = ResolverConfig::from_parts(None, Vec::new(), group);
                let mut b = TokioResolver::builder_with_config(config, provider);
                b.options_mut().use_hosts_file = ResolveHosts::Never;
                b
            }
            None => TokioResolver::builder(provider).map_err(|e| DiscoveryError::Failed {
                name: String::from("dns: the system's resolver settings"),
                source: Box::new(e),
            })?,
        };
        let options = builder.options_mut();
        options.positive_max_ttl = Some(MAX_POSITIVE_TTL);
        options.negative_max_ttl = Some(MAX_NEGATIVE_TTL);
        Ok(DnsDiscovery {
            resolver: builder.build(),
            query: self.query,
            scheme: self.scheme,
            max_seeds: self.max_seeds,
        })
    }
}

#[cfg(test)]
mod tests;
