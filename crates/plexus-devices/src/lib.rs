//! Plexus devices: processes outside the cluster (sensors, gateways, IoT
//! devices) that the cluster tracks, after Aurum's `devices` module.
//!
//! ```text
//!   device process (a Node, not a member)          servers (Node + Cluster members)
//!   ┌───────────────────────────────┐              ┌─────────────────────────────────┐
//!   │ DeviceHost: DeviceSession × C │──Register───►│ any seed ──forward──► the owner │
//!   │  heartbeats, phi on server    │◄─Welcome─────│ DeviceServer: Tracker           │
//!   │  answers Requests with Reports│◄─Request─────│  by the ring, phi per device,   │
//!   │  re-registers on failure      │──Report─────►│  duplicate drivers, rate limits │
//!   └───────────────────────────────┘              │  DeviceDirectory (device states)│
//!       actor `plexus.device`                      └─────────────────────────────────┘
//!                                                      actor `plexus.devices`
//!   ──────────────── the Plexus wire protocol: udp (any layers), tcp, tls, quic ────────
//! ```
//!
//! A device is given seed servers. It registers with them; a server that
//! is not responsible for the device (the cluster's consistent-hash ring
//! assigns it) forwards the registration to the one that is, which
//! welcomes the device and from then on exchanges heartbeats with it, both
//! sides running a phi-accrual detector on the other's. When its server
//! fails, the device registers again, naming the failed server, and the
//! ring's next owner takes it. Two drivers of one device id: the newer
//! session holds it, the older is told to stop. The servers keep each
//! device's state in a [`DeviceDirectory`]: this server's alone
//! ([`LocalDirectory`]) or replicated cluster-wide through `plexus-data`
//! (`replicated::ReplicatedDirectory`, feature `data`), so every server
//! reads every device's state.
//!
//! The protocol is sans-IO: [`DeviceSession`] (device side) and
//! [`Tracker`] (server side) take packets and time and give packets,
//! events and deadlines; they run on virtual time in `plexus-sim` in the
//! tests. The drivers (feature `node`) are thin loops on Plexus nodes:
//! [`server::DeviceServer`] beside a running `plexus_cluster::Cluster`,
//! [`device::DeviceHost`] on a node that is not a member. `ALGORITHM.md`
//! beside this crate lists the invariants.
//!
//! **Why a crate of its own.** Devices need the cluster (the ring, member
//! events) and the remote layer, but neither needs devices: putting them
//! in `plexus-cluster` would make every member carry a second protocol and
//! its binaries. A device process depends only on this crate's session
//! and a node; its binaries (`plexus device`, `plexus device-server`) and
//! benchmark (W5) live here too.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
#[cfg(feature = "node")]
pub mod device;
pub mod directory;
mod limit;
#[cfg(feature = "data")]
pub mod replicated;
#[cfg(feature = "node")]
pub mod server;
pub mod session;
#[cfg(feature = "node")]
pub mod telemetry;
pub mod tracker;
pub mod wire;

use std::sync::Arc;

use bytes::Bytes;

pub use config::{Liveness, SessionConfig, TrackerConfig};
pub use directory::{DeviceDirectory, DeviceRecord, DeviceStatus, LocalDirectory};
pub use session::{DeviceEvent, DeviceSession, ReportError, SessionError};
pub use tracker::{PacketError, Tracker, TrackerEvent, TrackerStats};
pub use wire::{DeviceId, Packet, RefuseReason, SessionId, StopReason};

/// The actor servers publish to receive device packets.
pub const SERVER_ACTOR: &str = "plexus.devices";
/// The actor a device process publishes to receive server packets.
pub const DEVICE_ACTOR: &str = "plexus.device";

/// Where a packet goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum To {
    /// A server, by its ring address (a node URI): its `plexus.devices`.
    Server(Arc<str>),
    /// A device, by the `reply_to` it registered with (an actor URI).
    Device(Arc<str>),
}

/// A packet to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The addressee.
    pub to: To,
    /// The packet's bytes.
    pub packet: Bytes,
}
