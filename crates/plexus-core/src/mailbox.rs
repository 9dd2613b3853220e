//! The mailbox: the queue of an actor and the type-erased control block
//! around it.
//!
//! One allocation per actor holds its user-message queue, its queue of system
//! signals, its lifecycle flag and the rarely used bookkeeping (monitors,
//! links, registered names), which lives behind a lazily allocated box so an
//! actor nobody watches stays small.
//!
//! Guarantees:
//! - FIFO per sender: a sender's pushes are appended under one lock.
//! - Signals overtake user messages: the actor checks [`Mailbox::has_signal`]
//!   before every user message it takes from its batch.
//! - Nothing is dropped silently: a message pushed after the actor stopped, or
//!   still queued when it stops, becomes a dead letter.
//! - A bounded mailbox never holds more than its capacity: senders take a
//!   permit of a semaphore before pushing, the actor returns it when it takes
//!   the message out.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};

use tokio::sync::{oneshot, Semaphore};
use tokio::task::AbortHandle;

use crate::dead_letters::DeadLetterReason;
use crate::run::CellExtra;
use crate::system::SystemShared;
use crate::trace::TraceContext;
use crate::{ActorId, Down, Exit, ExitReason};

/// A system signal. Signals are queued apart from user messages and handled
/// first.
#[derive(Debug)]
pub enum Signal {
    /// Stop gracefully after the current message.
    Stop(ExitReason),
    /// Stop at once (detached actors, which cannot be aborted, see this).
    Kill,
    /// A monitored actor stopped.
    Down(Down),
    /// A linked actor exited.
    Exit(Exit),
}

/// Who is told when an actor stops.
pub enum Watcher {
    /// Another actor, via a [`Signal::Down`].
    Actor(Arc<dyn Control>),
    /// A future waiting outside any actor.
    Future(oneshot::Sender<Down>),
    /// A callback, e.g. a node that forwards the `Down` to another node.
    Callback(Box<dyn FnOnce(Down) + Send>),
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Actor(c) => write!(f, "Watcher::Actor({})", c.id()),
            Self::Future(_) => f.write_str("Watcher::Future"),
            Self::Callback(_) => f.write_str("Watcher::Callback"),
        }
    }
}

impl Watcher {
    /// Delivers the `Down` notification.
    pub fn notify(self, down: Down) {
        match self {
            Self::Actor(c) => {
                c.signal(Signal::Down(down));
            }
            Self::Future(tx) => {
                // The waiting future may have been dropped; nobody is left to tell.
                let _ = tx.send(down);
            }
            Self::Callback(f) => f(down),
        }
    }
}

/// Why a mailbox refused a message before it was converted and pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No room (bounded mailbox, or a remote link's send buffer).
    Full,
    /// The actor has stopped (or its node is down).
    Stopped,
}

/// The part of an actor that does not depend on its message type: lifecycle,
/// signals, monitors, links. Implemented by the mailbox of local actors; a
/// node's proxy implements it for actors on other nodes.
pub trait Control: Send + Sync + 'static {
    /// The actor's id.
    fn id(&self) -> ActorId;
    /// Whether the actor (as far as this node knows) is running.
    fn is_alive(&self) -> bool;
    /// Takes room for one message (a permit of a bounded mailbox).
    fn try_acquire(&self) -> Result<(), Refusal>;
    /// The semaphore of a bounded mailbox, for senders that wait for room.
    fn semaphore(&self) -> Option<&Semaphore>;
    /// Queues a signal. False if the actor has stopped.
    fn signal(&self, signal: Signal) -> bool;
    /// Stops the actor at once, even inside a handler.
    fn kill(&self);
    /// Adds a watcher; if the actor has stopped, notifies it at once and
    /// returns `None`.
    fn watch(&self, watcher: Watcher) -> Option<u64>;
    /// Removes a watcher added with [`watch`](Self::watch).
    fn unwatch(&self, token: u64);
    /// Records a link to `other`; `Err(reason)` if this actor has stopped.
    fn add_link(&self, other: Arc<dyn Control>) -> Result<(), ExitReason>;
    /// Forgets a link.
    fn remove_link(&self, other: ActorId);
    /// Records a registered name, removed from the registry when the actor
    /// stops. False if it has stopped.
    fn add_name(&self, name: &str) -> bool;
    /// Forgets a registered name.
    fn remove_name(&self, name: &str);
    /// The runtime of the actor's system (for timers of calls made from
    /// outside it).
    fn runtime(&self) -> &tokio::runtime::Handle;
    /// Messages waiting in the mailbox (0 where unknown, e.g. remote).
    /// A node uses it to stop reading a link while an actor is flooded.
    fn queued(&self) -> usize {
        0
    }
    /// Messages not handled yet: [`queued`](Self::queued) and those the
    /// actor took from the queue into its current batch (an upper bound:
    /// counted when taken). What the mailbox-depth metrics report.
    fn waiting(&self) -> usize {
        self.queued()
    }
    /// Ready once at most `n` messages wait in the mailbox (see
    /// [`queued`](Self::queued)) or the actor has stopped; until then the
    /// task is woken when the actor next takes its queued messages, or
    /// stops. One task waits at a time (a later poll replaces the waker).
    /// A node uses it to resume reading a link it paused for a flooded
    /// actor. Ready at once where the length is unknown.
    fn poll_queued_at_most(&self, n: usize, cx: &mut TaskContext<'_>) -> Poll<()> {
        let _ = (n, cx);
        Poll::Ready(())
    }
}

