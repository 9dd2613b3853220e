//! Typed actor references.
//!
//! An [`ActorRef<M>`] is the only way to reach an actor: cheap to clone
//! (one reference count), `Send + Sync`, compared and hashed by the actor's
//! stable [`ActorId`]. The same type will address actors on other nodes: a
//! ref is a pointer to a [`Sink`], and a remote proxy is just another sink.
//!
//! Refs can be *narrowed*: an `ActorRef<M>` becomes an `ActorRef<S>` for any
//! `S: Into<M>` (the "actor interfaces" of the Aurum design), so one
//! collection can hold subscribers of different actor types that all accept
//! `S`.

use std::fmt;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use std::sync::Mutex;

use bytes::Bytes;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::sync::{oneshot, Semaphore};

use crate::dead_letters::DeadLetterReason;
use crate::lane::{Lane, MessageProperties, RouteError};
use crate::mailbox::{Control, Mailbox, Refusal, Signal, Watcher};
use crate::remote::{ActorPath, CodecError, ReceiptError, RemoteReply, ReplyPath};
use crate::trace::TraceContext;
use crate::{ActorId, AskError, Down, ExitReason, SendError, TrySendError};

/// Where the messages of a ref go: a local mailbox, a narrowing adapter, or
/// a node's proxy for a remote actor.
pub trait Sink<M>: Control {
    /// Enqueues a message for which room was taken with
    /// [`Control::try_acquire`]; a message for an actor that stopped in
    /// between becomes a dead letter.
    fn push(&self, msg: M);
    /// Records a message that could not be enqueued as a dead letter.
    fn reject(&self, msg: M, reason: DeadLetterReason);
    /// [`push`](Self::push) for several messages, each with its room
    /// taken, in order. A local mailbox takes them under one lock with one
    /// wake-up; the default pushes them one by one.
    fn push_batch(&self, msgs: &mut dyn Iterator<Item = M>) {
        for msg in msgs {
            self.push(msg);
        }
    }
    /// [`push`](Self::push) for a message that came from another node with
    /// a trace context: the actor handles it in a span under `trace` (see
    /// [`crate::trace`]). The default drops the context.
    fn push_traced(&self, msg: M, trace: TraceContext) {
        let _ = trace;
        self.push(msg);
    }
    /// Like [`push`](Self::push), and reports whether the message reached
    /// the actor's mailbox.
    fn push_with_receipt(&self, msg: M) -> ReceiptFuture;
    /// [`push`](Self::push) on `lane` (a local mailbox has no lanes).
    fn push_via(&self, msg: M, lane: Lane) {
        let _ = lane;
        self.push(msg);
    }
    /// [`push`](Self::push) for a request whose sender wants to know at
    /// once that it was not sent ([`ActorRef::ask`]): the reason of the
    /// dead letter it became. The default pushes and reports success.
    ///
    /// # Errors
    ///
    /// The [`DeadLetterReason`] of the refused message.
    fn push_request(&self, msg: M) -> Result<(), DeadLetterReason> {
        self.push(msg);
        Ok(())
    }
    /// [`push_via`](Self::push_via), for a sender that waits for room
    /// ([`ActorRef::send`]): `None` once the message is queued (or dead
    /// lettered), or a future that queues it as soon as the sink has room.
    /// A local mailbox's room is its semaphore, taken before this call, so
    /// the default pushes at once; a remote actor's proxy waits for room in
    /// the send buffer of the link to its node.
    fn push_when_room(&self, msg: M, lane: Lane) -> Option<RoomWait<'_>> {
        self.push_via(msg, lane);
        None
    }
    /// [`push_with_receipt`](Self::push_with_receipt) on `lane`.
    fn push_with_receipt_via(&self, msg: M, lane: Lane) -> ReceiptFuture {
        let _ = lane;
        self.push_with_receipt(msg)
    }
    /// The lane `properties` pick, if its stack honours them (a local
    /// mailbox honours everything).
    ///
    /// # Errors
    ///
    /// [`RouteError`] naming the lane, its stack and what it lacks.
    fn route(&self, properties: &MessageProperties) -> Result<Lane, RouteError> {
        Ok(properties.lane())
    }
    /// The lane messages take unless a send names one.
    fn default_lane(&self) -> Lane {
        Lane::Default
    }
    /// The path of a remote actor (`None` for local ones).
    fn remote_path(&self) -> Option<ActorPath> {
        None
    }
}

