//! What the device sessions do under the node's driver
//! (`plexus_remote::driver`): their packets out through refs forged to
//! `<server>/plexus.devices`; server packets and the handle's commands in;
//! their events to the handle's subscribers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_core::ActorRef;
use plexus_remote::driver::Host;
use plexus_remote::{ForgedRefs, Node};
use tokio::sync::mpsc;

use super::sessions::Sessions;
use super::Reporter;
use crate::server::DevicePacket;
use crate::session::{DeviceEvent, DeviceSession};
use crate::wire::DeviceId;
use crate::SERVER_ACTOR;

/// What the sessions' driver is asked to do, besides their packets' work.
pub(super) enum Command {
    /// A server packet from the node (the node does not name its sender;
    /// the packet names the device).
    Packet(Bytes),
    /// Start a session.
    Add(Box<DeviceSession>, Box<dyn Reporter>),
    /// Tell this subscriber every event from now on.
    Subscribe(mpsc::UnboundedSender<(DeviceId, DeviceEvent)>),
}

/// The sessions' host. See the [module docs](self).
pub(super) struct SessionsHost {
    pub(super) node: Node,
    pub(super) refs: ForgedRefs<DevicePacket>,
    pub(super) subscribers: Vec<mpsc::UnboundedSender<(DeviceId, DeviceEvent)>>,
    /// Reports sent, as the handle reads them.
    pub(super) reports: Arc<AtomicU64>,
    /// Kept alive as long as the driver runs.
    pub(super) _inbox: ActorRef<DevicePacket>,
}

impl Host<Sessions> for SessionsHost {
    type Command = Command;

    fn command(&mut self, sessions: &mut Sessions, now: Instant, command: Command) {
        match command {
            Command::Packet(bytes) => sessions.handle_server_packet(now, &bytes),
            Command::Add(session, reporter) => sessions.add(now, *session, reporter),
            Command::Subscribe(s) => self.subscribers.push(s),
        }
    }

    fn transmit(&mut self, _: &mut Sessions, _now: Instant, server: Arc<str>, packet: Bytes) {
        let to = self
            .refs
            .get(&self.node, &server, || format!("{server}/{SERVER_ACTOR}"));
        match to {
            Ok(r) => r.tell(DevicePacket(packet)),
            Err(e) => {
                tracing::warn!(target: "plexus::devices", %server, error = %e, "cannot reach a server");
            }
        }
    }

    fn event(&mut self, sessions: &mut Sessions, _now: Instant, event: (DeviceId, DeviceEvent)) {
        // Counted before the event goes out: a subscriber told of a report
        // request reads a count that includes its answer.
        self.count_reports(sessions);
        let (device, event) = event;
        if !matches!(event, DeviceEvent::ReportRequested { .. }) {
            tracing::debug!(target: "plexus::devices", %device, ?event, "device event");
        }
        self.subscribers
            .retain(|s| s.send((device, event.clone())).is_ok());
    }

    fn flushed(&mut self, sessions: &mut Sessions, _now: Instant) {
        self.count_reports(sessions);
    }
}

impl SessionsHost {
    fn count_reports(&self, sessions: &Sessions) {
        self.reports
            .store(sessions.reports_sent(), Ordering::Relaxed);
    }
}
