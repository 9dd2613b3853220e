//! Plexus cluster: membership, failure detection, a consistent-hash ring and
//! split-brain resolution.
//!
//! ```text
//!  application actors: ClusterEvent subscriptions, ring lookups
//!  ───────────────────────────────────────────────────────────────────
//!  Membership (this crate, sans-IO)     claims merged as a semilattice,
//!   gossip · push-pull · probes ·       phi accrual + indirect probes,
//!   suspicion · split-brain · ring      Lifeguard, keep-majority, ...
//!  ───────────────────────────────────────────────────────────────────
//!  a driver: the node's control traffic (any scheme: tcp, udp with its
//!  layers, tls, quic) or the simulator (plexus-sim)
//! ```
//!
//! The protocol logic is [`Membership`], a sans-IO state machine: packets
//! and time in, packets, events and deadlines out. Its rules (member
//! states, incarnations, what overrides what, how suspicion and split-brain
//! resolution work) are in `docs/CLUSTER.md`, with the papers they come
//! from; `ALGORITHM.md` beside this crate lists the invariants.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod broadcast;
pub mod config;
pub mod discovery;
pub mod event;
pub mod member;
pub mod membership;
#[cfg(feature = "node")]
pub mod node;
pub mod ring;
pub mod sim;
pub mod split_brain;
#[cfg(feature = "node")]
pub mod telemetry;
pub mod view;
pub mod wire;

pub use config::{ClusterConfig, ConfigError};
pub use discovery::{Discovery, DiscoveryError, StaticSeeds};
pub use event::{ClusterEvent, DownError, DownReason};
pub use member::{Member, MemberState};
pub use membership::{Membership, MembershipStats, PacketError, Transmit};
#[cfg(feature = "node")]
pub use node::{Cluster, ClusterPacket, ClusterUpdate, StartError};
pub use ring::Ring;
pub use split_brain::{SplitBrainStrategy, UnknownStrategy};
pub use view::View;