impl<M: Send + 'static> Sink<M> for Mailbox<M> {
    fn push(&self, msg: M) {
        Mailbox::push(self, msg);
    }

    fn push_batch(&self, msgs: &mut dyn Iterator<Item = M>) {
        Mailbox::push_batch(self, msgs);
    }

    fn push_traced(&self, msg: M, trace: TraceContext) {
        Mailbox::push_traced(self, msg, trace);
    }

    fn reject(&self, msg: M, reason: DeadLetterReason) {
        self.dead_letter(msg, reason);
    }

    fn push_with_receipt(&self, msg: M) -> ReceiptFuture {
        ReceiptFuture::ready(if Mailbox::push(self, msg) {
            Ok(Receipt::Delivered)
        } else {
            Err(ReceiptError::Stopped)
        })
    }
}

/// A send waiting for room; see [`Sink::push_when_room`].
pub type RoomWait<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a delivery receipt confirms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Receipt {
    /// The message is in the actor's mailbox (confirmed by its node).
    Delivered,
    /// The message left on a lane whose stack may lose it
    /// ([`Lane::Unreliable`] over a lossy stack): it was sent, nothing more
    /// is known.
    Sent,
}

/// Completes when a delivery receipt arrives; see
/// [`ActorRef::tell_with_receipt`].
#[must_use = "a receipt does nothing unless awaited"]
#[derive(Debug)]
pub struct ReceiptFuture {
    state: ReceiptState,
}

#[derive(Debug)]
enum ReceiptState {
    Ready(Option<Result<Receipt, ReceiptError>>),
    Pending(oneshot::Receiver<Result<(), ReceiptError>>),
}

impl ReceiptFuture {
    /// A receipt known at once.
    pub fn ready(result: Result<Receipt, ReceiptError>) -> Self {
        Self {
            state: ReceiptState::Ready(Some(result)),
        }
    }

    /// A delivery receipt that the receiving node will send.
    pub fn pending(rx: oneshot::Receiver<Result<(), ReceiptError>>) -> Self {
        Self {
            state: ReceiptState::Pending(rx),
        }
    }
}

impl Future for ReceiptFuture {
    type Output = Result<Receipt, ReceiptError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            ReceiptState::Ready(r) => {
                Poll::Ready(r.take().unwrap_or(Err(ReceiptError::AlreadyTaken)))
            }
            ReceiptState::Pending(rx) => Pin::new(rx).poll(cx).map(|r| match r {
                Ok(Ok(())) => Ok(Receipt::Delivered),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(ReceiptError::NodeStopped),
            }),
        }
    }
}

/// A send on a chosen lane: see [`ActorRef::via`] and
/// [`ActorRef::with_properties`].
#[must_use = "a Via sends nothing until told to"]
pub struct Via<'a, M> {
    actor: &'a ActorRef<M>,
    lane: Lane,
}

impl<M: Send + 'static> Via<'_, M> {
    /// The lane the messages take.
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// [`ActorRef::tell`] on this lane.
    pub fn tell(&self, msg: M) {
        match self.actor.sink.try_acquire() {
            Ok(()) => self.actor.sink.push_via(msg, self.lane),
            Err(Refusal::Full) => self.actor.sink.reject(msg, DeadLetterReason::MailboxFull),
            Err(Refusal::Stopped) => self.actor.sink.reject(msg, DeadLetterReason::Stopped),
        }
    }

    /// [`ActorRef::tell_with_receipt`] on this lane: on a lane whose stack
    /// may lose the message, the receipt is [`Receipt::Sent`].
    ///
    /// # Errors
    ///
    /// [`ReceiptError`] saying why the message did not reach the mailbox.
    pub async fn tell_with_receipt(&self, msg: M) -> Result<Receipt, ReceiptError> {
        match self.actor.sink.try_acquire() {
            Ok(()) => self.actor.sink.push_with_receipt_via(msg, self.lane).await,
            Err(Refusal::Full) => Err(ReceiptError::MailboxFull),
            Err(Refusal::Stopped) => Err(ReceiptError::Stopped),
        }
    }
}

