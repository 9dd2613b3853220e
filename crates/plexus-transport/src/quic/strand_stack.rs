//! Each strand's [`Stack`]: the spec's layers (`quic / compression` runs
//! `compression`) over the `framing` layer, whose length prefix
//! (`len: u32 big-endian | payload`) delimits messages on the strand's QUIC
//! stream. QUIC streams are ordered and reliable but carry bytes; framing
//! makes them carry messages, as it does on TCP, with the same code on both
//! sides. One stack per strand, because strands are independent streams: a
//! layer's state (a compression window, a heartbeat) lives beside the
//! stream it shapes, and a strand never waits for another's.
//!
//! Whoever holds a strand's lock (the driver, a strand's reader, a sender
//! taking the driver's turn) runs the stack and hands what it transmits to
//! the strand's writer under that lock, so the strand's bytes keep their
//! order. Lock order: the link's out queue, then the hand-off state, then a
//! strand; nothing takes the first two while holding a strand.
//!
//! Bounded: messages a layer refuses for want of room wait in the strand
//! (their permits of the link's send buffer still taken, so senders stop);
//! a peer's partial frames are charged at their announced length (the
//! driver bounds them over all strands together).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use plexus_net::layers::framing::{Framing, FramingConfig};
use plexus_net::{Frame, LinkContext, LinkError, LinkEvent, Stack, StackSendError, StackSpec};
use tokio::sync::mpsc;

use crate::link::{cost, lock, Received, Strand};

/// Bytes of framing's length prefix.
pub(super) const LEN: usize = plexus_net::layers::framing::FrameHeader::LEN;

/// Bytes of a frame (or a payload segment) copied next to the bytes before
/// it; longer ones go to quinn as chunks of their own, uncopied.
pub(super) const COPY_MAX: usize = 1024;

/// Held messages retried per run.
const RETRY_RUN: usize = 64;

/// Stream bytes of one strand, and the permits of the link's send buffer
/// to return once quinn took them.
#[derive(Default)]
pub(crate) struct StrandWire {
    pub(super) chunks: Vec<Bytes>,
    pub(super) permits: usize,
}

impl StrandWire {
    fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.permits == 0
    }
}

/// One strand's stack and what waits around it.
pub(super) struct StrandState {
    /// Built on the strand's first use: a link has 64 strands, most
    /// unused.
    stack: Option<Stack>,
    builder: Arc<Builder>,
    /// Messages the stack refused for want of room, in order; sent first
    /// once it has room. Their permits are still taken.
    held: VecDeque<Frame>,
    /// Permits of the messages the stack took, to go with the next bytes.
    permits: usize,
    /// Small frames transmitted, gathered into one chunk.
    staging: BytesMut,
    /// Transmitted, not yet with a writer (none opened yet).
    unsent: StrandWire,
    /// The strand writer's queue, once opened; `None` again once sending
    /// ended.
    writer: Option<mpsc::UnboundedSender<StrandWire>>,
    /// Sending ended: what the stack still transmits (a layer answering
    /// what it receives) is dropped.
    finished: bool,
    /// A run cut from the application's queue for this strand.
    run: VecDeque<Frame>,
}

impl StrandState {
    fn new(builder: Arc<Builder>) -> Self {
        Self {
            stack: None,
            builder,
            held: VecDeque::new(),
            permits: 0,
            staging: BytesMut::new(),
            unsent: StrandWire::default(),
            writer: None,
            finished: false,
            run: VecDeque::new(),
        }
    }

    fn stack(&mut self) -> &mut Stack {
        let builder = &self.builder;
        self.stack.get_or_insert_with(|| builder.build())
    }

    /// Whether the strand's writer is open.
    pub(super) fn has_writer(&self) -> bool {
        self.writer.is_some()
    }

    /// Opens the strand's writer (its queue) and hands it what waited.
    pub(super) fn set_writer(&mut self, writer: mpsc::UnboundedSender<StrandWire>) {
        self.writer = Some(writer);
        self.hand_to_writer();
    }

    /// Ends sending on the strand: what is transmitted goes to the writer,
    /// whose queue then closes (its task finishes the stream).
    pub(super) fn finish(&mut self) {
        self.transmit();
        self.writer = None;
        self.finished = true;
        self.unsent = StrandWire::default();
    }

    /// Whether messages wait for the stack's room.
    pub(super) fn holds(&self) -> bool {
        !self.held.is_empty()
    }

