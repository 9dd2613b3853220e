//! [`LinkSender`]: the sending half of a link, and the inline paths: on
//! plain `framing` stream links senders write `len | payload` straight into
//! the bytes the driver writes, or, while the driver is idle after a turn
//! that received, to the socket itself (see `stream`); on links whose
//! stack ends in `batching` they write the batches in that layer's wire
//! format.

use std::io::IoSlice;
use std::sync::{Arc, MutexGuard};

use bytes::{BufMut, Bytes, BytesMut};
use plexus_net::layers::batching;
use plexus_net::layers::framing::FrameHeader;
use tokio::sync::TryAcquireError;

use super::{lock, Chunk, Inline, Lane, OutState, Shared};
use crate::error::{SendError, TrySendError, UnreliableError};
use crate::stats::LinkStats;

/// On an inline-framing link, messages up to this length are copied into
/// the staging buffer; longer ones are queued as they are (no copy).
const INLINE_COPY_MAX: usize = 1024;
/// Staging buffer grown by at least this much at a time.
const STAGING_CHUNK: usize = 64 << 10;

/// How far a direct write got.
enum Direct {
    Written,
    /// Bytes written before the socket would block (or failed).
    Partly(usize),
}

/// A message for [`LinkSender::push_inline`]: borrowed from the caller's
/// scratch buffer, or owned.
enum Payload<'a> {
    Borrowed(&'a [u8]),
    Owned(Bytes),
}

