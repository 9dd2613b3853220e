//! `faults`: fault injection for tests (the Aurum test kit's lossy link, as
//! an ordinary layer like smoltcp's `FaultInjector`).
//!
//! **Guarantee.** None, on purpose: frames passing in the configured
//! direction are dropped, duplicated, delayed by a uniform time in
//! `delay_min..=delay_max`, or reordered (held until the next frame passed),
//! each with its probability. Decisions come from a RNG seeded with `seed`
//! mixed with the link id, so a run replays exactly. Delayed frames are held
//! in the layer and released through the timer ([`Layer::poll_timeout`]);
//! at most `max_held` are held (beyond, frames pass undelayed).
//!
//! **Spec options.** `faults(drop=0.1, duplicate=0.01, delay=0.2,
//! delay_min=1ms, delay_max=50ms, reorder=0.05, seed=42, direction=send)`
//! with `direction=send|receive|both`; every probability defaults to 0,
//! `seed` to 0, delays to 0..10 ms.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::error::{ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{Interface, Layer, LinkContext, Output};
use crate::options::{LayerOptions, OptionError};
use crate::registry::LayerConfig;

/// Which frames the faults apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Frames going down (sent).
    Send,
    /// Frames going up (received).
    Receive,
    /// Both.
    Both,
}

/// Configuration of the `faults` layer.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultsConfig {
    /// Probability of dropping a frame. Option `drop`; default 0.
    pub drop: f64,
    /// Probability of sending a frame twice. Option `duplicate`; default 0.
    pub duplicate: f64,
    /// Probability of delaying a frame. Option `delay`; default 0.
    pub delay: f64,
    /// Shortest delay. Option `delay_min`; default 0.
    pub delay_min: Duration,
    /// Longest delay. Option `delay_max`; default 10 ms.
    pub delay_max: Duration,
    /// Probability of holding a frame until the next one passed. Option
    /// `reorder`; default 0.
    pub reorder: f64,
    /// RNG seed (mixed with the link id). Option `seed`; default 0.
    pub seed: u64,
    /// Option `direction`; default send.
    pub direction: Direction,
    /// Frames held at most. Option `max_held`; default 1024.
    pub max_held: usize,
}

impl Default for FaultsConfig {
    fn default() -> Self {
        Self {
            drop: 0.0,
            duplicate: 0.0,
            delay: 0.0,
            delay_min: Duration::ZERO,
            delay_max: Duration::from_millis(10),
            reorder: 0.0,
            seed: 0,
            direction: Direction::Send,
            max_held: 1024,
        }
    }
}

impl LayerConfig for FaultsConfig {
    const NAME: &'static str = "faults";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::default();
        for o in options.iter() {
            match o.key() {
                "drop" => c.drop = o.probability()?,
                "duplicate" => c.duplicate = o.probability()?,
                "delay" => c.delay = o.probability()?,
                "delay_min" => c.delay_min = o.duration()?,
                "delay_max" => c.delay_max = o.duration()?,
                "reorder" => c.reorder = o.probability()?,
                "seed" => c.seed = o.count()?,
                "direction" => {
                    c.direction = [Direction::Send, Direction::Receive, Direction::Both]
                        [o.word(&["send", "receive", "both"], "send, receive or both")?]
                }
                "max_held" => c.max_held = o.count_usize()?,
                _ => return Err(o.unknown()),
            }
        }
        c.delay_max = c.delay_max.max(c.delay_min);
        Ok(c)
    }

    fn build(&self, link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Faults::new(self.clone(), link.link_id))
    }

    fn guarantees(&self) -> crate::GuaranteeEffect {
        crate::GuaranteeEffect::removes(crate::Guarantees {
            reliable: self.drop > 0.0 || self.duplicate > 0.0,
            ordered: self.reorder > 0.0 || self.delay > 0.0,
        })
    }
}

#[derive(Debug)]
struct Held {
    release_at: Instant,
    up: bool,
    /// Released as soon as another frame passes in the same direction.
    until_next: bool,
    frame: Frame,
}

/// The `faults` layer. See the [module docs](self).
#[derive(Debug)]
pub struct Faults {
    config: FaultsConfig,
    rng: SmallRng,
    held: Vec<Held>,
}

impl Faults {
    /// A fault injector with `config` for link `link_id`.
    pub fn new(config: FaultsConfig, link_id: u64) -> Self {
        let seed = config.seed ^ link_id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Self {
            rng: SmallRng::seed_from_u64(seed),
            held: Vec::with_capacity(config.max_held.min(1024)),
            config,
        }
    }

