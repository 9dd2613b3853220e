//! What the tracker does under the node's driver
//! (`plexus_remote::driver`): its packets out through refs forged to
//! devices and servers; the ring (and which members are unreachable) in on
//! every cluster change; its events and counters to the server's handle.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use plexus_cluster::{ClusterEvent, ClusterUpdate, MemberState};
use plexus_core::ActorRef;
use plexus_remote::driver::Host;
use plexus_remote::{ForgedRefs, Node};

use super::protocol::TrackerProtocol;
use super::{DevicePacket, Shared};
use crate::directory::DeviceDirectory;
use crate::tracker::TrackerEvent;
use crate::{To, SERVER_ACTOR};

/// What the tracker's driver is asked to do, besides its packets' work.
pub(super) enum Command {
    /// A device protocol packet from the node (the node does not name its
    /// sender; the packet does).
    Packet(Bytes),
    /// The cluster changed (boxed: the channel's items stay the size of a
    /// packet's, and packets are most of them).
    Cluster(Box<ClusterUpdate>),
}

/// The tracker's host. See the [module docs](self).
pub(super) struct ServerHost {
    pub(super) node: Node,
    pub(super) refs: ForgedRefs<DevicePacket>,
    pub(super) shared: Arc<Mutex<Shared>>,
    /// Members the cluster suspects or found unreachable.
    pub(super) unreachable: HashSet<Arc<str>>,
    /// The events of the flush under way, handed on together once it ends
    /// (after the counters, so a subscriber reads counts that include
    /// what it was told).
    pub(super) events: Vec<TrackerEvent>,
    /// Kept alive as long as the driver runs.
    pub(super) _inbox: ActorRef<DevicePacket>,
}

impl<D: DeviceDirectory> Host<TrackerProtocol<D>> for ServerHost {
    type Command = Command;

    fn command(&mut self, tracker: &mut TrackerProtocol<D>, now: Instant, command: Command) {
        match command {
            Command::Packet(bytes) => {
                if let Err(e) = tracker.0.handle_packet(now, &bytes) {
                    tracing::debug!(target: "plexus::devices", error = %e, "refused a device packet");
                }
            }
            Command::Cluster(u) => self.on_update(tracker, now, &u),
        }
    }

    fn transmit(&mut self, _: &mut TrackerProtocol<D>, _now: Instant, to: To, packet: Bytes) {
        let (key, actor) = match &to {
            To::Device(reply_to) => (reply_to, None),
            To::Server(address) => (address, Some(SERVER_ACTOR)),
        };
        let uri = || match actor {
            Some(actor) => format!("{key}/{actor}"),
            None => key.to_string(),
        };
        match self.refs.get(&self.node, key, uri) {
            Ok(r) => r.tell(DevicePacket(packet)),
            Err(e) => {
                tracing::warn!(target: "plexus::devices", to = %key, error = %e, "cannot reach");
            }
        }
    }

    fn event(&mut self, _: &mut TrackerProtocol<D>, _now: Instant, event: TrackerEvent) {
        self.events.push(event);
    }

    fn flushed(&mut self, tracker: &mut TrackerProtocol<D>, _now: Instant) {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.stats = tracker.0.stats();
        for event in self.events.drain(..) {
            match &event {
                TrackerEvent::DuplicateStopped { .. } => {
                    tracing::warn!(target: "plexus::devices", ?event, "duplicate device driver");
                }
                _ => tracing::debug!(target: "plexus::devices", ?event, "device event"),
            }
            shared.subscribers.retain(|s| s.send(event.clone()).is_ok());
        }
    }
}

impl ServerHost {
    fn on_update<D: DeviceDirectory>(
        &mut self,
        tracker: &mut TrackerProtocol<D>,
        now: Instant,
        u: &ClusterUpdate,
    ) {
        match &u.event {
            ClusterEvent::MemberSuspected(m) | ClusterEvent::MemberUnreachable(m) => {
                self.unreachable.insert(Arc::clone(&m.address));
            }
            ClusterEvent::MemberReachable(m) | ClusterEvent::MemberUp(m) => {
                self.unreachable.remove(&m.address);
            }
            _ => {}
        }
        let unreachable: Vec<Arc<str>> = u
            .members
            .iter()
            .filter(|m| m.state == MemberState::Suspect || self.unreachable.contains(&m.address))
            .map(|m| Arc::clone(&m.address))
            .collect();
        tracker.0.handle_ring(now, Arc::clone(&u.ring), unreachable);
    }
}