impl Payload<'_> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Borrowed(b) => b,
            Payload::Owned(b) => b,
        }
    }

    /// The bytes from `from` on, copying only those of a borrowed payload.
    fn tail(self, from: usize) -> Bytes {
        match self {
            Payload::Borrowed(b) => Bytes::copy_from_slice(&b[from..]),
            Payload::Owned(b) => b.slice(from..),
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Payload::Borrowed(b) => Bytes::copy_from_slice(b),
            Payload::Owned(b) => b,
        }
    }
}

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

    /// What the link's stack dropped so far (see [`LinkStats`]).
    pub fn stats(&self) -> LinkStats {
        *lock(&self.shared.stats)
    }

    fn check_len(&self, message: Bytes) -> Result<Bytes, SendError> {
        match self.shared.max_message_len {
            Some(max) if message.len() > max => Err(SendError::TooLarge {
                peer: self.shared.peer.clone(),
                message,
                max,
            }),
            _ => Ok(message),
        }
    }

    /// Queues a message on `lane` whose permits (`cost`) were taken.
    fn push(&self, lane: Lane, message: Bytes, cost: usize) {
        match self.shared.inline {
            Inline::Framing => return self.push_inline(Lane::ZERO, Payload::Owned(message), cost),
            Inline::Lanes => return self.push_inline(lane, Payload::Owned(message), cost),
            Inline::Batching(max) => return self.push_batched(Payload::Owned(message), cost, max),
            Inline::Off => {}
        }
        let wake = {
            let mut out = lock(&self.shared.out);
            out.queue.push_back((lane, message));
            std::mem::take(&mut out.driver_waiting)
        };
        if wake {
            self.shared.wake_for_send();
        }
    }

    /// Inline framing: appends `len | payload` behind what is queued. A small
    /// payload is copied into the staging buffer (one chunk for the driver
    /// however many messages it holds); a large one is queued as it is,
    /// after the staged bytes and its header.
    fn push_inline(&self, lane: Lane, payload: Payload<'_>, cost: usize) {
        let len = payload.len();
        let header = FrameHeader { len: len as u32 }.emit();
        let wake = {
            let mut guard = lock(&self.shared.out);
            if guard.write_idle && guard.direct.is_some() {
                match Self::write_direct(&mut guard, &header, payload.as_slice()) {
                    Direct::Written => {
                        drop(guard);
                        self.shared.out_space.add_permits(cost);
                        return;
                    }
                    Direct::Partly(written) => {
                        return self.queue_rest(guard, &header, payload, written, cost);
                    }
                }
            }
            // QUIC, with the driver idle: straight to the lane's writer,
            // one message per window as above.
            let to_lane =
                guard.write_idle && guard.lane_writers.as_ref().is_some_and(|w| w.has(lane));
            guard.write_idle = false;
            if to_lane {
                match Self::hand_to_lane(&mut guard, lane, &header, payload, cost) {
                    None => return,
                    Some(wake) => wake,
                }
            } else {
                self.stage(&mut guard, lane, &header, payload, cost)
            }
        };
        if wake {
            (self.shared.wake_driver)();
        }
    }

    /// QUIC: hands `header | payload` to `lane`'s writer (which the caller
    /// checked exists). `Some(wake)` if there was none after all (its
    /// writer ended: the connection failed): the message is queued for the
    /// driver instead, which finds out and counts it unsent.
    fn hand_to_lane(
        out: &mut OutState,
        lane: Lane,
        header: &[u8],
        payload: Payload<'_>,
        cost: usize,
    ) -> Option<bool> {
        let len = payload.len();
        let chunks = if len <= INLINE_COPY_MAX {
            let mut wire = BytesMut::with_capacity(FrameHeader::LEN + len);
            wire.put_slice(header);
            wire.put_slice(payload.as_slice());
            vec![wire.freeze()]
        } else {
            vec![Bytes::copy_from_slice(header), payload.into_bytes()]
        };
        let handed = match &out.lane_writers {
            Some(writers) => writers.send(lane, chunks, cost),
            None => Err(chunks),
        };
        let chunks = handed.err()?;
        out.queue.extend(chunks.into_iter().map(|c| (lane, c)));
        Some(Self::count_queued(out, len, cost))
    }

    /// Inline framing: counts a framed message of `len` bytes, charged
    /// `cost`, that was queued for the driver; returns whether the driver
    /// waits for it.
    fn count_queued(out: &mut OutState, len: usize, cost: usize) -> bool {
        out.inline_messages += 1;
        out.uncharged += (FrameHeader::LEN + len) - cost;
        std::mem::take(&mut out.driver_waiting)
    }

    /// Inline framing: appends `header | payload` to the staging buffer (a
    /// large payload as a queue entry of its own, after it); returns
    /// whether the driver waits for it.
    fn stage(
        &self,
        out: &mut OutState,
        lane: Lane,
        header: &[u8],
        payload: Payload<'_>,
        cost: usize,
    ) -> bool {
        let len = payload.len();
        if out.staging_lane != lane {
            // Per-lane framing: the staged bytes are another lane's.
            if !out.staging.is_empty() {
                let staged = out.staging.split().freeze();
                out.queue.push_back((out.staging_lane, staged));
            }
            out.staging_lane = lane;
        }
        if len <= INLINE_COPY_MAX {
            if out.staging.capacity() - out.staging.len() < FrameHeader::LEN + len {
                out.staging.reserve(STAGING_CHUNK);
            }
            out.staging.put_slice(header);
            out.staging.put_slice(payload.as_slice());
        } else {
            out.staging.put_slice(header);
            let staged = out.staging.split().freeze();
            out.queue.push_back((lane, staged));
            out.queue.push_back((lane, payload.into_bytes()));
        }
        if self.shared.inline == Inline::Lanes && out.staging.len() >= STAGING_CHUNK {
            // Staged small messages leave in chunks below QUIC's bulk
            // size, so only a large message's own payload counts as bulk.
            let staged = out.staging.split().freeze();
            out.queue.push_back((lane, staged));
        }
        Self::count_queued(out, len, cost)
    }

    /// Writes `header | payload` to the socket through the driver's idle
    /// window (`OutState::write_idle`, which the caller checked).
    fn write_direct(out: &mut OutState, header: &[u8], payload: &[u8]) -> Direct {
        // One message per window, whatever happens to it: the messages
        // after it are queued and leave together in one write (a sender in
        // a tight loop would otherwise pay a system call for each). The
        // driver opens the window again after its next turn that receives,
        // with nothing left to send.
        out.write_idle = false;
        let Some(socket) = &out.direct else {
            return Direct::Partly(0);
        };
        let total = header.len() + payload.len();
        match socket.write(&[IoSlice::new(header), IoSlice::new(payload)]) {
            Ok((n, true)) if n == total => {
                out.direct_messages += 1;
                Direct::Written
            }
            // Taken in part, or (TLS) sealed but not all written: the
            // driver writes the rest.
            Ok((n, _)) => Direct::Partly(n),
            // Would block, or failed: the driver writes it and, on an
            // error, finds it and closes the link.
            Err(_) => Direct::Partly(0),
        }
    }

    /// Queues what a direct write left of `header | payload` (its first
    /// `written` bytes were taken) for the driver, and wakes it.
    fn queue_rest(
        &self,
        mut out: MutexGuard<'_, OutState>,
        header: &[u8],
        payload: Payload<'_>,
        written: usize,
        cost: usize,
    ) {
        let total = header.len() + payload.len();
        let rest = total - written;
        if rest == 0 {
            // TLS sealed it all but could not write every record: the
            // driver writes them (it checks for records before it waits).
            out.direct_messages += 1;
            drop(out);
            self.shared.out_space.add_permits(cost);
            (self.shared.wake_driver)();
            return;
        }
        let (head, body) = (
            &header[written.min(header.len())..],
            written.saturating_sub(header.len()),
        );
        if payload.len() - body <= INLINE_COPY_MAX {
            out.staging.reserve(rest);
            out.staging.put_slice(head);
            out.staging.put_slice(&payload.as_slice()[body..]);
        } else {
            out.staging.put_slice(head);
            let staged = out.staging.split().freeze();
            out.queue.push_back((Lane::ZERO, staged));
            out.queue.push_back((Lane::ZERO, payload.tail(body)));
        }
        out.inline_messages += 1;
        // The driver returns a permit per byte it takes, less `uncharged`.
        let refund = if rest >= cost {
            out.uncharged += rest - cost;
            0
        } else {
            cost - rest
        };
        let wake = std::mem::take(&mut out.driver_waiting);
        drop(out);
        if refund > 0 {
            self.shared.out_space.add_permits(refund);
        }
        if wake {
            (self.shared.wake_driver)();
        }
    }

    /// Inline batching: appends the message as a record of the open batch
    /// in the staging buffer, closing the batch first if the record does
    /// not fit; a message that cannot share a batch (empty, too large) is
    /// queued on its own, after the open batch.
    fn push_batched(&self, payload: Payload<'_>, cost: usize, max_batch: usize) {
        let len = payload.len();
        let wake = {
            let mut out = lock(&self.shared.out);
            let out = &mut *out;
            if batching::batchable(len, max_batch) {
                let record = batching::record_len(len);
                if !out.staging.is_empty() && out.staging.len() + record > max_batch {
                    out.close_batch();
                }
                if out.staging.is_empty() {
                    if out.staging.capacity() < max_batch {
                        out.staging.reserve(STAGING_CHUNK.max(max_batch));
                    }
                    out.staging.put_u8(batching::BATCH);
                }
                batching::put_record(&mut out.staging, payload.as_slice());
                out.staging_permits += cost;
                out.staging_messages += 1;
            } else {
                out.close_batch();
                out.chunks.push_back(Chunk {
                    bytes: payload.into_bytes(),
                    permits: cost,
                    messages: 0,
                });
            }
            std::mem::take(&mut out.driver_waiting)
        };
        if wake {
            self.shared.wake_for_send();
        }
    }

    /// [`try_send_copy_on`](LinkSender::try_send_copy_on) [`Lane::ZERO`].
    ///
    /// # Errors
    ///
    /// As [`try_send`](LinkSender::try_send), handing back a copy.
    pub fn try_send_copy(&self, message: &[u8]) -> Result<(), TrySendError> {
        self.try_send_copy_on(Lane::ZERO, message)
    }

    /// Queues a copy of `message` on `lane` if the send buffer has room,
    /// without waiting: for callers that encode into a reused scratch
    /// buffer. On a plain `framing` stream link the bytes are copied once,
    /// straight into the bytes the driver writes; elsewhere into a new
    /// [`Bytes`].
    ///
    /// # Errors
    ///
    /// As [`try_send`](LinkSender::try_send), handing back a copy.
    pub fn try_send_copy_on(&self, lane: Lane, message: &[u8]) -> Result<(), TrySendError> {
        if self.shared.inline == Inline::Off {
            return self.try_send_on(lane, Bytes::copy_from_slice(message));
        }
        if let Some(max) = self.shared.max_message_len {
            if message.len() > max {
                return Err(SendError::TooLarge {
                    peer: self.shared.peer.clone(),
                    message: Bytes::copy_from_slice(message),
                    max,
                }
                .into());
            }
        }
        let cost = self.shared.cost(message.len());
        self.take_permits(cost, || Bytes::copy_from_slice(message))?;
        match self.shared.inline {
            Inline::Batching(max) => self.push_batched(Payload::Borrowed(message), cost, max),
            Inline::Lanes => self.push_inline(lane, Payload::Borrowed(message), cost),
            _ => self.push_inline(Lane::ZERO, Payload::Borrowed(message), cost),
        }
        Ok(())
    }

    /// Takes `cost` permits without waiting; on failure hands back the
    /// message `make` builds.
    fn take_permits(&self, cost: usize, make: impl FnOnce() -> Bytes) -> Result<(), TrySendError> {
        match self.shared.out_space.try_acquire_many(cost as u32) {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(TryAcquireError::NoPermits) => Err(TrySendError::Full {
                peer: self.shared.peer.clone(),
                message: make(),
            }),
            Err(TryAcquireError::Closed) => Err(SendError::Closed {
                message: make(),
                closed: self.shared.closed(),
            }
            .into()),
        }
    }

    /// Queues `message` for the peer on [`Lane::ZERO`], waiting while the
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
    pub async fn send(&self, message: Bytes) -> Result<(), SendError> {
        self.send_on(Lane::ZERO, message).await
    }

    /// Queues `message` for the peer on `lane`, waiting while the send
    /// buffer is full. Messages on one lane arrive in order; see [`Lane`].
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`] or [`SendError::Closed`], handing the message
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
    pub async fn send_on(&self, lane: Lane, message: Bytes) -> Result<(), SendError> {
        let message = self.check_len(message)?;
        let cost = self.shared.cost(message.len());
        // Fast path without the future machinery: room is usually there.
        if let Ok(permit) = self.shared.out_space.try_acquire_many(cost as u32) {
            permit.forget();
            self.push(lane, message, cost);
            return Ok(());
        }
        // Boxed: the semaphore's future is large, and the caller moves this
        // future on every send; only a send that waits pays for the box.
        Box::pin(self.send_waiting(lane, message, cost)).await
    }

    async fn send_waiting(&self, lane: Lane, message: Bytes, cost: usize) -> Result<(), SendError> {
        match self.shared.out_space.acquire_many(cost as u32).await {
            Ok(permit) => permit.forget(),
            Err(_) => {
                return Err(SendError::Closed {
                    message,
                    closed: self.shared.closed(),
                })
            }
        }
        self.push(lane, message, cost);
        Ok(())
    }

    /// Queues `message` on [`Lane::ZERO`] if the send buffer has room,
    /// without waiting.
    ///
    /// # Errors
    ///
    /// As [`try_send_on`](LinkSender::try_send_on).
    pub fn try_send(&self, message: Bytes) -> Result<(), TrySendError> {
        self.try_send_on(Lane::ZERO, message)
    }

    /// Queues `message` on `lane` if the send buffer has room, without
    /// waiting.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when the buffer is full, otherwise as
    /// [`send`](LinkSender::send); the message is handed back.
    pub fn try_send_on(&self, lane: Lane, message: Bytes) -> Result<(), TrySendError> {
        let message = self.check_len(message)?;
        let cost = self.shared.cost(message.len());
        // The closure runs only on failure: the clone is a refcount bump.
        self.take_permits(cost, || message.clone())?;
        self.push(lane, message, cost);
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

    /// Closes the link gracefully: messages already queued are still sent,
    /// later sends fail, and the transport is shut down once they are out.
    pub fn close(&self) {
        {
            let mut out = lock(&self.shared.out);
            out.close_requested = true;
            // From here on everything goes through the driver, which shuts
            // the socket down once the queue is empty.
            out.write_idle = false;
        }
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
