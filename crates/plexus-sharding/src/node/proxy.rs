//! Sharding for a node outside the cluster (Akka's region proxy): its
//! entity refs send every message through one member, whose region of the
//! entity's type routes it as its own. Answers and receipts come back to
//! the proxy node as to a member, so `tell`, `tell_with_receipt` and `ask`
//! keep their meaning; the guarantees are a member's, plus the hop.

use std::sync::Arc;

use plexus_core::remote::RemoteMessage;
use plexus_core::SystemRef;
use plexus_remote::{Node, ResolveError};

use plexus_remote::driver::Input;

use super::host::Command;
use super::kind::region_actor;
use super::ACTOR_NAME;
use super::{ControlPacket, EntityRef, EntityRefError, Sharding, ShardingStats, StartError};
use crate::envelope::Envelope;
use crate::regions::{Regions, ShardingConfig};

/// Why a proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The node it was pointed at runs no sharding (it is not a member, or
    /// sharding is not started there), or cannot be reached.
    #[error("sharding proxy through {member}: not a cluster member running sharding: {source}")]
    NotAMember {
        /// The node it was pointed at.
        member: String,
        /// What resolving its sharding actor said.
        source: ResolveError,
    },
    /// Its own sharding actor could not be published.
    #[error("sharding proxy: {0}")]
    Start(#[from] StartError),
}

/// Why [`ShardingProxy::entity`] refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyEntityError {
    /// A bad name or id, or another message type than the one the type is
    /// used with here.
    #[error(transparent)]
    Ref(#[from] EntityRefError),
    /// The member does not host the type (it did not register it).
    #[error("sharding proxy: {member} does not host entity type {entity_type:?}: {source}")]
    NotHosted {
        /// The member.
        member: String,
        /// The type.
        entity_type: String,
        /// What resolving the member's region said.
        source: ResolveError,
    },
}

/// Sharding on a node outside the cluster, through a member. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct ShardingProxy {
    sharding: Sharding,
    member: Arc<str>,
}

impl ShardingProxy {
    /// Starts a proxy on `node`, whose address other nodes reach it at is
    /// `me` (the URI it listens on), sending through `member` (a member's
    /// address, where sharding runs).
    ///
    /// # Errors
    ///
    /// [`ProxyError::NotAMember`] if `member` runs no sharding.
    pub async fn start(
        node: &Node,
        system: &SystemRef,
        me: &str,
        member: &str,
    ) -> Result<Self, ProxyError> {
        let at_member = node
            .resolve::<ControlPacket>(&format!("{member}/{ACTOR_NAME}"))
            .await
            .map_err(|source| ProxyError::NotAMember {
                member: member.into(),
                source,
            })?;
        let member: Arc<str> = member.into();
        let regions = Regions::proxy(me.into(), member.clone(), ShardingConfig::default());
        let sharding = Sharding::run(node, system, regions, None)?;
        // The member unreachable or its sharding stopped: senders waiting
        // hear it, and later messages are refused (never a hang).
        let (inputs, gone) = (sharding.inputs.clone(), member.clone());
        tokio::spawn(async move {
            at_member.monitor().await;
            let _ = inputs.send(Input::Command(Command::MemberGone(gone)));
        });
        Ok(Self { sharding, member })
    }

    /// A ref to entity `id` of `entity_type`, whose messages are `M`, once
    /// the member confirmed it hosts the type. As between members, `M`
    /// must be the message type the type is registered with.
    ///
    /// # Errors
    ///
    /// [`ProxyEntityError`] says why.
    pub async fn entity<M: RemoteMessage>(
        &self,
        entity_type: &str,
        id: &str,
    ) -> Result<EntityRef<M>, ProxyEntityError> {
        let entity = self.sharding.entity::<M>(entity_type, id)?;
        let region = format!("{}/{}", self.member, region_actor(entity_type));
        self.sharding
            .node
            .resolve::<Envelope<M>>(&region)
            .await
            .map_err(|source| ProxyEntityError::NotHosted {
                member: self.member.to_string(),
                entity_type: entity_type.into(),
                source,
            })?;
        Ok(entity)
    }

    /// The member it sends through.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Its counters (refusals and losses told to its senders).
    pub async fn stats(&self) -> ShardingStats {
        self.sharding.stats().await
    }
}
