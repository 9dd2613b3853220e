//! An actor's turn: one poll of its task, on one thread.
//!
//! A layer below the actors (the remote one) may hold what an actor sends
//! during a turn and hand it on together when the turn ends: a run of
//! messages to one peer then costs one lock, one permit count and one route
//! lookup instead of one of each per message. This module says when a turn
//! is on ([`in_turn`]) and runs the holder's hook when it ends
//! ([`set_turn_end`], [`held`]).
//!
//! Guarantees:
//! * A turn ends whenever the actor's task returns from a poll (it yields
//!   at an `await`, or it ends), also by a panic: nothing held outlives the
//!   poll it was sent in, so a message is never held across an `await` and
//!   a sender's order holds whichever thread runs its next poll.
//! * Outside a turn (a plain task, the main thread) [`in_turn`] is false
//!   and nothing is held.
//! * The hook runs only after a turn in which [`held`] was called, or
//!   when [`flush`] asks for it.
//!
//! What this means for a handler: a `tell` to a remote actor leaves at the
//! latest when the handler yields or returns, so a handler that computes
//! for long after a `tell` delays it unless it calls [`flush`]; one that
//! blocks its thread waiting for an effect of that `tell` (a blocking
//! channel, not an `await`) waits forever, where before it only stalled
//! its runtime's thread.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

thread_local! {
    static IN_TURN: Cell<bool> = const { Cell::new(false) };
    static HELD: Cell<bool> = const { Cell::new(false) };
    /// Counts the turns begun on this thread.
    static TURNS: Cell<u64> = const { Cell::new(0) };
}

static TURN_END: OnceLock<fn()> = OnceLock::new();

/// Whether an actor's turn is on on this thread.
#[inline]
pub fn in_turn() -> bool {
    IN_TURN.with(Cell::get)
}

/// The number of the turn on this thread (a new one each turn): to tell a
/// turn's first send from its later ones.
#[inline]
pub fn number() -> u64 {
    TURNS.with(Cell::get)
}

/// Something was held during this turn: the hook of [`set_turn_end`] runs
/// when it ends.
#[inline]
pub fn held() {
    HELD.with(|h| h.set(true));
}

/// Hands on now what this turn held so far (a handler about to compute for
/// long after a `tell` calls it, so the message does not wait for the turn
/// to end). Outside a turn, or with nothing held, it does nothing.
pub fn flush() {
    if HELD.with(|h| h.replace(false)) {
        if let Some(hook) = TURN_END.get() {
            hook();
        }
    }
}

/// Sets the hook that hands on what a turn held (the first caller's hook
/// stays; later calls change nothing). It runs on the thread of the turn,
/// after the poll.
pub fn set_turn_end(hook: fn()) {
    let _ = TURN_END.set(hook);
}

/// Ends the turn, also when the poll panics.
struct TurnGuard {
    outer: bool,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        IN_TURN.with(|t| t.set(self.outer));
        if !self.outer && HELD.with(|h| h.replace(false)) {
            if let Some(hook) = TURN_END.get() {
                hook();
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// An actor's task, each poll of it a turn.
    pub(crate) struct Turns<F> {
        #[pin]
        inner: F,
    }
}

impl<F> Turns<F> {
    pub(crate) fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F: Future> Future for Turns<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // A nested poll (an actor polled from within another's turn, as a
        // test's block_on might) ends nothing: the outer turn does.
        let outer = IN_TURN.with(|t| t.replace(true));
        if !outer {
            TURNS.with(|n| n.set(n.get().wrapping_add(1)));
        }
        let _guard = TurnGuard { outer };
        self.project().inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static ENDS: Cell<usize> = const { Cell::new(0) };
    }

    fn count_end() {
        ENDS.with(|e| e.set(e.get() + 1));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_turn_is_one_poll_and_its_end_runs_the_hook_once() {
        set_turn_end(count_end);
        assert!(!in_turn());
        let before = ENDS.with(Cell::get);
        let task = Turns::new(async {
            assert!(in_turn());
            held();
            tokio::task::yield_now().await;
            // The first poll's turn ended at the yield.
            assert!(in_turn());
            // Nothing held in this turn: no hook.
        });
        task.await;
        assert!(!in_turn());
        assert_eq!(ENDS.with(Cell::get), before + 1);
    }

    #[test]
    fn flush_runs_the_hook_once_for_what_was_held() {
        set_turn_end(count_end);
        let before = ENDS.with(Cell::get);
        flush();
        assert_eq!(ENDS.with(Cell::get), before, "nothing held: no hook");
        held();
        flush();
        flush();
        assert_eq!(ENDS.with(Cell::get), before + 1);
    }

    #[test]
    fn a_panicking_turn_still_ends() {
        let result = std::panic::catch_unwind(|| {
            let waker = futures_util::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            let mut task = std::pin::pin!(Turns::new(async { panic!("in the turn") }));
            let _ = task.as_mut().poll(&mut cx);
        });
        assert!(result.is_err());
        assert!(!in_turn());
    }
}
