//! Ratio learners: what a candidate carried in, a split ratio out.
//!
//! [`CapacityLearner`] is the default; [`TdLambda`](super::TdLambda) is the
//! KompicsMessaging learner it replaces. Both implement [`RatioLearner`],
//! so the [`AdaptiveSelector`](super::AdaptiveSelector) and the
//! simulations drive either the same way.

use std::time::{Duration, Instant};

use thiserror::Error;

/// One measurement of one candidate, taken by the driver at a regular
/// interval (e.g. every 100 ms) and covering the time since that
/// candidate's previous sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Bytes the candidate carried (accepted by its transport) since its
    /// previous sample.
    pub bytes_delivered: u64,
    /// Its current delay estimate: the queueing delay of its send queue
    /// plus its round-trip time.
    pub delay: Duration,
    /// Whether the candidate had bytes waiting in its send queue for the
    /// whole interval, so that it carried all it could and
    /// `bytes_delivered` measures its capacity. `false` when its queue ran
    /// dry at some point (it could have carried more: the sample is only a
    /// lower bound). This is BBR's "not application-limited".
    pub backlogged: bool,
}

/// Something that learns a split ratio from per-candidate samples.
///
/// A driver calls [`on_sample`](Self::on_sample) for every candidate at
/// every interval, in any order, and reads [`ratio`](Self::ratio) after.
pub trait RatioLearner {
    /// Number of candidates.
    fn candidates(&self) -> usize;

    /// Takes a sample of `candidate` measured at `now`.
    ///
    /// # Panics
    ///
    /// If `candidate >= self.candidates()`.
    fn on_sample(&mut self, now: Instant, candidate: usize, sample: &Sample);

    /// The current target shares, one per candidate, summing to 1.
    fn ratio(&self) -> &[f64];
}

/// A learner configuration that cannot work. Nothing was created.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Fewer than two candidates: there is nothing to choose.
    #[error("{candidates} candidates: an adaptive lane needs at least 2")]
    TooFewCandidates {
        /// Candidates given.
        candidates: usize,
    },
    /// More candidates than this learner supports.
    #[error("{candidates} candidates: this learner supports at most {max}")]
    TooManyCandidates {
        /// Candidates given.
        candidates: usize,
        /// The learner's limit.
        max: usize,
    },
    /// The minimum shares of all candidates add up to more than 1.
    #[error("min_share {min_share} for {candidates} candidates exceeds 1 in total")]
    MinShareTooLarge {
        /// The configured minimum share.
        min_share: f64,
        /// Candidates given.
        candidates: usize,
    },
    /// A parameter outside its range.
    #[error("{name} = {value} is out of range")]
    OutOfRange {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: f64,
    },
}

/// Settings of a [`CapacityLearner`].
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityConfig {
    /// Share no candidate goes below, so a candidate that lost keeps
    /// carrying traffic and is measured, and can win back. Default 0.05
    /// (5 %); at most `1 / candidates`.
    pub min_share: f64,
    /// Growth of a candidate's capacity estimate at the first sample that
    /// finds it not backlogged (it could carry more). Doubles at every
    /// consecutive such sample up to `max_probe_gain`. Default 0.02.
    pub probe_gain: f64,
    /// Largest growth per sample. Default 0.5 (so a candidate five times
    /// as good as believed is found within about eight samples).
    pub max_probe_gain: f64,
    /// Weight of a backlogged sample (a capacity measurement) in the
    /// estimate, in (0, 1]. Default 0.5.
    pub capacity_gain: f64,
    /// A candidate that is not backlogged is believed able to carry at
    /// most this many times what it carried, so an application-limited
    /// lane does not inflate estimates without bound. Default 2.0.
    pub headroom: f64,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        Self {
            min_share: 0.05,
            probe_gain: 0.02,
            max_probe_gain: 0.5,
            capacity_gain: 0.5,
            headroom: 2.0,
        }
    }
}

/// Per-candidate state of a [`CapacityLearner`].
#[derive(Debug, Clone)]
struct Arm {
    /// Time of the previous sample (or of creation).
    last: Instant,
    /// Capacity estimate in bytes per second, once there is one.
    capacity: Option<f64>,
    /// Consecutive samples that found it not backlogged.
    streak: u32,
}

