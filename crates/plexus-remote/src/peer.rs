//! One link to one remote node over one scheme: connecting (lazily, with
//! backoff), the handshake, the reader that dispatches frames, and what a
//! lost link means (monitors see `Down`, links `Exit`, asks and receipts
//! fail).
//!
//! A peer is first known either by the address we dial or, once a
//! handshake completes, by its node id. If a dialled address turns out to
//! be a node we already have a peer for, the new peer forwards to that one,
//! so every proxy reaches the node through one link. Two links to one node
//! (both sides dialled at once) settle on the one dialled by the lower node
//! id: both sides apply the same rule.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use plexus_core::remote::{Control, ReceiptError, ReceiptFuture, Signal, Watcher, WireContext};
use plexus_core::Lane;
use plexus_core::{ActorId, DeadLetterReason, Down, Exit, ExitReason, LinkCause, NodeId, Receipt};
use plexus_net::LinkEvent;
use plexus_transport::{Link, LinkStats, LinkTrySendError, Received, Strand};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::close::CloseCause;
use crate::context::PeerContext;
use crate::driver::Locked;
use crate::error::LinkError;
use crate::handshake::{self, Handshake};
use crate::node::{lock, NodeInner};
use crate::proxy::RemoteActor;
use crate::selector::{Resequencer, ResequencerConfig};
use crate::wire::{GoodbyeCode, Resolution, WireFrame};

mod adaptive;
mod bind;
mod carry;
mod dispatch;
mod links;
pub(crate) mod session;
mod shell;
mod strands;
#[cfg(test)]
mod tests;

pub(crate) use shell::accept;
use shell::{established, handshake_on};

use dispatch::{wait_drained, DriverDispatch, Reading};
pub use links::LaneCandidate;
use links::SessionLinks;
pub(crate) use links::{BoundLink, Carrier};
use session::{Abandoned, Backoff, Phase, Session};
use strands::down_token;
pub(crate) use strands::{name_key, strand_of};

pub(crate) struct Peer {
    inner: Weak<NodeInner>,
    pub(crate) scheme: String,
    dial: Mutex<Option<String>>,
    /// The peer's protocol, stepped by whichever task has an input for it
    /// (the driver's locked form; `peer/carry.rs` carries out its steps).
    session: Locked<LiveSession>,
    forward: OnceLock<Arc<Peer>>,
    ctx: OnceLock<Arc<dyn WireContext>>,
    /// The links of the session while it is up, published after the
    /// frames held for it went out: a send takes them without the session
    /// lock, so no lock is held across a stack run or a socket write. A
    /// send that finds none, or finds them closed, takes the lock.
    links: ArcSwapOption<SessionLinks>,
    /// Mirrors of `session` read on every send without the lock: whether the
    /// link is down, and the node behind it (0: not known yet).
    down: AtomicBool,
    remote_node: AtomicU64,
    /// Messages refused because the link's send buffer (or the frames held
    /// while connecting) was full; see [`Node::link_stats`](crate::Node::link_stats).
    refused_full: AtomicU64,
    /// The proxy of the remote actor whose ref arrived through this peer
    /// last (see [`recent_import`](Peer::recent_import)), kept while the
    /// link is up. A request–response exchange brings the same sender's
    /// ref with every request: without it, each would build a proxy (and
    /// copy its address) for one reply, then drop it. It holds this peer,
    /// so it is let go when the link goes down.
    recent_import: Mutex<Option<Arc<RemoteActor>>>,
    /// Per lane: the order of the current session's frames on it, if it is
    /// an adaptive lane of the peer (its frames come over several links).
    resequencers: Mutex<[Resequencer<Bytes>; Lane::COUNT]>,
}

/// Fresh resequencers: every session numbers its lanes' frames from 0.
fn fresh_resequencers() -> [Resequencer<Bytes>; Lane::COUNT] {
    std::array::from_fn(|_| Resequencer::new(ResequencerConfig::default()))
}

