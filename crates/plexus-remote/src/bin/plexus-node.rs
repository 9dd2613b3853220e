//! A standalone node serving a counter actor, for multi-process tests and
//! for trying Plexus from a shell:
//!
//! ```text
//! plexus-node --listen tcp://127.0.0.1:4000 [--listen udp://127.0.0.1:4001]
//!             [--cookie SECRET] [--name counter]
//!             [--scheme NAME=SPEC ...]
//!             [--tls-cert n1.pem --tls-key n1.key --tls-ca ca.pem]   # tls:// and quic://
//!             [--log FILTER] [--log-format text|json]
//! ```
//!
//! `--scheme` adds a scheme, e.g.
//! `--scheme 'eudp=udp / slicing / encryption(psk=<64 hex>) / delivery / ordering'`.
//! With `--tls-*` the node's id is the one its certificate certifies.
//!
//! Logs to stderr: `info` by default, `--log FILTER` (or `RUST_LOG`) to
//! choose, `--log-format json` for one JSON object per line.
//!
//! Prints `LISTENING <uri>` for each bound URI, then `NODE <id>`, then
//! serves until SIGTERM (or Ctrl-C): it says goodbye to its peers and
//! exits 0.
//!
//! **Test-only knob** (not for real use): `--danger-claim-node-id HEX`
//! makes the node claim that node id in its handshakes even though its TLS
//! certificate certifies another, so tests can check that peers refuse a
//! forged identity.

#[path = "../../tests/common/service.rs"]
mod service;

use plexus_core::{ActorSystem, NodeId};
use plexus_remote::process::{self, LogFormat, LogOptions};
use plexus_remote::{Node, NodeConfig};
use plexus_transport::tls::TlsConfig;

const USAGE: &str = "usage: plexus-node --listen URI [--listen URI ...] [--cookie SECRET] \
     [--name NAME] [--scheme NAME=SPEC ...] [--tls-cert PEM --tls-key PEM --tls-ca PEM] \
     [--log FILTER] [--log-format text|json]

Logs go to stderr: `info` by default; --log FILTER (or RUST_LOG, which --log
overrides) chooses, e.g. --log plexus::remote=debug,info; --log-format json
writes one JSON object per line. SIGTERM or Ctrl-C: goodbye to the peers,
exit 0.";

fn usage() -> ! {
    eprintln!("{USAGE}");
    std::process::exit(2);
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("plexus-node: {e}");
    std::process::exit(1);
}

#[tokio::main]
async fn main() {
    let mut listen = Vec::new();
    let mut cookie = "plexus".to_owned();
    let mut name = "counter".to_owned();
    let mut schemes = Vec::new();
    let (mut cert, mut key, mut ca) = (None, None, None);
    let mut claim = None;
    let mut log = LogOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--listen" => listen.push(value()),
            "--cookie" => cookie = value(),
            "--name" => name = value(),
            "--scheme" => schemes.push(value()),
            "--tls-cert" => cert = Some(value()),
            "--tls-key" => key = Some(value()),
            "--tls-ca" => ca = Some(value()),
            "--danger-claim-node-id" => claim = Some(value()),
            "--log" => log.filter = Some(value()),
            "--log-format" => {
                log.log_format = value().parse::<LogFormat>().unwrap_or_else(|e| {
                    eprintln!("plexus-node: {e}");
                    usage()
                });
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return;
            }
            _ => usage(),
        }
    }
    if listen.is_empty() {
        usage();
    }
    if let Err(e) = process::init_logging(&log) {
        eprintln!("plexus-node: {e}");
        std::process::exit(2);
    }
    let mut config = NodeConfig::default().cookie(cookie);
    for s in schemes {
        let Some((scheme, spec)) = s.split_once('=') else {
            usage()
        };
        config = config.scheme(scheme.trim(), spec.trim());
    }
    match (cert, key, ca) {
        (Some(cert), Some(key), Some(ca)) => {
            let tls = TlsConfig::from_pem_files(cert, key, ca).unwrap_or_else(|e| fail(e));
            config = config.tls(tls);
        }
        (None, None, None) => {}
        _ => usage(),
    }
    let mut system = ActorSystem::builder();
    if let Some(id) = config.certified_node_id() {
        system = system.node_id(id);
    }
    if let Some(hex) = claim {
        let id = u64::from_str_radix(&hex, 16).unwrap_or_else(|_| usage());
        eprintln!("plexus-node: TEST KNOB: claiming node id {hex} whatever the certificate says");
        system = system.node_id(NodeId::from_u64(id));
        config = config.danger_unchecked_identity_for_tests();
    }
    let system = system.build().unwrap_or_else(|e| fail(e));
    let node = Node::start(&system, config).unwrap_or_else(|e| fail(e));
    for uri in &listen {
        match node.listen(uri).await {
            Ok(bound) => println!("LISTENING {bound}"),
            Err(e) => fail(e),
        }
    }
    let counter = system.spawn(service::CounterActor::default());
    if let Err(e) = node.publish(&counter, &name) {
        fail(e);
    }
    // Listening for SIGTERM before the line that says it serves.
    let stopped = process::stop_signal();
    println!("NODE {}", node.id());
    stopped.await;
    tracing::info!(target: "plexus::remote", node = %node.id(), "shutting down");
    // Peers are told goodbye (they see NodeDown now, not after a timeout).
    node.shutdown().await;
    system.shutdown().await;
}
