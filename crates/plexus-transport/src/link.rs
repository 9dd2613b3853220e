//! [`Link`]: the application's handle on one peer connection, and the
//! bounded queues it shares with the link's driver.
//!
//! ```text
//!  LinkSender ──send──▶ [outbound queue, ≤ send_buffer bytes] ──▶ driver or sender ──▶ Stack ──▶ socket
//!  LinkReceiver ◀─recv── [inbound queue, ≤ recv_buffer bytes] ◀── driver ◀── Stack ◀── socket
//! ```
//!
//! One path: every message goes through the link's stack
//! (`handle_send`, `poll_transmit`), whichever task drives it. A sender
//! whose message the driver waits for may take the driver's turn itself
//! ([`SenderTurn`]), so a reply needs no task hand-off, whatever the
//! stack's layers.
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
//! # Strands
//!
//! Every message is sent on a [`Strand`] ([`LinkSender::send_on`]; plain
//! [`send`](LinkSender::send) is [`Strand::ZERO`]). The guarantee is FIFO per
//! strand and no order across strands. Transports with one ordered byte stream
//! or one ordered stack (`tcp`, `tls`, `uds`, `udp / ... / ordering`, `mem`)
//! carry every strand on it, in the order the messages were queued: there a
//! strand never reorders anything. The [`quic`](crate::quic) transport gives
//! each strand its own QUIC stream, so a large message on one strand does not
//! hold up small ones on another. The strand travels in the outbound queue
//! next to the message (one byte in the queue's slot, no allocation).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use bytes::Bytes;
use plexus_net::LinkEvent;
use rustls_pki_types::CertificateDer;
use tokio::sync::{Notify, Semaphore};

use crate::error::{CloseReason, LinkClosed, LinkSendError, LinkTrySendError, UnreliableError};
use crate::stats::LinkStats;
pub use crate::strand::Strand;

mod out_queue;
mod receiver;
mod sender;
#[cfg(test)]
mod tests;

pub(crate) use out_queue::{OutQueue, PACK_MESSAGE_MAX};
pub use receiver::{DriverReceive, LinkReceiver};
pub use sender::LinkSender;

/// Bookkeeping bytes charged per queued message on top of its length, so a
/// flood of empty messages is bounded too (a queue entry is a strand and a
/// [`Frame`], about this much).
pub(crate) const MESSAGE_OVERHEAD: usize = 128;

/// Permits a message of `len` bytes costs of a send buffer of
/// `send_buffer` bytes ([`Shared::cost`]).
pub(crate) fn cost(len: usize, send_buffer: usize) -> usize {
    (len + MESSAGE_OVERHEAD).min(send_buffer)
}

/// Messages a link's queues hold before they first grow. Small: a link
/// that carries one request (a web server's connection) should not pay for
/// a streaming link's queues; a streaming one grows them once, then reuses
/// them.
pub(crate) const INITIAL_QUEUE: usize = 16;

/// Messages queued in a row, without the driver taking them, after which
/// a sender offers to take the driver's turn (`LinkSender::push_frame`).
pub(crate) const TURN_DEPTH: usize = 64;

/// Per-link buffer sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// Bytes of messages (plus 128 bytes each for a queue entry) accepted by
    /// [`LinkSender::send`] and not yet taken by the driver. Default 1 MiB.
    /// A full buffer makes `send` wait and `try_send` fail.
    pub send_buffer: usize,
    /// Bytes of received messages (plus 128 bytes each) waiting for
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

/// Bytes `items` are charged in the inbound queue: each message's length
/// plus [`MESSAGE_OVERHEAD`] per entry.
fn queued_bytes(items: &VecDeque<Received>) -> usize {
    items
        .iter()
        .map(|r| match r {
            Received::Message(m) => m.len() + MESSAGE_OVERHEAD,
            Received::Event(_) => MESSAGE_OVERHEAD,
        })
        .sum()
}

/// What [`Shared::hand_over`] left: whether the receiver is alive, and
/// whether the inbound queue is full.
pub(crate) struct HandedOver {
    pub(crate) receiver_alive: bool,
    pub(crate) full: bool,
}

/// Wakes the driver that serves a link.
pub(crate) type DriverWaker = Box<dyn Fn() + Send + Sync>;

