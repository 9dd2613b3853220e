//! What the sharding does under the node's driver
//! (`plexus_remote::driver`): control packets out through refs forged to
//! `<member>/plexus.sharding`; entity messages, markers, cluster updates
//! and entities' stops in; the regions' events carried out on the entity
//! types ([`Kind`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_cluster::{ClusterUpdate, MemberState};
use plexus_remote::driver::Host;
use plexus_remote::{ForgedRefs, Node};
use tokio::sync::oneshot;

use super::entity::Life;
use super::kind::{Kind, Parcel, Waiter};
use super::protocol::ShardingProtocol;
use super::remember::Remembering;
use super::{ControlPacket, ShardingStats, ACTOR_NAME};
use crate::envelope::Origin;
use crate::region::EntityError;
use crate::regions::{Event, Regions};
use crate::shard::{shard_of, EntityId, HandOffId, ShardId};

/// What the driver is asked to do besides its packets' work.
pub(crate) enum Command {
    /// A control packet from the node (its sender is named inside).
    Control(Bytes),
    /// The cluster changed.
    Cluster(ClusterUpdate),
    /// An entity type: registered here (hosting) or used (a proxy). A
    /// proxy does not replace a registered type.
    Kind {
        entity_type: Arc<str>,
        kind: Box<dyn Kind>,
        /// A registered type that remembers its entities: their store.
        remember: Option<Remembering>,
        /// A registered singleton's type: the entity kept running on the
        /// oldest member.
        singleton: Option<EntityId>,
    },
    /// The ids remembered for a shard that started here, read.
    Wake {
        entity_type: Arc<str>,
        ids: Vec<EntityId>,
    },
    /// A write of a shard's remembered ids ended.
    Remembered {
        entity_type: Arc<str>,
        shard: ShardId,
        written: bool,
    },
    /// A message sent on this member.
    Send {
        entity_type: Arc<str>,
        id: EntityId,
        parcel: Parcel,
    },
    /// A message another member's region forwarded here.
    Arrived {
        entity_type: Arc<str>,
        id: EntityId,
        parcel: Parcel,
    },
    /// Another region's hand-off marker.
    Marker {
        entity_type: Arc<str>,
        from: Arc<str>,
        shard: ShardId,
        handoff: HandOffId,
    },
    /// An entity's actor stopped.
    EntityStopped {
        entity_type: Arc<str>,
        id: EntityId,
        life: Life,
    },
    /// Hand over every shard; answer when none is left.
    Leave(oneshot::Sender<()>),
    /// A proxy's member is unreachable or stopped its sharding: what waits
    /// for it is lost, and what comes after is refused.
    MemberGone(Arc<str>),
    /// The counters.
    Stats(oneshot::Sender<ShardingStats>),
}

/// A request sent to another member whose sender waits here.
struct Pending {
    member: Arc<str>,
    tx: oneshot::Sender<Result<(), EntityError>>,
}

/// Refusals and losses told to waiting senders.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HostCounts {
    /// Messages refused with nobody waiting (a `tell`).
    pub(crate) dropped: u64,
    /// Requests whose member went away before an answer.
    pub(crate) lost: u64,
    /// Writes of remembered ids that did not reach a majority.
    pub(crate) unremembered: u64,
}

/// The sharding's host. See the [module docs](self).
pub(crate) struct ShardingHost {
    pub(crate) node: Node,
    pub(crate) refs: ForgedRefs<ControlPacket>,
    pub(crate) kinds: HashMap<Arc<str>, Box<dyn Kind>>,
    /// The remembering types' stores.
    remembering: HashMap<Arc<str>, Remembering>,
    pending: HashMap<u64, Pending>,
    next_request: u64,
    /// Pending requests the last prune left (prunes when it doubles).
    pruned_at: usize,
    leaving: Vec<oneshot::Sender<()>>,
    left: bool,
    /// A proxy's member, once gone: nothing is sent to it any more.
    gone: Option<Arc<str>>,
    pub(crate) counts: HostCounts,
}

impl ShardingHost {
    pub(crate) fn new(node: Node) -> Self {
        Self {
            node,
            refs: ForgedRefs::default(),
            kinds: HashMap::new(),
            remembering: HashMap::new(),
            pending: HashMap::new(),
            next_request: 1,
            pruned_at: 64,
            leaving: Vec::new(),
            left: false,
            gone: None,
            counts: HostCounts::default(),
        }
    }

    /// Tells whoever waits for `parcel` that it was refused.
    fn refuse(
        &mut self,
        protocol: &mut ShardingProtocol,
        entity_type: &str,
        id: &EntityId,
        parcel: Parcel,
        error: EntityError,
    ) {
        match parcel.waiter {
            Waiter::Here { tx, .. } => {
                let _ = tx.send(Err(error));
            }
            Waiter::There(origin) => {
                protocol
                    .0
                    .refuse_to(&origin.node, entity_type, origin.request, error);
            }
            Waiter::Nobody => {
                self.counts.dropped += 1;
                tracing::debug!(target: "plexus::sharding", %entity_type, %id, %error, "message refused");
            }
        }
    }

