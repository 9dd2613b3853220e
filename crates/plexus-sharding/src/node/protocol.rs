//! The [`Regions`] as the protocol the node's driver runs
//! (`plexus_remote::driver`): its packets go to a member's address.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_net::Protocol;

use super::kind::Parcel;
use crate::regions::{Event, Regions};

/// The regions under the driver.
pub(crate) struct ShardingProtocol(pub(crate) Regions<Parcel>);

impl Protocol for ShardingProtocol {
    type Address = Arc<str>;
    type Event = Event<Parcel>;

    /// A packet from a transport that names its sender; the node's does
    /// not, and its packets come in as the host's command. A malformed
    /// packet is counted in the stats.
    fn handle_packet(&mut self, now: Instant, _from: Arc<str>, packet: Bytes) {
        let _ = self.0.handle_control(now, &packet);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.0.handle_timeout(now);
    }

    fn poll_transmit(&mut self) -> Option<(Arc<str>, Bytes)> {
        self.0.poll_transmit()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.0.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<Event<Parcel>> {
        self.0.poll_event()
    }
}
