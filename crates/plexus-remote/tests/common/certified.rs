//! A node with TLS material on an actor system with its certified id.
#![allow(dead_code)] // not every includer starts one

use plexus_core::ActorSystem;
use plexus_remote::{Node, NodeConfig};

/// An actor system with the node id `config`'s certificate certifies (a
/// node with TLS material must run on one), and its node.
pub fn certified_node(config: NodeConfig) -> (ActorSystem, Node) {
    let id = config.certified_node_id().expect("a TLS config");
    let system = ActorSystem::builder()
        .node_id(id)
        .build()
        .expect("actor system");
    let node = Node::start(&system, config).expect("start the node");
    (system, node)
}
