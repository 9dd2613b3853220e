//! Sharding on a Plexus node: a member's [`Regions`] beside its cluster
//! member, run by the node's protocol driver (`plexus_remote::driver`).
//!
//! ```text
//!   Sharding (handle): register an entity type, entity refs, stats, leave
//!   EntityRef<M>: tell / tell_with_receipt / ask, from any member
//!   ──────────────────────────────────────────────────────────────────────
//!   driver task (plexus_remote::driver, host in `host.rs`): the member's
//!   Regions; its control packets out through refs forged to
//!   `<member>/plexus.sharding`; entity messages and hand-off markers out
//!   through refs forged to `<member>/plexus.sharding.<type>` (kind.rs);
//!   entities started, fed and passivated as actors (entity.rs)
//!   ──────────────────────────────────────────────────────────────────────
//!   Node: the actors `plexus.sharding` and `plexus.sharding.<type>`
//!   receive over the node's links; Cluster: its updates give the view
//! ```
//!
//! Guarantees (the design and its proof are in `ALGORITHM.md`):
//! - an entity is active on at most one member at a time, through joins,
//!   leaves, crashes and partitions (a member hosts a shard only under a
//!   lease from the coordinator, which moves a crashed member's shards
//!   only after that lease ran out);
//! - a planned move (a join's rebalance, [`Sharding::leave`]) loses no
//!   message and hands none twice, and each sender's messages reach an
//!   entity in the order they were sent;
//! - after a crash, messages in flight to the crashed member are lost (at
//!   most once); a sender that used [`EntityRef::ask`] or
//!   [`EntityRef::tell_with_receipt`] hears of it ([`EntityError::Lost`]);
//! - a message that cannot be handled is refused with a typed
//!   [`EntityError`] to its sender (counted for a plain `tell`).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use plexus_cluster::{Cluster, ClusterUpdate};
use plexus_core::remote::RemoteMessage;
use plexus_core::{ActorRef, ReplyError, ReplyTo, SystemRef};
use plexus_data::node::Replication;
use plexus_remote::driver::{self, Input};
use plexus_remote::Node;
use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::envelope::{Envelope, Header};
use crate::region::EntityError;
use crate::regions::{Regions, RegionsStats, ShardingConfig};
use crate::shard::{EntityId, EntityIdError};

mod entity;
mod host;
mod kind;
mod protocol;
mod proxy;
pub mod remember;
mod types;

pub use entity::{Entity, EntityContext};
pub use proxy::{ProxyEntityError, ProxyError, ShardingProxy};
pub use remember::{remember_key, REMEMBER_KEY_PREFIX};

use host::{Command, ShardingHost};
use kind::{region_actor, Kind, Parcel, TypeOf, Waiter};
use protocol::ShardingProtocol;
use remember::Remembering;
use types::TypeTable;

/// The name the sharding's control actor is published under on every
/// member.
pub const ACTOR_NAME: &str = "plexus.sharding";

/// The longest entity type name.
pub const MAX_TYPE_LEN: usize = 64;

plexus_core::bytes_message! {
    /// A sharding control packet as a remote message (its bytes travel as
    /// they are, on the control lane).
    pub struct ControlPacket = "plexus.sharding.Packet", lane = Control;
}

type Inputs = driver::Inputs<Arc<str>, Command>;

/// Why sharding could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A setting cannot work; nothing started.
    #[error("start sharding: {0}")]
    Config(#[from] crate::regions::ConfigError),
    /// Its control actor could not be published.
    #[error("start sharding: publishing `{ACTOR_NAME}`: {0}")]
    Publish(#[from] plexus_remote::PublishError),
}

/// Why an entity type name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntityTypeError {
    /// Empty, longer than [`MAX_TYPE_LEN`], or with a character other than
    /// an ASCII letter, digit, `.`, `_` or `-`.
    #[error(
        "entity type {0:?}: a name is 1 to {MAX_TYPE_LEN} ASCII letters, digits, '.', '_' or '-'"
    )]
    BadName(String),
    /// The type is used here with another message type.
    #[error("entity type {entity_type:?} takes {registered}, not {asked}")]
    MessageType {
        /// The type.
        entity_type: String,
        /// The message type it was registered or first used with.
        registered: &'static str,
        /// The one asked for now.
        asked: &'static str,
    },
}

