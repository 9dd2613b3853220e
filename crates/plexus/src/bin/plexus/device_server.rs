//! `plexus device-server`: a cluster member that tracks devices, as a
//! process (for the multi-process tests and `plexus-bench w5`).
//!
//! ```text
//! plexus device-server [--config FILE ...] --listen udp://127.0.0.1:4000
//!                      [--spec 'udp / delivery / ordering']
//!                      [--seed URI ...] [--stats-every-ms MS]
//!                      [--probe-interval-ms MS ...] [--threads N]
//! ```
//!
//! It starts a node on `--listen` (the scheme's stack replaced by `--spec`
//! if given; devices must use a compatible stack), a cluster member on it
//! joining through `--seed` (none: it forms the cluster), its replicator
//! (`plexus-data`) and the device tracker (`DeviceServer`) recording device
//! states in the replicated directory (`--local-directory`: this server's
//! table only). One flushed line per happening on stdout:
//!
//! ```text
//! LISTENING udp://127.0.0.1:4000
//! MEMBERS up=3
//! DEVICE registered d7 <session> [forwarded]
//! DEVICE forwarded d7 <owner>
//! DEVICE moved d7 <new server>
//! DEVICE lost d7 | recovered d7 | forgotten d7 | released d7
//! DEVICE duplicate-stopped d7 <stopped session> <holder session>
//! STATS t_ms=5000 reports=123456 devices=32 registrations=32 forwarded=0 moved=0 resends=3 refused=0 rate_limited=0 lost=0
//! ```
//!
//! Refused device packets are logged on stderr (warnings). SIGTERM or
//! Ctrl-C leaves the cluster and exits; so does a closed stdout.

use plexus_remote::process::{self, tick, Lines};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus::config::Config;
use plexus::management::Management;
use plexus_cluster::MemberState;
use plexus_data::node::Replication;
use plexus_devices::replicated::ReplicatedDirectory;
use plexus_devices::server::DeviceServer;
use plexus_devices::TrackerEvent;
use tokio::sync::mpsc;

use crate::settings::{self, ClusterFlags, ConfigFlags};

/// The flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    config: ConfigFlags,
    #[command(flatten)]
    cluster: ClusterFlags,
    /// Stack spec of the listen URI's scheme (e.g. `udp / delivery /
    /// ordering`; `node.schemes`); default: the scheme's built-in stack.
    #[arg(long)]
    spec: Option<String>,
    /// Heartbeats to each device, and expected from it
    /// (`devices.liveness.heartbeat_interval`).
    #[arg(long, value_name = "MS")]
    heartbeat_ms: Option<u64>,
    /// Print a STATS line this often.
    #[arg(long, value_name = "MS")]
    stats_every_ms: Option<u64>,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Keep device states in this server's table only (no replicator).
    #[arg(long)]
    local_directory: bool,
}