    /// The origin a forwarded parcel carries, its waiter kept here.
    fn origin(&mut self, me: &Arc<str>, to: &Arc<str>, waiter: Waiter) -> Option<Origin> {
        match waiter {
            Waiter::Nobody => None,
            Waiter::There(origin) => Some(origin),
            Waiter::Here { tx, confirm } => {
                if self.pending.len() >= 2 * self.pruned_at {
                    self.pending.retain(|_, p| !p.tx.is_closed());
                    self.pruned_at = self.pending.len().max(64);
                }
                let request = self.next_request;
                self.next_request += 1;
                self.pending.insert(
                    request,
                    Pending {
                        member: to.clone(),
                        tx,
                    },
                );
                Some(Origin {
                    node: me.clone(),
                    request,
                    confirm,
                })
            }
        }
    }

    /// Fails the requests sent to members that are gone.
    fn fail_lost(&mut self, update: &ClusterUpdate) {
        let gone: Vec<Arc<str>> = update
            .members
            .iter()
            .filter(|m| matches!(m.state, MemberState::Down | MemberState::Removed))
            .map(|m| m.address.clone())
            .collect();
        self.fail_requests_to(&gone);
    }

    /// Fails the requests sent to `gone`.
    fn fail_requests_to(&mut self, gone: &[Arc<str>]) {
        if gone.is_empty() {
            return;
        }
        let lost: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| gone.contains(&p.member))
            .map(|(r, _)| *r)
            .collect();
        for request in lost {
            // An ask answered long ago keeps its entry until a prune: only
            // a sender still waiting has lost something.
            if let Some(p) = self.pending.remove(&request).filter(|p| !p.tx.is_closed()) {
                self.counts.lost += 1;
                let _ = p.tx.send(Err(EntityError::Lost));
            }
        }
    }

    /// Begins the leave once every remembered id is written (so the new
    /// homes read them all).
    fn leave_when_written(&mut self, regions: &mut Regions<Parcel>, now: Instant) {
        if !self.remembering.values().any(Remembering::busy) {
            regions.leave(now);
        }
    }

    /// Stops every entity (the driver is stopping).
    pub(crate) fn stop_all(&mut self) {
        for kind in self.kinds.values_mut() {
            kind.stop_all();
        }
    }
}

impl Host<ShardingProtocol> for ShardingHost {
    type Command = Command;

    fn command(&mut self, protocol: &mut ShardingProtocol, now: Instant, command: Command) {
        let regions = &mut protocol.0;
        match command {
            Command::Control(bytes) => {
                if let Err(error) = regions.handle_control(now, &bytes) {
                    tracing::warn!(target: "plexus::sharding", %error, "refused a sharding packet");
                }
            }
            Command::Cluster(update) => {
                self.fail_lost(&update);
                regions.set_members(now, &update.local, &update.members);
            }
            Command::Kind {
                entity_type,
                kind,
                remember,
                singleton,
            } => {
                let hosts = kind.hosts();
                let keep = self
                    .kinds
                    .get(&entity_type)
                    .is_some_and(|k| k.hosts() && !hosts);
                if !keep {
                    self.kinds.insert(entity_type.clone(), kind);
                }
                if hosts {
                    regions.register(entity_type.clone(), now);
                }
                if let Some(remember) = remember {
                    self.remembering.insert(entity_type.clone(), remember);
                    regions.remember(&entity_type, now);
                }
                if let Some(id) = singleton {
                    regions.singleton(&entity_type, id, now);
                }
            }
            Command::Wake { entity_type, ids } => {
                for id in ids {
                    regions.wake(&entity_type, id, now);
                }
            }
            Command::Remembered {
                entity_type,
                shard,
                written,
            } => {
                if !written {
                    self.counts.unremembered += 1;
                }
                if let Some(r) = self.remembering.get_mut(&entity_type) {
                    r.written(shard);
                }
                if !self.leaving.is_empty() {
                    self.leave_when_written(regions, now);
                }
            }
            Command::Send {
                entity_type,
                id,
                parcel,
            } => regions.send(&entity_type, id, parcel, now),
            Command::Arrived {
                entity_type,
                id,
                parcel,
            } => regions.arrived(&entity_type, id, parcel, now),
            Command::Marker {
                entity_type,
                from,
                shard,
                handoff,
            } => regions.marker(&entity_type, &from, shard, handoff, now),
            Command::EntityStopped {
                entity_type,
                id,
                life,
            } => {
                let ours = self
                    .kinds
                    .get_mut(&entity_type)
                    .is_some_and(|k| k.stopped(&id, life));
                if ours {
                    regions.entity_stopped(&entity_type, &id, now);
                }
            }
            Command::Leave(tx) => {
                if self.left {
                    let _ = tx.send(());
                } else {
                    self.leaving.push(tx);
                    self.leave_when_written(regions, now);
                }
            }
            Command::MemberGone(member) => {
                tracing::warn!(target: "plexus::sharding", %member, "the member this proxy sends through is gone: its senders are told, later messages refused");
                self.fail_requests_to(std::slice::from_ref(&member));
                self.gone = Some(member);
            }
            Command::Stats(tx) => {
                let _ = tx.send(ShardingStats {
                    regions: regions.stats(),
                    dropped: self.counts.dropped,
                    lost: self.counts.lost,
                    unremembered: self.counts.unremembered,
                });
            }
        }
    }