/// Why [`Sharding::register`] refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The type's name or message type.
    #[error("register entity type: {0}")]
    Type(#[from] EntityTypeError),
    /// The type is registered here already.
    #[error("register entity type {0:?}: it is registered on this member already")]
    AlreadyRegistered(String),
    /// Its region actor could not be published.
    #[error("register entity type: {0}")]
    Publish(#[from] plexus_remote::PublishError),
}

/// Why [`Sharding::entity`] refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EntityRefError {
    /// The type's name or message type.
    #[error("entity ref: {0}")]
    Type(#[from] EntityTypeError),
    /// The id.
    #[error("entity ref: {0}")]
    Id(#[from] EntityIdError),
}

/// Why a message sent with [`EntityRef::tell_with_receipt`] did not reach
/// its entity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntitySendError {
    /// Refused or lost on its way; see the [`EntityError`].
    #[error("send to {entity_type} {id}: {error}")]
    Refused {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
        /// Why.
        error: EntityError,
    },
    /// Sharding stopped on this member.
    #[error("send to {entity_type} {id}: sharding stopped on this member")]
    Stopped {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
    },
}

/// Why an [`EntityRef::ask`] has no answer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EntityAskError {
    /// Refused or lost on its way; see the [`EntityError`].
    #[error("ask {entity_type} {id}: {error}")]
    Refused {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
        /// Why.
        error: EntityError,
    },
    /// No answer within the time given.
    #[error("ask {entity_type} {id}: no answer within {timeout:?}")]
    Timeout {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
        /// The time given.
        timeout: Duration,
    },
    /// The entity dropped the request unanswered.
    #[error("ask {entity_type} {id}: {error}")]
    NoReply {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
        /// What became of the reply handle.
        error: ReplyError,
    },
    /// Sharding stopped on this member.
    #[error("ask {entity_type} {id}: sharding stopped on this member")]
    Stopped {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
    },
}

/// Why [`Sharding::leave`] returned before every shard was handed over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaveError {
    /// Shards were still being handed over when the time ran out (the
    /// coordinator is unreachable, or a hand-off waits for a member).
    #[error("leave sharding: shards still handed over after {0:?}")]
    Timeout(Duration),
    /// Sharding stopped on this member.
    #[error("leave sharding: sharding stopped on this member")]
    Stopped,
}

/// An entity type's settings on a member ([`Sharding::register_with`]).
#[derive(Clone, Default)]
pub struct EntitySettings {
    remember: Option<Replication>,
    /// A singleton's type ([`Sharding::singleton`]).
    singleton: bool,
}

impl std::fmt::Debug for EntitySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntitySettings")
            .field("remember", &self.remember.is_some())
            .finish()
    }
}

impl EntitySettings {
    /// Remember the active entities in `data`'s replicated keys
    /// ([`REMEMBER_KEY_PREFIX`]`<type>/<shard>`): after a shard moves (a
    /// rebalance, a leave) or its member crashes, its entities are started
    /// again on its new home without waiting for a message. An entity is
    /// remembered from its first message until it is passivated idle or
    /// for room. See [`remember`](self::remember) for what holds when.
    #[must_use]
    pub fn remember(mut self, data: &Replication) -> Self {
        self.remember = Some(data.clone());
        self
    }
}

/// What [`Sharding::stats`] counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardingStats {
    /// The regions' and coordinators' counters.
    pub regions: RegionsStats,
    /// Messages refused with nobody waiting to hear it (a `tell`).
    pub dropped: u64,
    /// Requests lost with the member they went to.
    pub lost: u64,
    /// Writes of remembered entities that did not reach a majority (kept
    /// here and spread by gossip all the same).
    pub unremembered: u64,
}

