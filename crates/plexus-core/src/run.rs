//! The loop that drives one actor: signals first, then user messages in
//! batches; hooks; panics caught per call; supervision and restarts; and the
//! teardown that runs however the loop ends (return, panic, abort).

use std::any::Any;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;

use crate::mailbox::{Mailbox, Signal};
use crate::supervision::RestartWindow;
use crate::{Actor, ActorRef, Context, ExitReason, Supervision, SystemRef};

/// Messages handled in a row before the actor yields to the scheduler, so a
/// busy actor does not starve others on its worker (tokio's own channels
/// use a budget of 128 for the same reason).
const MESSAGES_PER_YIELD: u32 = 128;

/// Turns whatever way the actor's future ends into one teardown: normal
/// return sets `reason`; an abort (kill, runtime shutdown) drops the future
/// and the reason stays `Killed`.
///
/// It is made before the actor's future and moved into it as an argument,
/// so even a task aborted before its first poll tears its actor down.
pub(crate) struct Teardown<M: Send + 'static> {
    mailbox: Arc<Mailbox<M>>,
    batch: VecDeque<M>,
    reason: Option<ExitReason>,
}

impl<M: Send + 'static> Teardown<M> {
    pub(crate) fn new(mailbox: Arc<Mailbox<M>>) -> Self {
        Self {
            mailbox,
            batch: VecDeque::new(),
            reason: None,
        }
    }
}

impl<M: Send + 'static> Drop for Teardown<M> {
    fn drop(&mut self) {
        let reason = self.reason.take().unwrap_or(ExitReason::Killed);
        let unprocessed = std::mem::take(&mut self.batch);
        self.mailbox.finish(&reason, unprocessed);
    }
}

/// Runs an actor until it stops for good. `factory` makes fresh instances
/// for restarts; without one the actor is never restarted.
pub(crate) async fn run_actor<A, F>(
    mut actor: A,
    mut factory: Option<F>,
    mut teardown: Teardown<A::Msg>,
    supervision: Supervision,
    system: SystemRef,
) where
    A: Actor,
    F: FnMut() -> A + Send + 'static,
{
    let mailbox = teardown.mailbox.clone();
    let mut ctx = Context::new(ActorRef::local(mailbox.clone()), system);
    let mut window = RestartWindow::default();
    let mut signals = Vec::new();
    let reason = loop {
        let (reason, external) = match catch(actor.started(&mut ctx)).await {
            Err(panic) => (ExitReason::Panicked(panic), false),
            Ok(()) => serve(&mut actor, &mut ctx, &mailbox, &mut teardown.batch, &mut signals).await,
        };
        let reason = match catch(actor.stopped(&reason, &mut ctx)).await {
            Err(panic) if !reason.is_abnormal() => ExitReason::Panicked(panic),
            _ => reason,
        };
        ctx.cancel_timers();
        if external || !supervision.restarts_after(&reason) {
            break reason;
        }
        let Some(make) = factory.as_mut() else {
            break reason;
        };
        let Some(delay) = window.admit(tokio::time::Instant::now(), &supervision) else {
            break ExitReason::RestartLimit {
                max_restarts: supervision.max_restarts,
                within: supervision.within,
                last: Box::new(reason),
            };
        };
        tracing::debug!(actor = %ctx.id(), %reason, ?delay, "restarting actor");
        if let Some(stop) = wait_backoff(&mailbox, delay, &mut signals).await {
            break stop;
        }
        actor = match std::panic::catch_unwind(AssertUnwindSafe(&mut *make)) {
            Ok(fresh) => fresh,
            Err(panic) => break ExitReason::Panicked(panic_message(panic)),
        };
        ctx.restarts += 1;
        ctx.pending_stop = None;
    };
    if reason.is_abnormal() {
        tracing::debug!(actor = %ctx.id(), %reason, "actor stopped");
    }
    teardown.reason = Some(reason);
}

/// Handles signals and messages until the actor stops. Returns the reason
/// and whether the stop came from outside (which rules out a restart).
async fn serve<A: Actor>(
    actor: &mut A,
    ctx: &mut Context<A::Msg>,
    mailbox: &Mailbox<A::Msg>,
    batch: &mut VecDeque<A::Msg>,
    signals: &mut Vec<Signal>,
) -> (ExitReason, bool) {
    let mut since_yield = 0u32;
    loop {
        if mailbox.has_signal() {
            mailbox.take_signals(signals);
        }
        if !signals.is_empty() {
            let mut pending = std::mem::take(signals);
            for signal in pending.drain(..) {
                if let Some(stop) = handle_signal(actor, ctx, signal).await {
                    return stop;
                }
            }
            // Keep the buffer's allocation for the next signals.
            *signals = pending;
            continue;
        }
        let Some(msg) = batch.pop_front() else {
            poll_fn(|cx| mailbox.poll_recv(cx, batch)).await;
            continue;
        };
        mailbox.on_dequeue();
        if let Err(panic) = catch(actor.handle(msg, ctx)).await {
            return (ExitReason::Panicked(panic), false);
        }
        if let Some(reason) = ctx.pending_stop.take() {
            return (reason, false);
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
    ctx.pending_stop.take().map(|r| (r, false))
}

/// Waits out a restart backoff. A stop or kill arriving meanwhile ends the
/// actor (returned); other signals are kept for the fresh instance.
async fn wait_backoff<M: Send + 'static>(
    mailbox: &Mailbox<M>,
    delay: std::time::Duration,
    signals: &mut Vec<Signal>,
) -> Option<ExitReason> {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return None,
            () = poll_fn(|cx| mailbox.poll_signal(cx)) => {
                mailbox.take_signals(signals);
                if let Some(i) = signals.iter().position(|s| matches!(s, Signal::Stop(_) | Signal::Kill)) {
                    return Some(match signals.swap_remove(i) {
                        Signal::Stop(reason) => reason,
                        _ => ExitReason::Killed,
                    });
                }
            }
        }
    }
}

async fn catch(f: impl Future<Output = ()>) -> Result<(), String> {
    AssertUnwindSafe(f).catch_unwind().await.map_err(panic_message)
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