/// A typed reference to an actor that accepts messages of type `M`.
///
/// # Example
///
/// ```
/// use plexus_core::{Actor, ActorSystem, Context};
///
/// struct Greeter;
/// impl Actor for Greeter {
///     type Msg = String;
///     async fn handle(&mut self, name: String, _ctx: &mut Context<String>) {
///         println!("hello, {name}");
///     }
/// }
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new();
/// let greeter = system.spawn(Greeter);
/// greeter.tell("world".to_string());
/// system.shutdown().await;
/// # }
/// ```
pub struct ActorRef<M> {
    id: ActorId,
    pub(crate) sink: Arc<dyn Sink<M>>,
}

impl<M: Send + 'static> ActorRef<M> {
    pub(crate) fn local(mailbox: Arc<Mailbox<M>>) -> Self {
        Self {
            id: mailbox.id(),
            sink: mailbox,
        }
    }

    pub(crate) fn from_sink(id: ActorId, sink: Arc<dyn Sink<M>>) -> Self {
        Self { id, sink }
    }

    /// Whether this ref points to an actor on another node.
    pub fn is_remote(&self) -> bool {
        self.sink.remote_path().is_some()
    }

    /// The actor's stable id.
    pub fn id(&self) -> ActorId {
        self.id
    }

    pub(crate) fn control(&self) -> &dyn Control {
        &*self.sink
    }

    pub(crate) fn control_arc(&self) -> Arc<dyn Control> {
        self.sink.clone()
    }

    /// Whether the actor is still running (or restarting).
    pub fn is_alive(&self) -> bool {
        self.sink.is_alive()
    }

    /// Sends a message without waiting.
    ///
    /// Never blocks. A message that cannot be enqueued, because the actor has
    /// stopped or its bounded mailbox is full, becomes a dead letter
    /// (counted, logged, published: see
    /// [`SystemRef::dead_letters`](crate::SystemRef::dead_letters)). Use
    /// [`try_tell`](Self::try_tell) to get the message back instead, or
    /// [`send`](Self::send) to wait for room.
    pub fn tell(&self, msg: M) {
        match self.sink.try_acquire() {
            Ok(()) => self.sink.push(msg),
            Err(Refusal::Full) => self.sink.reject(msg, DeadLetterReason::MailboxFull),
            Err(Refusal::Stopped) => self.sink.reject(msg, DeadLetterReason::Stopped),
        }
    }

    /// Sends a message if there is room now.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] if the bounded mailbox is at capacity,
    /// [`TrySendError::Stopped`] if the actor has stopped. Either way the
    /// message is handed back and nothing was enqueued.
    pub fn try_tell(&self, msg: M) -> Result<(), TrySendError<M>> {
        self.try_push(msg, None)
    }

    /// [`try_tell`](Self::try_tell) of a message that came from another
    /// node with a trace context (see [`crate::trace`]).
    pub(crate) fn try_tell_traced(
        &self,
        msg: M,
        trace: TraceContext,
    ) -> Result<(), TrySendError<M>> {
        self.try_push(msg, Some(trace))
    }

    #[inline]
    fn try_push(&self, msg: M, trace: Option<TraceContext>) -> Result<(), TrySendError<M>> {
        match self.sink.try_acquire() {
            Ok(()) => {
                match trace {
                    None => self.sink.push(msg),
                    Some(trace) => self.sink.push_traced(msg, trace),
                }
                Ok(())
            }
            Err(Refusal::Full) => Err(TrySendError::Full {
                target: self.id,
                message: msg,
            }),
            Err(Refusal::Stopped) => Err(TrySendError::Stopped {
                target: self.id,
                message: msg,
            }),
        }
    }

    /// [`try_tell`](Self::try_tell) for every message of `msgs` (drained),
    /// in order: the ones there is room for are enqueued together (a local
    /// actor's mailbox is locked once and its actor woken at most once),
    /// each refused one is handed to `refused`. For a reader that receives
    /// messages in batches.
    pub fn try_tell_batch(&self, msgs: &mut Vec<M>, mut refused: impl FnMut(TrySendError<M>)) {
        let n = msgs.len();
        let mut granted = 0;
        while granted < n && self.sink.try_acquire().is_ok() {
            granted += 1;
        }
        if granted == n {
            self.sink.push_batch(&mut msgs.drain(..));
            return;
        }
        // Rare: a bounded mailbox filled up or the actor stopped mid-way.
        // The prefix has its room; the rest is tried one by one.
        let rest = msgs.split_off(granted);
        self.sink.push_batch(&mut msgs.drain(..));
        for msg in rest {
            if let Err(e) = self.try_tell(msg) {
                refused(e);
            }
        }
    }

    /// Sends a message and waits until it is in the actor's mailbox (on
    /// whichever node that is).
    ///
    /// For a local actor this completes at once. For a remote one the
    /// receiving node confirms the enqueue; a message for an actor it does
    /// not know is a dead letter there and an error here.
    ///
    /// The message is sent when the future is first polled, not when this
    /// is called: futures collected and awaited later send their messages
    /// then, after any `tell` made meanwhile.
    ///
    /// # Errors
    ///
    /// [`ReceiptError`] saying why the message did not reach the mailbox.
    pub async fn tell_with_receipt(&self, msg: M) -> Result<Receipt, ReceiptError> {
        match self.sink.try_acquire() {
            Ok(()) => self.sink.push_with_receipt(msg).await,
            Err(Refusal::Full) => Err(ReceiptError::MailboxFull),
            Err(Refusal::Stopped) => Err(ReceiptError::Stopped),
        }
    }

    /// Sends on `lane` instead of the message type's own
    /// ([`RemoteMessage::LANE`](crate::remote::RemoteMessage::LANE)):
    /// `pong.via(Lane::Bulk).tell(chunk)`. A lane the node has not mapped
    /// rides the default lane's link; a local actor has no lanes.
    pub fn via(&self, lane: Lane) -> Via<'_, M> {
        Via { actor: self, lane }
    }

    /// Sends with TAPS-style [`MessageProperties`]: they pick the lane
    /// ([`MessageProperties::lane`]), and the send is refused if that
    /// lane's stack cannot honour them, rather than carried with less.
    ///
    /// # Errors
    ///
    /// [`RouteError`] naming the lane, the stack that carries it and what
    /// it lacks (e.g. `reliable` for a bulk lane mapped to `udp / slicing`).
    pub fn with_properties(&self, properties: MessageProperties) -> Result<Via<'_, M>, RouteError> {
        let lane = self.sink.route(&properties)?;
        Ok(Via { actor: self, lane })
    }

    /// Sends a message, waiting for room: in a bounded mailbox, or for an
    /// actor on another node in the send buffer of the link to its node.
    ///
    /// On an unbounded local mailbox this completes at once.
    ///
    /// # Backpressure
    ///
    /// Waits, in FIFO order with other waiting senders, until the actor has
    /// taken a message out of its full mailbox. For a remote actor, waits
    /// while the link's send buffer (the
    /// node's `LinkConfig::send_buffer`, 64 MiB by default) is full, so a sender that only uses `send` never loses a
    /// message to overload: it runs at the speed of the link, where
    /// [`tell`](Self::tell) would turn what does not fit into dead letters
    /// ([`DeadLetterReason::SendBufferFull`]).
    ///
    /// # Errors
    ///
    /// [`SendError`] with the message handed back if the actor has stopped
    /// (for a remote actor: its node is known to be gone) or a local actor
    /// stops while the sender waits. Success means the message was queued,
    /// not that it arrived (see [`tell_with_receipt`](Self::tell_with_receipt)).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes drops the message unsent.
    pub async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        let room = match self.sink.semaphore() {
            Some(sem) => acquire(sem).await,
            None => self.sink.is_alive(),
        };
        if !room {
            return Err(SendError {
                target: self.id,
                message: msg,
            });
        }
        if let Some(wait) = self.sink.push_when_room(msg, self.sink.default_lane()) {
            wait.await;
        }
        Ok(())
    }

    /// Sends a request built by `make` around a fresh [`ReplyTo`] and waits
    /// for the reply.
    ///
    /// ```
    /// # use plexus_core::{Actor, ActorSystem, Context, ReplyTo};
    /// # use std::time::Duration;
    /// enum Msg { Double(u32, ReplyTo<u32>) }
    /// struct Doubler;
    /// impl Actor for Doubler {
    ///     type Msg = Msg;
    ///     async fn handle(&mut self, Msg::Double(n, reply): Msg, _ctx: &mut Context<Msg>) {
    ///         reply.send(n * 2);
    ///     }
    /// }
    /// # #[tokio::main] async fn main() {
    /// # let system = ActorSystem::new();
    /// let doubler = system.spawn(Doubler);
    /// let four = doubler.ask(|r| Msg::Double(2, r), Duration::from_secs(1)).await;
    /// assert_eq!(four, Ok(4));
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`AskError::Stopped`] at once if the actor has stopped, or as soon as
    ///   it stops with the request unanswered;
    /// - [`AskError::MailboxFull`] at once if its bounded mailbox is full;
    /// - [`AskError::Timeout`] if no reply came within `timeout`;
    /// - [`AskError::NoReply`] if the actor dropped the [`ReplyTo`];
    /// - [`AskError::NotSent`] at once if a remote actor's request could
    ///   not be sent (the link's send buffer is full);
    /// - [`AskError::NodeUnreachable`] as soon as the link to a remote
    ///   actor's node is lost (or cannot be made) with the request
    ///   unanswered.
    pub async fn ask<R, F>(&self, make: F, timeout: Duration) -> Result<R, AskError>
    where
        F: FnOnce(ReplyTo<R>) -> M,
    {
        let (tx, rx) = oneshot::channel();
        let target = self.id;
        match self.sink.try_acquire() {
            Ok(()) => {
                if let Err(reason) = self.sink.push_request(make(ReplyTo::local(tx))) {
                    return Err(AskError::NotSent { target, reason });
                }
            }
            Err(Refusal::Full) => return Err(AskError::MailboxFull { target }),
            Err(Refusal::Stopped) => return Err(AskError::Stopped { target }),
        }
        // The timer belongs to the target system's runtime, so an ask works
        // from any thread or executor, with or without a tokio time driver.
        let deadline = {
            let _in_runtime = self.sink.runtime().enter();
            tokio::time::sleep(timeout)
        };
        tokio::select! {
            biased;
            reply = rx => match reply {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(Unreachable { node, cause })) => {
                    Err(AskError::NodeUnreachable { target, node, cause })
                }
                // The reply sender was dropped: either with the queued request
                // when the actor stopped, or by the handler itself.
                Err(_) if !self.sink.is_alive() => Err(AskError::Stopped { target }),
                Err(_) => Err(AskError::NoReply { target }),
            },
            () = deadline => Err(AskError::Timeout { target, timeout }),
        }
    }

    /// Asks the actor to stop after the message it is handling. The stop
    /// overtakes queued messages, which become dead letters. Its `stopped`
    /// hook runs; monitors see [`ExitReason::Stopped`].
    pub fn stop(&self) {
        self.sink.signal(Signal::Stop(ExitReason::Stopped));
    }

    /// Stops the actor at once, even in the middle of a handler (at its next
    /// `.await`). Its `stopped` hook does not run; monitors see
    /// [`ExitReason::Killed`]. An actor on its own thread (detached) stops
    /// after the message it is handling.
    pub fn kill(&self) {
        self.sink.kill();
    }

    /// A future that completes with [`Down`] when the actor stops, at once if
    /// it already has. Dropping the future cancels the monitor.
    pub fn monitor(&self) -> Monitor {
        let (tx, rx) = oneshot::channel();
        let token = self.sink.watch(Watcher::Future(tx));
        Monitor {
            id: self.id,
            rx,
            token,
            control: self.control_arc(),
        }
    }

    /// This ref, narrowed to accept any `S` that converts into `M`.
    ///
    /// ```
    /// # use plexus_core::{Actor, ActorRef, ActorSystem, Context};
    /// struct Tick;
    /// enum Clock { Tick, Reset }
    /// impl From<Tick> for Clock { fn from(_: Tick) -> Self { Clock::Tick } }
    /// # struct ClockActor;
    /// # impl Actor for ClockActor {
    /// #     type Msg = Clock;
    /// #     async fn handle(&mut self, _: Clock, _: &mut Context<Clock>) {}
    /// # }
    /// # #[tokio::main] async fn main() {
    /// # let system = ActorSystem::new();
    /// let clock: ActorRef<Clock> = system.spawn(ClockActor);
    /// let tick_only: ActorRef<Tick> = clock.narrow();
    /// tick_only.tell(Tick);
    /// assert_eq!(tick_only.id(), clock.id());
    /// # }
    /// ```
    pub fn narrow<S>(&self) -> ActorRef<S>
    where
        S: Into<M> + Send + 'static,
    {
        ActorRef {
            id: self.id,
            sink: Arc::new(Narrowed {
                inner: self.clone(),
                _accepts: PhantomData,
            }),
        }
    }
}

