//! Child node processes: the benchmark binary runs itself with a hidden
//! role subcommand, so every node of a workload is its own OS process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use plexus::NodeConfig;

/// Options of the remote workloads (W1, W2).
#[derive(clap::Args)]
pub struct RemoteArgs {
    /// Remote nodes besides this one: pong nodes (W1), source nodes (W2).
    #[arg(long, default_value_t = 1)]
    pub n: usize,
    /// Scheme (`tcp`, `udp`, `uds`) or stack spec.
    #[arg(long, default_value = "tcp")]
    pub transport: String,
    /// Seconds of warm-up.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Seconds measured (W2: in 1-second windows).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Run only the plain-tokio baseline.
    #[arg(long)]
    pub baseline: bool,
    /// Tokio worker threads in each process, Plexus and baseline alike
    /// (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The environment variable that hands `--threads` to child processes.
const THREADS_ENV: &str = "PLEXUS_BENCH_THREADS";

impl RemoteArgs {
    /// Applies `--threads` to this process and the children it starts.
    pub fn apply_threads(&self) {
        if let Some(t) = self.threads {
            // Set before any thread or child starts (edition 2021: safe).
            std::env::set_var(THREADS_ENV, t.max(1).to_string());
        }
    }
}

/// A multi-threaded runtime with the worker threads `--threads` asked for.
pub fn runtime() -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(t) = std::env::var(THREADS_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        b.worker_threads(t.max(1));
    }
    b.build().expect("tokio runtime")
}

/// A child process running one role; killed when dropped.
pub struct ChildNode {
    child: Child,
    /// What the child printed after `READY ` (its listen URI or address).
    pub ready: String,
}

impl ChildNode {
    /// Starts `plexus-bench <args...>` and waits for its `READY` line.
    pub fn start(args: &[String]) -> ChildNode {
        let exe = std::env::current_exe().expect("path of the benchmark binary");
        let mut child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a child node");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(r) = l.strip_prefix("READY ") {
                        break r.to_owned();
                    }
                }
                _ => panic!("child node {args:?} exited before it was ready"),
            }
        };
        // Keep draining the child's stdout so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        ChildNode { child, ready }
    }

    /// [`start`](ChildNode::start) from async code: waiting for the child's
    /// `READY` line blocks, so it runs on tokio's blocking pool instead of
    /// stalling a worker (with one worker thread, the node in this process
    /// could not answer the child's handshake meanwhile).
    pub async fn start_async(args: Vec<String>) -> ChildNode {
        tokio::task::spawn_blocking(move || ChildNode::start(&args))
            .await
            .expect("start a child node")
    }
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node configuration and listen URI for `--transport`: a scheme
/// (`tcp`, `udp`, `uds`) or a whole stack spec (`udp / slicing / delivery`).
pub fn transport(spec_or_scheme: &str) -> (NodeConfig, String) {
    let cfg = NodeConfig::default().cookie("plexus-bench");
    let t = spec_or_scheme.trim();
    if !t.contains('/') {
        let listen = match t {
            "uds" => format!(
                "uds://{}",
                std::env::temp_dir()
                    .join(format!("plexus-bench-{}.sock", std::process::id()))
                    .display()
            ),
            "mem" => panic!("--transport mem has no meaning across processes"),
            scheme => format!("{scheme}://127.0.0.1:0"),
        };
        return (cfg, listen);
    }
    // A stack spec: a private scheme for it, over the spec's transport.
    let kind = t.split('/').next().unwrap_or("tcp").trim().to_owned();
    let listen = if kind == "uds" {
        format!(
            "bench://{}",
            std::env::temp_dir()
                .join(format!("plexus-bench-{}.sock", std::process::id()))
                .display()
        )
    } else {
        "bench://127.0.0.1:0".to_owned()
    };
    (cfg.scheme("bench", t), listen)
}
