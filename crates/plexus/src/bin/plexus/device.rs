//! `plexus device`: a process hosting device clients (for the
//! multi-process tests and `plexus-bench w5`).
//!
//! ```text
//! plexus device --seed udp://127.0.0.1:4000 [--seed URI ...] [--devices C] [--first-id N]
//!               [--spec 'udp / faults(drop=0.05,seed=1,direction=both)']
//!               [--listen udp://127.0.0.1:0] [--cookie SECRET] [--values 1000]
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
use plexus_devices::{DeviceEvent, DeviceId, SessionConfig};
use plexus_remote::{Node, NodeConfig};

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
    /// URI to listen on (servers reach the devices there); default the
    /// first seed's scheme on 127.0.0.1, any port.
    #[arg(long)]
    listen: Option<String>,
    /// Stack spec of the scheme (e.g. `udp / faults(drop=0.05,seed=1,direction=both)`).
    #[arg(long)]
    spec: Option<String>,
    /// The node's cookie.
    #[arg(long, default_value = "plexus")]
    cookie: String,
    /// Values per report (1..=V).
    #[arg(long, default_value_t = 1000)]
    values: i64,
    /// Heartbeats to the server (and expected from it).
    #[arg(long, value_name = "MS", default_value_t = 100)]
    heartbeat_ms: u64,
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
    #[error("`{0}`: expected scheme://host:port")]
    BadUri(String),
}

pub fn main(args: Args) -> ExitCode {
    process::block_on("plexus device", args.threads, run(args))
}

async fn run(args: Args) -> Result<(), Fail> {
    let started = Instant::now();
    let scheme = args.seeds[0]
        .split_once("://")
        .ok_or_else(|| Fail::BadUri(args.seeds[0].clone()))?
        .0
        .to_owned();
    let listen = args
        .listen
        .clone()
        .unwrap_or_else(|| format!("{scheme}://127.0.0.1:0"));
    let system = ActorSystem::new();
    let mut config = NodeConfig::default().cookie(args.cookie.clone());
    if let Some(spec) = &args.spec {
        config = config.scheme(scheme, spec.clone());
    }
    let node = Node::start(&system, config)?;
    let bound = node.listen(&listen).await?;
    let out = Out::default();
    // SIGTERM or Ctrl-C: listened for before the line a parent waits for,
    // so that one sent as soon as it is read is not missed.
    let stop = process::stop_signal();
    out.line(format_args!("LISTENING {bound}"));
    let mut session = SessionConfig::default();
    session.liveness.heartbeat_interval = Duration::from_millis(args.heartbeat_ms.max(1));
    let host = DeviceHost::start(&node, &system, session, args.seeds.clone())?;
    let mut events = host.subscribe();
    let count = args.values.max(0);
    for i in 0..args.devices {
        host.add(
            DeviceId(args.first_id + i),
            move |_seq, values: &mut Vec<i64>| values.extend(1..=count),
        )?;
    }
    let mut stats = args.stats_every_ms.map(|ms| {
        let every = Duration::from_millis(ms.max(1));
        tokio::time::interval_at(tokio::time::Instant::now() + every, every)
    });
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