/// Bookkeeping most actors never need, allocated on first use.
#[derive(Default)]
struct Extra {
    watchers: Vec<(u64, Watcher)>,
    next_watch: u64,
    links: Vec<Arc<dyn Control>>,
    names: Vec<Box<str>>,
    reason: Option<ExitReason>,
    /// The trace contexts of queued messages that came with one, by their
    /// position among the queued messages (`first` is 0), oldest first.
    traces: Vec<(usize, TraceContext)>,
    /// Down and Exit signals (see [`State::stop`] for stop and kill): only
    /// actors that monitor or link get them, so they live here rather than
    /// in every mailbox (W7 `spawn`: 32 bytes of each of a million idle
    /// actors).
    signals: VecDeque<Signal>,
    /// The task waiting for the queue to drain
    /// ([`Control::poll_queued_at_most`]): a node's link reader paused for
    /// a flooded actor; here for the same reason as `signals`.
    drain_waker: Option<Waker>,
}

/// How an actor ended. The reasons without data are kept inline so that
/// stopping allocates nothing; others live in [`Extra::reason`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ended {
    No,
    Normal,
    Stopped,
    Shutdown,
    Killed,
    InExtra,
}

struct State<M> {
    /// The oldest queued message when it is alone: an idle actor's next
    /// message (the common case) needs no queue allocation.
    first: Option<M>,
    /// Messages behind `first`.
    queue: VecDeque<M>,
    /// A requested stop (`Stopped`, `Shutdown`) or kill (`Killed`).
    stop: Ended,
    waker: Option<Waker>,
    /// Messages the actor moved out of the queue into its batch at its
    /// last take, not all handled yet; 0 once it found the queue empty.
    /// Counted in [`waiting`](Control::waiting) (as an upper bound: some
    /// of them may be handled by now), so a stuck actor's waiting messages
    /// show even after it took them.
    taken: usize,
    ended: Ended,
    abort: Option<AbortHandle>,
    extra: Option<Box<Extra>>,
}

impl<M> State<M> {
    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    fn is_stopped(&self) -> bool {
        self.ended != Ended::No
    }

    fn has_signal(&self) -> bool {
        self.stop != Ended::No || self.extra.as_ref().is_some_and(|e| !e.signals.is_empty())
    }

    /// Messages in the queue (`first` and those behind it).
    fn queued(&self) -> usize {
        usize::from(self.first.is_some()) + self.queue.len()
    }

    /// Queues a signal; stop and kill only set (or escalate) the request.
    fn queue_signal(&mut self, signal: Signal) {
        match signal {
            Signal::Kill => self.stop = Ended::Killed,
            Signal::Stop(reason) if self.stop == Ended::No => {
                self.stop = match reason {
                    ExitReason::Shutdown => Ended::Shutdown,
                    _ => Ended::Stopped,
                }
            }
            Signal::Stop(_) => {}
            // Down and Exit: kept apart from stop and kill so that
            // stopping a million idle actors allocates nothing.
            other => self.extra().signals.push_back(other),
        }
    }

    /// Takes a requested stop or kill.
    fn take_stop(&mut self) -> Option<Signal> {
        let signal = match std::mem::replace(&mut self.stop, Ended::No) {
            Ended::No => return None,
            Ended::Killed => Signal::Kill,
            Ended::Shutdown => Signal::Stop(ExitReason::Shutdown),
            _ => Signal::Stop(ExitReason::Stopped),
        };
        Some(signal)
    }

