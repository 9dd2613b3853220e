//! A token bucket per source, in a bounded table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

/// Between sweeps of idle buckets when the table is full.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Rate limits of many sources (registrations per device process).
#[derive(Debug)]
pub(crate) struct Limiter {
    burst: f64,
    rate: f64,
    max_sources: usize,
    buckets: FxHashMap<Arc<str>, (f64, Instant)>,
    last_sweep: Option<Instant>,
}

impl Limiter {
    pub(crate) fn new(burst: u32, rate: u32, max_sources: usize) -> Self {
        Self {
            burst: f64::from(burst.max(1)),
            rate: f64::from(rate),
            max_sources: max_sources.max(1),
            buckets: FxHashMap::default(),
            last_sweep: None,
        }
    }

    /// Takes a token of `source` at `now`; false if it has none, or if the
    /// table is full of sources that are not idle.
    pub(crate) fn allow(&mut self, source: &Arc<str>, now: Instant) -> bool {
        let (burst, rate) = (self.burst, self.rate);
        let refill = |tokens: f64, last: Instant| {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            (tokens + dt * rate).min(burst)
        };
        if let Some((tokens, last)) = self.buckets.get_mut(source) {
            *tokens = refill(*tokens, *last);
            *last = now;
            if *tokens >= 1.0 {
                *tokens -= 1.0;
                return true;
            }
            return false;
        }
        if self.buckets.len() >= self.max_sources {
            // Forget sources whose bucket refilled (idle ones): they lose
            // nothing by starting over. At most one sweep per interval, so
            // a flood of new sources costs no scan per packet.
            if self.last_sweep.is_none_or(|t| now >= t + SWEEP_EVERY) {
                self.last_sweep = Some(now);
                self.buckets.retain(|_, (t, l)| refill(*t, *l) < burst);
            }
            if self.buckets.len() >= self.max_sources {
                return false;
            }
        }
        self.buckets.insert(Arc::clone(source), (burst - 1.0, now));
        true
    }

    #[cfg(test)]
    pub(crate) fn sources(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_and_a_bounded_table() {
        let start = Instant::now();
        let mut l = Limiter::new(3, 10, 2);
        let a: Arc<str> = "a".into();
        assert!((0..3).all(|_| l.allow(&a, start)));
        assert!(!l.allow(&a, start));
        assert!(l.allow(&a, start + Duration::from_millis(100)));
        let b: Arc<str> = "b".into();
        assert!((0..3).all(|_| l.allow(&b, start)));
        // Full of busy sources: a third is refused, until they idle.
        let c: Arc<str> = "c".into();
        assert!(!l.allow(&c, start + Duration::from_millis(100)));
        assert!(l.allow(&c, start + Duration::from_secs(5)));
        assert!(l.sources() <= 2);
    }
}
