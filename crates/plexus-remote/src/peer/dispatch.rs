//! Inbound frames of an established link: messages to local actors,
//! receipts, replies, resolves, monitors, links, stops, goodbyes.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use plexus_core::remote::{self, Control, Inbound, ReceiptError, Signal, Watcher};
use plexus_core::trace::TraceContext;
use plexus_core::{ActorId, DeadLetterReason, Down, Exit, ExitReason, NodeId};

use plexus_transport::{DriverReceive, Received};

use super::session::SessionEvent;
use super::{Live, Peer};
use crate::close::{CloseCause, ProtocolError};
use crate::node::{lock, NodeInner};
use crate::wire::{MessageHeader, ReceiptStatus, Resolution, WireFrame};

/// Above this many queued messages in the actor it last delivered to, a
/// link stops reading until the actor is down to [`FLOOD_LOW`]: the
/// transport's bounded buffers then push back on the sending node, whose
/// own bounded buffers turn the excess into dead letters there. Memory per
/// flooded actor stays bounded even with an unbounded mailbox.
const FLOOD_HIGH: usize = 100_000;
const FLOOD_LOW: usize = 50_000;
/// A link looks at the mailbox length once per this many messages: a flood
/// overshoots [`FLOOD_HIGH`] by at most this many.
const FLOOD_CHECK_EVERY: u32 = 256;

/// Waits until `target` holds at most [`FLOOD_LOW`] messages, or stopped:
/// woken by the actor taking its queue, not polled.
pub(super) async fn wait_drained(target: &Arc<dyn Inbound>) {
    tracing::debug!(target: "plexus::remote", actor = %target.id(), "actor flooded; pausing the link");
    let control = target.control();
    std::future::poll_fn(|cx| control.poll_queued_at_most(FLOOD_LOW, cx)).await;
}

/// The last local target a link delivered to: consecutive messages to one
/// actor skip the export table's lock.
#[derive(Default)]
pub(super) struct InboundCache {
    last: Option<((u64, u64), Arc<dyn Inbound>)>,
    /// Messages delivered since the last look at a mailbox's length
    /// ([`flooded_after`](InboundCache::flooded_after)).
    unchecked: usize,
    /// Payloads of the run being delivered ([`Peer::dispatch_run`]); kept
    /// for its allocation.
    run: Vec<Bytes>,
}

impl InboundCache {
    /// The inbound of actor `to` under `type_id`: the last one while it is
    /// the same and alive, otherwise looked up in the export table.
    fn lookup(&mut self, inner: &NodeInner, to: u64, type_id: u64) -> Option<&Arc<dyn Inbound>> {
        let hit = matches!(&self.last, Some((key, ib)) if *key == (to, type_id) && ib.is_alive());
        if !hit {
            self.last = inner.inbound(to, type_id).map(|ib| ((to, type_id), ib));
        }
        self.last.as_ref().map(|(_, ib)| ib)
    }

    /// Counts `taken` more messages delivered. Every
    /// [`FLOOD_CHECK_EVERY`] messages, not each (reading a mailbox's
    /// length is a few dyn calls and atomics), looks at the last target:
    /// `Some(target)` if it holds more than [`FLOOD_HIGH`], and the link
    /// must pause until it drains.
    pub(super) fn flooded_after(&mut self, taken: usize) -> Option<Arc<dyn Inbound>> {
        self.unchecked += taken;
        if self.unchecked < FLOOD_CHECK_EVERY as usize {
            return None;
        }
        self.unchecked = 0;
        let (_, target) = self.last.as_ref()?;
        (target.queued() > FLOOD_HIGH).then(|| target.clone())
    }
}

/// Batches of up to this many items are handled on the transport's driver
/// task ([`DriverDispatch`]); larger ones (a stream) go to the link's
/// reader task, which on a multi-threaded runtime decodes them while the
/// driver reads the next.
const DRIVER_BATCH_MAX: usize = 16;
/// Nor batches of more bytes than this: decoding them would hold up the
/// driver (on UDP, every peer of the endpoint).
const DRIVER_BYTES_MAX: usize = 64 << 10;

