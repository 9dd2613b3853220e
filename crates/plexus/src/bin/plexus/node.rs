//! `plexus node`: a node serving a counter actor (`Counter` of
//! `plexus.cli.Counter`, see `counter.rs`), for trying Plexus from a shell
//! and for the multi-process tests, over any scheme: the built-in ones,
//! `ws://` and `wss://`, and schemes of one's own (`--scheme NAME=SPEC`).
//!
//! Prints `LISTENING <uri>` for each bound URI, then `NODE <id>`, then
//! serves until SIGTERM (or Ctrl-C): it says goodbye to its peers and
//! exits 0.

use plexus::http::ws_transport::WsTransport;
use plexus::transport::TransportRegistry;
use plexus::{ActorSystem, Node, NodeConfig, NodeId};

use crate::counter::CounterActor;

/// The flags of `plexus node`.
#[derive(clap::Args)]
pub struct NodeArgs {
    /// A URI to listen on (`tcp://127.0.0.1:4000`, `ws://...`); repeatable.
    #[arg(long, required = true)]
    listen: Vec<String>,
    /// The cluster cookie.
    #[arg(long, default_value = "plexus")]
    cookie: String,
    /// The counter's published name.
    #[arg(long, default_value = "counter")]
    name: String,
    /// A scheme of one's own, `NAME=SPEC` (repeatable), e.g.
    /// `eudp=udp / slicing / encryption(psk=<64 hex>) / delivery / ordering`.
    #[arg(long = "scheme", value_name = "NAME=SPEC", value_parser = parse_scheme)]
    schemes: Vec<(String, String)>,
    /// The path WebSocket upgrades are asked on.
    #[arg(long, default_value = "/plexus")]
    ws_path: String,
    /// The node's certificate (PEM), for `tls`, `quic` and `wss`; the
    /// node's id is the one it certifies.
    #[arg(long, requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires_all = ["tls_cert", "tls_ca"])]
    tls_key: Option<std::path::PathBuf>,
    /// The CA roots peers' certificates must chain to (PEM).
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<std::path::PathBuf>,
    /// TEST KNOB, not for real use: claim this node id (hex) in handshakes
    /// whatever the certificate certifies, so tests can check that peers
    /// refuse a forged identity.
    #[arg(long, value_name = "HEX", hide = true, value_parser = parse_hex_id)]
    danger_claim_node_id: Option<u64>,
}

fn parse_scheme(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, spec)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), spec.trim().to_owned()))
        }
        _ => Err(format!("`{s}`: expected NAME=SPEC")),
    }
}

fn parse_hex_id(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s, 16).map_err(|e| format!("`{s}`: not a hex node id: {e}"))
}

#[tokio::main]
pub async fn run(args: NodeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut transports = TransportRegistry::default();
    transports.register(WsTransport::new().path(&args.ws_path))?;
    let mut config = NodeConfig::default().cookie(&args.cookie);
    for (scheme, spec) in &args.schemes {
        config = config.scheme(scheme, spec);
    }
    if let (Some(cert), Some(key), Some(ca)) = (&args.tls_cert, &args.tls_key, &args.tls_ca) {
        #[cfg(feature = "tls")]
        {
            let tls = plexus::transport::tls::TlsConfig::from_pem_files(cert, key, ca)?;
            transports.register(WsTransport::secure(tls.clone()).path(&args.ws_path))?;
            config = config.tls(tls);
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = (cert, key, ca);
            return Err("this plexus was built without the tls feature".into());
        }
    }
    let mut config = config.transports(transports);
    let mut system = ActorSystem::builder();
    if let Some(id) = config.certified_node_id() {
        system = system.node_id(id);
    }
    if let Some(id) = args.danger_claim_node_id {
        tracing::warn!(target: "plexus::remote", "TEST KNOB: claiming node id {id:016x} whatever the certificate says");
        system = system.node_id(NodeId::from_u64(id));
        config = config.danger_unchecked_identity_for_tests();
    }
    let system = system.build()?;
    let node = Node::start(&system, config)?;
    for uri in &args.listen {
        println!("LISTENING {}", node.listen(uri).await?);
    }
    node.publish(&system.spawn(CounterActor::default()), &args.name)?;
    // Listening for SIGTERM before the line that says it serves.
    let stopped = plexus_remote::process::stop_signal();
    println!("NODE {}", node.id());
    stopped.await;
    tracing::info!(target: "plexus::remote", node = %node.id(), "shutting down");
    // Peers are told goodbye (they see NodeDown now, not after a timeout).
    node.shutdown().await;
    system.shutdown().await;
    Ok(())
}