async fn acquire(sem: &Semaphore) -> bool {
    match sem.acquire().await {
        Ok(permit) => {
            // The actor hands the permit back when it dequeues the message.
            permit.forget();
            true
        }
        Err(_closed) => false,
    }
}

impl<M> Clone for ActorRef<M> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            sink: self.sink.clone(),
        }
    }
}

impl<M> PartialEq for ActorRef<M> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<M> Eq for ActorRef<M> {}

impl<M> Hash for ActorRef<M> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl<M> fmt::Debug for ActorRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActorRef<{}>({})", std::any::type_name::<M>(), self.id)
    }
}

/// Adapter behind a narrowed ref: converts, then pushes into the original.
struct Narrowed<S, M> {
    inner: ActorRef<M>,
    _accepts: PhantomData<fn(S)>,
}

impl<S, M> Sink<S> for Narrowed<S, M>
where
    S: Into<M> + Send + 'static,
    M: Send + 'static,
{
    fn push(&self, msg: S) {
        self.inner.sink.push(msg.into());
    }

    fn push_batch(&self, msgs: &mut dyn Iterator<Item = S>) {
        self.inner.sink.push_batch(&mut msgs.map(Into::into));
    }

    fn push_traced(&self, msg: S, trace: TraceContext) {
        self.inner.sink.push_traced(msg.into(), trace);
    }

    fn reject(&self, msg: S, reason: DeadLetterReason) {
        self.inner.sink.reject(msg.into(), reason);
    }

    fn push_with_receipt(&self, msg: S) -> ReceiptFuture {
        self.inner.sink.push_with_receipt(msg.into())
    }

    fn push_via(&self, msg: S, lane: Lane) {
        self.inner.sink.push_via(msg.into(), lane);
    }

    fn push_when_room(&self, msg: S, lane: Lane) -> Option<RoomWait<'_>> {
        self.inner.sink.push_when_room(msg.into(), lane)
    }

    fn push_request(&self, msg: S) -> Result<(), DeadLetterReason> {
        self.inner.sink.push_request(msg.into())
    }

    fn push_with_receipt_via(&self, msg: S, lane: Lane) -> ReceiptFuture {
        self.inner.sink.push_with_receipt_via(msg.into(), lane)
    }

    fn route(&self, properties: &MessageProperties) -> Result<Lane, RouteError> {
        self.inner.sink.route(properties)
    }

    fn default_lane(&self) -> Lane {
        self.inner.sink.default_lane()
    }

    fn remote_path(&self) -> Option<ActorPath> {
        self.inner.sink.remote_path()
    }
}

