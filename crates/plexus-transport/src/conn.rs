//! [`Conn`]: the driver side of one link — its [`Stack`] and the glue that
//! moves messages between the stack and the link's bounded queues. Every
//! driver (stream, UDP, in-memory) owns one `Conn` per link and adds only
//! the socket I/O.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_net::{Frame, LinkEvent, SendError as StackSendError, Stack};

use crate::error::CloseReason;
use crate::link::{lock, Chunk, Inline, Lane, Received, Shared, MESSAGE_OVERHEAD};
use crate::stats::LinkStats;

/// The current time on tokio's clock (so paused-time tests drive stacks too).
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Where a link's sending stands ([`Conn::send_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendState {
    /// Messages are queued (or held by the driver).
    Busy,
    /// Nothing queued; senders remain.
    Idle,
    /// Nothing queued, and nothing more will be: every sender is gone or
    /// the link was asked to close.
    Done,
}

/// What a closing link leaves in its driver's hands, unsent.
#[derive(Debug, PartialEq, Eq)]
enum Unsent {
    /// Messages: the taken queue's entries and the one the stack refused.
    Messages(usize),
    /// Inline framing: bytes of framed messages, in chunks that each hold
    /// any number of messages or part of one, so messages are not counted.
    Bytes(usize),
}

pub(crate) struct Conn {
    pub(crate) stack: Stack,
    pub(crate) shared: Arc<Shared>,
    /// A batch taken from the application's queue in one lock. The lane is
    /// dropped here: a stack carries every lane in queue order.
    outq: VecDeque<(Lane, Bytes)>,
    /// Inline batching: batches (and large messages) taken from the
    /// application's queue in one lock; one the stack refused with
    /// `WouldBlock` stays first.
    chunks: VecDeque<Chunk>,
    /// A message the stack refused with `WouldBlock`; retried first.
    held: Option<Frame>,
    staged: VecDeque<Received>,
    /// Inline framing: permits not to return for the bytes taken so far
    /// (see `OutState::uncharged`).
    uncharged: usize,
    /// The inbound queue is over its bound: stop reading.
    pub(crate) inbox_full: bool,
    receiver_alive: bool,
    inbound_ended: bool,
    /// `stack.stats().dropped` when [`Shared::stats`] was last refreshed.
    dropped: u64,
}

impl Conn {
    pub(crate) fn new(stack: Stack, shared: Arc<Shared>) -> Self {
        Self {
            stack,
            shared,
            outq: VecDeque::with_capacity(256),
            chunks: VecDeque::new(),
            held: None,
            uncharged: 0,
            staged: VecDeque::with_capacity(256),
            inbox_full: false,
            receiver_alive: true,
            inbound_ended: false,
            dropped: 0,
        }
    }

    /// Moves up to about `budget` bytes of queued messages into the stack,
    /// returning permits to the application's send buffer as it goes.
    /// Returns `true` if it stopped at the budget with messages possibly
    /// left: the driver must call again once its transport has room (no
    /// wake-up will come for them).
    pub(crate) fn pump_send(&mut self, now: Instant, budget: usize) -> bool {
        let mut moved = 0usize;
        let mut released = 0usize;
        if let Some(frame) = self.held.take() {
            if !self.stack.can_send() && !self.stack.is_closed() {
                self.held = Some(frame);
                return false;
            }
            self.stack_send(now, frame);
            if self.held.is_some() {
                return false;
            }
        }
        let mut more = false;
        loop {
            if moved >= budget {
                more = true;
                break;
            }
            let Some(message) = self.next_message() else {
                break;
            };
            moved += message.len() + MESSAGE_OVERHEAD;
            released += self.shared.cost(message.len());
            self.stack_send(now, message);
            if self.held.is_some() || self.stack.is_closed() {
                break;
            }
        }
        if released > 0 {
            self.shared.out_space.add_permits(released);
        }
        more
    }

    /// [`pump_send`](Conn::pump_send) for an inline-framing link: hands the
    /// queued wire bytes (whole chunks, already framed by the senders) to
    /// `write`, up to about `budget` bytes, bypassing the stack. Returns
    /// `true` if it stopped at the budget with bytes possibly left.
    pub(crate) fn pump_inline(&mut self, budget: usize, mut write: impl FnMut(Bytes)) -> bool {
        let mut moved = 0usize;
        let mut more = false;
        loop {
            if moved >= budget {
                more = true;
                break;
            }
            if self.outq.is_empty() {
                let messages = {
                    let mut out = lock(&self.shared.out);
                    std::mem::swap(&mut out.queue, &mut self.outq);
                    if !out.staging.is_empty() {
                        let staged = out.staging.split().freeze();
                        self.outq.push_back((Lane::ZERO, staged));
                    }
                    if self.outq.is_empty() {
                        out.driver_waiting = true;
                    }
                    self.uncharged += std::mem::take(&mut out.uncharged);
                    std::mem::take(&mut out.inline_messages)
                        + std::mem::take(&mut out.direct_messages)
                };
                self.stack.count_inline_sends(messages);
            }
            let Some((_, chunk)) = self.outq.pop_front() else {
                break;
            };
            moved += chunk.len();
            write(chunk);
        }
        let owed = self.uncharged.min(moved);
        self.uncharged -= owed;
        if moved > owed {
            self.shared.out_space.add_permits(moved - owed);
        }
        more
    }

