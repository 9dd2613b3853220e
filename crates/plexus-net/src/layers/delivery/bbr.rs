//! `cc=bbr`: a loss-tolerant controller after BBR (Cardwell et al., "BBR:
//! Congestion-Based Congestion Control", ACM Queue 14(5), 2016;
//! draft-cardwell-iccrg-bbr-congestion-control-02, "BBRv1").
//!
//! **What it is for.** Paths that drop at random (radio, a lossy tunnel, a
//! fault injector): a loss-based window such as NewReno's halves on every
//! loss and settles near `sqrt(1.5 / p)` segments whatever the path could
//! carry. This controller does not read loss as congestion. It keeps a
//! model of the path, and the window and pacing rate follow the model:
//!
//! * **Bottleneck bandwidth** `btlbw`: the windowed maximum, over the last
//!   [`BW_WINDOW_ROUNDS`] round trips, of the delivery rate measured per
//!   round trip (bytes acked or SACKed during the round / its duration;
//!   draft sec. 4.1.1). Rounds in which the sender had nothing to send
//!   (app-limited) only count when they raise the estimate.
//! * **Minimum round-trip time** `min_rtt`: the windowed minimum of RTT
//!   samples over [`MIN_RTT_WINDOW`] (draft sec. 4.1.2). When it has not
//!   been refreshed for that long the controller enters ProbeRTT: at most
//!   [`MIN_WINDOW`] bytes in flight for [`PROBE_RTT_TIME`] and one round, so
//!   the queue it built drains and a fresh minimum is seen.
//! * **Window** `cwnd = cwnd_gain * btlbw * min_rtt + extra_acked`, where
//!   `extra_acked` is the windowed maximum of the bytes acked beyond what
//!   `btlbw` predicts (ack aggregation: acks of a batch arrive together;
//!   Linux `tcp_bbr.c`, `bbr_update_ack_aggregation`).
//! * **Pacing** at `pacing_gain * btlbw` (in Startup at least
//!   `pacing_gain * initial window / min_rtt`, draft sec. 4.2.1, so that
//!   app-limited first rounds, a handshake's, do not throttle the first
//!   bulk data), a token bucket of about
//!   [`BURST_TIME`] of data (at least [`MIN_BURST`] bytes), honoured by the
//!   layer through its timer; only on paths whose `min_rtt` is at least
//!   [`PACING_MIN_RTT`], since a timer ticking in milliseconds cannot pace
//!   a shorter round trip (there the window alone bounds the flight).
//! * **States** (draft sec. 4.3): Startup (gains 2/ln 2, doubling the
//!   rate per round until three rounds bring less than 25 % more
//!   bandwidth), Drain (pacing gain ln 2 / 2 until the queue Startup built
//!   is gone), ProbeBW (pacing gains 5/4, 3/4, then 1 for six phases, each
//!   one `min_rtt` long; cwnd gain 2), ProbeRTT.
//!
//! **Guarantees.** In ProbeBW the bytes in the network are at most
//! `2 * BDP + extra_acked`, so the queue the flow keeps at its bottleneck
//! is about one BDP plus the ack aggregation, and the round-trip time about
//! twice `min_rtt`; when the bottleneck's rate falls, delivery-rate samples
//! fall with it, the old maximum leaves the window after
//! [`BW_WINDOW_ROUNDS`] rounds and the window and pacing rate follow (the
//! backoff under real congestion that the tests check with a simulated
//! bottleneck). Random loss does not shrink the model: it only takes the
//! lost message out of the delivery rate. A retransmission timeout (no ack
//! for an RTO, as in a blackout) drops the window to [`MIN_WINDOW`] until
//! the next ack that delivers data, which restores it; in Startup it
//! restarts the plateau count rather than ending Startup (Linux
//! `bbr_set_state` on `TCP_CA_Loss`).
//!
//! **Limits.** Like BBRv1, it does not respond to loss: against a
//! shallow-buffered bottleneck it keeps sending at `btlbw` however many
//! packets the queue drops, and sharing a bottleneck with loss-based flows
//! it can take more than its share. The rate is sampled once per round
//! trip, not per message, so the model moves in whole round trips. Pacing
//! is as precise as the driver's timer: the bucket of [`BURST_TIME`] covers
//! a timer that fires a millisecond late.
//! ProbeBW starts at a fixed phase, not a random one: two flows started
//! together probe together.

