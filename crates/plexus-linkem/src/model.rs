//! [`LinkModel`]: the sans-IO packet scheduler of one direction of the link.
//!
//! ```text
//!  handle_packet(now, p)
//!        │
//!        ▼
//!   loss? ──yes──▶ dropped (Lost)
//!        │ no
//!        ▼            (once more for a duplicate copy)
//!   rate queue full? ──yes──▶ dropped (QueueFull, tail drop)
//!        │ no
//!        ▼
//!   serialized at the rate cap: done = max(now, line free) + len·8/rate
//!        │
//!        ▼
//!   leave = max(done + delay ± jitter, previous leave)   (FIFO)
//!   reorder? leave += reorder gap, not raising the FIFO floor
//!        │
//!        ▼
//!   in flight ── poll_transmit(now) once leave <= now
//! ```

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::DirectionConfig;

/// What became of a packet given to [`LinkModel::handle_packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Dropped by the loss probability.
    Lost,
    /// Dropped because the rate queue was full (tail drop).
    QueueFull,
    /// Will leave at `at`.
    Scheduled {
        /// When [`LinkModel::poll_transmit`] hands it out.
        at: Instant,
        /// When its duplicate leaves, if it was duplicated and the copy fit
        /// in the queue.
        duplicate_at: Option<Instant>,
        /// Whether it was held back by the reorder gap.
        reordered: bool,
    },
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets given to `handle_packet`.
    pub received: u64,
    /// Dropped by the loss probability.
    pub lost: u64,
    /// Dropped at the full rate queue (copies included).
    pub queue_dropped: u64,
    /// Copies made by duplication.
    pub duplicated: u64,
    /// Held back by the reorder gap.
    pub reordered: u64,
    /// Handed out by `poll_transmit` (copies included).
    pub delivered: u64,
    /// Bytes handed out by `poll_transmit`.
    pub delivered_bytes: u64,
}

struct InFlight<P> {
    at: Instant,
    seq: u64,
    packet: P,
}

impl<P> PartialEq for InFlight<P> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<P> Eq for InFlight<P> {}
impl<P> PartialOrd for InFlight<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for InFlight<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// One direction of an emulated link, as a sans-IO state machine.
///
/// A driver calls, in a loop:
/// 1. [`handle_packet`](Self::handle_packet) for each packet that arrives,
///    with the time it arrived;
/// 2. [`poll_transmit`](Self::poll_transmit) until it returns `None`, and
///    sends what it returns;
/// 3. [`poll_timeout`](Self::poll_timeout), and sleeps until then or until
///    the next packet arrives.
///
/// It never reads the clock: time is an input, and all randomness comes
/// from an RNG seeded at construction, so the same seed and the same inputs
/// give the same schedule. Random draws per packet are made in a fixed order
/// (loss, jitter, reorder, duplicate; then jitter, reorder for the copy).
pub struct LinkModel<P = Vec<u8>> {
    config: DirectionConfig,
    rng: StdRng,
    /// When each packet in the rate queue finishes serializing, oldest first.
    rate_queue: VecDeque<Instant>,
    /// Leave time of the last packet that was not reordered.
    fifo_floor: Option<Instant>,
    in_flight: BinaryHeap<Reverse<InFlight<P>>>,
    next_seq: u64,
    stats: LinkStats,
}

impl<P: AsRef<[u8]> + Clone> LinkModel<P> {
    /// A model of one direction with these settings and this seed.
    pub fn new(config: DirectionConfig, seed: u64) -> Self {
        LinkModel {
            config,
            rng: StdRng::seed_from_u64(seed),
            rate_queue: VecDeque::new(),
            fifo_floor: None,
            in_flight: BinaryHeap::new(),
            next_seq: 0,
            stats: LinkStats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DirectionConfig {
        &self.config
    }

    /// Changes the settings from now on: packets that arrive later get the
    /// new ones; packets already in flight keep the time they were given.
    /// The RNG goes on where it was (a run with the same seed and the same
    /// changes at the same points replays). The rate queue is kept, so a
    /// new rate cap starts behind the packets still serializing.
    pub fn set_config(&mut self, config: DirectionConfig) {
        self.config = config;
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Packets scheduled and not yet handed out.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Takes a packet that arrived at `now` and decides its fate.
    ///
    /// `now` must not go backwards between calls (a driver passes its
    /// clock); an earlier `now` is treated as the latest time seen.
    pub fn handle_packet(&mut self, now: Instant, packet: P) -> Verdict {
        self.stats.received += 1;
        let lost = self.rng.gen::<f64>() < self.config.loss();
        let first = self.draw_copy();
        let dup = self.rng.gen::<f64>() < self.config.duplicate();
        if lost {
            self.stats.lost += 1;
            return Verdict::Lost;
        }
        let len = packet.as_ref().len();
        let Some(at) = self.schedule(now, len, first, packet.clone()) else {
            return Verdict::QueueFull;
        };
        let mut duplicate_at = None;
        if dup {
            let copy = self.draw_copy();
            self.stats.duplicated += 1;
            duplicate_at = self.schedule(now, len, copy, packet);
        }
        Verdict::Scheduled {
            at,
            duplicate_at,
            reordered: first.reordered,
        }
    }

    /// The next packet whose time has come, if any.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<P> {
        if self.in_flight.peek()?.0.at > now {
            return None;
        }
        let Reverse(p) = self.in_flight.pop()?;
        self.stats.delivered += 1;
        self.stats.delivered_bytes += p.packet.as_ref().len() as u64;
        Some(p.packet)
    }

    /// When the next packet leaves, if any is in flight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.in_flight.peek().map(|p| p.0.at)
    }

    fn draw_copy(&mut self) -> Draw {
        let j = self.config.jitter().as_nanos() as i64;
        let jitter_ns = if j > 0 { self.rng.gen_range(-j..=j) } else { 0 };
        let reordered = self.rng.gen::<f64>() < self.config.reorder();
        Draw {
            jitter_ns,
            reordered,
        }
    }

    /// Puts one copy through the rate queue and the delay line; `None` if
    /// the queue was full.
    fn schedule(&mut self, now: Instant, len: usize, draw: Draw, packet: P) -> Option<Instant> {
        let done = match self.config.rate_bps() {
            None => now,
            Some(bps) => {
                while self.rate_queue.front().is_some_and(|&t| t <= now) {
                    self.rate_queue.pop_front();
                }
                if self.rate_queue.len() >= self.config.queue_packets() {
                    self.stats.queue_dropped += 1;
                    return None;
                }
                let start = self.rate_queue.back().map_or(now, |&t| t.max(now));
                let ns = (len as u128 * 8 * 1_000_000_000).div_ceil(bps as u128);
                let done = start + Duration::from_nanos(ns as u64);
                self.rate_queue.push_back(done);
                done
            }
        };
        let delay = self.config.delay().as_nanos() as i64 + draw.jitter_ns;
        let mut at = done + Duration::from_nanos(delay.max(0) as u64);
        if let Some(floor) = self.fifo_floor {
            at = at.max(floor);
        }
        if draw.reordered {
            self.stats.reordered += 1;
            at += self.config.reorder_gap();
        } else {
            self.fifo_floor = Some(at);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight.push(Reverse(InFlight { at, seq, packet }));
        Some(at)
    }
}

#[derive(Debug, Clone, Copy)]
struct Draw {
    jitter_ns: i64,
    reordered: bool,
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
