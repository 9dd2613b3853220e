//! The adaptive selector of a lane: splitting one lane's messages between
//! two or more candidate stacks by a learned ratio, and putting them back
//! in order at the receiver.
//!
//! ```text
//!  sender                                            receiver
//!  messages ─► seq ─► AdaptiveSelector::pick ─┬─► candidate 0 (e.g. tcp) ──┐
//!                 ▲                            └─► candidate 1 (e.g. quic) ─┤
//!                 │ on_sample(now, i, Sample)                              ▼
//!                 └──── driver: every 100 ms per candidate      Resequencer ─► in order
//! ```
//!
//! Sans-IO: no sockets, no clock (every input carries its `Instant`), no
//! tasks, no randomness but a configured seed. A driver calls
//! [`AdaptiveSelector::on_sample`] for each candidate at a regular interval
//! with what it carried and its delay, and [`AdaptiveSelector::pick`] (or
//! [`pick_where`](AdaptiveSelector::pick_where)) for each message; the
//! receiver's driver numbers nothing and pushes what arrives into a
//! [`Resequencer`].
//!
//! # What it guarantees
//!
//! - Picks follow the ratio over every prefix within 1.5 messages per
//!   candidate ([`Interleaver`], the paper's pattern selection generalised),
//!   also across a change of ratio (within 3).
//! - Every candidate keeps at least `min_share` of the messages (default
//!   5 %), so a candidate that lost is still measured and can win back.
//! - The receiver delivers each sequence number once, in order, holding at
//!   most the configured items and bytes out of order; a peer that sends
//!   past the window or leaves a gap while filling the buffer gets a
//!   [`ResequenceError`], and its link is closed with it.
//!
//! # The algorithm
//!
//! An in-order lane whose sender waits for a full candidate carries
//! `min_i C_i / w_i` for capacities `C_i` and shares `w_i`: the best split
//! is proportional to capacity, and then the lane carries the sum of the
//! capacities. [`CapacityLearner`] estimates each capacity directly. A
//! sample taken while the candidate's queue never ran dry (*backlogged*)
//! measures its capacity; one taken while it ran dry says only that it
//! could carry more, and the estimate grows, by 2 % at first and doubling
//! at each consecutive such sample up to 50 %. Shares are the estimates'
//! proportions, none below `min_share`. A candidate that gets worse is
//! backlogged at once and measured at the next sample; one that gets better
//! runs dry and climbs within a second; near the optimum the split wobbles
//! by a few percent as candidates take turns being the bottleneck.
//!
//! The KompicsMessaging learner ([`TdLambda`], the baseline) instead
//! treats the ratio as the state of a Sarsa(λ) learner: one reward (the
//! lane's goodput) per one-second episode, one or two tenths of share moved
//! per episode, ε-greedy exploration that never falls below 10 %. It needs
//! an episode per step and several steps per tenth of share, so it takes
//! seconds to tens of seconds to converge and as long to follow a change,
//! its exploration costs goodput forever, and a ratio between two lattice
//! points is out of its reach. [`CapacityLearner`] reads each candidate's
//! own signal every sample instead of one scalar reward a second, moves
//! straight to the split it computes, and explores only by growing the
//! estimate of a candidate that shows room. The simulations in `tests.rs`
//! measure both on the same scenarios (the table is in the doc of
//! `capacity_learner_beats_td_lambda_on_every_scenario`; `--nocapture`
//! prints it): ours stays within 10 % of the best 1.0-1.9 s after the
//! start or a change of path, in every phase of five scenarios (two and
//! three candidates, capacities swapped, an RTT change of a
//! window-limited candidate, a starved candidate becoming the best); the
//! median of five TD(λ) seeds first gets there 3-10 s after the start
//! with two candidates (not within 10 s with three), in no phase after a
//! change within the 20 s given, and stays there in one phase of nine.
//!
//! # Limits
//!
//! - `min_share` is a floor, not a suggestion: while a candidate carries
//!   less than `min_share` of what the lane could, a driver that waits for
//!   a full candidate loses goodput to it (the lane carries at most
//!   `C_loser / min_share`; 95 % of the best in the starved simulation). A
//!   candidate that stops carrying altogether would stall such a driver, so
//!   a driver should not wait on a candidate whose queue is full beyond a
//!   bound and use [`pick_where`](AdaptiveSelector::pick_where) to skip it.
//! - The learner maximises goodput; it does not weigh delay. The receiver's
//!   [`Resequencer`] must hold what the faster candidates deliver during the
//!   delay spread (about lane rate times the difference in delay between the
//!   slowest and the fastest candidate), and the stats show each delay.
//! - The simulations are a fluid model of capacities and queues, not of
//!   transports: they show how the learners behave, not what a path gives.

mod learner;
mod pattern;
mod resequence;
mod td_lambda;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

pub use learner::{CapacityConfig, CapacityLearner, ConfigError, RatioLearner, Sample};
pub use pattern::{Interleaver, InvalidWeights};
pub use resequence::{Pushed, ResequenceError, Resequencer, ResequencerConfig};
pub use td_lambda::{TdLambda, TdLambdaConfig};

