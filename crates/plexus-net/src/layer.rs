//! The [`Layer`] trait shared by every protocol layer, and the [`Output`]
//! a layer writes its results into.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use crate::error::{LinkError, ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::packed::{PackBuf, Packed};

/// What a layer (or transport) carries: the unit of data it needs below and
/// offers above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataUnit {
    /// An ordered, reliable stream of bytes without message boundaries
    /// (`tcp`, `uds`, `tls`).
    ByteStream,
    /// Discrete messages whose boundaries are kept (`udp`, `mem`, `quic`,
    /// or anything above `framing`).
    Message,
}

impl std::fmt::Display for DataUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DataUnit::ByteStream => "byte stream",
            DataUnit::Message => "messages",
        })
    }
}

/// A layer's interface: what it needs from the layer below and what it
/// offers to the layer above. Checked when a [`StackSpec`](crate::StackSpec)
/// is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interface {
    /// The unit the layer below must offer.
    pub needs: DataUnit,
    /// The unit this layer offers above.
    pub offers: DataUnit,
}

impl Interface {
    /// Needs messages, offers messages (most layers).
    pub const MESSAGE: Interface = Interface {
        needs: DataUnit::Message,
        offers: DataUnit::Message,
    };
}

/// Per-instance facts handed to a layer constructor when a stack instance is
/// built.
#[derive(Debug, Clone, Copy)]
pub struct LinkContext {
    /// The time the link is created; layers start their clocks here.
    pub now: Instant,
    /// A number identifying the link among those built from one spec (the
    /// UDP dispatcher uses a per-peer counter); layers with a seeded RNG mix
    /// it into their seed so links differ but every run replays.
    pub link_id: u64,
}

/// Events a layer reports to the layers above it and, in the end, to the
/// driver ([`Stack::poll_event`](crate::Stack::poll_event)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LinkEvent {
    /// The heartbeat layer suspects the peer: phi crossed the suspect
    /// threshold.
    Suspect {
        /// The phi value when the threshold was crossed.
        phi: f64,
    },
    /// The heartbeat layer considers the peer unreachable: phi crossed the
    /// unreachable threshold.
    Unreachable {
        /// The phi value when the threshold was crossed.
        phi: f64,
    },
    /// The peer was suspected or unreachable and has been heard from again.
    Reachable,
    /// The delivery layer gave up on a message after the configured number of
    /// retransmissions. The link is closed with
    /// [`LinkError::DeliveryFailed`] right after this event.
    DeliveryFailed {
        /// Delivery sequence number of the message given up on.
        seq: u64,
        /// Transmissions attempted.
        attempts: u32,
        /// Messages that were accepted but will never be delivered (in
        /// flight or queued), including this one.
        lost: usize,
    },
    /// A send previously refused with
    /// [`StackSendError::WouldBlock`](crate::StackSendError::WouldBlock) may now
    /// succeed.
    SendReady,
    /// The lossy ordering layer gave up waiting for missing messages and
    /// skipped them.
    GapSkipped {
        /// Number of sequence numbers skipped.
        missing: u64,
    },
}

/// Takes the front of `queue`, and once that leaves it empty moves its
/// start back to the front of its buffer (`clear` does; `pop_front` leaves
/// it where it was). A queue that carries one frame at a time then reuses
/// the same slot instead of walking its whole ring buffer (8 KiB of frames
/// per queue between two layers), which would touch a new cache line on
/// every message: cold ones, with many processes sharing the caches.
#[inline(always)]
pub(crate) fn take_front<T>(queue: &mut VecDeque<T>) -> Option<T> {
    // An empty queue is only read: most of the stack's checks find one.
    let item = queue.pop_front()?;
    if queue.is_empty() {
        queue.clear();
    }
    Some(item)
}