impl Args {
    /// Writes the flags given over `config`.
    fn apply(&self, config: &mut Config) {
        self.cluster.apply(config);
        if let Some(ms) = self.heartbeat_ms {
            config.devices.liveness.heartbeat_interval = Duration::from_millis(ms.max(1));
        }
        if let Some(spec) = &self.spec {
            // The scheme of every URI listened on takes the spec.
            for uri in &config.node.listen {
                if let Some((scheme, _)) = uri.split_once("://") {
                    config.node.schemes.insert(scheme.to_owned(), spec.clone());
                }
            }
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
enum Fail {
    #[error("{0}")]
    Start(#[from] settings::StartError),
    #[error("{0}")]
    Devices(#[from] plexus_devices::server::ServerStartError),
    #[error("{0}")]
    Data(#[from] plexus_data::node::StartError),
    #[error("{0}")]
    Management(#[from] plexus::management::ManagementError),
}

pub fn main(args: Args) -> ExitCode {
    let config = match args.config.load(|c| args.apply(c)) {
        Ok(config) => config,
        Err(e) => return settings::refused("device-server", &e),
    };
    process::block_on("plexus device-server", args.threads, run(args, config))
}

async fn run(args: Args, config: Config) -> Result<(), Fail> {
    let started = Instant::now();
    let node_started = settings::start_node(&config).await?;
    let mut out = Out::default();
    // SIGTERM or Ctrl-C: listened for before the line a parent waits for,
    // so that one sent as soon as it is read is not missed.
    let stop = process::stop_signal();
    for b in &node_started.bound {
        out.line(format_args!("LISTENING {b}"));
    }
    let (cluster, mut updates) = settings::start_cluster(&node_started, &config)?;
    let settings::Started { system, node, .. } = node_started;
    let (server, replication) = if args.local_directory {
        let server = DeviceServer::start(&node, &system, &cluster, config.devices.clone())?;
        (Server::Local(server), None)
    } else {
        let replication = Arc::new(Replication::start(
            &node,
            &system,
            &cluster,
            config.data.clone(),
            None,
        )?);
        let directory = ReplicatedDirectory::start(&system, Arc::clone(&replication));
        let server =
            DeviceServer::start_with(&node, &system, &cluster, config.devices.clone(), directory)?;
        (Server::Replicated(server), Some(replication))
    };
    // Shared with the management endpoint, which publishes its counters.
    let server = Arc::new(server);
    if config.management.enabled {
        let scraped = Arc::clone(&server);
        let mut management = Management::new(&config.management)
            .node(&node)
            .cluster(Arc::clone(&cluster))
            .metrics(crate::metrics::render())
            .on_scrape(move || scraped.record_metrics());
        if let Some(r) = &replication {
            management = management.data(r);
        }
        let at = management.start(&system).await?;
        out.line(format_args!("MANAGEMENT http://{at}"));
    }
    let mut events = server.subscribe();
    let mut stats = process::ticker(args.stats_every_ms);
    tokio::pin!(stop);
    let mut up = 0;
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(u) = updates.recv() => {
                let n = u.members.iter().filter(|m| m.state == MemberState::Up).count();
                if n != up {
                    up = n;
                    out.line(format_args!("MEMBERS up={up}"));
                }
            }
            Some(e) = events.recv() => out.event(&e),
            _ = tick(stats.as_mut()) => {
                let s = server.stats();
                out.line(format_args!(
                    "STATS t_ms={} reports={} devices={} registrations={} forwarded={} moved={} \
                     resends={} stale_reports={} refused={} rate_limited={} lost={}",
                    started.elapsed().as_millis(),
                    s.reports, s.devices, s.registrations, s.forwarded, s.moved,
                    s.resends, s.stale_reports, s.refused, s.rate_limited, s.lost,
                ));
            }
        }
        if out.lines.closed() {
            return Ok(());
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), cluster.leave()).await;
    node.shutdown().await;
    Ok(())
}

/// The device server, with either directory.
enum Server {
    Local(DeviceServer),
    Replicated(DeviceServer<ReplicatedDirectory>),
}

impl Server {
    fn subscribe(&self) -> mpsc::UnboundedReceiver<TrackerEvent> {
        match self {
            Server::Local(s) => s.subscribe(),
            Server::Replicated(s) => s.subscribe(),
        }
    }

    fn stats(&self) -> plexus_devices::TrackerStats {
        match self {
            Server::Local(s) => s.stats(),
            Server::Replicated(s) => s.stats(),
        }
    }

    fn record_metrics(&self) {
        match self {
            Server::Local(s) => s.record_metrics(),
            Server::Replicated(s) => s.record_metrics(),
        }
    }
}

/// Writes the lines, each flushed at once.
#[derive(Default)]
struct Out {
    lines: Lines,
}

impl Out {
    fn line(&self, text: std::fmt::Arguments<'_>) {
        self.lines.line(text);
    }

    fn event(&mut self, e: &TrackerEvent) {
        match e {
            TrackerEvent::Registered {
                device,
                session,
                forwarded,
            } => {
                let via = if *forwarded { " forwarded" } else { "" };
                self.line(format_args!("DEVICE registered {device} {session}{via}"));
            }
            TrackerEvent::Forwarded { device, to } => {
                self.line(format_args!("DEVICE forwarded {device} {to}"));
            }
            TrackerEvent::Moved { device, to } => {
                self.line(format_args!("DEVICE moved {device} {to}"));
            }
            TrackerEvent::Lost { device } => self.line(format_args!("DEVICE lost {device}")),
            TrackerEvent::Recovered { device } => {
                self.line(format_args!("DEVICE recovered {device}"));
            }
            TrackerEvent::Forgotten { device } => {
                self.line(format_args!("DEVICE forgotten {device}"));
            }
            TrackerEvent::Released { device } => {
                self.line(format_args!("DEVICE released {device}"));
            }
            TrackerEvent::DuplicateStopped {
                device,
                stopped,
                holder,
            } => self.line(format_args!(
                "DEVICE duplicate-stopped {device} {stopped} {holder}"
            )),
            _ => {}
        }
    }
}