impl<S, M> Control for Narrowed<S, M>
where
    S: Send + 'static,
    M: Send + 'static,
{
    fn id(&self) -> ActorId {
        self.inner.id
    }
    fn is_alive(&self) -> bool {
        self.inner.sink.is_alive()
    }
    fn try_acquire(&self) -> Result<(), Refusal> {
        self.inner.sink.try_acquire()
    }
    fn semaphore(&self) -> Option<&Semaphore> {
        self.inner.sink.semaphore()
    }
    fn signal(&self, signal: Signal) -> bool {
        self.inner.sink.signal(signal)
    }
    fn kill(&self) {
        self.inner.sink.kill();
    }
    fn watch(&self, watcher: Watcher) -> Option<u64> {
        self.inner.sink.watch(watcher)
    }
    fn unwatch(&self, token: u64) {
        self.inner.sink.unwatch(token);
    }
    fn add_link(&self, other: Arc<dyn Control>) -> Result<(), ExitReason> {
        self.inner.sink.add_link(other)
    }
    fn remove_link(&self, other: ActorId) {
        self.inner.sink.remove_link(other);
    }
    fn add_name(&self, name: &str) -> bool {
        self.inner.sink.add_name(name)
    }
    fn remove_name(&self, name: &str) {
        self.inner.sink.remove_name(name);
    }
    fn runtime(&self) -> &tokio::runtime::Handle {
        self.inner.sink.runtime()
    }
    fn queued(&self) -> usize {
        self.inner.sink.queued()
    }
}

