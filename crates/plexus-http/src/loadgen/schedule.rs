//! When a load generator's connection sends, and what latency it records:
//! sans-IO, so the correction for coordinated omission is tested on a
//! simulated server.
//!
//! **Closed loop**: a connection sends its next request as soon as the
//! previous response arrived; latency is from the send. A server that
//! stalls holds each connection's one request, so a stall of seconds costs
//! one sample per connection: the percentiles hide it.
//!
//! **Open loop** (wrk2's correction): requests are due at a fixed rate
//! whatever the server does, and latency runs from when a request was due,
//! not from when the connection got round to sending it. Every request
//! that should have gone out during a stall is charged its wait: a 1.4 s
//! stall at 1,000 requests/s shows as 1,400 slow samples.

use std::time::{Duration, Instant};

/// A connection's sending schedule. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Schedule {
    interval: Option<Duration>,
    next_due: Instant,
}

impl Schedule {
    /// Closed loop: each request as soon as the connection is free.
    pub fn closed(start: Instant) -> Self {
        Self {
            interval: None,
            next_due: start,
        }
    }

    /// Open loop: one request every `interval`, the first at `start`.
    pub fn open(start: Instant, interval: Duration) -> Self {
        Self {
            interval: Some(interval.max(Duration::from_nanos(1))),
            next_due: start,
        }
    }

    /// The instant the next request is due, given that the connection is
    /// free at `now` (send it then, or at once if that has passed), and the
    /// instant its latency counts from.
    pub fn next(&mut self, now: Instant) -> Instant {
        match self.interval {
            None => now,
            Some(interval) => {
                let due = self.next_due;
                self.next_due += interval;
                due
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that answers in 100 us, except that everything sent during
    /// [10 s, 11.4 s) is answered at 11.4 s; `connections` connections for
    /// 30 s. Returns the latencies in microseconds.
    fn simulate(open_rate_per_connection: Option<f64>, connections: usize) -> Vec<u64> {
        let start = Instant::now();
        let stall = (
            start + Duration::from_secs(10),
            start + Duration::from_millis(11_400),
        );
        let end = start + Duration::from_secs(30);
        let service = Duration::from_micros(100);
        let mut latencies = Vec::new();
        for c in 0..connections {
            let offset = Duration::from_micros(c as u64 * 37);
            let mut schedule = match open_rate_per_connection {
                None => Schedule::closed(start + offset),
                Some(rate) => Schedule::open(start + offset, Duration::from_secs_f64(1.0 / rate)),
            };
            let mut free = start + offset;
            loop {
                let due = schedule.next(free);
                if due >= end {
                    break;
                }
                let sent = due.max(free);
                let done = if sent >= stall.0 && sent < stall.1 {
                    stall.1
                } else {
                    sent + service
                };
                latencies.push((done - due).as_micros() as u64);
                free = done;
            }
        }
        latencies.sort_unstable();
        latencies
    }

    fn p99(sorted: &[u64]) -> u64 {
        sorted[(sorted.len() * 99).div_ceil(100) - 1]
    }

    #[test]
    fn an_open_loop_reports_a_stall_that_a_closed_loop_hides() {
        let closed = simulate(None, 4);
        let open = simulate(Some(1_000.0), 4);
        let (closed_p99, open_p99) = (p99(&closed), p99(&open));
        // The closed loop's p99 is the service time: four 1.4 s samples
        // among a million.
        assert_eq!(closed_p99, 100);
        let stalled = closed.iter().filter(|&&l| l > 1_000_000).count();
        assert_eq!(stalled, 4, "one stalled sample per connection");
        // The open loop charges every request due during the stall.
        assert!(
            open_p99 >= 100 * closed_p99,
            "open p99 {open_p99} us against closed {closed_p99} us"
        );
        assert!(open_p99 > 1_000_000, "open p99 {open_p99} us");
    }

    #[test]
    fn an_open_schedule_keeps_its_rate_when_the_connection_falls_behind() {
        let start = Instant::now();
        let mut s = Schedule::open(start, Duration::from_millis(10));
        // Busy until 35 ms: the requests due at 0, 10, 20, 30 ms go at once,
        // each counted from when it was due.
        let late = start + Duration::from_millis(35);
        let due: Vec<_> = (0..4).map(|_| s.next(late) - start).collect();
        assert_eq!(
            due,
            [0, 10, 20, 30].map(Duration::from_millis),
            "no request is skipped or re-timed"
        );
        let mut c = Schedule::closed(start);
        assert_eq!(c.next(late), late);
    }
}