/// The real handles a peer's [`Session`] holds.
pub(crate) struct Live;

impl session::Handles for Live {
    /// Shared with the lock-free send path ([`Peer::links`]).
    type Sender = Arc<SessionLinks>;
    /// A held frame, and the node it was meant for if one was known when
    /// it was queued (see [`flush`]).
    type Held = (Carrier, Strand, Bytes, Option<NodeId>);
    type Waiter = oneshot::Sender<Result<NodeId, LinkError>>;
    type Resolve = oneshot::Sender<Result<Resolution, LinkError>>;
    type Receipt = oneshot::Sender<Result<(), ReceiptError>>;
    type Watcher = Watcher;
    type Local = Arc<dyn Control>;
}

type LiveSession = Session<Live>;

/// Why a frame could not be queued for the peer; the caller dead-letters
/// it (or, sending with [`ActorRef::send`](plexus_core::ActorRef::send),
/// waits for room and tries again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undelivered {
    /// The send buffer of the link is full, or while no link is up the
    /// frames held for it reached their bound
    /// ([`NodeConfig::pending_messages`](crate::NodeConfig::pending_messages)).
    Full,
    /// The frame cannot travel on the link at all (too large for its
    /// stack, a file region that could not be read).
    Refused,
}

impl Undelivered {
    /// The dead-letter reason of a frame refused so.
    pub(crate) fn reason(self) -> DeadLetterReason {
        match self {
            Undelivered::Full => DeadLetterReason::SendBufferFull,
            Undelivered::Refused => DeadLetterReason::Undeliverable,
        }
    }

    /// The receipt error of a frame refused so.
    pub(crate) fn receipt_error(self) -> ReceiptError {
        match self {
            Undelivered::Full => ReceiptError::SendBufferFull,
            Undelivered::Refused => ReceiptError::Undeliverable,
        }
    }
}

/// Held by a peer's read task: releases the peer's recent import when the
/// task ends, also when it is dropped without running to its end (a
/// runtime shutting down with the link up), where no `link_down` runs.
pub(crate) struct ImportRelease(pub(crate) Arc<Peer>);

impl Drop for ImportRelease {
    fn drop(&mut self) {
        self.0.release_import();
    }
}