    /// Moves the application's queued messages into the stack, up to about
    /// `budget` bytes, the way the link's senders queue them
    /// ([`pump_send`](Conn::pump_send), or batches for an inline-batching
    /// link). Returns `true` if it stopped at the budget with messages
    /// possibly left.
    pub(crate) fn pump(&mut self, now: Instant, budget: usize) -> bool {
        match self.shared.inline {
            Inline::Batching(_) => self.pump_batches(now, budget),
            _ => self.pump_send(now, budget),
        }
    }

    /// [`pump_send`](Conn::pump_send) for an inline-batching link: hands
    /// the batches the senders wrote (and the messages too large to share
    /// one) to the stack whole, returning each one's permits once taken.
    fn pump_batches(&mut self, now: Instant, budget: usize) -> bool {
        let mut moved = 0usize;
        let mut released = 0usize;
        let mut more = false;
        loop {
            if moved >= budget {
                more = true;
                break;
            }
            if self.chunks.is_empty() {
                // Empty: its start back to the front of its buffer, so one
                // chunk at a time reuses one slot (as the stack's queues).
                self.chunks.clear();
                let mut out = lock(&self.shared.out);
                out.close_batch();
                std::mem::swap(&mut out.chunks, &mut self.chunks);
                if self.chunks.is_empty() {
                    out.driver_waiting = true;
                    break;
                }
            }
            let Some(chunk) = self.chunks.pop_front() else {
                break;
            };
            let len = chunk.bytes.len();
            let sent = if chunk.messages == 0 {
                self.stack.handle_send(now, chunk.bytes)
            } else {
                self.stack
                    .handle_send_batch(now, chunk.bytes, u64::from(chunk.messages))
            };
            match sent {
                Ok(()) => {}
                Err(StackSendError::WouldBlock(frame) | StackSendError::Closed(frame)) => {
                    // Kept first: retried once the stack raises SendReady,
                    // or counted as unsent when the closed link goes.
                    self.chunks.push_front(Chunk {
                        bytes: frame.into_bytes(),
                        ..chunk
                    });
                    break;
                }
                Err(error) => {
                    tracing::warn!(peer = %self.shared.peer, %error, messages = chunk.messages.max(1), "stack refused a batch or message; dropped");
                }
            }
            moved += len;
            released += chunk.permits;
        }
        if released > 0 {
            self.shared.out_space.add_permits(released);
        }
        more
    }

    fn next_message(&mut self) -> Option<Bytes> {
        if self.outq.is_empty() {
            // As in `pump_batches`.
            self.outq.clear();
            let mut out = lock(&self.shared.out);
            std::mem::swap(&mut out.queue, &mut self.outq);
            if self.outq.is_empty() {
                out.driver_waiting = true;
            }
        }
        self.outq.pop_front().map(|(_, message)| message)
    }

    fn stack_send(&mut self, now: Instant, frame: impl Into<Frame>) {
        match self.stack.handle_send(now, frame) {
            Ok(()) => {}
            Err(StackSendError::WouldBlock(frame)) => self.held = Some(frame),
            Err(StackSendError::Closed(_)) => {}
            Err(error) => {
                // TooLarge is checked by LinkSender; a custom layer may
                // refuse a frame for its own reasons.
                tracing::warn!(peer = %self.shared.peer, %error, "stack refused a message; dropped");
            }
        }
    }

    /// Whether the application is done sending and everything it queued
    /// has entered the stack.
    pub(crate) fn send_done(&self) -> bool {
        self.send_state(false) == SendState::Done
    }

    /// Where sending stands, for a driver that holds nothing more for the
    /// socket: if nothing is queued either and `direct` is asked for,
    /// senders may now write to the socket themselves
    /// (`OutState::write_idle`), until one has to queue.
    pub(crate) fn send_state(&self, direct: bool) -> SendState {
        if !self.outq.is_empty() || self.held.is_some() || !self.chunks.is_empty() {
            return SendState::Busy;
        }
        let mut out = lock(&self.shared.out);
        if !(out.queue.is_empty() && out.staging.is_empty() && out.chunks.is_empty()) {
            return SendState::Busy;
        }
        if out.senders == 0 || out.close_requested {
            return SendState::Done;
        }
        if direct && out.direct.is_some() {
            out.write_idle = true;
        }
        SendState::Idle
    }