/// The reply half of an [`ask`](ActorRef::ask): send exactly one value back.
///
/// Dropping it without replying makes the ask fail with
/// [`AskError::NoReply`] (or [`AskError::Stopped`] if the actor stopped).
/// Inside a message to another node it travels as a path, and the reply
/// goes back over the link.
pub struct ReplyTo<R> {
    inner: ReplyInner<R>,
}

/// What the asker of an ask receives: the reply, or why it cannot come.
type AskOutcome<R> = Result<R, Unreachable>;

/// The node of a remote asked actor became unreachable with the ask open.
#[derive(Debug)]
struct Unreachable {
    node: crate::NodeId,
    cause: crate::LinkCause,
}

/// The reply of a [`ReplyTo::channel`].
#[must_use = "a reply future does nothing unless awaited"]
#[derive(Debug)]
pub struct ReplyFuture<R> {
    rx: oneshot::Receiver<AskOutcome<R>>,
}

/// Why a [`ReplyFuture`] has no reply.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// The handle was dropped unanswered (by the handler, or with its
    /// request when the actor stopped or refused it).
    #[error("the request was dropped unanswered")]
    Dropped,
    /// The handle went to an actor on another node, which became
    /// unreachable with the request open.
    #[error("node {node} became unreachable with the request open: {cause}")]
    NodeUnreachable {
        /// That node.
        node: crate::NodeId,
        /// Why its link closed.
        cause: crate::LinkCause,
    },
}

