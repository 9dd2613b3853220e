//! The loop that drives one actor: signals first, then user messages in
//! batches; hooks; panics caught per call; supervision and restarts; and the
//! teardown that runs however the loop ends (return, panic, abort).

use std::any::Any;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::FutureExt;

use crate::mailbox::{Mailbox, Signal};
use crate::supervision::RestartWindow;
use crate::telemetry::HandleTimer;
use crate::trace::TraceContext;
use crate::{Actor, Context, ExitReason, Supervision, SystemRef};

/// Messages handled in a row before the actor yields to the scheduler, so a
/// busy actor does not starve others on its worker (tokio's own channels
/// use a budget of 128 for the same reason). Its counter also picks the
/// message timed for `plexus_actor_handle_seconds` (see `telemetry`).
pub(crate) const MESSAGES_PER_YIELD: u32 = 128;

/// What a restartable actor needs to restart: kept in one box so an actor
/// that is never restarted carries a single pointer for it.
pub(crate) struct Restarter<F> {
    factory: F,
    supervision: Supervision,
    window: RestartWindow,
}

impl<F> Restarter<F> {
    pub(crate) fn new(factory: F, supervision: Supervision) -> Box<Self> {
        Box::new(Self {
            factory,
            supervision,
            window: RestartWindow::default(),
        })
    }

    pub(crate) fn make<A>(&mut self) -> A
    where
        F: FnMut() -> A,
    {
        (self.factory)()
    }
}

/// Everything one running actor owns. Built synchronously at spawn and used
/// in place by [`run_actor`]: the size of that future is the memory cost of
/// an idle actor (tokio rounds its task up to a multiple of 128 bytes), and
/// rustc does not overlap an async fn's arguments with its locals, so the
/// state is one argument and nothing is moved out of it.
///
/// Dropping the cell tears the actor down, however the future ends: a normal
/// end calls [`finish`](Self::finish); an abort (kill, runtime shutdown)
/// drops the future, and the drop reports [`ExitReason::Killed`]. As the cell
/// is built before the future, even a task aborted before its first poll
/// tears its actor down.
pub(crate) struct ActorCell<A: Actor, F> {
    actor: A,
    restarter: Option<Box<Restarter<F>>>,
    ctx: Context<A::Msg>,
    /// Messages taken out of the mailbox in one lock, handled one by one.
    batch: VecDeque<A::Msg>,
    /// What few actors need; none until the first timed or traced message.
    extra: Option<Box<CellExtra>>,
    finished: bool,
}

/// The part of a cell most actors never need, boxed on first use so an
/// actor costs one pointer for it (the idle actor's future is its memory).
#[derive(Default)]
pub(crate) struct CellExtra {
    /// Times one message in `HANDLE_TIME_SAMPLE` (see `telemetry`); none
    /// until the first timed message.
    pub(crate) timer: Option<HandleTimer>,
    /// The trace contexts of messages in `batch` (and of the one taken
    /// with it), as [`Mailbox::poll_recv`] hands them over: newest first,
    /// each with the length of `batch` once its message is taken.
    pub(crate) traces: Vec<(usize, TraceContext)>,
}

impl CellExtra {
    /// The trace context of the message just taken, `batch` long after
    /// it was taken.
    fn take_trace(&mut self, batch: usize) -> Option<TraceContext> {
        match self.traces.last() {
            Some(&(at, trace)) if at == batch => {
                self.traces.pop();
                Some(trace)
            }
            _ => None,
        }
    }
}

impl<A: Actor, F> ActorCell<A, F> {
    pub(crate) fn new(
        actor: A,
        restarter: Option<Box<Restarter<F>>>,
        mailbox: Arc<Mailbox<A::Msg>>,
        system: SystemRef,
    ) -> Self {
        Self {
            actor,
            restarter,
            ctx: Context::new(mailbox, system),
            batch: VecDeque::new(),
            extra: None,
            finished: false,
        }
    }

    fn finish(&mut self, reason: &ExitReason) {
        self.finished = true;
        let unprocessed = std::mem::take(&mut self.batch);
        self.ctx.mailbox.finish(reason, unprocessed);
    }
}

impl<A: Actor, F> Drop for ActorCell<A, F> {
    fn drop(&mut self) {
        if !self.finished {
            self.finish(&ExitReason::Killed);
        }
    }
}