/// Learns each candidate's capacity and splits in proportion to it.
///
/// # Algorithm
///
/// On an in-order lane the sender waits for a candidate that is full, so
/// the lane carries `min_i C_i / w_i` for capacities `C_i` and shares
/// `w_i`, at most `sum C_i` when `w_i = C_i / sum C`. The learner keeps a
/// capacity estimate `Ĉ_i` per candidate and sets `w_i ∝ Ĉ_i`:
///
/// - a **backlogged** sample (the candidate's queue never ran dry) is a
///   measurement of its capacity: `Ĉ_i` moves to the measured rate by
///   `capacity_gain`. A candidate that got worse is always backlogged
///   (it is given more than it carries), so a drop is seen at the next
///   sample;
/// - a sample that is **not backlogged** is only a lower bound: the
///   candidate could carry more. `Ĉ_i` grows by `probe_gain`, doubling at
///   each consecutive such sample up to `max_probe_gain` (slow near the
///   optimum, exponential when far from it), and never beyond `headroom`
///   times what it carried. A candidate that got better is not
///   backlogged any more, so its estimate climbs until it is.
///
/// Near the optimum every candidate is at its capacity: whichever is the
/// bottleneck measures itself, the others probe upward by 2 %, and the
/// split oscillates by a few percent around `C_i / sum C`. Shares below
/// `min_share` are raised to it (water-filling), so every candidate keeps
/// being measured.
#[derive(Debug, Clone)]
pub struct CapacityLearner {
    config: CapacityConfig,
    arms: Vec<Arm>,
    ratio: Vec<f64>,
}

impl CapacityLearner {
    /// A learner for `candidates` candidates created at `now`, starting
    /// from an even split.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if there are fewer than two candidates or a
    /// setting is out of range.
    pub fn new(
        now: Instant,
        candidates: usize,
        config: CapacityConfig,
    ) -> Result<Self, ConfigError> {
        if candidates < 2 {
            return Err(ConfigError::TooFewCandidates { candidates });
        }
        let c = &config;
        if !(0.0..=1.0).contains(&c.min_share) {
            return Err(ConfigError::OutOfRange {
                name: "min_share",
                value: c.min_share,
            });
        }
        if c.min_share * candidates as f64 > 1.0 {
            return Err(ConfigError::MinShareTooLarge {
                min_share: c.min_share,
                candidates,
            });
        }
        for (name, value, ok) in [
            ("probe_gain", c.probe_gain, c.probe_gain > 0.0),
            (
                "max_probe_gain",
                c.max_probe_gain,
                c.max_probe_gain >= c.probe_gain,
            ),
            (
                "capacity_gain",
                c.capacity_gain,
                c.capacity_gain > 0.0 && c.capacity_gain <= 1.0,
            ),
            ("headroom", c.headroom, c.headroom >= 1.0),
        ] {
            if !ok || !value.is_finite() {
                return Err(ConfigError::OutOfRange { name, value });
            }
        }
        Ok(Self {
            config,
            arms: vec![
                Arm {
                    last: now,
                    capacity: None,
                    streak: 0,
                };
                candidates
            ],
            ratio: vec![1.0 / candidates as f64; candidates],
        })
    }

    /// Each candidate's capacity estimate in bytes per second, `None`
    /// before its first sample with a non-zero interval.
    pub fn capacities(&self) -> impl Iterator<Item = Option<f64>> + '_ {
        self.arms.iter().map(|a| a.capacity)
    }

    /// Shares proportional to the estimates, raised to `min_share`.
    fn recompute(&mut self) {
        let known: Vec<f64> = self.arms.iter().filter_map(|a| a.capacity).collect();
        let mean = if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        let raw: Vec<f64> = self
            .arms
            .iter()
            .map(|a| a.capacity.unwrap_or(mean).max(0.0))
            .collect();
        water_fill(&raw, self.config.min_share, &mut self.ratio);
    }
}

impl RatioLearner for CapacityLearner {
    fn candidates(&self) -> usize {
        self.arms.len()
    }