    /// Hands received messages and events to the application (one lock).
    /// Returns whether there were messages.
    pub(crate) fn deliver(&mut self) -> bool {
        let dropped = self.stack.stats().dropped;
        if dropped != self.dropped {
            self.dropped = dropped;
            *lock(&self.shared.stats) = LinkStats::of(&self.stack);
        }
        let mut messages = false;
        while let Some(m) = self.stack.poll_receive() {
            self.staged.push_back(Received::Message(m));
            messages = true;
        }
        while let Some(event) = self.stack.poll_event() {
            // SendReady is the driver's business: pump_send retries.
            if event != LinkEvent::SendReady {
                self.staged.push_back(Received::Event(event));
            }
        }
        let handed = self.shared.hand_over(&mut self.staged, true);
        if self.staged.is_empty() {
            // Taken one item at a time (inline): back to its first slot.
            self.staged.clear();
        }
        match handed {
            Some(handed) => {
                self.receiver_alive = handed.receiver_alive;
                self.inbox_full = handed.full;
            }
            None if self.inbox_full => self.refresh_inbox(),
            None => {}
        }
        messages
    }

    /// Re-reads whether the inbound queue has room (after a wake-up).
    pub(crate) fn refresh_inbox(&mut self) {
        let mut inb = lock(&self.shared.inb);
        self.receiver_alive = inb.receiver_alive;
        self.inbox_full = inb.receiver_alive && inb.bytes >= self.shared.config.recv_buffer;
        inb.driver_waiting = self.inbox_full;
    }

    pub(crate) fn receiver_alive(&self) -> bool {
        self.receiver_alive
    }

    /// The peer will send nothing more: the receiver gets `reason` after
    /// the queued messages, while sending may go on (half close).
    pub(crate) fn end_inbound(&mut self, reason: CloseReason) {
        self.deliver();
        self.inbound_ended = true;
        self.shared.close_inbound(reason);
    }

    pub(crate) fn inbound_ended(&self) -> bool {
        self.inbound_ended
    }

    /// What the driver took from the application's queue and did not send.
    /// (What is still in that queue, `Shared::close` counts.)
    fn unsent(&self) -> Unsent {
        match self.shared.inline {
            Inline::Framing | Inline::Lanes => {
                Unsent::Bytes(self.outq.iter().map(|(_, chunk)| chunk.len()).sum())
            }
            Inline::Batching(_) => Unsent::Messages(
                self.chunks
                    .iter()
                    .map(|c| (c.messages as usize).max(1))
                    .sum(),
            ),
            Inline::Off => Unsent::Messages(self.outq.len() + usize::from(self.held.is_some())),
        }
    }

    /// Closes the link for its handles after delivering what the stack
    /// still holds.
    pub(crate) fn close(&mut self, reason: CloseReason) {
        self.deliver();
        let direct = std::mem::take(&mut lock(&self.shared.out).direct_messages);
        self.stack.count_inline_sends(direct);
        match self.unsent() {
            Unsent::Messages(0) | Unsent::Bytes(0) => {}
            Unsent::Messages(unsent) => {
                tracing::warn!(peer = %self.shared.peer, unsent, "link closed with messages not sent");
            }
            Unsent::Bytes(unsent_bytes) => {
                tracing::warn!(peer = %self.shared.peer, unsent_bytes, "link closed with framed bytes not sent");
            }
        }
        tracing::debug!(peer = %self.shared.peer, %reason, "link closed");
        self.shared.close(reason);
    }
}

#[cfg(test)]
mod tests {
    use plexus_net::TransportKind;

    use super::*;
    use crate::LinkConfig;

    fn conn(inline_framing: bool) -> Conn {
        let shared = Shared::new(
            "test://peer".into(),
            None,
            if inline_framing {
                Inline::Framing
            } else {
                Inline::Off
            },
            LinkConfig::default(),
            Box::new(|| {}),
        );
        Conn::new(Stack::new(TransportKind::Tcp, Vec::new()), shared)
    }

    #[test]
    fn unsent_counts_messages_on_a_stack_link() {
        let mut c = conn(false);
        for m in ["a", "bb", "ccc"] {
            c.outq
                .push_back((Lane::ZERO, Bytes::from_static(m.as_bytes())));
        }
        assert_eq!(c.unsent(), Unsent::Messages(3));
    }

    #[test]
    fn unsent_counts_bytes_not_chunks_on_an_inline_framing_link() {
        let mut c = conn(true);
        // One chunk of three framed messages, one of part of a message.
        c.outq.push_back((Lane::ZERO, Bytes::from(vec![0; 30])));
        c.outq.push_back((Lane::ZERO, Bytes::from(vec![0; 7])));
        assert_eq!(c.unsent(), Unsent::Bytes(37));
    }
}
