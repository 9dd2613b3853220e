//! `plexus member`: one cluster member as its own OS process, for
//! running a cluster from a shell, across machines, and for the
//! multi-process tests and benchmarks (`tests/processes.rs`,
//! `tests/partition.rs`, `plexus-bench cluster-procs`).
//!
//! ```text
//! plexus member --listen tcp://10.0.0.7:4000 [--cookie SECRET]
//!                     [--cluster-name NAME] [--seed URI ...]
//!                     [--discover-dns-srv NAME | --discover-dns NAME --discover-port PORT]
//!                     [--discover-scheme tcp] [--bootstrap-min-seeds N]
//!                     [--probe-interval-ms MS] [--gossip-interval-ms MS] ...
//!                     [--split-brain keep-majority|keep-oldest|down-all|static-quorum=N]
//!                     [--tls-cert n1.pem --tls-key n1.key --tls-ca ca.pem]
//!                     [--stats-every-ms MS]
//! ```
//!
//! It starts a node listening on `--listen`, starts the cluster member on
//! it (its address is the bound URI) and prints one line per happening
//! to stdout, flushed at once, so a parent process can follow it:
//!
//! ```text
//! LISTENING tcp://127.0.0.1:4000
//! EVENT subscribed tcp://127.0.0.1:4000 1795000000000
//! EVENT member-up tcp://127.0.0.1:4001 1795000000123
//! MEMBERS up=2
//! EVENT member-downed tcp://127.0.0.1:4001 1795000000123 split-brain:keep-majority:1/2
//! EVENT self-downed tcp://127.0.0.1:4000 1795000000000 split-brain:keep-majority:1/2
//! STATS t_ms=5000 bytes_sent=18230 packets_sent=160 members_up=2 suspicions_raised=0 ...
//! ```
//!
//! `EVENT <kind> <address> <incarnation> [<reason>]`: the kinds are the
//! [`ClusterEvent`] variants in kebab case; for events about this member
//! (`subscribed`, `formed`, `admitted`, `refuted`, `self-downed`,
//! `rejoining`, `left`) the address and incarnation are its own (after the
//! event). A reason is `split-brain:<strategy>:<reachable>/<members>`,
//! `reported-by:<address>` or `restarted:<incarnation>` (a member's old
//! life, replaced by its restarted process at the same address, whose
//! incarnation it names). `MEMBERS up=<n>` follows an event that changed
//! the number of members up. `STATS` comes every `--stats-every-ms` with the
//! member's counters ([`MembershipStats`]) and `t_ms`, the milliseconds
//! since the process started.
//!
//! Timings default to [`ClusterConfig`]'s; the `--*-ms` flags are for tests
//! that want a quick cluster. SIGTERM or Ctrl-C makes the member leave
//! gracefully (`EVENT left ...`), then the process exits 0. If stdout is
//! closed (the parent died), the process exits. Warnings (a join attempt
//! that failed, with the seed and the cause; a member that cannot be
//! reached) go to stderr; `RUST_LOG` sets what else is logged there (the
//! events as readable lines at `plexus::cluster=info`).

use plexus_remote::process::{self, tick, Lines};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use plexus_cluster::discovery::{Discovery, DnsDiscovery};
use plexus_cluster::{
    Cluster, ClusterConfig, ClusterEvent, ClusterUpdate, DownReason, MemberState, MembershipStats,
    SplitBrainStrategy,
};
use plexus_core::ActorSystem;
use plexus_remote::{Node, NodeConfig};
use plexus_transport::tls::TlsConfig;
use tokio::sync::mpsc;

