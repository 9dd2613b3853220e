//! The flags every role shares: configuration files, and the flags that
//! override what they say (the last layer of `plexus::config`: defaults <
//! files < `PLEXUS_*` environment < flags). Secrets have no flag.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use plexus::config::{Config, ConfigError, TlsSettings};
use plexus_cluster::SplitBrainStrategy;

/// The exit code of a configuration that was refused: nothing started.
pub const EXIT_CONFIG: u8 = 2;

/// Configuration files and the node's flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigFlags {
    /// A configuration file (TOML; repeatable, later files win over earlier
    /// ones; `plexus config defaults` prints every key). Environment
    /// variables PLEXUS_<SECTION>__<KEY> win over files, flags over both.
    #[arg(long = "config", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// A URI to listen on (repeatable); replaces `node.listen`. A member's
    /// address is the first one bound.
    #[arg(long, value_name = "URI")]
    pub listen: Vec<String>,
    /// The node's certificate chain (PEM); with --tls-key and --tls-ca
    /// (`node.tls`).
    #[arg(long, value_name = "PEM", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The node's private key (PEM).
    #[arg(long, value_name = "PEM", requires_all = ["tls_cert", "tls_ca"])]
    pub tls_key: Option<PathBuf>,
    /// The CA certificate peers' certificates must chain to (PEM).
    #[arg(long, value_name = "PEM", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// Where the management endpoint listens (`management.bind`; port 0
    /// picks a free one, printed as `MANAGEMENT http://...`).
    #[arg(long, value_name = "ADDR")]
    pub management_bind: Option<SocketAddr>,
}

impl ConfigFlags {
    /// The configuration: files and environment, then these flags, then
    /// `more` (the role's own flags); secrets read and every value checked.
    pub fn load(&self, more: impl FnOnce(&mut Config)) -> Result<Config, ConfigError> {
        let mut config = Config::load(&self.files)?;
        if !self.listen.is_empty() {
            config.node.listen.clone_from(&self.listen);
        }
        if let (Some(cert), Some(key), Some(ca)) = (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            config.node.tls = Some(TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            });
        }
        if let Some(bind) = self.management_bind {
            config.management.bind = bind;
        }
        more(&mut config);
        config.finish()
    }
}

/// Says why the configuration was refused; the exit code for it.
pub fn refused(role: &str, error: &ConfigError) -> ExitCode {
    eprintln!("plexus {role}: {error}");
    ExitCode::from(EXIT_CONFIG)
}

/// The cluster member's flags (each overrides its `[cluster]` or
/// `[discovery]` key). The `--*-ms` timings are for tests that want a
/// quick cluster; a deployment sets them in its file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterFlags {
    /// The cluster's name (`cluster.name`).
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// A member to join through (repeatable; `cluster.seeds`); none: form
    /// a new cluster.
    #[arg(long = "seed", value_name = "URI")]
    pub seeds: Vec<String>,
    /// Discover seeds from the SRV records of NAME (`discovery.dns_srv`).
    #[arg(long, value_name = "NAME", conflicts_with = "discover_dns")]
    pub discover_dns_srv: Option<String>,
    /// Discover seeds from the A/AAAA records of NAME (`discovery.dns`),
    /// each on --discover-port.
    #[arg(long, value_name = "NAME", requires = "discover_port")]
    pub discover_dns: Option<String>,
    /// The port of the members --discover-dns finds.
    #[arg(long, value_name = "PORT")]
    pub discover_port: Option<u16>,
    /// The scheme of discovered seed URIs.
    #[arg(long, value_name = "SCHEME")]
    pub discover_scheme: Option<String>,
    /// Members (this one included) a discovery must find before the lowest
    /// forms the cluster (`cluster.bootstrap_min_seeds`).
    #[arg(long, value_name = "N")]
    pub bootstrap_min_seeds: Option<usize>,
    /// Form a new cluster if no seed answered for this long.
    #[arg(long, value_name = "MS")]
    pub form_after_ms: Option<u64>,
    /// Between join attempts.
    #[arg(long, value_name = "MS")]
    pub join_retry_ms: Option<u64>,
    /// Between probes of a watched member.
    #[arg(long, value_name = "MS")]
    pub probe_interval_ms: Option<u64>,
    /// How long an indirect probe waits.
    #[arg(long, value_name = "MS")]
    pub probe_timeout_ms: Option<u64>,
    /// Between gossip rounds.
    #[arg(long, value_name = "MS")]
    pub gossip_interval_ms: Option<u64>,
    /// Between push-pull exchanges.
    #[arg(long, value_name = "MS")]
    pub push_pull_interval_ms: Option<u64>,
    /// Minimum suspicion, in probe intervals (× max(1, log10 N)).
    #[arg(long)]
    pub suspicion_mult: Option<f64>,
    /// How long the unreachable set must be stable before the split-brain
    /// resolver acts.
    #[arg(long, value_name = "MS")]
    pub stable_after_ms: Option<u64>,
    /// A down member is removed after this long.
    #[arg(long, value_name = "MS")]
    pub remove_after_ms: Option<u64>,
    /// Wait before rejoining after being downed.
    #[arg(long, value_name = "MS")]
    pub rejoin_delay_ms: Option<u64>,
    /// How long a leaving member gossips its departure.
    #[arg(long, value_name = "MS")]
    pub leave_timeout_ms: Option<u64>,
    /// keep-majority, keep-oldest, keep-oldest-down-if-alone, down-all or
    /// static-quorum=N (`cluster.split_brain`).
    #[arg(long, value_name = "STRATEGY")]
    pub split_brain: Option<SplitBrainStrategy>,
}