/// Where a layer puts its results: frames going down (towards the
/// transport), frames going up (towards the application), events, and a
/// request to close the link.
///
/// The [`Stack`](crate::Stack) owns one and reuses its queues, so pushing
/// does not allocate in steady state.
#[derive(Debug, Default)]
pub struct Output {
    pub(crate) down: VecDeque<Frame>,
    pub(crate) up: VecDeque<Frame>,
    pub(crate) events: VecDeque<LinkEvent>,
    pub(crate) close: Option<LinkError>,
    /// Set by the stack on its top layer's output: frames pushed up are
    /// whole messages for the application, turned into `Bytes` on the spot
    /// (into `app`) instead of being queued as frames and moved again.
    pub(crate) to_app: bool,
    pub(crate) app: VecDeque<Bytes>,
    /// Messages pushed down packed, after every frame of `down` (a frame
    /// pushed after them first moves them into `down`, a frame each).
    pub(crate) packed: PackBuf,
}

impl Output {
    /// An empty output (for driving a single layer in tests).
    pub fn new() -> Self {
        Self::default()
    }

    /// Passes `frame` to the layer below (or the transport).
    #[inline]
    pub fn push_down(&mut self, frame: Frame) {
        self.unpack_down();
        self.down.push_back(frame);
    }

    /// Passes the messages left in `messages` to the layer below, packed,
    /// taking them: the layer below gets them as a pack
    /// ([`Layer::handle_send_packed`]), so a layer that passes small
    /// messages on unchanged builds no frame for them. The same as a
    /// [`push_down`](Output::push_down) of a frame holding each, in order.
    pub fn push_down_packed(&mut self, messages: &mut Packed<'_>) {
        self.packed.push(messages);
    }

    /// Moves what was pushed down packed into `down`, so a frame pushed now
    /// comes after it.
    #[inline]
    pub(crate) fn unpack_down(&mut self) {
        if !self.packed.is_empty() {
            self.packed.unpack_into(&mut self.down);
        }
    }

    /// Whether anything was pushed down and waits for the layer below.
    #[inline]
    pub(crate) fn has_down(&self) -> bool {
        !self.down.is_empty() || !self.packed.is_empty()
    }

    /// Passes every frame of `frames` to the layer below, in order, leaving
    /// `frames` empty: a run handed on whole (see
    /// [`Layer::handle_send_run`]).
    #[inline]
    pub fn push_down_all(&mut self, frames: &mut VecDeque<Frame>) {
        self.unpack_down();
        if self.down.is_empty() {
            std::mem::swap(&mut self.down, frames);
        } else {
            self.down.append(frames);
        }
    }

    /// Prepends `header` to `frame` (as [`Frame::push_header`]) and passes
    /// it to the layer below. The header is written in the queue's slot after
    /// the frame is moved there: a few bytes written just before the move
    /// would stall the wide loads that copy the frame.
    #[inline]
    pub fn push_down_with_header(&mut self, frame: Frame, header: &[u8]) {
        self.unpack_down();
        self.down.push_back(frame);
        if let Some(frame) = self.down.back_mut() {
            frame.push_header(header);
        }
    }

    /// Passes `frame` to the layer above (or the application).
    #[inline]
    pub fn push_up(&mut self, frame: Frame) {
        if self.to_app {
            self.app.push_back(frame.into_bytes());
        } else {
            self.up.push_back(frame);
        }
    }

    /// Passes a payload without headers to the layer above (or the
    /// application): the same as `push_up(Frame::from_payload(payload))`,
    /// without building the frame when it goes straight to the application.
    #[inline]
    pub fn push_up_payload(&mut self, payload: Bytes) {
        if self.to_app {
            // As `Frame::from_payload(..).into_bytes()`: an empty payload
            // keeps no reference to its buffer.
            self.app.push_back(if payload.is_empty() {
                Bytes::new()
            } else {
                payload
            });
        } else {
            self.up.push_back(Frame::from_payload(payload));
        }
    }

    /// Reports `event` to the layers above and the driver.
    #[inline]
    pub fn push_event(&mut self, event: LinkEvent) {
        self.events.push_back(event);
    }

