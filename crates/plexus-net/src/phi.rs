//! The phi-accrual failure detector (Hayashibara et al., 2004), shared by the
//! `heartbeat` layer and the cluster's member watch.
//!
//! `phi(t) = -log10(P_later(t))`, where `P_later` is the probability that
//! the next sign of life comes more than `t` after the last one, under a
//! normal distribution fitted to the last `window` inter-arrival times (mean
//! raised by `acceptable_pause`, standard deviation at least `min_std_dev`,
//! as Akka does). `P_later` uses the logistic approximation of the normal
//! tail (as Akka and Cassandra); the delay at which phi crosses a threshold
//! is its exact inverse (a depressed cubic, Cardano), so a driver sets a
//! timer for the crossing instead of polling phi.
//!
//! The detector is sans-IO: arrivals and `now` come in, phi and deadlines
//! come out.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use plexus_net::phi::{PhiConfig, PhiDetector, PhiThreshold};
//!
//! let start = Instant::now();
//! let mut detector = PhiDetector::new(PhiConfig::default(), start);
//! for s in 1..=10 {
//!     detector.on_arrival(start + Duration::from_secs(s));
//! }
//! let suspect = PhiThreshold::new(8.0);
//! let deadline = detector.deadline(&suspect);
//! assert!(deadline > start + Duration::from_secs(11));
//! assert!((detector.phi(deadline) - 8.0).abs() < 1e-6);
//! ```

use std::time::{Duration, Instant};

/// Parameters of a [`PhiDetector`].
#[derive(Debug, Clone, PartialEq)]
pub struct PhiConfig {
    /// The interval signs of life are expected at; the fitted distribution
    /// starts from it (mean = interval, deviation = a quarter of it) until
    /// the first arrival. Default 1 s.
    pub expected_interval: Duration,
    /// Inter-arrival samples kept (8 bytes each). Default 100.
    pub window: usize,
    /// Lower bound of the standard deviation. Default 200 ms.
    pub min_std_dev: Duration,
    /// Added to the mean: a pause this long is not suspicious. Default 1 s.
    pub acceptable_pause: Duration,
}

impl Default for PhiConfig {
    fn default() -> Self {
        Self {
            expected_interval: Duration::from_secs(1),
            window: 100,
            min_std_dev: Duration::from_millis(200),
            acceptable_pause: Duration::from_secs(1),
        }
    }
}

/// Phi of a delay `t` given mean `mu` and standard deviation `sigma`
/// (seconds), with the logistic approximation of the normal tail.
pub fn phi(t: f64, mu: f64, sigma: f64) -> f64 {
    let y = (t - mu) / sigma;
    let l = y * (1.5976 + 0.070566 * y * y);
    if y > 0.0 {
        // -log10(e / (1 + e)) with e = exp(-l), rearranged to avoid underflow.
        (l + (-l).exp().ln_1p()) / std::f64::consts::LN_10
    } else {
        // -log10(1 - 1 / (1 + e)) = -log10(e / (1 + e)) too, e = exp(-l) >= 1.
        let e = (-l).exp();
        -(e / (1.0 + e)).log10()
    }
}

/// The delay at which [`phi`] reaches `threshold` (> log10 2), the exact
/// inverse of the approximation.
pub fn delay_for_phi(threshold: f64, mu: f64, sigma: f64) -> f64 {
    mu + PhiThreshold::new(threshold).standard_delay * sigma
}

/// A phi threshold with its standardised delay computed once: the delay at
/// which phi reaches it depends on the threshold alone, up to the fitted
/// mean and deviation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhiThreshold {
    phi: f64,
    /// `y = (t - mu) / sigma` at which phi reaches the threshold.
    standard_delay: f64,
}

impl PhiThreshold {
    /// The threshold `phi` (clamped to at least 0.5).
    pub fn new(phi: f64) -> Self {
        let phi = phi.max(0.5);
        // Solves 0.070566 y^3 + 1.5976 y = L by Cardano's formula.
        let p = 10f64.powf(-phi);
        let l = -(p / (1.0 - p)).ln();
        let (a, b) = (0.070566, 1.5976);
        let (pp, q) = (b / a, -l / a);
        let d = (q / 2.0).powi(2) + (pp / 3.0).powi(3);
        let standard_delay = (-q / 2.0 + d.sqrt()).cbrt() + (-q / 2.0 - d.sqrt()).cbrt();
        Self {
            phi,
            standard_delay,
        }
    }

    /// The threshold's phi.
    pub fn phi(&self) -> f64 {
        self.phi
    }
}

/// Inter-arrival statistics of one peer's signs of life. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct PhiDetector {
    config: PhiConfig,
    last_arrival: Instant,
    samples: Vec<f64>,
    next_sample: usize,
    sum: f64,
    sum_sq: f64,
}