impl Peer {
    pub(crate) fn new(inner: &Arc<NodeInner>, scheme: &str, dial: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            inner: Arc::downgrade(inner),
            scheme: scheme.to_owned(),
            dial: Mutex::new(dial),
            session: Locked::new(Session::new(inner.id, Self::backoff(inner))),
            links: ArcSwapOption::empty(),
            forward: OnceLock::new(),
            ctx: OnceLock::new(),
            down: AtomicBool::new(false),
            remote_node: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
            recent_import: Mutex::new(None),
            resequencers: Mutex::new(fresh_resequencers()),
        })
    }

    /// Whether the node behind this peer is `node` (read without the lock).
    pub(crate) fn is_node(self: &Arc<Self>, node: NodeId) -> bool {
        self.canonical().remote_node.load(Ordering::Acquire) == node.as_u64()
    }

    /// The proxy of `id` if it is the one imported through this peer last.
    pub(crate) fn recent_import(&self, id: ActorId) -> Option<Arc<RemoteActor>> {
        lock(&self.recent_import)
            .as_ref()
            .filter(|p| p.id() == id)
            .cloned()
    }

    /// Keeps `proxy`, imported through this peer, as the recent one; not
    /// while the link is down (nothing would let it go).
    pub(crate) fn keep_import(&self, proxy: &Arc<RemoteActor>) {
        let old = lock(&self.recent_import).replace(proxy.clone());
        drop(old);
        // After the store: a link going down meanwhile either took it, or
        // is seen here (its flag is set before it takes).
        if self.down.load(Ordering::SeqCst) {
            self.release_import();
        }
    }

    /// Lets go of the proxy kept by [`keep_import`](Peer::keep_import),
    /// which holds this peer: when the link goes down, and when its read
    /// task ends however it ends ([`ImportRelease`]; also when the node is
    /// gone and `link_down` leaves the phase as it is).
    pub(crate) fn release_import(&self) {
        // Taken out first: a proxy is dropped without the lock held.
        let kept = lock(&self.recent_import).take();
        drop(kept);
    }

    /// The peer that actually holds the link (see the module docs).
    pub(crate) fn canonical(self: &Arc<Self>) -> &Arc<Peer> {
        let mut p = self;
        while let Some(next) = p.forward.get() {
            p = next;
        }
        p
    }

    pub(crate) fn context(self: &Arc<Self>) -> &Arc<dyn WireContext> {
        self.ctx
            .get_or_init(|| Arc::new(PeerContext::new(self.inner.clone(), Arc::downgrade(self))))
    }

    /// Whether this peer is dialled (or was accepted from a node that
    /// listens) at `addr`.
    pub(crate) fn dials(&self, addr: &str) -> bool {
        lock(&self.dial).as_deref() == Some(addr)
    }

    pub(crate) fn dial_uri(&self) -> String {
        lock(&self.dial)
            .as_ref()
            .map(|a| format!("{}://{}", self.scheme, a))
            .unwrap_or_default()
    }

    pub(crate) fn remote(self: &Arc<Self>) -> Option<NodeId> {
        self.canonical().session.read(|st| st.remote)
    }

    pub(crate) fn is_up(&self) -> bool {
        self.session.read(LiveSession::is_up)
    }

    /// Steps the session with `input` (see [`Locked::step`]): what it
    /// produces is carried out by this peer (`peer/carry.rs`) after the
    /// lock is let go.
    fn step<R>(
        self: &Arc<Self>,
        input: impl FnOnce(&mut LiveSession, std::time::Instant) -> R,
    ) -> R {
        self.session.step(self, input)
    }

    /// The link's address and counters, while it is up, the messages
    /// refused for a full send buffer so far, and the stray answers.
    pub(crate) fn link_stats(&self) -> Option<(String, LinkStats, u64, u64)> {
        self.session.read(|st| {
            st.sender().map(|s| {
                (
                    s.peer().to_owned(),
                    s.stats(),
                    self.refused_full.load(Ordering::Relaxed),
                    st.stray_answers(),
                )
            })
        })
    }

    /// A frame of this node's own (a reply) the peer refused: counted and
    /// a dead letter, `what` naming it.
    pub(crate) fn dead_letter(self: &Arc<Self>, what: &'static str, why: Undelivered) {
        self.count_refusal(why);
        let p = self.canonical();
        if let Some(inner) = p.inner.upgrade() {
            let node = NodeId::from_u64(p.remote_node.load(Ordering::Acquire));
            inner
                .system
                .dead_letters()
                .record(ActorId::new(node, 0), what, why.reason());
        }
    }

    /// Counts a message refused for a full send buffer (the caller
    /// dead-letters it).
    pub(crate) fn count_refusal(self: &Arc<Self>, why: Undelivered) {
        if why == Undelivered::Full {
            self.canonical()
                .refused_full
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What the stack carrying `lane` guarantees: the session's link for it
    /// while the session is up (a peer may have bound lanes this node's
    /// configuration does not map), else what the configuration says.
    fn lane_guarantees(&self, inner: &NodeInner, lane: Lane) -> plexus_net::Guarantees {
        self.session.read(|st| match st.sender() {
            Some(links) => links.guarantees(lane, inner.scheme_guarantees(&self.scheme)),
            None => inner.lane_guarantees(lane, &self.scheme),
        })
    }

    /// What each lane of the session carries, while it is up.
    pub(crate) fn lane_stats(&self) -> Option<Vec<(Lane, u64, Vec<LaneCandidate>)>> {
        self.session
            .read(|st| st.sender().map(|links| links.lane_stats(&self.scheme)))
    }

    /// Whether actors of `node` may be reached through this peer: it is up,
    /// reconnecting or idle (a link closed for idleness is dialled again on
    /// the next send), and the node behind it has not changed.
    pub(crate) fn node_alive(self: &Arc<Self>, node: NodeId) -> bool {
        let p = self.canonical();
        if p.down.load(Ordering::Acquire) {
            return false;
        }
        let remote = p.remote_node.load(Ordering::Acquire);
        remote == 0 || remote == node.as_u64()
    }

    /// Mirrors `st`'s phase after a transition (under its lock, from
    /// `Carry::stepped`): the links for the lock-free send path, the
    /// `down` flag, and a down link lets go of its import.
    fn mirror(&self, st: &LiveSession) {
        self.links.store(st.sender().cloned());
        let down = st.is_down();
        self.down.store(down, Ordering::SeqCst);
        if down {
            self.release_import();
        }
    }

    /// The node's reconnect backoff.
    fn backoff(inner: &NodeInner) -> Backoff {
        Backoff {
            min: inner.config.reconnect_min,
            max: inner.config.reconnect_max,
        }
    }

    /// Starts connecting if idle or down (after the backoff).
    pub(crate) fn ensure_connected(self: &Arc<Self>) {
        let p = self.canonical();
        let can_dial = lock(&p.dial).is_some();
        let Some(delay) = p.step(|st, _| st.begin_connect(can_dial)) else {
            return;
        };
        let peer = p.clone();
        // A tell from any thread may get here: spawn on the node's runtime.
        if let Some(inner) = p.inner.upgrade() {
            // The connect and handshake, not the session's traffic (its
            // tasks are spawned outside this span).
            let span = tracing::info_span!(
                target: "plexus::remote",
                "connect",
                node = %inner.id,
                peer = %p.dial_uri(),
            );
            inner
                .system_runtime()
                .spawn(async move { peer.connect(delay).await }.instrument(span));
        }
    }

    /// Waits until the link is up; returns the node behind it.
    pub(crate) async fn wait_up(self: &Arc<Self>) -> Result<NodeId, LinkError> {
        let p = self.canonical();
        let can_dial = lock(&p.dial).is_some();
        let rx = p.step(|st, _| {
            if let (true, Some(n)) = (st.is_up(), st.remote) {
                return Err(Ok(n));
            }
            if !can_dial {
                return Err(Err(st.last_error.clone().unwrap_or(LinkError::NoAddress)));
            }
            let (tx, rx) = oneshot::channel();
            st.waiters.push(tx);
            Ok(rx)
        });
        let rx = match rx {
            Ok(rx) => rx,
            Err(known) => return known,
        };
        p.ensure_connected();
        // The connect attempt's steps have their own timeouts (three at
        // most, one after another); this only guards against a waiter that
        // nothing answers.
        let limit = p
            .inner
            .upgrade()
            .map_or(Duration::from_secs(5), |i| i.config.connect_timeout * 4);
        match tokio::time::timeout(limit, rx).await {
            Ok(r) => r.unwrap_or(Err(LinkError::ShuttingDown)),
            Err(_) => Err(LinkError::Timeout(limit)),
        }
    }

    async fn connect(self: Arc<Self>, delay: Option<std::time::Instant>) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        if let Some(at) = delay {
            tokio::time::sleep_until(Instant::from_std(at)).await;
        }
        // Each step has the connect timeout of its own, not one budget for
        // their sum (docs/PROTOCOL.md, "Lanes"): the primary link's connect
        // and handshake, then its lane connections (all at once, each
        // within the timeout), then `LANES`. So the time a session takes to
        // come up does not grow with the number of its lane connections.
        let timeout = inner.config.connect_timeout;
        let attempt = async {
            let (link, hs) = within(timeout, async {
                let dialer = inner.dialer(&self.scheme).await?;
                let addr = lock(&self.dial).clone().unwrap_or_default();
                let mut link = dialer.connect(&addr).await?;
                let hs = handshake_on(&inner, &mut link).await?;
                Ok((link, hs))
            })
            .await?;
            let lanes = bind::dial_lanes(&inner, &hs).await?;
            let bound = lanes
                .iter()
                .map(|l| (l.lane.index() as u8, l.candidate))
                .collect();
            within(timeout, async {
                link.send(WireFrame::Lanes { bound }.encode())
                    .await
                    .map_err(LinkError::from)
            })
            .await?;
            Ok::<_, LinkError>((link, lanes, hs))
        };
        match attempt.await {
            Ok((link, lanes, hs)) => established(&inner, Some(self), link, lanes, hs, inner.id),
            Err(e) => self.failed(&inner, e),
        }
    }

    fn failed(self: &Arc<Self>, inner: &Arc<NodeInner>, error: LinkError) {
        tracing::debug!(target: "plexus::remote", peer = %self.dial_uri(), %error, "connect failed");
        let (abandoned, node) = self.step(|st, now| (st.connect_failed(now, error), st.remote));
        // Requests held for the link (asks among them) are dead letters
        // now: their replies cannot come.
        if let Some(n) = node.filter(|_| !abandoned.pending.is_empty()) {
            inner.fail_replies_of(n, &LinkCause::new(abandoned.error.clone()));
        }
        self.give_up(inner, abandoned);
    }

    /// Fails what a failed connect abandoned.
    fn give_up(&self, inner: &NodeInner, abandoned: Abandoned<Live>) {
        let Abandoned {
            error,
            pending,
            waiters,
            resolves,
            receipts,
        } = abandoned;
        // Dead letters first: whoever the failure wakes sees them counted.
        let dead = inner.system.dead_letters();
        for _ in pending {
            dead.record(
                ActorId::new(NodeId::from_u64(0), 0),
                "remote message (the link to its node could not be made)",
                DeadLetterReason::Undeliverable,
            );
        }
        for w in waiters {
            let _ = w.send(Err(error.clone()));
        }
        for r in resolves.into_values() {
            let _ = r.send(Err(error.clone()));
        }
        let cause = LinkCause::new(error);
        for r in receipts.into_values() {
            let _ = r.send(Err(ReceiptError::LinkClosed(cause.clone())));
        }
    }

    /// Queues an encoded frame for the peer on `carrier` and `strand`
    /// (held while connecting, up to the configured bound). See
    /// [`strand_of`] for which strand a frame takes.
    pub(crate) fn send_frame(
        self: &Arc<Self>,
        carrier: Carrier,
        strand: Strand,
        frame: Bytes,
    ) -> Result<(), Undelivered> {
        // What this thread's actor holds goes first (see `proxy::cork`).
        crate::proxy::cork::flush();
        let p = self.canonical();
        let frame = match &*p.links.load() {
            Some(links) => match link_sent(links.try_send_on(carrier, strand, frame)) {
                Sent::Done(outcome) => return outcome,
                // Lost, or retired for a duplicate: the lock decides.
                Sent::Closed(frame) => frame,
            },
            None => frame,
        };
        let bound = p.inner.upgrade().map_or(0, |i| i.config.pending_messages);
        let held = p.step(|st, _| {
            let meant_for = st.remote;
            if let Some(links) = st.sender() {
                return match link_sent(links.try_send_on(carrier, strand, frame)) {
                    Sent::Done(outcome) => outcome.map(|()| false),
                    Sent::Closed(frame) => {
                        // The reader will mark the link down; hold the
                        // frame for the reconnect like any other.
                        st.pending.push_back((carrier, strand, frame, meant_for));
                        Ok(false)
                    }
                };
            }
            if st.pending.len() >= bound {
                return Err(Undelivered::Full);
            }
            st.pending.push_back((carrier, strand, frame, meant_for));
            Ok(true)
        })?;
        if held {
            p.ensure_connected();
        }
        Ok(())
    }

    /// [`send_frame`](Peer::send_frame) for a frame in a scratch buffer:
    /// copied once, into the link's outgoing bytes where the link allows.
    pub(crate) fn send_slice(
        self: &Arc<Self>,
        carrier: Carrier,
        strand: Strand,
        frame: &[u8],
    ) -> Result<(), Undelivered> {
        crate::proxy::cork::flush();
        let p = self.canonical();
        if let Some(links) = &*p.links.load() {
            return match link_sent(links.try_send_copy_on(carrier, strand, frame)) {
                Sent::Done(outcome) => outcome,
                Sent::Closed(frame) => p.send_frame(carrier, strand, frame),
            };
        }
        p.send_frame(carrier, strand, Bytes::copy_from_slice(frame))
    }

    /// Queues a run of frames laid end to end in `bytes` (frame `i` ends
    /// at `ends[i]`) on the link that is up, if it has room for all of
    /// them: how many were queued, all or none. The caller sends the rest
    /// one by one ([`send_slice`](Peer::send_slice)).
    pub(crate) fn send_run(
        self: &Arc<Self>,
        carrier: Carrier,
        strand: Strand,
        bytes: &[u8],
        ends: &[u32],
    ) -> usize {
        match &*self.canonical().links.load() {
            Some(links) => links.try_send_copies_on(carrier, strand, bytes, ends),
            None => 0,
        }
    }

    /// Waits until a frame of `len` bytes on `carrier` would fit: in the
    /// send buffer of the link that carries it, or, while no link is up,
    /// until one is (the frames held meanwhile have a bound). For a sender
    /// that waits for room ([`ActorRef::send`](plexus_core::ActorRef::send))
    /// and then tries its send again. Returns at once if the link is lost
    /// or cannot be made: the next try holds or dead-letters the frame.
    pub(crate) async fn room(self: &Arc<Self>, carrier: Carrier, len: usize) {
        let p = self.canonical().clone();
        let links = p.session.read(|st| st.sender().cloned());
        match links {
            Some(links) => links.room(carrier, len).await,
            None => {
                let _ = p.wait_up().await;
            }
        }
    }

    /// Sends a system frame: on the control lane, on its strand.
    pub(crate) fn send(self: &Arc<Self>, frame: &WireFrame) -> Result<(), Undelivered> {
        self.send_frame(
            Carrier::Lane(Lane::Control),
            strand_of(frame),
            frame.encode(),
        )
    }

    /// Sends a `RESOLVE` on `carrier` and `strand`; the answer arrives on
    /// the returned channel. The receiver answers a `RESOLVE` only after
    /// the frames sent before it on the same link and strand, so a forged
    /// ref uses it on the primary link and its name's strand as a fence
    /// (see `proxy.rs`); others send it on the control lane.
    pub(crate) fn resolve(
        self: &Arc<Self>,
        carrier: Carrier,
        strand: Strand,
        type_id: u64,
        type_name: &str,
        name: &str,
    ) -> Result<oneshot::Receiver<Result<Resolution, LinkError>>, LinkError> {
        let p = self.canonical();
        let Some(inner) = p.inner.upgrade() else {
            return Err(LinkError::ShuttingDown);
        };
        let request = inner.next_id();
        let (tx, rx) = oneshot::channel();
        p.step(|st, _| st.expect_resolved(request, tx));
        let frame = WireFrame::Resolve {
            request,
            type_id,
            type_name: type_name.to_owned(),
            name: name.to_owned(),
        };
        p.send_frame(carrier, strand, frame.encode())
            .map_err(|_| LinkError::SendBufferFull)?;
        Ok(rx)
    }

    /// Sends a message frame that asks for a receipt, on `lane`. On a lane
    /// whose stack may lose it (the receipt could be lost as well), the
    /// frame asks for none and the receipt says [`Receipt::Sent`] once it
    /// is queued.
    ///
    /// [`Receipt::Sent`]: plexus_core::Receipt::Sent
    pub(crate) fn send_with_receipt(
        self: &Arc<Self>,
        lane: Lane,
        strand: Strand,
        build: impl FnOnce(u64) -> Bytes,
    ) -> ReceiptFuture {
        let p = self.canonical();
        let Some(inner) = p.inner.upgrade() else {
            return ReceiptFuture::ready(Err(ReceiptError::NodeStopped));
        };
        if !p.lane_guarantees(&inner, lane).reliable {
            return ReceiptFuture::ready(
                match p.send_frame(Carrier::Lane(lane), strand, build(0)) {
                    Ok(()) => Ok(Receipt::Sent),
                    Err(why) => {
                        p.count_refusal(why);
                        Err(why.receipt_error())
                    }
                },
            );
        }
        let (tx, rx) = oneshot::channel();
        let id = inner.next_id();
        p.step(|st, _| st.expect_receipt(id, tx));
        if let Err(why) = p.send_frame(Carrier::Lane(lane), strand, build(id)) {
            p.count_refusal(why);
            if let Some(tx) = p.step(|st, _| st.handle_receipt(id)) {
                let _ = tx.send(Err(why.receipt_error()));
            }
        }
        ReceiptFuture::pending(rx)
    }

    /// Registers a local watcher of a remote actor and sends `MONITOR`.
    pub(crate) fn watch(self: &Arc<Self>, target: ActorId, watcher: Watcher) -> Option<u64> {
        let p = self.canonical();
        let Some(inner) = p.inner.upgrade() else {
            watcher.notify(node_down(target, "node dropped"));
            return None;
        };
        let watcher_strand = match &watcher {
            Watcher::Actor(w) => Strand::for_key(w.id().serial()),
            _ => Strand::ZERO,
        };
        let token = down_token(inner.next_id(), watcher_strand);
        let refused = p.step(|st, _| st.watch(token, target, watcher));
        if let Err(watcher) = refused {
            watcher.notify(node_down(target, "no link to the node"));
            return None;
        }
        let _ = p.send(&WireFrame::Monitor {
            target: target.serial(),
            token,
        });
        Some(token)
    }

    pub(crate) fn unwatch(self: &Arc<Self>, target: ActorId, token: u64) {
        let p = self.canonical();
        if p.step(|st, _| st.unwatch(token)) {
            let _ = p.send(&WireFrame::Demonitor {
                target: target.serial(),
                token,
            });
        }
    }

    pub(crate) fn add_link(self: &Arc<Self>, local: Arc<dyn Control>, remote: ActorId) {
        let p = self.canonical();
        let local_id = local.id();
        let from = local_id.serial();
        p.step(|st, _| st.linked(local_id, local, remote));
        let _ = p.send(&WireFrame::Link {
            from,
            to: remote.serial(),
        });
    }

    pub(crate) fn remove_link(self: &Arc<Self>, local: ActorId, remote: ActorId) {
        let p = self.canonical();
        p.step(|st, _| st.unlinked(local, remote));
        let _ = p.send(&WireFrame::Unlink {
            from: local.serial(),
            to: remote.serial(),
        });
    }

    /// Sends `GOODBYE` and closes the link.
    pub(crate) async fn goodbye(self: &Arc<Self>, code: GoodbyeCode) {
        // Messages this thread's actor holds go before the goodbye.
        crate::proxy::cork::flush();
        let sender = self.session.read(|st| st.sender().cloned());
        if let Some(s) = sender {
            let _ = s.send(WireFrame::Goodbye { code }.encode()).await;
            s.close();
        }
    }

    /// The link of `epoch` is gone: tell everyone who depended on it. A link
    /// closed as idle leaves the peer idle, not down (see
    /// [`Session::link_idle`]).
    fn link_down(self: &Arc<Self>, epoch: u64, cause: &CloseCause) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        // Only a peer that can dial again may go idle: one whose node does
        // not listen is gone with its link.
        let idle = matches!(cause, CloseCause::Idle(_)) && lock(&self.dial).is_some();
        let lost = self.step(|st, _| {
            if idle {
                st.link_idle(epoch, cause)
            } else {
                st.link_lost(epoch, cause)
            }
        });
        let Some(session::Lost {
            node,
            watchers,
            links,
            receipts,
            resolves,
            remote_monitors: monitors,
        }) = lost
        else {
            return;
        };
        if idle {
            tracing::info!(target: "plexus::remote", node = ?node, peer = %self.dial_uri(), %cause, "link idle");
        } else {
            tracing::info!(target: "plexus::remote", node = ?node, peer = %self.dial_uri(), %cause, "link down");
        }
        // Watchers and linked actors get the cause as text (an exit reason
        // travels between nodes); receipts, resolves and asks get it typed.
        let text = &*cause.to_string();
        let shared = LinkCause::new(cause.clone());
        for (_, (id, w)) in watchers {
            w.notify(node_down(id, text));
        }
        for (local, remote) in links {
            local.remove_link(remote);
            local.signal(Signal::Exit(Exit {
                from: remote,
                reason: node_down(remote, text).reason,
            }));
        }
        for r in receipts.into_values() {
            let _ = r.send(Err(ReceiptError::LinkClosed(shared.clone())));
        }
        for r in resolves.into_values() {
            let _ = r.send(Err(LinkError::Closed(cause.clone())));
        }
        for (control, token) in monitors.into_values() {
            if let Some(t) = token {
                control.unwatch(t);
            }
        }
        // A link closed as idle carried nothing for a while: an ask still
        // open was sent before that and its reply can still come, over the
        // link either side dials next. A lost link fails them.
        if let Some(n) = node.filter(|_| !idle) {
            inner.fail_replies_of(n, &shared);
        }
    }
}

