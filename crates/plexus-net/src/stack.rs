//! [`Stack`]: one instance of a layer stack for one peer link.

use std::collections::VecDeque;
use std::fmt;
#[cfg(test)]
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;

use crate::error::{LinkError, StackSendError};
use crate::frame::Frame;
use crate::layer::{earliest, take_front, Layer, LinkEvent, Output};
use crate::packed::Packed;

/// Counters of a stack instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Messages accepted by [`Stack::handle_send`].
    pub sent: u64,
    /// Messages handed up by [`Stack::poll_receive`].
    pub received: u64,
    /// Frames handed to the transport by [`Stack::poll_transmit`].
    pub transmitted: u64,
    /// Inbound frames dropped by a layer (non-fatal receive errors).
    pub dropped: u64,
    /// Frames a lower layer refused on the way down (after upper layers
    /// accepted them).
    pub send_failures: u64,
}

/// One instance of a protocol stack: the state of one peer link.
///
/// Built by [`StackSpec::build`](crate::StackSpec::build). Sans-IO: it never
/// reads a clock or touches a socket. A driver calls it in this order:
///
/// 1. **Input**, whenever it happens:
///    [`handle_receive`](Stack::handle_receive) with bytes read from the
///    transport (a chunk of a byte stream, or exactly one datagram),
///    [`handle_send`](Stack::handle_send) with a message from the
///    application, [`handle_timeout`](Stack::handle_timeout) when the instant
///    of [`poll_timeout`](Stack::poll_timeout) has passed.
/// 2. **Output**, after every input: drain
///    [`poll_transmit`](Stack::poll_transmit) (write every frame to the
///    transport, in order; one frame is one datagram on message transports),
///    [`poll_receive`](Stack::poll_receive) (whole messages for the
///    application), [`poll_event`](Stack::poll_event).
/// 3. **Sleep** until [`poll_timeout`](Stack::poll_timeout) or the next input.
///
/// Once the link is closed (a fatal input, a delivery failure), every
/// `handle_*` returns the [`LinkError`]; the driver should drain the outputs
/// and close the transport.
///
/// ```
/// use std::time::Instant;
/// use bytes::Bytes;
/// use plexus_net::StackSpec;
///
/// let spec: StackSpec = "tcp / framing".parse().unwrap();
/// let now = Instant::now();
/// let (mut a, mut b) = (spec.build(now), spec.build(now));
/// a.handle_send(now, Bytes::from_static(b"hello")).unwrap();
/// while let Some(frame) = a.poll_transmit() {
///     b.handle_receive(now, frame.to_bytes()).unwrap();
/// }
/// assert_eq!(b.poll_receive().unwrap(), "hello");
/// ```
pub struct Stack {
    layers: Vec<Box<dyn Layer>>,
    /// `outs[i]`: what layer `i` produced, consumed in place by its
    /// neighbours (no per-hop move into another queue): `outs[i].down` waits
    /// for layer `i - 1`'s `handle_send` (`outs[0].down` is the transmit
    /// queue), `outs[i].up` for layer `i + 1`'s `handle_receive` (the top
    /// layer's is emptied into `receive` after every call). One entry even
    /// without layers, for the transmit queue.
    outs: Vec<Output>,
    /// `flushing[i]`: layer `i` may hold frames back ([`Layer::flushes`]).
    flushing: Vec<bool>,
    /// The layers that may refuse a send ([`Layer::limits_sends`]), asked
    /// before every send.
    limiting: Vec<usize>,
    /// Events raised by layer `.0`, to hand to the layers above it.
    raised: VecDeque<(usize, LinkEvent)>,
    receive: VecDeque<Bytes>,
    events: VecDeque<LinkEvent>,
    max_message_len: Option<usize>,
    /// Who stops a frame ending in a file region, if anyone: the lowest
    /// layer that does not pass regions ([`Layer::passes_file_regions`]),
    /// or `"transport"` until the driver says it writes them
    /// ([`Stack::accept_file_regions`]). Such a frame is refused.
    file_region_stop: Option<&'static str>,
    /// The time of the latest input since the layers were last flushed:
    /// the next drain of the transmit queue flushes them first, at that
    /// time (`poll_transmit` takes no clock).
    unflushed: Option<Instant>,
    blocked: bool,
    closed: Option<LinkError>,
    stats: StackStats,
}

/// Where [`Stack::run`] starts its first pass.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// With the frames going down (top to bottom), then up, then events.
    Down,
    /// As `Down`, after only the top layer's `handle_send` ran: nothing
    /// waits to go up (what the top layer pushes up is the application's
    /// already), so no up pass unless a layer below pushes something up.
    Sent,
    /// With the frames going up: nothing is waiting to go down.
    Up,
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("layers", &self.layer_names().collect::<Vec<_>>())
            .field("closed", &self.closed)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Who stops file regions while the driver has not accepted them.