    /// Asks the stack to close the link with `reason`: the stack stops
    /// accepting input and every later call reports the reason.
    pub fn close(&mut self, reason: LinkError) {
        if self.close.is_none() {
            self.close = Some(reason);
        }
    }

    /// Takes the next frame pushed down (a message pushed down packed as a
    /// frame of its own).
    pub fn pop_down(&mut self) -> Option<Frame> {
        if self.down.is_empty() {
            self.unpack_down();
        }
        take_front(&mut self.down)
    }

    /// Takes the next frame pushed up.
    pub fn pop_up(&mut self) -> Option<Frame> {
        take_front(&mut self.up)
    }

    /// Takes the next event.
    pub fn pop_event(&mut self) -> Option<LinkEvent> {
        take_front(&mut self.events)
    }

    /// The close request, if any.
    pub fn close_reason(&self) -> Option<&LinkError> {
        self.close.as_ref()
    }
}

/// A sans-IO protocol layer: frames and the current time in; frames, events
/// and the next deadline out.
///
/// A layer never reads a clock, touches a socket or spawns a task; it is
/// driven by a [`Stack`](crate::Stack), which calls it in this order:
///
/// 1. [`handle_send`](Layer::handle_send) with each frame from the layer above
///    (only after every layer reported [`can_send`](Layer::can_send)),
/// 2. [`handle_receive`](Layer::handle_receive) with each frame from the layer
///    below,
/// 3. [`handle_event`](Layer::handle_event) with each event raised below it,
/// 4. [`handle_timeout`](Layer::handle_timeout) when the time passed
///    [`poll_timeout`](Layer::poll_timeout) (it may be called early and must
///    then do nothing),
/// 5. [`handle_flush`](Layer::handle_flush) when the driver drains the
///    transmit queue after any of the above.
///
/// Each call may push any number of frames in either direction and events
/// into `out`.
pub trait Layer: Send {
    /// The registry name of the layer, for errors and traces.
    fn name(&self) -> &'static str;

    /// Told once, when the stack is built (bottom layer first), the largest
    /// frame the layer below accepts (`None`: unbounded), before
    /// [`max_frame_len`](Layer::max_frame_len) is asked. A layer that
    /// combines frames (`batching`) bounds what it builds by it. The default
    /// ignores it.
    fn bind_below(&mut self, below: Option<usize>) {
        let _ = below;
    }

    /// The largest frame this layer accepts from above, given that the layer
    /// below accepts frames of at most `below` bytes (`None`: unbounded). The
    /// stack folds this from the transport up to know the largest message it
    /// accepts. The default passes the limit through unchanged, which is right
    /// for a layer that adds no header.
    fn max_frame_len(&self, below: Option<usize>) -> Option<usize> {
        below
    }

    /// Whether [`handle_send`](Layer::handle_send) takes a frame whose
    /// payload ends in a [`FileRegion`](crate::FileRegion) and passes it down
    /// with the region still at its end, never reading the payload: a layer
    /// that only reads its own message header and prepends headers
    /// (`http`). A stack whose layers all say so carries regions to the
    /// driver, which may hand them to the kernel (`sendfile`); see
    /// [`crate::file_region`]. Asked once, when the stack is built. Default
    /// `false`: the sender reads a region into memory before such a stack.
    fn passes_file_regions(&self) -> bool {
        false
    }

    /// Whether [`can_send`](Layer::can_send) can ever return `false`. A
    /// layer that never refuses a frame returns `false`, and the stack
    /// leaves it out of the check every send makes (one call less per
    /// layer per message). Asked once, when the stack is built. Default
    /// `true`: a layer that overrides `can_send` needs nothing more.
    fn limits_sends(&self) -> bool {
        true
    }

    /// Whether the layer accepts another frame from above now. A layer with
    /// a bounded send buffer returns `false` while it is full; the stack then
    /// refuses sends with [`StackSendError::WouldBlock`] and raises
    /// [`LinkEvent::SendReady`] once every layer is ready again.
    fn can_send(&self) -> bool {
        true
    }