    /// Sends `message` (its permits of the send buffer taken).
    pub(super) fn send(&mut self, now: Instant, message: Frame) {
        self.run.push_back(message);
        let mut run = std::mem::take(&mut self.run);
        self.send_run(now, &mut run);
        self.run = run;
    }

    /// Sends the messages of `run` in order (their permits taken), behind
    /// those the stack refused before; hands what the stack transmits to
    /// the writer. Leaves `run` empty.
    pub(super) fn send_run(&mut self, now: Instant, run: &mut VecDeque<Frame>) {
        if self.held.is_empty() {
            self.enter(now, run);
        }
        if !run.is_empty() {
            self.held.append(run);
        }
        self.transmit();
    }

    /// Hands the stack what `queue` holds (a run: its costs are summed),
    /// from its front, until it refuses one for want of room (that one
    /// back at the front). The permits of the messages it took go with the
    /// next bytes; those still in `queue` stay taken, so senders wait while
    /// a layer holds messages back.
    fn enter(&mut self, now: Instant, queue: &mut VecDeque<Frame>) {
        let send_buffer = self.builder.send_buffer;
        let permits = |queue: &VecDeque<Frame>| -> usize {
            queue.iter().map(|m| cost(m.len(), send_buffer)).sum()
        };
        self.permits += permits(queue);
        self.enter_all(now, queue);
        if !queue.is_empty() {
            self.permits -= permits(queue);
        }
    }

    fn enter_all(&mut self, now: Instant, queue: &mut VecDeque<Frame>) {
        while !queue.is_empty() {
            match self.stack().handle_send_run(now, queue) {
                Ok(()) => {}
                Err(StackSendError::WouldBlock(frame)) => {
                    queue.push_front(frame);
                    return;
                }
                // The link is closing; the driver reports why.
                Err(StackSendError::Closed(_)) => queue.clear(),
                Err(error) => {
                    // Over the length LinkSender checks, or a layer's own
                    // refusal: that message only.
                    tracing::warn!(target: "plexus::transport", %error, "stack refused a message; dropped");
                }
            }
        }
    }

    /// Retries the held messages if the stack has room now.
    fn retry_held(&mut self, now: Instant) {
        // A run at a time, so that what `enter` counts is the run's, not
        // everything held.
        let mut run = std::mem::take(&mut self.run);
        while !self.held.is_empty() && self.stack().can_send() {
            let n = self.held.len().min(RETRY_RUN);
            run.extend(self.held.drain(..n));
            self.enter(now, &mut run);
            if !run.is_empty() {
                // Refused again: back in front, in order.
                while let Some(frame) = run.pop_back() {
                    self.held.push_front(frame);
                }
                break;
            }
        }
        self.run = run;
    }

    /// Moves what the stack transmits into stream bytes and hands them to
    /// the writer if there is one.
    fn transmit(&mut self) {
        let Some(stack) = self.stack.as_mut() else {
            return;
        };
        let (staging, wire) = (&mut self.staging, &mut self.unsent);
        stack.drain_transmit(|frame| to_chunks(frame, staging, &mut wire.chunks));
        if !self.staging.is_empty() {
            self.unsent.chunks.push(self.staging.split().freeze());
        }
        if self.staging.capacity() < 2 * COPY_MAX {
            self.staging.reserve(16 << 10);
        }
        // Permits go with the next bytes; those of messages a layer holds
        // back (a batch filling) come back a little early.
        self.unsent.permits += std::mem::take(&mut self.permits);
        self.hand_to_writer();
    }

    fn hand_to_writer(&mut self) {
        if self.finished {
            self.unsent = StrandWire::default();
            return;
        }
        if self.unsent.is_empty() {
            return;
        }
        if let Some(writer) = &self.writer {
            // A writer ends only after its queue closed, or when the
            // connection failed: the driver then closes the link, and
            // these bytes are lost with it.
            let _ = writer.send(std::mem::take(&mut self.unsent));
        }
    }

    /// Whether the strand has bytes for a writer it does not have yet.
    pub(super) fn waits_for_writer(&self) -> bool {
        self.writer.is_none() && !self.finished && !self.unsent.chunks.is_empty()
    }

    /// Feeds a chunk of the strand's stream to the stack; the messages and
    /// events for the application go to `staged`.
    ///
    /// # Errors
    ///
    /// The [`LinkError`] that closed the stack (corrupt input).
    pub(super) fn receive(
        &mut self,
        now: Instant,
        chunk: Bytes,
        staged: &mut VecDeque<Received>,
    ) -> Result<(), LinkError> {
        self.stack().handle_receive(now, chunk)?;
        self.collect(staged);
        self.retry_held(now);
        self.transmit();
        Ok(())
    }