    /// Frames currently held back.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn applies(&self, up: bool) -> bool {
        match self.config.direction {
            Direction::Send => !up,
            Direction::Receive => up,
            Direction::Both => true,
        }
    }

    fn emit(out: &mut Output, up: bool, frame: Frame) {
        if up {
            out.push_up(frame);
        } else {
            out.push_down(frame);
        }
    }

    fn pass(&mut self, now: Instant, up: bool, frame: Frame, out: &mut Output) {
        if !self.applies(up) {
            Self::emit(out, up, frame);
            return;
        }
        let c = &self.config;
        if self.rng.gen_bool(c.drop) {
            return;
        }
        let copies = if self.rng.gen_bool(c.duplicate) { 2 } else { 1 };
        for _ in 0..copies {
            let frame = frame.clone();
            let room = self.held.len() < self.config.max_held;
            if room && self.rng.gen_bool(self.config.delay) {
                let d = self
                    .rng
                    .gen_range(self.config.delay_min..=self.config.delay_max);
                self.held.push(Held {
                    release_at: now + d,
                    up,
                    until_next: false,
                    frame,
                });
            } else if room && self.rng.gen_bool(self.config.reorder) {
                let wait = self.config.delay_max.max(Duration::from_millis(10));
                self.held.push(Held {
                    release_at: now + wait,
                    up,
                    until_next: true,
                    frame,
                });
            } else {
                Self::emit(out, up, frame);
                self.release(out, |h| h.up == up && h.until_next);
            }
        }
    }

    fn release(&mut self, out: &mut Output, due: impl Fn(&Held) -> bool) {
        let mut i = 0;
        while i < self.held.len() {
            if due(&self.held[i]) {
                let h = self.held.remove(i);
                Self::emit(out, h.up, h.frame);
            } else {
                i += 1;
            }
        }
    }
}

impl Layer for Faults {
    fn name(&self) -> &'static str {
        FaultsConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn flushes(&self) -> bool {
        false
    }

    fn handle_send(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        self.pass(now, false, frame, out);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        self.pass(now, true, frame, out);
        Ok(())
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Output) {
        self.release(out, |h| h.release_at <= now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.release_at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: FaultsConfig, n: u8) -> Vec<u8> {
        let start = Instant::now();
        let mut layer = Faults::new(config, 7);
        let mut out = Output::new();
        let mut got = Vec::new();
        for i in 0..n {
            let f = Frame::from_payload(bytes::Bytes::copy_from_slice(&[i]));
            layer
                .handle_send(start + Duration::from_millis(i.into()), f, &mut out)
                .expect("never fails");
            while let Some(f) = out.pop_down() {
                got.push(f.first_chunk()[0]);
            }
        }
        let mut now = start;
        while let Some(t) = layer.poll_timeout() {
            now = now.max(t);
            layer.handle_timeout(now, &mut out);
            while let Some(f) = out.pop_down() {
                got.push(f.first_chunk()[0]);
            }
        }
        got
    }

    #[test]
    fn same_seed_replays_the_same_faults() {
        let config = FaultsConfig {
            drop: 0.2,
            duplicate: 0.2,
            delay: 0.3,
            reorder: 0.2,
            seed: 99,
            ..FaultsConfig::default()
        };
        let a = run(config.clone(), 100);
        assert_eq!(a, run(config.clone(), 100));
        assert_ne!(
            a,
            run(
                FaultsConfig {
                    seed: 100,
                    ..config
                },
                100
            )
        );
    }

    #[test]
    fn no_faults_passes_everything_in_order() {
        assert_eq!(
            run(FaultsConfig::default(), 50),
            (0..50).collect::<Vec<_>>()
        );
    }

    #[test]
    fn delayed_frames_are_released_at_their_deadline() {
        let start = Instant::now();
        let config = FaultsConfig {
            delay: 1.0,
            delay_min: Duration::from_millis(5),
            delay_max: Duration::from_millis(5),
            ..FaultsConfig::default()
        };
        let mut layer = Faults::new(config, 0);
        let mut out = Output::new();
        let f = Frame::from_payload(bytes::Bytes::from_static(b"x"));
        layer.handle_send(start, f, &mut out).expect("never fails");
        assert!(out.pop_down().is_none());
        assert_eq!(layer.poll_timeout(), Some(start + Duration::from_millis(5)));
        layer.handle_timeout(start + Duration::from_millis(4), &mut out);
        assert!(out.pop_down().is_none());
        layer.handle_timeout(start + Duration::from_millis(5), &mut out);
        assert!(out.pop_down().is_some());
    }

    #[test]
    fn drop_everything_drops_everything() {
        let config = FaultsConfig {
            drop: 1.0,
            ..FaultsConfig::default()
        };
        assert!(run(config, 20).is_empty());
    }
}
