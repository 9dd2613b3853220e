//! `plexus serve`: a directory over HTTP/1.1, per-core.

use plexus::http::server::{LoadOptions, WebServer};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The directory to serve (`DIR/index.html` is `/`).
    dir: std::path::PathBuf,
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: String,
    /// Threads, each with its own runtime and listener (default: one per
    /// core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Most bytes of small files held in memory.
    #[arg(long, default_value_t = 1 << 30)]
    max_bytes: usize,
    /// Files of at least this many bytes are sent from the page cache
    /// (`sendfile`) instead of from memory.
    #[arg(long, default_value_t = LoadOptions::default().sendfile_from)]
    sendfile_from: usize,
}

pub fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let server = WebServer::new()
        .static_dir_with(
            "/",
            &args.dir,
            LoadOptions {
                max_in_memory: args.max_bytes,
                sendfile_from: args.sendfile_from,
            },
        )?
        .listen_per_core(&args.addr, args.threads)?;
    println!(
        "serving {} on http://{} ({} threads)",
        args.dir.display(),
        server.local_addr(),
        server.threads()
    );
    // Serves until killed.
    loop {
        std::thread::park();
    }
}