/// Lets a sender whose message the driver waits for take the driver's turn
/// on its own task: run the link's stack and, where the driver left the
/// socket to it, write what the stack produced. Returns whether that left
/// nothing for the driver (otherwise the driver is woken). Each transport
/// supplies its own (`stream::sender_turn`, `udp::peer::sender_turn`);
/// the frames take the same path through the stack either way.
pub(crate) type SenderTurn = Box<dyn Fn() -> bool + Send + Sync>;

pub(crate) struct OutState {
    /// Messages with their strand, waiting for whoever drives the stack next
    /// (the driver, or a sender taking its turn); each already a [`Frame`]
    /// (a small copied one in the frame itself, without a buffer of its own).
    pub(crate) queue: OutQueue,
    /// Nobody is on the way to serve `queue`: the driver found it empty and
    /// waits for a push, which must wake it (or take its turn).
    pub(crate) driver_waiting: bool,
    pub(crate) senders: usize,
    /// [`Link::close`] was called.
    pub(crate) close_requested: bool,
    /// [`LinkSender::try_send_last_on`] queued the last message: every
    /// later one is refused as if the link were closed.
    pub(crate) sealed: bool,
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
    /// Handles what arrives on the driver's task while the receiver is idle
    /// ([`LinkReceiver::receive_on_driver`]). Taken out while it runs.
    pub(crate) handler: Option<Box<dyn DriverReceive>>,
    /// The receiver holds items it took and has not finished with: nothing
    /// may go to the driver-side handler before it waits again (that would overtake
    /// them).
    pub(crate) receiver_busy: bool,
    /// The driver-side handler is running (taken out of `handler`): the
    /// receiver must not report the close before it is back, or the
    /// application would see the link end while messages still reach it.
    pub(crate) handler_running: bool,
}

/// State shared by a link's handles and its driver.
pub(crate) struct Shared {
    pub(crate) peer: Arc<str>,
    pub(crate) max_message_len: Option<usize>,
    pub(crate) config: LinkConfig,
    pub(crate) wake_driver: DriverWaker,
    pub(crate) extras: Extras,
    // Each on its own cache lines: the sender, the driver and the receiver
    // update them from different threads, and must not also invalidate the
    // read-only fields above (read on every send) or each other.
    pub(crate) out: CachePadded<Mutex<OutState>>,
    /// Byte permits for the outbound queue; closed when the link is.
    pub(crate) out_space: CachePadded<Semaphore>,
    /// Woken when the link closes ([`LinkSender::closed`]).
    pub(crate) on_close: Notify,
    /// Woken when the driver queued something for the receiver (tests wait
    /// for it instead of polling the queue).
    #[cfg(test)]
    pub(crate) on_queued: Notify,
    pub(crate) inb: CachePadded<Mutex<InState>>,
    /// Refreshed by the driver when the stack drops a frame.
    pub(crate) stats: Mutex<LinkStats>,
    /// Messages and bytes each way, current (see [`LinkStats`]); on their
    /// own lines as the driver writes them on every batch.
    pub(crate) traffic: CachePadded<crate::stats::Traffic>,
}