impl ClusterFlags {
    /// Writes the flags given over `config`.
    pub fn apply(&self, config: &mut Config) {
        let c = &mut config.cluster;
        if let Some(name) = &self.cluster_name {
            c.name.clone_from(name);
        }
        if !self.seeds.is_empty() {
            c.seeds.clone_from(&self.seeds);
        }
        let ms = Duration::from_millis;
        if let Some(v) = self.form_after_ms {
            c.form_after = Some(ms(v));
        }
        for (field, value) in [
            (&mut c.join_retry, self.join_retry_ms),
            (&mut c.probe_interval, self.probe_interval_ms),
            (&mut c.probe_timeout, self.probe_timeout_ms),
            (&mut c.gossip_interval, self.gossip_interval_ms),
            (&mut c.push_pull_interval, self.push_pull_interval_ms),
            (&mut c.stable_after, self.stable_after_ms),
            (&mut c.remove_after, self.remove_after_ms),
            (&mut c.rejoin_delay, self.rejoin_delay_ms),
            (&mut c.leave_timeout, self.leave_timeout_ms),
        ] {
            if let Some(v) = value {
                *field = ms(v);
            }
        }
        if let Some(m) = self.suspicion_mult {
            c.suspicion_mult = m;
        }
        if let Some(n) = self.bootstrap_min_seeds {
            c.bootstrap_min_seeds = n;
        }
        if let Some(s) = self.split_brain {
            c.split_brain = s;
        }
        let d = &mut config.discovery;
        if let Some(name) = &self.discover_dns_srv {
            d.dns_srv = Some(name.clone());
            d.dns = None;
        }
        if let Some(name) = &self.discover_dns {
            d.dns = Some(name.clone());
            d.dns_srv = None;
        }
        if let Some(port) = self.discover_port {
            d.port = Some(port);
        }
        if let Some(scheme) = &self.discover_scheme {
            d.scheme.clone_from(scheme);
        }
    }
}

/// Why a role's node or cluster member did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The TLS files could not be loaded.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The actor system could not be built.
    #[error("{0}")]
    System(#[from] plexus_core::SystemError),
    /// The node could not start or listen.
    #[error("{0}")]
    Node(#[from] plexus_remote::NodeError),
    /// The discovery could not be set up.
    #[error("{0}")]
    Discovery(#[from] plexus_cluster::DiscoveryError),
    /// The cluster member could not start.
    #[error("{0}")]
    Cluster(#[from] plexus_cluster::StartError),
}

/// A node started from `[node]`, listening on every `node.listen` URI.
pub struct Started {
    /// Its actor system (with the id its certificate certifies, if any).
    pub system: plexus_core::ActorSystem,
    /// The node.
    pub node: plexus_remote::Node,
    /// The bound URIs, in the order of `node.listen`.
    pub bound: Vec<String>,
}

/// Starts the node `config` describes and listens.
pub async fn start_node(config: &Config) -> Result<Started, StartError> {
    let node_config = config.node_config()?;
    let mut system = plexus_core::ActorSystem::builder();
    if let Some(id) = node_config.certified_node_id() {
        system = system.node_id(id);
    }
    let system = system.build()?;
    let node = plexus_remote::Node::start(&system, node_config)?;
    let mut bound = Vec::new();
    for uri in &config.node.listen {
        bound.push(node.listen(uri).await?);
    }
    Ok(Started {
        system,
        node,
        bound,
    })
}

/// Starts the cluster member on `started`'s node: `[cluster]`, through
/// `[discovery]` if configured. Returns it with its updates as a channel
/// the role's loop selects on, subscribed before the member can hear
/// from any other one, so the role sees every event of its own life
/// (its own `member-up` among them), whatever it starts next.
pub fn start_cluster(
    started: &Started,
    config: &Config,
) -> Result<
    (
        std::sync::Arc<plexus_cluster::Cluster>,
        tokio::sync::mpsc::UnboundedReceiver<plexus_cluster::ClusterUpdate>,
    ),
    StartError,
> {
    let (node, system) = (&started.node, &started.system);
    let cluster = match config.discovery.build()? {
        Some(d) => {
            plexus_cluster::Cluster::start_with_discovery(node, system, config.cluster.clone(), d)?
        }
        None => plexus_cluster::Cluster::start(node, system, config.cluster.clone())?,
    };
    let (tx, updates) = tokio::sync::mpsc::unbounded_channel();
    cluster.subscribe(
        system.spawn_fn(move |u: plexus_cluster::ClusterUpdate, _ctx| {
            let _ = tx.send(u);
        }),
    );
    Ok((std::sync::Arc::new(cluster), updates))
}

/// A role's flags parsed from `argv` (its first word the program name), as
/// `plexus ROLE` would parse them: for the roles' unit tests.
#[cfg(test)]
pub fn parse<T: clap::Args>(argv: &[&str]) -> T {
    #[derive(clap::Parser)]
    struct Cli<T: clap::Args> {
        #[command(flatten)]
        args: T,
    }
    <Cli<T> as clap::Parser>::parse_from(argv).args
}
