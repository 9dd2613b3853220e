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
//! **Phi** (Hayashibara et al. 2004, sec. 3; the detector is
//! [`crate::phi::PhiDetector`], shared with the cluster): `phi(t) = -log10(P_later(t))`,
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
use crate::phi::{PhiConfig, PhiDetector, PhiThreshold};
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
    detector: PhiDetector,
    last_sent: Instant,
    /// Cached delays (after the last arrival) at which phi crosses the
    /// thresholds, refreshed every few arrivals and on every timeout.
    suspect_after: Duration,
    unreachable_after: Duration,
    suspect: PhiThreshold,
    unreachable: PhiThreshold,
    stale: u32,
    status: Status,
}

impl Heartbeat {
    /// A heartbeat layer with `config` on a link created at `now`.
    pub fn new(config: HeartbeatConfig, now: Instant) -> Self {
        let detector = PhiDetector::new(
            PhiConfig {
                expected_interval: config.interval,
                window: config.window,
                min_std_dev: config.min_std_dev,
                acceptable_pause: config.acceptable_pause,
            },
            now,
        );
        let mut h = Self {
            detector,
            suspect: PhiThreshold::new(config.suspect_phi),
            unreachable: PhiThreshold::new(config.unreachable_phi),
            config,
            last_sent: now,
            suspect_after: Duration::ZERO,
            unreachable_after: Duration::ZERO,
            stale: 0,
            status: Status::Alive,
        };
        h.refresh();
        h
    }

    /// The current phi at `now`.
    pub fn phi(&self, now: Instant) -> f64 {
        self.detector.phi(now)
    }

    fn refresh(&mut self) {
        self.suspect_after = self.detector.delay(&self.suspect);
        self.unreachable_after = self.detector.delay(&self.unreachable);
        self.stale = 0;
    }

    fn on_arrival(&mut self, now: Instant, out: &mut Output) {
        self.detector.on_arrival(now);
        self.stale += 1;
        if self.stale >= 8 || self.detector.sample_count() <= 8 {
            self.refresh();
        }
        if self.status != Status::Alive {
            self.status = Status::Alive;
            out.push_event(LinkEvent::Reachable);
        }
    }

    fn check_deadline(&self) -> Option<Instant> {
        let last = self.detector.last_arrival();
        match self.status {
            Status::Alive => Some(last + self.suspect_after),
            Status::Suspect => Some(last + self.unreachable_after),
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
        let last = self.detector.last_arrival();
        if self.status == Status::Alive && now >= last + self.suspect_after {
            self.status = Status::Suspect;
            out.push_event(LinkEvent::Suspect { phi });
        }
        if self.status == Status::Suspect && now >= last + self.unreachable_after {
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
