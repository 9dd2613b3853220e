//! The context an actor's methods receive: its own ref, stopping, monitors,
//! links and timers.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::MissedTickBehavior;

use crate::mailbox::{Control, Mailbox, Signal, Watcher};
use crate::{ActorId, ActorRef, Exit, ExitReason, SystemRef};

/// Above this many timer handles, finished ones are pruned on the next
/// insertion, so an actor that sets many one-shot timers does not grow.
const TIMER_PRUNE_THRESHOLD: usize = 16;

/// What an actor's methods can do besides their own logic.
///
/// Part of every actor's resident state, so it is kept small: rarely used
/// parts are boxed on first use.
pub struct Context<M: Send + 'static> {
    pub(crate) mailbox: Arc<Mailbox<M>>,
    system: SystemRef,
    pub(crate) pending_stop: Option<Box<ExitReason>>,
    // A pointer, not a 24-byte Vec, in every actor; the box is allocated
    // only by actors that set timers.
    #[allow(clippy::box_collection)]
    timers: Option<Box<Vec<AbortHandle>>>,
    pub(crate) restarts: u32,
    pub(crate) trap_exits: bool,
}

impl<M: Send + 'static> Context<M> {
    pub(crate) fn new(mailbox: Arc<Mailbox<M>>, system: SystemRef) -> Self {
        Self {
            mailbox,
            system,
            pending_stop: None,
            timers: None,
            restarts: 0,
            trap_exits: false,
        }
    }

    /// This actor's own ref.
    pub fn myself(&self) -> ActorRef<M> {
        ActorRef::local(self.mailbox.clone())
    }

    /// This actor's id.
    pub fn id(&self) -> ActorId {
        self.mailbox.id()
    }

    fn control(&self) -> Arc<dyn Control> {
        self.mailbox.clone()
    }

    /// The system this actor runs in (to spawn, register, look up).
    pub fn system(&self) -> &SystemRef {
        &self.system
    }

    /// How many times this actor has been restarted by its supervisor.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Stops this actor normally once the current handler returns.
    pub fn stop(&mut self) {
        self.pending_stop
            .get_or_insert_with(|| Box::new(ExitReason::Normal));
    }

    /// Stops this actor with a failure once the current handler returns:
    /// [`ExitReason::Failed`], which propagates over links and triggers
    /// restart-on-failure.
    pub fn fail(&mut self, reason: impl fmt::Display) {
        self.pending_stop = Some(Box::new(ExitReason::Failed(reason.to_string())));
    }

    /// Monitors `target`: when it stops, this actor's
    /// [`Actor::on_down`](crate::Actor::on_down) runs with a
    /// [`Down`](crate::Down), exactly once; at once if it has already
    /// stopped.
    pub fn monitor<T: Send + 'static>(&mut self, target: &ActorRef<T>) -> MonitorRef {
        let token = target.control().watch(Watcher::Actor(self.control()));
        MonitorRef {
            target: target.control_arc(),
            token,
        }
    }

    /// Cancels a monitor. A `Down` already queued is still delivered.
    pub fn demonitor(&mut self, monitor: MonitorRef) {
        if let Some(t) = monitor.token {
            monitor.target.unwatch(t);
        }
    }

    /// Links this actor with `other`: when either exits abnormally, the
    /// other exits too with [`ExitReason::Linked`], unless it traps exits.
    /// Linking to an actor that has already stopped delivers its exit at
    /// once.
    pub fn link<T: Send + 'static>(&mut self, other: &ActorRef<T>) {
        link(&self.control(), other.control_arc());
    }

    /// Removes a link in both directions.
    pub fn unlink<T: Send + 'static>(&mut self, other: &ActorRef<T>) {
        self.mailbox.remove_link(other.id());
        other.control().remove_link(self.id());
    }

    /// While on, exits of linked actors arrive at
    /// [`Actor::on_exit`](crate::Actor::on_exit) instead of stopping this
    /// actor.
    pub fn trap_exits(&mut self, on: bool) {
        self.trap_exits = on;
    }

    /// Sends `msg` to this actor after `delay`. Cancelled when the actor
    /// stops or restarts.
    pub fn send_after(&mut self, delay: Duration, msg: M) -> TimerRef {
        let me = self.myself();
        let handle = self.system.runtime().spawn(async move {
            tokio::time::sleep(delay).await;
            me.tell(msg);
        });
        self.keep_timer(handle.abort_handle())
    }

    /// Sends `make()` to this actor every `period`, the first time after one
    /// period. A tick that finds the actor busy is delayed, not doubled up.
    /// Cancelled when the actor stops or restarts.
    pub fn interval<F>(&mut self, period: Duration, mut make: F) -> TimerRef
    where
        F: FnMut() -> M + Send + 'static,
    {
        let me = self.myself();
        let handle = self.system.runtime().spawn(async move {
            let start = tokio::time::Instant::now() + period;
            let mut ticks = tokio::time::interval_at(start, period);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if !me.is_alive() {
                    break;
                }
                me.tell(make());
            }
        });
        self.keep_timer(handle.abort_handle())
    }

    fn keep_timer(&mut self, handle: AbortHandle) -> TimerRef {
        let timers = self.timers.get_or_insert_with(Box::default);
        if timers.len() >= TIMER_PRUNE_THRESHOLD {
            timers.retain(|h| !h.is_finished());
        }
        timers.push(handle.clone());
        TimerRef { handle }
    }

    pub(crate) fn cancel_timers(&mut self) {
        if let Some(timers) = self.timers.as_mut() {
            for t in timers.drain(..) {
                t.abort();
            }
        }
    }
}

impl<M: Send + 'static> Drop for Context<M> {
    fn drop(&mut self) {
        // Also runs when the actor's task is aborted (killed).
        self.cancel_timers();
    }
}

impl<M: Send + 'static> fmt::Debug for Context<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("actor", &self.id())
            .field("restarts", &self.restarts)
            .finish_non_exhaustive()
    }
}

pub(crate) fn link(me: &Arc<dyn Control>, other: Arc<dyn Control>) {
    let other_id = other.id();
    if me.add_link(other.clone()).is_err() {
        return;
    }
    if let Err(reason) = other.add_link(me.clone()) {
        me.remove_link(other_id);
        me.signal(Signal::Exit(Exit {
            from: other_id,
            reason,
        }));
    }
}

/// A monitor set with [`Context::monitor`]; pass it to
/// [`Context::demonitor`] to cancel.
pub struct MonitorRef {
    target: Arc<dyn Control>,
    token: Option<u64>,
}

impl fmt::Debug for MonitorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MonitorRef({})", self.target.id())
    }
}

/// A timer set with [`Context::send_after`] or [`Context::interval`].
#[derive(Debug, Clone)]
pub struct TimerRef {
    handle: AbortHandle,
}

impl TimerRef {
    /// Cancels the timer. A message it already sent stays queued.
    pub fn cancel(&self) {
        self.handle.abort();
    }
}