/// Every flag of the binary (one struct, so new ones go in one place).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// URI to listen on; the bound URI is the member's address.
    #[arg(long, default_value = "tcp://127.0.0.1:0")]
    listen: String,
    /// The node's cookie (every member must use the same).
    #[arg(long, default_value = "plexus")]
    cookie: String,
    /// The cluster's name.
    #[arg(long, default_value = "plexus")]
    cluster_name: String,
    /// A member to join through (repeatable); none: form a new cluster.
    #[arg(long = "seed", value_name = "URI")]
    seeds: Vec<String>,
    /// Discover seeds from the SRV records of NAME (a Kubernetes headless
    /// Service's named port:
    /// `_<port>._tcp.<service>.<namespace>.svc.cluster.local`), rerun every
    /// join retry while joining; the lowest of the members found forms
    /// the cluster (docs/CLUSTER.md, "Discovery").
    #[arg(long, value_name = "NAME", conflicts_with = "discover_dns")]
    discover_dns_srv: Option<String>,
    /// Discover seeds from the A/AAAA records of NAME, each on
    /// --discover-port.
    #[arg(long, value_name = "NAME", requires = "discover_port")]
    discover_dns: Option<String>,
    /// The port of the members --discover-dns finds.
    #[arg(long, value_name = "PORT")]
    discover_port: Option<u16>,
    /// The scheme of discovered seed URIs.
    #[arg(long, value_name = "SCHEME", default_value = "tcp")]
    discover_scheme: String,
    /// With a discovery: how many members (this one included) must be
    /// found before the lowest may form the cluster; set it to the number
    /// of members started together (default 2).
    #[arg(long, value_name = "N")]
    bootstrap_min_seeds: Option<usize>,
    /// Form a new cluster if no seed answered for this long (default:
    /// never).
    #[arg(long, value_name = "MS")]
    form_after_ms: Option<u64>,
    /// Between join attempts.
    #[arg(long, value_name = "MS")]
    join_retry_ms: Option<u64>,
    /// Between probes of a watched member.
    #[arg(long, value_name = "MS")]
    probe_interval_ms: Option<u64>,
    /// How long an indirect probe waits.
    #[arg(long, value_name = "MS")]
    probe_timeout_ms: Option<u64>,
    /// Between gossip rounds.
    #[arg(long, value_name = "MS")]
    gossip_interval_ms: Option<u64>,
    /// Between push-pull exchanges.
    #[arg(long, value_name = "MS")]
    push_pull_interval_ms: Option<u64>,
    /// Minimum suspicion, in probe intervals (× max(1, log10 N)).
    #[arg(long)]
    suspicion_mult: Option<f64>,
    /// How long the unreachable set must be stable before the split-brain
    /// resolver acts.
    #[arg(long, value_name = "MS")]
    stable_after_ms: Option<u64>,
    /// A down member is removed after this long.
    #[arg(long, value_name = "MS")]
    remove_after_ms: Option<u64>,
    /// Wait before rejoining after being downed.
    #[arg(long, value_name = "MS")]
    rejoin_delay_ms: Option<u64>,
    /// How long a leaving member gossips its departure.
    #[arg(long, value_name = "MS")]
    leave_timeout_ms: Option<u64>,
    /// keep-majority, keep-oldest, keep-oldest-down-if-alone, down-all or
    /// static-quorum=N (default keep-majority).
    #[arg(long, value_parser = parse_split_brain)]
    split_brain: Option<SplitBrainStrategy>,
    /// The node's certificate chain (PEM); with --tls-key and --tls-ca.
    #[arg(long, value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// The node's private key (PEM).
    #[arg(long, value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// The cluster's CA certificate (PEM): only its certificates get in.
    #[arg(long, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// Print a STATS line this often.
    #[arg(long, value_name = "MS")]
    stats_every_ms: Option<u64>,
}

/// A `--split-brain` value that names no strategy.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{0}`: expected keep-majority, keep-oldest, keep-oldest-down-if-alone, down-all or static-quorum=N (N >= 1)"
)]
struct BadStrategy(String);

fn parse_split_brain(s: &str) -> Result<SplitBrainStrategy, BadStrategy> {
    Ok(match s {
        "keep-majority" => SplitBrainStrategy::KeepMajority,
        "keep-oldest" => SplitBrainStrategy::KeepOldest {
            down_if_alone: false,
        },
        "keep-oldest-down-if-alone" => SplitBrainStrategy::KeepOldest {
            down_if_alone: true,
        },
        "down-all" => SplitBrainStrategy::DownAll,
        _ => match s
            .strip_prefix("static-quorum=")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(size) if size >= 1 => SplitBrainStrategy::StaticQuorum { size },
            _ => return Err(BadStrategy(s.to_owned())),
        },
    })
}