impl PhiDetector {
    /// A detector whose silence is counted from `now`.
    pub fn new(config: PhiConfig, now: Instant) -> Self {
        let window = config.window.max(1);
        Self {
            samples: Vec::with_capacity(window.min(1024)),
            config: PhiConfig { window, ..config },
            last_arrival: now,
            next_sample: 0,
            sum: 0.0,
            sum_sq: 0.0,
        }
    }

    /// Records a sign of life at `now`.
    pub fn on_arrival(&mut self, now: Instant) {
        let gap = now
            .saturating_duration_since(self.last_arrival)
            .as_secs_f64();
        self.last_arrival = now;
        if self.samples.len() < self.config.window {
            self.samples.push(gap);
        } else {
            let old = std::mem::replace(&mut self.samples[self.next_sample], gap);
            self.sum -= old;
            self.sum_sq -= old * old;
            self.next_sample = (self.next_sample + 1) % self.config.window;
        }
        self.sum += gap;
        self.sum_sq += gap * gap;
    }

    /// Restarts the silence at `now` without recording a sample (a peer
    /// that was not expected to speak before, such as a member just
    /// learned of).
    pub fn reset_silence(&mut self, now: Instant) {
        self.last_arrival = now;
    }

    /// When the last sign of life arrived.
    pub fn last_arrival(&self) -> Instant {
        self.last_arrival
    }

    /// Samples recorded so far (at most `window`).
    pub fn sample_count(&self) -> usize {
        self.samples.len()
    }

    /// Mean and standard deviation (seconds) of the fitted distribution.
    pub fn distribution(&self) -> (f64, f64) {
        let interval = self.config.expected_interval.as_secs_f64();
        let (mean, std) = if self.samples.is_empty() {
            // Bootstrap as Akka does: one interval, a quarter of it.
            (interval, interval / 4.0)
        } else {
            let n = self.samples.len() as f64;
            let mean = self.sum / n;
            (mean, (self.sum_sq / n - mean * mean).max(0.0).sqrt())
        };
        let pause = self.config.acceptable_pause.as_secs_f64();
        (mean + pause, std.max(self.config.min_std_dev.as_secs_f64()))
    }

    /// The current phi at `now`.
    pub fn phi(&self, now: Instant) -> f64 {
        let (mu, sigma) = self.distribution();
        phi(
            now.saturating_duration_since(self.last_arrival)
                .as_secs_f64(),
            mu,
            sigma,
        )
    }

    /// The silence after the last arrival at which phi reaches `threshold`.
    pub fn delay(&self, threshold: &PhiThreshold) -> Duration {
        let (mu, sigma) = self.distribution();
        Duration::from_secs_f64((mu + threshold.standard_delay * sigma).clamp(0.0, 1e9))
    }

    /// The instant at which phi reaches `threshold` if no sign of life comes
    /// first.
    pub fn deadline(&self, threshold: &PhiThreshold) -> Instant {
        self.last_arrival + self.delay(threshold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phi_grows_with_silence_and_its_inverse_is_exact() {
        let (mu, sigma) = (1.0, 0.2);
        assert!(phi(0.5, mu, sigma) < phi(1.0, mu, sigma));
        assert!(phi(1.0, mu, sigma) < phi(2.0, mu, sigma));
        assert!(phi(10.0, mu, sigma).is_finite());
        for threshold in [1.0, 3.0, 8.0, 16.0] {
            let t = delay_for_phi(threshold, mu, sigma);
            assert!((phi(t, mu, sigma) - threshold).abs() < 1e-6, "{threshold}");
        }
    }

    #[test]
    fn deadline_follows_the_fitted_distribution() {
        let start = Instant::now();
        let config = PhiConfig {
            acceptable_pause: Duration::ZERO,
            ..PhiConfig::default()
        };
        let mut steady = PhiDetector::new(config.clone(), start);
        let mut jittery = PhiDetector::new(config, start);
        for s in 1..=20u64 {
            steady.on_arrival(start + Duration::from_secs(s));
            let jitter = if s % 2 == 0 { 700 } else { 1300 };
            jittery.on_arrival(start + Duration::from_millis(1000 * (s - 1) + jitter));
        }
        let t = PhiThreshold::new(8.0);
        // A steadier peer is suspected sooner after its last arrival.
        assert!(steady.delay(&t) < jittery.delay(&t));
        assert!((steady.phi(steady.deadline(&t)) - 8.0).abs() < 1e-6);
    }

    #[test]
    fn window_forgets_old_samples() {
        let start = Instant::now();
        let config = PhiConfig {
            window: 4,
            acceptable_pause: Duration::ZERO,
            min_std_dev: Duration::from_millis(1),
            ..PhiConfig::default()
        };
        let mut d = PhiDetector::new(config, start);
        let mut t = start;
        for _ in 0..4 {
            t += Duration::from_secs(5);
            d.on_arrival(t);
        }
        for _ in 0..4 {
            t += Duration::from_secs(1);
            d.on_arrival(t);
        }
        let (mu, _) = d.distribution();
        assert!((mu - 1.0).abs() < 1e-9, "{mu}");
        assert_eq!(d.sample_count(), 4);
    }
}