/// Runs an actor until it stops for good; with a [`Restarter`] it may be
/// restarted on the way.
///
/// Everything off the message path (hooks, signal handling, backoff) is
/// boxed where it is awaited, to keep this future small. Hooks left at their
/// default are zero-sized futures, and boxing those does not allocate.
pub(crate) fn run_actor<A, F>(cell: ActorCell<A, F>) -> impl Future<Output = ()> + Send
where
    A: Actor,
    F: FnMut() -> A + Send + 'static,
{
    // Not an `async fn`: its argument would be stored twice in the future
    // (as the argument and as the body's rebinding). A captured variable of
    // an `async move` block is used in place.
    let mut cell = cell;
    async move {
        let reason = loop {
            let (reason, external) = match catch(Box::pin(cell.actor.started(&mut cell.ctx))).await
            {
                Err(panic) => (ExitReason::Panicked(panic), false),
                Ok(()) => serve(&mut cell).await,
            };
            let reason = match catch(Box::pin(cell.actor.stopped(&reason, &mut cell.ctx))).await {
                Err(panic) if !reason.is_abnormal() => ExitReason::Panicked(panic),
                _ => reason,
            };
            cell.ctx.cancel_timers();
            let Some(r) = cell.restarter.as_mut() else {
                break reason;
            };
            if external || !r.supervision.restarts_after(&reason) {
                break reason;
            }
            let Some(delay) = r.window.admit(tokio::time::Instant::now(), &r.supervision) else {
                break ExitReason::RestartLimit {
                    max_restarts: r.supervision.max_restarts,
                    within: r.supervision.within,
                    last: Box::new(reason),
                };
            };
            tracing::debug!(target: "plexus::core", actor = %cell.ctx.id(), %reason, ?delay, "restarting actor");
            if let Some(stop) = Box::pin(wait_backoff(&cell.ctx.mailbox, delay)).await {
                break stop;
            }
            cell.actor = match std::panic::catch_unwind(AssertUnwindSafe(&mut r.factory)) {
                Ok(fresh) => fresh,
                Err(panic) => break ExitReason::Panicked(panic_message(panic)),
            };
            cell.ctx.restarts += 1;
            cell.ctx.pending_stop = None;
        };
        if reason.is_abnormal() {
            tracing::debug!(target: "plexus::core", actor = %cell.ctx.id(), %reason, "actor stopped");
        }
        cell.finish(&reason);
    }
}

/// Handles signals and messages until the actor stops. Returns the reason
/// and whether the stop came from outside (which rules out a restart).
async fn serve<A: Actor, F>(cell: &mut ActorCell<A, F>) -> (ExitReason, bool) {
    let mut since_yield = 0u32;
    loop {
        if cell.ctx.mailbox.has_signal() {
            if let Some(signal) = cell.ctx.mailbox.pop_signal() {
                let handling = handle_signal(&mut cell.actor, &mut cell.ctx, signal);
                if let Some(stop) = Box::pin(handling).await {
                    return stop;
                }
            }
            continue;
        }
        let msg = match cell.batch.pop_front() {
            Some(msg) => msg,
            None => {
                let (mailbox, batch, extra) = (&cell.ctx.mailbox, &mut cell.batch, &mut cell.extra);
                match poll_fn(|cx| mailbox.poll_recv(cx, batch, extra)).await {
                    Some(msg) => msg,
                    None => continue,
                }
            }
        };
        cell.ctx.mailbox.on_dequeue();
        // `since_yield` is not changed across the handler, so the test
        // after it needs no local kept in this future.
        let trace = match &mut cell.extra {
            Some(extra) if !extra.traces.is_empty() => extra.take_trace(cell.batch.len()),
            _ => None,
        };
        if HandleTimer::is_timed(since_yield) {
            HandleTimer::start(&mut cell.extra, std::any::type_name::<A>());
        }
        // The handler's future is built in place (one built elsewhere and
        // returned is moved into this future on every message: W2 measured
        // 0.94-0.95 that way) and polled at one place (a second, for traced
        // messages, kept the compiler from inlining it: 1-2 % of W2). A
        // traced message's span is boxed, so the future holds a pointer for
        // it; and no local keeps the outcome, which would be kept across
        // the yield below too. Both keep the idle actor's future small.
        let handling = InSpan {
            span: trace.map(|parent| Box::new(handle_span::<A>(parent))),
            inner: cell.actor.handle(msg, &mut cell.ctx),
        };
        if let Err(panic) = AssertUnwindSafe(handling).catch_unwind().await {
            return (ExitReason::Panicked(panic_message(panic)), false);
        }
        if HandleTimer::is_timed(since_yield) {
            HandleTimer::finish(&mut cell.extra);
        }
        if let Some(reason) = cell.ctx.pending_stop.take() {
            return (*reason, false);
        }
        since_yield += 1;
        if since_yield == MESSAGES_PER_YIELD {
            since_yield = 0;
            tokio::task::yield_now().await;
        }
    }
}

