//! Child node processes: the benchmark binary runs itself with a hidden
//! role subcommand, so every node of a workload is its own OS process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use plexus::transport::dev_certs::DevCa;
use plexus::transport::tls::TlsConfig;
use plexus::NodeConfig;

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
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the certificates of `tls` and `quic` runs are: made by the first
/// process ([`make_certs`]) and inherited by the node processes it starts.
const CERTS_ENV: &str = "PLEXUS_BENCH_CERTS";

/// Makes a development CA and one node certificate (shared by every node
/// of the run) in a temporary directory named in `PLEXUS_BENCH_CERTS`,
/// when the command line asks for `tls` or `quic` and no parent process
/// did already. Call before starting threads.
pub fn make_certs() {
    let wanted = std::env::args().any(|a| a.contains("tls") || a.contains("quic"));
    if !wanted || std::env::var_os(CERTS_ENV).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("plexus-bench-certs-{}", std::process::id()));
    let ca = DevCa::generate().expect("dev CA");
    let node = ca.node("bench", 2).expect("node certificate");
    std::fs::create_dir_all(&dir).expect("certificate directory");
    std::fs::write(dir.join("ca.pem"), ca.cert_pem()).expect("write ca.pem");
    std::fs::write(dir.join("node.pem"), node.cert_pem).expect("write node.pem");
    std::fs::write(dir.join("node.key"), node.key_pem).expect("write node.key");
    // Single-threaded here: main calls this first.
    std::env::set_var(CERTS_ENV, &dir);
}

fn tls_config() -> TlsConfig {
    let dir = std::path::PathBuf::from(
        std::env::var_os(CERTS_ENV).expect("make_certs ran in the first process"),
    );
    TlsConfig::from_pem_files(
        dir.join("node.pem"),
        dir.join("node.key"),
        dir.join("ca.pem"),
    )
    .expect("load the bench certificates")
}

/// The node configuration and listen URI for `--transport`: a scheme
/// (`tcp`, `udp`, `uds`, `tls`, `quic`) or a whole stack spec (`udp /
/// slicing / delivery`).
pub fn transport(spec_or_scheme: &str) -> (NodeConfig, String) {
    let mut cfg = NodeConfig::default().cookie("plexus-bench");
    let t = spec_or_scheme.trim();
    let kind = t.split('/').next().unwrap_or("tcp").trim();
    if kind == "tls" || kind == "quic" {
        cfg = cfg.tls(tls_config());
    }
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
