//! `plexus serve`: a directory over HTTP/1.1 (or HTTPS with `--tls-cert`
//! and `--tls-key`), per-core.

use plexus::http::server::{LoadOptions, WebServer};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The directory to serve (`DIR/index.html` is `/`).
    dir: std::path::PathBuf,
    /// Listen address; refused if another server already holds the port
    /// (even one sharing it with SO_REUSEPORT).
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
    /// Serve HTTPS with this certificate chain (PEM, the server's
    /// certificate first), instead of HTTP.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Log one line per request (target `plexus::http::access`, INFO:
    /// method, path, status, bytes) [default: off].
    #[arg(long)]
    access_log: bool,
}

pub fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let site = WebServer::new()
        .access_log(args.access_log)
        .static_dir_with(
            "/",
            &args.dir,
            LoadOptions {
                max_in_memory: args.max_bytes,
                sendfile_from: args.sendfile_from,
            },
        )?;
    let (server, scheme) = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            #[cfg(feature = "tls")]
            {
                let https = plexus::http::server::HttpsConfig::from_pem_files(cert, key)?;
                let server = site.listen_https_per_core(&args.addr, args.threads, https)?;
                (server, "https")
            }
            #[cfg(not(feature = "tls"))]
            {
                let _ = (cert, key);
                return Err("this plexus was built without the tls feature".into());
            }
        }
        _ => (site.listen_per_core(&args.addr, args.threads)?, "http"),
    };
    // Listening for SIGTERM and Ctrl-C before the line that says it serves,
    // on this thread's own small runtime (the server's threads have theirs).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stopped = {
        let _entered = runtime.enter();
        plexus_remote::process::stop_signal()
    };
    println!(
        "serving {} on {scheme}://{} ({} threads)",
        args.dir.display(),
        server.local_addr(),
        server.threads()
    );
    runtime.block_on(stopped);
    tracing::info!(target: "plexus::http", addr = %server.local_addr(), "shutting down");
    server.stop();
    Ok(())
}
