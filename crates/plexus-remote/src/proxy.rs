//! The proxy of a remote actor: what an `ActorRef<M>` to an actor on
//! another node points to (through the typed sink of `plexus-core`).
//!
//! Messages become `MESSAGE` frames on the peer link; stop, kill, monitors
//! and links become their frames. A forged proxy (see
//! [`Node::forge`](crate::Node::forge)) addresses its actor by name until a
//! background resolve, started on first use, pins it to a serial; it moves
//! from its name's strand to its actor's once that is safe (see
//! [`NamedState`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::{BufMut, Bytes, BytesMut};
use plexus_core::remote::{
    ActorPath, CodecError, Control, ReceiptError, ReceiptFuture, Refusal, RemoteEndpoint,
    RemoteMessage, RoomWait, Signal, Watcher, WireContext,
};
use plexus_core::trace::TraceContext;
use plexus_core::{
    ActorId, DeadLetterReason, Down, ExitReason, Lane, MessageProperties, RouteError,
};
use plexus_transport::Strand;
use tokio::sync::{oneshot, Semaphore};

use crate::node::{lock, NodeInner};
use crate::peer::{Carrier, Peer, Undelivered};
use crate::wire::{Resolution, WireFrame};

pub(crate) struct RemoteActor {
    /// Itself, for work that outlives a call (a forged proxy's resolve).
    me: Weak<RemoteActor>,
    id: ActorId,
    inner: Weak<NodeInner>,
    peer: Arc<Peer>,
    addr: String,
    runtime: tokio::runtime::Handle,
    dead: AtomicBool,
    named: Option<Named>,
}

/// A forged proxy's name and resolution state.
struct Named {
    name: String,
    uri: String,
    type_id: u64,
    type_name: &'static str,
    /// `strand(FNV-1a(name))`: the strand of the ref's frames until it has
    /// settled on its target's (see [`NamedState`]).
    strand: Strand,
    state: Mutex<NamedState>,
    /// Told each time the ref settles on its target's strand.
    #[cfg(test)]
    settled: tokio::sync::Notify,
}

/// A forged ref's resolution, and the strand its frames take (PROTOCOL.md,
/// "Strands").
///
/// Before the resolve, the ref does not know its target's serial, so its
/// frames (`NAMED`) take the name's strand. Once it knows the serial, its
/// frames should take the serial's strand, like those of a ref made by id, so
/// that what is sent through either kind of ref to one actor stays in
/// order. But a frame on the serial's strand may overtake frames still on
/// their way on the name's strand, so the ref moves only once it knows that
/// the receiver has taken every frame it sent on the name's strand.
///
/// The proof is a *fence*: a `RESOLVE` of the name sent on the name's strand,
/// which the receiver answers only after dispatching the frames sent before
/// it on that strand. The resolve itself is the first fence. If a frame went
/// on the name's strand after the last fence, the ref is
/// [`Settling`](NamedState::Settling): its frames, now addressed by
/// serial, keep the name's strand, and a new fence follows each answer until
/// one comes back with no frame sent after it. Then the ref is
/// [`Resolved`](NamedState::Resolved) and every later frame takes the
/// serial's strand. A ref that sends without a pause of one round trip stays
/// on the name's strand (one fence per round trip) and is still in order with
/// itself, just not with refs made by id. Frames on the name's strand are
/// queued with the state locked, so none slips between the check of
/// `fenced` and the switch.
enum NamedState {
    /// Not used yet: no resolve started.
    Unresolved {
        watchers: Vec<(u64, Watcher)>,
    },
    /// The resolve is under way. `fenced`: its `RESOLVE` has been sent and
    /// no frame after it on the name's strand.
    Resolving {
        watchers: Vec<(u64, Watcher)>,
        fenced: bool,
    },
    /// Resolved to `id`, but frames sent on the name's strand may not have
    /// been taken yet: frames keep that strand. `fenced`: a fence is on its
    /// way with no frame after it on the name's strand.
    Settling {
        id: ActorId,
        fenced: bool,
    },
    /// Resolved to `id`, and the name's strand drained: frames take the strand
    /// of `id`'s serial.
    Resolved(ActorId),
    Failed(ExitReason),
}

/// Where the next frame sent through a forged ref goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// Not used yet: start the resolve, then as `Name(None)`.
    Start,
    /// On the name's strand (with the state locked meanwhile): as `NAMED`
    /// (`None`) or as `MESSAGE` to the serial.
    Name(Option<ActorId>),
    /// On the serial's strand, like a ref made by id.
    Serial(ActorId),
    /// The resolve failed: nothing is sent.
    Failed,
}