/// What some transports add to a link: a way to send unreliable datagrams
/// (QUIC), a way for senders to take the driver's turn ([`SenderTurn`]),
/// the writing of file regions.
#[derive(Default)]
pub(crate) struct Extras {
    pub(crate) unreliable: Option<Box<dyn UnreliableSink>>,
    pub(crate) sender_turn: Option<SenderTurn>,
    /// Senders offer to take the turn also when the link's queue grows
    /// [`TURN_DEPTH`] deep while the driver is away: the transport's turn
    /// moves messages somewhere cheaper to hold (a stream's write queue,
    /// a few bytes a message) and writes them. A datagram transport's turn
    /// holds what it cannot send in a bounded spill, so it leaves deep
    /// queues to its task.
    pub(crate) turn_when_deep: bool,
    /// The link's stack passes file regions and its driver writes them
    /// (`sendfile`): a message ending in one is queued as it is. Otherwise
    /// the sender reads the region into memory first.
    pub(crate) writes_file_regions: bool,
    /// Copied small messages are queued as frames, never packed
    /// (`OutQueue::push_packed`): for a driver that hands its stacks frames
    /// only (quic's strands take them one strand's run at a time), where a
    /// pack would be copied twice.
    pub(crate) frames_only: bool,
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
        config: LinkConfig,
        wake_driver: DriverWaker,
    ) -> Arc<Self> {
        Self::with_extras(
            peer,
            max_message_len,
            config,
            wake_driver,
            Extras::default(),
        )
    }

    pub(crate) fn with_extras(
        peer: Arc<str>,
        max_message_len: Option<usize>,
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
            config: LinkConfig {
                send_buffer,
                ..config
            },
            out: CachePadded(Mutex::new(OutState {
                queue: OutQueue::with_capacity(INITIAL_QUEUE),
                driver_waiting: false,
                senders: 0,
                close_requested: false,
                sealed: false,
            })),
            out_space: CachePadded(Semaphore::new(send_buffer)),
            on_close: Notify::new(),
            #[cfg(test)]
            on_queued: Notify::new(),
            inb: CachePadded(Mutex::new(InState {
                queue: VecDeque::with_capacity(INITIAL_QUEUE),
                bytes: 0,
                closed: None,
                receiver: None,
                driver_waiting: false,
                receiver_alive: true,
                handler: None,
                receiver_busy: false,
                handler_running: false,
            })),
            wake_driver,
            stats: Mutex::default(),
            traffic: CachePadded(Default::default()),
            extras,
        })
    }

    /// Permits a message of `len` bytes costs: its length and its queue
    /// entry, at most the whole buffer (so any message can be sent).
    pub(crate) fn cost(&self, len: usize) -> usize {
        cost(len, self.config.send_buffer)
    }

    /// Marks the link closed for its handles: receivers get `reason` after
    /// the queued messages, senders get [`LinkSendError::Closed`]. Returns how
    /// many accepted messages were never sent. The first reason wins.
    pub(crate) fn close(&self, reason: CloseReason) -> usize {
        self.out_space.close();
        self.on_close.notify_waiters();
        let unsent = {
            let mut out = lock(&self.out);
            let unsent = out.queue.len();
            out.queue.clear();
            unsent
        };
        self.close_inbound(reason);
        if unsent > 0 {
            tracing::warn!(target: "plexus::transport", peer = %self.peer, unsent, "link closed with messages not sent");
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

    /// Offers `staged`, what the driver is about to queue for the receiver,
    /// to the receiver's driver-side handler: it takes what it can from the
    /// front, and the rest is queued as before. Only while nothing is
    /// queued and the receiver waits with nothing in hand, so nothing is
    /// overtaken; only one caller at a time runs the handler (the others
    /// queue). The handler runs without any of the link's locks held: it
    /// may send on this link.
    fn offer_to_handler(&self, staged: &mut VecDeque<Received>) {
        let mut handler = {
            let mut inb = lock(&self.inb);
            if !inb.queue.is_empty() || inb.receiver_busy {
                return;
            }
            match inb.handler.take() {
                Some(handler) => {
                    inb.handler_running = true;
                    handler
                }
                None => return,
            }
        };
        handler.receive(staged);
        let (gone, receiver) = {
            let mut inb = lock(&self.inb);
            inb.handler_running = false;
            let gone = if inb.receiver_alive {
                inb.handler = Some(handler);
                None
            } else {
                Some(handler)
            };
            // A receiver that found the link closed meanwhile waits for this.
            let receiver = inb.closed.is_some().then(|| inb.receiver.take()).flatten();
            (gone, receiver)
        };
        // Dropped after the lock: the handler may own handles of this link.
        drop(gone);
        if let Some(receiver) = receiver {
            receiver.wake();
        }
    }

    /// Hands `staged`, what the driver received, to the receiver: first to
    /// its driver-side handler ([`offer_to_handler`](Shared::offer_to_handler)), then
    /// what that left to the inbound queue (one lock), waking the
    /// receiver. `None` if the handler took everything (no lock taken);
    /// otherwise whether the receiver is alive (if not, the items are
    /// dropped) and whether the queue is now full. With `driver_waits`,
    /// the driver stops reading while it is full: the receiver wakes it
    /// when it takes the batch.
    pub(crate) fn hand_over(
        &self,
        staged: &mut VecDeque<Received>,
        driver_waits: bool,
    ) -> Option<HandedOver> {
        if !staged.is_empty() {
            self.offer_to_handler(staged);
        }
        if staged.is_empty() {
            return None;
        }
        let bytes = queued_bytes(staged);
        let (handed, receiver) = {
            let mut inb = lock(&self.inb);
            if inb.receiver_alive {
                if inb.queue.is_empty() {
                    // The receiver took the last batch: hand over the whole
                    // buffer instead of copying each entry.
                    std::mem::swap(&mut inb.queue, staged);
                } else {
                    inb.queue.append(staged);
                }
                inb.bytes += bytes;
            } else {
                tracing::trace!(target: "plexus::transport", peer = %self.peer, n = staged.len(), "receiver dropped; discarding");
                staged.clear();
            }
            let full = inb.bytes >= self.config.recv_buffer;
            if driver_waits {
                inb.driver_waiting = full;
            }
            let handed = HandedOver {
                receiver_alive: inb.receiver_alive,
                full,
            };
            (handed, inb.receiver.take())
        };
        if let Some(receiver) = receiver {
            receiver.wake();
        }
        #[cfg(test)]
        self.on_queued.notify_waiters();
        Some(handed)
    }

    /// A sender queued a message the driver waits for: lets the sender
    /// take the driver's turn where the transport offers that
    /// ([`SenderTurn`]), and wakes the driver otherwise.
    pub(crate) fn wake_for_send(&self) {
        let sent = self.extras.sender_turn.as_ref().is_some_and(|turn| turn());
        if !sent {
            (self.wake_driver)();
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

/// What the transport authenticated about the peer of a link: the
/// end-entity certificate it presented (TLS, QUIC), verified against the
/// CA roots during the handshake. What the certificate means (a node id)
/// is for the layers above to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The peer's end-entity certificate (DER).
    pub certificate: rustls_pki_types::CertificateDer<'static>,
}

impl Link {
    /// The state this link's handles share with its driver.
    #[cfg(test)]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.receiver.shared
    }

    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            sender: LinkSender::new(shared.clone()),
            receiver: LinkReceiver::new(shared),
            identity: None,
        }
    }

    /// A link over `io`, a byte stream of one's own (a pipe, a
    /// [`tokio::io::duplex`], a tunnel), driven like a tcp link: its
    /// messages take the stack's one send and receive path, and senders
    /// take the driver's turn the same way. `stack` must suit a byte
    /// stream (e.g. `framing` first); `peer` names the peer with its
    /// scheme (`pipe://a`) in errors and logs.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn over_stream<T>(
        io: T,
        stack: plexus_net::Stack,
        peer: impl Into<Arc<str>>,
        config: LinkConfig,
    ) -> Link
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        crate::stream::spawn(crate::stream::IoStream::new(io), stack, peer.into(), config)
    }

    /// The link with what its transport authenticated about the peer
    /// (see [`peer_identity`](Link::peer_identity)): for transports of
    /// one's own that verify a certificate before the link starts (a TLS
    /// handshake, then a protocol of their own: `wss`).
    pub fn with_identity(mut self, identity: PeerIdentity) -> Self {
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

    /// See [`LinkSender::writes_file_regions`].
    pub fn writes_file_regions(&self) -> bool {
        self.sender.writes_file_regions()
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
    pub async fn send(&self, message: Bytes) -> Result<(), LinkSendError> {
        self.sender.send(message).await
    }

    /// See [`LinkSender::try_send`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::try_send`].
    pub fn try_send(&self, message: Bytes) -> Result<(), LinkTrySendError> {
        self.sender.try_send(message)
    }

    /// See [`LinkSender::try_send_copy`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::try_send`].
    pub fn try_send_copy(&self, message: &[u8]) -> Result<(), LinkTrySendError> {
        self.sender.try_send_copy(message)
    }

    /// See [`LinkSender::send_on`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::send_on`].
    pub async fn send_on(&self, strand: Strand, message: Bytes) -> Result<(), LinkSendError> {
        self.sender.send_on(strand, message).await
    }

    /// See [`LinkSender::try_send_on`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::try_send_on`].
    pub fn try_send_on(&self, strand: Strand, message: Bytes) -> Result<(), LinkTrySendError> {
        self.sender.try_send_on(strand, message)
    }

    /// See [`LinkSender::try_send_last_on`].
    ///
    /// # Errors
    ///
    /// As [`LinkSender::try_send_last_on`].
    pub fn try_send_last_on(&self, strand: Strand, message: Bytes) -> Result<(), LinkTrySendError> {
        self.sender.try_send_last_on(strand, message)
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

    /// See [`LinkSender::closed`].
    pub async fn closed(&self) {
        self.sender.closed().await;
    }

    /// The two halves, to send and receive from different tasks.
    pub fn split(self) -> (LinkSender, LinkReceiver) {
        (self.sender, self.receiver)
    }
}