/// Delivers the messages of a link whose reader task waits idle right on
/// the transport's driver task, as they arrive: a message reaches its
/// actor's mailbox with one task wake-up (the actor's) instead of two.
///
/// It takes only `MESSAGE` frames with a valid header, whose delivery
/// cannot fail and never waits. Everything else (other frames, link
/// events, batches of more than 16 messages or 64 KiB, and everything
/// while the last actor it delivered to is flooded) it leaves to the
/// reader task, behind what it took.
pub(super) struct DriverDispatch {
    pub(super) peer: Arc<Peer>,
    pub(super) inner: Arc<NodeInner>,
    pub(super) remote: NodeId,
    pub(super) cache: InboundCache,
    /// The flooded actor that made it hand everything to the reader task,
    /// until it is down to [`FLOOD_LOW`].
    pub(super) flooded: Option<Arc<dyn Inbound>>,
}

impl DriverReceive for DriverDispatch {
    fn receive(&mut self, batch: &mut VecDeque<Received>) {
        if batch.len() > DRIVER_BATCH_MAX {
            return;
        }
        let bytes: usize = batch
            .iter()
            .map(|r| match r {
                Received::Message(m) => m.len(),
                Received::Event(_) => 0,
            })
            .sum();
        if bytes > DRIVER_BYTES_MAX {
            return;
        }
        if let Some(target) = &self.flooded {
            if target.is_alive() && target.queued() > FLOOD_LOW {
                return;
            }
            self.flooded = None;
        }
        while let Some(Received::Message(bytes)) = batch.front() {
            if !matches!(MessageHeader::parse(bytes), Some(Ok(_))) {
                break;
            }
            let Some(Received::Message(bytes)) = batch.pop_front() else {
                break;
            };
            let taken =
                self.peer
                    .dispatch_run(&self.inner, self.remote, bytes, batch, &mut self.cache);
            // A message with a valid header is always delivered (or dead
            // lettered); only other frames fail.
            if let Some(target) = self.cache.flooded_after(taken.unwrap_or(1)) {
                // The reader task waits for the actor to drain, and the
                // queue behind it pushes back on the peer.
                self.flooded = Some(target);
                return;
            }
        }
    }
}

/// Messages to one actor delivered together at most: a flooded actor is
/// noticed after at most this many more (see [`FLOOD_CHECK_EVERY`]).
const RUN_MAX: usize = FLOOD_CHECK_EVERY as usize;

impl Peer {
    /// Handles one frame, `bytes`, and with it the `MESSAGE` frames after it
    /// in `queue` that go to the same actor under the same type without a
    /// receipt: those are decoded and enqueued together (one mailbox lock,
    /// one wake-up). Returns how many frames it took. `Err` closes the link
    /// (the peer broke the protocol).
    pub(super) fn dispatch_run(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        remote: NodeId,
        bytes: Bytes,
        queue: &mut VecDeque<Received>,
        cache: &mut InboundCache,
    ) -> Result<usize, CloseCause> {
        let header = match MessageHeader::parse(&bytes) {
            Some(Ok(header)) if header.receipt == 0 => header,
            _ => return self.dispatch(inner, remote, bytes, cache).map(|()| 1),
        };
        // The length of the next queued frame's header if it continues the
        // run (same actor, same type, no receipt).
        let continues = |queue: &VecDeque<Received>| match queue.front() {
            Some(Received::Message(next)) => match MessageHeader::parse(next) {
                Some(Ok(h)) if (h.to, h.type_id, h.receipt) == (header.to, header.type_id, 0) => {
                    Some(h.len)
                }
                _ => None,
            },
            _ => None,
        };
        let mut payload = bytes;
        payload.advance(header.len);
        let Some(mut len) = continues(queue) else {
            // A lone message (a round trip): no run to gather.
            self.deliver_message(inner, header, payload, cache, None);
            return Ok(1);
        };
        let mut run = std::mem::take(&mut cache.run);
        run.push(payload);
        while let Some(Received::Message(mut payload)) = queue.pop_front() {
            payload.advance(len);
            run.push(payload);
            match continues(queue) {
                Some(next) if run.len() < RUN_MAX => len = next,
                _ => break,
            }
        }
        let n = run.len();
        self.deliver_run(inner, header, &mut run, cache);
        cache.run = run;
        Ok(n)
    }

