//! Remote actors: nodes that publish, resolve and forge actor refs by URI,
//! over any stack of the composable network stack.
//!
//! ```text
//!  ActorRef<M> (plexus-core) ──► RemoteSink<M> ──► proxy (this crate)
//!                                                   │ MESSAGE / STOP / MONITOR / LINK ...
//!  node: peers (one link per node and scheme) ─────┤ wire codec, handshake
//!  plexus-transport: Link over tcp | udp | uds | mem, stack from the scheme
//! ```
//!
//! Start a [`Node`] on an actor system, [`listen`](Node::listen) on URIs,
//! [`publish`](Node::publish) actors by name, and
//! [`resolve`](Node::resolve) `scheme://host:port/name` into the same
//! `ActorRef<M>` local actors use. Message types cross nodes through
//! [`RemoteMessage`](plexus_core::remote::RemoteMessage) (usually
//! [`remote_message!`](plexus_core::remote_message)).
//!
//! Guarantees: at-most-once, FIFO per sender-receiver pair on a scheme
//! (the stack decides what the link guarantees: `tcp` and the default `udp`
//! stack are reliable and ordered). A message that cannot be delivered is a
//! dead letter on the node that finds out, and an error to the sender if a
//! receipt was asked for. A lost link delivers `Down` (`NodeDown`) to every
//! monitor of that node's actors, `Exit` to linked actors, and fails
//! pending asks.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod close;
mod config;
mod context;
#[cfg(feature = "tls")]
pub mod dev_certs;
pub mod driver;
mod error;
mod forged;
#[doc(hidden)]
pub mod fuzzing;
pub mod handshake;
pub mod identity;
mod lanes;
mod node;
mod peer;
#[cfg(feature = "process")]
pub mod process;
mod proxy;
pub mod selector;
mod telemetry;
pub mod uri;
pub mod wire;

pub use close::{CloseCause, ProtocolError};
pub use config::NodeConfig;
pub use error::{LaneConfigError, LinkError, NodeError, PublishError, ResolveError};
pub use forged::ForgedRefs;
pub use node::{LaneStats, Node, PeerLinkStats};
pub use peer::LaneCandidate;
pub use uri::{Uri, UriError};
