//! [`Conn`]: one link's [`Stack`] and the glue that moves messages between
//! the stack and the link's bounded queues. Every transport's link has one;
//! whoever drives the link (its driver task, or a sender taking the
//! driver's turn) holds it behind the link's lock and adds only the socket
//! I/O. Every message enters the stack through [`Conn::pump`] and
//! `Stack::handle_send`, whatever the stack's layers: there is no other
//! path.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use plexus_net::{Frame, LinkEvent, Stack, StackSendError};

use crate::error::CloseReason;
use crate::link::{lock, OutQueue, Received, Shared, INITIAL_QUEUE, MESSAGE_OVERHEAD};
use crate::stats::LinkStats;

/// The most messages [`Conn::pump`] hands the stack in one run: enough for
/// a layer's work per run to amortise, few enough to stay in the cache.
const RUN_MAX: usize = 64;

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

pub(crate) struct Conn {
    pub(crate) stack: Stack,
    pub(crate) shared: Arc<Shared>,
    /// A batch taken from the application's queue in one lock. The strand is
    /// dropped here: a stack carries every strand in queue order.
    outq: OutQueue,
    /// A message the stack refused with `WouldBlock`; retried first.
    held: Option<Frame>,
    /// A run cut from `outq` at the budget (kept for its buffer).
    run: VecDeque<Frame>,
    staged: VecDeque<Received>,
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
            outq: OutQueue::with_capacity(INITIAL_QUEUE),
            held: None,
            run: VecDeque::new(),
            staged: VecDeque::with_capacity(INITIAL_QUEUE),
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
    pub(crate) fn pump(&mut self, now: Instant, budget: usize) -> bool {
        let mut moved = 0usize;
        let mut released = 0usize;
        let (mut taken, mut taken_bytes) = (0u64, 0u64);
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
            if !self.refill() {
                break;
            }
            let (n, bytes, cost, result) = if self.outq.front_pack().is_some() {
                self.send_pack(now)
            } else {
                self.send_frames(now, budget - moved)
            };
            moved += bytes as usize + n * MESSAGE_OVERHEAD;
            released += cost;
            taken += n as u64;
            taken_bytes += bytes;
            if let Err(error) = result {
                self.refused(error);
            }
            if self.held.is_some() || self.stack.is_closed() {
                break;
            }
        }
        if released > 0 {
            self.shared.out_space.add_permits(released);
        }
        if taken > 0 {
            self.shared.traffic.sent(taken, taken_bytes);
        }
        more
    }

    /// Hands the stack the pack at the front of the queue, whole. Returns
    /// the messages it took (a refused one among them: it is held), their
    /// bytes and permits, and the stack's answer.
    fn send_pack(&mut self, now: Instant) -> (usize, u64, usize, Result<(), StackSendError>) {
        let Some(pack) = self.outq.front_pack() else {
            return (0, 0, 0, Ok(()));
        };
        let mut messages = pack.messages();
        let (mut bytes, mut cost) = (0u64, 0usize);
        let before = messages.clone();
        let result = self.stack.handle_send_packed(now, &mut messages);
        let n = messages.taken() - before.taken();
        for message in before.take(n) {
            bytes += message.len() as u64;
            cost += self.shared.cost(message.len());
        }
        self.outq.take_from_front_pack(n);
        (n, bytes, cost, result)
    }

    /// Hands the stack the frames that lead the queue, as one run: those
    /// that fit what is left of the `budget` (at least one), at most
    /// [`RUN_MAX`]. What it does not take (a stack that had no room) stays
    /// queued. Returns as [`send_pack`](Conn::send_pack).
    fn send_frames(
        &mut self,
        now: Instant,
        budget: usize,
    ) -> (usize, u64, usize, Result<(), StackSendError>) {
        let most = self.outq.leading_frames(RUN_MAX);
        let queue = self.outq.frames_mut();
        let (mut n, mut moved) = (0usize, 0usize);
        for message in queue.iter().take(most) {
            if n > 0 && moved >= budget {
                break;
            }
            moved += message.len() + MESSAGE_OVERHEAD;
            n += 1;
        }
        let before = queue.len();
        let behind = before - n;
        let (mut bytes, mut cost) = (0u64, 0usize);
        let result = if behind == 0 {
            for message in queue.iter() {
                bytes += message.len() as u64;
                cost += self.shared.cost(message.len());
            }
            self.stack.handle_send_run(now, queue)
        } else {
            self.run.extend(queue.drain(..n));
            for message in &self.run {
                bytes += message.len() as u64;
                cost += self.shared.cost(message.len());
            }
            let result = self.stack.handle_send_run(now, &mut self.run);
            while let Some(message) = self.run.pop_back() {
                queue.push_front(message);
            }
            result
        };
        // What the stack did not take (after a refusal) stays queued, not
        // counted.
        let left = queue.len() - behind;
        for message in queue.iter().take(left) {
            bytes -= message.len() as u64;
            cost -= self.shared.cost(message.len());
        }
        let n = before - queue.len();
        self.outq.took_frames(n);
        (n, bytes, cost, result)
    }

    /// Takes the application's queue if nothing of the last batch is left;
    /// whether there are messages to send.
    fn refill(&mut self) -> bool {
        if self.outq.is_empty() {
            // Empty: its start back to the front of its buffer, so one
            // message at a time reuses one slot (as the stack's queues).
            self.outq.clear();
            let mut out = lock(&self.shared.out);
            std::mem::swap(&mut out.queue, &mut self.outq);
            if self.outq.is_empty() {
                out.driver_waiting = true;
                return false;
            }
        }
        true
    }

    fn stack_send(&mut self, now: Instant, frame: impl Into<Frame>) {
        if let Err(error) = self.stack.handle_send(now, frame) {
            self.refused(error);
        }
    }

    /// A message the stack refused: held to retry if it had no room,
    /// dropped otherwise.
    fn refused(&mut self, error: StackSendError) {
        match error {
            StackSendError::WouldBlock(frame) => self.held = Some(frame),
            StackSendError::Closed(_) => {}
            error => {
                // TooLarge is checked by LinkSender; a custom layer may
                // refuse a frame for its own reasons.
                tracing::warn!(target: "plexus::transport", peer = %self.shared.peer, %error, "stack refused a message; dropped");
            }
        }
    }

    /// Whether the application is done sending and everything it queued
    /// has entered the stack.
    pub(crate) fn send_done(&self) -> bool {
        self.send_state() == SendState::Done
    }

    /// Where sending stands: whether messages wait to enter the stack, and
    /// if not, whether more may come.
    pub(crate) fn send_state(&self) -> SendState {
        if !self.outq.is_empty() || self.held.is_some() {
            return SendState::Busy;
        }
        let out = lock(&self.shared.out);
        if !out.queue.is_empty() {
            return SendState::Busy;
        }
        if out.senders == 0 || out.close_requested {
            return SendState::Done;
        }
        SendState::Idle
    }

    /// Hands received messages and events to the application (one lock).
    /// Returns whether there were messages.
    pub(crate) fn deliver(&mut self) -> bool {
        let mut staged = std::mem::take(&mut self.staged);
        let messages = self.collect(&mut staged);
        let handed = hand_over(&self.shared, &mut staged);
        self.on_handed(handed);
        self.staged = staged;
        messages
    }

    /// What the stack has for the application (messages, events), moved
    /// to `staged`; returns whether there were messages. With
    /// [`hand_over`] and [`on_handed`](Conn::on_handed),
    /// [`deliver`](Conn::deliver) in steps, for a driver that hands over without holding its link's
    /// lock (the receiver's driver-side handler may send on the link).
    pub(crate) fn collect(&mut self, staged: &mut VecDeque<Received>) -> bool {
        let dropped = self.stack.stats().dropped;
        if dropped != self.dropped || self.shared.traffic.wanted.load(Ordering::Relaxed) {
            self.dropped = dropped;
            self.shared.traffic.wanted.store(false, Ordering::Relaxed);
            *lock(&self.shared.stats) = LinkStats::of(&self.stack);
        }
        let (mut count, mut bytes) = (0u64, 0u64);
        while let Some(m) = self.stack.poll_receive() {
            count += 1;
            bytes += m.len() as u64;
            staged.push_back(Received::Message(m));
        }
        let messages = count > 0;
        if messages {
            self.shared.traffic.received(count, bytes);
        }
        while let Some(event) = self.stack.poll_event() {
            // SendReady is the driver's business: pump retries.
            if event != LinkEvent::SendReady {
                staged.push_back(Received::Event(event));
            }
        }
        messages
    }

    /// Records what [`hand_over`] reported.
    pub(crate) fn on_handed(&mut self, handed: Option<crate::link::HandedOver>) {
        match handed {
            Some(handed) => {
                self.receiver_alive = handed.receiver_alive;
                self.inbox_full = handed.full;
            }
            None if self.inbox_full => self.refresh_inbox(),
            None => {}
        }
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

    /// Messages the driver took from the application's queue and did not
    /// send. (What is still in that queue, `Shared::close` counts.)
    fn unsent(&self) -> usize {
        self.outq.len() + usize::from(self.held.is_some())
    }

    /// Closes the link for its handles after delivering what the stack
    /// still holds.
    pub(crate) fn close(&mut self, reason: CloseReason) {
        self.deliver();
        let unsent = self.unsent();
        if unsent > 0 {
            tracing::warn!(target: "plexus::transport", peer = %self.shared.peer, unsent, "link closed with messages not sent");
        }
        tracing::debug!(target: "plexus::transport", peer = %self.shared.peer, %reason, "link closed");
        self.shared.close(reason);
    }
}

/// Hands `staged` (see [`Conn::collect`]) to the application (one lock),
/// for [`Conn::on_handed`]. Needs no hold of the link's `Conn`, so a
/// driver may call it with its lock released.
pub(crate) fn hand_over(
    shared: &Shared,
    staged: &mut VecDeque<Received>,
) -> Option<crate::link::HandedOver> {
    let handed = shared.hand_over(staged, true);
    if staged.is_empty() {
        // Taken one item at a time (by the handler): back to its first slot.
        staged.clear();
    }
    handed
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::{LinkConfig, Strand};

    #[test]
    fn unsent_counts_taken_messages_and_the_held_one() {
        let shared = Shared::new(
            "test://peer".into(),
            None,
            LinkConfig::default(),
            Box::new(|| {}),
        );
        let mut c = Conn::new(Stack::new(None, Vec::new()), shared);
        for m in ["a", "bb", "ccc"] {
            c.outq.push_back((
                Strand::ZERO,
                Frame::from_payload(Bytes::from_static(m.as_bytes())),
            ));
        }
        c.held = Some(Frame::from_payload(Bytes::from_static(b"d")));
        assert_eq!(c.unsent(), 4);
    }
}
