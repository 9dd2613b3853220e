//! Refs forged to peers' actors, kept while they live.
//!
//! A driver that sends a protocol's packets to the same actor on other
//! nodes (a cluster member to `<member>/plexus.cluster`, a replicator, a
//! device server) forges each ref once. A ref that stopped (its node went
//! away) is forged again on next use: a new process may answer at the same
//! address.

use std::collections::HashMap;
use std::sync::Arc;

use plexus_core::remote::RemoteMessage;
use plexus_core::ActorRef;

use crate::{Node, ResolveError};

/// Stopped refs are dropped once more than this many are kept.
const PRUNE_ABOVE: usize = 4096;

/// Refs forged on a node, by a key of the caller's (a peer's address).
/// See the [module docs](self).
#[derive(Debug)]
pub struct ForgedRefs<M> {
    refs: HashMap<Arc<str>, ActorRef<M>>,
}

impl<M> Default for ForgedRefs<M> {
    fn default() -> Self {
        Self {
            refs: HashMap::new(),
        }
    }
}

impl<M: RemoteMessage> ForgedRefs<M> {
    /// The live ref kept for `key`, or one forged on `node` to `uri()`.
    ///
    /// # Errors
    ///
    /// What [`Node::forge`] returns for the URI.
    pub fn get(
        &mut self,
        node: &Node,
        key: &Arc<str>,
        uri: impl FnOnce() -> String,
    ) -> Result<&ActorRef<M>, ResolveError> {
        if !self.refs.get(key).is_some_and(ActorRef::is_alive) {
            let forged = node.forge::<M>(&uri())?;
            if self.refs.len() > PRUNE_ABOVE {
                self.refs.retain(|_, r| r.is_alive());
            }
            self.refs.insert(Arc::clone(key), forged);
        }
        Ok(&self.refs[key])
    }
}