/// Sharding on a member: entity types registered here, and refs to
/// entities of any type. Clones share it; it stops when the last clone is
/// dropped. See the [module docs](self).
#[derive(Clone)]
pub struct Sharding {
    inputs: Inputs,
    node: Node,
    system: SystemRef,
    /// Each type used here, with its message type (checked at once).
    table: Arc<TypeTable>,
    _task: Arc<TaskGuard>,
}

impl std::fmt::Debug for Sharding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharding")
            .field("node", &self.node.id())
            .finish_non_exhaustive()
    }
}

/// Aborts the driver task when the last handle goes.
#[derive(Debug)]
struct TaskGuard(tokio::task::AbortHandle);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Sharding {
    /// Starts sharding for `cluster`'s member on `node`, publishing the
    /// actor [`ACTOR_NAME`] in `system`.
    ///
    /// # Errors
    ///
    /// [`StartError`] says why.
    pub fn start(
        node: &Node,
        system: &SystemRef,
        cluster: &Cluster,
        config: ShardingConfig,
    ) -> Result<Self, StartError> {
        config.validate()?;
        let local = cluster.local();
        let regions = Regions::new(Arc::clone(&local.address), config);
        Self::run(node, system, regions, Some(cluster))
    }

    /// Runs `regions` under the node's driver: its control actor published,
    /// and `cluster`'s updates fed to it (a member), or none (a proxy).
    fn run(
        node: &Node,
        system: &SystemRef,
        regions: Regions<Parcel>,
        cluster: Option<&Cluster>,
    ) -> Result<Self, StartError> {
        let (inputs, received) = tokio::sync::mpsc::unbounded_channel();
        let packets = inputs.clone();
        let inbox = system.spawn_fn(move |ControlPacket(bytes), _ctx| {
            let _ = packets.send(Input::Command(Command::Control(bytes)));
        });
        node.publish(&inbox, ACTOR_NAME)?;
        let watcher = cluster.map(|cluster| {
            let updates = inputs.clone();
            let watcher = system.spawn_fn(move |update: ClusterUpdate, _ctx| {
                let _ = updates.send(Input::Command(Command::Cluster(update)));
            });
            cluster.subscribe(watcher.clone());
            watcher
        });
        let host = ShardingHost::new(node.clone());
        let table = Arc::new(TypeTable::new(inputs.clone()));
        // Entity refs inside messages decoded here find this sharding.
        node.set_extension(Arc::clone(&table));
        let span = tracing::info_span!(target: "plexus::sharding", "sharding", node = %node.id());
        let closing = node.clone();
        let task = tokio::spawn(
            async move {
                let (_, mut host) = driver::run(ShardingProtocol(regions), host, received).await;
                host.stop_all();
                closing.unpublish(ACTOR_NAME);
                closing.remove_extension::<TypeTable>();
                inbox.stop();
                if let Some(watcher) = watcher {
                    watcher.stop();
                }
            }
            .instrument(span),
        )
        .abort_handle();
        Ok(Self {
            inputs,
            node: node.clone(),
            system: system.clone(),
            table,
            _task: Arc::new(TaskGuard(task)),
        })
    }

    /// Hosts entities of `entity_type` on this member: `factory` makes the
    /// entity for an id at its activation. Register a type on every member
    /// that should host it, with the same message type; any member (or a
    /// node outside the cluster, through a member) can send to it.
    ///
    /// # Errors
    ///
    /// [`RegisterError`] says why.
    pub fn register<E, F>(&self, entity_type: &str, factory: F) -> Result<(), RegisterError>
    where
        E: Entity,
        F: Fn(&EntityId) -> E + Send + Sync + 'static,
    {
        self.register_with(entity_type, EntitySettings::default(), factory)
    }