    /// Delivers (and drains) `run`, payloads of messages without receipts to
    /// one actor under one type, together.
    fn deliver_run(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        header: MessageHeader,
        run: &mut Vec<Bytes>,
        cache: &mut InboundCache,
    ) {
        let MessageHeader { to, type_id, .. } = header;
        let target = ActorId::new(inner.id, to);
        let Some(inbound) = cache.lookup(inner, to, type_id) else {
            for _ in run.drain(..) {
                self.deliver_to(inner, to, None, 0, Bytes::new(), None);
            }
            return;
        };
        remote::with_context(self.context(), || {
            inbound.deliver_batch(&mut run.drain(..), &mut |e| {
                failed_delivery(inner, target, &e);
            });
        });
    }

    /// Handles one frame. `Err` closes the link (the peer broke the
    /// protocol).
    pub(super) fn dispatch(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        remote: NodeId,
        bytes: Bytes,
        cache: &mut InboundCache,
    ) -> Result<(), CloseCause> {
        // Messages, nearly all traffic, skip building a `WireFrame`.
        let Some(bytes) = self.deliver_if_message(inner, bytes, cache, None)? else {
            return Ok(());
        };
        let frame = WireFrame::decode(bytes).map_err(ProtocolError::from)?;
        let Some(message) = self.handle_control(inner, remote, frame)? else {
            return Ok(());
        };
        match message {
            WireFrame::Message {
                to,
                type_id,
                receipt,
                payload,
            } => {
                let header = MessageHeader {
                    to,
                    type_id,
                    receipt,
                    len: 0,
                };
                self.deliver_message(inner, header, payload, cache, None);
                Ok(())
            }
            WireFrame::Named {
                name,
                type_id,
                receipt,
                payload,
            } => {
                self.deliver_named(inner, &name, type_id, receipt, payload, None);
                Ok(())
            }
            WireFrame::Traced { context, frame } => {
                self.dispatch_traced(inner, context, frame, cache)
            }
            WireFrame::Sequenced { lane, seq, frame } => {
                self.resequenced(inner, remote, lane, seq, frame, cache)
            }
            // `Session::handle_frame` hands back only the four above,
            // whatever the peer sent: not reachable by any input.
            other => unreachable!("the session handed back a {} frame", other.name()),
        }
    }

    /// Runs `frame` through the session: control frames update it, and
    /// what they leave to do (events, replies) is carried out here, after
    /// the session's lock is let go. A message comes back for delivery.
    fn handle_control(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        remote: NodeId,
        frame: WireFrame,
    ) -> Result<Option<WireFrame>, CloseCause> {
        let mut events = Vec::new();
        {
            let mut session = lock(&self.session);
            if let Some(message) = session.handle_frame(inner.id, remote, frame)? {
                return Ok(Some(message));
            }
            events.extend(std::iter::from_fn(|| session.poll_event()));
        }
        for event in events {
            self.carry_out(inner, event);
        }
        self.flush_control();
        Ok(None)
    }

