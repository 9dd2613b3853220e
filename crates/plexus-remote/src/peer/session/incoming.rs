//! The session's incoming half on one link, sans I/O: what each frame the
//! link read is (a message to deliver, a run of them, a frame for the
//! lane's order, a control frame for the session), and when the actor
//! last delivered to must be looked at for the flood fence.
//!
//! One [`Incoming`] per link, owned by the task reading it (the link's
//! reader, or the transport's driver for the frames it takes): messages,
//! nearly all traffic, are sorted without the session's lock. What a
//! message needs from the node (the target's mailbox, the receipt's
//! outcome) is the shell's: it carries out each [`Arrival`] and reports
//! how many messages it delivered ([`Incoming::delivered`]).
//!
//! What it guarantees, whatever the peer sends:
//! - a run holds only consecutive `MESSAGE` frames to one actor under one
//!   type, none asking for a receipt, at most [`RUN_MAX`], in the order
//!   read; the frames after it stay queued, in order;
//! - a malformed message header or a `TRACE` carrying anything but a
//!   message ends the link with a typed [`ProtocolError`]; nothing panics;
//! - every [`FLOOD_CHECK_EVERY`] messages delivered, and never more
//!   rarely, the shell is told to look at the last target's mailbox.

use std::collections::VecDeque;

use bytes::{Buf, Bytes};
use plexus_core::trace::TraceContext;
use plexus_transport::Received;

use crate::close::ProtocolError;
use crate::wire::{MessageHeader, WireFrame};

/// Above this many queued messages in the actor a link last delivered to,
/// the link stops reading until the actor is down to [`FLOOD_LOW`]: the
/// transport's bounded buffers then push back on the sending node, whose
/// own bounded buffers turn the excess into dead letters there. Memory per
/// flooded actor stays bounded even with an unbounded mailbox.
pub(crate) const FLOOD_HIGH: usize = 100_000;
/// See [`FLOOD_HIGH`].
pub(crate) const FLOOD_LOW: usize = 50_000;
/// A link looks at the mailbox length once per this many messages: a flood
/// overshoots [`FLOOD_HIGH`] by at most this many.
pub(crate) const FLOOD_CHECK_EVERY: usize = 256;
/// Messages to one actor delivered together at most: a flooded actor is
/// noticed after at most this many more (see [`FLOOD_CHECK_EVERY`]).
pub(crate) const RUN_MAX: usize = FLOOD_CHECK_EVERY;

/// What a frame read from the link is, for the shell to carry out.
#[derive(Debug)]
pub(crate) enum Arrival<'a> {
    /// A `MESSAGE` (read in place, no [`WireFrame`] built), or the one a
    /// `TRACE` frame carries with its `trace`.
    Message {
        /// Target, type and receipt (`len` is the header's length).
        header: MessageHeader,
        /// The encoded message.
        payload: Bytes,
        /// The sender's span, for a traced message.
        trace: Option<TraceContext>,
    },
    /// Consecutive `MESSAGE` frames to one actor under one type, none
    /// asking for a receipt: delivered together (one mailbox lock, one
    /// wake-up). The shell drains `payloads`.
    Run {
        /// The receiving actor's serial.
        to: u64,
        /// The message type id.
        type_id: u64,
        /// The encoded messages, in the order read.
        payloads: &'a mut Vec<Bytes>,
    },
    /// A `NAMED` message (or the one a `TRACE` carries).
    Named {
        /// The published name.
        name: String,
        /// The message type id.
        type_id: u64,
        /// Non-zero: answer with a `RECEIPT` of this id.
        receipt: u64,
        /// The encoded message.
        payload: Bytes,
        /// The sender's span, for a traced message.
        trace: Option<TraceContext>,
    },
    /// A frame numbered on a lane with several candidate stacks: the
    /// lane's frames are shared by the session's links, put in order and
    /// each fed back here.
    Sequenced {
        /// The lane (`plexus_core::Lane::index`).
        lane: u8,
        /// The frame's number on its lane.
        seq: u64,
        /// The frame.
        frame: Bytes,
    },
    /// Any other frame: for [`Session::handle_frame`](super::Session::handle_frame).
    Control(WireFrame),
}

/// The session's incoming half on one link. See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Incoming {
    /// Messages delivered since the shell last looked at a mailbox.
    unchecked: usize,
    /// The payloads of the run being delivered, kept for its allocation.
    run: Vec<Bytes>,
}