use std::time::{Duration, Instant};

use super::cc::{AckEvent, CongestionControl, LossEvent, LossKind, Pacing};
use super::cwnd::SEGMENT;

/// Round trips over which the bottleneck bandwidth is the maximum (draft
/// sec. 4.1.1.4: 10).
pub const BW_WINDOW_ROUNDS: usize = 10;

/// How long a minimum RTT stays valid (draft sec. 4.1.2.1: 10 s).
pub const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);

/// How long ProbeRTT holds the window down (draft sec. 4.3.4: 200 ms).
pub const PROBE_RTT_TIME: Duration = Duration::from_millis(200);

/// The smallest window: four segments (draft sec. 4.2.3.1).
pub const MIN_WINDOW: usize = 4 * SEGMENT;

/// Depth of the pacing bucket in time at the pacing rate: a driver's timer
/// may fire this late without the rate falling below the pacing rate.
pub const BURST_TIME: Duration = Duration::from_millis(2);

/// Paths with a shorter minimum RTT are not paced (see
/// [`CongestionControl::pacing`] on [`Bbr`]): a driver's timer ticks in
/// milliseconds.
pub const PACING_MIN_RTT: Duration = Duration::from_millis(2);

/// Smallest depth of the pacing bucket in bytes.
pub const MIN_BURST: usize = 10 * SEGMENT;

/// Startup's gains: 2 / ln 2, the smallest that doubles the delivery rate
/// per round trip (draft sec. 4.3.1.1).
const HIGH_GAIN: f64 = 2.885;

/// ProbeBW's cycle of pacing gains, one phase per `min_rtt` (draft sec.
/// 4.3.3).
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];

/// The phase ProbeBW starts at: a cruising phase, so a flow that just
/// drained does not probe at once.
const FIRST_PHASE: usize = 2;

/// Cwnd gain in ProbeBW (draft sec. 4.2.3.2).
const PROBE_BW_CWND_GAIN: f64 = 2.0;

/// Growth of `btlbw` per round below which Startup counts a round as
/// "plateau" (draft sec. 4.3.1.2), and the rounds of plateau that end it.
const FULL_BW_GROWTH: f64 = 1.25;
const FULL_BW_ROUNDS: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// The `cc=bbr` controller. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Bbr {
    mode: Mode,
    max: usize,
    initial: usize,
    cwnd: usize,
    pacing_gain: f64,
    cwnd_gain: f64,
    // Model.
    /// Largest delivery rate sample (bytes/s) per round slot (round %
    /// BW_WINDOW_ROUNDS): the max over the ring is `btlbw`.
    bw_samples: [u64; BW_WINDOW_ROUNDS],
    btlbw: u64,
    /// Largest ack-aggregation excess per round slot; its max is
    /// `extra_acked`.
    extra_samples: [usize; BW_WINDOW_ROUNDS],
    extra_acked: usize,
    min_rtt: Option<Duration>,
    min_rtt_stamp: Instant,
    // Rounds (draft sec. 4.1.1.3), counted in sequence numbers: a round
    // ends when a message sent after it began is delivered.
    round: u64,
    next_seq: u64,
    round_end_seq: u64,
    round_start: Instant,
    round_start_delivered: u64,
    round_start_sent: u64,
    round_app_limited: bool,
    delivered: u64,
    /// Bytes sent so far, retransmissions included.
    sent: u64,
    /// The send rate of the round before the current one.
    prev_send_rate: u64,
    // Startup's plateau detection.
    full_bw: u64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    // ProbeBW.
    phase: usize,
    phase_start: Instant,
    // ProbeRTT: when it may end, once the window drained; the round it
    // drained in.
    probe_rtt_done: Option<(Instant, u64)>,
    // Ack aggregation epoch.
    epoch_start: Instant,
    epoch_acked: u64,
    /// The window before a retransmission timeout or ProbeRTT, restored
    /// after it.
    prior_cwnd: usize,
    after_timeout: bool,
    pacing_rate: u64,
}

