//! The cluster on a Plexus node: a [`Membership`] run by the node's
//! protocol driver (`plexus_remote::driver`).
//!
//! ```text
//!   subscribers (ActorRef<ClusterUpdate>)   Cluster (handle: members, owners, leave)
//!            ▲                                        │ commands
//!   ─────────┼────────────────────────────────────────▼──────────────────
//!   driver task (plexus_remote::driver, with the host in `host.rs`):
//!   packets and deadlines into the Membership, its packets out through
//!   refs forged to `<member address>/plexus.cluster` (one per member
//!   life, watched: a failure to reach a member goes back in)
//!   ─────────────────────────────────────────────────────────────────────
//!   Node: the actor `plexus.cluster` receives packets over the node's
//!   links, on whatever scheme the member addresses use (tcp, udp with its
//!   layers, tls, quic, a transport of one's own)
//! ```
//!
//! A member's address is its node's first listen URI (`tcp://10.0.0.7:4000`),
//! so members must listen before they start the cluster. Membership packets
//! are ordinary remote messages to the published actor `plexus.cluster`;
//! the node's handshake has already checked the cookie (and, over TLS, that
//! the peer's certificate comes from the cluster's CA), and the packet
//! itself carries the cluster name. The driver is the node's one driver of
//! sans-IO protocols: it moves bytes between the node and the state
//! machine and sleeps until its next deadline.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plexus_core::{ActorRef, SystemRef};
use plexus_remote::driver::{self, Input, Inputs};
use plexus_remote::Node;
use tokio::sync::{oneshot, watch};
use tracing::Instrument as _;

use crate::config::{ClusterConfig, ConfigError};
use crate::discovery::rerun::Rerun;
use crate::discovery::Discovery;
use crate::event::{ClusterEvent, DownError};
use crate::member::{Member, MemberState};
use crate::membership::{Membership, MembershipStats};
use crate::ring::Ring;
use crate::view::View;

mod host;
mod protocol;
mod routes;

use host::{ClusterHost, Command};
use routes::Routes;

/// The name the cluster's actor is published under on every member node.
pub const ACTOR_NAME: &str = "plexus.cluster";

plexus_core::bytes_message! {
    /// A membership packet as a remote message (its bytes travel as they
    /// are). On the control lane: probes and acks measure the peer, not a
    /// bulk transfer queued ahead of them.
    pub struct ClusterPacket = "plexus.cluster.Packet", lane = Control;
}

