//! What a user writes for an entity type: an [`Entity`], run by a small
//! actor that passivates it in order with its messages.

use std::future::Future;
use std::sync::Arc;

use plexus_core::remote::RemoteMessage;
use plexus_core::{Actor, Context, ExitReason, SystemRef};

use crate::shard::EntityId;

/// An entity: the state and behaviour behind an id, activated by its first
/// message on the member that hosts its shard, passivated when idle, when
/// the member needs room, or when its shard moves.
///
/// ```
/// use plexus_sharding::node::{Entity, EntityContext};
/// use plexus_core::ReplyTo;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// enum CartMsg { Add(u32), Count(ReplyTo<u32>) }
/// plexus_core::remote_message!(CartMsg = "shop.CartMsg");
///
/// struct Cart { items: u32 }
///
/// impl Entity for Cart {
///     type Msg = CartMsg;
///     async fn handle(&mut self, msg: CartMsg, _ctx: &mut EntityContext<'_>) {
///         match msg {
///             CartMsg::Add(n) => self.items += n,
///             CartMsg::Count(reply) => reply.send(self.items),
///         }
///     }
/// }
/// ```
pub trait Entity: Send + 'static {
    /// The messages it takes, from this member or any other.
    type Msg: RemoteMessage;

    /// Runs when the entity is activated, before its first message (a
    /// remembered entity woken after its shard moved or its member crashed
    /// has none): the place to load its state or resume its work.
    fn started(&mut self, ctx: &mut EntityContext<'_>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }

    /// Handles one message.
    fn handle(
        &mut self,
        msg: Self::Msg,
        ctx: &mut EntityContext<'_>,
    ) -> impl Future<Output = ()> + Send;

    /// Runs before the entity is passivated (idle, evicted, or its shard
    /// moves): the place to save its state. Every message sent to it
    /// before the passivation was handled; what comes after waits for its
    /// next activation (here or on its shard's new home).
    fn stopping(&mut self, ctx: &mut EntityContext<'_>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }
}

/// What an entity sees of its surroundings while it runs.
#[derive(Debug)]
pub struct EntityContext<'a> {
    id: &'a EntityId,
    system: &'a SystemRef,
}

impl EntityContext<'_> {
    /// The entity's id.
    pub fn id(&self) -> &EntityId {
        self.id
    }

    /// The actor system it runs in (to spawn helpers, look up actors).
    pub fn system(&self) -> &SystemRef {
        self.system
    }
}

/// What the entity's actor takes: a message, or the order to passivate,
/// queued behind the messages before it.
#[derive(Debug)]
pub(crate) enum Turn<M> {
    Message(M),
    Passivate,
}

/// The actor that runs an entity.
pub(crate) struct EntityActor<E> {
    pub(crate) id: EntityId,
    pub(crate) entity: E,
    pub(crate) passivated: bool,
    pub(crate) notice: StopNotice,
}

/// Which of its type's activations an entity's actor is: a stop reported
/// for an earlier one (it stopped after the entity was activated again)
/// is told apart from the running one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Life(pub(crate) u64);

/// How an entity's actor tells the driver it is gone.
pub(crate) struct StopNotice {
    pub(crate) inputs: super::Inputs,
    pub(crate) entity_type: Arc<str>,
    pub(crate) life: Life,
}

/// The actor's state is dropped once it is gone, whichever way it went
/// (passivated, failed, killed, its runtime shut down): the one place that
/// sees every end. Told from here rather than by watching the actor, an
/// entity costs no watcher list and no callback (issue 33's activation
/// figures: one of each per entity). A runtime shutting down finds the
/// driver gone: nothing to tell.
impl<E> Drop for EntityActor<E> {
    fn drop(&mut self) {
        let _ = self
            .notice
            .inputs
            .send(plexus_remote::driver::Input::Command(
                super::host::Command::EntityStopped {
                    entity_type: self.notice.entity_type.clone(),
                    id: self.id.clone(),
                    life: self.notice.life,
                },
            ));
    }
}

impl<E: Entity> Actor for EntityActor<E> {
    type Msg = Turn<E::Msg>;

    async fn started(&mut self, ctx: &mut Context<Turn<E::Msg>>) {
        let system = ctx.system().clone();
        let mut entity_ctx = EntityContext {
            id: &self.id,
            system: &system,
        };
        self.entity.started(&mut entity_ctx).await;
    }

    async fn handle(&mut self, turn: Turn<E::Msg>, ctx: &mut Context<Turn<E::Msg>>) {
        let system = ctx.system().clone();
        let mut entity_ctx = EntityContext {
            id: &self.id,
            system: &system,
        };
        match turn {
            Turn::Message(msg) => self.entity.handle(msg, &mut entity_ctx).await,
            Turn::Passivate => {
                self.passivated = true;
                self.entity.stopping(&mut entity_ctx).await;
                ctx.stop();
            }
        }
    }

    async fn stopped(&mut self, reason: &ExitReason, ctx: &mut Context<Turn<E::Msg>>) {
        // Stopped otherwise (its system shuts down): still its last word.
        if !self.passivated && !matches!(reason, ExitReason::Killed) {
            let system = ctx.system().clone();
            let mut entity_ctx = EntityContext {
                id: &self.id,
                system: &system,
            };
            self.entity.stopping(&mut entity_ctx).await;
        }
    }
}
