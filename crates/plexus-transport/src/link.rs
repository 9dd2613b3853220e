//! [`Link`]: the application's handle on one peer connection, and the
//! bounded queues it shares with the link's driver.
//!
//! ```text
//!  LinkSender ──send──▶ [outbound queue, ≤ send_buffer bytes] ──▶ driver ──▶ Stack ──▶ socket
//!  LinkReceiver ◀─recv── [inbound queue, ≤ recv_buffer bytes] ◀── driver ◀── Stack ◀── socket
//! ```
//!
//! Both queues are a mutex-protected `VecDeque` that each side empties in one
//! batch (one lock per batch, not per message). The outbound queue is bounded
//! by a byte semaphore: a full queue makes [`LinkSender::send`] wait and
//! [`LinkSender::try_send`] fail. The inbound queue is bounded by the driver:
//! once it holds `recv_buffer` bytes the driver stops reading the socket, so a
//! slow application pushes back on the peer through the transport's own
//! flow control (UDP: datagrams are dropped before the stack sees them, and
//! `delivery` retransmits them).
//!
//! # Lanes
//!
//! Every message is sent on a [`Lane`] ([`LinkSender::send_on`]; plain
//! [`send`](LinkSender::send) is [`Lane::ZERO`]). The guarantee is FIFO per
//! lane and no order across lanes. Transports with one ordered byte stream
//! or one ordered stack (`tcp`, `tls`, `uds`, `udp / ... / ordering`, `mem`)
//! carry every lane on it, in the order the messages were queued: there a
//! lane never reorders anything. The [`quic`](crate::quic) transport gives
//! each lane its own QUIC stream, so a large message on one lane does not
//! hold up small ones on another. The lane travels in the outbound queue
//! next to the message (one byte in the queue's slot, no allocation).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll, Waker};

use bytes::{BufMut, Bytes, BytesMut};
use plexus_net::layers::framing::FrameHeader;
use plexus_net::LinkEvent;
use rustls_pki_types::CertificateDer;
use tokio::sync::{Semaphore, TryAcquireError};

use crate::error::{CloseReason, LinkClosed, SendError, TrySendError, UnreliableError};
use crate::identity::PeerIdentity;
use crate::stats::LinkStats;

/// A lane of a link: messages on one lane arrive in the order they were
/// queued; messages on different lanes may overtake each other (on the
/// transports that have several streams per link, i.e. [`quic`](crate::quic)).
/// There are [`Lane::COUNT`] lanes, `0` to `COUNT - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Lane(u8);

impl Lane {
    /// Lanes per link.
    pub const COUNT: usize = 64;
    /// Lane 0: what [`LinkSender::send`] uses.
    pub const ZERO: Lane = Lane(0);

    /// Lane `index`, if below [`Lane::COUNT`].
    pub const fn new(index: u8) -> Option<Lane> {
        if (index as usize) < Self::COUNT {
            Some(Lane(index))
        } else {
            None
        }
    }

    /// One of the lanes `1..COUNT` chosen by `key` (e.g. a hash of a pair of
    /// actors): equal keys give equal lanes, and lane 0 is left for traffic
    /// that belongs to no key.
    pub const fn for_key(key: u64) -> Lane {
        // Fibonacci hashing spreads sequential keys over the lanes.
        let mixed = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        Lane(1 + (mixed % (Self::COUNT as u64 - 1)) as u8)
    }

    /// The lane's number, `0..COUNT`.
    pub const fn index(self) -> u8 {
        self.0
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lane {}", self.0)
    }
}

/// Bookkeeping bytes charged per queued message on top of its length, so a
/// flood of empty messages is bounded too.
pub(crate) const MESSAGE_OVERHEAD: usize = 64;

/// On an inline-framing link, messages up to this length are copied into
/// the staging buffer; longer ones are queued as they are (no copy).
const INLINE_COPY_MAX: usize = 1024;
/// Staging buffer grown by at least this much at a time.
const STAGING_CHUNK: usize = 64 << 10;

