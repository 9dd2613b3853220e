//! The driver's side of a discovery: run it, then again `every` after each
//! answer, one run at a time, each bounded by [`TIMEOUT`]; [`Rerun::feed`]
//! is the task that does so while the member joins and hands each answer
//! to the driver.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Discovered, Discovery, DiscoveryError};

/// Longest a discovery may take before the driver gives up on it (and
/// asks again after `join_retry`).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

/// A discovery rerun on a timer by [`crate::Cluster`]'s driver.
pub(crate) struct Rerun {
    discovery: Arc<dyn Discovery>,
    every: Duration,
    next: Instant,
    running: Option<Discovered<'static>>,
}

impl Rerun {
    /// Runs `discovery` at once, then `every` after each answer.
    pub(crate) fn new(discovery: Box<dyn Discovery>, every: Duration) -> Self {
        Self {
            discovery: Arc::from(discovery),
            every,
            next: Instant::now(),
            running: None,
        }
    }

    /// The next answer: waits until a run is due, runs it and returns its
    /// result. With `wanted` false and no run under way, never returns (the
    /// member is not joining; no discovery is started).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a run under way is kept and resumed by the next call.
    pub(crate) async fn next(&mut self, wanted: bool) -> Result<Vec<String>, DiscoveryError> {
        if self.running.is_none() {
            if !wanted {
                return std::future::pending().await;
            }
            tokio::time::sleep_until(self.next).await;
            let discovery = Arc::clone(&self.discovery);
            self.running = Some(Box::pin(async move {
                match tokio::time::timeout(TIMEOUT, discovery.discover()).await {
                    Ok(found) => found,
                    Err(_) => Err(DiscoveryError::TimedOut {
                        name: discovery.describe(),
                        after: TIMEOUT,
                    }),
                }
            }));
        }
        let found = match self.running.as_mut() {
            Some(run) => run.await,
            // Set just above when it was empty.
            None => return std::future::pending().await,
        };
        self.running = None;
        self.next = Instant::now() + self.every;
        found
    }

    /// Runs discoveries while `wanted` holds (a member joining), handing
    /// each answer to `found`; returns when `found` refuses one (the driver
    /// is gone) or `wanted`'s sender is dropped.
    pub(crate) async fn feed(
        mut self,
        mut wanted: watch::Receiver<bool>,
        found: impl Fn(Result<Vec<String>, DiscoveryError>) -> bool,
    ) {
        loop {
            let now_wanted = *wanted.borrow_and_update();
            tokio::select! {
                answer = self.next(now_wanted) => {
                    if !found(answer) {
                        return;
                    }
                }
                changed = wanted.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }
}
