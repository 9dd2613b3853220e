//! An application's own binary as a cluster member, configured like
//! `plexus member`: the same TOML file and `PLEXUS_*` variables (see
//! deploy/kubernetes/app-member.yaml), the management endpoint for probes
//! and Prometheus, a graceful leave on SIGTERM.
//!
//! ```text
//! PLEXUS_NODE__COOKIE=... cargo run --example app_member -- examples/quick-start/b.toml
//! ```

use std::sync::Arc;

use plexus::cluster::Cluster;
use plexus::config::Config;
use plexus::management::Management;
use plexus::process::{init_logging, stop_signal, LogOptions};
use plexus::{ActorSystem, Node};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    init_logging(&LogOptions::default())?;
    // defaults < the files < PLEXUS_* variables (a pod's listen address,
    // the SRV name, the cookie from a Secret); secrets read, values checked.
    let files: Vec<String> = std::env::args().skip(1).collect();
    let config = Config::load(&files)?.finish()?;

    let node_config = config.node_config()?;
    let mut system = ActorSystem::builder();
    if let Some(id) = node_config.certified_node_id() {
        system = system.node_id(id);
    }
    let system = system.build()?;
    let node = Node::start(&system, node_config)?;
    for uri in &config.node.listen {
        node.listen(uri).await?;
    }
    let cluster = Arc::new(match config.discovery.build()? {
        Some(d) => Cluster::start_with_discovery(&node, &system, config.cluster.clone(), d)?,
        None => Cluster::start(&node, &system, config.cluster.clone())?,
    });
    if config.management.enabled {
        Management::new(&config.management)
            .node(&node)
            .cluster(Arc::clone(&cluster))
            .start(&system)
            .await?;
    }

    // ... the application's actors on `system`, published on `node` ...

    stop_signal().await;
    cluster.leave().await;
    node.shutdown().await;
    system.shutdown().await;
    Ok(())
}
