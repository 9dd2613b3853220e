//! How long a load generator's connection waits after a failure before it
//! tries again: sans-IO, so that the bound on retries is tested without a
//! server.
//!
//! A connection that fails (a refused or failed connect, a connection
//! closed without a response) waits [`Backoff::MIN`], and twice as long
//! after each further failure in a row, up to [`Backoff::MAX`]; a response
//! starts it over. Against a closed port a connection thus tries ten
//! times in its first second and once a second after that, instead
//! of as fast as the kernel refuses (hundreds of thousands of times a
//! second).

use std::time::Duration;

/// Bounded exponential backoff of one connection. See the
/// [module docs](self).
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    /// Failures in a row.
    failures: u32,
}

impl Backoff {
    /// The wait after a first failure.
    pub const MIN: Duration = Duration::from_millis(1);
    /// The longest wait.
    pub const MAX: Duration = Duration::from_secs(1);

    /// A connection that has not failed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a failure; returns how long to wait before trying again.
    pub fn on_failure(&mut self) -> Duration {
        let wait = Self::MIN
            .saturating_mul(1 << self.failures.min(20))
            .min(Self::MAX);
        self.failures = self.failures.saturating_add(1);
        wait
    }

    /// Records a success: the next failure waits [`MIN`](Self::MIN) again.
    pub fn on_success(&mut self) {
        self.failures = 0;
    }

    /// The most attempts a connection that always fails makes within
    /// `within`: the first at once, each later one after its wait. (Waits
    /// last at least as long as asked, so a run makes no more.)
    pub fn most_attempts(within: Duration) -> u64 {
        let mut backoff = Self::new();
        let mut waited = Duration::ZERO;
        let mut attempts = 1;
        loop {
            waited += backoff.on_failure();
            if waited > within {
                return attempts;
            }
            attempts += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_minimum_up_to_the_maximum_and_restart_on_success() {
        let mut b = Backoff::new();
        let waits: Vec<u64> = (0..13).map(|_| b.on_failure().as_millis() as u64).collect();
        assert_eq!(
            waits,
            [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000, 1000]
        );
        for _ in 0..100 {
            assert_eq!(b.on_failure(), Backoff::MAX);
        }
        b.on_success();
        assert_eq!(b.on_failure(), Backoff::MIN);
    }

    #[test]
    fn a_closed_port_costs_a_few_attempts_a_second() {
        // 1 + 2 + ... + 512 ms = 1023 ms: ten waits within the first
        // second (eleven attempts), then one a second.
        assert_eq!(Backoff::most_attempts(Duration::from_millis(1_000)), 10);
        assert_eq!(Backoff::most_attempts(Duration::from_millis(1_023)), 11);
        assert_eq!(Backoff::most_attempts(Duration::from_secs(10)), 19);
        assert_eq!(Backoff::most_attempts(Duration::ZERO), 1);
    }
}
