//! `heartbeat`: keeps an idle link alive and estimates the peer's liveness
//! with the phi-accrual failure detector (Hayashibara et al., 2004).
//!
//! **Guarantee.** While the link is idle (nothing sent for `interval`), a
//! one-byte heartbeat is sent every `interval`. Every frame from the peer,
//! data or heartbeat, is a sign of life; the layer keeps the last `window`
//! inter-arrival times and reports upward:
//! * [`LinkEvent::Suspect`] once phi reaches `suspect_phi`,
//! * [`LinkEvent::Unreachable`] once phi reaches `unreachable_phi`,
//! * [`LinkEvent::Reachable`] when the peer is heard from after either.
//!
//! Each event is raised once per transition. The layer never closes the link;
//! the remote layer decides what suspicion means.
//!
//! **Phi** (Hayashibara et al. 2004, sec. 3): `phi(t) = -log10(P_later(t))`,
//! where `P_later` is the probability that the next sign of life comes more
//! than `t` after the last one, under a normal distribution fitted to the
//! window (mean raised by `acceptable_pause`, standard deviation at least
//! `min_std_dev`, as Akka does). `P_later` uses the logistic approximation of
//! the normal tail (as Akka and Cassandra); the deadline at which phi
//! crosses a threshold is its exact inverse (a depressed cubic, Cardano), so
//! timers fire when phi crosses a threshold, not on a polling tick.
//!
//! **Wire format.** `kind: u8 (0 = data, 1 = heartbeat) | payload`.
//!
//! **Spec options.** `heartbeat(interval=1s, suspect_phi=8, unreachable_phi=16,
//! window=100, min_std_dev=200ms, acceptable_pause=1s)`.

use std::time::{Duration, Instant};

use crate::error::{ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{earliest, Interface, Layer, LinkContext, LinkEvent, Output};
use crate::options::{LayerOptions, OptionError};
use crate::registry::LayerConfig;

const DATA: u8 = 0;
const HEARTBEAT: u8 = 1;

/// Configuration of the `heartbeat` layer.
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatConfig {
    /// Idle time before a heartbeat is sent. Option `interval`; default 1 s.
    pub interval: Duration,
    /// Phi at which the peer is suspected. Option `suspect_phi`; default 8.
    pub suspect_phi: f64,
    /// Phi at which the peer is unreachable. Option `unreachable_phi`;
    /// default 16.
    pub unreachable_phi: f64,
    /// Inter-arrival samples kept. Option `window`; default 100 (8 bytes
    /// each).
    pub window: usize,
    /// Lower bound of the standard deviation. Option `min_std_dev`; default
    /// 200 ms.
    pub min_std_dev: Duration,
    /// Added to the mean: a pause this long is not suspicious. Option
    /// `acceptable_pause`; default 1 s.
    pub acceptable_pause: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            suspect_phi: 8.0,
            unreachable_phi: 16.0,
            window: 100,
            min_std_dev: Duration::from_millis(200),
            acceptable_pause: Duration::from_secs(1),
        }
    }
}

impl LayerConfig for HeartbeatConfig {
    const NAME: &'static str = "heartbeat";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::default();
        for o in options.iter() {
            match o.key() {
                "interval" => c.interval = o.duration()?.max(Duration::from_millis(1)),
                "suspect_phi" => c.suspect_phi = o.ratio()?.max(0.5),
                "unreachable_phi" => c.unreachable_phi = o.ratio()?.max(0.5),
                "window" => c.window = o.count_usize()?.clamp(1, 10_000),
                "min_std_dev" => c.min_std_dev = o.duration()?.max(Duration::from_millis(1)),
                "acceptable_pause" => c.acceptable_pause = o.duration()?,
                _ => return Err(o.unknown()),
            }
        }
        c.unreachable_phi = c.unreachable_phi.max(c.suspect_phi);
        Ok(c)
    }

    fn build(&self, link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Heartbeat::new(self.clone(), link.now))
    }
}

/// Input rejected by the heartbeat layer. Not fatal; the frame is dropped
/// (it still counts as a sign of life).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeartbeatError {
    /// An empty frame.
    #[error("empty frame")]
    Truncated,
    /// Neither data nor heartbeat.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
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
/// inverse of the approximation: solves `0.070566 y^3 + 1.5976 y = L` by
/// Cardano's formula.
pub fn delay_for_phi(threshold: f64, mu: f64, sigma: f64) -> f64 {
    mu + standard_delay_for_phi(threshold) * sigma
}

/// The standardised delay `y = (t - mu) / sigma` at which phi reaches
/// `threshold`: depends on the threshold alone, so the layer computes it
/// once per threshold, not on every refresh.
fn standard_delay_for_phi(threshold: f64) -> f64 {
    let p = 10f64.powf(-threshold);
    let l = -(p / (1.0 - p)).ln();
    let (a, b) = (0.070566, 1.5976);
    let (pp, q) = (b / a, -l / a);
    let d = (q / 2.0).powi(2) + (pp / 3.0).powi(3);
    (-q / 2.0 + d.sqrt()).cbrt() + (-q / 2.0 - d.sqrt()).cbrt()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Alive,
    Suspect,
    Unreachable,
}