impl Route {
    /// The strand of a frame sent this way: the serial's once settled, the
    /// name's before.
    fn strand(self, name_strand: Strand) -> Strand {
        match self {
            Route::Serial(id) => Strand::for_key(id.serial()),
            Route::Start | Route::Name(_) | Route::Failed => name_strand,
        }
    }
}

impl NamedState {
    fn route(&self) -> Route {
        match self {
            Self::Unresolved { .. } => Route::Start,
            Self::Resolving { .. } => Route::Name(None),
            Self::Settling { id, .. } => Route::Name(Some(*id)),
            Self::Resolved(id) => Route::Serial(*id),
            Self::Failed(_) => Route::Failed,
        }
    }

    /// The resolve starts (its fence is not sent yet).
    fn on_start(&mut self) {
        if let Self::Unresolved { watchers } = self {
            let watchers = std::mem::take(watchers);
            *self = Self::Resolving {
                watchers,
                fenced: false,
            };
        }
    }

    /// A frame went on the name's strand: no fence sent so far covers it.
    fn on_sent_on_name_strand(&mut self) {
        if let Self::Resolving { fenced, .. } | Self::Settling { fenced, .. } = self {
            *fenced = false;
        }
    }

    /// A fence went on the name's strand.
    fn on_fence_sent(&mut self) {
        if let Self::Resolving { fenced, .. } | Self::Settling { fenced, .. } = self {
            *fenced = true;
        }
    }

    /// The resolve found `id` (its answer is the first fence's). Returns the
    /// watchers to register, and whether another fence is needed.
    fn on_resolved(&mut self, id: ActorId) -> (Vec<(u64, Watcher)>, bool) {
        let (watchers, fenced) = match self {
            Self::Resolving { watchers, fenced } => (std::mem::take(watchers), *fenced),
            Self::Unresolved { watchers } => (std::mem::take(watchers), false),
            _ => (Vec::new(), false),
        };
        *self = if fenced {
            Self::Resolved(id)
        } else {
            Self::Settling { id, fenced: false }
        };
        (watchers, !fenced)
    }

    /// The answer to the last fence came. Returns whether the ref is
    /// resolved now (otherwise another fence is needed).
    fn on_fence_answered(&mut self) -> bool {
        match *self {
            Self::Settling { id, fenced: true } => {
                *self = Self::Resolved(id);
                true
            }
            Self::Settling { .. } => false,
            _ => true,
        }
    }

    /// The resolve failed. Returns the watchers to tell.
    fn on_failed(&mut self, reason: ExitReason) -> Vec<(u64, Watcher)> {
        let watchers = match self {
            Self::Resolving { watchers, .. } | Self::Unresolved { watchers } => {
                std::mem::take(watchers)
            }
            _ => Vec::new(),
        };
        *self = Self::Failed(reason);
        watchers
    }
}

/// The answer to a `RESOLVE`.
type ResolveAnswer = oneshot::Receiver<Result<Resolution, crate::error::LinkError>>;