impl<R> Future for ReplyFuture<R> {
    type Output = Result<R, ReplyError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| match r {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Unreachable { node, cause })) => {
                Err(ReplyError::NodeUnreachable { node, cause })
            }
            Err(_) => Err(ReplyError::Dropped),
        })
    }
}

enum ReplyInner<R> {
    // A mutex because serde serializes through `&self` and a handle that is
    // sent to another node must give its sender up.
    Local(Mutex<Option<oneshot::Sender<AskOutcome<R>>>>),
    Remote {
        target: Arc<dyn RemoteReply>,
        path: ReplyPath,
        encode: fn(&R) -> Result<Bytes, CodecError>,
    },
}

impl<R> ReplyTo<R> {
    fn local(tx: oneshot::Sender<AskOutcome<R>>) -> Self {
        Self {
            inner: ReplyInner::Local(Mutex::new(Some(tx))),
        }
    }

    /// A reply handle and the future of its reply, for a request that does
    /// not go through [`ActorRef::ask`] (a sharded entity's ref routes its
    /// asks itself). The handle travels inside the request like one made by
    /// `ask`, to an actor on this node or another.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use plexus_core::ReplyTo;
    /// let (reply, answer) = ReplyTo::<u32>::channel();
    /// reply.send(7);
    /// assert_eq!(answer.await.ok(), Some(7));
    /// # }
    /// ```
    pub fn channel() -> (Self, ReplyFuture<R>) {
        let (tx, rx) = oneshot::channel();
        (Self::local(tx), ReplyFuture { rx })
    }