    /// [`register`](Sharding::register) with settings for the type (give
    /// every member that registers it the same).
    ///
    /// # Errors
    ///
    /// [`RegisterError`] says why.
    pub fn register_with<E, F>(
        &self,
        entity_type: &str,
        settings: EntitySettings,
        factory: F,
    ) -> Result<(), RegisterError>
    where
        E: Entity,
        F: Fn(&EntityId) -> E + Send + Sync + 'static,
    {
        let (name, already) = self.use_type::<E::Msg>(entity_type, true)?;
        if already {
            return Err(RegisterError::AlreadyRegistered(entity_type.into()));
        }
        let inputs = self.inputs.clone();
        let (arrivals, entity_type) = (self.inputs.clone(), name.clone());
        let inbox: ActorRef<Envelope<E::Msg>> =
            self.system
                .spawn_fn(move |envelope: Envelope<E::Msg>, _ctx| {
                    let command = match (envelope.header, envelope.message) {
                        (Header::Entity { id, origin }, Some(message)) => Command::Arrived {
                            entity_type: entity_type.clone(),
                            id,
                            parcel: Parcel {
                                message: Box::new(message),
                                waiter: origin.map_or(Waiter::Nobody, Waiter::There),
                            },
                        },
                        (
                            Header::Marker {
                                from,
                                shard,
                                handoff,
                            },
                            _,
                        ) => Command::Marker {
                            entity_type: entity_type.clone(),
                            from,
                            shard,
                            handoff,
                        },
                        (Header::Entity { .. }, None) => return,
                    };
                    let _ = arrivals.send(Input::Command(command));
                });
        if let Err(e) = self.node.publish(&inbox, &region_actor(&name)) {
            inbox.stop();
            self.forget(&name);
            return Err(e.into());
        }
        let kind: Box<dyn Kind> = Box::new(TypeOf::hosting(
            name.clone(),
            self.system.clone(),
            factory,
            inputs,
        ));
        let remember = settings
            .remember
            .map(|data| Remembering::new(data, name.clone(), self.inputs.clone()));
        let singleton = settings.singleton.then(singleton_id);
        self.command(Command::Kind {
            entity_type: name,
            kind,
            remember,
            singleton,
        });
        Ok(())
    }

    /// Runs the cluster singleton `name`: one instance cluster-wide, on the
    /// oldest member that is up among those that called this (all of
    /// them, or those of a role), started at once, with no message.
    /// When that member leaves, the singleton is handed over to the next
    /// oldest (its `stopping` hook runs first, and messages wait for it,
    /// bounded); when it is downed, the singleton starts again on the next
    /// oldest once the downed member's lease ran out. Reach it with
    /// [`singleton_ref`](Sharding::singleton_ref) from any member.
    ///
    /// A singleton is an entity type of one entity whose shards live on
    /// the oldest member: its name is an entity type's, and its guarantees
    /// are an entity's (at most one instance, also through partitions).
    ///
    /// # Errors
    ///
    /// [`RegisterError`] says why.
    pub fn singleton<E, F>(&self, name: &str, factory: F) -> Result<(), RegisterError>
    where
        E: Entity,
        F: Fn() -> E + Send + Sync + 'static,
    {
        let settings = EntitySettings {
            singleton: true,
            ..EntitySettings::default()
        };
        self.register_with(name, settings, move |_id| factory())
    }

    /// A ref to the cluster singleton `name` (see
    /// [`singleton`](Sharding::singleton)), whose messages are `M`: from
    /// any member, whether or not it runs the singleton.
    ///
    /// # Errors
    ///
    /// [`EntityRefError`] for a bad name, or a message type other than the
    /// one the singleton is used with here.
    pub fn singleton_ref<M: RemoteMessage>(
        &self,
        name: &str,
    ) -> Result<SingletonRef<M>, EntityRefError> {
        Ok(SingletonRef(self.entity(name, SINGLETON_ID)?))
    }