/// What the selector knows of one candidate, for `Node::lane_stats`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CandidateStats {
    /// Smoothed rate the candidate carried (time constant 0.5 s), bytes
    /// per second.
    pub goodput_bytes_per_s: f64,
    /// Its last delay estimate (send-queue delay plus RTT).
    pub delay: Duration,
    /// Its current target share of the messages.
    pub share: f64,
}

/// Time constant of the goodput shown in [`CandidateStats`].
const STATS_TAU: Duration = Duration::from_millis(500);

/// A lane's adaptive selector: a [`RatioLearner`] (by default
/// [`CapacityLearner`]) and the [`Interleaver`] that realises its ratio.
///
/// A driver calls, in any interleaving:
/// 1. [`on_sample`](Self::on_sample) for every candidate at every interval
///    (e.g. 100 ms);
/// 2. [`pick`](Self::pick) or [`pick_where`](Self::pick_where) for every
///    message, and sends it on the candidate returned;
/// 3. [`poll_ratio`](Self::poll_ratio) when it wants to hear of a new
///    ratio, and [`stats`](Self::stats) to show it.
#[derive(Debug, Clone)]
pub struct AdaptiveSelector<L = CapacityLearner> {
    learner: L,
    pattern: Interleaver,
    stats: Vec<CandidateStats>,
    last_sample: Vec<Option<Instant>>,
    created: Instant,
    ratio_changed: bool,
}

impl AdaptiveSelector<CapacityLearner> {
    /// A selector over `candidates` candidates created at `now`, starting
    /// from an even split.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] as for [`CapacityLearner::new`].
    pub fn new(
        now: Instant,
        candidates: usize,
        config: CapacityConfig,
    ) -> Result<Self, ConfigError> {
        Ok(Self::with_learner(
            now,
            CapacityLearner::new(now, candidates, config)?,
        ))
    }
}

impl<L: RatioLearner> AdaptiveSelector<L> {
    /// A selector around a learner of your choice (e.g. [`TdLambda`]).
    ///
    /// # Panics
    ///
    /// If the learner's ratio is not a valid set of weights (a learner
    /// bug).
    pub fn with_learner(now: Instant, learner: L) -> Self {
        // A RatioLearner's ratio is non-negative and sums to 1.
        let pattern = Interleaver::new(learner.ratio()).expect("learner ratio is valid weights");
        let stats = learner
            .ratio()
            .iter()
            .map(|&share| CandidateStats {
                goodput_bytes_per_s: 0.0,
                delay: Duration::ZERO,
                share,
            })
            .collect();
        Self {
            last_sample: vec![None; learner.candidates()],
            learner,
            pattern,
            stats,
            created: now,
            ratio_changed: false,
        }
    }

    /// Takes a sample of `candidate` measured at `now`.
    ///
    /// # Panics
    ///
    /// If `candidate` is not below the number of candidates.
    pub fn on_sample(&mut self, now: Instant, candidate: usize, sample: Sample) {
        self.learner.on_sample(now, candidate, &sample);
        let since = self.last_sample[candidate].unwrap_or(self.created);
        let dt = now.saturating_duration_since(since);
        if !dt.is_zero() {
            self.last_sample[candidate] = Some(now);
            let rate = sample.bytes_delivered as f64 / dt.as_secs_f64();
            let weight = 1.0 - (-dt.as_secs_f64() / STATS_TAU.as_secs_f64()).exp();
            let s = &mut self.stats[candidate];
            s.goodput_bytes_per_s += weight * (rate - s.goodput_bytes_per_s);
            s.delay = sample.delay;
        }
        if self.learner.ratio() != self.pattern.weights() {
            // A RatioLearner's ratio is non-negative and sums to 1.
            self.pattern
                .set_weights(self.learner.ratio())
                .expect("learner ratio is valid weights");
            for (s, &share) in self.stats.iter_mut().zip(self.learner.ratio()) {
                s.share = share;
            }
            self.ratio_changed = true;
        }
    }

    /// The new ratio, once per change since the last call.
    pub fn poll_ratio(&mut self) -> Option<&[f64]> {
        std::mem::take(&mut self.ratio_changed).then(|| self.learner.ratio())
    }

    /// The current target ratio (shares summing to 1).
    pub fn ratio(&self) -> &[f64] {
        self.learner.ratio()
    }

    /// The candidate for the next message.
    pub fn pick(&mut self) -> usize {
        self.pattern.pick()
    }

    /// The candidate for the next message among those `available`
    /// accepts (see [`Interleaver::pick_where`]); `None` if none is.
    pub fn pick_where(&mut self, available: impl FnMut(usize) -> bool) -> Option<usize> {
        self.pattern.pick_where(available)
    }

    /// Each candidate's goodput, delay and share.
    pub fn stats(&self) -> &[CandidateStats] {
        &self.stats
    }

    /// The learner.
    pub fn learner(&self) -> &L {
        &self.learner
    }
}