/// Per-link buffer sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// Bytes of messages (plus 64 bytes each) accepted by
    /// [`LinkSender::send`] and not yet taken by the driver. Default 1 MiB.
    /// A full buffer makes `send` wait and `try_send` fail.
    pub send_buffer: usize,
    /// Bytes of received messages (plus 64 bytes each) waiting for
    /// [`LinkReceiver::recv`] before the driver stops reading. Default 1 MiB.
    /// Soft bound: the messages a single read releases are always queued (at
    /// most one read buffer's worth, or what the stack's ordering layer
    /// releases at once).
    pub recv_buffer: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            send_buffer: 1 << 20,
            recv_buffer: 1 << 20,
        }
    }
}

/// What a link hands the application.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// A whole message, byte-identical to what the peer sent.
    Message(Bytes),
    /// A stack event (heartbeat suspicion, skipped gap, delivery failure).
    Event(LinkEvent),
}

/// Wakes the driver that serves a link.
pub(crate) type DriverWaker = Box<dyn Fn() + Send + Sync>;

pub(crate) struct OutState {
    /// Messages with their lane; on an inline-framing link, wire bytes
    /// (already framed, all on lane 0) instead.
    pub(crate) queue: VecDeque<(Lane, Bytes)>,
    /// Inline framing: small messages framed and copied here, behind
    /// `queue`, until the driver takes them as one chunk.
    pub(crate) staging: BytesMut,
    /// Inline framing: messages in `queue` and `staging` since the driver
    /// last took them (for the stack's counters).
    pub(crate) inline_messages: u64,
    /// Inline framing: bytes queued beyond the permits taken for them (a
    /// message larger than the whole send buffer is charged the buffer);
    /// the driver returns that many fewer permits.
    pub(crate) uncharged: usize,
    /// The driver found the queue empty and waits for a push.
    pub(crate) driver_waiting: bool,
    pub(crate) senders: usize,
    /// [`Link::close`] was called.
    pub(crate) close_requested: bool,
}

pub(crate) struct InState {
    pub(crate) queue: VecDeque<Received>,
    pub(crate) bytes: usize,
    pub(crate) closed: Option<LinkClosed>,
    /// The receiver found the queue empty and waits to be woken by a push
    /// or the close. Taken by whoever wakes it.
    pub(crate) receiver: Option<Waker>,
    /// The driver stopped reading because the queue is full.
    pub(crate) driver_waiting: bool,
    pub(crate) receiver_alive: bool,
}

/// State shared by a link's handles and its driver.
pub(crate) struct Shared {
    pub(crate) peer: Arc<str>,
    pub(crate) max_message_len: Option<usize>,
    /// Senders frame messages themselves (`len | payload`) into the
    /// outbound queue: the stack is plain `framing`
    /// ([`Stack::frames_inline`](plexus_net::Stack::frames_inline)) and the
    /// driver writes the queue's bytes as they are.
    pub(crate) inline_framing: bool,
    pub(crate) config: LinkConfig,
    pub(crate) wake_driver: DriverWaker,
    pub(crate) extras: Extras,
    // Each on its own cache lines: the sender, the driver and the receiver
    // update them from different threads, and must not also invalidate the
    // read-only fields above (read on every send) or each other.
    pub(crate) out: CachePadded<Mutex<OutState>>,
    /// Byte permits for the outbound queue.
    pub(crate) out_space: CachePadded<Semaphore>,
    pub(crate) inb: CachePadded<Mutex<InState>>,
    /// Refreshed by the driver when the stack drops a frame.
    pub(crate) stats: Mutex<LinkStats>,
}

/// What some transports add to a link: the peer's certificate (QUIC) and
/// a way to send unreliable datagrams (QUIC).
#[derive(Default)]
pub(crate) struct Extras {
    pub(crate) unreliable: Option<Box<dyn UnreliableSink>>,
}

/// Sends a message as one unreliable datagram, right away.
pub(crate) trait UnreliableSink: Send + Sync {
    fn send(&self, peer: &Arc<str>, message: Bytes) -> Result<(), UnreliableError>;
}

