//! The [`Replicator`] as the protocol the node's driver runs
//! (`plexus_remote::driver`): its packets go to a member's address.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_net::Protocol;

use crate::replicator::{Event, Replicator};

/// The replicator under the driver.
pub(super) struct ReplicatorProtocol(pub(super) Replicator);

impl Protocol for ReplicatorProtocol {
    type Address = Arc<str>;
    type Event = Event;

    /// A packet from a transport that names its sender; the node's does
    /// not, and its packets come in as the host's command (which logs a
    /// refusal). A refused packet is counted in the replicator's stats.
    fn handle_packet(&mut self, now: Instant, _from: Arc<str>, packet: Bytes) {
        let _ = self.0.handle_packet(now, &packet);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.0.handle_timeout(now);
    }

    fn poll_transmit(&mut self) -> Option<(Arc<str>, Bytes)> {
        let t = self.0.poll_transmit()?;
        Some((t.to, t.packet))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.0.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.0.poll_event()
    }
}
