//! `plexus loadgen`: drives an HTTP/1.1 server (see `plexus_http::loadgen`).

use std::net::ToSocketAddrs;
use std::time::Duration;

use plexus::http::loadgen::{self, LoadgenConfig};

#[derive(clap::Args)]
pub struct LoadgenArgs {
    /// The server, `http://host:port` (a path in it is the one requested
    /// unless --paths is given).
    url: String,
    /// Concurrent connections.
    #[arg(short, long, default_value_t = 16)]
    connections: usize,
    /// Seconds to run.
    #[arg(short, long, default_value_t = 10.0)]
    duration: f64,
    /// Requests per second in all (open loop); without it, closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// A new connection for every request (default: keep-alive).
    #[arg(long)]
    new_connection: bool,
    /// A file of paths, one per line, requested at random.
    #[arg(long)]
    paths: Option<std::path::PathBuf>,
    /// Seed of the random path choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// No progress line each second.
    #[arg(long)]
    quiet: bool,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(args: LoadgenArgs) -> Result<(), Box<dyn std::error::Error>> {
    let rest = args
        .url
        .strip_prefix("http://")
        .ok_or("the URL must start with http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolve {authority}: no address"))?;
    let paths = match &args.paths {
        Some(file) => std::fs::read_to_string(file)
            .map_err(|e| format!("read {}: {e}", file.display()))?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        None => vec![path.to_owned()],
    };
    let config = LoadgenConfig {
        addr,
        host: authority.to_owned(),
        paths,
        connections: args.connections,
        duration: Duration::from_secs_f64(args.duration.max(0.001)),
        rate: args.rate,
        keep_alive: !args.new_connection,
        seed: args.seed,
        progress: (!args.quiet).then_some(Duration::from_secs(1)),
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = args.threads {
        runtime.worker_threads(n.max(1));
    }
    let report = runtime.build()?.block_on(loadgen::run(config))?;
    println!("{}", report.summary());
    println!("{}", report.result_line());
    // Nothing succeeded (a closed port, a wrong address): fail the run.
    report.ensure_responses()?;
    Ok(())
}
