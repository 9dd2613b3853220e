//! Restart policies: when a failed actor is started again, how long to wait,
//! and when to give up.
//!
//! A restarted actor keeps its [`ActorRef`](crate::ActorRef) and its mailbox
//! (queued messages stay queued) and starts from fresh state made by the
//! factory given at spawn. Monitors see no `Down` for a restart, only for the
//! final stop.
//!
//! An actor is only restarted after it ended by itself (returned from
//! [`Context::stop`](crate::Context::stop), failed, panicked, or followed a
//! linked actor). A stop or kill from outside and a system shutdown end it for
//! good.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::ExitReason;

/// Which exits lead to a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    /// Never restart.
    #[default]
    Never,
    /// Restart after abnormal exits ([`ExitReason::is_abnormal`]).
    OnFailure,
    /// Restart after any exit of the actor's own.
    Always,
}

/// Delay before a restart: `initial`, doubled per restart within the
/// intensity window, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// Restart at once.
    pub const fn none() -> Self {
        Self::fixed(Duration::ZERO)
    }

    /// Always wait `delay`.
    pub const fn fixed(delay: Duration) -> Self {
        Self {
            initial: delay,
            max: delay,
        }
    }

    /// Wait `initial`, then twice as long after each further restart, up to
    /// `max`.
    pub const fn exponential(initial: Duration, max: Duration) -> Self {
        Self { initial, max }
    }

    /// The delay before restart number `attempt` (0-based) of a burst.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// How an actor is supervised: policy, backoff, and restart intensity limit.
///
/// Defaults: [`RestartPolicy::Never`]; for the restarting policies, a backoff
/// of 10 ms doubling up to 1 s, and at most 3 restarts within 5 s. Past the
/// limit the actor stops with [`ExitReason::RestartLimit`].
///
/// ```
/// use plexus_core::{Backoff, Supervision};
/// use std::time::Duration;
///
/// let s = Supervision::on_failure()
///     .backoff(Backoff::fixed(Duration::from_millis(50)))
///     .limit(5, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supervision {
    pub(crate) policy: RestartPolicy,
    pub(crate) backoff: Backoff,
    pub(crate) max_restarts: u32,
    pub(crate) within: Duration,
}

impl Default for Supervision {
    fn default() -> Self {
        Self::never()
    }
}

impl Supervision {
    const DEFAULT_BACKOFF: Backoff =
        Backoff::exponential(Duration::from_millis(10), Duration::from_secs(1));

    fn with(policy: RestartPolicy) -> Self {
        Self {
            policy,
            backoff: Self::DEFAULT_BACKOFF,
            max_restarts: 3,
            within: Duration::from_secs(5),
        }
    }

    /// No restarts.
    pub fn never() -> Self {
        Self::with(RestartPolicy::Never)
    }

    /// Restart after failures.
    pub fn on_failure() -> Self {
        Self::with(RestartPolicy::OnFailure)
    }

    /// Restart after every exit of the actor's own, failure or not.
    pub fn always() -> Self {
        Self::with(RestartPolicy::Always)
    }

    /// Sets the backoff between restarts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Allows at most `max_restarts` restarts within any window of `within`.
    pub fn limit(mut self, max_restarts: u32, within: Duration) -> Self {
        self.max_restarts = max_restarts;
        self.within = within;
        self
    }

    pub(crate) fn restarts_after(&self, reason: &ExitReason) -> bool {
        match self.policy {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => reason.is_abnormal(),
            RestartPolicy::Always => true,
        }
    }
}

/// The restarts of the current intensity window.
#[derive(Debug, Default)]
pub(crate) struct RestartWindow {
    recent: VecDeque<Instant>,
}

impl RestartWindow {
    /// Admits a restart at `now` and returns the backoff to wait, or `None`
    /// past the intensity limit.
    pub(crate) fn admit(&mut self, now: Instant, sup: &Supervision) -> Option<Duration> {
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= sup.within)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= sup.max_restarts as usize {
            return None;
        }
        let attempt = self.recent.len() as u32;
        self.recent.push_back(now);
        Some(sup.backoff.delay(attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_max() {
        let b = Backoff::exponential(Duration::from_millis(10), Duration::from_millis(50));
        assert_eq!(b.delay(0), Duration::from_millis(10));
        assert_eq!(b.delay(1), Duration::from_millis(20));
        assert_eq!(b.delay(2), Duration::from_millis(40));
        assert_eq!(b.delay(3), Duration::from_millis(50));
        assert_eq!(b.delay(40), Duration::from_millis(50));
    }

    #[test]
    fn window_refuses_past_limit_and_forgets_old_restarts() {
        let sup = Supervision::on_failure()
            .backoff(Backoff::none())
            .limit(2, Duration::from_secs(1));
        let mut w = RestartWindow::default();
        let t0 = Instant::now();
        assert!(w.admit(t0, &sup).is_some());
        assert!(w.admit(t0 + Duration::from_millis(10), &sup).is_some());
        assert!(w.admit(t0 + Duration::from_millis(20), &sup).is_none());
        assert!(w.admit(t0 + Duration::from_millis(1_015), &sup).is_some());
    }

    #[test]
    fn policies_choose_which_exits_restart() {
        let failed = ExitReason::Failed("x".into());
        assert!(!Supervision::never().restarts_after(&failed));
        assert!(Supervision::on_failure().restarts_after(&failed));
        assert!(!Supervision::on_failure().restarts_after(&ExitReason::Normal));
        assert!(Supervision::always().restarts_after(&ExitReason::Normal));
    }
}