    /// A ref to the entity `id` of `entity_type`, whose messages are `M`.
    ///
    /// # Errors
    ///
    /// [`EntityRefError`] for a bad name or id, or a message type other
    /// than the one the type is used with here.
    pub fn entity<M: RemoteMessage>(
        &self,
        entity_type: &str,
        id: &str,
    ) -> Result<EntityRef<M>, EntityRefError> {
        let id = EntityId::new(id)?;
        let (entity_type, _) = self.use_type::<M>(entity_type, false)?;
        Ok(EntityRef {
            entity_type,
            id,
            inputs: self.inputs.clone(),
            _message: PhantomData,
        })
    }

    /// The counters now.
    pub async fn stats(&self) -> ShardingStats {
        let (tx, rx) = oneshot::channel();
        self.command(Command::Stats(tx));
        rx.await.unwrap_or_default()
    }

    /// Hands every shard hosted here over to other members (call it before
    /// [`Cluster::leave`]): returns once none is left here, every message
    /// that arrived before each hand-off handled here and every later one
    /// on its new home.
    ///
    /// # Errors
    ///
    /// [`LeaveError`] if shards are still moving after `timeout`.
    pub async fn leave(&self, timeout: Duration) -> Result<(), LeaveError> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::Leave(tx));
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(LeaveError::Stopped),
            Err(_) => Err(LeaveError::Timeout(timeout)),
        }
    }

    fn command(&self, command: Command) {
        let _ = self.inputs.send(Input::Command(command));
    }

    fn use_type<M: RemoteMessage>(
        &self,
        entity_type: &str,
        register: bool,
    ) -> Result<(Arc<str>, bool), EntityTypeError> {
        self.table.use_type::<M>(entity_type, register)
    }

    fn forget(&self, entity_type: &str) {
        self.table.forget(entity_type);
    }
}

/// The id of a singleton's entity.
const SINGLETON_ID: &str = "singleton";

fn singleton_id() -> EntityId {
    EntityId::new(SINGLETON_ID).expect("a valid id")
}

/// A ref to a cluster singleton ([`Sharding::singleton`]), wherever it
/// runs: while it moves, messages wait for it (bounded by
/// `ShardingConfig::held_limit`; past it they are refused with
/// [`EntityError::Route`]). Cheap to clone.
pub struct SingletonRef<M>(EntityRef<M>);

impl<M> Clone for SingletonRef<M> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<M> std::fmt::Debug for SingletonRef<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SingletonRef")
            .field(&self.0.entity_type)
            .finish()
    }
}

impl<M: RemoteMessage> SingletonRef<M> {
    /// The singleton's name.
    pub fn name(&self) -> &str {
        self.0.entity_type()
    }

    /// Sends `msg`, as [`EntityRef::tell`].
    pub fn tell(&self, msg: M) {
        self.0.tell(msg);
    }

    /// Sends `msg` and waits until it is in the singleton's mailbox, as
    /// [`EntityRef::tell_with_receipt`].
    ///
    /// # Errors
    ///
    /// [`EntitySendError`] says why it was not.
    pub async fn tell_with_receipt(&self, msg: M) -> Result<(), EntitySendError> {
        self.0.tell_with_receipt(msg).await
    }

    /// Sends the request `make` builds around a reply handle and waits for
    /// the answer, as [`EntityRef::ask`].
    ///
    /// # Errors
    ///
    /// [`EntityAskError`] says why there is no answer.
    pub async fn ask<R, F>(&self, make: F, timeout: Duration) -> Result<R, EntityAskError>
    where
        F: FnOnce(ReplyTo<R>) -> M,
    {
        self.0.ask(make, timeout).await
    }
}

/// A ref to an entity, wherever it lives: the first message activates it
/// on the member hosting its shard. Cheap to clone.
pub struct EntityRef<M> {
    entity_type: Arc<str>,
    id: EntityId,
    inputs: Inputs,
    _message: PhantomData<fn(M)>,
}