impl RemoteActor {
    pub(crate) fn resolved(
        inner: &Arc<NodeInner>,
        id: ActorId,
        peer: Arc<Peer>,
        addr: String,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            id,
            inner: Arc::downgrade(inner),
            peer,
            addr,
            runtime: inner.system_runtime(),
            dead: AtomicBool::new(false),
            named: None,
        })
    }

    pub(crate) fn forged<M: RemoteMessage>(
        inner: &Arc<NodeInner>,
        id: ActorId,
        peer: Arc<Peer>,
        name: String,
        uri: String,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            id,
            inner: Arc::downgrade(inner),
            addr: peer.dial_uri(),
            peer,
            runtime: inner.system_runtime(),
            dead: AtomicBool::new(false),
            named: Some(Named {
                strand: Strand::for_key(crate::peer::name_key(&name)),
                name,
                uri,
                type_id: M::TYPE_ID,
                type_name: M::TYPE_NAME,
                state: Mutex::new(NamedState::Unresolved {
                    watchers: Vec::new(),
                }),
                #[cfg(test)]
                settled: tokio::sync::Notify::new(),
            }),
        })
    }

    /// Sends a frame about the target: `send` gets the strand (see
    /// [`NamedState`]) and the target (`None`: not resolved yet, address it
    /// by name) and queues the frame. `None` if the ref failed to resolve.
    /// A forged ref's first use starts its resolve.
    fn route<R>(self: &Arc<Self>, send: impl FnOnce(Strand, Option<ActorId>) -> R) -> Option<R> {
        let Some(n) = &self.named else {
            return Some(send(Strand::for_key(self.id.serial()), Some(self.id)));
        };
        let mut st = lock(&n.state);
        let route = st.route();
        let to = match route {
            Route::Serial(id) => {
                drop(st);
                return Some(send(route.strand(n.strand), Some(id)));
            }
            Route::Failed => return None,
            Route::Start => {
                self.start_resolve(&mut st);
                None
            }
            Route::Name(to) => to,
        };
        // With the state locked: no fence is sent, and no switch made,
        // between choosing the name's strand and queueing the frame on it.
        // (Counted as sent on the name's strand even if `send` sent nothing:
        // that only costs a fence.)
        let r = send(route.strand(n.strand), to);
        st.on_sent_on_name_strand();
        Some(r)
    }

    /// The actor's id on its node: the resolved one for forged proxies
    /// (`None` before, and the first call starts the resolve).
    fn target(self: &Arc<Self>) -> Option<ActorId> {
        let Some(n) = &self.named else {
            return Some(self.id);
        };
        let mut st = lock(&n.state);
        match st.route() {
            Route::Serial(id) | Route::Name(Some(id)) => Some(id),
            Route::Start => {
                self.start_resolve(&mut st);
                None
            }
            Route::Name(None) | Route::Failed => None,
        }
    }

    /// Starts the resolve of a forged ref (its state is locked).
    fn start_resolve(self: &Arc<Self>, st: &mut NamedState) {
        st.on_start();
        let me = self.clone();
        // It waits for the lock before it sends its fence, so a frame
        // queued by the caller under the same lock comes before it.
        self.runtime.spawn(async move { me.resolve_forged().await });
    }

    /// Sends a fence (a `RESOLVE` of the name) on the name's strand. `st` is
    /// `n.state`, locked: nothing else goes on that strand meanwhile.
    fn send_fence(
        &self,
        n: &Named,
        st: &mut NamedState,
    ) -> Result<ResolveAnswer, crate::error::LinkError> {
        let answer =
            self.peer
                .resolve(Carrier::Primary, n.strand, n.type_id, n.type_name, &n.name)?;
        st.on_fence_sent();
        Ok(answer)
    }

    async fn resolve_forged(self: Arc<Self>) {
        let Some(n) = &self.named else { return };
        let outcome = async {
            let node = self.peer.wait_up().await.map_err(|e| e.to_string())?;
            let rx = {
                let mut st = lock(&n.state);
                self.send_fence(n, &mut st)
            }
            .map_err(|e| e.to_string())?;
            match rx.await {
                Ok(Ok(Resolution::Found(serial))) => Ok(ActorId::new(node, serial)),
                Ok(Ok(Resolution::NoSuchName)) => {
                    Err(format!("no actor named {:?} on that node", n.name))
                }
                Ok(Ok(Resolution::WrongType { actual })) => Err(format!(
                    "wrong message type: expected {}, the actor accepts {actual}",
                    n.type_name
                )),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("node dropped".into()),
            }
        }
        .await;
        match outcome {
            Ok(id) => {
                let (watchers, mut fence) = {
                    let mut st = lock(&n.state);
                    let (watchers, more) = st.on_resolved(id);
                    (watchers, more.then(|| self.send_fence(n, &mut st)))
                };
                for (_, w) in watchers {
                    self.peer.watch(id, w);
                }
                // Fence until one comes back with nothing sent after it on
                // the name's strand. If the link fails a fence, the ref stays
                // on the name's strand: still in order with itself.
                loop {
                    let Some(answer) = fence else {
                        #[cfg(test)]
                        n.settled.notify_one();
                        break;
                    };
                    let Ok(rx) = answer else { break };
                    if !matches!(rx.await, Ok(Ok(_))) {
                        break;
                    }
                    let mut st = lock(&n.state);
                    fence = (!st.on_fence_answered()).then(|| self.send_fence(n, &mut st));
                }
            }
            Err(why) => {
                let reason = ExitReason::Failed(format!("resolve {}: {why}", n.uri));
                let watchers = lock(&n.state).on_failed(reason.clone());
                // The ref's user learns it (the ref is dead, its watchers
                // get the reason) and says so in its own words, as often as
                // it sees fit: a protocol forging refs to a dead peer would
                // repeat a warning here at every reconnect attempt.
                tracing::debug!(target: "plexus::remote", uri = %n.uri, cause = %why, "resolving a forged ref failed");
                self.dead.store(true, Ordering::Release);
                for (_, w) in watchers {
                    w.notify(Down {
                        id: self.id,
                        reason: reason.clone(),
                    });
                }
            }
        }
    }

    /// The frame of a message to `to`, or by name if `None` (only a forged
    /// ref before its resolve has no target), in a `TRACE` frame if it
    /// carries a trace context.
    fn message_to(
        &self,
        to: Option<ActorId>,
        type_id: u64,
        receipt: u64,
        payload: &[u8],
        trace: Option<TraceContext>,
    ) -> Bytes {
        let name = match to {
            Some(_) => "",
            None => self.named.as_ref().map_or("", |n| n.name.as_str()),
        };
        let mut b = BytesMut::with_capacity(
            crate::wire::TRACE_HEADER_LEN + 32 + name.len() + payload.len(),
        );
        if let Some(trace) = &trace {
            crate::wire::put_trace_header(&mut b, trace);
        }
        match to {
            Some(to) => crate::wire::put_message_header(&mut b, to.serial(), type_id, receipt),
            None => WireFrame::Named {
                name: name.to_owned(),
                type_id,
                receipt,
                payload: Bytes::new(),
            }
            .encode_into(&mut b),
        }
        b.put_slice(payload);
        b.freeze()
    }

    /// Queues a message frame around `payload` on this ref's route. `None`
    /// if a forged ref failed to resolve.
    fn try_send_payload(
        self: &Arc<Self>,
        lane: Lane,
        type_id: u64,
        payload: &Bytes,
        trace: Option<TraceContext>,
    ) -> Option<Result<(), Undelivered>> {
        self.route(|strand, to| {
            let frame = self.message_to(to, type_id, 0, payload, trace);
            self.peer.send_frame(Carrier::Lane(lane), strand, frame)
        })
    }

    /// A message the peer refused: counted on the peer, a dead letter.
    fn refused(&self, type_name: &'static str, why: Undelivered) {
        self.peer.count_refusal(why);
        self.dead_letter_here(type_name, why.reason());
    }

    fn dead_letter_here(&self, type_name: &'static str, reason: DeadLetterReason) {
        if let Some(inner) = self.inner.upgrade() {
            inner
                .system
                .dead_letters()
                .record(self.id, type_name, reason);
        }
    }
}

