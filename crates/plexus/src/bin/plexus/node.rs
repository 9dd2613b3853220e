//! `plexus node`: a node serving a counter actor (`Counter` of
//! `plexus.cli.Counter`, see `counter.rs`), for trying Plexus from a shell
//! and for the multi-process tests, over any scheme: the built-in ones,
//! `ws://` and `wss://`, and schemes of one's own (`--scheme NAME=SPEC`).
//!
//! Prints `LISTENING <uri>` for each bound URI, then `NODE <id>`, then
//! serves until SIGTERM (or Ctrl-C): it says goodbye to its peers and
//! exits 0.

use std::process::ExitCode;

use plexus::config::Config;
use plexus::http::ws_transport::WsTransport;
use plexus::management::Management;
use plexus::transport::TransportRegistry;
use plexus::{ActorSystem, Node, NodeId};

use crate::counter::CounterActor;
use crate::settings::{self, ConfigFlags};

/// The flags of `plexus node`.
#[derive(clap::Args)]
pub struct NodeArgs {
    #[command(flatten)]
    config: ConfigFlags,
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

pub fn main(args: NodeArgs) -> ExitCode {
    let config = match args.config.load(|c| {
        for (scheme, spec) in &args.schemes {
            c.node.schemes.insert(scheme.clone(), spec.clone());
        }
    }) {
        Ok(config) => config,
        Err(e) => return settings::refused("node", &e),
    };
    plexus_remote::process::block_on("plexus node", 2, run(args, config))
}

async fn run(args: NodeArgs, settings: Config) -> Result<(), Box<dyn std::error::Error>> {
    let mut transports = TransportRegistry::default();
    transports.register(WsTransport::new().path(&args.ws_path))?;
    let config = settings.node_config()?;
    #[cfg(feature = "tls")]
    if let Some(tls) = config.tls_config() {
        transports.register(WsTransport::secure(tls.clone()).path(&args.ws_path))?;
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
    for uri in &settings.node.listen {
        println!("LISTENING {}", node.listen(uri).await?);
    }
    node.publish(&system.spawn(CounterActor::default()), &args.name)?;
    if settings.management.enabled {
        let at = Management::new(&settings.management)
            .node(&node)
            .metrics(crate::metrics::render())
            .start(&system)
            .await?;
        println!("MANAGEMENT http://{at}");
    }
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
