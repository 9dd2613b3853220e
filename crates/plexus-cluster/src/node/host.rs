//! What the cluster's member does under the node's driver
//! (`plexus_remote::driver`): its packets out through [`Routes`], the
//! handle's commands, route failures and discovery answers in, its events
//! out to subscribers with the member list as each one leaves it, and the
//! handle's snapshot kept current.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use plexus_core::{ActorRef, ExitReason};
use plexus_remote::driver::Host;
use plexus_remote::Node;
use tokio::sync::{oneshot, watch};

use super::protocol::{MembershipProtocol, Peer};
use super::routes::{Failure, Routes};
use super::{ClusterPacket, ClusterUpdate, Snapshot, ACTOR_NAME};
use crate::discovery::DiscoveryError;
use crate::event::{ClusterEvent, DownError};
use crate::member::MemberState;
use crate::view::View;

/// What the member's driver is asked to do, besides its packets' work.
pub(super) enum Command {
    /// A membership packet from the node (the node does not name its
    /// sender; the packet does).
    Packet(Bytes),
    Subscribe(ActorRef<ClusterUpdate>),
    Leave(oneshot::Sender<()>),
    Down(Arc<str>, oneshot::Sender<Result<(), DownError>>),
    /// A route's ref died.
    RouteFailed(Failure),
    /// A discovery run answered.
    Discovered(Result<Vec<String>, DiscoveryError>),
}

/// The member's host. See the [module docs](self).
pub(super) struct ClusterHost {
    pub(super) node: Node,
    pub(super) routes: Routes,
    pub(super) subscribers: Vec<ActorRef<ClusterUpdate>>,
    pub(super) snapshot: Arc<Mutex<Snapshot>>,
    /// The members as the updates sent so far left them.
    pub(super) view: View,
    /// The `Formed` event of this life, replayed to later subscribers.
    pub(super) formed: Option<ClusterEvent>,
    pub(super) leaving: Vec<oneshot::Sender<()>>,
    /// The events of the flush under way, published together once it ends.
    pub(super) events: Vec<ClusterEvent>,
    /// Whether the member is joining (discovery runs only then).
    pub(super) joining: watch::Sender<bool>,
    /// Kept alive as long as the driver runs.
    pub(super) inbox: ActorRef<ClusterPacket>,
}

impl Host<MembershipProtocol> for ClusterHost {
    type Command = Command;

    fn command(&mut self, member: &mut MembershipProtocol, now: Instant, command: Command) {
        let membership = &mut member.0;
        match command {
            Command::Packet(bytes) => {
                if let Err(e) = membership.handle_packet(now, &bytes) {
                    tracing::warn!(target: "plexus::cluster", error = %e, "refused a membership packet");
                }
            }
            Command::Subscribe(s) => {
                let local = membership.local().clone();
                self.publish_to(&s, ClusterEvent::Subscribed { local });
                if let Some(formed) = &self.formed {
                    self.publish_to(&s, formed.clone());
                }
                self.subscribers.push(s);
            }
            Command::Leave(done) => {
                self.leaving.push(done);
                membership.leave(now);
            }
            Command::Down(address, done) => {
                let _ = done.send(membership.down(now, &address));
            }
            Command::RouteFailed((address, number, down)) => {
                if self.routes.is_current(&address, number) {
                    on_route_failed(member, now, &address, down.reason);
                }
            }
            Command::Discovered(Ok(seeds)) => {
                tracing::debug!(target: "plexus::cluster", ?seeds, "discovered seeds");
                membership.set_seeds(now, seeds.into_iter().map(Arc::from).collect());
            }
            Command::Discovered(Err(e)) => {
                let retry = membership.config().join_retry;
                tracing::warn!(target: "plexus::cluster", error = %e, ?retry, "discovery failed; trying again");
            }
        }
    }

    fn transmit(&mut self, member: &mut MembershipProtocol, now: Instant, to: Peer, packet: Bytes) {
        match self.routes.get(&self.node, &to.address, to.heard_life) {
            Ok(route) => route.tell(ClusterPacket(packet)),
            Err(e) => member.0.handle_unreachable(now, &to.address, &e),
        }
    }

    fn event(&mut self, _member: &mut MembershipProtocol, _now: Instant, event: ClusterEvent) {
        self.events.push(event);
    }

    fn flushed(&mut self, member: &mut MembershipProtocol, _now: Instant) {
        let membership = &mut member.0;
        let joining = membership.local().state == MemberState::Joining;
        // Wakes the discovery task only on a change.
        self.joining
            .send_if_modified(|j| std::mem::replace(j, joining) != joining);
        // After the events: draining them counts the downings.
        self.lock_snapshot().stats = membership.stats();
        let events = std::mem::take(&mut self.events);
        let Some(last) = events.len().checked_sub(1) else {
            return;
        };
        // The state machine applied the whole batch before its events are
        // drained: the handle's snapshot is as of the last one, and each
        // event goes out with the view as it leaves it (`View`).
        {
            let ring = Arc::clone(membership.ring());
            let mut s = self.lock_snapshot();
            s.local = membership.local().clone();
            s.members = membership.members().into();
            s.ring = ring;
        }
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

    fn is_done(&self, member: &MembershipProtocol) -> bool {
        member.0.is_stopped()
    }
}

impl ClusterHost {
    /// After the member stopped (it left): tells whoever waits on the
    /// leave, and takes the actor off the node.
    pub(super) fn close(self) {
        for l in self.leaving {
            let _ = l.send(());
        }
        self.node.unpublish(ACTOR_NAME);
        self.inbox.stop();
    }

    fn lock_snapshot(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        self.snapshot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish_to(&self, subscriber: &ActorRef<ClusterUpdate>, event: ClusterEvent) {
        let s = self.lock_snapshot();
        subscriber.tell(ClusterUpdate {
            event,
            local: s.local.clone(),
            members: Arc::clone(&s.members),
            ring: Arc::clone(&s.ring),
        });
    }
}

/// The ref kept for a member died: tell the membership why, if the link
/// failed (a member whose cluster actor stopped left, or its node shut
/// down: not a failure).
fn on_route_failed(
    member: &mut MembershipProtocol,
    now: Instant,
    address: &str,
    reason: ExitReason,
) {
    match reason {
        ExitReason::NodeDown { cause, .. } => {
            member
                .0
                .handle_unreachable(now, address, &format_args!("link lost: {cause}"));
        }
        ExitReason::Failed(why) => member.0.handle_unreachable(now, address, &why),
        other => {
            tracing::debug!(target: "plexus::cluster", member = %address, reason = %other, "a member's cluster actor stopped");
        }
    }
}
