//! One entry point for the Plexus benchmark workloads
//! (`bench/WORKLOADS.md`):
//!
//! ```text
//! cargo run --release -p plexus-bench -- w7 spawn|pingpong|fanin [--baseline]
//! ```
//!
//! Each run prints its `RESULT` line last. Without `--baseline`, workloads
//! that have a plain-tokio baseline run it in the same invocation,
//! alternating with the Plexus runs, and add `vs_baseline=<ratio>`.

/// Both Plexus and the baselines run on mimalloc: glibc's allocator
/// serialises threads on arena locks when one thread frees what another
/// allocated (every message and task here), which would measure the
/// allocator rather than the runtimes.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod activation;
mod cluster_procs;
mod cluster_sim;
mod count_layer;
mod data_procs;
mod data_sim;
mod lossy_stream;
mod lossy_stream_linkem;
mod metrics_on;
mod nodes;
mod plexus_cmd;
mod report;
mod runner;
mod side_proc;
mod w1;
mod w2;
mod w3;
mod w4;
mod w4_report;
mod w5;
mod w5_plot;
mod w6;
mod w7;
mod w8;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "plexus-bench",
    about = "Plexus benchmark workloads (see bench/WORKLOADS.md)"
)]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// W1 pingpong: round trips of remote messages, 1 ping node and N pong
    /// node processes.
    W1(w1::Args),
    /// W2 stream: small remote messages from N source node processes to one
    /// sink under credit flow control.
    W2(w2::Args),
    /// W3 lossy: 2 node processes bounce one message over an emulated lossy,
    /// slow link (needs root and /dev/net/tun).
    W3(w3::Args),
    /// W4 bulk: bulk data and control pings between 2 node processes over
    /// an emulated link, one policy, RTT and loss (needs root and
    /// /dev/net/tun; `--loopback` runs without the link).
    W4(w4::Args),
    /// The W4 matrix: runs `w4` cells as child processes, writes the table
    /// into docs/report.md and the plots into docs/img/.
    W4Report(w4_report::Args),
    /// W5 devices: device processes reporting to a cluster of server
    /// processes (`plexus device`, `plexus device-server`, built first).
    W5(w5::Args),
    /// The W5 figures (docs/img/w5.png) from a log of `w5` RESULT lines.
    W5Plot(w5_plot::Args),
    /// W6 http: the Plexus web server (per-core) and nginx serving 500
    /// pages, each driven by wrk and by `plexus loadgen`; keep-alive against
    /// hyper. Needs nginx and wrk.
    W6(w6::Args),
    /// A well-behaved client's latency against the web server, alone and
    /// while hostile clients (slowloris, oversized heads and bodies,
    /// malformed and smuggling requests) run.
    W6Attacks(w6::AttackArgs),
    /// Issue 20: the W6 pages from the Plexus per-core server and from
    /// one loop around Plexus's stack on tokio and on io_uring (monoio),
    /// alternating, driven by wrk.
    W6Drivers(w6::DriversArgs),
    #[command(hide = true)]
    W6Serve(w6::ServeArgs),
    #[command(hide = true)]
    W6LoopTokio(w6::ServeArgs),
    #[command(hide = true)]
    W6LoopUring(w6::UringArgs),
    #[command(hide = true)]
    W6Hyper(w6::ServeArgs),
    #[command(hide = true)]
    W6Loadgen(w6::LoadgenArgs),
    /// W7 local: spawn, pingpong, fanin on one machine, no network.
    W7(w7::Args),
    /// W8 entities (issue 33): counter entities on 3 member processes
    /// asked by client processes, a join and a graceful leave meanwhile;
    /// the Pekko peer (bench/peers/pekko-sharding) in the same run.
    W8(w8::Args),
    /// Entities activated by their first message on one member, and the
    /// memory per idle entity (issue 33).
    Activation(activation::Args),
    /// (role) a W8 member.
    #[command(hide = true)]
    W8Member(w8::MemberArgs),
    /// (role) a W8 client.
    #[command(hide = true)]
    W8Client(w8::ClientArgs),
    /// The cluster's figures at full size in the simulator (convergence,
    /// crash detection, traffic per member; stalls with Lifeguard on/off).
    ClusterSim(cluster_sim::Args),
    /// The cluster as real processes on 127.0.0.1 (`plexus member`,
    /// built first): convergence, traffic per member, kill -9 and restart.
    ClusterProcs(cluster_procs::Args),
    /// The replicator's figures in the simulator (bytes of a churned set
    /// against full-state sync; convergence under faults).
    DataSim(data_sim::Args),
    /// The replicator as real processes on 127.0.0.1 (`plexus data`,
    /// built first): latency per consistency level, a joiner's catch-up,
    /// durable keys across a whole-cluster SIGKILL.
    DataProcs(data_procs::Args),
    /// Issue 17's lossy stream: small messages between two nodes over UDP
    /// through `faults`, per congestion controller.
    LossyStream(lossy_stream::Args),
    /// The lossy stream between 2 node processes over an emulated lossy
    /// link, plexus (udp, cc=bbr) against quic (needs root and /dev/net/tun).
    LossyStreamLinkem(lossy_stream_linkem::Args),
    /// (role) a side of `lossy-stream-linkem`.
    #[command(hide = true)]
    LossyStreamSide(lossy_stream_linkem::SideArgs),
    /// Runs a set of workloads as child processes and writes the tables
    /// (docs/report.md, between its report markers) and plots
    /// (docs/img/).
    Report(runner::Args),
    /// (role) a W1 pong node.
    #[command(hide = true)]
    W1Pong {
        #[arg(long)]
        transport: String,
    },
    /// (role) a W1 baseline pong process.
    #[command(hide = true)]
    W1PongBaseline,
    /// (role) a W2 source node.
    #[command(hide = true)]
    W2Source {
        #[arg(long)]
        sink: String,
        #[arg(long)]
        index: u64,
        #[arg(long)]
        transport: String,
    },
    /// (role) W3 side b: serves `bounce`.
    #[command(hide = true)]
    W3SideB {
        #[arg(long)]
        transport: String,
    },
    /// (role) W3 side a: bounces the message `count` times.
    #[command(hide = true)]
    W3SideA {
        #[arg(long)]
        transport: String,
        #[arg(long)]
        peer: String,
        #[arg(long)]
        count: u64,
    },
    /// (role) W4 side b: serves `hello`, `sink` and `ctl`.
    #[command(hide = true)]
    W4SideB {
        #[arg(long, value_enum)]
        policy: w4::Policy,
        #[arg(long)]
        host: String,
        #[arg(long)]
        heartbeat: bool,
    },
    /// (role) W4 side a: sends the bulk payload and the control pings.
    #[command(hide = true)]
    W4SideA(w4::SideAArgs),
    /// (role) a W2 baseline source process.
    #[command(hide = true)]
    W2SourceBaseline {
        #[arg(long)]
        sink: String,
        #[arg(long)]
        index: u64,
    },
}