    /// Fires the stack's timers due at `now`, retries held messages and
    /// transmits; the events for the application go to `staged`.
    ///
    /// # Errors
    ///
    /// The [`LinkError`] that closed the stack.
    pub(super) fn service(
        &mut self,
        now: Instant,
        staged: &mut VecDeque<Received>,
    ) -> Result<(), LinkError> {
        if self.poll_timeout().is_some_and(|t| t <= now) {
            self.stack().handle_timeout(now)?;
        }
        self.collect(staged);
        self.retry_held(now);
        self.transmit();
        match self.stack.as_ref().and_then(Stack::close_reason) {
            Some(reason) => Err(reason.clone()),
            None => Ok(()),
        }
    }

    fn collect(&mut self, staged: &mut VecDeque<Received>) {
        let Some(stack) = self.stack.as_mut() else {
            return;
        };
        while let Some(message) = stack.poll_receive() {
            staged.push_back(Received::Message(message));
        }
        while let Some(event) = stack.poll_event() {
            // SendReady is ours: the held messages are retried.
            if event != LinkEvent::SendReady {
                staged.push_back(Received::Event(event));
            }
        }
    }

    /// The stack's next deadline.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.stack.as_ref().and_then(Stack::poll_timeout)
    }

    /// Bytes the peer's partial frame takes once whole (see
    /// [`Framing::partial_len`]).
    pub(super) fn partial_len(&self) -> usize {
        self.stack
            .as_ref()
            .and_then(Stack::layer::<Framing>)
            .map_or(0, Framing::partial_len)
    }
}

/// Appends `frame`'s bytes to `chunks`: small pieces copied into `staging`
/// (which gathers them into one chunk), a long payload segment handed over
/// as a chunk of its own, after what `staging` holds.
fn to_chunks(frame: &mut Frame, staging: &mut BytesMut, chunks: &mut Vec<Bytes>) {
    if frame.len() <= COPY_MAX {
        frame.extend_into(staging);
        return;
    }
    staging.put_slice(frame.header());
    for segment in frame.payload_segments() {
        if segment.len() <= COPY_MAX {
            staging.put_slice(segment);
        } else {
            if !staging.is_empty() {
                chunks.push(staging.split().freeze());
            }
            chunks.push(segment.clone());
        }
    }
}

/// The stacks of a link's strands.
pub(super) struct StrandStacks {
    strands: [Mutex<StrandState>; Strand::COUNT],
    /// The largest message the stacks take from the application.
    max_message_len: usize,
}

impl StrandStacks {
    /// One stack of `spec` over `framing(max_frame = max_frame)` per strand,
    /// each built when its strand is first used.
    pub(super) fn new(
        spec: &StackSpec,
        max_frame: usize,
        link_id: u64,
        send_buffer: usize,
        now: Instant,
    ) -> Self {
        let builder = Arc::new(Builder {
            spec: spec.clone(),
            max_frame,
            link_id,
            send_buffer,
        });
        let max_message_len = builder
            .build_at(now)
            .max_message_len()
            .map_or(max_frame, |max| max.min(max_frame));
        Self {
            strands: std::array::from_fn(|_| Mutex::new(StrandState::new(builder.clone()))),
            max_message_len,
        }
    }

    /// The largest message the stacks take: framing's bound less what the
    /// layers above add.
    pub(super) fn max_message_len(&self) -> usize {
        self.max_message_len
    }

    /// The state of `strand`.
    pub(super) fn lock(&self, strand: Strand) -> MutexGuard<'_, StrandState> {
        lock(&self.strands[usize::from(strand.index())])
    }
}

/// What a strand's stack is built from: `spec`'s layers over framing.
pub(super) struct Builder {
    spec: StackSpec,
    max_frame: usize,
    link_id: u64,
    /// The link's send buffer, in permits (for what a message costs).
    send_buffer: usize,
}

impl Builder {
    /// The stack of a strand used for the first time now.
    fn build(&self) -> Stack {
        self.build_at(crate::conn::now())
    }

    fn build_at(&self, now: Instant) -> Stack {
        let framing = Framing::new(FramingConfig {
            max_frame_len: self.max_frame,
        });
        let mut layers: Vec<Box<dyn plexus_net::Layer>> = vec![Box::new(framing)];
        layers.extend(self.spec.build_layers(LinkContext {
            now,
            link_id: self.link_id,
        }));
        Stack::new(None, layers)
    }
}
