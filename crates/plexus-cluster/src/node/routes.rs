//! The driver's routes to members: a ref forged to each member's
//! `plexus.cluster` actor, made again when the one kept died or when the
//! membership heard from a new life at the address
//! ([`Transmit::heard_life`](crate::Transmit::heard_life)), and watched, so
//! that a failure to reach a member comes back with its cause.
//!
//! Why a new life gets a new ref: after a member's process dies, the ref
//! kept for its address waits on the node's link to it, which retries with
//! a backoff of up to seconds. The restarted process dials this node to
//! say it is there; a ref forged from then on takes that link at once,
//! while the old one would hold the packets (join answers, probes) until
//! its backoff ran out, and the new member would be suspected for the
//! silence.

use std::collections::HashMap;
use std::sync::Arc;

use plexus_core::{ActorRef, Down};
use plexus_remote::driver::{Input, Inputs};
use plexus_remote::{Node, ResolveError};
use tokio::task::AbortHandle;

use super::host::Command;
use super::protocol::Peer;
use super::{ClusterPacket, ACTOR_NAME};

/// Dead routes are dropped once more than this many are kept.
const PRUNE_ABOVE: usize = 4096;

/// A route's end: the member's address, the route's number, why its ref
/// died.
pub(super) type Failure = (Arc<str>, u64, Down);

/// The routes. See the [module docs](self).
pub(super) struct Routes {
    routes: HashMap<Arc<str>, Route>,
    next: u64,
    /// The driver's inputs, where a failure goes as
    /// [`Command::RouteFailed`].
    failures: Inputs<Peer, Command>,
}

struct Route {
    /// The life heard from when the ref was forged.
    life: Option<u64>,
    actor: ActorRef<ClusterPacket>,
    number: u64,
    watch: AbortHandle,
}

impl Drop for Route {
    fn drop(&mut self) {
        // Dropping the monitor the task holds cancels it.
        self.watch.abort();
    }
}

impl Routes {
    /// Routes whose refs, when they die, are reported to the driver on
    /// `failures`.
    pub(super) fn new(failures: Inputs<Peer, Command>) -> Self {
        Self {
            routes: HashMap::new(),
            next: 0,
            failures,
        }
    }

    /// The ref to `to`'s cluster actor for packets to its life `life` (as
    /// the membership last heard from it): the one kept, if it lives and
    /// was made for that life, else a new one (watched from now on).
    ///
    /// # Errors
    ///
    /// What [`Node::forge`] returns for the member's URI.
    pub(super) fn get(
        &mut self,
        node: &Node,
        to: &Arc<str>,
        life: Option<u64>,
    ) -> Result<&ActorRef<ClusterPacket>, ResolveError> {
        let kept = self
            .routes
            .get(to)
            .is_some_and(|r| r.life == life && r.actor.is_alive());
        if !kept {
            let actor = node.forge::<ClusterPacket>(&format!("{to}/{ACTOR_NAME}"))?;
            self.next += 1;
            let number = self.next;
            let monitor = actor.monitor();
            let failures = self.failures.clone();
            let address = Arc::clone(to);
            let watch = tokio::spawn(async move {
                let down = monitor.await;
                let failure = Command::RouteFailed((address, number, down));
                let _ = failures.send(Input::Command(failure));
            })
            .abort_handle();
            if self.routes.len() > PRUNE_ABOVE {
                self.routes.retain(|_, r| r.actor.is_alive());
            }
            self.routes.insert(
                Arc::clone(to),
                Route {
                    life,
                    actor,
                    number,
                    watch,
                },
            );
        }
        // Present: kept, or inserted just above.
        Ok(&self.routes[to].actor)
    }

    /// Whether `number` is the route kept for `address` (a report of a
    /// replaced route is stale).
    pub(super) fn is_current(&self, address: &str, number: u64) -> bool {
        self.routes.get(address).is_some_and(|r| r.number == number)
    }
}