    /// Processes a frame coming from the layer above.
    ///
    /// # Errors
    ///
    /// A frame the layer cannot send; the error says whether state changed.
    fn handle_send(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError>;

    /// Processes a run of frames from the layer above, taking them from the
    /// front of `frames`, in order: the same as a
    /// [`handle_send`](Layer::handle_send) for each, which is what the
    /// default does. The stack hands a layer everything queued for it at
    /// once (a driver's batch of messages, what the layer above pushed
    /// down), so a layer whose work per frame amortises over a run does it
    /// once per run: `framing` writes a run of small frames into one
    /// buffer, a pass-through layer moves the whole run down
    /// ([`Output::push_down_all`]).
    ///
    /// # Errors
    ///
    /// The first frame the layer cannot send, as from `handle_send`; the
    /// frames before it were sent, those after it are still in `frames`.
    fn handle_send_run(
        &mut self,
        now: Instant,
        frames: &mut VecDeque<Frame>,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        while let Some(frame) = take_front(frames) {
            self.handle_send(now, frame, out)?;
            if out.close.is_some() {
                // The link is closing: the stack drops what is left.
                break;
            }
        }
        Ok(())
    }

    /// Processes small messages from the layer above, packed end to end in
    /// one buffer ([`Packed`]), taking them from its front, in order: the
    /// same as a [`handle_send`](Layer::handle_send) of a frame holding
    /// each, which is what the default does. A driver hands a sender's
    /// packed messages over this way, so a layer that copies each message
    /// into a buffer of its own (`framing`'s run of prefixed frames,
    /// `batching`'s batch) copies it from the pack and builds no frame for
    /// it.
    ///
    /// # Errors
    ///
    /// The first message the layer cannot send, as a frame, as from
    /// `handle_send`; it and the messages before it were taken, those after
    /// it are still in `messages`.
    fn handle_send_packed(
        &mut self,
        now: Instant,
        messages: &mut Packed<'_>,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        for message in messages.by_ref() {
            self.handle_send(now, Frame::copy_from_slice(message), out)?;
            if out.close.is_some() {
                // The link is closing: the stack drops what is left.
                break;
            }
        }
        Ok(())
    }

    /// Processes a frame coming from the layer below.
    ///
    /// # Errors
    ///
    /// Input the layer rejects; [`ReceiveError::is_fatal`] says whether the
    /// link must be closed or the frame was merely dropped.
    fn handle_receive(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError>;

    /// Reacts to an event raised by a layer below. The default ignores it.
    fn handle_event(&mut self, now: Instant, event: &LinkEvent, out: &mut Output) {
        let _ = (now, event, out);
    }

    /// Fires whatever timers expired at `now`.
    fn handle_timeout(&mut self, now: Instant, out: &mut Output);

    /// The driver is about to drain the transmit queue: push down whatever
    /// was held back to be combined (slicing's open bundle, delivery's
    /// coalesced ack). The stack calls it once per drain after any input,
    /// top layer first, so a frame flushed by one layer can still be held by
    /// a layer below until that layer's own flush. Holding frames only until
    /// the next flush adds no latency: a driver drains right after every
    /// batch of input. The default holds nothing back.
    fn handle_flush(&mut self, now: Instant, out: &mut Output) {
        let _ = (now, out);
    }

    /// Whether [`handle_flush`](Layer::handle_flush) can push anything. A
    /// layer that never holds frames back returns `false`, and the stack
    /// leaves it out of every flush (one call less per layer per drain).
    /// Asked once, when the stack is built. Default `true`.
    fn flushes(&self) -> bool {
        true
    }

    /// The earliest instant at which [`handle_timeout`](Layer::handle_timeout)
    /// has work to do, if any.
    fn poll_timeout(&self) -> Option<Instant>;

    /// The layer as [`Any`](std::any::Any), so that
    /// [`Stack::layer`](crate::Stack::layer) can hand a driver the concrete
    /// layer (to read its counters). The default (`None`) keeps the layer
    /// opaque.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// The earlier of two optional deadlines.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