impl Bbr {
    /// A controller created at `now`, starting with a window of `initial`
    /// bytes that never exceeds `max`.
    pub fn new(now: Instant, initial: usize, max: usize) -> Self {
        let max = max.max(MIN_WINDOW);
        let initial = initial.clamp(MIN_WINDOW, max);
        Self {
            mode: Mode::Startup,
            max,
            initial,
            cwnd: initial,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            bw_samples: [0; BW_WINDOW_ROUNDS],
            btlbw: 0,
            extra_samples: [0; BW_WINDOW_ROUNDS],
            extra_acked: 0,
            min_rtt: None,
            min_rtt_stamp: now,
            round: 0,
            next_seq: 0,
            round_end_seq: 0,
            round_start: now,
            round_start_delivered: 0,
            round_start_sent: 0,
            round_app_limited: false,
            delivered: 0,
            sent: 0,
            prev_send_rate: u64::MAX,
            full_bw: 0,
            full_bw_rounds: 0,
            filled_pipe: false,
            phase: FIRST_PHASE,
            phase_start: now,
            probe_rtt_done: None,
            epoch_start: now,
            epoch_acked: 0,
            prior_cwnd: initial,
            after_timeout: false,
            pacing_rate: 0,
        }
    }

    /// The bottleneck bandwidth estimate in bytes per second (0 before the
    /// first round trip).
    pub fn btlbw(&self) -> u64 {
        self.btlbw
    }

    /// The minimum round-trip time seen in the window, once sampled.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Round trips counted so far.
    pub fn rounds(&self) -> u64 {
        self.round
    }

    /// Whether Startup found the bottleneck (three rounds without 25 %
    /// more bandwidth).
    pub fn filled_pipe(&self) -> bool {
        self.filled_pipe
    }

    /// The bandwidth-delay product at `gain`, once both are measured.
    fn bdp(&self, gain: f64) -> Option<usize> {
        let rtt = self.min_rtt?;
        if self.btlbw == 0 {
            return None;
        }
        let bytes = self.btlbw as f64 * rtt.as_secs_f64() * gain;
        Some(bytes.min(usize::MAX as f64) as usize)
    }