const TRANSPORT: &str = "transport";

/// Queue capacity reserved up front. Small: a stack that carries one
/// request should not pay for a streaming stack's queues; those grow to
/// what a stack's traffic needs once, and steady state then does not
/// allocate.
const QUEUE_CAPACITY: usize = 16;

/// The most bytes of a pack a stack whose layers may refuse a send hands
/// its top layer between two asks for room
/// ([`Stack::handle_send_packed`]): the per-call cost of a pass spread
/// over many small messages, and the most a layer that ran out of room
/// meanwhile takes beyond it (its bound is a soft one already: it takes
/// whatever a pass pushes down).
pub const CHECKED_CHUNK: usize = 16 << 10;

impl Stack {
    /// A stack of `layers` (bottom first) over a transport whose datagrams
    /// are at most `max_datagram` bytes (`None`: unbounded, or a byte
    /// stream). Usually built with [`StackSpec::build`](crate::StackSpec::build),
    /// which checks the layers fit together.
    pub fn new(max_datagram: Option<usize>, mut layers: Vec<Box<dyn Layer>>) -> Self {
        let n = layers.len();
        let max_message_len = layers.iter_mut().fold(max_datagram, |below, l| {
            l.bind_below(below);
            l.max_frame_len(below)
        });
        let file_region_stop = Some(
            layers
                .iter()
                .find(|l| !l.passes_file_regions())
                .map_or(TRANSPORT, |l| l.name()),
        );
        Self {
            file_region_stop,
            flushing: layers.iter().map(|l| l.flushes()).collect(),
            limiting: (0..n).filter(|&i| layers[i].limits_sends()).collect(),
            layers,
            outs: (0..n.max(1))
                .map(|i| Output {
                    down: VecDeque::with_capacity(QUEUE_CAPACITY),
                    // The top layer hands messages up as `Bytes` (`app`).
                    up: VecDeque::with_capacity(if i + 1 == n { 0 } else { QUEUE_CAPACITY }),
                    events: VecDeque::with_capacity(8),
                    close: None,
                    to_app: i + 1 == n,
                    app: VecDeque::with_capacity(if i + 1 == n { QUEUE_CAPACITY } else { 0 }),
                    ..Output::default()
                })
                .collect(),
            raised: VecDeque::with_capacity(8),
            receive: VecDeque::with_capacity(QUEUE_CAPACITY),
            events: VecDeque::with_capacity(8),
            max_message_len,
            unflushed: None,
            blocked: false,
            closed: None,
            stats: StackStats::default(),
        }
    }

