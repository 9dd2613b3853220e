//! One entity type's messages and entities on this member, behind a trait
//! object: the driver holds every type, each with its own message type.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use plexus_core::remote::RemoteMessage;
use plexus_core::{ActorRef, SystemRef};
use plexus_remote::{ForgedRefs, Node, ResolveError};
use tokio::sync::oneshot;

use super::entity::{Entity, EntityActor, Life, StopNotice, Turn};
use crate::envelope::{Envelope, Header, Origin};
use crate::region::EntityError;
use crate::shard::{EntityId, HandOffId, ShardId};

/// An entity's typed message, boxed (the kind of its type downcasts it).
pub(crate) type Message = Box<dyn Any + Send>;

/// A message for an entity on its way: the typed message, boxed, and who
/// waits to hear what became of it.
pub(crate) struct Parcel {
    pub(crate) message: Message,
    pub(crate) waiter: Waiter,
}

impl std::fmt::Debug for Parcel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parcel")
            .field("waiter", &self.waiter)
            .finish()
    }
}

/// Who waits for a parcel's fate.
#[derive(Debug, Default)]
pub(crate) enum Waiter {
    /// Nobody (a `tell`): a refusal is counted and logged.
    #[default]
    Nobody,
    /// A sender on this member.
    Here {
        tx: oneshot::Sender<Result<(), EntityError>>,
        /// It waits for the delivery too, not only a refusal.
        confirm: bool,
    },
    /// A sender on another member.
    There(Origin),
}

/// What the driver needs of one entity type.
pub(crate) trait Kind: Send {
    /// Hosts entities (registered here), or only routes (a proxy).
    fn hosts(&self) -> bool;
    /// Sends a message to the type's region on member `to`.
    fn forward(
        &mut self,
        node: &Node,
        to: &Arc<str>,
        id: EntityId,
        message: Message,
        origin: Option<Origin>,
    ) -> Result<(), Message>;
    /// Sends a hand-off marker to the type's region on member `to`.
    fn marker(
        &mut self,
        node: &Node,
        to: &Arc<str>,
        from: &Arc<str>,
        shard: ShardId,
        handoff: HandOffId,
    );
    /// Starts an entity.
    fn activate(&mut self, id: &EntityId);
    /// Hands a message to a running entity; `false` if it is not running.
    fn deliver(&mut self, id: &EntityId, message: Message) -> Result<(), Message>;
    /// Stops an entity after the messages before this.
    fn passivate(&mut self, id: &EntityId);
    /// The entity's actor stopped: whether it was the one running as `id`.
    fn stopped(&mut self, id: &EntityId, life: Life) -> bool;
    /// Stops every entity now (the driver stops).
    fn stop_all(&mut self);
}

/// The name the type's region actor is published under.
pub(crate) fn region_actor(entity_type: &str) -> String {
    format!("plexus.sharding.{entity_type}")
}

/// Starts one entity of a type whose messages are `M`, as its `life`.
type Spawner<M> = Box<dyn Fn(&EntityId, Life) -> ActorRef<Turn<M>> + Send>;

/// A running entity's actor, and which of the type's activations it is.
struct Running<M> {
    actor: ActorRef<Turn<M>>,
    life: Life,
}

/// An entity type whose messages are `M`.
pub(crate) struct TypeOf<M: RemoteMessage> {
    entity_type: Arc<str>,
    refs: ForgedRefs<Envelope<M>>,
    /// Registered here: how to start an entity.
    spawn: Option<Spawner<M>>,
    running: HashMap<EntityId, Running<M>>,
    /// The last activation's number.
    lives: u64,
}

impl<M: RemoteMessage> TypeOf<M> {
    /// A type this member only sends to.
    pub(crate) fn proxy(entity_type: Arc<str>) -> Self {
        Self {
            entity_type,
            refs: ForgedRefs::default(),
            spawn: None,
            running: HashMap::new(),
            lives: 0,
        }
    }

    /// A type this member hosts: `factory` makes an entity for an id;
    /// each stop is reported to the driver through `inputs`.
    pub(crate) fn hosting<E, F>(
        entity_type: Arc<str>,
        system: SystemRef,
        factory: F,
        inputs: super::Inputs,
    ) -> Self
    where
        E: Entity<Msg = M>,
        F: Fn(&EntityId) -> E + Send + Sync + 'static,
    {
        let name = entity_type.clone();
        let spawn: Spawner<M> = Box::new(move |id: &EntityId, life: Life| {
            system.spawn(EntityActor {
                id: id.clone(),
                entity: factory(id),
                passivated: false,
                notice: StopNotice {
                    inputs: inputs.clone(),
                    entity_type: name.clone(),
                    life,
                },
            })
        });
        Self {
            spawn: Some(spawn),
            ..Self::proxy(entity_type)
        }
    }
}

impl<M: RemoteMessage> TypeOf<M> {
    /// The type's region actor on member `to`.
    fn region(
        &mut self,
        node: &Node,
        to: &Arc<str>,
    ) -> Result<&ActorRef<Envelope<M>>, ResolveError> {
        let name = region_actor(&self.entity_type);
        self.refs.get(node, to, || format!("{to}/{name}"))
    }
}

impl<M: RemoteMessage> Kind for TypeOf<M> {
    fn hosts(&self) -> bool {
        self.spawn.is_some()
    }

    fn forward(
        &mut self,
        node: &Node,
        to: &Arc<str>,
        id: EntityId,
        message: Message,
        origin: Option<Origin>,
    ) -> Result<(), Message> {
        let region = match self.region(node, to) {
            Ok(region) => region,
            Err(error) => {
                tracing::warn!(target: "plexus::sharding", %to, %error, "cannot reach a region");
                return Err(message);
            }
        };
        let message = *message.downcast::<M>()?;
        region.tell(Envelope {
            header: Header::Entity { id, origin },
            message: Some(message),
        });
        Ok(())
    }

    fn marker(
        &mut self,
        node: &Node,
        to: &Arc<str>,
        from: &Arc<str>,
        shard: ShardId,
        handoff: HandOffId,
    ) {
        match self.region(node, to) {
            Ok(region) => region.tell(Envelope {
                header: Header::Marker {
                    from: from.clone(),
                    shard,
                    handoff,
                },
                message: None,
            }),
            Err(error) => {
                // The region is unreachable: the coordinator drops it from
                // the wait once its member is gone.
                tracing::warn!(target: "plexus::sharding", %to, %error, "cannot send a hand-off marker");
            }
        }
    }

    fn activate(&mut self, id: &EntityId) {
        if let Some(spawn) = &self.spawn {
            self.lives += 1;
            let life = Life(self.lives);
            let actor = spawn(id, life);
            self.running.insert(id.clone(), Running { actor, life });
        }
    }

    fn deliver(&mut self, id: &EntityId, message: Message) -> Result<(), Message> {
        let Some(running) = self.running.get(id) else {
            return Err(message);
        };
        running.actor.tell(Turn::Message(*message.downcast::<M>()?));
        Ok(())
    }

    fn passivate(&mut self, id: &EntityId) {
        if let Some(running) = self.running.get(id) {
            running.actor.tell(Turn::Passivate);
        }
    }

    fn stopped(&mut self, id: &EntityId, life: Life) -> bool {
        if self.running.get(id).is_some_and(|r| r.life == life) {
            self.running.remove(id);
            return true;
        }
        false
    }

    fn stop_all(&mut self) {
        for running in self.running.values() {
            running.actor.tell(Turn::Passivate);
        }
    }
}