    /// Ends the round if `ack` delivered a message sent after it began;
    /// takes the round's delivery rate as a bandwidth sample.
    fn update_round(&mut self, now: Instant, ack: &AckEvent) {
        self.round_app_limited |= ack.app_limited;
        let Some(largest) = ack.largest_delivered else {
            return;
        };
        if largest < self.round_end_seq {
            return;
        }
        let elapsed = now.saturating_duration_since(self.round_start);
        let rate = |bytes: u64| {
            if elapsed.is_zero() {
                0
            } else {
                (bytes as f64 / elapsed.as_secs_f64()) as u64
            }
        };
        let ack_rate = rate(self.delivered - self.round_start_delivered);
        let send_rate = rate(self.sent - self.round_start_sent);
        // The ack rate, bounded by the rate at which that data was sent:
        // mostly in the round before (as the draft's delivery rate sample
        // takes the longer of the send and ack intervals). When a filled
        // hole acks at once data sent long before, the acks outrun what
        // the path carried; the send rate of the round before does not.
        let sample = ack_rate.min(self.prev_send_rate);
        self.prev_send_rate = send_rate;
        let app_limited = self.round_app_limited;
        self.round += 1;
        self.round_end_seq = self.next_seq;
        self.round_start = now;
        self.round_start_delivered = self.delivered;
        self.round_start_sent = self.sent;
        self.round_app_limited = ack.app_limited;
        let slot = (self.round % BW_WINDOW_ROUNDS as u64) as usize;
        self.bw_samples[slot] = 0;
        self.extra_samples[slot] = 0;
        // Draft sec. 4.1.1.5: an app-limited sample only counts when it
        // raises the estimate, since the sender, not the path, set it.
        if sample > 0 && (!app_limited || sample > self.btlbw) {
            self.bw_samples[slot] = sample;
        }
        self.btlbw = self.bw_samples.iter().copied().max().unwrap_or(0);
        if !self.filled_pipe && !app_limited && self.btlbw > 0 {
            // Draft sec. 4.3.1.2: the pipe is full once three rounds in a
            // row brought less than 25 % more bandwidth.
            if self.btlbw as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
                self.full_bw = self.btlbw;
                self.full_bw_rounds = 0;
            } else {
                self.full_bw_rounds += 1;
                if self.full_bw_rounds >= FULL_BW_ROUNDS {
                    self.filled_pipe = true;
                }
            }
        }
    }

    /// Bytes acked beyond what `btlbw` predicts since the epoch began
    /// (Linux `bbr_update_ack_aggregation`).
    fn update_ack_aggregation(&mut self, now: Instant, delivered: usize) {
        if self.btlbw == 0 || delivered == 0 {
            return;
        }
        let elapsed = now.saturating_duration_since(self.epoch_start);
        let expected = (self.btlbw as f64 * elapsed.as_secs_f64()) as u64;
        if self.epoch_acked <= expected {
            // The acks kept up with the model: a new epoch starts here.
            self.epoch_start = now;
            self.epoch_acked = 0;
        }
        self.epoch_acked += delivered as u64;
        let expected = if self.epoch_acked == delivered as u64 {
            0
        } else {
            expected
        };
        let extra = (self.epoch_acked.saturating_sub(expected) as usize).min(self.cwnd);
        let slot = (self.round % BW_WINDOW_ROUNDS as u64) as usize;
        self.extra_samples[slot] = self.extra_samples[slot].max(extra);
        self.extra_acked = self.extra_samples.iter().copied().max().unwrap_or(0);
    }

    fn update_min_rtt(&mut self, now: Instant, rtt: Option<Duration>) {
        let expired = now.saturating_duration_since(self.min_rtt_stamp) > MIN_RTT_WINDOW;
        if let Some(r) = rtt {
            if self.min_rtt.is_none_or(|m| r <= m) || expired {
                self.min_rtt = Some(r);
                self.min_rtt_stamp = now;
            }
        }
        if expired && self.mode != Mode::ProbeRtt && self.min_rtt.is_some() {
            // Draft sec. 4.3.4: the minimum went stale; drain the queue to
            // see the path's own round trip again.
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
            self.probe_rtt_done = None;
        }
    }

    fn update_mode(&mut self, now: Instant, pipe: usize) {
        match self.mode {
            Mode::Startup if self.filled_pipe => {
                self.mode = Mode::Drain;
                self.pacing_gain = 1.0 / HIGH_GAIN;
                self.cwnd_gain = HIGH_GAIN;
                self.update_mode(now, pipe);
            }
            Mode::Drain if self.bdp(1.0).is_none_or(|bdp| pipe <= bdp) => {
                self.enter_probe_bw(now);
            }
            Mode::ProbeBw => {
                let Some(rtt) = self.min_rtt else { return };
                let gain = CYCLE[self.phase];
                let elapsed = now.saturating_duration_since(self.phase_start) > rtt;
                // Draft sec. 4.3.3.5: the draining phase may end early once
                // the queue is gone.
                let drained = gain < 1.0 && self.bdp(1.0).is_some_and(|bdp| pipe <= bdp);
                if elapsed || drained {
                    self.phase = (self.phase + 1) % CYCLE.len();
                    self.phase_start = now;
                    self.pacing_gain = CYCLE[self.phase];
                }
            }
            Mode::ProbeRtt => match self.probe_rtt_done {
                None if pipe <= MIN_WINDOW => {
                    self.probe_rtt_done = Some((now + PROBE_RTT_TIME, self.round));
                }
                Some((at, round)) if now >= at && self.round > round => {
                    self.min_rtt_stamp = now;
                    self.cwnd = self.cwnd.max(self.prior_cwnd);
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.mode = Mode::Startup;
                        self.pacing_gain = HIGH_GAIN;
                        self.cwnd_gain = HIGH_GAIN;
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw;
        self.phase = FIRST_PHASE;
        self.phase_start = now;
        self.pacing_gain = CYCLE[self.phase];
        self.cwnd_gain = PROBE_BW_CWND_GAIN;
    }

    /// Draft sec. 4.2.3: the window moves towards its target by the bytes
    /// delivered; before the pipe is full it only grows.
    fn update_cwnd(&mut self, delivered: usize) {
        let target = self.target_cwnd();
        if self.filled_pipe {
            self.cwnd = self.cwnd.saturating_add(delivered).min(target);
        } else if self.cwnd < target || self.delivered < self.initial as u64 {
            self.cwnd = self.cwnd.saturating_add(delivered);
        }
        self.cwnd = self.cwnd.clamp(MIN_WINDOW, self.max);
    }

    /// The window the model asks for: `cwnd_gain * BDP + extra_acked`
    /// (the initial window until the model has both).
    fn target_cwnd(&self) -> usize {
        self.bdp(self.cwnd_gain)
            .map_or(self.initial, |bdp| bdp.saturating_add(self.extra_acked))
            .max(MIN_WINDOW)
    }

    fn update_pacing(&mut self) {
        if self.btlbw == 0 {
            return;
        }
        let rate = (self.btlbw as f64 * self.pacing_gain) as u64;
        // Draft sec. 4.2.1: in Startup the rate only grows, from the
        // initial window per round trip at Startup's gain
        // (`BBRInitPacingRate`). Without that floor the first rounds'
        // samples set it: on a link whose first messages were a
        // handshake's (app-limited, a hundred bytes per round trip), a
        // few KB/s, at which a 64 KiB message takes seconds.
        self.pacing_rate = if self.filled_pipe {
            rate
        } else {
            rate.max(self.pacing_rate).max(self.initial_pacing_rate())
        };
    }

    /// Draft sec. 4.2.1: `pacing_gain * initial_cwnd / min_rtt` (0 before
    /// the first RTT sample).
    fn initial_pacing_rate(&self) -> u64 {
        self.min_rtt.map_or(0, |rtt| {
            let rtt = rtt.max(Duration::from_millis(1)).as_secs_f64();
            (HIGH_GAIN * self.initial as f64 / rtt) as u64
        })
    }
}

impl CongestionControl for Bbr {
    fn name(&self) -> &'static str {
        "bbr"
    }

    fn on_sent(&mut self, _now: Instant, seq: u64, bytes: usize, _pipe: usize) {
        self.next_seq = self.next_seq.max(seq + 1);
        self.sent += bytes as u64;
    }

    fn on_ack(&mut self, now: Instant, ack: &AckEvent) {
        self.delivered += ack.delivered as u64;
        if self.after_timeout && ack.delivered > 0 {
            // Data gets through again: the timeout was a blackout or a
            // burst of loss. The window the model asks for comes back at
            // once (not more than before the timeout), not after a slow
            // start.
            self.after_timeout = false;
            self.cwnd = self.cwnd.max(self.prior_cwnd.min(self.target_cwnd()));
        }
        self.update_round(now, ack);
        self.update_ack_aggregation(now, ack.delivered);
        self.update_min_rtt(now, ack.rtt);
        self.update_mode(now, ack.pipe);
        self.update_cwnd(ack.delivered);
        self.update_pacing();
    }

    fn on_loss(&mut self, _now: Instant, loss: &LossEvent) {
        match loss.kind {
            // Random loss is not congestion: the delivery rate, which
            // leaves the lost message out, already says how much the path
            // carries.
            LossKind::FastRetransmit => {}
            // Nothing came back for a whole RTO: send one window's worth
            // of probes until something does (draft sec. 4.2.3.4).
            LossKind::Timeout => {
                if !self.after_timeout {
                    self.prior_cwnd = self.cwnd;
                }
                self.after_timeout = true;
                self.cwnd = MIN_WINDOW;
                // Not the end of Startup: a round trip that jumped past
                // the RTO (another flow filled the queue, a blackout) says
                // nothing of the bandwidth, and a model measured so far
                // may be a handshake's trickle, which ProbeBW would only
                // grow by a quarter per gain cycle. The plateau count
                // starts again instead (Linux `bbr_set_state` on
                // `TCP_CA_Loss` resets `full_bw`); Startup's own overshoot
                // shows as a plateau of the delivery rate.
                self.full_bw = 0;
                self.full_bw_rounds = 0;
            }
        }
    }

    fn window(&self) -> usize {
        if self.mode == Mode::ProbeRtt {
            self.cwnd.min(MIN_WINDOW)
        } else {
            self.cwnd
        }
    }

    fn pacing(&self) -> Option<Pacing> {
        // A round trip shorter than the driver's timer granularity cannot
        // be paced by that timer: each wait for the next send time would
        // last a whole tick, the delivery rate would fall to what the
        // timer allows and the model with it. The window alone bounds
        // such a path (loopback, a LAN).
        if self.pacing_rate == 0 || self.min_rtt.is_none_or(|r| r < PACING_MIN_RTT) {
            return None;
        }
        let burst = (self.pacing_rate as f64 * BURST_TIME.as_secs_f64()) as usize;
        Some(Pacing {
            rate: self.pacing_rate,
            burst: burst.max(MIN_BURST),
        })
    }

    fn in_recovery(&self) -> bool {
        self.after_timeout
    }
}
