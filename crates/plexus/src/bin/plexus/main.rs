//! `plexus`: the command line of the framework: `plexus loadgen` (an HTTP
//! load generator), `plexus serve` (a directory over HTTP, per-core) and
//! `plexus node` (a node serving a counter actor, over any scheme
//! including `ws://` and `wss://`).

mod counter;
mod loadgen;
mod node;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "plexus", about = "The Plexus command line")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// each and `NODE <id>`, then serves until killed.
    Node(node::NodeArgs),
}

fn main() -> ExitCode {
    let (name, result) = match Cli::parse().command {
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
