#![doc = include_str!("../../../README.md")]
//!
//! # Crate map
//!
//! ```text
//!  plexus (this facade)    re-exports the public API
//!  ├── plexus-core         local actor runtime              (at the root; its
//!  │                       remote extension point as `plexus::remote`)
//!  ├── plexus-remote       nodes: publish / resolve / forge (`Node`, ... at the root)
//!  ├── plexus-transport    the `Transport` trait and        (as `plexus::transport`)
//!  │                       registry; tcp / udp / uds / mem,
//!  │                       tls and quic (cargo features), and
//!  │                       `Link::over_stream` for a byte stream of one's own
//!  │                       (a transport of one's own: crates/plexus/tests/own_transport.rs)
//!  ├── plexus-net          sans-IO protocol layers, stacks  (as `plexus::net`)
//!  ├── plexus-cluster      membership, failure detection,   (as `plexus::cluster`)
//!  │                       hash ring, split brain
//!  ├── plexus-data         delta-state CRDTs, the           (as `plexus::data`)
//!  │                       replicator, durable keys (redb)
//!  ├── plexus-http         HTTP/1.1 codec and layer, the    (as `plexus::http`)
//!  │                       actor web server
//!  └── plexus-sim          the test kit's simulator of      (as `plexus::sim`)
//!                          many sans-IO processes
//! ```
//!
//! # Cargo features
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `tls` | on | `tls://` (TLS 1.3 over TCP, rustls), certified node ids, the development CA (`plexus::dev_certs`) |
//! | `quic` | on | `quic://` (quinn); turns on `tls` |
//!
//! With `default-features = false` neither rustls nor quinn is built; tcp,
//! udp, uds and mem remain, with every layer (including `encryption`).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub use plexus_core::*;
pub use plexus_remote::{
    CloseCause, LaneCandidate, LaneConfigError, LaneStats, LinkError, Node, NodeConfig, NodeError,
    PeerLinkStats, ProtocolError, PublishError, ResolveError, Uri, UriError,
};

/// The adaptive lane's sans-IO parts: the learner that splits a lane
/// between candidate stacks, its interleaving pattern, the receiver's
/// resequencer, and the KompicsMessaging TD(λ) baseline.
pub mod selector {
    pub use plexus_remote::selector::*;
}

/// What a binary of one's own shares with the `plexus` command: logging
/// (`--log`, `--log-format`, `RUST_LOG`), SIGTERM as a future, a runtime.
pub use plexus_remote::process;

/// Node identities certified by TLS certificates.
pub use plexus_remote::identity;

/// A development certificate authority (what the `plexus certs` binary
/// writes), for tests and demos.
#[cfg(feature = "tls")]
pub use plexus_remote::dev_certs;

/// The wire protocol and handshake of nodes (see `docs/PROTOCOL.md`).
pub mod wire {
    pub use plexus_remote::handshake;
    pub use plexus_remote::wire::*;
}

/// Transport drivers: links over tcp, udp, uds and in-memory channels.
pub mod transport {
    pub use plexus_transport::*;
}

/// Clusters: gossip membership, failure detection, a consistent-hash ring
/// and split-brain resolution, sans-IO ([`cluster::Membership`]) and on a
/// node ([`cluster::Cluster`]). See `docs/CLUSTER.md`.
pub mod cluster {
    pub use plexus_cluster::*;
}

/// Replicated data: delta-state CRDTs ([`data::crdt`]), the sans-IO
/// replicator ([`data::Replicator`]) and its driver on a cluster member
/// ([`data::node::Replication`]), durable keys ([`data::store`]).
pub mod data {
    pub use plexus_data::*;
}

/// Virtual actors: entities addressed by type and id wherever they live
/// ([`sharding::node::Sharding`], [`sharding::node::EntityRef`]), placed
/// on members in shards, handed over on joins and leaves, active on at
/// most one member. See `crates/plexus-sharding/ALGORITHM.md`.
pub mod sharding {
    pub use plexus_sharding::*;
}

/// HTTP/1.1: the sans-IO request decoder and response encoder, the `http`
/// layer of the stack (`tcp / http`), and the actor web server
/// ([`http::server::WebServer`]).
pub mod http {
    pub use plexus_http::*;
}

/// The test kit's simulator: many sans-IO processes (cluster members, a
/// protocol of one's own) on virtual time over a seeded faulty network.
pub mod sim {
    pub use plexus_sim::*;
}

pub mod config;
pub mod management;
#[cfg(feature = "otel")]
pub mod otel;

/// Re-exported for [`remote_message!`] users.
pub use serde;
/// The composable network stack: sans-IO protocol layers, stack specs and
/// the layer registry. See the [`plexus_net`] crate docs.
pub mod net {
    pub use plexus_net::*;
}

/// The names most programs need: `use plexus::prelude::*;`.
pub mod prelude {
    pub use plexus_core::remote::RemoteMessage;
    pub use plexus_core::{
        remote_message, Actor, ActorRef, ActorSystem, AskError, Backoff, Context, Down, Exit,
        ExitReason, Lane, MessageProperties, ReplyTo, Supervision, SystemRef,
    };
    pub use plexus_remote::{Node, NodeConfig};
}
