//! The server side on a Plexus node: the tokio driver of a [`Tracker`]
//! beside a running [`Cluster`].
//!
//! ```text
//!   device packets ──► actor `plexus.devices` ─┐        ┌─► refs forged to devices'
//!   ClusterUpdate  ──► subscriber ─────────────┤ driver │   `reply_to` and to other
//!   deadlines      ──► sleep ──────────────────┘  task  └─► servers' `plexus.devices`
//! ```
//!
//! The driver is thin: it moves packets between the node and the tracker,
//! hands it the ring (and which members are unreachable) on every cluster
//! change, and sleeps until the tracker's next deadline. Packets waiting
//! in its channel are handled in one batch before it flushes, so a busy
//! server sends what a batch produced in one go.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use plexus_cluster::{Cluster, ClusterEvent, ClusterUpdate, MemberState};
use plexus_core::{ActorRef, SystemRef};
use plexus_remote::{ForgedRefs, Node};
use tokio::sync::mpsc;

use crate::config::TrackerConfig;
use crate::directory::{DeviceDirectory, LocalDirectory};
use crate::tracker::{Tracker, TrackerEvent, TrackerStats};
use crate::{To, DEVICE_ACTOR, SERVER_ACTOR};

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

/// Packets handled before the driver flushes (bounds one batch's delay).
const BATCH: usize = 256;

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
        let (packets_tx, packets) = mpsc::unbounded_channel::<Bytes>();
        let inbox = system.spawn_fn(move |DevicePacket(bytes), _ctx| {
            let _ = packets_tx.send(bytes);
        });
        node.publish(&inbox, SERVER_ACTOR)?;
        let (updates_tx, updates) = mpsc::unbounded_channel::<ClusterUpdate>();
        cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
            let _ = updates_tx.send(u);
        }));
        let shared = Arc::new(Mutex::new(Shared {
            stats: TrackerStats::default(),
            subscribers: Vec::new(),
        }));
        let driver = Driver {
            tracker,
            node: node.clone(),
            refs: ForgedRefs::default(),
            shared: Arc::clone(&shared),
            unreachable: HashSet::new(),
            _inbox: inbox,
        };
        let task = tokio::spawn(driver.run(packets, updates)).abort_handle();
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

struct Driver<D: DeviceDirectory> {
    tracker: Tracker<D>,
    node: Node,
    refs: ForgedRefs<DevicePacket>,
    shared: Arc<Mutex<Shared>>,
    /// Members the cluster suspects or found unreachable.
    unreachable: HashSet<Arc<str>>,
    /// Kept alive as long as the driver runs.
    _inbox: ActorRef<DevicePacket>,
}

impl<D: DeviceDirectory> Driver<D> {
    async fn run(
        mut self,
        mut packets: mpsc::UnboundedReceiver<Bytes>,
        mut updates: mpsc::UnboundedReceiver<ClusterUpdate>,
    ) {
        loop {
            self.flush();
            let deadline = self
                .tracker
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                packet = packets.recv() => {
                    let Some(bytes) = packet else { return };
                    let now = tokio::time::Instant::now().into_std();
                    self.handle(now, &bytes);
                    for _ in 1..BATCH {
                        match packets.try_recv() {
                            Ok(bytes) => self.handle(now, &bytes),
                            Err(_) => break,
                        }
                    }
                    if deadline.is_some_and(|d| d.into_std() <= now) {
                        self.tracker.handle_timeout(now);
                    }
                }
                update = updates.recv() => {
                    let Some(u) = update else { return };
                    self.on_update(&u);
                }
                () = sleep => {
                    self.tracker.handle_timeout(tokio::time::Instant::now().into_std());
                }
            }
        }
    }

    fn handle(&mut self, now: std::time::Instant, bytes: &Bytes) {
        if let Err(e) = self.tracker.handle_packet(now, bytes) {
            tracing::debug!(target: "plexus::devices", error = %e, "refused a device packet");
        }
    }

    fn on_update(&mut self, u: &ClusterUpdate) {
        match &u.event {
            ClusterEvent::MemberSuspected(m) | ClusterEvent::MemberUnreachable(m) => {
                self.unreachable.insert(Arc::clone(&m.address));
            }
            ClusterEvent::MemberReachable(m) | ClusterEvent::MemberUp(m) => {
                self.unreachable.remove(&m.address);
            }
            _ => {}
        }
        let unreachable: Vec<Arc<str>> = u
            .members
            .iter()
            .filter(|m| m.state == MemberState::Suspect || self.unreachable.contains(&m.address))
            .map(|m| Arc::clone(&m.address))
            .collect();
        let now = tokio::time::Instant::now().into_std();
        self.tracker
            .handle_ring(now, Arc::clone(&u.ring), unreachable);
    }

    fn flush(&mut self) {
        while let Some(t) = self.tracker.poll_transmit() {
            let (key, uri) = match &t.to {
                To::Device(reply_to) => (reply_to, None),
                To::Server(address) => (address, Some(SERVER_ACTOR)),
            };
            let full = || match uri {
                Some(actor) => format!("{key}/{actor}"),
                None => key.to_string(),
            };
            let to = match self.refs.get(&self.node, key, full) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(target: "plexus::devices", to = %key, error = %e, "cannot reach");
                    continue;
                }
            };
            to.tell(DevicePacket(t.packet));
        }
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.stats = self.tracker.stats();
        while let Some(event) = self.tracker.poll_event() {
            match &event {
                TrackerEvent::DuplicateStopped { .. } => {
                    tracing::warn!(target: "plexus::devices", ?event, "duplicate device driver");
                }
                _ => tracing::debug!(target: "plexus::devices", ?event, "device event"),
            }
            shared.subscribers.retain(|s| s.send(event.clone()).is_ok());
        }
    }
}

/// The actor URI devices on `node_uri` are reached at.
pub fn device_uri(node_uri: &str) -> String {
    format!("{node_uri}/{DEVICE_ACTOR}")
}