/// Sends the frames held while no link was up; what no longer fits the
/// link's send buffer is a dead letter. So is a frame meant for another
/// node than the one that answers now (the node at the address restarted
/// while the frame waited): its actor ids name the old node's actors, and
/// the new one's actors with the same serials are others.
fn flush(
    inner: &NodeInner,
    links: &SessionLinks,
    pending: VecDeque<<Live as session::Handles>::Held>,
    node: NodeId,
) {
    for (carrier, strand, frame, meant_for) in pending {
        if let Some(old) = meant_for.filter(|n| *n != node) {
            inner.system.dead_letters().record(
                ActorId::new(old, 0),
                "remote message (another node answers at its node's address now)",
                DeadLetterReason::Undeliverable,
            );
            continue;
        }
        if links.try_send_on(carrier, strand, frame).is_err() {
            inner.system.dead_letters().record(
                ActorId::new(node, 0),
                "remote message (send buffer full when the link came up)",
                DeadLetterReason::SendBufferFull,
            );
        }
    }
}

/// What a link made of a frame sent on it.
enum Sent {
    /// Queued, or refused for good (full, too large).
    Done(Result<(), Undelivered>),
    /// The link is closed and gave the frame back: another link, or the
    /// frames held for the next one, may take it.
    Closed(Bytes),
}

/// The three sends on a link (lock-free, under the session lock, from a
/// scratch buffer) read a link's answer alike.
#[inline]
fn link_sent(sent: Result<(), LinkTrySendError>) -> Sent {
    match sent {
        Ok(()) => Sent::Done(Ok(())),
        Err(LinkTrySendError::Full { .. }) => Sent::Done(Err(Undelivered::Full)),
        Err(LinkTrySendError::Send(plexus_transport::LinkSendError::Closed {
            message, ..
        })) => Sent::Closed(message),
        Err(_) => Sent::Done(Err(Undelivered::Refused)),
    }
}

fn node_down(id: ActorId, cause: &str) -> Down {
    Down {
        id,
        reason: ExitReason::NodeDown {
            node: id.node(),
            cause: cause.into(),
        },
    }
}

/// `step`, or [`LinkError::Timeout`] if it takes longer than `timeout`.
async fn within<T>(
    timeout: Duration,
    step: impl std::future::Future<Output = Result<T, LinkError>>,
) -> Result<T, LinkError> {
    tokio::time::timeout(timeout, step)
        .await
        .unwrap_or(Err(LinkError::Timeout(timeout)))
}
