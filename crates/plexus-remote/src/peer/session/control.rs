//! The session's control protocol, sans I/O: every frame that is not a
//! message (`RECEIPT`, `REPLY`, `RESOLVE`, `RESOLVED`, `MONITOR`,
//! `DEMONITOR`, `DOWN`, `LINK`, `UNLINK`, `EXIT`, `STOP`, `GOODBYE`, and the
//! handshake's frames arriving too late).
//!
//! [`Session::handle_frame`] updates the session's bookkeeping and says
//! what is left to do as [`SessionEvent`]s (`Protocol::poll_event`): tell
//! a waiter, resolve a name, watch or signal a local actor. Those need the
//! node's actors, which the session does not see; the shell carries them
//! out and hands the answers back (`answer_resolve`, `monitored`,
//! `refuse_monitor`, `refuse_link`, `actor_down`), which queue the frames
//! to send (`Protocol::poll_transmit`). The shell sends them after it let
//! go of the session's lock: nothing here waits, sends or touches an actor.
//!
//! What it guarantees, whatever the peer sends:
//! - each request this node made is answered at most once: an answer for
//!   nothing that waits (answered already, failed by a lost link, never
//!   asked) is dropped and counted ([`Session::stray_answers`]);
//! - a frame that has no place on an established link (a handshake frame)
//!   or a `GOODBYE` ends the link with a typed [`CloseCause`]; an
//!   undecodable frame never reaches here (the shell's decode fails with
//!   [`ProtocolError::Malformed`]);
//! - messages (`MESSAGE`, `NAMED`, `TRACE`, `SEQUENCED`) are handed back
//!   untouched for the shell's delivery path.

use std::collections::VecDeque;

use bytes::Bytes;
use plexus_core::remote::{CodecError, ReceiptError};
use plexus_core::{ActorId, ExitReason, NodeId};

use super::{Abandoned, Handles, Session};
use crate::close::{CloseCause, ProtocolError};
use crate::wire::{ReceiptStatus, Resolution, WireFrame};

/// What a control frame leaves for the shell to carry out.
pub(crate) enum SessionEvent<H: Handles> {
    /// A message's receipt came: tell whoever waits for it.
    Receipt {
        waiter: H::Receipt,
        outcome: Result<(), ReceiptError>,
    },
    /// The value for ask `id` (asks wait in the node, not the session).
    Reply { id: u64, payload: Bytes },
    /// The peer asks which actor is published under `name` for
    /// `type_id`: answer with [`Session::answer_resolve`].
    Resolve {
        request: u64,
        type_id: u64,
        name: String,
    },
    /// A resolve of ours was answered.
    Resolved {
        waiter: H::Resolve,
        resolution: Resolution,
    },
    /// The peer watches local actor `target` under `token`: watch it and
    /// say so with [`Session::monitored`], or refuse with
    /// [`Session::refuse_monitor`].
    Monitor { target: u64, token: u64 },
    /// The peer stopped watching: remove the local watch `watch` of
    /// `local`.
    Unwatch { local: H::Local, watch: u64 },
    /// A remote actor a local watcher watched is down.
    Down {
        watcher: H::Watcher,
        id: ActorId,
        reason: ExitReason,
    },
    /// The peer links its actor `remote` to local actor `local`: link
    /// them and say so with [`Session::linked`], or refuse with
    /// [`Session::refuse_link`].
    Link { remote: ActorId, local: u64 },
    /// The peer unlinked `remote` from local actor `local`.
    Unlink { remote: ActorId, local: u64 },
    /// Linked remote actor `remote` exited: signal local actor `local`.
    Exit {
        remote: ActorId,
        local: u64,
        reason: ExitReason,
    },
    /// Stop (or kill) local actor `target`.
    Stop { target: u64, kill: bool },
    /// A message handed to [`Protocol::handle_packet`](plexus_net::protocol::Protocol::handle_packet),
    /// for the shell's delivery path (a node's readers sort messages out
    /// before the session).
    Message(WireFrame),
    /// A frame handed to `handle_packet` ends the link: close it.
    Closed(CloseCause),
    /// The superseded wait ran out (see `session/protocol.rs`): fail what
    /// waited, as for a failed connect.
    GaveUp(Abandoned<H>),
}

/// What a session keeps for its control protocol besides its bookkeeping.
pub(crate) struct ControlQueues<H: Handles> {
    pub(super) events: VecDeque<SessionEvent<H>>,
    transmit: VecDeque<WireFrame>,
    /// Answers (`RECEIPT`, `RESOLVED`, `DOWN`) for nothing that waited.
    stray_answers: u64,
}

impl<H: Handles> Default for ControlQueues<H> {
    fn default() -> Self {
        Self {
            events: VecDeque::new(),
            transmit: VecDeque::new(),
            stray_answers: 0,
        }
    }
}