    /// Layer names, bottom to top.
    pub fn layer_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.layers.iter().map(|l| l.name())
    }

    /// The largest message [`handle_send`](Stack::handle_send) accepts
    /// (`None`: unbounded).
    pub fn max_message_len(&self) -> Option<usize> {
        self.max_message_len
    }

    /// Counters.
    pub fn stats(&self) -> StackStats {
        self.stats
    }

    /// Called by a driver that writes frames ending in a file region (the
    /// bytes, then the region from the file: `sendfile`): from now on
    /// [`handle_send`](Stack::handle_send) takes such frames if every layer
    /// passes them down unread ([`Layer::passes_file_regions`]), and
    /// [`poll_transmit`](Stack::poll_transmit) may hand them out. Returns
    /// whether it does. Until a driver says so, a stack refuses them
    /// ([`StackSendError::FileRegion`]): a driver that writes only
    /// [`Frame::chunks`] never meets a region it would drop. A sender whose
    /// stack does not take regions reads them into memory first
    /// ([`Frame::load_file_region`]).
    pub fn accept_file_regions(&mut self) -> bool {
        if self.file_region_stop == Some(TRANSPORT) {
            self.file_region_stop = None;
        }
        self.takes_file_regions()
    }

    /// Whether [`handle_send`](Stack::handle_send) takes a frame ending in
    /// a file region (see [`accept_file_regions`](Stack::accept_file_regions)).
    pub fn takes_file_regions(&self) -> bool {
        self.file_region_stop.is_none()
    }

    /// The checks every send passes, in order: the link is open, the frame
    /// is at most `max` bytes, a file region only where every layer passes
    /// it, every layer has room (if not, `SendReady` follows once they do).
    /// The frame is handed back on failure.
    fn admit(&mut self, frame: Frame, max: Option<usize>) -> Result<Frame, StackSendError> {
        if self.closed.is_some() {
            return Err(StackSendError::Closed(frame));
        }
        if let Some(max) = max {
            if frame.len() > max {
                return Err(StackSendError::TooLarge { frame, max });
            }
        }
        if let Some(layer) = self.file_region_stop {
            if frame.has_file_region() {
                return Err(StackSendError::FileRegion { layer, frame });
            }
        }
        if !self.limiting.iter().all(|&i| self.layers[i].can_send()) {
            self.blocked = true;
            return Err(StackSendError::WouldBlock(frame));
        }
        Ok(frame)
    }

    /// The first layer of type `L` in the stack, if it exposes itself
    /// ([`Layer::as_any`]); e.g. `stack.layer::<Encryption>()` to read its
    /// counters.
    pub fn layer<L: Layer + 'static>(&self) -> Option<&L> {
        self.layers
            .iter()
            .find_map(|l| l.as_any()?.downcast_ref::<L>())
    }

    /// Why the link was closed, if it was.
    pub fn close_reason(&self) -> Option<&LinkError> {
        self.closed.as_ref()
    }

    /// Whether the link is closed.
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// Whether a layer may refuse a send for want of room
    /// ([`Layer::limits_sends`]): such a stack's top layer takes a run of
    /// messages one at a time ([`handle_send_run`](Stack::handle_send_run)),
    /// and the run may stop short at the first message refused.
    pub fn limits_sends(&self) -> bool {
        !self.limiting.is_empty()
    }

    /// Whether [`handle_send`](Stack::handle_send) would accept a message now.
    pub fn can_send(&self) -> bool {
        self.closed.is_none() && self.limiting.iter().all(|&i| self.layers[i].can_send())
    }

    /// Sends one message from the application down the stack.
    ///
    /// # Errors
    ///
    /// The message is handed back, with nothing changed, as
    /// [`StackSendError::TooLarge`] (over [`max_message_len`](Stack::max_message_len)),
    /// [`StackSendError::Closed`], or [`StackSendError::WouldBlock`].
    ///
    /// # Backpressure
    ///
    /// A layer with a bounded send buffer (delivery) refuses new messages
    /// while it is full: the send fails with [`StackSendError::WouldBlock`] and a
    /// [`LinkEvent::SendReady`] event follows once it has room again.
    pub fn handle_send(
        &mut self,
        now: Instant,
        message: impl Into<Frame>,
    ) -> Result<(), StackSendError> {
        let frame = self.admit(message.into(), self.max_message_len)?;
        self.unflushed = Some(now);
        let Some(top) = self.layers.len().checked_sub(1) else {
            self.stats.sent += 1;
            self.outs[0].down.push_back(frame);
            return Ok(());
        };
        self.layers[top].handle_send(now, frame, &mut self.outs[top])?;
        self.stats.sent += 1;
        self.after_call(top);
        self.run_if_needed(now, Start::Sent);
        Ok(())
    }

    /// Sends the messages in `messages` down the stack, in order, taking
    /// them from its front: the same as a [`handle_send`](Stack::handle_send)
    /// for each, in one pass through the layers, each layer handed the
    /// whole run ([`Layer::handle_send_run`]). A driver hands over its
    /// batch this way.
    ///
    /// A stack with a layer that may refuse a send
    /// ([`Layer::limits_sends`]) hands the top layer one message at a time,
    /// each admitted as `handle_send` admits it, and refuses the first one
    /// a layer has no room for; a run with a message the stack would refuse
    /// on its own (too large, a file region it cannot carry) or a closed
    /// stack takes them one by one, which refuses them where `handle_send`
    /// would.
    ///
    /// # Errors
    ///
    /// As [`handle_send`](Stack::handle_send), for the first message
    /// refused, handed back in the error; the messages before it were sent,
    /// those after it are still in `messages`.
    pub fn handle_send_run(
        &mut self,
        now: Instant,
        messages: &mut VecDeque<Frame>,
    ) -> Result<(), StackSendError> {
        let whole = self.closed.is_none()
            && !self.layers.is_empty()
            && messages.iter().all(|m| self.fits(m));
        if whole && !self.limiting.is_empty() {
            return self.send_run_checked(now, messages);
        }
        if !whole {
            while let Some(message) = take_front(messages) {
                self.handle_send(now, message)?;
            }
            return Ok(());
        }
        self.unflushed = Some(now);
        let top = self.layers.len() - 1;
        let before = messages.len();
        let result = self.layers[top].handle_send_run(now, messages, &mut self.outs[top]);
        // The refused message (if any) left `messages` in the error.
        self.stats.sent += (before - messages.len() - usize::from(result.is_err())) as u64;
        self.after_call(top);
        self.run_if_needed(now, Start::Sent);
        result
    }

    /// Sends small messages packed end to end in one buffer down the stack,
    /// in order, taking them from the front of `messages`: the same as a
    /// [`handle_send`](Stack::handle_send) of each, in one pass through the
    /// layers, the top layer handed the whole pack
    /// ([`Layer::handle_send_packed`]: `framing` and `batching` copy each
    /// message into their own buffer; a layer without a packed form gets a
    /// frame per message). A driver hands over what its senders packed
    /// this way.
    ///
    /// A stack with a layer that may refuse a send asks those layers for
    /// room before it hands the top layer up to [`CHECKED_CHUNK`] bytes of
    /// the pack (at least one message; one at a time if the top layer
    /// limits sends itself), and again after anything went below the top
    /// layer: a layer below may take up to that much more than one by one
    /// would have given it before the first refusal. From there on it
    /// refuses what a layer has no room for, as
    /// [`handle_send_run`](Stack::handle_send_run) does.
    ///
    /// # Errors
    ///
    /// As [`handle_send`](Stack::handle_send), for the first message
    /// refused, handed back as a frame in the error; it and the messages
    /// before it were taken, those after it are still in `messages`.
    pub fn handle_send_packed(
        &mut self,
        now: Instant,
        messages: &mut Packed<'_>,
    ) -> Result<(), StackSendError> {
        let whole = self.closed.is_none()
            && !self.layers.is_empty()
            && self
                .max_message_len
                .is_none_or(|max| messages.longest() <= max);
        if !whole {
            for message in messages.by_ref() {
                self.handle_send(now, Frame::copy_from_slice(message))?;
            }
            return Ok(());
        }
        self.unflushed = Some(now);
        let top = self.layers.len() - 1;
        if self.limiting.is_empty() {
            let before = messages.taken();
            let result = self.layers[top].handle_send_packed(now, messages, &mut self.outs[top]);
            self.stats.sent += (messages.taken() - before - usize::from(result.is_err())) as u64;
            self.after_call(top);
            self.run_if_needed(now, Start::Sent);
            return result;
        }
        let top_limits = self.limiting.last() == Some(&top);
        let mut room = false;
        while let Some(front) = messages.front() {
            if self.closed.is_some() {
                // Closed by the pass of an earlier message: refused where
                // handle_send refuses it.
                messages.next();
                return self.handle_send(now, Frame::copy_from_slice(front));
            }
            if !self.has_room(&mut room, top_limits) {
                messages.next();
                return Err(StackSendError::WouldBlock(Frame::copy_from_slice(front)));
            }
            // A top layer that limits sends itself is asked before each
            // message; otherwise it takes up to `CHECKED_CHUNK` bytes in
            // one call, and the layers below are asked again after them.
            let max = if top_limits { 0 } else { CHECKED_CHUNK };
            let mut chunk = messages.leading(max);
            let result = self.layers[top].handle_send_packed(now, &mut chunk, &mut self.outs[top]);
            messages.advance(chunk.taken());
            let sent = chunk.taken() - usize::from(result.is_err());
            room &= self.after_checked_send(now, sent);
            result?;
        }
        Ok(())
    }

    /// [`handle_send_run`](Stack::handle_send_run) on a stack with a layer
    /// that may refuse a send, every message fitting: the top layer takes
    /// them one at a time, as from `handle_send`. The layers' room is asked
    /// again only after the layers below the top one took something (a
    /// pass ran), since nothing else changes their answer; a top layer that
    /// limits sends itself is asked before every message.
    fn send_run_checked(
        &mut self,
        now: Instant,
        messages: &mut VecDeque<Frame>,
    ) -> Result<(), StackSendError> {
        let top = self.layers.len() - 1;
        let top_limits = self.limiting.last() == Some(&top);
        let mut room = false;
        while !messages.is_empty() {
            if self.closed.is_some() {
                // Closed by the pass of an earlier message: refused where
                // handle_send refuses it.
                let message = take_front(messages).expect("a message");
                return self.handle_send(now, message);
            }
            if !self.has_room(&mut room, top_limits) {
                let frame = take_front(messages).expect("a message");
                return Err(StackSendError::WouldBlock(frame));
            }
            let frame = take_front(messages).expect("a message");
            self.unflushed = Some(now);
            self.layers[top].handle_send(now, frame, &mut self.outs[top])?;
            room &= self.after_checked_send(now, 1);
        }
        Ok(())
    }

    /// Whether the layers that may refuse a send have room for the next
    /// message of a checked run. `room` holds their last answer, asked
    /// again only if it was no or the top layer limits sends itself
    /// (`top_limits`); a no blocks the stack (`SendReady` follows).
    fn has_room(&mut self, room: &mut bool, top_limits: bool) -> bool {
        let top = self.layers.len() - 1;
        if !*room || (top_limits && !self.layers[top].can_send()) {
            *room = self.limiting.iter().all(|&i| self.layers[i].can_send());
            if !*room {
                self.blocked = true;
            }
        }
        *room
    }

    /// After the top layer took `sent` messages of a checked run: counts
    /// them and runs the pass below. Returns whether the layers' last
    /// answer about room still holds: no if anything went below the top
    /// layer or was raised, which may change it.
    fn after_checked_send(&mut self, now: Instant, sent: usize) -> bool {
        let top = self.layers.len() - 1;
        self.stats.sent += sent as u64;
        self.after_call(top);
        let still = !(self.outs[top].has_down() || !self.raised.is_empty() || self.blocked);
        self.run_if_needed(now, Start::Sent);
        still
    }

    /// Whether [`admit`](Stack::admit) lets `frame` through on its size and
    /// payload alone (not on the link's state or the layers' room).
    #[inline]
    fn fits(&self, frame: &Frame) -> bool {
        self.max_message_len.is_none_or(|max| frame.len() <= max)
            && (self.file_region_stop.is_none() || !frame.has_file_region())
    }

    /// Feeds bytes read from the transport: a chunk of the byte stream, or
    /// exactly one datagram.
    ///
    /// # Errors
    ///
    /// The [`LinkError`] if the link is (now or already) closed.
    pub fn handle_receive(&mut self, now: Instant, data: Bytes) -> Result<(), LinkError> {
        if let Some(reason) = &self.closed {
            return Err(reason.clone());
        }
        if self.layers.is_empty() {
            self.stats.received += 1;
            self.receive.push_back(data);
            return Ok(());
        }
        self.unflushed = Some(now);
        // Every internal queue is empty between calls, so this is the first
        // call of the first pass: layer 0 takes the frame straight away.
        self.receive_at(0, now, Frame::from_payload(data));
        self.after_call(0);
        self.run_if_needed(now, Start::Up);
        self.status()
    }

    /// Fires every layer timer that expired at `now`. Calling it early is
    /// harmless.
    ///
    /// # Errors
    ///
    /// The [`LinkError`] if the link is (now or already) closed.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), LinkError> {
        if self.closed.is_none() {
            self.unflushed = Some(now);
            for i in 0..self.layers.len() {
                if self.layers[i].poll_timeout().is_some_and(|t| t <= now) {
                    self.layers[i].handle_timeout(now, &mut self.outs[i]);
                    self.after_call(i);
                }
            }
            self.run(now, Start::Down);
        }
        self.status()
    }

    /// The next frame to write to the transport.
    ///
    /// The first call after an input lets the layers push down what they
    /// held back to combine ([`Layer::handle_flush`]): several small
    /// messages handed over in one batch leave as one datagram.
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        if let Some(now) = self.unflushed.take() {
            self.flush(now);
        }
        let frame = take_front(&mut self.outs[0].down)?;
        self.stats.transmitted += 1;
        Some(frame)
    }

    /// Hands every frame waiting for the transport to `f`, in order, in
    /// place: the same frames as draining [`poll_transmit`](Stack::poll_transmit),
    /// without moving each one out of the queue. `f` reads the frame, or
    /// takes it with [`std::mem::take`] to keep it; the queue is empty
    /// afterwards.
    pub fn drain_transmit(&mut self, mut f: impl FnMut(&mut Frame)) {
        if let Some(now) = self.unflushed.take() {
            self.flush(now);
        }
        let queue = &mut self.outs[0].down;
        self.stats.transmitted += queue.len() as u64;
        for frame in queue.iter_mut() {
            f(frame);
        }
        queue.clear();
    }

    /// Moves every whole message for the application to the back of `dst`,
    /// in order: the same messages as draining
    /// [`poll_receive`](Stack::poll_receive), in one call.
    pub fn drain_receive(&mut self, dst: &mut VecDeque<Bytes>) {
        if dst.is_empty() {
            std::mem::swap(dst, &mut self.receive);
        } else {
            dst.append(&mut self.receive);
        }
    }

    /// The next whole message for the application.
    pub fn poll_receive(&mut self) -> Option<Bytes> {
        take_front(&mut self.receive)
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<LinkEvent> {
        take_front(&mut self.events)
    }

    /// Whether messages or events wait for
    /// [`poll_receive`](Stack::poll_receive) or
    /// [`poll_event`](Stack::poll_event).
    pub fn has_received(&self) -> bool {
        !self.receive.is_empty() || !self.events.is_empty()
    }

    /// The earliest deadline over all layers; call
    /// [`handle_timeout`](Stack::handle_timeout) once it has passed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        self.layers
            .iter()
            .fold(None, |acc, l| earliest(acc, l.poll_timeout()))
    }

    fn status(&self) -> Result<(), LinkError> {
        match &self.closed {
            Some(reason) => Err(reason.clone()),
            None => Ok(()),
        }
    }

    /// Hands what layer `i` just produced to the application (top layer),
    /// and its events and close request to the stack. Frames for the layers
    /// in between stay where the layer put them, in `outs[i]`.
    #[inline(always)]
    fn after_call(&mut self, i: usize) {
        let out = &mut self.outs[i];
        if i == 0 {
            // The transport takes frames: what the bottom layer pushed
            // down packed becomes a frame each.
            out.unpack_down();
        }
        // Only the top layer's output has `to_app` set: what it pushed up
        // is already `Bytes`.
        if !out.app.is_empty() {
            self.stats.received += out.app.len() as u64;
            if self.receive.is_empty() {
                std::mem::swap(&mut self.receive, &mut out.app);
            } else {
                self.receive.append(&mut out.app);
            }
        }
        while let Some(event) = out.events.pop_front() {
            self.raised.push_back((i, event));
        }
        if let Some(reason) = out.close.take() {
            self.close(reason);
        }
    }

    fn close(&mut self, reason: LinkError) {
        if self.closed.is_none() {
            tracing::debug!(target: "plexus::net", %reason, "link closed");
            self.closed = Some(reason);
        }
        // Every queue between two layers; not the transmit queue
        // (`outs[0].down`) nor what was handed to the application.
        let n = self.layers.len();
        for (i, out) in self.outs.iter_mut().enumerate() {
            if i > 0 {
                out.down.clear();
                out.packed.clear();
            }
            if i + 1 < n {
                out.up.clear();
            }
        }
    }

    /// Flushes every layer, top first: frames a layer flushes go through
    /// the layers below it (which may hold them again) before their own
    /// flush, so one pass empties every hold.
    fn flush(&mut self, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        let n = self.layers.len();
        for i in (0..n).rev() {
            if i + 1 < n {
                self.send_run_at(i, now);
            }
            if self.flushing[i] {
                self.layers[i].handle_flush(now, &mut self.outs[i]);
                self.after_call(i);
            }
            if self.closed.is_some() {
                return;
            }
        }
        if !self.raised.is_empty() {
            // Events raised while flushing (none of the built-in layers
            // raises any) still reach the layers above and the driver.
            self.run(now, Start::Down);
        }
    }

    /// Layer `i` sends everything layer `i + 1` pushed down, as one run;
    /// a frame it refuses is dropped (counted) and the rest go on.
    fn send_run_at(&mut self, i: usize, now: Instant) {
        // The frames first: what was pushed down packed came after them.
        while self.closed.is_none() {
            let (below, above) = self.outs.split_at_mut(i + 1);
            let run = &mut above[0].down;
            let before = run.len();
            if before == 0 {
                break;
            }
            let result = self.layers[i].handle_send_run(now, run, &mut below[i]);
            let progressed = run.len() < before;
            self.after_call(i);
            if let Err(error) = result {
                self.send_dropped(i, &error);
                if progressed {
                    continue;
                }
                // A refusal takes its frame out of the run; a layer that
                // refuses without taking one would never end.
            }
            break;
        }
        if self.closed.is_some() || self.outs[i + 1].packed.is_empty() {
            return;
        }
        let packed = std::mem::take(&mut self.outs[i + 1].packed);
        let mut messages = packed.messages();
        while self.closed.is_none() && !messages.is_empty() {
            let before = messages.taken();
            let result = self.layers[i].handle_send_packed(now, &mut messages, &mut self.outs[i]);
            let progressed = messages.taken() > before;
            self.after_call(i);
            match result {
                Ok(()) => break,
                Err(error) => {
                    self.send_dropped(i, &error);
                    if !progressed {
                        break;
                    }
                }
            }
        }
        // The buffer back for the next pack (the layer above pushes
        // nothing while the one below runs).
        let mut packed = packed;
        packed.clear();
        self.outs[i + 1].packed = packed;
    }

    /// Layer `i` refused a frame of a run from above: dropped, counted.
    fn send_dropped(&mut self, i: usize, error: &StackSendError) {
        self.stats.send_failures += 1;
        tracing::debug!(target: "plexus::net", layer = self.layers[i].name(), %error, "send dropped");
    }

    /// Layer `i` processes `frame` from the layer below.
    #[inline(always)]
    fn receive_at(&mut self, i: usize, now: Instant, frame: Frame) {
        if let Err(error) = self.layers[i].handle_receive(now, frame, &mut self.outs[i]) {
            if error.is_fatal() {
                self.outs[i].close(LinkError::Corrupt(error));
            } else {
                self.stats.dropped += 1;
                tracing::trace!(target: "plexus::net", layer = self.layers[i].name(), %error, "frame dropped");
            }
        }
    }

    /// [`run`](Stack::run), skipped when it has nothing to do: a single
    /// layer has no queue between layers, so only raised events or a
    /// blocked sender give `run` work (the usual `tcp / framing` case).
    #[inline(always)]
    fn run_if_needed(&mut self, now: Instant, start: Start) {
        if !self.raised.is_empty() || self.blocked {
            return self.run(now, start);
        }
        if self.layers.len() < 2 {
            return;
        }
        // After a send, only what the top layer pushed down can move (what
        // it pushed up went to the application in `after_call`): a layer
        // that holds the frame (batching) needs no pass.
        let top = self.layers.len() - 1;
        if start == Start::Sent && !self.outs[top].has_down() {
            return;
        }
        self.run(now, start);
    }

    /// Runs layers until every internal queue is empty: passes of frames
    /// going down (top to bottom), frames going up (bottom to top), then
    /// events, repeated while a layer pushed frames the other way than its
    /// pass (an ack sent down while receiving) or raised events. A pass
    /// consumes what each layer pushes its own way, so a message through
    /// the stack costs one pass, not a second one to find nothing left.
    fn run(&mut self, now: Instant, start: Start) {
        let n = self.layers.len();
        let mut down = start != Start::Up;
        let mut up = start != Start::Sent;
        while down || up || !self.raised.is_empty() {
            if down {
                down = false;
                // Layer i sends what layer i + 1 pushed down. Nothing feeds
                // the top layer from above but `handle_send`, which calls it
                // directly.
                for i in (0..n.saturating_sub(1)).rev() {
                    self.send_run_at(i, now);
                    up |= !self.outs[i].up.is_empty();
                }
            }
            if up {
                up = false;
                // Layer i receives what layer i - 1 pushed up. Nothing feeds
                // the bottom layer but `handle_receive`, which calls it
                // directly.
                for i in 1..n {
                    while let Some(frame) = take_front(&mut self.outs[i - 1].up) {
                        self.receive_at(i, now, frame);
                        self.after_call(i);
                        down |= self.outs[i].has_down();
                    }
                }
            }
            while let Some((origin, event)) = self.raised.pop_front() {
                for j in origin + 1..n {
                    self.layers[j].handle_event(now, &event, &mut self.outs[j]);
                    self.after_call(j);
                    down |= self.outs[j].has_down();
                    up |= !self.outs[j].up.is_empty();
                }
                self.events.push_back(event);
            }
            if self.closed.is_some() {
                break;
            }
        }
        if self.blocked && self.can_send() {
            self.blocked = false;
            self.events.push_back(LinkEvent::SendReady);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::StackSpec;

    fn build(spec: &str) -> Stack {
        spec.parse::<StackSpec>()
            .expect("valid spec")
            .build(Instant::now())
    }

    #[test]
    fn public_handles_are_send_and_specs_are_shareable() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<Stack>();
        send_sync::<StackSpec>();
        send_sync::<crate::LayerRegistry>();
    }

    #[test]
    fn largest_message_folds_limits_from_the_transport_up() {
        let over_udp = |spec: &str| {
            spec.parse::<StackSpec>()
                .expect("valid spec")
                .fit("udp", crate::TransportProfile::datagrams(Some(65_507)))
                .expect("fits udp")
                .build(Instant::now())
        };
        assert_eq!(over_udp("udp").max_message_len(), Some(65_507));
        assert_eq!(over_udp("udp / ordering").max_message_len(), Some(65_499));
        assert_eq!(build("mem / ordering").max_message_len(), None);
        assert_eq!(
            over_udp("udp / slicing(max_message=1MiB) / ordering").max_message_len(),
            Some((1 << 20) - 8)
        );
        assert_eq!(
            build("tcp / framing(max_frame=1KiB)").max_message_len(),
            Some(1024)
        );
    }

    #[test]
    fn oversized_send_is_handed_back_untouched() {
        let mut s = build("tcp / framing(max_frame=4B)");
        let err = s
            .handle_send(Instant::now(), Bytes::from_static(b"12345"))
            .unwrap_err();
        assert!(matches!(err, StackSendError::TooLarge { max: 4, .. }));
        assert_eq!(err.into_frame().into_bytes(), "12345");
        assert_eq!(s.stats().sent, 0);
        assert!(s.poll_transmit().is_none());
    }

    #[test]
    fn a_file_region_goes_down_only_where_every_layer_passes_it() {
        use std::io::Write;
        let mut file = tempfile::tempfile().expect("temporary file");
        file.write_all(b"file bytes").expect("write");
        let region = crate::FileRegion::new(std::sync::Arc::new(file), 0, 10);
        let now = Instant::now();

        let mut framed = build("tcp / framing");
        let err = framed
            .handle_send(now, Frame::from_file(region.clone()))
            .unwrap_err();
        assert!(
            matches!(
                err,
                StackSendError::FileRegion {
                    layer: "transport",
                    ..
                }
            ),
            "refused until the driver says it writes regions"
        );
        assert!(framed.accept_file_regions());
        framed
            .handle_send(now, Frame::from_file(region.clone()))
            .expect("framing passes regions");
        let sent = framed.poll_transmit().expect("framed");
        assert_eq!(sent.bytes_len(), 4, "the length header alone is in memory");
        assert!(sent.file_region().is_some_and(|r| r.same_as(&region)));

        let mut compressed = build("tcp / framing / compression");
        assert!(!compressed.accept_file_regions());
        let err = compressed
            .handle_send(now, Frame::from_file(region.clone()))
            .unwrap_err();
        assert!(matches!(
            err,
            StackSendError::FileRegion {
                layer: "compression",
                ..
            }
        ));
        assert!(err.into_frame().file_region().is_some(), "handed back");
        assert_eq!(compressed.stats().sent, 0);
    }

    #[test]
    fn corrupt_stream_closes_the_link_and_refuses_everything_after() {
        let mut s = build("tcp / framing(max_frame=4B)");
        let now = Instant::now();
        let err = s
            .handle_receive(now, Bytes::from_static(&[0, 0, 1, 0]))
            .unwrap_err();
        assert!(matches!(err, LinkError::Corrupt(_)));
        assert!(s.is_closed());
        assert_eq!(s.handle_receive(now, Bytes::new()), Err(err.clone()));
        assert!(matches!(
            s.handle_send(now, Bytes::from_static(b"x")),
            Err(StackSendError::Closed(_))
        ));
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn layer_finds_an_exposed_layer_by_type() {
        use crate::layers::encryption::Encryption;
        let mut s = build(
            "udp / encryption(psk=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f)",
        );
        let now = Instant::now();
        assert!(s.handle_receive(now, Bytes::from_static(b"junk")).is_ok());
        let encryption = s.layer::<Encryption>().expect("the encryption layer");
        assert_eq!(
            encryption.stats().malformed + encryption.stats().not_established,
            1
        );
        assert!(build("udp / slicing").layer::<Encryption>().is_none());
    }

    #[test]
    fn held_frames_leave_at_the_first_drain_after_an_input() {
        let mut a = build("udp / slicing / delivery / ordering");
        let mut b = build("udp / slicing / delivery / ordering");
        let now = Instant::now();
        for m in [&b"one"[..], b"two", b"three"] {
            a.handle_send(now, Bytes::from_static(m)).expect("room");
        }
        // One batch, one datagram: slicing held the messages until the drain.
        let datagram = a.poll_transmit().expect("flushed at the drain");
        assert!(a.poll_transmit().is_none());
        assert!(a.poll_transmit().is_none(), "no input, nothing to flush");
        b.handle_receive(now, datagram.to_bytes()).expect("valid");
        let got: Vec<Bytes> = std::iter::from_fn(|| b.poll_receive()).collect();
        assert_eq!(got, ["one", "two", "three"]);
        // The in-order pair is acked at B's flush, in one frame.
        let mut acks = 0;
        b.drain_transmit(|_| acks += 1);
        assert_eq!(acks, 1);
    }

    #[test]
    fn garbage_datagram_is_dropped_and_counted_not_fatal() {
        let mut s = build("udp / slicing / delivery / ordering");
        let now = Instant::now();
        assert!(s.handle_receive(now, Bytes::from_static(b"junk")).is_ok());
        assert_eq!(s.stats().dropped, 1);
        assert!(!s.is_closed());
    }

    #[test]
    fn events_reach_the_layers_above_and_the_driver() {
        // heartbeat below ordering: its events pass through ordering's
        // handle_event (a no-op) and come out of poll_event.
        let mut s = build("mem / heartbeat(interval=10ms, acceptable_pause=0ms) / ordering");
        let start = Instant::now();
        while let Some(now) = s.poll_timeout() {
            if now > start + Duration::from_secs(60) {
                break;
            }
            s.handle_timeout(now).expect("heartbeat never closes");
            while s.poll_transmit().is_some() {}
        }
        let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
        assert!(matches!(
            events[..],
            [LinkEvent::Suspect { .. }, LinkEvent::Unreachable { .. }]
        ));
    }
}
