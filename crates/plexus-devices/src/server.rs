//! The server side on a Plexus node: a [`Tracker`] beside a running
//! [`Cluster`], run by the node's protocol driver.
//!
//! ```text
//!   device packets ──► actor `plexus.devices` ─┐        ┌─► refs forged to devices'
//!   ClusterUpdate  ──► subscriber ─────────────┤ driver │   `reply_to` and to other
//!   deadlines      ──► sleep ──────────────────┘  task  └─► servers' `plexus.devices`
//! ```
//!
//! The driver is the node's one driver of sans-IO protocols
//! (`plexus_remote::driver`, with the host in `host.rs`): it moves packets
//! between the node and the tracker, hands it the ring (and which members
//! are unreachable) on every cluster change, and sleeps until the
//! tracker's next deadline. Inputs waiting in its channel are handled in
//! one batch (up to `plexus_remote::driver::BATCH`) before it flushes, so
//! a busy server sends what a batch produced in one go.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use plexus_cluster::{Cluster, ClusterUpdate};
use plexus_core::SystemRef;
use plexus_remote::driver::{self, Input};
use plexus_remote::{ForgedRefs, Node};
use tokio::sync::mpsc;

use crate::config::TrackerConfig;
use crate::directory::{DeviceDirectory, LocalDirectory};
use crate::tracker::{Tracker, TrackerEvent, TrackerStats};
use crate::{DEVICE_ACTOR, SERVER_ACTOR};

mod host;
mod protocol;

use host::{Command, ServerHost};
use protocol::TrackerProtocol;

plexus_core::bytes_message! {
    /// A device protocol packet as a remote message (its bytes travel as
    /// they are, without a copy into a serde encoding).
    pub struct DevicePacket = "plexus.devices.Packet";
}

/// Why the device server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerStartError {
    /// The actor could not be published.
    #[error("start device server: publishing `{SERVER_ACTOR}`: {0}")]
    Publish(#[from] plexus_remote::PublishError),
}

/// What the driver tells the server's handle.
struct Shared {
    stats: TrackerStats,
    subscribers: Vec<mpsc::UnboundedSender<TrackerEvent>>,
}

/// A running device tracker on a cluster member, recording device states
/// in a `D` (this server's [`LocalDirectory`] unless started with another,
/// e.g. `replicated::ReplicatedDirectory`). Dropping it stops it.
#[derive(Debug)]
pub struct DeviceServer<D = LocalDirectory> {
    directory: D,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::AbortHandle,
    address: Arc<str>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("stats", &self.stats)
            .finish()
    }
}

impl<D> Drop for DeviceServer<D> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DeviceServer {
    /// Starts tracking devices on `node` (a member of `cluster`), publishing
    /// [`SERVER_ACTOR`] in `system`, with device states in this server's
    /// [`LocalDirectory`]. The server's address on the ring is the
    /// cluster's local address.
    ///
    /// # Errors
    ///
    /// [`ServerStartError`] if the actor cannot be published.
    pub fn start(
        node: &Node,
        system: &SystemRef,
        cluster: &Cluster,
        config: TrackerConfig,
    ) -> Result<DeviceServer, ServerStartError> {
        Self::start_with(node, system, cluster, config, LocalDirectory::new())
    }
}

impl<D: DeviceDirectory + Clone> DeviceServer<D> {
    /// Like [`DeviceServer::start`], recording device states in
    /// `directory` (the server keeps a clone to read them).
    ///
    /// # Errors
    ///
    /// [`ServerStartError`] if the actor cannot be published.
    pub fn start_with(
        node: &Node,
        system: &SystemRef,
        cluster: &Cluster,
        config: TrackerConfig,
        directory: D,
    ) -> Result<DeviceServer<D>, ServerStartError> {
        let address = Arc::clone(&cluster.local().address);
        let now = tokio::time::Instant::now().into_std();
        let tracker = Tracker::new(config, Arc::clone(&address), directory.clone(), now);
        let (inputs_tx, inputs) = mpsc::unbounded_channel();
        let packets = inputs_tx.clone();
        let inbox = system.spawn_fn(move |DevicePacket(bytes), _ctx| {
            let _ = packets.send(Input::Command(Command::Packet(bytes)));
        });
        node.publish(&inbox, SERVER_ACTOR)?;
        cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
            let _ = inputs_tx.send(Input::Command(Command::Cluster(Box::new(u))));
        }));
        let shared = Arc::new(Mutex::new(Shared {
            stats: TrackerStats::default(),
            subscribers: Vec::new(),
        }));
        let host = ServerHost {
            node: node.clone(),
            refs: ForgedRefs::default(),
            shared: Arc::clone(&shared),
            unreachable: HashSet::new(),
            events: Vec::new(),
            _inbox: inbox,
        };
        let task = tokio::spawn(driver::run(TrackerProtocol(tracker), host, inputs)).abort_handle();
        Ok(DeviceServer {
            directory,
            shared,
            task,
            address,
        })
    }

    /// This server's ring address.
    pub fn address(&self) -> &Arc<str> {
        &self.address
    }

    /// The directory of device states (with a replicated one, every
    /// server's records as far as they reached this server).
    pub fn directory(&self) -> &D {
        &self.directory
    }

    /// The tracker's counters as of the driver's last step.
    pub fn stats(&self) -> TrackerStats {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
    }

    /// Every tracker event from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<TrackerEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .subscribers
            .push(tx);
        rx
    }
}

/// The actor URI devices on `node_uri` are reached at.
pub fn device_uri(node_uri: &str) -> String {
    format!("{node_uri}/{DEVICE_ACTOR}")
}