/// Why the member could not start.
#[derive(Debug, thiserror::Error)]
enum Fail {
    #[error("--tls-cert, --tls-key and --tls-ca go together")]
    PartialTls,
    #[error("{0}")]
    Tls(#[from] plexus_transport::tls::TlsConfigError),
    #[error("{0}")]
    System(#[from] plexus_core::SystemError),
    #[error("{0}")]
    Node(#[from] plexus_remote::NodeError),
    #[error("{0}")]
    Cluster(#[from] plexus_cluster::StartError),
    #[error("{0}")]
    Discovery(#[from] plexus_cluster::DiscoveryError),
}

impl Args {
    fn cluster_config(&self) -> ClusterConfig {
        let ms = Duration::from_millis;
        let mut c = ClusterConfig::default()
            .name(self.cluster_name.clone())
            .seeds(self.seeds.iter().cloned());
        c.form_after = self.form_after_ms.map(ms);
        let set = |field: &mut Duration, value: Option<u64>| {
            if let Some(v) = value {
                *field = ms(v);
            }
        };
        set(&mut c.join_retry, self.join_retry_ms);
        set(&mut c.probe_interval, self.probe_interval_ms);
        set(&mut c.probe_timeout, self.probe_timeout_ms);
        set(&mut c.gossip_interval, self.gossip_interval_ms);
        set(&mut c.push_pull_interval, self.push_pull_interval_ms);
        set(&mut c.stable_after, self.stable_after_ms);
        set(&mut c.remove_after, self.remove_after_ms);
        set(&mut c.rejoin_delay, self.rejoin_delay_ms);
        set(&mut c.leave_timeout, self.leave_timeout_ms);
        if let Some(m) = self.suspicion_mult {
            c.suspicion_mult = m;
        }
        if let Some(n) = self.bootstrap_min_seeds {
            c.bootstrap_min_seeds = n;
        }
        if let Some(s) = self.split_brain {
            c.split_brain = s;
        }
        c
    }

    /// The DNS discovery the flags name, if any.
    fn discovery(&self) -> Result<Option<Box<dyn Discovery>>, Fail> {
        let builder = match (
            &self.discover_dns_srv,
            &self.discover_dns,
            self.discover_port,
        ) {
            (Some(name), _, _) => DnsDiscovery::srv(name.clone()),
            (None, Some(name), Some(port)) => DnsDiscovery::hosts(name.clone(), port),
            // clap requires --discover-port with --discover-dns.
            _ => return Ok(None),
        };
        let discovery = builder.scheme(self.discover_scheme.clone()).build()?;
        Ok(Some(Box::new(discovery)))
    }

    fn node_config(&self) -> Result<NodeConfig, Fail> {
        let config = NodeConfig::default().cookie(self.cookie.clone());
        match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (Some(cert), Some(key), Some(ca)) => {
                Ok(config.tls(TlsConfig::from_pem_files(cert, key, ca)?))
            }
            (None, None, None) => Ok(config),
            _ => Err(Fail::PartialTls),
        }
    }
}

pub fn main(args: Args) -> ExitCode {
    process::block_on("plexus member", 2, run(args))
}

async fn run(args: Args) -> Result<(), Fail> {
    let started = Instant::now();
    let node_config = args.node_config()?;
    let mut system = ActorSystem::builder();
    if let Some(id) = node_config.certified_node_id() {
        system = system.node_id(id);
    }
    let system = system.build()?;
    let node = Node::start(&system, node_config)?;
    let bound = node.listen(&args.listen).await?;
    let mut out = Out::default();
    // SIGTERM or Ctrl-C: listened for before the line a parent waits for,
    // so that one sent as soon as it is read is not missed.
    let stop = process::stop_signal();
    out.line(format_args!("LISTENING {bound}"));
    let cluster = match args.discovery()? {
        Some(d) => Cluster::start_with_discovery(&node, &system, args.cluster_config(), d)?,
        None => Cluster::start(&node, &system, args.cluster_config())?,
    };
    let (tx, mut updates) = mpsc::unbounded_channel();
    cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
        let _ = tx.send(u);
    }));
    let mut stats = args.stats_every_ms.map(|ms| {
        let every = Duration::from_millis(ms.max(1));
        tokio::time::interval_at(tokio::time::Instant::now() + every, every)
    });
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(u) = updates.recv() => out.update(&u),
            _ = tick(stats.as_mut()) => out.stats(started, cluster.stats(), out.up),
        }
        if out.lines.closed() {
            // Nobody reads our lines any more: stop like a crash.
            return Ok(());
        }
    }
    let leave = cluster.leave();
    tokio::pin!(leave);
    loop {
        tokio::select! {
            () = &mut leave => break,
            Some(u) = updates.recv() => out.update(&u),
        }
    }
    // The subscriber may still be handing on the last updates (`Left`
    // among them); give it a moment, not forever.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(u) = updates.recv().await {
            out.update(&u);
            if u.event == ClusterEvent::Left {
                return;
            }
        }
    })
    .await;
    node.shutdown().await;
    Ok(())
}

/// Writes the lines, each flushed at once.
#[derive(Default)]
struct Out {
    /// Members up after the last update printed.
    up: usize,
    lines: Lines,
}

impl Out {
    fn line(&self, text: std::fmt::Arguments<'_>) {
        self.lines.line(text);
    }