    /// Carries out one of the session's events.
    fn carry_out(self: &Arc<Self>, inner: &Arc<NodeInner>, event: SessionEvent<Live>) {
        match event {
            SessionEvent::Receipt { waiter, outcome } => {
                let _ = waiter.send(outcome);
            }
            SessionEvent::Reply { id, payload } => {
                if let Some(pending) = inner.take_reply(id) {
                    remote::with_context(self.context(), || pending.deliver(payload));
                }
            }
            SessionEvent::Resolve {
                request,
                type_id,
                name,
            } => {
                let resolution = inner.resolve_name(&name, type_id);
                lock(&self.session).answer_resolve(request, resolution);
            }
            SessionEvent::Resolved { waiter, resolution } => {
                let _ = waiter.send(Ok(resolution));
            }
            SessionEvent::Monitor { target, token } => {
                let Some(control) = inner.control(target) else {
                    lock(&self.session).refuse_monitor(token, no_such_actor(inner));
                    return;
                };
                let peer = Arc::downgrade(self);
                let watch = control.watch(Watcher::Callback(Box::new(move |down: Down| {
                    if let Some(p) = peer.upgrade() {
                        lock(&p.session).actor_down(token, down.reason);
                        p.flush_control();
                    }
                })));
                if watch.is_some() {
                    lock(&self.session).monitored(token, control, watch);
                }
            }
            SessionEvent::Unwatch { local, watch } => local.unwatch(watch),
            SessionEvent::Down {
                watcher,
                id,
                reason,
            } => watcher.notify(Down { id, reason }),
            SessionEvent::Link { remote, local } => {
                let proxy: Arc<dyn Control> = inner.proxy(remote, self, None);
                let refused = match inner.control(local) {
                    Some(control) => match control.add_link(proxy) {
                        Ok(()) => {
                            let local_id = control.id();
                            lock(&self.session).linked(local_id, control, remote);
                            return;
                        }
                        Err(reason) => reason,
                    },
                    None => no_such_actor(inner),
                };
                lock(&self.session).refuse_link(remote, local, refused);
            }
            SessionEvent::Unlink { remote, local } => {
                if let Some(control) = inner.control(local) {
                    control.remove_link(remote);
                }
            }
            SessionEvent::Exit {
                remote,
                local,
                reason,
            } => {
                if let Some(control) = inner.control(local) {
                    control.remove_link(remote);
                    control.signal(Signal::Exit(Exit {
                        from: remote,
                        reason,
                    }));
                }
            }
            SessionEvent::Stop { target, kill } => {
                if let Some(c) = inner.control(target) {
                    if kill {
                        c.kill();
                    } else {
                        c.signal(Signal::Stop(ExitReason::Stopped));
                    }
                }
            }
        }
    }

    /// Sends the control frames the session queued, outside its lock.
    pub(super) fn flush_control(self: &Arc<Self>) {
        loop {
            let Some(frame) = lock(&self.session).poll_transmit() else {
                return;
            };
            let _ = self.send(&frame);
        }
    }

    /// Delivers the `MESSAGE` or `NAMED` frame a `TRACE` frame carries,
    /// with its trace context. `Err` closes the link.
    fn dispatch_traced(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        trace: TraceContext,
        frame: Bytes,
        cache: &mut InboundCache,
    ) -> Result<(), CloseCause> {
        let Some(frame) = self.deliver_if_message(inner, frame, cache, Some(trace))? else {
            return Ok(());
        };
        match WireFrame::decode(frame).map_err(ProtocolError::from)? {
            WireFrame::Named {
                name,
                type_id,
                receipt,
                payload,
            } => {
                self.deliver_named(inner, &name, type_id, receipt, payload, Some(trace));
                Ok(())
            }
            // `WireFrame::decode` lets only those two through.
            other => Err(ProtocolError::TracedNonMessage { kind: other.name() }.into()),
        }
    }

    /// Delivers `bytes` if it is a `MESSAGE` frame (read in place, no
    /// [`WireFrame`] built); hands any other frame back. `Err` for a
    /// malformed message header.
    fn deliver_if_message(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        bytes: Bytes,
        cache: &mut InboundCache,
        trace: Option<TraceContext>,
    ) -> Result<Option<Bytes>, CloseCause> {
        let Some(header) = MessageHeader::parse(&bytes) else {
            return Ok(Some(bytes));
        };
        let header = header.map_err(ProtocolError::from)?;
        let mut payload = bytes;
        payload.advance(header.len);
        self.deliver_message(inner, header, payload, cache, trace);
        Ok(None)
    }

    /// Delivers a `MESSAGE`; consecutive messages to one actor reuse the
    /// cached lookup.
    fn deliver_message(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        header: MessageHeader,
        payload: Bytes,
        cache: &mut InboundCache,
        trace: Option<TraceContext>,
    ) {
        let MessageHeader {
            to,
            type_id,
            receipt,
            ..
        } = header;
        let inbound = cache.lookup(inner, to, type_id);
        self.deliver_to(inner, to, inbound, receipt, payload, trace);
    }