    fn set_ended(&mut self, reason: &ExitReason) {
        self.ended = match reason {
            ExitReason::Normal => Ended::Normal,
            ExitReason::Stopped => Ended::Stopped,
            ExitReason::Shutdown => Ended::Shutdown,
            ExitReason::Killed => Ended::Killed,
            other => {
                self.extra().reason = Some(other.clone());
                Ended::InExtra
            }
        };
    }

    /// Why the actor ended; only called once it has.
    fn end_reason(&self) -> ExitReason {
        match self.ended {
            Ended::Normal | Ended::No => ExitReason::Normal,
            Ended::Stopped => ExitReason::Stopped,
            Ended::Shutdown => ExitReason::Shutdown,
            Ended::Killed => ExitReason::Killed,
            Ended::InExtra => self
                .extra
                .as_ref()
                .and_then(|e| e.reason.clone())
                .unwrap_or(ExitReason::Killed),
        }
    }
}

/// The mailbox and control block of one local actor.
pub(crate) struct Mailbox<M> {
    id: ActorId,
    sys: Arc<SystemShared>,
    has_signal: AtomicBool,
    alive: AtomicBool,
    bound: Option<Box<Semaphore>>,
    state: Mutex<State<M>>,
}

impl<M: Send + 'static> Mailbox<M> {
    pub(crate) fn new(id: ActorId, sys: Arc<SystemShared>, capacity: Option<usize>) -> Self {
        Self {
            id,
            sys,
            has_signal: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            bound: capacity.map(|c| Box::new(Semaphore::new(c))),
            state: Mutex::new(State {
                first: None,
                queue: VecDeque::new(),
                stop: Ended::No,
                waker: None,
                taken: 0,
                ended: Ended::No,
                abort: None,
                extra: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<M>> {
        // No user code runs while the lock is held, so a poisoned lock can
        // only follow a panic inside this module's own short critical
        // sections, which leave the state consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enqueues a message for which room was taken with
    /// [`Control::try_acquire`] (or a semaphore permit). If the actor stopped
    /// in between, the message becomes a dead letter and `false` is
    /// returned.
    pub(crate) fn push(&self, msg: M) -> bool {
        self.push_with(msg, None)
    }

    /// [`push`](Mailbox::push) for a message that came from another node
    /// with a trace context: the actor handles it in a span under `trace`.
    pub(crate) fn push_traced(&self, msg: M, trace: TraceContext) -> bool {
        self.push_with(msg, Some(trace))
    }

    #[inline]
    fn push_with(&self, msg: M, trace: Option<TraceContext>) -> bool {
        let mut st = self.lock();
        if st.is_stopped() {
            drop(st);
            self.dead_letter(msg, DeadLetterReason::Stopped);
            return false;
        }
        if let Some(trace) = trace {
            let position = st.queued();
            st.extra().traces.push((position, trace));
        }
        if st.first.is_none() && st.queue.is_empty() {
            st.first = Some(msg);
        } else {
            st.queue.push_back(msg);
        }
        let waker = st.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// [`push`](Mailbox::push) for several messages, in order, under one
    /// lock and with at most one wake-up. Returns how many were enqueued
    /// (all, or none if the actor stopped: those are dead letters).
    pub(crate) fn push_batch(&self, msgs: &mut dyn Iterator<Item = M>) -> usize {
        let mut st = self.lock();
        if st.is_stopped() {
            drop(st);
            for msg in msgs {
                self.dead_letter(msg, DeadLetterReason::Stopped);
            }
            return 0;
        }
        let mut n = 0;
        for msg in msgs {
            if st.first.is_none() && st.queue.is_empty() {
                st.first = Some(msg);
            } else {
                st.queue.push_back(msg);
            }
            n += 1;
        }
        let waker = st.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        n
    }

    pub(crate) fn dead_letter(&self, msg: M, reason: DeadLetterReason) {
        self.sys
            .dead_letters
            .record(self.id, std::any::type_name::<M>(), reason);
        drop(msg);
    }

    /// Whether signals are waiting. Checked by the actor before each message.
    pub(crate) fn has_signal(&self) -> bool {
        self.has_signal.load(Ordering::Acquire)
    }

    /// Ready when a signal is waiting or messages are: the oldest is
    /// returned, those behind it are moved into `batch` (which must be
    /// empty; its allocation is recycled). FIFO: the returned message comes
    /// before the batch. The trace contexts of the messages taken go to
    /// `cell`'s [`CellExtra::traces`] (created if need be).
    pub(crate) fn poll_recv(
        &self,
        cx: &mut TaskContext<'_>,
        batch: &mut VecDeque<M>,
        cell: &mut Option<Box<CellExtra>>,
    ) -> Poll<Option<M>> {
        let mut st = self.lock();
        if st.has_signal() {
            return Poll::Ready(None);
        }
        if st.extra.as_ref().is_some_and(|e| !e.traces.is_empty()) {
            // Everything queued is taken below.
            let queued = st.queued();
            if let Some(extra) = st.extra.as_mut() {
                let traces = &mut cell.get_or_insert_with(Box::default).traces;
                traces.extend(
                    extra
                        .traces
                        .drain(..)
                        .rev()
                        .map(|(position, trace)| (queued - 1 - position, trace)),
                );
            }
        }
        let taken = if let Some(first) = st.first.take() {
            if !st.queue.is_empty() {
                std::mem::swap(&mut st.queue, batch);
            }
            Some(first)
        } else if !st.queue.is_empty() {
            std::mem::swap(&mut st.queue, batch);
            None
        } else {
            // Called with an empty batch: everything taken was handled.
            st.taken = 0;
            match &st.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => st.waker = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        };
        st.taken = batch.len();
        // The queue is empty now: whoever waits for it to drain goes on.
        let drained = st.extra.as_mut().and_then(|e| e.drain_waker.take());
        drop(st);
        if let Some(w) = drained {
            w.wake();
        }
        Poll::Ready(taken)
    }

    /// Ready with the reason when a stop or kill is queued; other signals
    /// and user messages stay queued. Used while a supervisor waits out a
    /// restart backoff.
    pub(crate) fn poll_stop(&self, cx: &mut TaskContext<'_>) -> Poll<ExitReason> {
        let mut st = self.lock();
        if let Some(signal) = st.take_stop() {
            self.has_signal.store(st.has_signal(), Ordering::Release);
            return Poll::Ready(match signal {
                Signal::Stop(reason) => reason,
                _ => ExitReason::Killed,
            });
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Returns the room of one message taken out of the queue.
    pub(crate) fn on_dequeue(&self) {
        if let Some(s) = &self.bound {
            s.add_permits(1);
        }
    }

    /// The oldest queued signal, if any.
    pub(crate) fn pop_signal(&self) -> Option<Signal> {
        let mut st = self.lock();
        let signal = st
            .take_stop()
            .or_else(|| st.extra.as_mut().and_then(|e| e.signals.pop_front()));
        self.has_signal.store(st.has_signal(), Ordering::Release);
        signal
    }

    pub(crate) fn set_abort(&self, handle: AbortHandle) {
        let mut st = self.lock();
        if st.is_stopped() {
            return;
        }
        st.abort = Some(handle);
    }

    /// Tears the actor down: marks it stopped, turns queued messages into
    /// dead letters, and tells watchers, linked actors and the registry.
    /// Idempotent: only the first call has an effect.
    pub(crate) fn finish(&self, reason: &ExitReason, unprocessed: VecDeque<M>) {
        let mut st = self.lock();
        if st.is_stopped() {
            return;
        }
        st.set_ended(reason);
        self.alive.store(false, Ordering::Release);
        let first = st.first.take();
        let queued = std::mem::take(&mut st.queue);
        st.waker = None;
        st.abort = None;
        if let Some(e) = st.extra.as_mut() {
            // Their messages become dead letters.
            e.traces.clear();
        }
        let (watchers, links, names, signals, drained) = match st.extra.as_mut() {
            Some(e) => (
                std::mem::take(&mut e.watchers),
                std::mem::take(&mut e.links),
                std::mem::take(&mut e.names),
                std::mem::take(&mut e.signals),
                e.drain_waker.take(),
            ),
            None => Default::default(),
        };
        drop(st);
        if let Some(w) = drained {
            w.wake();
        }

        if let Some(s) = &self.bound {
            s.close();
        }
        drop(signals);
        for msg in unprocessed.into_iter().chain(first).chain(queued) {
            self.dead_letter(msg, DeadLetterReason::Stopped);
        }
        // Out of the registry and the live set before anyone hears of the
        // end: a watcher that got `Down` finds the system without it (its
        // names free, `live_actors` counting it no more).
        if !names.is_empty() {
            self.sys.registry.remove_names(self.id, &names);
        }
        self.sys.remove_live(self.id);
        for (_, w) in watchers {
            w.notify(Down {
                id: self.id,
                reason: reason.clone(),
            });
        }
        for other in links {
            other.remove_link(self.id);
            other.signal(Signal::Exit(Exit {
                from: self.id,
                reason: reason.clone(),
            }));
        }
    }
}

impl<M: Send + 'static> Control for Mailbox<M> {
    fn id(&self) -> ActorId {
        self.id
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    fn try_acquire(&self) -> Result<(), Refusal> {
        if !self.is_alive() {
            return Err(Refusal::Stopped);
        }
        match &self.bound {
            None => Ok(()),
            Some(s) => match s.try_acquire() {
                Ok(p) => {
                    p.forget();
                    Ok(())
                }
                Err(tokio::sync::TryAcquireError::NoPermits) => Err(Refusal::Full),
                Err(tokio::sync::TryAcquireError::Closed) => Err(Refusal::Stopped),
            },
        }
    }

    fn semaphore(&self) -> Option<&Semaphore> {
        self.bound.as_deref()
    }

    fn signal(&self, signal: Signal) -> bool {
        let mut st = self.lock();
        if st.is_stopped() {
            return false;
        }
        st.queue_signal(signal);
        self.has_signal.store(true, Ordering::Release);
        let waker = st.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    fn kill(&self) {
        let mut st = self.lock();
        if st.is_stopped() {
            return;
        }
        st.queue_signal(Signal::Kill);
        self.has_signal.store(true, Ordering::Release);
        let waker = st.waker.take();
        let abort = st.abort.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        if let Some(a) = abort {
            a.abort();
        }
    }

    fn watch(&self, watcher: Watcher) -> Option<u64> {
        let mut st = self.lock();
        if st.is_stopped() {
            let reason = st.end_reason();
            drop(st);
            watcher.notify(Down {
                id: self.id,
                reason,
            });
            return None;
        }
        let extra = st.extra();
        extra.next_watch += 1;
        let token = extra.next_watch;
        extra.watchers.push((token, watcher));
        Some(token)
    }

    fn unwatch(&self, token: u64) {
        let mut st = self.lock();
        if let Some(e) = st.extra.as_mut() {
            e.watchers.retain(|(t, _)| *t != token);
        }
    }

    fn add_link(&self, other: Arc<dyn Control>) -> Result<(), ExitReason> {
        let mut st = self.lock();
        if st.is_stopped() {
            return Err(st.end_reason());
        }
        let extra = st.extra();
        if !extra.links.iter().any(|l| l.id() == other.id()) {
            extra.links.push(other);
        }
        Ok(())
    }

    fn remove_link(&self, other: ActorId) {
        let mut st = self.lock();
        if let Some(e) = st.extra.as_mut() {
            e.links.retain(|l| l.id() != other);
        }
    }

    fn add_name(&self, name: &str) -> bool {
        let mut st = self.lock();
        if st.is_stopped() {
            return false;
        }
        st.extra().names.push(name.into());
        true
    }

    fn remove_name(&self, name: &str) {
        let mut st = self.lock();
        if let Some(e) = st.extra.as_mut() {
            e.names.retain(|n| &**n != name);
        }
    }

    fn runtime(&self) -> &tokio::runtime::Handle {
        self.sys.runtime()
    }

    fn queued(&self) -> usize {
        self.lock().queued()
    }

    fn waiting(&self) -> usize {
        let st = self.lock();
        st.queued() + st.taken
    }

    fn poll_queued_at_most(&self, n: usize, cx: &mut TaskContext<'_>) -> Poll<()> {
        let mut st = self.lock();
        if st.is_stopped() || st.queued() <= n {
            return Poll::Ready(());
        }
        st.extra().drain_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mailbox is allocated for every actor (W7 `spawn` wants at most
    /// 768 bytes per actor in all): what most actors never use stays in
    /// `Extra`. A `u64` message's mailbox fits mimalloc's 160-byte class
    /// with the `Arc`'s two counts.
    #[test]
    fn mailbox_stays_small() {
        let size = std::mem::size_of::<Mailbox<u64>>();
        assert!(size <= 144, "mailbox grew to {size} bytes");
    }
}