impl Incoming {
    /// Sorts `bytes`, the frame read first, taking with it the `MESSAGE`
    /// frames after it in `queue` that continue its run.
    ///
    /// # Errors
    ///
    /// [`ProtocolError`] for a malformed frame: the link ends.
    pub(crate) fn arrive(
        &mut self,
        bytes: Bytes,
        queue: &mut VecDeque<Received>,
    ) -> Result<Arrival<'_>, ProtocolError> {
        let Some(header) = MessageHeader::parse(&bytes) else {
            return Self::sort(WireFrame::decode(bytes)?);
        };
        let header = header?;
        let mut payload = bytes;
        payload.advance(header.len);
        let next = match continues(&header, queue) {
            Some(next) if header.receipt == 0 => next,
            // A lone message (a round trip) or one asking for a receipt.
            _ => {
                return Ok(Arrival::Message {
                    header,
                    payload,
                    trace: None,
                })
            }
        };
        self.run.clear();
        self.run.push(payload);
        let mut len = next;
        while let Some(Received::Message(mut payload)) = queue.pop_front() {
            payload.advance(len);
            self.run.push(payload);
            match continues(&header, queue) {
                Some(next) if self.run.len() < RUN_MAX => len = next,
                _ => break,
            }
        }
        Ok(Arrival::Run {
            to: header.to,
            type_id: header.type_id,
            payloads: &mut self.run,
        })
    }

    /// The arrival of a frame decoded whole (not a `MESSAGE`).
    fn sort(frame: WireFrame) -> Result<Arrival<'static>, ProtocolError> {
        Ok(match frame {
            WireFrame::Message {
                to,
                type_id,
                receipt,
                payload,
            } => Arrival::Message {
                header: MessageHeader {
                    to,
                    type_id,
                    receipt,
                    len: 0,
                },
                payload,
                trace: None,
            },
            WireFrame::Named {
                name,
                type_id,
                receipt,
                payload,
            } => Arrival::Named {
                name,
                type_id,
                receipt,
                payload,
                trace: None,
            },
            WireFrame::Traced { context, frame } => Self::traced(context, frame)?,
            WireFrame::Sequenced { lane, seq, frame } => Arrival::Sequenced { lane, seq, frame },
            control => Arrival::Control(control),
        })
    }

    /// The message a `TRACE` frame carries, with its context.
    fn traced(trace: TraceContext, frame: Bytes) -> Result<Arrival<'static>, ProtocolError> {
        if let Some(header) = MessageHeader::parse(&frame) {
            let header = header?;
            let mut payload = frame;
            payload.advance(header.len);
            return Ok(Arrival::Message {
                header,
                payload,
                trace: Some(trace),
            });
        }
        match WireFrame::decode(frame)? {
            WireFrame::Named {
                name,
                type_id,
                receipt,
                payload,
            } => Ok(Arrival::Named {
                name,
                type_id,
                receipt,
                payload,
                trace: Some(trace),
            }),
            // `WireFrame::decode` lets only messages through a `TRACE`.
            other => Err(ProtocolError::TracedNonMessage { kind: other.name() }),
        }
    }

    /// The shell delivered `n` more messages: `true` when it must look at
    /// the mailbox of the actor it last delivered to (more than
    /// [`FLOOD_HIGH`] queued: stop reading until it is down to
    /// [`FLOOD_LOW`]). Once per [`FLOOD_CHECK_EVERY`] messages, not each:
    /// reading a mailbox's length is a few dyn calls and atomics.
    pub(crate) fn delivered(&mut self, n: usize) -> bool {
        self.unchecked += n;
        if self.unchecked < FLOOD_CHECK_EVERY {
            return false;
        }
        self.unchecked = 0;
        true
    }
}

/// The header length of the next queued frame if it continues `header`'s
/// run (a `MESSAGE` to the same actor under the same type, no receipt).
fn continues(header: &MessageHeader, queue: &VecDeque<Received>) -> Option<usize> {
    match queue.front() {
        Some(Received::Message(next)) => match MessageHeader::parse(next) {
            Some(Ok(h)) if (h.to, h.type_id, h.receipt) == (header.to, header.type_id, 0) => {
                Some(h.len)
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests;