/// `T` alone on its cache lines (128 bytes: two lines, for the adjacent-line
/// prefetcher).
#[repr(align(128))]
pub(crate) struct CachePadded<T>(T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// Locks `m`; a poisoned lock only means another thread panicked while
/// holding it, and the queues stay consistent at every await-free step.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn new(
        peer: Arc<str>,
        max_message_len: Option<usize>,
        inline_framing: bool,
        config: LinkConfig,
        wake_driver: DriverWaker,
    ) -> Arc<Self> {
        Self::with_extras(
            peer,
            max_message_len,
            inline_framing,
            config,
            wake_driver,
            Extras::default(),
        )
    }

    pub(crate) fn with_extras(
        peer: Arc<str>,
        max_message_len: Option<usize>,
        inline_framing: bool,
        config: LinkConfig,
        wake_driver: DriverWaker,
        extras: Extras,
    ) -> Arc<Self> {
        let send_buffer = config
            .send_buffer
            .clamp(MESSAGE_OVERHEAD, u32::MAX as usize);
        Arc::new(Self {
            peer,
            max_message_len,
            inline_framing,
            config: LinkConfig {
                send_buffer,
                ..config
            },
            out: CachePadded(Mutex::new(OutState {
                queue: VecDeque::with_capacity(256),
                staging: BytesMut::new(),
                inline_messages: 0,
                uncharged: 0,
                driver_waiting: false,
                senders: 0,
                close_requested: false,
            })),
            out_space: CachePadded(Semaphore::new(send_buffer)),
            inb: CachePadded(Mutex::new(InState {
                queue: VecDeque::with_capacity(256),
                bytes: 0,
                closed: None,
                receiver: None,
                driver_waiting: false,
                receiver_alive: true,
            })),
            wake_driver,
            stats: Mutex::default(),
            extras,
        })
    }

    /// Permits a message of `len` bytes costs: its queue entry, or on an
    /// inline-framing link its wire bytes (a small message there has no
    /// entry of its own).
    pub(crate) fn cost(&self, len: usize) -> usize {
        let queued = if self.inline_framing {
            len + FrameHeader::LEN
        } else {
            len + MESSAGE_OVERHEAD
        };
        queued.min(self.config.send_buffer)
    }

    /// Marks the link closed for its handles: receivers get `reason` after
    /// the queued messages, senders get [`SendError::Closed`]. Returns how
    /// many accepted messages were never sent. The first reason wins.
    pub(crate) fn close(&self, reason: CloseReason) -> usize {
        self.close_inbound(reason);
        self.out_space.close();
        let unsent = {
            let mut out = lock(&self.out);
            out.staging.clear();
            let unsent = if self.inline_framing {
                out.inline_messages as usize
            } else {
                out.queue.len()
            };
            out.queue.clear();
            unsent
        };
        if unsent > 0 {
            tracing::warn!(peer = %self.peer, unsent, "link closed with messages not sent");
        }
        unsent
    }

    /// Marks the inbound side closed (the first reason wins) and wakes the
    /// receiver: it gets the reason after the queued messages.
    pub(crate) fn close_inbound(&self, reason: CloseReason) {
        let receiver = {
            let mut inb = lock(&self.inb);
            if inb.closed.is_none() {
                inb.closed = Some(LinkClosed {
                    peer: self.peer.clone(),
                    reason,
                });
            }
            inb.receiver.take()
        };
        if let Some(receiver) = receiver {
            receiver.wake();
        }
    }

    pub(crate) fn closed(&self) -> LinkClosed {
        lock(&self.inb)
            .closed
            .clone()
            .unwrap_or_else(|| LinkClosed {
                peer: self.peer.clone(),
                reason: CloseReason::Local,
            })
    }
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
        if self.shared.inline_framing {
            return self.push_inline(Payload::Owned(message), cost);
        }
        let wake = {
            let mut out = lock(&self.shared.out);
            out.queue.push_back((lane, message));
            std::mem::take(&mut out.driver_waiting)
        };
        if wake {
            (self.shared.wake_driver)();
        }
    }

    /// Inline framing: appends `len | payload` behind what is queued. A small
    /// payload is copied into the staging buffer (one chunk for the driver
    /// however many messages it holds); a large one is queued as it is,
    /// after the staged bytes and its header.
    fn push_inline(&self, payload: Payload<'_>, cost: usize) {
        let len = payload.len();
        let header = FrameHeader { len: len as u32 }.emit();
        let wake = {
            let mut out = lock(&self.shared.out);
            let out = &mut *out;
            if len <= INLINE_COPY_MAX {
                if out.staging.capacity() - out.staging.len() < FrameHeader::LEN + len {
                    out.staging.reserve(STAGING_CHUNK);
                }
                out.staging.put_slice(&header);
                out.staging.put_slice(payload.as_slice());
            } else {
                out.staging.put_slice(&header);
                let staged = out.staging.split().freeze();
                out.queue.push_back((Lane::ZERO, staged));
                out.queue.push_back((Lane::ZERO, payload.into_bytes()));
            }
            out.inline_messages += 1;
            out.uncharged += (FrameHeader::LEN + len) - cost;
            std::mem::take(&mut out.driver_waiting)
        };
        if wake {
            (self.shared.wake_driver)();
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
        if !self.shared.inline_framing {
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
        self.push_inline(Payload::Borrowed(message), cost);
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
    /// Waits while [`LinkConfig::send_buffer`] bytes are queued: the driver
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
    /// [`Received::Message`].
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

/// The receiving half of a link.
pub struct LinkReceiver {
    shared: Arc<Shared>,
    /// A batch taken from the shared queue in one lock.
    local: VecDeque<Received>,
}

impl LinkReceiver {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            local: VecDeque::with_capacity(256),
        }
    }

    /// The peer address, with its scheme.
    pub fn peer(&self) -> &str {
        &self.shared.peer
    }

    /// The next message or event, waiting until one arrives.
    ///
    /// # Errors
    ///
    /// [`LinkClosed`] once the link is closed and everything that arrived
    /// before has been received; every later call returns it again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is lost if the future is dropped.
    pub async fn recv(&mut self) -> Result<Received, LinkClosed> {
        // A hand-written poll keeps the future a pointer wide (the caller
        // moves it on every call).
        poll_fn(|cx| loop {
            if let Some(item) = self.local.pop_front() {
                return Poll::Ready(Ok(item));
            }
            if let Err(closed) = ready!(self.poll_refill(cx)) {
                return Poll::Ready(Err(closed));
            }
        })
        .await
    }

    /// Takes the shared queue's batch into `local`: `Ready(Ok)` once
    /// `local` is non-empty, `Ready(Err)` once the link is closed and
    /// drained, `Pending` (waker registered) otherwise.
    fn poll_refill(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), LinkClosed>> {
        let wake_driver = {
            let mut inb = lock(&self.shared.inb);
            std::mem::swap(&mut inb.queue, &mut self.local);
            inb.bytes = 0;
            if self.local.is_empty() {
                if let Some(closed) = &inb.closed {
                    return Poll::Ready(Err(closed.clone()));
                }
                // Registered under the lock the driver pushes under: no
                // push can slip between the check and the registration.
                match &mut inb.receiver {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
            }
            std::mem::take(&mut inb.driver_waiting)
        };
        if wake_driver {
            (self.shared.wake_driver)();
        }
        if self.local.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }

    /// The next message, skipping events (each skipped event is logged at
    /// debug level). For applications that do not watch link events.
    ///
    /// # Errors
    ///
    /// As [`recv`](LinkReceiver::recv).
    pub async fn recv_message(&mut self) -> Result<Bytes, LinkClosed> {
        poll_fn(|cx| loop {
            match self.local.pop_front() {
                Some(Received::Message(m)) => return Poll::Ready(Ok(m)),
                Some(Received::Event(event)) => {
                    tracing::debug!(peer = %self.shared.peer, ?event, "link event skipped");
                }
                None => {
                    if let Err(closed) = ready!(self.poll_refill(cx)) {
                        return Poll::Ready(Err(closed));
                    }
                }
            }
        })
        .await
    }
}

impl Drop for LinkReceiver {
    fn drop(&mut self) {
        {
            let mut inb = lock(&self.shared.inb);
            inb.receiver_alive = false;
            inb.queue.clear();
            inb.bytes = 0;
        }
        (self.shared.wake_driver)();
    }
}

impl std::fmt::Debug for LinkReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkReceiver")
            .field("peer", &self.shared.peer)
            .finish()
    }
}

