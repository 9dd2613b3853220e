//! `plexus`: the one command of the framework. Its subcommands run every
//! role (`node`, `member`, `data`, `device-server`, `device`, `serve`,
//! `loadgen`, `certs`) and talk to running members through their
//! management endpoint (`members`, `top`, `leave`, `down`, `data
//! get|incr|add`);
//! `config defaults` prints every configuration key.
//!
//! Every subcommand logs to stderr through `tracing`: `info` by default,
//! `--log FILTER` (or `RUST_LOG`) to choose, `--log-format json` for one
//! JSON object per line (`plexus_remote::process::init_logging`). The
//! roles stop cleanly on SIGTERM (exit code 0).

mod certs;
mod counter;
mod data;
mod device;
mod device_server;
mod loadgen;
mod member;
mod metrics;
mod node;
mod ops;
mod serve;
mod settings;
mod top;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use plexus_remote::process::{self, LogOptions};

// The device roles, the web server and the load generator allocate per
// message and per request; mimalloc measured faster than the system
// allocator for them (W5, W6).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "plexus",
    version,
    about = "The Plexus command: runs every role of a Plexus deployment",
    after_help = "Logs go to stderr: `info` by default; --log FILTER (or RUST_LOG, which \
                  --log overrides) chooses, e.g. --log plexus::cluster=debug,info; \
                  --log-format json writes one JSON object per line. The roles stop on \
                  SIGTERM and exit 0."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogOptions,
}

#[derive(Subcommand)]
// Parsed once at start; the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Starts a node that serves a counter actor (`Counter` of
    /// `plexus.cli.Counter`) on the URIs given; prints `LISTENING <uri>` for
    /// each and `NODE <id>`, then serves until SIGTERM (or Ctrl-C).
    Node(node::NodeArgs),
    /// Runs one cluster member; prints its cluster events to stdout.
    Member(member::Args),
    /// Runs one cluster member with its replicator (replicated data);
    /// prints its events to stdout.
    Data(data::Args),
    /// Runs a device server: a cluster member that tracks devices.
    DeviceServer(device_server::Args),
    /// Hosts device clients that register with device servers.
    Device(device::Args),
    /// Serves a directory over HTTP/1.1 (or HTTPS with --tls-cert and
    /// --tls-key), one runtime and listener per core.
    Serve(serve::ServeArgs),
    /// Drives an HTTP/1.1 server and reports requests/s, Gbit/s and latency
    /// percentiles (closed loop, or open loop at --rate without coordinated
    /// omission).
    Loadgen(loadgen::LoadgenArgs),
    /// Writes a development CA and node certificates for `tls://`,
    /// `quic://` and `wss://`.
    #[command(subcommand)]
    Certs(certs::Args),
    /// Prints the reference configuration, or checks files.
    #[command(subcommand)]
    Config(ops::ConfigCall),
    /// Lists the members as a running member's management endpoint sees
    /// them.
    Members(ops::MembersArgs),
    /// A live terminal view of the cluster through a management endpoint:
    /// members, states, incarnations, ring shares and that node's figures,
    /// redrawn every second (--once: one frame).
    Top(top::TopArgs),
    /// Makes the member behind the management endpoint leave gracefully
    /// (ADDR must be that member's address).
    Leave(ops::MemberCall),
    /// Downs a member (any member's address) through a management endpoint.
    Down(ops::MemberCall),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = process::init_logging(&cli.log) {
        eprintln!("plexus: {e}");
        return ExitCode::from(2);
    }
    let (name, result): (_, Result<(), Box<dyn std::error::Error>>) = match cli.command {
        Command::Member(args) => return member::main(args),
        Command::Data(args) => return data::main(args),
        Command::DeviceServer(args) => return device_server::main(args),
        Command::Device(args) => return device::main(args),
        Command::Loadgen(args) => ("loadgen", loadgen::run(args)),
        Command::Serve(args) => ("serve", serve::run(args)),
        Command::Node(args) => return node::main(args),
        Command::Config(call) => return ops::config(call),
        Command::Members(args) => return ops::members(args),
        Command::Top(args) => return top::run(args),
        Command::Leave(args) => return ops::change_member(args, false),
        Command::Down(args) => return ops::change_member(args, true),
        Command::Certs(args) => ("certs", certs::run(args).map_err(Into::into)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plexus {name}: {e}");
            ExitCode::FAILURE
        }
    }
}