    fn transmit(&mut self, _: &mut ShardingProtocol, _now: Instant, to: Arc<str>, packet: Bytes) {
        match self
            .refs
            .get(&self.node, &to, || format!("{to}/{ACTOR_NAME}"))
        {
            Ok(r) => r.tell(ControlPacket(packet)),
            Err(error) => {
                tracing::warn!(target: "plexus::sharding", %to, %error, "cannot reach a member");
            }
        }
    }

    fn event(&mut self, protocol: &mut ShardingProtocol, _now: Instant, event: Event<Parcel>) {
        match event {
            Event::LeaseLapsed {
                entity_type,
                active,
            } => {
                tracing::warn!(target: "plexus::sharding", %entity_type, active, "the lease on this member's shards ran out before a renewal was answered: its entities are stopped, and messages to them held (then refused) until it is renewed; a member that keeps losing its lease needs a longer one (ShardingConfig::lease)");
            }
            Event::Forward {
                entity_type,
                to,
                id,
                parcel,
            } => {
                if self.gone.as_ref() == Some(&to) {
                    self.refuse(protocol, &entity_type, &id, parcel, EntityError::Lost);
                    return;
                }
                let me = protocol.0.me().clone();
                let Parcel { message, waiter } = parcel;
                let origin = self.origin(&me, &to, waiter);
                let Some(kind) = self.kinds.get_mut(&entity_type) else {
                    return;
                };
                if let Err(message) =
                    kind.forward(&self.node, &to, id.clone(), message, origin.clone())
                {
                    // Not sent: whoever waits hears it here.
                    let waiter = match origin {
                        Some(o) if o.node == me => {
                            self.pending.remove(&o.request).map_or(Waiter::Nobody, |p| {
                                Waiter::Here {
                                    tx: p.tx,
                                    confirm: false,
                                }
                            })
                        }
                        Some(o) => Waiter::There(o),
                        None => Waiter::Nobody,
                    };
                    let parcel = Parcel { message, waiter };
                    self.refuse(
                        protocol,
                        &entity_type,
                        &id,
                        parcel,
                        EntityError::Unavailable,
                    );
                }
            }
            Event::Marker {
                entity_type,
                shard,
                to,
                handoff,
            } => {
                let me = protocol.0.me().clone();
                if let Some(kind) = self.kinds.get_mut(&entity_type) {
                    kind.marker(&self.node, &to, &me, shard, handoff);
                }
            }
            Event::Activate { entity_type, id } => {
                if let Some(kind) = self.kinds.get_mut(&entity_type) {
                    kind.activate(&id);
                }
            }
            Event::Deliver {
                entity_type,
                id,
                parcel,
            } => {
                let Some(kind) = self.kinds.get_mut(&entity_type) else {
                    return;
                };
                let Parcel { message, waiter } = parcel;
                match kind.deliver(&id, message) {
                    Ok(()) => match waiter {
                        Waiter::Here { tx, .. } => {
                            let _ = tx.send(Ok(()));
                        }
                        Waiter::There(origin) if origin.confirm => {
                            protocol
                                .0
                                .delivered_to(&origin.node, &entity_type, origin.request);
                        }
                        Waiter::There(_) | Waiter::Nobody => {}
                    },
                    Err(message) => {
                        let parcel = Parcel { message, waiter };
                        self.refuse(
                            protocol,
                            &entity_type,
                            &id,
                            parcel,
                            EntityError::Unavailable,
                        );
                    }
                }
            }
            Event::Passivate { entity_type, id } => {
                if let Some(kind) = self.kinds.get_mut(&entity_type) {
                    kind.passivate(&id);
                }
            }
            Event::Refuse {
                entity_type,
                id,
                parcel,
                error,
            } => {
                self.refuse(protocol, &entity_type, &id, parcel, error);
            }
            Event::Refused { request, error } => {
                if let Some(p) = self.pending.remove(&request) {
                    let _ = p.tx.send(Err(error));
                }
            }
            Event::Delivered { request } => {
                if let Some(p) = self.pending.remove(&request) {
                    let _ = p.tx.send(Ok(()));
                }
            }
            Event::ShardStarted { entity_type, shard } => {
                if let Some(r) = self.remembering.get(&entity_type) {
                    r.read(shard);
                }
            }
            Event::Remember { entity_type, id } => {
                let shard = shard_of(&entity_type, &id, protocol.0.config().shards);
                if let Some(r) = self.remembering.get_mut(&entity_type) {
                    r.remember(shard, id);
                }
            }
            Event::Forget { entity_type, id } => {
                let shard = shard_of(&entity_type, &id, protocol.0.config().shards);
                if let Some(r) = self.remembering.get_mut(&entity_type) {
                    r.forget(shard, id);
                }
            }
            Event::Left => {
                self.left = true;
                for tx in self.leaving.drain(..) {
                    let _ = tx.send(());
                }
            }
        }
    }
}