/// A scratch buffer that survives the frame larger than this is given back
/// to the allocator instead.
const SCRATCH_KEEP: usize = 64 << 10;
/// A frame at least this long leaves in the buffer it was encoded in
/// (the scratch takes a new one): copying it out would cost a copy on top
/// of the same allocation (a copy was 6 % of a W5 device process's time).
/// Shorter frames are copied, into the frame's headroom or a buffer of
/// their size, and the scratch is reused.
const HAND_OVER: usize = 4096;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's empty frame buffer: messages are encoded into
/// it and copied once into the link's outgoing bytes, so a message costs no
/// allocation of its own (a long one leaves in it instead: [`HAND_OVER`]). Re-entered (a message encoded while encoding
/// another), it falls back to a fresh buffer.
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let r = f(&mut buf);
            if buf.capacity() > SCRATCH_KEEP {
                *buf = Vec::new();
            }
            r
        }
        Err(_) => f(&mut Vec::with_capacity(64)),
    })
}

impl RemoteEndpoint for RemoteActor {
    fn path(&self) -> ActorPath {
        ActorPath {
            id: self.id,
            addr: self.addr.clone(),
        }
    }

    fn wire_context(&self) -> &Arc<dyn WireContext> {
        self.peer.canonical().context()
    }

    fn send_encoded(
        &self,
        lane: Lane,
        type_id: u64,
        type_name: &'static str,
        encode: &mut dyn FnMut(&mut Vec<u8>) -> Result<(), CodecError>,
    ) -> Result<bool, CodecError> {
        // Forged proxies not yet settled on their target's strand take the
        // general path.
        let target = match &self.named {
            None => self.id,
            Some(n) => match &*lock(&n.state) {
                NamedState::Resolved(id) => *id,
                _ => return Ok(false),
            },
        };
        let trace = plexus_core::trace::current();
        with_scratch(|frame| {
            if let Some(trace) = &trace {
                crate::wire::put_trace_header(frame, trace);
            }
            crate::wire::put_message_header(frame, target.serial(), type_id, 0);
            encode(frame)?;
            let strand = Strand::for_key(target.serial());
            let carrier = Carrier::Lane(lane);
            if frame.len() < HAND_OVER && cork::hold(self, carrier, strand, frame, type_name) {
                return Ok(true);
            }
            let sent = if frame.len() >= HAND_OVER {
                // The buffer leaves with the frame; the scratch gets a new
                // one of the same capacity.
                let full = std::mem::replace(frame, Vec::with_capacity(frame.capacity()));
                self.peer.send_frame(carrier, strand, Bytes::from(full))
            } else {
                self.peer.send_slice(carrier, strand, frame)
            };
            if let Err(why) = sent {
                self.refused(type_name, why);
            }
            Ok(true)
        })
    }