    /// Delivers a `NAMED` message to the actor published under `name`.
    fn deliver_named(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        name: &str,
        type_id: u64,
        receipt: u64,
        payload: Bytes,
        trace: Option<TraceContext>,
    ) {
        match inner.resolve_name(name, type_id) {
            Resolution::Found(serial) => {
                let inbound = inner.inbound(serial, type_id);
                self.deliver_to(inner, serial, inbound.as_ref(), receipt, payload, trace);
            }
            _ => {
                inner.system.dead_letters().record(
                    ActorId::new(inner.id, 0),
                    "message for an unpublished name",
                    DeadLetterReason::Undeliverable,
                );
                self.receipt(receipt, ReceiptStatus::NoSuchActor);
            }
        }
    }

    fn deliver_to(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        to: u64,
        inbound: Option<&Arc<dyn Inbound>>,
        receipt: u64,
        payload: Bytes,
        trace: Option<TraceContext>,
    ) {
        let target = ActorId::new(inner.id, to);
        let Some(inbound) = inbound else {
            inner.system.dead_letters().record(
                target,
                "message of a type the actor is not exported for, or for an unknown actor",
                DeadLetterReason::Undeliverable,
            );
            self.receipt(receipt, ReceiptStatus::NoSuchActor);
            return;
        };
        let outcome = remote::with_context(self.context(), || match trace {
            None => inbound.deliver(payload),
            Some(trace) => inbound.deliver_traced(payload, trace),
        });
        let status = match outcome {
            Ok(()) => ReceiptStatus::Delivered,
            Err(e) => failed_delivery(inner, target, &e),
        };
        self.receipt(receipt, status);
    }

    fn receipt(self: &Arc<Self>, id: u64, status: ReceiptStatus) {
        if id != 0 {
            let _ = self.send(&WireFrame::Receipt { id, status });
        }
    }
}

fn no_such_actor(inner: &NodeInner) -> ExitReason {
    ExitReason::Failed(format!("no such actor on node {}", inner.id))
}

/// Records a remote message that did not reach `target`'s mailbox as a dead
/// letter (logging an undecodable one); returns the receipt status to
/// report.
fn failed_delivery(inner: &NodeInner, target: ActorId, e: &ReceiptError) -> ReceiptStatus {
    let (status, reason) = match e {
        ReceiptError::MailboxFull => (ReceiptStatus::MailboxFull, DeadLetterReason::MailboxFull),
        ReceiptError::Decode(err) => {
            tracing::warn!(target: "plexus::remote", actor = %target, "undecodable message: {err}");
            (ReceiptStatus::Undecodable, DeadLetterReason::Undeliverable)
        }
        _ => (ReceiptStatus::Stopped, DeadLetterReason::Stopped),
    };
    inner
        .system
        .dead_letters()
        .record(target, "remote message", reason);
    status
}

impl Peer {
    /// Takes frame `seq` of adaptive lane `lane` (which arrives over any of
    /// the lane's candidates) and dispatches every frame that is now in
    /// order, under the lane's lock: frames of one lane are dispatched in
    /// the sender's order whichever reader took them.
    fn resequenced(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        remote: NodeId,
        lane: u8,
        seq: u64,
        frame: Bytes,
        cache: &mut InboundCache,
    ) -> Result<(), CloseCause> {
        let Some(lane) = plexus_core::Lane::from_index(lane.into()) else {
            return Err(ProtocolError::UnknownLane(lane).into());
        };
        let mut lanes = lock(&self.resequencers);
        let resequencer = &mut lanes[lane.index()];
        let size = frame.len();
        match resequencer.push(seq, frame, size) {
            Ok(_) => {}
            Err(source) => return Err(ProtocolError::Resequencing { lane, source }.into()),
        }
        while let Some(frame) = resequencer.pop() {
            self.dispatch(inner, remote, frame, cache)?;
        }
        Ok(())
    }
}