    /// Sends the reply. If the asker stopped waiting (timed out), the value
    /// is dropped: there is nobody to deliver it to.
    pub fn send(self, value: R) {
        match self.inner {
            ReplyInner::Local(tx) => {
                let tx = tx.into_inner().unwrap_or_else(|e| e.into_inner());
                if let Some(tx) = tx {
                    let _ = tx.send(Ok(value));
                }
            }
            ReplyInner::Remote {
                target,
                path,
                encode,
            } => match encode(&value) {
                Ok(payload) => target.send_reply(path.id, payload),
                Err(e) => {
                    tracing::warn!(target: "plexus::remote", "cannot encode a reply: {e}");
                }
            },
        }
    }

    /// Whether the asker stopped waiting (always `false` for an asker on
    /// another node: that is only known when the reply arrives there).
    pub fn is_closed(&self) -> bool {
        match &self.inner {
            ReplyInner::Local(tx) => tx
                .lock()
                .map(|t| t.as_ref().is_none_or(oneshot::Sender::is_closed))
                .unwrap_or(true),
            ReplyInner::Remote { .. } => false,
        }
    }
}

impl<R> fmt::Debug for ReplyTo<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReplyTo<{}>", std::any::type_name::<R>())
    }
}

impl<R: Serialize + DeserializeOwned + Send + 'static> Serialize for ReplyTo<R> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.inner {
            ReplyInner::Remote { path, .. } => path.serialize(s),
            ReplyInner::Local(tx) => {
                let ctx = crate::remote::current_context().ok_or_else(|| {
                    crate::remote::codec_error::<S::Error>(
                        "reply handles can only be encoded by a Plexus node",
                    )
                })?;
                let tx = tx.lock().ok().and_then(|mut t| t.take()).ok_or_else(|| {
                    crate::remote::codec_error::<S::Error>("reply handle already used")
                })?;
                let path = ctx.export_reply(Box::new(PendingAsk { tx }));
                path.serialize(s)
            }
        }
    }
}

/// An ask waiting for a reply from another node.
struct PendingAsk<R> {
    tx: oneshot::Sender<AskOutcome<R>>,
}

impl<R: DeserializeOwned + Send + 'static> crate::remote::PendingReply for PendingAsk<R> {
    fn deliver(self: Box<Self>, payload: Bytes) {
        match crate::remote::decode::<R>(&payload) {
            Ok(value) => {
                let _ = self.tx.send(Ok(value));
            }
            // Dropping the sender makes the ask fail with NoReply.
            Err(e) => tracing::warn!(target: "plexus::remote", "dropping a reply: {e}"),
        }
    }

    fn is_abandoned(&self) -> bool {
        self.tx.is_closed()
    }

    fn node_unreachable(self: Box<Self>, node: crate::NodeId, cause: crate::LinkCause) {
        let _ = self.tx.send(Err(Unreachable { node, cause }));
    }
}

impl<'de, R: Serialize + DeserializeOwned + Send + 'static> Deserialize<'de> for ReplyTo<R> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let path = ReplyPath::deserialize(d)?;
        let ctx = crate::remote::current_context().ok_or_else(|| {
            crate::remote::codec_de_error::<D::Error>(
                "reply handles can only be decoded by a Plexus node",
            )
        })?;
        Ok(Self {
            inner: ReplyInner::Remote {
                target: ctx.import_reply(&path),
                path,
                encode: |v: &R| crate::remote::encode(v),
            },
        })
    }
}

/// Completes with [`Down`] when the monitored actor stops; see
/// [`ActorRef::monitor`].
#[must_use = "a monitor does nothing unless awaited"]
pub struct Monitor {
    id: ActorId,
    rx: oneshot::Receiver<Down>,
    token: Option<u64>,
    control: Arc<dyn Control>,
}

impl Future for Monitor {
    type Output = Down;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Down> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(down) => {
                self.token = None;
                // Every watcher is notified when the actor finishes, so the
                // sender is only dropped unsent if the actor's whole system
                // vanished without tearing it down; report that as a kill.
                Poll::Ready(down.unwrap_or(Down {
                    id: self.id,
                    reason: ExitReason::Killed,
                }))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            self.control.unwatch(token);
        }
    }
}

impl fmt::Debug for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Monitor({})", self.id)
    }
}