    fn send(&self, lane: Lane, type_id: u64, type_name: &'static str, payload: Bytes) {
        // A refused message is dead-lettered there.
        let _ = self.send_checked(lane, type_id, type_name, payload);
    }

    fn send_checked(
        &self,
        lane: Lane,
        type_id: u64,
        type_name: &'static str,
        payload: Bytes,
    ) -> Result<(), DeadLetterReason> {
        // Called through an Arc, so the upgrade succeeds; never drop silently.
        let Some(me) = self.arc() else {
            self.dead_letter_here(type_name, DeadLetterReason::Undeliverable);
            return Err(DeadLetterReason::Undeliverable);
        };
        match me.try_send_payload(lane, type_id, &payload, plexus_core::trace::current()) {
            Some(Ok(())) => Ok(()),
            Some(Err(why)) => {
                self.refused(type_name, why);
                Err(why.reason())
            }
            None => {
                self.dead_letter_here(type_name, DeadLetterReason::Stopped);
                Err(DeadLetterReason::Stopped)
            }
        }
    }

    fn send_when_room(
        &self,
        lane: Lane,
        type_id: u64,
        type_name: &'static str,
        payload: Bytes,
    ) -> Option<RoomWait<'_>> {
        let Some(me) = self.arc() else {
            self.dead_letter_here(type_name, DeadLetterReason::Undeliverable);
            return None;
        };
        // Captured once: a retry runs wherever the waiting future is
        // polled.
        let trace = plexus_core::trace::current();
        match me.try_send_payload(lane, type_id, &payload, trace) {
            Some(Ok(())) => None,
            Some(Err(Undelivered::Full)) => Some(Box::pin(async move {
                // The frame's header and a forged ref's name come on top of
                // the payload.
                let len = payload.len() + 64;
                loop {
                    me.peer.room(Carrier::Lane(lane), len).await;
                    if !me.is_alive() {
                        me.dead_letter_here(type_name, DeadLetterReason::Stopped);
                        return;
                    }
                    match me.try_send_payload(lane, type_id, &payload, trace) {
                        Some(Ok(())) => return,
                        // Another sender took the room first.
                        Some(Err(Undelivered::Full)) => {}
                        Some(Err(why)) => return me.refused(type_name, why),
                        None => return me.dead_letter_here(type_name, DeadLetterReason::Stopped),
                    }
                }
            })),
            Some(Err(why)) => {
                self.refused(type_name, why);
                None
            }
            None => {
                self.dead_letter_here(type_name, DeadLetterReason::Stopped);
                None
            }
        }
    }

    fn send_with_receipt(
        &self,
        lane: Lane,
        type_id: u64,
        type_name: &'static str,
        payload: Bytes,
    ) -> ReceiptFuture {
        let Some(me) = self.arc() else {
            return ReceiptFuture::ready(Err(ReceiptError::Stopped));
        };
        let trace = plexus_core::trace::current();
        let sent = me.route(|strand, to| {
            self.peer.send_with_receipt(lane, strand, |id| {
                me.message_to(to, type_id, id, &payload, trace)
            })
        });
        sent.unwrap_or_else(|| {
            self.dead_letter_here(type_name, DeadLetterReason::Stopped);
            ReceiptFuture::ready(Err(ReceiptError::Stopped))
        })
    }

    fn route(&self, properties: &MessageProperties) -> Result<Lane, RouteError> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(properties.lane());
        };
        let peer = self.peer.canonical();
        inner.route(self.id, properties, &peer.scheme)
    }

    fn dead_letter(&self, type_name: &'static str, reason: DeadLetterReason) {
        self.dead_letter_here(type_name, reason);
    }
}

impl RemoteActor {
    fn arc(&self) -> Option<Arc<Self>> {
        self.me.upgrade()
    }