    fn update(&mut self, u: &ClusterUpdate) {
        let me = (&u.local.address, u.local.incarnation);
        let (kind, (address, incarnation), reason) = match &u.event {
            ClusterEvent::Subscribed { .. } => ("subscribed", me, None),
            ClusterEvent::Formed { .. } => ("formed", me, None),
            ClusterEvent::Admitted { by, .. } => ("admitted", me, Some(format!("by:{by}"))),
            ClusterEvent::MemberJoined(m) => ("member-joined", (&m.address, m.incarnation), None),
            ClusterEvent::MemberUp(m) => ("member-up", (&m.address, m.incarnation), None),
            ClusterEvent::MemberSuspected(m) => {
                ("member-suspected", (&m.address, m.incarnation), None)
            }
            ClusterEvent::MemberReachable(m) => {
                ("member-reachable", (&m.address, m.incarnation), None)
            }
            ClusterEvent::MemberUnreachable(m) => {
                ("member-unreachable", (&m.address, m.incarnation), None)
            }
            ClusterEvent::MemberDowned { member, reason } => (
                "member-downed",
                (&member.address, member.incarnation),
                Some(reason_token(reason)),
            ),
            ClusterEvent::MemberLeaving(m) => ("member-leaving", (&m.address, m.incarnation), None),
            ClusterEvent::MemberRemoved(m) => ("member-removed", (&m.address, m.incarnation), None),
            ClusterEvent::Refuted { .. } => ("refuted", me, None),
            ClusterEvent::SelfDowned { reason } => ("self-downed", me, Some(reason_token(reason))),
            ClusterEvent::Rejoining { .. } => ("rejoining", me, None),
            ClusterEvent::Left => ("left", me, None),
            _ => ("other", me, None),
        };
        match reason {
            Some(r) => self.line(format_args!("EVENT {kind} {address} {incarnation} {r}")),
            None => self.line(format_args!("EVENT {kind} {address} {incarnation}")),
        }
        let up = u
            .members
            .iter()
            .filter(|m| m.state == MemberState::Up)
            .count();
        if up != self.up {
            self.up = up;
            self.line(format_args!("MEMBERS up={up}"));
        }
    }

    fn stats(&mut self, started: Instant, s: MembershipStats, up: usize) {
        self.line(format_args!(
            "STATS t_ms={} bytes_sent={} packets_sent={} members_up={up} suspicions_raised={} \
             refutations={} stalls_noticed={} packets_refused={} claims_refused={} \
             join_attempts_failed={} unreachable_reports={}",
            started.elapsed().as_millis(),
            s.bytes_sent,
            s.packets_sent,
            s.suspicions_raised,
            s.refutations,
            s.stalls_noticed,
            s.packets_refused,
            s.claims_refused,
            s.join_attempts_failed,
            s.unreachable_reports,
        ));
    }
}

/// A reason as one token: `split-brain:<strategy>:<reachable>/<members>`,
/// `reported-by:<address>` or `restarted:<new incarnation>`.
fn reason_token(reason: &DownReason) -> String {
    match reason {
        DownReason::SplitBrain {
            strategy,
            reachable,
            members,
        } => format!("split-brain:{strategy}:{reachable}/{members}"),
        DownReason::ReportedBy(by) => format!("reported-by:{by}"),
        DownReason::Restarted { incarnation } => format!("restarted:{incarnation}"),
        _ => "other".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<const N: usize>(argv: [&str; N]) -> Args {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        <Cli as clap::Parser>::parse_from(argv).args
    }

    #[test]
    fn split_brain_names_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_split_brain("keep-majority").ok(),
            Some(SplitBrainStrategy::KeepMajority)
        );
        assert_eq!(
            parse_split_brain("static-quorum=3").ok(),
            Some(SplitBrainStrategy::StaticQuorum { size: 3 })
        );
        assert_eq!(
            parse_split_brain("down-all").ok(),
            Some(SplitBrainStrategy::DownAll)
        );
        for bad in ["", "majority", "static-quorum=0", "static-quorum=x"] {
            assert!(parse_split_brain(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_left_out_keep_the_default_timings() {
        let args = parse(["plexus member", "--seed", "tcp://a:1"]);
        let c = args.cluster_config();
        let d = ClusterConfig::default();
        assert_eq!(c.probe_interval, d.probe_interval);
        assert_eq!(c.stable_after, d.stable_after);
        assert_eq!(c.split_brain, d.split_brain);
        assert_eq!(c.seeds, vec!["tcp://a:1".to_owned()]);
        let quick = parse([
            "plexus member",
            "--probe-interval-ms",
            "200",
            "--split-brain",
            "static-quorum=2",
        ])
        .cluster_config();
        assert_eq!(quick.probe_interval, Duration::from_millis(200));
        assert_eq!(
            quick.split_brain,
            SplitBrainStrategy::StaticQuorum { size: 2 }
        );
    }

    #[test]
    fn partial_tls_flags_are_refused() {
        let args = parse(["plexus member", "--tls-cert", "c.pem"]);
        assert!(matches!(args.node_config(), Err(Fail::PartialTls)));
    }
}