/// Log lines to stderr, in colour only on a terminal.
fn log_format<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
}

fn main() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let cli = Cli::parse();
    // Warnings (a refused message, a lost link) always, more on demand
    // (`RUST_LOG=plexus::transport=debug`), to stderr, for every role process
    // alike; colour only on a terminal.
    // `--metrics` runs W1 and W2 as the `plexus` command runs: metrics
    // and logging at info on, in every process.
    let operable = matches!(&cli.workload, Workload::W1(a) | Workload::W2(a) if a.metrics)
        || metrics_on::asked();
    // `--metrics-alternate`: info and warn by turns (the switch is handed
    // to the alternation).
    let alternating = matches!(&cli.workload, Workload::W1(a) | Workload::W2(a) if a.metrics_alternate)
        || metrics_on::alternating();
    // W8 logs its phases at info (its processes' own lines; the
    // libraries' at warn).
    let w8 = matches!(
        &cli.workload,
        Workload::W8(_) | Workload::W8Member(_) | Workload::W8Client(_)
    );
    let filter = |level: &str| match std::env::var_os("RUST_LOG") {
        Some(_) => tracing_subscriber::EnvFilter::from_default_env(),
        None => tracing_subscriber::EnvFilter::new(level),
    };
    if alternating {
        let (filter_layer, switch) = tracing_subscriber::reload::Layer::new(filter("info"));
        tracing_subscriber::registry()
            .with(filter_layer)
            .with(log_format())
            .init();
        metrics_on::set_log_switch(move |on| {
            let _ = switch.reload(if on {
                filter("info")
            } else {
                tracing_subscriber::EnvFilter::new("warn")
            });
        });
    } else {
        tracing_subscriber::registry()
            .with(filter(if operable {
                "info"
            } else if w8 {
                "warn,plexus_bench=info"
            } else {
                "warn"
            }))
            .with(log_format())
            .init();
    }
    metrics_on::install_if_asked();
    let role =
        |f: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>| nodes::runtime().block_on(f);
    match cli.workload {
        Workload::W1(args) => w1::run(&args),
        Workload::W2(args) => w2::run(&args),
        Workload::W3(args) => w3::run(&args),
        Workload::W4(args) => w4::run(&args),
        Workload::W4Report(args) => w4_report::run(&args),
        Workload::W5(args) => w5::run(&args),
        Workload::W5Plot(args) => w5_plot::run(&args),
        Workload::W6(args) => w6::run(&args),
        Workload::W6Attacks(args) => w6::run_attacks(&args),
        Workload::W6Drivers(args) => w6::run_drivers(&args),
        Workload::W6Serve(args) => w6::serve_plexus(&args),
        Workload::W6LoopTokio(args) => w6::serve_tokio(&args),
        Workload::W6LoopUring(args) => w6::serve_uring(&args),
        Workload::W6Hyper(args) => w6::serve_hyper(&args),
        Workload::W6Loadgen(args) => w6::loadgen_role(&args),
        Workload::W7(args) => w7::run(&args),
        Workload::W8(args) => w8::run(&args),
        Workload::Activation(args) => activation::run(&args),
        Workload::W8Member(args) => role(Box::pin(w8::member(args))),
        Workload::W8Client(args) => role(Box::pin(w8::client(args))),
        Workload::ClusterSim(args) => cluster_sim::run(&args),
        Workload::ClusterProcs(args) => cluster_procs::run(&args),
        Workload::DataSim(args) => data_sim::run(&args),
        Workload::DataProcs(args) => data_procs::run(&args),
        Workload::LossyStream(args) => lossy_stream::run(&args),
        Workload::LossyStreamLinkem(args) => lossy_stream_linkem::run(&args),
        Workload::LossyStreamSide(args) => role(Box::pin(lossy_stream_linkem::side(args))),
        Workload::Report(args) => runner::run(&args),
        Workload::W1Pong { transport } => role(Box::pin(w1::pong_node(transport))),
        Workload::W1PongBaseline => role(Box::pin(w1::pong_baseline())),
        Workload::W2Source {
            sink,
            index,
            transport,
        } => role(Box::pin(w2::source_node(sink, index, transport))),
        Workload::W3SideB { transport } => role(Box::pin(w3::side_b(transport))),
        Workload::W3SideA {
            transport,
            peer,
            count,
        } => role(Box::pin(w3::side_a(transport, peer, count))),
        Workload::W4SideB {
            policy,
            host,
            heartbeat,
        } => role(Box::pin(w4::side_b(policy, host, heartbeat))),
        Workload::W4SideA(args) => role(Box::pin(w4::side_a(args))),
        Workload::W2SourceBaseline { sink, index } => {
            role(Box::pin(w2::source_baseline(sink, index)))
        }
    }
}