/// The `heartbeat` layer. See the [module docs](self).
#[derive(Debug)]
pub struct Heartbeat {
    config: HeartbeatConfig,
    last_sent: Instant,
    last_arrival: Instant,
    samples: Vec<f64>,
    next_sample: usize,
    sum: f64,
    sum_sq: f64,
    /// Cached delays (after the last arrival) at which phi crosses the
    /// thresholds, refreshed every few arrivals and on every timeout.
    suspect_after: Duration,
    unreachable_after: Duration,
    /// [`standard_delay_for_phi`] of the two thresholds.
    suspect_y: f64,
    unreachable_y: f64,
    stale: u32,
    status: Status,
}

impl Heartbeat {
    /// A heartbeat layer with `config` on a link created at `now`.
    pub fn new(config: HeartbeatConfig, now: Instant) -> Self {
        let mut h = Self {
            samples: Vec::with_capacity(config.window),
            suspect_y: standard_delay_for_phi(config.suspect_phi),
            unreachable_y: standard_delay_for_phi(config.unreachable_phi),
            config,
            last_sent: now,
            last_arrival: now,
            next_sample: 0,
            sum: 0.0,
            sum_sq: 0.0,
            suspect_after: Duration::ZERO,
            unreachable_after: Duration::ZERO,
            stale: 0,
            status: Status::Alive,
        };
        h.refresh();
        h
    }

    /// Mean and standard deviation (seconds) of the fitted distribution.
    fn distribution(&self) -> (f64, f64) {
        let interval = self.config.interval.as_secs_f64();
        let (mean, std) = if self.samples.is_empty() {
            // Bootstrap as Akka does: one heartbeat interval, a quarter of it.
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

    fn refresh(&mut self) {
        let (mu, sigma) = self.distribution();
        // delay_for_phi(phi, mu, sigma), with its threshold-only part cached.
        let secs = |y: f64| Duration::from_secs_f64((mu + y * sigma).clamp(0.0, 1e9));
        self.suspect_after = secs(self.suspect_y);
        self.unreachable_after = secs(self.unreachable_y);
        self.stale = 0;
    }

    fn on_arrival(&mut self, now: Instant, out: &mut Output) {
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
        self.stale += 1;
        if self.stale >= 8 || self.samples.len() <= 8 {
            self.refresh();
        }
        if self.status != Status::Alive {
            self.status = Status::Alive;
            out.push_event(LinkEvent::Reachable);
        }
    }

    fn check_deadline(&self) -> Option<Instant> {
        match self.status {
            Status::Alive => Some(self.last_arrival + self.suspect_after),
            Status::Suspect => Some(self.last_arrival + self.unreachable_after),
            Status::Unreachable => None,
        }
    }
}

impl Layer for Heartbeat {
    fn name(&self) -> &'static str {
        HeartbeatConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn flushes(&self) -> bool {
        false
    }

    fn max_frame_len(&self, below: Option<usize>) -> Option<usize> {
        below.map(|b| b.saturating_sub(1))
    }

    fn handle_send(
        &mut self,
        now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        frame.push_header(&[DATA]);
        self.last_sent = now;
        out.push_down(frame);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        self.on_arrival(now, out);
        let mut scratch = [0; 1];
        match frame.prefix(&mut scratch).first().copied() {
            Some(DATA) => {
                frame.advance(1);
                out.push_up(frame);
                Ok(())
            }
            Some(HEARTBEAT) => Ok(()),
            Some(kind) => Err(HeartbeatError::UnknownKind(kind).into()),
            None => Err(HeartbeatError::Truncated.into()),
        }
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Output) {
        if now >= self.last_sent + self.config.interval {
            let mut beat = Frame::new();
            beat.push_header(&[HEARTBEAT]);
            out.push_down(beat);
            self.last_sent = now;
        }
        // The deadlines are the exact inverse of phi, so crossing one is
        // crossing the threshold (and immune to rounding).
        self.refresh();
        let phi = self.phi(now);
        if self.status == Status::Alive && now >= self.last_arrival + self.suspect_after {
            self.status = Status::Suspect;
            out.push_event(LinkEvent::Suspect { phi });
        }
        if self.status == Status::Suspect && now >= self.last_arrival + self.unreachable_after {
            self.status = Status::Unreachable;
            out.push_event(LinkEvent::Unreachable { phi });
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        earliest(
            Some(self.last_sent + self.config.interval),
            self.check_deadline(),
        )
    }
}

#[cfg(test)]
mod tests;