impl<H: Handles> Session<H> {
    /// Handles `frame`, which arrived on a link between this node, `here`,
    /// and `remote`. A message comes back (`Some`) for the shell's
    /// delivery path; a control frame updates the session and queues its
    /// events and replies. `Err` ends the link.
    pub(crate) fn handle_frame(
        &mut self,
        here: NodeId,
        remote: NodeId,
        frame: WireFrame,
    ) -> Result<Option<WireFrame>, CloseCause> {
        let event = match frame {
            message @ (WireFrame::Message { .. }
            | WireFrame::Named { .. }
            | WireFrame::Traced { .. }
            | WireFrame::Sequenced { .. }) => return Ok(Some(message)),
            WireFrame::Receipt { id, status } => {
                self.handle_receipt(id).map(|waiter| SessionEvent::Receipt {
                    waiter,
                    outcome: receipt_outcome(status),
                })
            }
            WireFrame::Reply { id, payload } => Some(SessionEvent::Reply { id, payload }),
            WireFrame::Resolve {
                request,
                type_id,
                name,
                ..
            } => Some(SessionEvent::Resolve {
                request,
                type_id,
                name,
            }),
            WireFrame::Resolved {
                request,
                resolution,
            } => self
                .handle_resolved(request)
                .map(|waiter| SessionEvent::Resolved { waiter, resolution }),
            WireFrame::Monitor { target, token } => Some(SessionEvent::Monitor { target, token }),
            WireFrame::Demonitor { token, .. } => match self.handle_demonitor(token) {
                Some((local, Some(watch))) => Some(SessionEvent::Unwatch { local, watch }),
                _ => return Ok(None),
            },
            WireFrame::Down { token, reason } => {
                self.handle_down(token)
                    .map(|(id, watcher)| SessionEvent::Down {
                        watcher,
                        id,
                        reason,
                    })
            }
            WireFrame::Link { from, to } => Some(SessionEvent::Link {
                remote: ActorId::new(remote, from),
                local: to,
            }),
            WireFrame::Unlink { from, to } => {
                let remote_id = ActorId::new(remote, from);
                self.unlinked(ActorId::new(here, to), remote_id);
                Some(SessionEvent::Unlink {
                    remote: remote_id,
                    local: to,
                })
            }
            WireFrame::Exit { from, to, reason } => {
                let remote_id = ActorId::new(remote, from);
                self.unlinked(ActorId::new(here, to), remote_id);
                Some(SessionEvent::Exit {
                    remote: remote_id,
                    local: to,
                    reason,
                })
            }
            WireFrame::Stop { target, kill } => Some(SessionEvent::Stop { target, kill }),
            WireFrame::Goodbye { code } => return Err(CloseCause::Goodbye(code)),
            frame @ (WireFrame::Hello(_)
            | WireFrame::Auth { .. }
            | WireFrame::Reject { .. }
            | WireFrame::Bind { .. }
            | WireFrame::Lanes { .. }) => {
                return Err(ProtocolError::HandshakeFrame { kind: frame.name() }.into())
            }
        };
        match event {
            Some(e) => self.control.events.push_back(e),
            // Only answers map to nothing: the request they answer is
            // gone.
            None => self.control.stray_answers += 1,
        }
        Ok(None)
    }

    /// The next control frame to send, on the control lane
    /// ([`Protocol::poll_transmit`](plexus_net::protocol::Protocol::poll_transmit)
    /// encodes it).
    pub(crate) fn poll_reply(&mut self) -> Option<WireFrame> {
        self.control.transmit.pop_front()
    }

    /// Answers for nothing that waited, so far.
    pub(crate) fn stray_answers(&self) -> u64 {
        self.control.stray_answers
    }

    /// Answers the peer's [`SessionEvent::Resolve`].
    pub(crate) fn answer_resolve(&mut self, request: u64, resolution: Resolution) {
        self.control.transmit.push_back(WireFrame::Resolved {
            request,
            resolution,
        });
    }

    /// The peer may not watch the actor of [`SessionEvent::Monitor`]
    /// under `token` (there is none, or it stopped): it is told `DOWN` at
    /// once.
    pub(crate) fn refuse_monitor(&mut self, token: u64, reason: ExitReason) {
        self.control
            .transmit
            .push_back(WireFrame::Down { token, reason });
    }

    /// The local actor the peer watched under `token` is down: the
    /// monitor ends and the peer is told.
    pub(crate) fn actor_down(&mut self, token: u64, reason: ExitReason) {
        // The monitor may not be recorded yet (the actor stopped while the
        // shell was watching it): the peer is told all the same.
        self.handle_demonitor(token);
        self.control
            .transmit
            .push_back(WireFrame::Down { token, reason });
    }

    /// Local actor `local` cannot be linked to the peer's `remote`: the
    /// peer's actor gets `EXIT` with `reason`.
    pub(crate) fn refuse_link(&mut self, remote: ActorId, local: u64, reason: ExitReason) {
        self.control.transmit.push_back(WireFrame::Exit {
            from: local,
            to: remote.serial(),
            reason,
        });
    }
}

/// What a `RECEIPT`'s status means to the sender.
fn receipt_outcome(status: ReceiptStatus) -> Result<(), ReceiptError> {
    match status {
        ReceiptStatus::Delivered => Ok(()),
        ReceiptStatus::NoSuchActor => Err(ReceiptError::NoSuchActor),
        ReceiptStatus::Stopped => Err(ReceiptError::Stopped),
        ReceiptStatus::MailboxFull => Err(ReceiptError::MailboxFull),
        ReceiptStatus::Undecodable => Err(ReceiptError::Decode(CodecError {
            context: "deliver".into(),
            detail: "the receiving node could not decode the payload".into(),
        })),
    }
}

#[cfg(test)]
mod tests;
