//! Retransmission timeout estimation, RFC 6298.

use std::time::Duration;

/// SRTT / RTTVAR estimator with exponential backoff (RFC 6298).
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The smallest sample so far (RFC 8985 sec. 6.2's `RACK.min_RTT`,
    /// kept over the link's life).
    min_sample: Option<Duration>,
    initial: Duration,
    min: Duration,
    max: Duration,
    /// Doublings applied since the last sample (RFC 6298 sec. 5.5).
    backoff: u32,
}

/// Clock granularity G of RFC 6298 sec. 2.
const GRANULARITY: Duration = Duration::from_millis(1);

impl RttEstimator {
    /// An estimator before any sample: RTO is `initial` (RFC 6298 sec. 2.1
    /// says 1 s; actor links on LANs configure less).
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Self {
        Self {
            srtt: None,
            rttvar: Duration::ZERO,
            min_sample: None,
            initial,
            min,
            max,
            backoff: 0,
        }
    }

    /// Smoothed round-trip time, once sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The smallest round trip sampled so far.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_sample
    }

    /// Consecutive expiries since the last sample.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// Takes a sample `r` from a segment that was never retransmitted (Karn's
    /// rule, RFC 6298 sec. 3) and clears the backoff (sec. 5.7).
    pub fn on_sample(&mut self, r: Duration) {
        self.min_sample = Some(self.min_sample.map_or(r, |m| m.min(r)));
        match self.srtt {
            // RFC 6298 sec. 2.2: first measurement.
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            // RFC 6298 sec. 2.3: alpha = 1/8, beta = 1/4.
            Some(srtt) => {
                let delta = srtt.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + delta / 4;
                self.srtt = Some(srtt * 7 / 8 + r / 8);
            }
        }
        self.backoff = 0;
    }

    /// Doubles the timeout after an expiry (RFC 6298 sec. 5.5).
    pub fn on_timeout(&mut self) {
        self.backoff = (self.backoff + 1).min(16);
    }

    /// The current retransmission timeout: `SRTT + max(G, 4 RTTVAR)`
    /// (sec. 2.2/2.3), clamped to `[min, max]` (sec. 2.4/2.5), doubled per
    /// backoff.
    pub fn rto(&self) -> Duration {
        let base = match self.srtt {
            None => self.initial,
            Some(srtt) => srtt + (self.rttvar * 4).max(GRANULARITY),
        };
        let base = base.clamp(self.min, self.max);
        base.saturating_mul(1 << self.backoff).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn first_sample_sets_rto_to_three_rtt() {
        let mut e = RttEstimator::new(ms(1000), ms(1), ms(60_000));
        assert_eq!(e.rto(), ms(1000));
        e.on_sample(ms(100));
        assert_eq!(e.rto(), ms(300));
    }

    #[test]
    fn later_samples_smooth_per_rfc_6298() {
        let mut e = RttEstimator::new(ms(1000), ms(1), ms(60_000));
        e.on_sample(ms(100));
        e.on_sample(ms(200));
        // rttvar = 3/4*50 + 1/4*100 = 62.5; srtt = 7/8*100 + 1/8*200 = 112.5
        assert_eq!(e.srtt(), Some(Duration::from_micros(112_500)));
        assert_eq!(e.rto(), Duration::from_micros(112_500 + 250_000));
    }

    #[test]
    fn timeouts_double_until_a_new_sample() {
        let mut e = RttEstimator::new(ms(100), ms(10), ms(1000));
        e.on_timeout();
        assert_eq!(e.rto(), ms(200));
        e.on_timeout();
        e.on_timeout();
        e.on_timeout();
        assert_eq!(e.rto(), ms(1000), "capped at max");
        e.on_sample(ms(10));
        assert_eq!(e.rto(), ms(30));
    }
}
