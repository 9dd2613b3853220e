//! `plexus device`: a process hosting device clients (for the
//! multi-process tests and `plexus-bench w5`).
//!
//! ```text
//! plexus device --seed udp://127.0.0.1:4000 [--seed URI ...] [--devices C] [--first-id N]
//!               [--spec 'udp / faults(drop=0.05,seed=1,direction=both)']
//!               [--listen udp://127.0.0.1:0] [--config FILE ...] [--values 1000]
//! ```
//!
//! It starts a node (not a cluster member) listening on `--listen`
//! (default: the first seed's scheme on 127.0.0.1, any port; its stack
//! replaced by `--spec` if given) and C devices with ids N, N+1, ...,
//! each registering through the seeds and answering every report request
//! with the values 1..=V. One flushed line per happening on stdout:
//!
//! ```text
//! LISTENING udp://127.0.0.1:40123
//! EVENT attached d7 udp://127.0.0.1:4000
//! EVENT reporting d7          (the first report request after an attach)
//! EVENT lost d7 udp://127.0.0.1:4000
//! EVENT refused d7 RateLimited
//! EVENT stopped d7 Duplicate
//! STATS t_ms=5000 reports_sent=12345
//! ```
//!
//! SIGTERM, Ctrl-C or a closed stdout ends it.

use plexus_remote::process::{self, tick, Lines};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use plexus_core::ActorSystem;
use plexus_devices::device::DeviceHost;
use plexus_devices::{DeviceEvent, DeviceId};
use plexus_remote::Node;

use plexus::config::Config;

use crate::settings::{self, ConfigFlags};

/// The flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A seed server's URI (repeatable, at least one).
    #[arg(long = "seed", value_name = "URI", required = true)]
    seeds: Vec<String>,
    /// Device clients in this process.
    #[arg(long, default_value_t = 1)]
    devices: u64,
    /// Id of the first device; the others follow.
    #[arg(long, default_value_t = 0)]
    first_id: u64,
    #[command(flatten)]
    config: ConfigFlags,
    /// Stack spec of the scheme (e.g. `udp / faults(drop=0.05,seed=1,direction=both)`).
    #[arg(long)]
    spec: Option<String>,
    /// Values per report (1..=V).
    #[arg(long, default_value_t = 1000)]
    values: i64,
    /// Heartbeats to the server, and expected from it
    /// (`device.liveness.heartbeat_interval`).
    #[arg(long, value_name = "MS")]
    heartbeat_ms: Option<u64>,
    /// Print a STATS line this often.
    #[arg(long, value_name = "MS")]
    stats_every_ms: Option<u64>,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// Why the device process could not start.
#[derive(Debug, thiserror::Error)]
enum Fail {
    #[error("{0}")]
    Node(#[from] plexus_remote::NodeError),
    #[error("{0}")]
    Host(#[from] plexus_devices::device::HostError),
    #[error("{0}")]
    Config(#[from] plexus::config::ConfigError),
}

impl Args {
    /// Writes the flags given over `config`.
    fn apply(&self, config: &mut Config) {
        // clap requires a seed.
        let scheme = self.seeds[0]
            .split_once("://")
            .map_or("tcp", |(scheme, _)| scheme)
            .to_owned();
        if self.config.listen.is_empty() {
            // Servers reach the devices on the seeds' scheme.
            config.node.listen = vec![format!("{scheme}://127.0.0.1:0")];
        }
        if let Some(spec) = &self.spec {
            config.node.schemes.insert(scheme, spec.clone());
        }
        if let Some(ms) = self.heartbeat_ms {
            config.device.liveness.heartbeat_interval = Duration::from_millis(ms.max(1));
        }
    }
}

pub fn main(args: Args) -> ExitCode {
    let config = match args.config.load(|c| args.apply(c)) {
        Ok(config) => config,
        Err(e) => return settings::refused("device", &e),
    };
    process::block_on("plexus device", args.threads, run(args, config))
}

async fn run(args: Args, config: Config) -> Result<(), Fail> {
    let started = Instant::now();
    let system = ActorSystem::new();
    let node = Node::start(&system, config.node_config()?)?;
    let bound = node.listen(&config.node.listen[0]).await?;
    let out = Out::default();
    // SIGTERM or Ctrl-C: listened for before the line a parent waits for,
    // so that one sent as soon as it is read is not missed.
    let stop = process::stop_signal();
    out.line(format_args!("LISTENING {bound}"));
    let host = DeviceHost::start(&node, &system, config.device.clone(), args.seeds.clone())?;
    let mut events = host.subscribe();
    let count = args.values.max(0);
    for i in 0..args.devices {
        host.add(
            DeviceId(args.first_id + i),
            move |_seq, values: &mut Vec<i64>| values.extend(1..=count),
        )?;
    }
    let mut stats = process::ticker(args.stats_every_ms);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some((device, event)) = events.recv() => match event {
                DeviceEvent::Attached { server } => out.line(format_args!("EVENT attached {device} {server}")),
                DeviceEvent::ReportRequested { .. } => out.line(format_args!("EVENT reporting {device}")),
                DeviceEvent::ServerLost { server } => out.line(format_args!("EVENT lost {device} {server}")),
                DeviceEvent::Refused { reason } => out.line(format_args!("EVENT refused {device} {reason:?}")),
                DeviceEvent::Stopped { reason } => out.line(format_args!("EVENT stopped {device} {reason:?}")),
                _ => {}
            },
            _ = tick(stats.as_mut()) => out.line(format_args!(
                "STATS t_ms={} reports_sent={}",
                started.elapsed().as_millis(),
                host.reports_sent()
            )),
        }
        if out.lines.closed() {
            return Ok(());
        }
    }
    node.shutdown().await;
    Ok(())
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
}
