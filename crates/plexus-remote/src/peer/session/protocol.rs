//! The session as a [`Protocol`]: frames and time in; the control frames
//! to send, the events to carry out and the next deadline out. The node's
//! shell steps it under the driver's [`Locked`](crate::driver::Locked)
//! form; a test or the fuzzer runs it bare.
//!
//! Frames come in as bytes from the link they arrived on; one that does
//! not decode, or that ends the link (`GOODBYE`, a late handshake frame),
//! becomes [`SessionEvent::Closed`] with its typed cause. A reader that
//! has decoded the frame already (to sort messages from control frames on
//! its fast path) calls [`Session::handle_frame`] itself, the same
//! handling, and gets the cause back at once to stop reading.
//!
//! The one timer is the superseded wait: a link the peer closed as the
//! duplicate of one it dialled waits a connect timeout for that one;
//! [`Protocol::handle_timeout`] gives up then, as a failed connect would,
//! and raises [`SessionEvent::GaveUp`] with what waited.

use std::time::Instant;

use bytes::Bytes;
use plexus_core::NodeId;
use plexus_net::protocol::Protocol;
use plexus_transport::Strand;

use super::{Handles, Phase, Session, SessionEvent};
use crate::close::{CloseCause, ProtocolError};
use crate::error::LinkError;
use crate::peer::links::Carrier;
use crate::peer::strands::strand_of;
use crate::wire::WireFrame;

/// Where a session's frame goes: the carrier and the strand of the link
/// that is up. Frames that arrive name the carrier they came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) carrier: Carrier,
    pub(crate) strand: Strand,
}

impl<H: Handles> Protocol for Session<H> {
    type Address = Route;
    type Event = SessionEvent<H>;

    fn handle_packet(&mut self, _now: Instant, _from: Route, packet: Bytes) {
        // A frame arrives only on a link that came up, which named the
        // peer's node; before that, nothing can be answered for it.
        let remote = self.remote.unwrap_or(NodeId::from_u64(0));
        let handled = WireFrame::decode(packet)
            .map_err(|e| CloseCause::from(ProtocolError::Malformed(e)))
            .and_then(|frame| self.handle_frame(self.here, remote, frame));
        let event = match handled {
            Ok(None) => return,
            Ok(Some(message)) => SessionEvent::Message(message),
            Err(cause) => SessionEvent::Closed(cause),
        };
        self.control.events.push_back(event);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Phase::Connecting { stuck_at: Some(at) } = self.phase {
            if at <= now {
                let abandoned = self.connect_failed(now, LinkError::DuplicateNeverUp);
                self.control
                    .events
                    .push_back(SessionEvent::GaveUp(abandoned));
            }
        }
    }

    fn poll_transmit(&mut self) -> Option<(Route, Bytes)> {
        let frame = self.poll_reply()?;
        let route = Route {
            carrier: Carrier::Lane(plexus_core::Lane::Control),
            strand: strand_of(&frame),
        };
        Some((route, frame.encode()))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Connecting { stuck_at } => stuck_at,
            _ => None,
        }
    }

    fn poll_event(&mut self) -> Option<SessionEvent<H>> {
        self.control.events.pop_front()
    }
}
