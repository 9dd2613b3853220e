//! `plexus`: the command line of the framework: `plexus loadgen` (an HTTP
//! load generator), `plexus serve` (a directory over HTTP, per-core) and
//! `plexus node` (a node serving a counter actor, over any scheme
//! including `ws://` and `wss://`).
//!
//! Every subcommand logs to stderr through `tracing`: `info` by default,
//! `--log FILTER` (or `RUST_LOG`) to choose, `--log-format json` for one
//! JSON object per line (`plexus_remote::process::init_logging`). `plexus
//! node` and `plexus serve` stop cleanly on SIGTERM (exit code 0).

mod counter;
mod loadgen;
mod node;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use plexus_remote::process::{self, LogOptions};

#[derive(Parser)]
#[command(
    name = "plexus",
    about = "The Plexus command line",
    after_help = "Logs go to stderr: `info` by default; --log FILTER (or RUST_LOG, which \
                  --log overrides) chooses, e.g. --log plexus::cluster=debug,info; \
                  --log-format json writes one JSON object per line. `plexus node` and \
                  `plexus serve` stop on SIGTERM and exit 0."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogOptions,
}

#[derive(Subcommand)]
enum Command {
    /// Drives an HTTP/1.1 server and reports requests/s, Gbit/s and latency
    /// percentiles (closed loop, or open loop at --rate without coordinated
    /// omission).
    Loadgen(loadgen::LoadgenArgs),
    /// Serves a directory over HTTP/1.1 (or HTTPS with --tls-cert and
    /// --tls-key), one runtime and listener per core.
    Serve(serve::ServeArgs),
    /// Starts a node that serves a counter actor (`Counter` of
    /// `plexus.cli.Counter`) on the URIs given; prints `LISTENING <uri>` for
    /// each and `NODE <id>`, then serves until SIGTERM (or Ctrl-C).
    Node(node::NodeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = process::init_logging(&cli.log) {
        eprintln!("plexus: {e}");
        return ExitCode::from(2);
    }
    let (name, result) = match cli.command {
        Command::Loadgen(args) => ("loadgen", loadgen::run(args)),
        Command::Serve(args) => ("serve", serve::run(args)),
        Command::Node(args) => ("node", node::run(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plexus {name}: {e}");
            ExitCode::FAILURE
        }
    }
}