    fn on_sample(&mut self, now: Instant, candidate: usize, sample: &Sample) {
        let c = &self.config;
        let arm = &mut self.arms[candidate];
        let dt = now.saturating_duration_since(arm.last).as_secs_f64();
        if dt <= 0.0 {
            // A second sample at the same instant carries no rate.
            return;
        }
        arm.last = now;
        let rate = sample.bytes_delivered as f64 / dt;
        if sample.backlogged {
            arm.streak = 0;
            arm.capacity = Some(match arm.capacity {
                None => rate,
                Some(old) => old + c.capacity_gain * (rate - old),
            });
        } else {
            arm.streak = arm.streak.saturating_add(1);
            let gain =
                (c.probe_gain * 2f64.powi(arm.streak.min(30) as i32 - 1)).min(c.max_probe_gain);
            let old = arm.capacity.unwrap_or(rate);
            let grown = old.max(rate) * (1.0 + gain);
            // Never below what it was (a lower bound cannot lower it),
            // never above `headroom` times what it carried.
            arm.capacity = Some(old.max(grown.min(c.headroom * rate)));
        }
        self.recompute();
    }

    fn ratio(&self) -> &[f64] {
        &self.ratio
    }
}

/// Shares `out` proportional to `raw`, with every share at least `floor`
/// (the excess taken from the others in proportion). An all-zero `raw`
/// gives an even split.
pub(crate) fn water_fill(raw: &[f64], floor: f64, out: &mut [f64]) {
    let n = raw.len();
    let mut floored = vec![false; n];
    loop {
        let free = 1.0 - floor * floored.iter().filter(|f| **f).count() as f64;
        let sum: f64 = (0..n).filter(|&i| !floored[i]).map(|i| raw[i]).sum();
        let open = floored.iter().filter(|f| !**f).count();
        let mut changed = false;
        for i in 0..n {
            out[i] = if floored[i] {
                floor
            } else if sum > 0.0 {
                free * raw[i] / sum
            } else {
                free / open as f64
            };
            if !floored[i] && out[i] < floor {
                floored[i] = true;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(bytes: u64, backlogged: bool) -> Sample {
        Sample {
            bytes_delivered: bytes,
            delay: Duration::from_millis(1),
            backlogged,
        }
    }

    #[test]
    fn water_fill_raises_small_shares_to_the_floor() {
        let mut out = [0.0; 3];
        water_fill(&[100.0, 1.0, 0.0], 0.05, &mut out);
        assert!((out[1] - 0.05).abs() < 1e-12 && (out[2] - 0.05).abs() < 1e-12);
        assert!((out.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        water_fill(&[0.0, 0.0, 0.0], 0.05, &mut out);
        assert!(out.iter().all(|s| (s - 1.0 / 3.0).abs() < 1e-12));
    }

    #[test]
    fn backlogged_samples_measure_and_split_by_capacity() {
        let t0 = Instant::now();
        let mut l = CapacityLearner::new(t0, 2, CapacityConfig::default()).unwrap();
        let t = t0 + Duration::from_millis(100);
        l.on_sample(t, 0, &sample(3_000_000, true));
        l.on_sample(t, 1, &sample(1_000_000, true));
        assert!((l.ratio()[0] - 0.75).abs() < 1e-9, "{:?}", l.ratio());
    }

    #[test]
    fn a_candidate_with_room_probes_upward_faster_and_faster() {
        let t0 = Instant::now();
        let mut l = CapacityLearner::new(t0, 2, CapacityConfig::default()).unwrap();
        let mut caps = Vec::new();
        for k in 1..=6u32 {
            let t = t0 + Duration::from_millis(100) * k;
            l.on_sample(t, 0, &sample(1_000_000, false));
            caps.push(l.capacities().next().flatten().unwrap());
        }
        // Growth 2 %, 4 %, 8 %, ... capped by headroom (2x what it carried).
        assert!((caps[0] / 10_000_000.0 - 1.02).abs() < 1e-9, "{caps:?}");
        assert!((caps[1] / caps[0] - 1.04).abs() < 1e-9, "{caps:?}");
        assert!(*caps.last().unwrap() <= 20_000_000.0 + 1e-6, "{caps:?}");
    }

    #[test]
    fn bad_configs_are_refused() {
        let t0 = Instant::now();
        let c = CapacityConfig::default();
        assert!(matches!(
            CapacityLearner::new(t0, 1, c.clone()),
            Err(ConfigError::TooFewCandidates { .. })
        ));
        let too_much = CapacityConfig {
            min_share: 0.3,
            ..c.clone()
        };
        assert!(matches!(
            CapacityLearner::new(t0, 4, too_much),
            Err(ConfigError::MinShareTooLarge { .. })
        ));
        let nan = CapacityConfig {
            capacity_gain: f64::NAN,
            ..c
        };
        assert!(matches!(
            CapacityLearner::new(t0, 2, nan),
            Err(ConfigError::OutOfRange { .. })
        ));
    }
}
