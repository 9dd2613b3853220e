//! The cluster on a Plexus node: the tokio driver of a [`Membership`].
//!
//! ```text
//!   subscribers (ActorRef<ClusterUpdate>)   Cluster (handle: members, owners, leave)
//!            ▲                                        │ commands
//!   ─────────┼────────────────────────────────────────▼──────────────────
//!   driver task: packets and deadlines into the Membership, its packets
//!   out through refs forged to `<member address>/plexus.cluster` (one per
//!   member life, watched: a failure to reach a member goes back in)
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
//! itself carries the cluster name. The driver is thin: it moves bytes
//! between the node and the state machine and sleeps until its next
//! deadline.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use plexus_core::{ActorRef, ExitReason, SystemRef};
use plexus_remote::Node;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument as _;

use crate::config::{ClusterConfig, ConfigError};
use crate::discovery::rerun::Rerun;
use crate::discovery::Discovery;
use crate::event::{ClusterEvent, DownError};
use crate::member::{Member, MemberState};
use crate::membership::{Membership, MembershipStats};
use crate::ring::Ring;
use crate::view::View;

mod routes;

use routes::{Failure, Routes};

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

enum Command {
    Subscribe(ActorRef<ClusterUpdate>),
    Leave(oneshot::Sender<()>),
    Down(Arc<str>, oneshot::Sender<Result<(), DownError>>),
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
    commands: mpsc::UnboundedSender<Command>,
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
        let rerun = discovery.map(|d| Rerun::new(d, join_retry));
        let (packets_tx, packets) = mpsc::unbounded_channel::<Bytes>();
        let inbox = system.spawn_fn(move |ClusterPacket(bytes), _ctx| {
            let _ = packets_tx.send(bytes);
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
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (failures_tx, failures) = mpsc::unbounded_channel();
        let driver = Driver {
            membership,
            node: node.clone(),
            routes: Routes::new(failures_tx),
            subscribers: Vec::new(),
            snapshot: Arc::clone(&snapshot),
            view,
            formed: None,
            leaving: Vec::new(),
            inbox,
        };
        // Joins, member state changes and split-brain decisions are logged
        // in this span: which node and which member decided.
        let span = tracing::info_span!(
            target: "plexus::cluster",
            "cluster",
            node = %node.id(),
            member = %driver.membership.local().address,
        );
        let task = tokio::spawn(
            driver
                .run(packets, commands_rx, failures, rerun)
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
        let _ = self.commands.send(Command::Subscribe(subscriber));
    }

    /// Leaves gracefully: the member is `Leaving` while the others hear of
    /// it, then `Removed`. Returns when it left.
    pub async fn leave(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Leave(tx)).is_ok() {
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
        self.commands
            .send(Command::Down(address.into(), tx))
            .map_err(|_| DownError::Stopped)?;
        rx.await.unwrap_or(Err(DownError::Stopped))
    }
}

struct Driver {
    membership: Membership,
    node: Node,
    routes: Routes,
    subscribers: Vec<ActorRef<ClusterUpdate>>,
    snapshot: Arc<Mutex<Snapshot>>,
    /// The members as the updates sent so far left them.
    view: View,
    /// The `Formed` event of this life, replayed to later subscribers.
    formed: Option<ClusterEvent>,
    leaving: Vec<oneshot::Sender<()>>,
    /// Kept alive as long as the driver runs.
    inbox: ActorRef<ClusterPacket>,
}

impl Driver {
    async fn run(
        mut self,
        mut packets: mpsc::UnboundedReceiver<Bytes>,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut failures: mpsc::UnboundedReceiver<Failure>,
        mut rerun: Option<Rerun>,
    ) {
        loop {
            self.flush();
            if self.membership.is_stopped() {
                for l in self.leaving.drain(..) {
                    let _ = l.send(());
                }
                self.node.unpublish(ACTOR_NAME);
                self.inbox.stop();
                return;
            }
            let deadline = self
                .membership
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            // Discovery runs while the member joins (its errors name what
            // was asked).
            let joining = self.membership.local().state == MemberState::Joining;
            tokio::select! {
                found = async {
                    match rerun.as_mut() {
                        Some(r) => r.next(joining).await,
                        None => std::future::pending().await,
                    }
                } => {
                    let now = tokio::time::Instant::now().into_std();
                    match found {
                        Ok(seeds) => {
                            tracing::debug!(target: "plexus::cluster", ?seeds, "discovered seeds");
                            self.membership.set_seeds(now, seeds.into_iter().map(Arc::from).collect());
                        }
                        Err(e) => {
                            let retry = self.membership.config().join_retry;
                            tracing::warn!(target: "plexus::cluster", error = %e, ?retry, "discovery failed; trying again");
                        }
                    }
                }
                Some((address, number, down)) = failures.recv() => {
                    if self.routes.is_current(&address, number) {
                        let now = tokio::time::Instant::now().into_std();
                        self.on_route_failed(now, &address, down.reason);
                    }
                }
                packet = packets.recv() => {
                    let Some(bytes) = packet else { return };
                    let now = tokio::time::Instant::now().into_std();
                    if let Err(e) = self.membership.handle_packet(now, &bytes) {
                        tracing::warn!(target: "plexus::cluster", error = %e, "refused a membership packet");
                    }
                }
                command = commands.recv() => match command {
                    Some(Command::Subscribe(s)) => {
                        let local = self.membership.local().clone();
                        self.publish_to(&s, ClusterEvent::Subscribed { local });
                        if let Some(formed) = &self.formed {
                            self.publish_to(&s, formed.clone());
                        }
                        self.subscribers.push(s);
                    }
                    Some(Command::Leave(done)) => {
                        self.leaving.push(done);
                        self.membership.leave(tokio::time::Instant::now().into_std());
                    }
                    Some(Command::Down(address, done)) => {
                        let now = tokio::time::Instant::now().into_std();
                        let _ = done.send(self.membership.down(now, &address));
                    }
                    // The Cluster handle was dropped: stop without leaving.
                    None => return,
                },
                () = sleep => {
                    self.membership.handle_timeout(tokio::time::Instant::now().into_std());
                }
            }
        }
    }

    /// The ref kept for a member died: tell the membership why, if the
    /// link failed (a member whose cluster actor stopped left, or its node
    /// shut down: not a failure).
    fn on_route_failed(&mut self, now: std::time::Instant, address: &str, reason: ExitReason) {
        match reason {
            ExitReason::NodeDown { cause, .. } => {
                self.membership.handle_unreachable(
                    now,
                    address,
                    &format_args!("link lost: {cause}"),
                );
            }
            ExitReason::Failed(why) => self.membership.handle_unreachable(now, address, &why),
            other => {
                tracing::debug!(target: "plexus::cluster", member = %address, reason = %other, "a member's cluster actor stopped");
            }
        }
    }

    fn flush(&mut self) {
        while let Some(t) = self.membership.poll_transmit() {
            match self.routes.get(&self.node, &t.to, t.heard_life) {
                Ok(to) => to.tell(ClusterPacket(t.packet)),
                Err(e) => {
                    let now = tokio::time::Instant::now().into_std();
                    self.membership.handle_unreachable(now, &t.to, &e);
                }
            }
        }
        let events: Vec<ClusterEvent> =
            std::iter::from_fn(|| self.membership.poll_event()).collect();
        // After the events: draining them counts the downings.
        let stats = self.membership.stats();
        self.snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats = stats;
        let Some(last) = events.len().checked_sub(1) else {
            return;
        };
        // The state machine applied the whole batch before its events are
        // drained: the handle's snapshot is as of the last one, and each
        // event goes out with the view as it leaves it (`View`).
        self.refresh_snapshot();
        for (i, event) in events.into_iter().enumerate() {
            tracing::info!(target: "plexus::cluster", "{event}");
            match event {
                ClusterEvent::Formed { .. } => self.formed = Some(event.clone()),
                ClusterEvent::SelfDowned { .. }
                | ClusterEvent::Rejoining { .. }
                | ClusterEvent::Left => self.formed = None,
                _ => {}
            }
            let update = if i == last {
                let s = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
                self.view
                    .reset(s.local.clone(), s.members.to_vec(), Arc::clone(&s.ring));
                ClusterUpdate {
                    event,
                    local: s.local.clone(),
                    members: Arc::clone(&s.members),
                    ring: Arc::clone(&s.ring),
                }
            } else if self.subscribers.is_empty() {
                continue;
            } else {
                self.view.apply(&event);
                ClusterUpdate {
                    event,
                    local: self.view.local().clone(),
                    members: self.view.members().into(),
                    ring: Arc::clone(self.view.ring()),
                }
            };
            for s in &self.subscribers {
                s.tell(update.clone());
            }
        }
        self.subscribers.retain(ActorRef::is_alive);
    }

    fn refresh_snapshot(&mut self) {
        let ring = Arc::clone(self.membership.ring());
        let mut s = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        s.local = self.membership.local().clone();
        s.members = self.membership.members().into();
        s.ring = ring;
    }

    fn publish_to(&self, subscriber: &ActorRef<ClusterUpdate>, event: ClusterEvent) {
        let s = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        subscriber.tell(ClusterUpdate {
            event,
            local: s.local.clone(),
            members: Arc::clone(&s.members),
            ring: Arc::clone(&s.ring),
        });
    }
}
