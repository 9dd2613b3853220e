//! Inbound frames of an established link, carried out: the session's
//! incoming half (`session::incoming`) says what each frame is; here
//! messages reach local actors' mailboxes (receipts answered), control
//! frames go through the session under its lock and its events are carried
//! out after, and frames of a lane with several candidates are put in
//! order.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use plexus_core::remote::{self, Inbound, ReceiptError};
use plexus_core::trace::TraceContext;
use plexus_core::{ActorId, DeadLetterReason, NodeId};

use plexus_transport::{DriverReceive, Received};

use super::session::incoming::{Arrival, Incoming, FLOOD_HIGH, FLOOD_LOW};
use super::Peer;
use crate::close::{CloseCause, ProtocolError};
use crate::node::{lock, NodeInner};
use crate::wire::{MessageHeader, ReceiptStatus, Resolution, WireFrame};

/// Waits until `target` holds at most [`FLOOD_LOW`] messages, or stopped:
/// woken by the actor taking its queue, not polled.
pub(super) async fn wait_drained(target: &Arc<dyn Inbound>) {
    tracing::debug!(target: "plexus::remote", actor = %target.id(), "actor flooded; pausing the link");
    let control = target.control();
    std::future::poll_fn(|cx| control.poll_queued_at_most(FLOOD_LOW, cx)).await;
}

/// What a link's reader keeps between frames: the session's incoming half,
/// and the last local target it delivered to (consecutive messages to one
/// actor skip the export table's lock).
#[derive(Default)]
pub(super) struct Reading {
    incoming: Incoming,
    last: LastTarget,
}

#[derive(Default)]
struct LastTarget(Option<((u64, u64), Arc<dyn Inbound>)>);

impl LastTarget {
    /// The inbound of actor `to` under `type_id`: the last one while it is
    /// the same and alive, otherwise looked up in the export table.
    fn lookup(&mut self, inner: &NodeInner, to: u64, type_id: u64) -> Option<&Arc<dyn Inbound>> {
        let hit = matches!(&self.0, Some((key, ib)) if *key == (to, type_id) && ib.is_alive());
        if !hit {
            self.0 = inner.inbound(to, type_id).map(|ib| ((to, type_id), ib));
        }
        self.0.as_ref().map(|(_, ib)| ib)
    }
}

impl Reading {
    /// Counts `n` more messages delivered; when the incoming half says so,
    /// looks at the last target: `Some(target)` if it holds more than
    /// [`FLOOD_HIGH`], and the link must pause until it drains.
    pub(super) fn flooded_after(&mut self, n: usize) -> Option<Arc<dyn Inbound>> {
        if !self.incoming.delivered(n) {
            return None;
        }
        let (_, target) = self.last.0.as_ref()?;
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
    pub(super) reading: Reading,
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
                    .dispatch_run(&self.inner, self.remote, bytes, batch, &mut self.reading);
            // A message with a valid header is always delivered (or dead
            // lettered); only other frames fail.
            if let Some(target) = self.reading.flooded_after(taken.unwrap_or(1)) {
                // The reader task waits for the actor to drain, and the
                // queue behind it pushes back on the peer.
                self.flooded = Some(target);
                return;
            }
        }
    }
}

impl Peer {
    /// Handles one frame, `bytes`, and with it the `MESSAGE` frames after it
    /// in `queue` that continue its run (see `session::incoming`). Returns
    /// how many frames it took. `Err` closes the link (the peer broke the
    /// protocol).
    pub(super) fn dispatch_run(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        remote: NodeId,
        bytes: Bytes,
        queue: &mut VecDeque<Received>,
        reading: &mut Reading,
    ) -> Result<usize, CloseCause> {
        let Reading { incoming, last } = reading;
        let taken = match incoming.arrive(bytes, queue)? {
            Arrival::Run {
                to,
                type_id,
                payloads,
            } => {
                let n = payloads.len();
                self.deliver_run(inner, to, type_id, payloads, last);
                n
            }
            Arrival::Message {
                header,
                payload,
                trace,
            } => {
                self.deliver_message(inner, header, payload, last, trace);
                1
            }
            Arrival::Named {
                name,
                type_id,
                receipt,
                payload,
                trace,
            } => {
                self.deliver_named(inner, &name, type_id, receipt, payload, trace);
                1
            }
            Arrival::Sequenced { lane, seq, frame } => {
                self.resequenced(inner, remote, lane, seq, frame, reading)?;
                1
            }
            Arrival::Control(frame) => {
                if let Some(message) = self.handle_control(inner, remote, frame)? {
                    // The session hands back only messages, which the
                    // incoming half never gives it: delivered all the same.
                    let mut bytes = bytes::BytesMut::new();
                    message.encode_into(&mut bytes);
                    return self.dispatch_run(inner, remote, bytes.freeze(), queue, reading);
                }
                1
            }
        };
        Ok(taken)
    }

    /// Handles one frame alone (no run gathered). `Err` closes the link.
    pub(super) fn dispatch(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        remote: NodeId,
        bytes: Bytes,
        reading: &mut Reading,
    ) -> Result<(), CloseCause> {
        self.dispatch_run(inner, remote, bytes, &mut VecDeque::new(), reading)
            .map(|_| ())
    }

    /// Delivers (and drains) `run`, payloads of messages without receipts to
    /// one actor under one type, together.
    fn deliver_run(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        to: u64,
        type_id: u64,
        run: &mut Vec<Bytes>,
        last: &mut LastTarget,
    ) {
        let target = ActorId::new(inner.id, to);
        let Some(inbound) = last.lookup(inner, to, type_id) else {
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

    /// Runs `frame` through the session: control frames update it, and
    /// what they leave to do (events, replies) is carried out by the
    /// driver's step after the session's lock is let go (`peer/carry.rs`).
    /// A message comes back for delivery.
    fn handle_control(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        remote: NodeId,
        frame: WireFrame,
    ) -> Result<Option<WireFrame>, CloseCause> {
        self.step(|session, _| session.handle_frame(inner.id, remote, frame))
    }

    /// Delivers a `MESSAGE`; consecutive messages to one actor reuse the
    /// cached lookup.
    fn deliver_message(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        header: MessageHeader,
        payload: Bytes,
        last: &mut LastTarget,
        trace: Option<TraceContext>,
    ) {
        let MessageHeader {
            to,
            type_id,
            receipt,
            ..
        } = header;
        let inbound = last.lookup(inner, to, type_id);
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
        reading: &mut Reading,
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
            self.dispatch(inner, remote, frame, reading)?;
        }
        Ok(())
    }
}
