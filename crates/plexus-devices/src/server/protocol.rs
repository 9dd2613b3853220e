//! The [`Tracker`] as the protocol the node's driver runs
//! (`plexus_remote::driver`): its packets go to a device's `reply_to` or
//! another server's `plexus.devices`.

use std::time::Instant;

use bytes::Bytes;
use plexus_net::Protocol;

use crate::directory::DeviceDirectory;
use crate::tracker::{Tracker, TrackerEvent};
use crate::To;

/// The tracker under the driver.
pub(super) struct TrackerProtocol<D: DeviceDirectory>(pub(super) Tracker<D>);

impl<D: DeviceDirectory> Protocol for TrackerProtocol<D> {
    type Address = To;
    type Event = TrackerEvent;

    /// A packet from a transport that names its sender; the node's does
    /// not, and its packets come in as the host's command (which logs a
    /// refusal). A refused packet is counted in the tracker's stats.
    fn handle_packet(&mut self, now: Instant, _from: To, packet: Bytes) {
        let _ = self.0.handle_packet(now, &packet);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.0.handle_timeout(now);
    }

    fn poll_transmit(&mut self) -> Option<(To, Bytes)> {
        let t = self.0.poll_transmit()?;
        Some((t.to, t.packet))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.0.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<TrackerEvent> {
        self.0.poll_event()
    }
}