/// What a subscriber receives: an event with the member list and ring as
/// they are after it and before any later event (Aurum's contract: a
/// member is listed `Up` from its [`ClusterEvent::MemberUp`] on, the local
/// one included; see [`View`]). The first update a subscriber gets is
/// [`ClusterEvent::Subscribed`], telling it the local member; if this
/// member formed the cluster before the subscription, the next is that
/// [`ClusterEvent::Formed`] (with the members as they are then), so every
/// subscriber of a member that formed a cluster sees `Formed` once.
#[derive(Debug, Clone)]
pub struct ClusterUpdate {
    /// What changed.
    pub event: ClusterEvent,
    /// This member.
    pub local: Member,
    /// Every member known (tombstones included), sorted by address.
    pub members: Arc<[Member]>,
    /// The ring of the members that own keys.
    pub ring: Arc<Ring>,
}

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The node listens nowhere, so other members could not reach it.
    #[error("start cluster: the node listens on no URI; call Node::listen first")]
    NotListening,
    /// The settings cannot work.
    #[error("start cluster: {0}")]
    Config(#[from] ConfigError),
    /// The cluster's actor could not be published.
    #[error("start cluster: publishing `{ACTOR_NAME}`: {0}")]
    Publish(#[from] plexus_remote::PublishError),
}

#[derive(Debug)]
struct Snapshot {
    local: Member,
    members: Arc<[Member]>,
    ring: Arc<Ring>,
    stats: MembershipStats,
}

/// A running cluster member on a node. Dropping it stops the member
/// without leaving (like a crash, as far as the others can tell); call
/// [`Cluster::leave`] to leave gracefully.
#[derive(Debug)]
pub struct Cluster {
    commands: Inputs<protocol::Peer, Command>,
    snapshot: Arc<Mutex<Snapshot>>,
    task: tokio::task::AbortHandle,
    replication_factor: usize,
    name: Arc<str>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Cluster {
    /// Starts a member on `node` (which must listen already), publishing
    /// the actor [`ACTOR_NAME`] in `system`. Its incarnation is the wall
    /// clock in milliseconds, so a restarted node comes back as a newer
    /// incarnation than the one the cluster knew.
    ///
    /// # Errors
    ///
    /// [`StartError`] says why.
    pub fn start(
        node: &Node,
        system: &SystemRef,
        config: ClusterConfig,
    ) -> Result<Cluster, StartError> {
        Self::start_inner(node, system, config, None)
    }

    /// Starts a member like [`Cluster::start`] whose seeds come from
    /// `discovery` as well as from [`ClusterConfig::seeds`]: the driver
    /// runs it at once and every `join_retry` while the member joins, and
    /// hands each answer to [`Membership::set_seeds`]. A failed discovery
    /// is logged (a warning) and retried, never fatal. The member forms a
    /// cluster only by the bootstrap rule (the lowest of at least
    /// `bootstrap_min_seeds` discovered addresses, its own among them,
    /// once no other admitted it; `docs/CLUSTER.md`, "Discovery"), so its
    /// node must listen on the address the discovery finds for it.
    ///
    /// # Errors
    ///
    /// [`StartError`] says why.
    pub fn start_with_discovery(
        node: &Node,
        system: &SystemRef,
        config: ClusterConfig,
        discovery: Box<dyn Discovery>,
    ) -> Result<Cluster, StartError> {
        Self::start_inner(node, system, config, Some(discovery))
    }

    fn start_inner(
        node: &Node,
        system: &SystemRef,
        config: ClusterConfig,
        discovery: Option<Box<dyn Discovery>>,
    ) -> Result<Cluster, StartError> {
        let address = node
            .listen_uris()
            .into_iter()
            .next()
            .ok_or(StartError::NotListening)?;
        let incarnation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as u64;
        let mut config = config;
        if config.rng_seed == 0 {
            config.rng_seed = incarnation;
        }
        let replication_factor = config.replication_factor;
        let name = Arc::from(config.name.as_str());
        let now = tokio::time::Instant::now().into_std();
        let join_retry = config.join_retry;
        let mut membership = match discovery {
            Some(_) => Membership::with_discovery(config, address, incarnation, now)?,
            None => Membership::new(config, address, incarnation, now)?,
        };
        let (commands, inputs) = tokio::sync::mpsc::unbounded_channel();
        let packets = commands.clone();
        let inbox = system.spawn_fn(move |ClusterPacket(bytes), _ctx| {
            let _ = packets.send(Input::Command(Command::Packet(bytes)));
        });
        node.publish(&inbox, ACTOR_NAME)?;
        let snapshot = Arc::new(Mutex::new(Snapshot {
            local: membership.local().clone(),
            members: membership.members().into(),
            ring: Arc::clone(membership.ring()),
            stats: membership.stats(),
        }));
        let view = View::new(
            membership.local().clone(),
            membership.members(),
            Arc::clone(membership.ring()),
            membership.config().vnodes_per_weight,
            membership.config().lookup_probes,
        );
        // Joins, member state changes and split-brain decisions are logged
        // in this span: which node and which member decided.
        let span = tracing::info_span!(
            target: "plexus::cluster",
            "cluster",
            node = %node.id(),
            member = %membership.local().address,
        );
        let (joining, wanted) = watch::channel(membership.local().state == MemberState::Joining);
        if let Some(discovery) = discovery {
            // Ends when the driver does (its `joining` sender is dropped).
            let found = commands.clone();
            let feed = Rerun::new(discovery, join_retry).feed(wanted, move |answer| {
                found
                    .send(Input::Command(Command::Discovered(answer)))
                    .is_ok()
            });
            tokio::spawn(feed.instrument(span.clone()));
        }
        let host = ClusterHost {
            node: node.clone(),
            routes: Routes::new(commands.clone()),
            subscribers: Vec::new(),
            snapshot: Arc::clone(&snapshot),
            view,
            formed: None,
            leaving: Vec::new(),
            events: Vec::new(),
            joining,
            inbox,
        };
        let task = tokio::spawn(
            async move {
                let (_, host) =
                    driver::run(protocol::MembershipProtocol(membership), host, inputs).await;
                host.close();
            }
            .instrument(span),
        )
        .abort_handle();
        Ok(Cluster {
            commands,
            snapshot,
            task,
            replication_factor,
            name,
        })
    }

    /// Whether the driver took `command` (false: it stopped).
    fn send(&self, command: Command) -> bool {
        self.commands.send(Input::Command(command)).is_ok()
    }

    fn snapshot(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        self.snapshot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cluster's name ([`ClusterConfig::name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This member as it is now.
    pub fn local(&self) -> Member {
        self.snapshot().local.clone()
    }

    /// Every member known (tombstones included), sorted by address, as of
    /// the driver's last step: it may be ahead of the updates a subscriber
    /// has yet to handle, so a subscriber reads [`ClusterUpdate::members`]
    /// (the list as its event left it).
    pub fn members(&self) -> Arc<[Member]> {
        Arc::clone(&self.snapshot().members)
    }

    /// The ring of the members that own keys.
    pub fn ring(&self) -> Arc<Ring> {
        Arc::clone(&self.snapshot().ring)
    }

    /// The member's counters (packets and bytes sent, suspicions,
    /// refutations, refused input) as of the driver's last step.
    pub fn stats(&self) -> MembershipStats {
        self.snapshot().stats
    }

    /// The `replication_factor` member addresses owning `key`.
    pub fn owners(&self, key: &[u8]) -> Vec<Arc<str>> {
        self.ring()
            .owners(key, self.replication_factor)
            .into_iter()
            .cloned()
            .collect()
    }

    /// Sends `subscriber` a [`ClusterUpdate`] for every change, starting
    /// with [`ClusterEvent::Subscribed`], then [`ClusterEvent::Formed`] if
    /// this member formed the cluster already (in its current life).
    pub fn subscribe(&self, subscriber: ActorRef<ClusterUpdate>) {
        self.send(Command::Subscribe(subscriber));
    }

    /// Leaves gracefully: the member is `Leaving` while the others hear of
    /// it, then `Removed`. Returns when it left.
    pub async fn leave(&self) {
        let (tx, rx) = oneshot::channel();
        if self.send(Command::Leave(tx)) {
            let _ = rx.await;
        }
    }

    /// Downs the member at `address` on an operator's word (see
    /// [`Membership::down`](crate::Membership::down)); this member itself
    /// if it is the one named.
    ///
    /// # Errors
    ///
    /// [`DownError`] if no member has that address, it is not up, or this
    /// member has stopped.
    pub async fn down(&self, address: &str) -> Result<(), DownError> {
        let (tx, rx) = oneshot::channel();
        if !self.send(Command::Down(address.into(), tx)) {
            return Err(DownError::Stopped);
        }
        rx.await.unwrap_or(Err(DownError::Stopped))
    }
}