/// A connection to one peer: send whole messages, receive whole messages
/// and [`LinkEvent`]s. [`split`](Link::split) it to send and receive from
/// different tasks.
///
/// The link's driver task runs until the link closes: when the peer closes,
/// the stack fails (corrupt input, delivery failure), the socket fails, or
/// every handle is dropped (after queued messages are sent).
#[derive(Debug)]
pub struct Link {
    sender: LinkSender,
    receiver: LinkReceiver,
    identity: Option<Arc<PeerIdentity>>,
}

impl Link {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            sender: LinkSender::new(shared.clone()),
            receiver: LinkReceiver::new(shared),
            identity: None,
        }
    }

    /// The link with what its transport authenticated about the peer.
    pub(crate) fn with_identity(mut self, identity: PeerIdentity) -> Self {
        self.identity = Some(Arc::new(identity));
        self
    }

    /// What the transport authenticated about the peer: on `tls` links its
    /// certificate (verified against the CA roots) and the node id it
    /// certifies; `None` on transports that authenticate nobody (tcp, udp,
    /// uds, mem). The node handshake checks the id the peer claims against
    /// it. Read it before [`split`](Link::split): the halves do not carry
    /// it.
    pub fn peer_identity(&self) -> Option<&PeerIdentity> {
        self.identity.as_deref()
    }

    /// The peer's certificate, on links whose transport verified one
    /// (see [`peer_identity`](Link::peer_identity)).
    pub fn peer_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.identity.as_deref().map(|i| &i.certificate)
    }

    /// The peer address, with its scheme (`udp://127.0.0.1:4001`).
    pub fn peer(&self) -> &str {
        self.sender.peer()
    }

    /// See [`LinkSender::max_message_len`].
    pub fn max_message_len(&self) -> Option<usize> {
        self.sender.max_message_len()
    }

    /// See [`LinkSender::stats`].
    pub fn stats(&self) -> LinkStats {
        self.sender.stats()
    }

    /// See [`LinkSender::send`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::send`].
    pub async fn send(&self, message: Bytes) -> Result<(), SendError> {
        self.sender.send(message).await
    }

    /// See [`LinkSender::try_send`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::try_send`].
    pub fn try_send(&self, message: Bytes) -> Result<(), TrySendError> {
        self.sender.try_send(message)
    }

    /// See [`LinkSender::try_send_copy`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::try_send`].
    pub fn try_send_copy(&self, message: &[u8]) -> Result<(), TrySendError> {
        self.sender.try_send_copy(message)
    }

    /// See [`LinkSender::send_on`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::send_on`].
    pub async fn send_on(&self, lane: Lane, message: Bytes) -> Result<(), SendError> {
        self.sender.send_on(lane, message).await
    }

    /// See [`LinkSender::try_send_on`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::try_send_on`].
    pub fn try_send_on(&self, lane: Lane, message: Bytes) -> Result<(), TrySendError> {
        self.sender.try_send_on(lane, message)
    }

    /// See [`LinkSender::send_unreliable`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::send_unreliable`].
    pub fn send_unreliable(&self, message: Bytes) -> Result<(), UnreliableError> {
        self.sender.send_unreliable(message)
    }

    /// See [`LinkReceiver::recv`].
    ///
    /// # Errors
    ///
    /// As [`LinkReceiver::recv`].
    pub async fn recv(&mut self) -> Result<Received, LinkClosed> {
        self.receiver.recv().await
    }

    /// See [`LinkReceiver::recv_message`].
    ///
    /// # Errors
    ///
    /// As [`LinkReceiver::recv`].
    pub async fn recv_message(&mut self) -> Result<Bytes, LinkClosed> {
        self.receiver.recv_message().await
    }

    /// See [`LinkSender::close`].
    pub fn close(&self) {
        self.sender.close();
    }

    /// The two halves, to send and receive from different tasks.
    pub fn split(self) -> (LinkSender, LinkReceiver) {
        (self.sender, self.receiver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_for_keys_stay_in_range_and_spare_lane_zero() {
        let mut used = [false; Lane::COUNT];
        for key in (0..10_000u64).chain([u64::MAX, u64::MAX - 1, 1 << 63]) {
            let lane = Lane::for_key(key);
            assert!(lane.index() >= 1 && usize::from(lane.index()) < Lane::COUNT);
            assert_eq!(lane, Lane::for_key(key), "same key, same lane");
            used[usize::from(lane.index())] = true;
        }
        assert!(
            used[1..].iter().all(|&u| u),
            "sequential keys reach every lane"
        );
        assert_eq!(Lane::new(63).map(Lane::index), Some(63));
        assert_eq!(Lane::new(64), None);
    }

    #[test]
    fn the_outbound_queue_slot_stays_small() {
        // The lane rides next to the message in the queue: no allocation,
        // one slot of at most 40 bytes.
        assert!(std::mem::size_of::<(Lane, Bytes)>() <= 40);
    }
}
