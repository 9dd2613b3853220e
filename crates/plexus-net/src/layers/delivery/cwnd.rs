//! Congestion window: NewReno-style AIMD in bytes (RFC 5681, RFC 6582).
//!
//! The window bounds the bytes in flight (messages plus a fixed charge per
//! message for the headers it takes on the wire), on top of the
//! `send_window` bound in messages. It starts at `initial` bytes, doubles
//! per round trip in slow start (RFC 5681 sec. 3.1, counting acked bytes as
//! RFC 3465 does), then grows by one segment per window acked (congestion
//! avoidance). A loss detected by fast retransmit halves it once per
//! window of data (the recovery episode ends when everything sent before
//! the loss is acked, RFC 6582 sec. 3.2); a retransmission timeout sets it
//! to one segment (RFC 5681 sec. 3.1, "loss window"). It never falls below
//! [`MIN_WINDOW`], and one message may always be in flight whatever its
//! size, so a window smaller than a message never stalls the link.
//!
//! This is the `cc=newreno` controller, the default: it reads every loss
//! as congestion, which is right on a path whose only losses are queue
//! overflows and costly on one that drops at random (the window settles
//! near `sqrt(1.5 / p)` segments, RFC 3649's response function).

use std::time::Instant;

use super::cc::{AckEvent, CongestionControl, LossEvent, LossKind};

/// The segment size the window grows by: a datagram of the default slicing
/// MTU. Delivery does not know the MTU below; the window is in bytes, so
/// this only sets the speed of growth.
pub const SEGMENT: usize = 1200;

/// Bytes charged per message on top of its payload: the headers and
/// bundling framing a small message takes on the wire, so a window of tiny
/// messages still bounds the datagrams in flight.
pub const MESSAGE_CHARGE: usize = 32;

/// The smallest window after a loss (two segments, RFC 5681 sec. 3.1).
pub const MIN_WINDOW: usize = 2 * SEGMENT;

/// A congestion window in bytes. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct CongestionWindow {
    cwnd: usize,
    ssthresh: usize,
    max: usize,
    /// In a recovery episode: the first sequence number sent after the
    /// loss was detected; the episode ends when the cumulative ack reaches it.
    recover: Option<u64>,
    /// The loss event in `recover` began with a retransmission timeout: the
    /// window grows in slow start meanwhile.
    after_timeout: bool,
}

impl CongestionWindow {
    /// A window of `initial` bytes that never grows beyond `max`.
    pub fn new(initial: usize, max: usize) -> Self {
        let max = max.max(MIN_WINDOW);
        Self {
            cwnd: initial.clamp(MIN_WINDOW, max),
            ssthresh: max,
            max,
            recover: None,
            after_timeout: false,
        }
    }

    /// The window in bytes.
    pub fn window(&self) -> usize {
        self.cwnd
    }

    /// The slow-start threshold in bytes.
    pub fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    /// Whether a loss is being recovered from (the window does not grow).
    pub fn in_recovery(&self) -> bool {
        self.recover.is_some()
    }

    /// The cumulative ack moved to `cum`, acknowledging `acked` bytes, while
    /// `flight` bytes were in flight (before the ack). The window grows only
    /// while it is used: an application that sends less than the window
    /// does not inflate it (RFC 7661's concern).
    pub fn on_ack(&mut self, acked: usize, cum: u64, flight: usize) {
        if let Some(recover) = self.recover {
            if cum >= recover {
                self.recover = None;
                self.after_timeout = false;
            } else if !self.after_timeout {
                // Fast recovery (RFC 6582): the window holds until the
                // loss event is over.
                return;
            }
            // After a timeout the window restarts in slow start and grows
            // with every ack (RFC 5681 sec. 3.1); `recover` only keeps a
            // second halving out of the same loss event.
        }
        if flight.saturating_mul(2) < self.cwnd {
            return;
        }
        let grow = if self.cwnd < self.ssthresh {
            acked
        } else {
            (SEGMENT * acked / self.cwnd).max(1)
        };
        self.cwnd = self.cwnd.saturating_add(grow).min(self.max);
    }

    /// Fast retransmit found a loss with `flight` bytes in flight and
    /// `next_seq` the next sequence number to be sent: halve the window,
    /// once per recovery episode (RFC 5681 sec. 3.2 step 2, RFC 6582).
    pub fn on_loss(&mut self, flight: usize, next_seq: u64) {
        if self.recover.is_some() {
            return;
        }
        self.ssthresh = (flight / 2).max(MIN_WINDOW);
        self.cwnd = self.ssthresh;
        self.recover = Some(next_seq);
    }

