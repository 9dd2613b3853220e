//! [`LinkSender`]: the sending half of a link. A message is queued, with
//! its strand, for whoever drives the link's stack next: the driver, or the
//! sender itself when the driver waits for it and the transport lets a
//! sender take its turn ([`SenderTurn`](super::SenderTurn)). Either way it
//! goes through the stack's `handle_send` and `poll_transmit`.

use std::sync::Arc;

use bytes::Bytes;
use plexus_net::{Frame, Packed};
use tokio::sync::TryAcquireError;

use super::{lock, Shared, Strand, PACK_MESSAGE_MAX, TURN_DEPTH};
use crate::error::{LinkSendError, LinkTrySendError, UnreliableError};
use crate::stats::LinkStats;

/// The sending half of a link. Cheap to clone; the link closes (after
/// flushing) once every sender and the receiver are dropped.
pub struct LinkSender {
    shared: Arc<Shared>,
}

impl LinkSender {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        lock(&shared.out).senders += 1;
        Self { shared }
    }

    /// The peer address, with its scheme (`tcp://127.0.0.1:4000`).
    pub fn peer(&self) -> &str {
        &self.shared.peer
    }

    /// The largest message the link's stack carries (`None`: unbounded).
    pub fn max_message_len(&self) -> Option<usize> {
        self.shared.max_message_len
    }

    /// Bytes queued on the link that its stack has not taken yet (each
    /// message charged a few bytes more for its overhead): what a new
    /// message waits behind. An adaptive lane reads it to estimate each
    /// candidate's delay and goodput; it costs the send path nothing.
    pub fn queued_bytes(&self) -> usize {
        self.shared
            .config
            .send_buffer
            .saturating_sub(self.shared.out_space.available_permits())
    }

    /// Whether a message ending in a file region ([`Frame::from_file`]) is
    /// written as it is, from the page cache to the socket (`sendfile`):
    /// the transport is TCP or a Unix socket and every layer of the stack
    /// passes regions ([`plexus_net::Layer::passes_file_regions`]).
    /// Otherwise the sender reads a region into memory before queuing it.
    pub fn writes_file_regions(&self) -> bool {
        self.shared.extras.writes_file_regions
    }

    /// What the link carried and its stack dropped so far (see
    /// [`LinkStats`] for how current each counter is).
    pub fn stats(&self) -> LinkStats {
        let snapshot = *lock(&self.shared.stats);
        self.shared.traffic.read(snapshot)
    }

    fn check_len(&self, message: Bytes) -> Result<Bytes, LinkSendError> {
        match self.shared.max_message_len {
            Some(max) if message.len() > max => Err(LinkSendError::TooLarge {
                peer: self.shared.peer.clone(),
                message,
                max,
            }),
            _ => Ok(message),
        }
    }

    /// `frame` as the link can take it: a file region read into memory
    /// unless the link writes regions as they are.
    fn readable_by_link(&self, mut frame: Frame) -> Result<Frame, LinkSendError> {
        if frame.has_file_region() && !self.shared.extras.writes_file_regions {
            if let Err(source) = frame.load_file_region() {
                return Err(LinkSendError::FileRegion {
                    peer: self.shared.peer.clone(),
                    message: frame.to_bytes(),
                    source,
                });
            }
        }
        Ok(frame)
    }

    /// Queues a message on `strand` (its permits were taken).
    fn push(&self, strand: Strand, message: Bytes, cost: usize) -> Result<(), LinkSendError> {
        self.push_frame(strand, Frame::from_payload(message), cost)
    }

    /// Queues a frame on `strand` (its `cost` permits were taken). Refused,
    /// the permits given back, if the link was sealed meanwhile
    /// ([`try_send_last_on`](LinkSender::try_send_last_on)).
    ///
    /// The sender offers to take the driver's turn when the driver waits
    /// for its message, and, where the transport asks for it
    /// (`Extras::turn_when_deep`), each [`TURN_DEPTH`] messages queued while
    /// the driver has not come (it runs on this thread, after this sender's
    /// loop): the queue then stays a few cache lines deep instead of
    /// growing to the whole send buffer, and the stack takes the messages
    /// while they are still in the cache.
    fn push_frame(&self, strand: Strand, frame: Frame, cost: usize) -> Result<(), LinkSendError> {
        let (waiting, deep) = {
            let mut out = lock(&self.shared.out);
            if out.sealed {
                drop(out);
                return Err(self.refuse_sealed(frame, cost));
            }
            let before = out.queue.len();
            out.queue.push_back((strand, frame));
            let deep = before / TURN_DEPTH != out.queue.len() / TURN_DEPTH;
            (std::mem::take(&mut out.driver_waiting), deep)
        };
        if waiting || (deep && self.shared.extras.turn_when_deep) {
            self.shared.wake_for_send();
        }
        Ok(())
    }

    /// The error of a frame refused by a sealed link; its permits go back.
    #[cold]
    fn refuse_sealed(&self, frame: Frame, cost: usize) -> LinkSendError {
        self.shared.out_space.add_permits(cost);
        LinkSendError::Closed {
            message: frame.to_bytes(),
            closed: self.shared.closed(),
        }
    }

    /// Queues `message` on `strand` as the link's last: every later send
    /// fails with [`LinkSendError::Closed`] (handing its message back),
    /// while this one and those queued before it are still sent and the
    /// link keeps receiving. For a message that ends the sender's use of
    /// the link (a goodbye), so nothing sent after it, by any sender, is
    /// lost behind it: a sender that raced it gets its message back to
    /// send elsewhere.
    ///
    /// # Errors
    ///
    /// As [`try_send_on`](LinkSender::try_send_on); also
    /// [`LinkSendError::Closed`] if the link was sealed already.
    pub fn try_send_last_on(&self, strand: Strand, message: Bytes) -> Result<(), LinkTrySendError> {
        let message = self.check_len(message)?;
        let cost = self.shared.cost(message.len());
        self.take_permits(cost, || message.clone())?;
        let frame = Frame::from_payload(message);
        let wake = {
            let mut out = lock(&self.shared.out);
            if out.sealed {
                drop(out);
                return Err(self.refuse_sealed(frame, cost).into());
            }
            out.queue.push_back((strand, frame));
            out.sealed = true;
            std::mem::take(&mut out.driver_waiting)
        };
        if wake {
            self.shared.wake_for_send();
        }
        Ok(())
    }

    /// [`try_send_copy_on`](LinkSender::try_send_copy_on) [`Strand::ZERO`].
    ///
    /// # Errors
    ///
    /// As [`try_send`](LinkSender::try_send), handing back a copy.
    pub fn try_send_copy(&self, message: &[u8]) -> Result<(), LinkTrySendError> {
        self.try_send_copy_on(Strand::ZERO, message)
    }

    /// Queues a copy of `message` on `strand` if the send buffer has room,
    /// without waiting: for callers that encode into a reused scratch
    /// buffer. A small message (up to 1 KiB) queued behind others is
    /// copied into the pack at the back of the send queue, with the small
    /// messages queued on `strand` right before it: no frame of its own,
    /// and the driver hands the pack to the stack whole
    /// ([`Stack::handle_send_packed`](plexus_net::Stack::handle_send_packed)).
    /// One sent to an empty queue (or on a link whose driver takes frames
    /// only) is copied into a [`Frame`] ([`Frame::copy_from_slice`]).
    ///
    /// # Errors
    ///
    /// As [`try_send`](LinkSender::try_send), handing back a copy.
    pub fn try_send_copy_on(&self, strand: Strand, message: &[u8]) -> Result<(), LinkTrySendError> {
        if let Some(max) = self.shared.max_message_len {
            if message.len() > max {
                return Err(LinkSendError::TooLarge {
                    peer: self.shared.peer.clone(),
                    message: Bytes::copy_from_slice(message),
                    max,
                }
                .into());
            }
        }
        let cost = self.shared.cost(message.len());
        self.take_permits(cost, || Bytes::copy_from_slice(message))?;
        if message.len() <= PACK_MESSAGE_MAX {
            let end = [message.len() as u32];
            if self.push_copies(strand, message, &end) {
                return Ok(());
            }
            return Err(self
                .refuse_sealed(Frame::copy_from_slice(message), cost)
                .into());
        }
        // Copied before the lock.
        let frame = Frame::copy_from_slice(message);
        self.push_frame(strand, frame, cost)?;
        Ok(())
    }

    /// Queues copies of several messages on `strand`, in order, under one
    /// lock and one count of the send buffer's permits: the messages lie
    /// end to end in `bytes`, message `i` ending at `ends[i]`. Returns how
    /// many were queued: all, or none when one is too large, the send
    /// buffer has no room for all of them, or the link is closed; the
    /// caller then sends them one by one ([`try_send_copy_on`]) to learn
    /// each one's fate.
    ///
    /// For a sender that gathered a run of small messages to one peer (an
    /// actor's turn): per run, not per message, it takes the lock and the
    /// permits, and the messages join the send queue's pack, as small ones
    /// from [`try_send_copy_on`] do.
    ///
    /// [`try_send_copy_on`]: LinkSender::try_send_copy_on
    ///
    /// # Panics
    ///
    /// If `ends` is not ascending or its last end lies beyond `bytes`.
    pub fn try_send_copies_on(&self, strand: Strand, bytes: &[u8], ends: &[u32]) -> usize {
        let (mut cost, mut start) = (0usize, 0usize);
        for &end in ends {
            let len = end as usize - start;
            if self.shared.max_message_len.is_some_and(|max| len > max) {
                return 0;
            }
            cost += self.shared.cost(len);
            start = end as usize;
        }
        if ends.is_empty() || self.take_permits(cost, Bytes::new).is_err() {
            return 0;
        }
        if !self.push_copies(strand, &bytes[..start], ends) {
            self.shared.out_space.add_permits(cost);
            return 0;
        }
        ends.len()
    }

    /// Queues copies of small messages (end to end in `bytes`, message `i`
    /// ending at `ends[i]`) on `strand`; their permits were taken. They are
    /// packed (`OutQueue::push_packed`), except a message sent alone while
    /// the queue is empty (the driver takes it at once: a frame of its own
    /// is cheaper) and on a link whose driver takes frames only
    /// (`Extras::frames_only`). Returns `false`, queueing nothing (the
    /// caller gives the permits back), if the link was sealed meanwhile.
    /// Wakes the driver as [`push_frame`](LinkSender::push_frame) does.
    fn push_copies(&self, strand: Strand, bytes: &[u8], ends: &[u32]) -> bool {
        let (waiting, deep) = {
            let mut out = lock(&self.shared.out);
            if out.sealed {
                return false;
            }
            let before = out.queue.len();
            if self.shared.extras.frames_only || (ends.len() == 1 && before == 0) {
                for message in Packed::new(bytes, ends) {
                    out.queue
                        .push_back((strand, Frame::copy_from_slice(message)));
                }
            } else {
                out.queue.push_packed(strand, bytes, ends);
            }
            let deep = before / TURN_DEPTH != out.queue.len() / TURN_DEPTH;
            (std::mem::take(&mut out.driver_waiting), deep)
        };
        if waiting || (deep && self.shared.extras.turn_when_deep) {
            self.shared.wake_for_send();
        }
        true
    }

    /// Takes `cost` permits without waiting; on failure hands back the
    /// message `make` builds.
    fn take_permits(
        &self,
        cost: usize,
        make: impl FnOnce() -> Bytes,
    ) -> Result<(), LinkTrySendError> {
        match self.shared.out_space.try_acquire_many(cost as u32) {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(TryAcquireError::NoPermits) => Err(LinkTrySendError::Full {
                peer: self.shared.peer.clone(),
                message: make(),
            }),
            Err(TryAcquireError::Closed) => Err(LinkSendError::Closed {
                message: make(),
                closed: self.shared.closed(),
            }
            .into()),
        }
    }

    /// Queues `message` for the peer on [`Strand::ZERO`], waiting while the
    /// send buffer is full. As [`send_on`](LinkSender::send_on).
    ///
    /// # Errors
    ///
    /// As [`send_on`](LinkSender::send_on).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before completing, the message
    /// was not queued.
    pub async fn send(&self, message: Bytes) -> Result<(), LinkSendError> {
        self.send_on(Strand::ZERO, message).await
    }

    /// Queues `message` for the peer on `strand`, waiting while the send
    /// buffer is full. Messages on one strand arrive in order; see [`Strand`].
    ///
    /// # Errors
    ///
    /// [`LinkSendError::TooLarge`] or [`LinkSendError::Closed`], handing the message
    /// back. Success means the message was queued, not that it arrived.
    ///
    /// # Backpressure
    ///
    /// Waits while [`LinkConfig::send_buffer`](crate::LinkConfig::send_buffer) bytes are queued: the driver
    /// takes messages only as fast as the socket (and a `delivery` window)
    /// accepts them, so a peer that never reads makes this wait instead of
    /// growing memory.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before completing, the message
    /// was not queued.
    pub async fn send_on(&self, strand: Strand, message: Bytes) -> Result<(), LinkSendError> {
        let message = self.check_len(message)?;
        let cost = self.shared.cost(message.len());
        // Fast path without the future machinery: room is usually there.
        if let Ok(permit) = self.shared.out_space.try_acquire_many(cost as u32) {
            permit.forget();
            return self.push(strand, message, cost);
        }
        // Boxed: the semaphore's future is large, and the caller moves this
        // future on every send; only a send that waits pays for the box.
        Box::pin(self.send_waiting(strand, message, cost)).await
    }

    async fn send_waiting(
        &self,
        strand: Strand,
        message: Bytes,
        cost: usize,
    ) -> Result<(), LinkSendError> {
        match self.shared.out_space.acquire_many(cost as u32).await {
            Ok(permit) => permit.forget(),
            Err(_) => {
                return Err(LinkSendError::Closed {
                    message,
                    closed: self.shared.closed(),
                })
            }
        }
        self.push(strand, message, cost)
    }

    /// Waits until a message of `len` bytes fits in the send buffer (at
    /// once if it does now), without queuing anything: for a sender that
    /// must not lose a message it can only queue with a `try_send_*` call
    /// (the peer layer routes and numbers frames synchronously). Another
    /// sender may take the room first, so the caller tries its send and
    /// waits again if the buffer is full.
    ///
    /// # Errors
    ///
    /// [`LinkClosed`](crate::LinkClosed) if the link closes meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it takes nothing.
    pub async fn room(&self, len: usize) -> Result<(), crate::LinkClosed> {
        let cost = self.shared.cost(len);
        // Taken and given back at once: the wait is the semaphore's queue,
        // FIFO with other waiting senders.
        match self.shared.out_space.acquire_many(cost as u32).await {
            Ok(_permit) => Ok(()),
            Err(_) => Err(self.shared.closed()),
        }
    }

    /// Queues `message` on [`Strand::ZERO`] if the send buffer has room,
    /// without waiting.
    ///
    /// # Errors
    ///
    /// As [`try_send_on`](LinkSender::try_send_on).
    pub fn try_send(&self, message: Bytes) -> Result<(), LinkTrySendError> {
        self.try_send_on(Strand::ZERO, message)
    }

    /// Queues `message` on `strand` if the send buffer has room, without
    /// waiting.
    ///
    /// # Errors
    ///
    /// [`LinkTrySendError::Full`] when the buffer is full, otherwise as
    /// [`send`](LinkSender::send); the message is handed back.
    pub fn try_send_on(&self, strand: Strand, message: Bytes) -> Result<(), LinkTrySendError> {
        let message = self.check_len(message)?;
        let cost = self.shared.cost(message.len());
        // The closure runs only on failure: the clone is a refcount bump.
        self.take_permits(cost, || message.clone())?;
        self.push(strand, message, cost)?;
        Ok(())
    }

    /// Queues `frame` (a message as a chain of buffers, see
    /// [`try_send_frame_on`](LinkSender::try_send_frame_on)) on `strand`,
    /// waiting while the send buffer is full, as
    /// [`send_on`](LinkSender::send_on) does.
    ///
    /// A frame ending in a file region ([`Frame::from_file`]) is queued as
    /// it is on a link that writes regions (`sendfile`: TCP and Unix
    /// sockets under a stack whose layers all pass them); on any other
    /// link the region is read into memory here first.
    ///
    /// # Errors
    ///
    /// As [`send_on`](LinkSender::send_on); the message is handed back as
    /// one buffer (copied, on this error path only; a file region is not
    /// handed back). [`LinkSendError::FileRegion`] if a region had to be
    /// read and could not be.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before completing, the message
    /// was not queued.
    pub async fn send_frame_on(&self, strand: Strand, frame: Frame) -> Result<(), LinkSendError> {
        if let Some(max) = self.shared.max_message_len {
            if frame.len() > max {
                return Err(LinkSendError::TooLarge {
                    peer: self.shared.peer.clone(),
                    message: frame.to_bytes(),
                    max,
                });
            }
        }
        let frame = self.readable_by_link(frame)?;
        let cost = self.shared.cost(frame.len());
        match self.shared.out_space.acquire_many(cost as u32).await {
            Ok(permit) => permit.forget(),
            Err(_) => {
                return Err(LinkSendError::Closed {
                    message: frame.to_bytes(),
                    closed: self.shared.closed(),
                })
            }
        }
        self.push_frame(strand, frame, cost)
    }

    /// Queues `frame` on `strand` if the send buffer has room, without
    /// waiting: a message as a chain of buffers, for a sender that puts a
    /// header of its own before a payload without copying the payload
    /// ([`Frame::push_header`] on [`Frame::from_payload`]), as an adaptive
    /// lane numbers its frames. The stack sees it as one message.
    ///
    /// A file region is taken as [`send_frame_on`](LinkSender::send_frame_on)
    /// takes it.
    ///
    /// # Errors
    ///
    /// As [`try_send_on`](LinkSender::try_send_on); the message is handed
    /// back as one buffer (copied, on this error path only), and as
    /// [`send_frame_on`](LinkSender::send_frame_on) for a file region.
    pub fn try_send_frame_on(&self, strand: Strand, frame: Frame) -> Result<(), LinkTrySendError> {
        if let Some(max) = self.shared.max_message_len {
            if frame.len() > max {
                return Err(LinkSendError::TooLarge {
                    peer: self.shared.peer.clone(),
                    message: frame.to_bytes(),
                    max,
                }
                .into());
            }
        }
        let frame = self.readable_by_link(frame)?;
        let cost = self.shared.cost(frame.len());
        self.take_permits(cost, || frame.to_bytes())?;
        self.push_frame(strand, frame, cost)?;
        Ok(())
    }

    /// Sends `message` as one unreliable datagram, now, outside the send
    /// buffer. It may be lost, or overtake or be overtaken by any other
    /// message; if it arrives, the peer gets it as an ordinary
    /// [`Received::Message`](crate::Received::Message).
    ///
    /// # Errors
    ///
    /// [`UnreliableError`], handing the message back: the transport has no
    /// datagrams (only [`quic`](crate::quic) has), the peer did not enable
    /// them, the message is larger than one datagram
    /// ([`UnreliableError::TooLarge`] says the current limit), or the link
    /// is closed.
    ///
    /// # Backpressure
    ///
    /// None: when the transport's datagram buffer is full, older datagrams
    /// are dropped.
    pub fn send_unreliable(&self, message: Bytes) -> Result<(), UnreliableError> {
        match &self.shared.extras.unreliable {
            Some(sink) => sink.send(&self.shared.peer, message),
            None => Err(UnreliableError::Unsupported {
                peer: self.shared.peer.clone(),
                message,
            }),
        }
    }

    /// Completes once the link is closed (its transport ended it, or it
    /// failed): every send fails from then on. At once if it is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn closed(&self) {
        loop {
            let notified = self.shared.on_close.notified();
            tokio::pin!(notified);
            // Registered before the check, so a close in between wakes it.
            notified.as_mut().enable();
            if self.shared.out_space.is_closed() {
                return;
            }
            notified.await;
        }
    }

    /// Closes the link gracefully: messages already queued are still sent,
    /// later sends fail, and the transport is shut down once they are out.
    pub fn close(&self) {
        lock(&self.shared.out).close_requested = true;
        (self.shared.wake_driver)();
    }
}

impl Clone for LinkSender {
    fn clone(&self) -> Self {
        Self::new(self.shared.clone())
    }
}

impl Drop for LinkSender {
    fn drop(&mut self) {
        let last = {
            let mut out = lock(&self.shared.out);
            out.senders -= 1;
            out.senders == 0
        };
        if last {
            (self.shared.wake_driver)();
        }
    }
}

impl std::fmt::Debug for LinkSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkSender")
            .field("peer", &self.shared.peer)
            .finish()
    }
}
