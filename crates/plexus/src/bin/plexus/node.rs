//! `plexus node`: a node serving a counter actor, for trying Plexus from a
//! shell and for the multi-process tests (`ws://`, `wss://` and the
//! built-in schemes).

use plexus::http::ws_transport::WsTransport;
use plexus::transport::TransportRegistry;
use plexus::{ActorSystem, Node, NodeConfig};

use crate::counter::CounterActor;

#[derive(clap::Args)]
pub struct NodeArgs {
    /// A URI to listen on (`ws://127.0.0.1:4000`, `tcp://...`); repeatable.
    #[arg(long, required = true)]
    listen: Vec<String>,
    /// The cluster cookie.
    #[arg(long, default_value = "plexus")]
    cookie: String,
    /// The counter's published name.
    #[arg(long, default_value = "counter")]
    name: String,
    /// The path WebSocket upgrades are asked on.
    #[arg(long, default_value = "/plexus")]
    ws_path: String,
    /// The node's certificate (PEM), for `tls`, `quic` and `wss`.
    #[arg(long, requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires_all = ["tls_cert", "tls_ca"])]
    tls_key: Option<std::path::PathBuf>,
    /// The CA roots peers' certificates must chain to (PEM).
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<std::path::PathBuf>,
}

#[tokio::main]
pub async fn run(args: NodeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut transports = TransportRegistry::default();
    transports.register(WsTransport::new().path(&args.ws_path))?;
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
    let mut config = NodeConfig::default().cookie(&args.cookie);
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
    let config = config.transports(transports);
    let mut system = ActorSystem::builder();
    if let Some(id) = config.certified_node_id() {
        system = system.node_id(id);
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