    /// The retransmission timer fired with `flight` bytes in flight and
    /// `next_seq` the next sequence number: restart from one segment in
    /// slow start (RFC 5681 sec. 3.1, eq. 4). Everything sent so far
    /// belongs to this loss event (RFC 6582 sec. 3.2 step 4).
    pub fn on_timeout(&mut self, flight: usize, next_seq: u64) {
        if self.recover.is_none() {
            self.ssthresh = (flight / 2).max(MIN_WINDOW);
        }
        self.cwnd = MIN_WINDOW.min(self.ssthresh);
        self.recover = Some(next_seq);
        self.after_timeout = true;
    }
}

impl CongestionControl for CongestionWindow {
    fn name(&self) -> &'static str {
        "newreno"
    }

    fn on_sent(&mut self, _now: Instant, _seq: u64, _bytes: usize, _pipe: usize) {}

    fn on_ack(&mut self, _now: Instant, ack: &AckEvent) {
        // Only a cumulative ack grows the window: NewReno counts acked
        // bytes (RFC 3465), and SACKed ones are counted when the hole
        // below them is filled.
        if ack.advanced {
            CongestionWindow::on_ack(self, ack.cum_acked, ack.cumulative, ack.flight_before);
        }
    }

    fn on_loss(&mut self, _now: Instant, loss: &LossEvent) {
        match loss.kind {
            LossKind::FastRetransmit => CongestionWindow::on_loss(self, loss.flight, loss.next_seq),
            LossKind::Timeout => self.on_timeout(loss.flight, loss.next_seq),
        }
    }

    fn window(&self) -> usize {
        self.cwnd
    }

    fn in_recovery(&self) -> bool {
        self.recover.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_then_avoidance_adds_a_segment_per_window() {
        let mut w = CongestionWindow::new(10 * SEGMENT, 1 << 20);
        w.on_ack(10 * SEGMENT, 10, 10 * SEGMENT);
        assert_eq!(w.window(), 20 * SEGMENT);
        w.on_loss(20 * SEGMENT, 30);
        assert_eq!((w.window(), w.ssthresh()), (10 * SEGMENT, 10 * SEGMENT));
        // Acks inside the episode do not grow it.
        w.on_ack(SEGMENT, 20, 20 * SEGMENT);
        assert_eq!(w.window(), 10 * SEGMENT);
        // The episode ends at `recover`; then one segment per window.
        for _ in 0..10 {
            w.on_ack(SEGMENT, 30, 10 * SEGMENT);
        }
        // (Each ack adds SEGMENT^2 / cwnd, which shrinks as the window grows.)
        assert!(w.window() > 10 * SEGMENT + 1100 && w.window() <= 11 * SEGMENT);
    }

    #[test]
    fn one_halving_per_recovery_episode() {
        let mut w = CongestionWindow::new(64 * SEGMENT, 1 << 20);
        w.on_loss(64 * SEGMENT, 100);
        w.on_loss(64 * SEGMENT, 120);
        assert_eq!(w.window(), 32 * SEGMENT);
        w.on_ack(SEGMENT, 100, 32 * SEGMENT);
        w.on_loss(32 * SEGMENT, 150);
        assert_eq!(w.window(), 16 * SEGMENT);
    }

    #[test]
    fn timeout_collapses_to_the_minimum_and_slow_starts() {
        let mut w = CongestionWindow::new(64 * SEGMENT, 1 << 20);
        w.on_timeout(64 * SEGMENT, 10);
        assert_eq!((w.window(), w.ssthresh()), (MIN_WINDOW, 32 * SEGMENT));
        w.on_ack(MIN_WINDOW, 10, MIN_WINDOW);
        assert_eq!(w.window(), 2 * MIN_WINDOW);
    }

    #[test]
    fn an_idle_sender_does_not_inflate_the_window() {
        let mut w = CongestionWindow::new(10 * SEGMENT, 1 << 20);
        for seq in 1..1000 {
            w.on_ack(100, seq, 100);
        }
        assert_eq!(w.window(), 10 * SEGMENT);
    }

    #[test]
    fn window_stays_within_its_bounds() {
        let mut w = CongestionWindow::new(0, 4 * SEGMENT);
        assert_eq!(w.window(), MIN_WINDOW);
        w.on_ack(1 << 30, 1, 1 << 30);
        assert_eq!(w.window(), 4 * SEGMENT);
        w.on_loss(0, 2);
        assert_eq!(w.window(), MIN_WINDOW);
    }
}