async fn handle_signal<A: Actor>(
    actor: &mut A,
    ctx: &mut Context<A::Msg>,
    signal: Signal,
) -> Option<(ExitReason, bool)> {
    let outcome = match signal {
        Signal::Stop(reason) => return Some((reason, true)),
        Signal::Kill => return Some((ExitReason::Killed, true)),
        Signal::Down(down) => catch(actor.on_down(down, ctx)).await,
        Signal::Exit(exit) if ctx.trap_exits => catch(actor.on_exit(exit, ctx)).await,
        Signal::Exit(exit) if exit.reason.is_abnormal() => {
            return Some((
                ExitReason::Linked {
                    from: exit.from,
                    reason: Box::new(exit.reason),
                },
                false,
            ))
        }
        Signal::Exit(_) => Ok(()),
    };
    if let Err(panic) = outcome {
        return Some((ExitReason::Panicked(panic), false));
    }
    ctx.pending_stop.take().map(|r| (*r, false))
}

/// Waits out a restart backoff. A stop or kill arriving meanwhile ends the
/// actor (returned); other signals stay queued for the fresh instance.
async fn wait_backoff<M: Send + 'static>(
    mailbox: &Mailbox<M>,
    delay: std::time::Duration,
) -> Option<ExitReason> {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    tokio::select! {
        () = &mut sleep => None,
        stop = poll_fn(|cx| mailbox.poll_stop(cx)) => Some(stop),
    }
}

async fn catch(f: impl Future<Output = ()>) -> Result<(), String> {
    AssertUnwindSafe(f)
        .catch_unwind()
        .await
        .map_err(panic_message)
}

/// The `handle` span of a message to an `A` that came with `parent`.
fn handle_span<A: Actor>(parent: TraceContext) -> tracing::Span {
    crate::trace::handle_span(
        std::any::type_name::<A>(),
        std::any::type_name::<A::Msg>(),
        parent,
    )
}

pin_project_lite::pin_project! {
    /// A handler's future, polled inside its message's `handle` span if the
    /// message came with a trace context.
    struct InSpan<F> {
        #[pin]
        inner: F,
        span: Option<Box<tracing::Span>>,
    }
}

impl<F: Future> Future for InSpan<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.as_deref().map(tracing::Span::enter);
        this.inner.poll(cx)
    }
}

fn panic_message(panic: Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ActorSystem, FnActor};

    type Noop = FnActor<u64, fn(u64, &mut Context<u64>)>;

    fn noop(_: u64, _: &mut Context<u64>) {}

    /// The idle actor's future is its main memory cost (W7 `spawn` wants
    /// under 1 KiB per actor in all).
    #[tokio::test]
    async fn idle_actor_future_stays_small() {
        let system = ActorSystem::new();
        let id = crate::ActorId::new(crate::NodeId::from_u64(1), 1);
        let mailbox = Arc::new(Mailbox::<u64>::new(id, system.shared_for_tests(), None));
        let actor: Noop = FnActor::new(noop as fn(u64, &mut Context<u64>));
        let cell = ActorCell::<Noop, fn() -> Noop>::new(actor, None, mailbox, (*system).clone());
        let fut = run_actor(cell);
        let size = std::mem::size_of_val(&fut);
        // tokio adds ~100 bytes of header and trailer and rounds the task up
        // to a multiple of 128: up to 256 bytes here keeps it at 384.
        assert!(size <= 256, "actor future grew to {size} bytes");
    }
}
