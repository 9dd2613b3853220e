//! The [`Membership`] as the protocol the node's driver runs
//! (`plexus_remote::driver`): its packets go to a member's address, with
//! the life last heard from there (the routes make a new ref for a new
//! life).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_net::Protocol;

use crate::event::ClusterEvent;
use crate::membership::Membership;

/// Where a membership packet goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Peer {
    /// The member's address.
    pub(super) address: Arc<str>,
    /// [`Transmit::heard_life`](crate::Transmit::heard_life).
    pub(super) heard_life: Option<u64>,
}

/// The member's state machine under the driver.
pub(super) struct MembershipProtocol(pub(super) Membership);

impl Protocol for MembershipProtocol {
    type Address = Peer;
    type Event = ClusterEvent;

    /// A packet from a transport that names its sender; the node's does
    /// not, and its packets come in as the host's command (which logs a
    /// refusal). A refused packet is counted in the membership's stats.
    fn handle_packet(&mut self, now: Instant, _from: Peer, packet: Bytes) {
        let _ = self.0.handle_packet(now, &packet);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.0.handle_timeout(now);
    }

    fn poll_transmit(&mut self) -> Option<(Peer, Bytes)> {
        let t = self.0.poll_transmit()?;
        let to = Peer {
            address: t.to,
            heard_life: t.heard_life,
        };
        Some((to, t.packet))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.0.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<ClusterEvent> {
        self.0.poll_event()
    }
}