impl<M> Clone for EntityRef<M> {
    fn clone(&self) -> Self {
        Self {
            entity_type: self.entity_type.clone(),
            id: self.id.clone(),
            inputs: self.inputs.clone(),
            _message: PhantomData,
        }
    }
}

impl<M> std::fmt::Debug for EntityRef<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EntityRef({} {})", self.entity_type, self.id)
    }
}

impl<M: RemoteMessage> EntityRef<M> {
    /// The entity type.
    pub fn entity_type(&self) -> &str {
        &self.entity_type
    }

    /// The entity's id.
    pub fn id(&self) -> &EntityId {
        &self.id
    }

    /// Sends a message without waiting. One that cannot be handled is
    /// counted ([`ShardingStats::dropped`]) and logged.
    pub fn tell(&self, msg: M) {
        let _ = self.send(msg, Waiter::Nobody);
    }

    /// Sends a message and waits until it is in the entity's mailbox.
    ///
    /// # Errors
    ///
    /// [`EntitySendError`] if it was refused or lost on its way.
    pub async fn tell_with_receipt(&self, msg: M) -> Result<(), EntitySendError> {
        let (tx, rx) = oneshot::channel();
        if !self.send(msg, Waiter::Here { tx, confirm: true }) {
            return Err(self.stopped_send());
        }
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(EntitySendError::Refused {
                entity_type: self.entity_type.clone(),
                id: self.id.clone(),
                error,
            }),
            Err(_) => Err(self.stopped_send()),
        }
    }

    /// Sends a request built by `make` around a fresh reply handle and
    /// waits for the answer.
    ///
    /// # Errors
    ///
    /// [`EntityAskError`] says why there is none.
    pub async fn ask<R, F>(&self, make: F, timeout: Duration) -> Result<R, EntityAskError>
    where
        F: FnOnce(ReplyTo<R>) -> M,
    {
        let (reply, answer) = ReplyTo::channel();
        let (tx, mut refusal) = oneshot::channel();
        if !self.send(make(reply), Waiter::Here { tx, confirm: false }) {
            return Err(EntityAskError::Stopped {
                entity_type: self.entity_type.clone(),
                id: self.id.clone(),
            });
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(answer, deadline);
        let mut refusal_open = true;
        loop {
            tokio::select! {
                biased;
                result = &mut answer => {
                    return match result {
                        Ok(value) => Ok(value),
                        // Dropped with a refusal: the refusal says why.
                        Err(error) => match refusal.try_recv() {
                            Ok(Err(refused)) => Err(self.refused(refused)),
                            _ => Err(EntityAskError::NoReply {
                                entity_type: self.entity_type.clone(),
                                id: self.id.clone(),
                                error,
                            }),
                        },
                    };
                }
                outcome = &mut refusal, if refusal_open => {
                    refusal_open = false;
                    if let Ok(Err(error)) = outcome {
                        return Err(self.refused(error));
                    }
                }
                () = &mut deadline => {
                    return Err(EntityAskError::Timeout {
                        entity_type: self.entity_type.clone(),
                        id: self.id.clone(),
                        timeout,
                    });
                }
            }
        }
    }

    fn send(&self, msg: M, waiter: Waiter) -> bool {
        self.inputs
            .send(Input::Command(Command::Send {
                entity_type: self.entity_type.clone(),
                id: self.id.clone(),
                parcel: Parcel {
                    message: Box::new(msg),
                    waiter,
                },
            }))
            .is_ok()
    }

    fn refused(&self, error: EntityError) -> EntityAskError {
        EntityAskError::Refused {
            entity_type: self.entity_type.clone(),
            id: self.id.clone(),
            error,
        }
    }

    fn stopped_send(&self) -> EntitySendError {
        EntitySendError::Stopped {
            entity_type: self.entity_type.clone(),
            id: self.id.clone(),
        }
    }
}
