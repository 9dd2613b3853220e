//! Child node processes: the benchmark binary runs itself with a hidden
//! role subcommand, so every node of a workload is its own OS process.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use plexus::dev_certs::DevCa;
use plexus::{ActorSystem, NodeConfig};

/// Schemes whose nodes authenticate with a certificate (mutual TLS, node id
/// bound to it): the benchmark makes a dev CA for the run and a certificate
/// per node. A new secure scheme (`quic`) is one more entry.
const CERTIFIED: &[&str] = &["tls", "quic", "wss"];

/// Where the run's dev CA lives (`ca.pem`, `ca.key`), handed to the child
/// nodes in this environment variable.
pub(crate) const CERTS_ENV: &str = "PLEXUS_BENCH_CERTS";

/// Options of the remote workloads (W1, W2).
#[derive(clap::Args)]
pub struct RemoteArgs {
    /// Remote nodes besides this one: pong nodes (W1), source nodes (W2).
    #[arg(long, default_value_t = 1)]
    pub n: usize,
    /// Scheme (`tcp`, `udp`, `uds`, `tls`, `quic`) or stack spec.
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
    /// Alternate the baseline and Plexus phases this many times and report
    /// the round whose ratio is the median (a `ROUND` line per round
    /// first): drift of a noisy machine between the two phases then moves
    /// the reported ratio less than it moves any single pair.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Metrics and logs on (issue 31): a Prometheus recorder installed in
    /// every process, each node publishing and rendering its metrics once
    /// a second, and logging at info (unless RUST_LOG says otherwise).
    #[arg(long)]
    pub metrics: bool,
    /// Metrics and logs on and off by turns, a second each, in every
    /// process of one run; reports the rate with them on and off and the
    /// ratio (`on_vs_off`): their cost without the noise between runs.
    #[arg(long, conflicts_with = "metrics")]
    pub metrics_alternate: bool,
}

/// Picks, from `(baseline, ours, ratio)` rounds, the one with the median
/// ratio (the lower middle one of an even count).
pub fn median_round<T>(mut rounds: Vec<(T, T, f64)>) -> (T, T) {
    assert!(!rounds.is_empty(), "median of no rounds");
    rounds.sort_by(|a, b| a.2.total_cmp(&b.2));
    let (base, ours, _) = rounds.swap_remove((rounds.len() - 1) / 2);
    (base, ours)
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
        // Here too: `--metrics` reaches the children the same way.
        if self.metrics || self.metrics_alternate {
            crate::metrics_on::enable(self.metrics_alternate);
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
        let mut cmd = Command::new(exe);
        if let Some(dir) = CA_DIR.get() {
            cmd.env(CERTS_ENV, &dir.0);
        }
        let mut child = cmd
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

/// The run's dev CA directory, removed when the run ends.
struct CaDir(PathBuf);

static CA_DIR: OnceLock<CaDir> = OnceLock::new();

/// Removes the run's dev CA (if this process made one) when dropped: hold
/// it for the whole run.
pub struct CertsGuard(bool);

impl Drop for CertsGuard {
    fn drop(&mut self) {
        if let (true, Some(dir)) = (self.0, CA_DIR.get()) {
            let _ = std::fs::remove_dir_all(&dir.0);
        }
    }
}

/// Prepares what `transport` needs before nodes start: for a
/// [`CERTIFIED`] scheme, a dev CA in a temporary directory that this
/// process and its child nodes sign their certificates with.
pub fn prepare(spec_or_scheme: &str) -> CertsGuard {
    let scheme = scheme_of(spec_or_scheme);
    if !CERTIFIED.contains(&scheme.as_str()) || std::env::var_os(CERTS_ENV).is_some() {
        return CertsGuard(false);
    }
    let dir = std::env::temp_dir().join(format!("plexus-bench-certs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the certificate directory");
    let ca = DevCa::generate().expect("generate a dev CA");
    std::fs::write(dir.join("ca.key"), ca.key_pem()).expect("write ca.key");
    let _ = CA_DIR.set(CaDir(dir));
    CertsGuard(true)
}

/// The transport word of a scheme or spec (`tls`, `udp`, ...).
fn scheme_of(spec_or_scheme: &str) -> String {
    let t = spec_or_scheme.trim();
    t.split('/').next().unwrap_or(t).trim().to_owned()
}

/// A certificate for this node, signed by the run's CA.
fn certified() -> plexus::transport::tls::TlsConfig {
    let dir = match (CA_DIR.get(), std::env::var_os(CERTS_ENV)) {
        (Some(d), _) => d.0.clone(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => panic!("a secure transport needs nodes::prepare first"),
    };
    let key = std::fs::read_to_string(dir.join("ca.key")).expect("read the run's CA key");
    let ca = DevCa::from_key_pem(&key).expect("the run's CA");
    let node = ca.node("localhost", 1).expect("a node certificate");
    node.tls_config(&ca).expect("a TLS configuration")
}

/// The actor system for a node of `cfg`: with the node id its certificate
/// certifies, if it has one.
pub fn system(cfg: &NodeConfig) -> ActorSystem {
    let mut b = ActorSystem::builder();
    if let Some(id) = cfg.certified_node_id() {
        b = b.node_id(id);
    }
    b.build().expect("an actor system")
}

/// The node configuration and listen URI for `--transport`: a scheme
/// (`tcp`, `udp`, `uds`, `tls`, `quic`, `ws`, `wss`) or a whole stack spec (`udp /
/// slicing / delivery`).
pub fn transport(spec_or_scheme: &str) -> (NodeConfig, String) {
    use plexus::http::ws_transport::WsTransport;
    let mut transports = plexus::transport::TransportRegistry::default();
    transports
        .register(WsTransport::new())
        .expect("ws is not a built-in transport's name");
    let tls = CERTIFIED
        .contains(&scheme_of(spec_or_scheme).as_str())
        .then(certified);
    if let Some(tls) = &tls {
        transports
            .register(WsTransport::secure(tls.clone()))
            .expect("wss is not a built-in transport's name");
    }
    let mut cfg = NodeConfig::default()
        .cookie("plexus-bench")
        .layers(crate::count_layer::registry())
        .transports(transports);
    if let Some(tls) = tls {
        cfg = cfg.tls(tls);
    }
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