    pub(crate) fn mark_dead(&self) {
        self.dead.store(true, Ordering::Release);
    }
}

impl Control for RemoteActor {
    fn id(&self) -> ActorId {
        self.id
    }

    fn is_alive(&self) -> bool {
        if self.dead.load(Ordering::Acquire) {
            return false;
        }
        match &self.named {
            None => self.peer.node_alive(self.id.node()),
            Some(n) => match &*lock(&n.state) {
                NamedState::Failed(_) => false,
                NamedState::Resolved(id) | NamedState::Settling { id, .. } => {
                    self.peer.node_alive(id.node())
                }
                _ => true,
            },
        }
    }

    fn try_acquire(&self) -> Result<(), Refusal> {
        if self.is_alive() {
            Ok(())
        } else {
            Err(Refusal::Stopped)
        }
    }

    fn semaphore(&self) -> Option<&Semaphore> {
        None
    }

    fn signal(&self, signal: Signal) -> bool {
        if matches!(signal, Signal::Down(_)) {
            return false;
        }
        let Some(me) = self.arc() else { return false };
        me.route(|strand, target| {
            // Not resolved yet: a signal needs the serial.
            let Some(target) = target else { return false };
            let frame = match signal {
                Signal::Stop(_) => WireFrame::Stop {
                    target: target.serial(),
                    kill: false,
                },
                Signal::Kill => WireFrame::Stop {
                    target: target.serial(),
                    kill: true,
                },
                // A local actor linked to this one exited.
                Signal::Exit(exit) => WireFrame::Exit {
                    from: exit.from.serial(),
                    to: target.serial(),
                    reason: exit.reason,
                },
                Signal::Down(_) => return false,
            };
            self.peer
                .send_frame(Carrier::Lane(Lane::Control), strand, frame.encode())
                .is_ok()
        })
        .unwrap_or(false)
    }

    fn kill(&self) {
        self.signal(Signal::Kill);
    }

    fn watch(&self, watcher: Watcher) -> Option<u64> {
        if let Some(n) = &self.named {
            let mut st = lock(&n.state);
            match &mut *st {
                NamedState::Resolved(id) | NamedState::Settling { id, .. } => {
                    let id = *id;
                    drop(st);
                    return self.peer.watch(id, watcher);
                }
                NamedState::Failed(reason) => {
                    let reason = reason.clone();
                    drop(st);
                    watcher.notify(Down {
                        id: self.id,
                        reason,
                    });
                    return None;
                }
                NamedState::Unresolved { watchers } | NamedState::Resolving { watchers, .. } => {
                    let token = self.inner.upgrade().map_or(0, |i| i.next_id());
                    watchers.push((token, watcher));
                    drop(st);
                    if let Some(me) = self.arc() {
                        me.target();
                    }
                    return Some(token);
                }
            }
        }
        self.peer.watch(self.id, watcher)
    }

    fn unwatch(&self, token: u64) {
        if let Some(n) = &self.named {
            let mut st = lock(&n.state);
            match &mut *st {
                NamedState::Unresolved { watchers } | NamedState::Resolving { watchers, .. } => {
                    watchers.retain(|(t, _)| *t != token);
                    return;
                }
                NamedState::Resolved(id) | NamedState::Settling { id, .. } => {
                    let id = *id;
                    drop(st);
                    self.peer.unwatch(id, token);
                    return;
                }
                NamedState::Failed(_) => return,
            }
        }
        self.peer.unwatch(self.id, token);
    }

    fn add_link(&self, other: Arc<dyn Control>) -> Result<(), ExitReason> {
        let Some(inner) = self.inner.upgrade() else {
            return Err(ExitReason::Killed);
        };
        let Some(target) = self.arc().and_then(|me| me.target()) else {
            return Err(ExitReason::Failed(
                "the forged ref is not resolved yet".into(),
            ));
        };
        if !self.is_alive() {
            return Err(ExitReason::NodeDown {
                node: target.node(),
                cause: "no link to the node".into(),
            });
        }
        inner.export_control(other.clone());
        self.peer.add_link(other, target);
        Ok(())
    }

    fn remove_link(&self, other: ActorId) {
        if let Some(target) = self.arc().and_then(|me| me.target()) {
            self.peer.remove_link(other, target);
        }
    }

    fn add_name(&self, _name: &str) -> bool {
        self.is_alive()
    }

    fn remove_name(&self, _name: &str) {}

    fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }
}

pub(crate) mod cork;

#[cfg(test)]
mod tests;
