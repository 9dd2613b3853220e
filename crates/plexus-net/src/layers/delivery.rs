//! `delivery`: reliable delivery over lossy message transports.
//!
//! **Guarantee.** Every message accepted by `handle_send` is handed up by the
//! peer exactly once, or the link is closed with
//! [`LinkEvent::DeliveryFailed`] followed by
//! [`LinkError::DeliveryFailed`] after `max_retries` retransmissions of one
//! message. Messages are handed up in arrival order, not send order: put
//! `ordering` above for FIFO. Duplicates (retransmissions, network copies)
//! are suppressed by sequence number.
//!
//! **Mechanism** (details and invariants in `ALGORITHM.md`):
//! * 64-bit sequence numbers, one per message; cumulative ack plus up to
//!   16 SACK ranges (RFC 2018), piggy-backed on data when possible (with
//!   at most 4 ranges; a full ack follows at the flush when more are
//!   open), otherwise sent after `ack_delay` or every `ack_every` messages, and
//!   immediately on out-of-order or duplicate arrival (RFC 5681 sec. 4.2).
//!   "Immediately" means at the next flush ([`Layer::handle_flush`]), when
//!   the driver drains the transmit queue after its batch of input: the
//!   messages of one received datagram (or of one batch of datagrams) get
//!   one ack, not one each.
//!   Ranges are listed lowest first (RFC 2018 sec. 4 lists the most recent
//!   first; lowest first serves our loss detection better).
//! * Retransmission timeout per RFC 6298: SRTT/RTTVAR, Karn's rule (no
//!   samples from retransmitted messages), exponential backoff; on expiry
//!   every un-SACKed message in flight is retransmitted. An expiry before
//!   the first RTT sample (of `initial_rto`, a guess a long path exceeds)
//!   backs the timer off but is not a loss for the congestion controller.
//! * Fast retransmit: a message is retransmitted before its RTO when
//!   `dup_thresh` duplicate acks arrive (RFC 5681 sec. 3.2), when
//!   `dup_thresh` messages sent after it are SACKed (RFC 6675 sec. 4,
//!   IsLost), when a transmission that left a quarter of the minimum RTT
//!   after it was received (RACK's time rule, RFC 8985 sec. 6.2), and
//!   again when its retransmission is found lost the same ways.
//! * Tail loss probe (RFC 8985 sec. 7): after two smoothed RTTs without
//!   an ack that delivers data, one message goes out (the next new one,
//!   or the highest unacknowledged one again), at most [`MAX_PROBES`]
//!   times with doubling timeouts: its ack lets the rules above find a
//!   lost tail, instead of the RTO.
//! * Congestion control, pluggable (`cc` option, [`CongestionControl`]):
//!   at most the controller's window of bytes in the network (sent, not
//!   acked, not SACKed, RFC 6675's "pipe"), starting at `initial_window`;
//!   one message may always be in flight. `cc=newreno` (the default,
//!   `cwnd` module): AIMD, doubling per round trip in slow start, halved
//!   on a fast retransmit, one segment after a retransmission timeout.
//!   `cc=bbr` (`bbr` module): a model of the path's bandwidth and minimum
//!   RTT that random loss does not shrink, with pacing; for lossy paths.
//!   A pacing controller's rate is honoured through the layer's timer.
//! * Bounded send window: at most `send_window` messages in flight; beyond,
//!   messages queue up to `send_queue` messages / `send_buffer` bytes, and
//!   then [`Layer::can_send`] is false, so the stack refuses sends with
//!   `WouldBlock` and raises `SendReady` when acks free room.
//!
//! **Memory.** Sender: what `send_buffer` allows (soft: the last accepted
//! message may overshoot it, and so may the frames a layer above held back
//! and flushes after the stack accepted their messages, at most that
//! layer's bound, e.g. one batch of `batching`). Receiver: a bitmap of `recv_window` entries;
//! data is never buffered (it goes up at once). Sequence numbers at or beyond
//! `cum + recv_window` are dropped (and re-sent by the peer later).
//!
//! **Spec options.** `delivery(send_window=1024, send_queue=1024,
//! send_buffer=8MiB, recv_window=1024, initial_window=16KiB,
//! initial_rto=200ms, min_rto=20ms, max_rto=5s, max_retries=10,
//! ack_delay=10ms, ack_every=2, dup_thresh=3, cc=newreno)` with
//! `cc=newreno|bbr`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::error::{LinkError, ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{earliest, Interface, Layer, LinkContext, LinkEvent, Output};
use crate::options::{LayerOptions, OptionError};
use crate::registry::LayerConfig;

mod bbr;
mod cc;
mod cwnd;
mod rtt;
mod wire;

pub use bbr::Bbr;
pub use cc::{AckEvent, CcKind, CongestionControl, LossEvent, LossKind, Pacing};
pub use cwnd::{CongestionWindow, MESSAGE_CHARGE, MIN_WINDOW, SEGMENT};
pub use rtt::RttEstimator;
pub use wire::{
    Ack, DeliveryHeader, SackRange, MAX_HEADER_LEN, MAX_SACK_RANGES, PIGGYBACK_SACK_RANGES,
};

/// Tail loss probes sent at most before data gets through again; then
/// the RTO takes over.
pub const MAX_PROBES: u32 = 3;

/// Shortest probe timeout: a driver's timer ticks in milliseconds.
pub const PROBE_GRANULARITY: Duration = Duration::from_millis(1);

/// Configuration of the `delivery` layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// Messages in flight (sent, not cumulatively acked). Option
    /// `send_window`; default 1024 (the congestion window bounds the bytes).
    /// Must not exceed the peer's `recv_window`, nor, with strict
    /// `ordering` above, the peer's `max_pending`.
    pub send_window: usize,
    /// Messages queued behind a full window. Option `send_queue`; default
    /// 1024.
    pub send_queue: usize,
    /// Bytes held by the sender (in flight plus queued) before sends are
    /// refused. Option `send_buffer`; default 8 MiB.
    pub send_buffer: usize,
    /// Span of sequence numbers accepted above the cumulative ack. Option
    /// `recv_window`; default 1024 (a bitmap of that many bytes).
    pub recv_window: usize,
    /// Congestion window at the start, in bytes. Option `initial_window`;
    /// default 16 KiB (RFC 6928's ten segments, rounded up to a power of
    /// two). Grows up to `send_buffer`.
    pub initial_window: usize,
    /// RTO before the first RTT sample. Option `initial_rto`; default 200 ms.
    pub initial_rto: Duration,
    /// Lower bound of the RTO. Option `min_rto`; default 20 ms.
    pub min_rto: Duration,
    /// Upper bound of the RTO (and its backoff). Option `max_rto`; default
    /// 5 s. With the other defaults a dead link is reported after about 36 s,
    /// before strict ordering's 60 s gap timeout.
    pub max_rto: Duration,
    /// Retransmissions of one message before the link fails. Option
    /// `max_retries`; default 10.
    pub max_retries: u32,
    /// Longest delay of an ack when no data goes the other way. Option
    /// `ack_delay`; default 10 ms.
    pub ack_delay: Duration,
    /// Ack at once after this many in-order messages. Option `ack_every`;
    /// default 2.
    pub ack_every: u32,
    /// Duplicate acks (or later SACKed messages) that trigger a fast
    /// retransmit. Option `dup_thresh`; default 3.
    pub dup_thresh: u32,
    /// Congestion controller. Option `cc`: `newreno` (default) or `bbr`
    /// (for paths that drop at random). One per link, a few hundred bytes.
    pub cc: CcKind,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            send_window: 1024,
            send_queue: 1024,
            send_buffer: 8 << 20,
            recv_window: 1024,
            initial_window: 16 << 10,
            initial_rto: Duration::from_millis(200),
            min_rto: Duration::from_millis(20),
            max_rto: Duration::from_secs(5),
            max_retries: 10,
            ack_delay: Duration::from_millis(10),
            ack_every: 2,
            dup_thresh: 3,
            cc: CcKind::NewReno,
        }
    }
}

impl LayerConfig for DeliveryConfig {
    const NAME: &'static str = "delivery";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::default();
        for o in options.iter() {
            match o.key() {
                "send_window" => c.send_window = o.count_usize()?.max(1),
                "send_queue" => c.send_queue = o.count_usize()?.max(1),
                "send_buffer" => c.send_buffer = o.size()?.max(1),
                "recv_window" => c.recv_window = o.count_usize()?.clamp(1, 1 << 20),
                "initial_window" => c.initial_window = o.size()?,
                "initial_rto" => c.initial_rto = o.duration()?,
                "min_rto" => c.min_rto = o.duration()?,
                "max_rto" => c.max_rto = o.duration()?,
                "max_retries" => c.max_retries = o.count_u32()?,
                "ack_delay" => c.ack_delay = o.duration()?,
                "ack_every" => c.ack_every = o.count_u32()?.max(1),
                "dup_thresh" => c.dup_thresh = o.count_u32()?.max(1),
                "cc" => c.cc = CcKind::from_option(&o)?,
                _ => return Err(o.unknown()),
            }
        }
        c.max_rto = c.max_rto.max(c.min_rto);
        Ok(c)
    }

    fn build(&self, link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Delivery::new(self.clone(), link.now))
    }

    fn guarantees(&self) -> crate::GuaranteeEffect {
        // Retransmits until acknowledged and drops duplicates; order is
        // `ordering`'s job.
        crate::GuaranteeEffect::adds(crate::Guarantees {
            reliable: true,
            ordered: false,
        })
    }
}

/// Input rejected by the delivery layer. None is fatal; the frame is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// Shorter than its header says.
    #[error("truncated header ({len} bytes)")]
    Truncated {
        /// Received length.
        len: usize,
    },
    /// Unknown or missing flags.
    #[error("bad flags {flags:#04x}")]
    BadFlags {
        /// The flags byte.
        flags: u8,
    },
    /// Too many, unsorted, overlapping or overflowing SACK ranges.
    #[error("malformed SACK ranges")]
    BadSack,
    /// Acknowledges sequence numbers never sent; the whole frame is ignored.
    #[error("ack up to {acked} but only {sent} messages were sent")]
    AckForUnsent {
        /// Highest sequence number acknowledged, plus one.
        acked: u64,
        /// Messages sent so far.
        sent: u64,
    },
    /// Already received (a retransmission or network duplicate); an ack is
    /// sent at once.
    #[error("duplicate message {seq}")]
    Duplicate {
        /// Its sequence number.
        seq: u64,
    },
    /// Beyond the receive window; the sender will retransmit it.
    #[error("message {seq} beyond the receive window")]
    BeyondWindow {
        /// Its sequence number.
        seq: u64,
    },
}

#[derive(Debug)]
/// A message in flight, but its frame: that is in `Delivery::frames` at the
/// same index. Apart, the 128-byte frame moves inline on every push and pop,
/// where a frame inside this record would go through a `memmove` call.
struct InFlight {
    seq: u64,
    /// The frame's length (as received from above, without our header).
    len: usize,
    sent_at: Instant,
    transmissions: u32,
    /// The layer's transmission count at its last transmission: what was
    /// sent after it, for detecting a lost retransmission.
    xmit: u64,
    sacked: bool,
    fast_retransmitted: bool,
    /// Its latest transmission was a loss probe: no RTT sample from it
    /// (its `sent_at` is the probe's), and no retransmission counted
    /// against `max_retries`.
    probed: bool,
    /// Given up for lost by a retransmission timeout and not resent yet: no
    /// longer counted in flight; resent as the window opens.
    lost: bool,
}

/// Counters of one `delivery` layer ([`Delivery::stats`]): what it sent
/// again and why, for tests, benchmarks and operators. Counting costs an
/// add per event; nothing is allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryStats {
    /// Messages sent for the first time.
    pub sent: u64,
    /// Fast retransmissions (duplicate acks, SACK evidence, or a lost
    /// retransmission detected by transmission order).
    pub fast_retransmits: u64,
    /// Of those, retransmissions of a message whose fast retransmission
    /// was lost too.
    pub lost_retransmits: u64,
    /// Tail loss probes sent (RFC 8985 sec. 7): a new message or the
    /// last one again, after about two round trips without an ack.
    pub probes: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// Retransmissions after a timeout (the earliest message at the
    /// expiry, then the ones given up for lost as the window opens).
    pub timeout_retransmits: u64,
    /// Time the sender waited with data in flight between the last ack
    /// that delivered something and each timer expiry, summed.
    pub stalled: Duration,
    /// Messages received that were already received (acked at once).
    pub duplicates: u64,
    /// Messages received beyond the receive window (dropped).
    pub beyond_window: u64,
}

/// The `delivery` layer. See the [module docs](self).
#[derive(Debug)]
pub struct Delivery {
    config: DeliveryConfig,
    stats: DeliveryStats,
    /// When the last ack that delivered data arrived (or the layer started).
    last_progress: Instant,
    rtt: RttEstimator,
    cc: Box<dyn CongestionControl>,
    /// `cc.window()`, read after each event that may change it: the send
    /// path checks it per message without a virtual call.
    window: usize,
    /// `cc.pacing()`, kept as `window` is.
    pacing: Option<Pacing>,
    /// When pacing: the instant the next transmission may leave (a token
    /// bucket kept as a theoretical arrival time, GCRA).
    pace_next: Instant,
    /// A message waits for `pace_next`: the layer's timer is due then.
    pace_wait: Option<Instant>,
    // Sender.
    next_seq: u64,
    inflight: VecDeque<InFlight>,
    /// The frames of `inflight`, index for index.
    frames: VecDeque<Frame>,
    /// Bytes in flight as the congestion window counts them.
    flight: usize,
    /// In-flight messages marked SACKed: without any, there is no SACK
    /// evidence to scan the window for.
    sacked: usize,
    /// In-flight messages marked lost, waiting to be resent.
    lost: usize,
    /// Bytes of `flight` the peer has SACKed: what is in flight but no
    /// longer in the network (RFC 6675's "pipe" leaves them out).
    sacked_bytes: usize,
    queued: VecDeque<Frame>,
    buffered: usize,
    rto_deadline: Option<Instant>,
    /// Transmissions so far, new and repeated.
    xmits: u64,
    /// The latest transmission (by `xmit`) the peer acked or SACKed.
    max_delivered_xmit: u64,
    /// When that transmission left (RFC 8985's `RACK.xmit_ts`).
    rack_sent_at: Instant,
    /// One past the highest sequence number the latest ack reported
    /// ([`Ack::highest`]): above it the peer may hold messages its SACK
    /// ranges had no room for.
    reported: u64,
    /// When a tail loss probe is due (RFC 8985 sec. 7's PTO).
    probe_deadline: Option<Instant>,
    /// Probes sent since the last ack that delivered data.
    probes: u32,
    last_cum: u64,
    dup_acks: u32,
    failed: bool,
    // Receiver.
    rcv_cum: u64,
    rcv_max: u64,
    received: Vec<bool>,
    /// `received.len() - 1` when that is a power of two.
    slot_mask: Option<u64>,
    ack_pending: u32,
    ack_deadline: Option<Instant>,
    ack_now: bool,
}

impl Delivery {
    /// A delivery layer with `config`, created at `now`.
    pub fn new(config: DeliveryConfig, now: Instant) -> Self {
        let cc = config
            .cc
            .build(now, config.initial_window, config.send_buffer);
        Self {
            rtt: RttEstimator::new(config.initial_rto, config.min_rto, config.max_rto),
            window: cc.window(),
            pacing: cc.pacing(),
            cc,
            pace_next: now,
            pace_wait: None,
            next_seq: 0,
            // Grows on demand up to `send_window`: a link that never fills
            // a large window does not pay for it.
            inflight: VecDeque::with_capacity(config.send_window.min(64)),
            frames: VecDeque::with_capacity(config.send_window.min(64)),
            flight: 0,
            sacked: 0,
            lost: 0,
            sacked_bytes: 0,
            queued: VecDeque::with_capacity(config.send_queue.min(1024)),
            buffered: 0,
            rto_deadline: None,
            xmits: 0,
            max_delivered_xmit: 0,
            rack_sent_at: now,
            reported: 0,
            probe_deadline: None,
            probes: 0,
            last_cum: 0,
            dup_acks: 0,
            failed: false,
            rcv_cum: 0,
            rcv_max: 0,
            received: vec![false; config.recv_window],
            slot_mask: super::ordering::ring_mask(config.recv_window),
            ack_pending: 0,
            ack_deadline: None,
            ack_now: false,
            config,
            stats: DeliveryStats::default(),
            last_progress: now,
        }
    }

    /// The layer's counters.
    pub fn stats(&self) -> DeliveryStats {
        self.stats
    }

    /// Messages in flight.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Messages queued behind the window.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// The current retransmission timeout.
    pub fn rto(&self) -> Duration {
        self.rtt.rto()
    }

    /// The RTT estimator.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// The congestion controller.
    pub fn congestion_control(&self) -> &dyn CongestionControl {
        &*self.cc
    }

    /// Reads what the controller decided after an event.
    fn refresh_cc(&mut self) {
        self.window = self.cc.window();
        self.pacing = self.cc.pacing();
    }

    /// Bytes in the network: in flight and not SACKed (RFC 6675's pipe).
    #[inline]
    fn pipe(&self) -> usize {
        self.flight - self.sacked_bytes
    }

    /// Whether pacing lets a transmission leave at `now`.
    #[inline]
    fn pace_allows(&self, now: Instant) -> bool {
        self.pacing.is_none() || self.pace_next <= now
    }

    /// Takes `bytes` from the pacing bucket.
    #[inline]
    fn paced(&mut self, now: Instant, bytes: usize) {
        if let Some(p) = self.pacing {
            let rate = p.rate.max(1) as u128;
            let nanos = |b: usize| Duration::from_nanos((b as u128 * 1_000_000_000 / rate) as u64);
            // Credit for an idle spell is capped at one burst.
            let floor = now.checked_sub(nanos(p.burst)).unwrap_or(now);
            self.pace_next = self.pace_next.max(floor) + nanos(bytes);
        }
    }

    fn slot(&self, seq: u64) -> usize {
        // A power-of-two ring (the default) takes a mask, not a division.
        match self.slot_mask {
            Some(mask) => (seq & mask) as usize,
            None => (seq % self.received.len() as u64) as usize,
        }
    }

    /// The ack describing what was received, with SACK ranges for the gaps.
    /// At most `limit` ranges, the lowest; also whether they cover
    /// everything received.
    fn current_ack(&self, limit: usize) -> (Ack, bool) {
        let mut ack = Ack::new(self.rcv_cum);
        let mut seq = self.rcv_cum + 1;
        while seq < self.rcv_max {
            if !self.received[self.slot(seq)] {
                seq += 1;
                continue;
            }
            if ack.ranges().len() >= limit {
                return (ack, false);
            }
            let start = seq;
            while seq < self.rcv_max && self.received[self.slot(seq)] {
                seq += 1;
            }
            if !ack.push_range(SackRange { start, end: seq }) {
                return (ack, false);
            }
        }
        (ack, true)
    }

    /// Clears the ack obligation and returns the ack to send, with at most
    /// `limit` SACK ranges. An ack on data that had to leave ranges out
    /// keeps the obligation: a full stand-alone ack follows at the flush.
    fn take_ack(&mut self, limit: usize) -> Option<Ack> {
        if self.ack_pending == 0 && !self.ack_now {
            return None;
        }
        let (ack, complete) = self.current_ack(limit);
        self.ack_pending = 0;
        self.ack_now = !complete && limit < MAX_SACK_RANGES;
        self.ack_deadline = None;
        Some(ack)
    }

    fn emit(&mut self, seq: Option<u64>, mut frame: Frame, out: &mut Output) {
        let limit = if seq.is_some() {
            PIGGYBACK_SACK_RANGES
        } else {
            MAX_SACK_RANGES
        };
        let header = DeliveryHeader {
            seq,
            ack: self.take_ack(limit),
        };
        let mut buf = [0; MAX_HEADER_LEN];
        let n = header.emit(&mut buf);
        frame.push_header(&buf[..n]);
        out.push_down(frame);
    }

    /// Resends the messages a retransmission timeout gave up for lost, in
    /// order, as far as the congestion window allows (RFC 5681 sec. 3.1:
    /// after a timeout the window restarts at one segment and grows with
    /// the acks, so they go out at the pace of slow start). Then moves
    /// queued messages into the window the same way (always at least one
    /// message when nothing is in flight).
    fn flush(&mut self, now: Instant, out: &mut Output) {
        self.pace_wait = None;
        let mut i = 0;
        while self.lost > 0 && i < self.inflight.len() {
            let entry = &self.inflight[i];
            if entry.lost {
                let len = entry.len + MESSAGE_CHARGE;
                // What is still in the network: SACKed messages left it.
                let pipe = self.pipe();
                if pipe > 0 && pipe + len > self.window {
                    return;
                }
                if !self.pace_allows(now) {
                    self.pace_wait = Some(self.pace_next);
                    return;
                }
                self.inflight[i].lost = false;
                self.lost -= 1;
                self.flight += len;
                self.stats.timeout_retransmits += 1;
                self.retransmit(i, now, out);
            }
            i += 1;
        }
        while let Some(next) = self.queued.front() {
            if !self.window_has_room(next.len()) {
                break;
            }
            if !self.pace_allows(now) {
                self.pace_wait = Some(self.pace_next);
                break;
            }
            let Some(frame) = self.queued.pop_front() else {
                break;
            };
            self.transmit_new(now, frame, out);
        }
    }

    /// Whether a new message of `len` bytes may enter the window: the
    /// message count and the congestion window allow it, or nothing is in
    /// flight (a message larger than the window must not stall the link).
    /// The congestion window bounds what is in the network: SACKed
    /// messages left it, whatever hole below them keeps them in `inflight`
    /// (RFC 6675 sec. 5).
    #[inline]
    fn window_has_room(&self, len: usize) -> bool {
        self.inflight.len() < self.config.send_window
            && (self.inflight.is_empty() || self.pipe() + len + MESSAGE_CHARGE <= self.window)
    }

    /// Gives `frame` the next sequence number and sends it.
    #[inline]
    fn transmit_new(&mut self, now: Instant, frame: Frame, out: &mut Output) {
        let bytes = frame.len() + MESSAGE_CHARGE;
        self.stats.sent += 1;
        if self.inflight.is_empty() {
            // Nothing was waiting for an ack: a stall starts no earlier.
            self.last_progress = now;
        }
        self.flight += bytes;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.xmits += 1;
        self.paced(now, bytes);
        self.cc.on_sent(now, seq, bytes, self.pipe());
        self.emit(Some(seq), frame.clone(), out);
        self.inflight.push_back(InFlight {
            seq,
            len: frame.len(),
            sent_at: now,
            transmissions: 1,
            xmit: self.xmits,
            sacked: false,
            fast_retransmitted: false,
            probed: false,
            lost: false,
        });
        self.frames.push_back(frame);
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
        if self.probes == 0 {
            // RFC 8985 sec. 7.2: (re)started after new data.
            self.arm_probe(now);
        }
    }

    fn retransmit(&mut self, index: usize, now: Instant, out: &mut Output) {
        self.inflight[index].transmissions += 1;
        self.inflight[index].probed = false;
        self.send_again(index, now, out);
    }

    /// Sends the message at `index` again as it is (a retransmission or a
    /// probe): a new transmission in `xmit` order.
    fn send_again(&mut self, index: usize, now: Instant, out: &mut Output) {
        let entry = &mut self.inflight[index];
        entry.sent_at = now;
        self.xmits += 1;
        entry.xmit = self.xmits;
        let seq = entry.seq;
        let bytes = entry.len + MESSAGE_CHARGE;
        self.paced(now, bytes);
        self.cc.on_sent(now, seq, bytes, self.pipe());
        self.emit(Some(seq), self.frames[index].clone(), out);
    }

    fn on_ack(&mut self, now: Instant, ack: &Ack, out: &mut Output) {
        let mut sample = None;
        let mut advanced = false;
        let flight_before = self.flight;
        // Bytes the cumulative ack took out of flight (lost messages were
        // out already).
        let mut acked = 0;
        // Bytes delivered by this ack and not before, and the highest
        // sequence number among them: the controller's delivery rate.
        let mut delivered = 0;
        let mut largest_delivered = None;
        // The latest transmission delivered and when it left (RFC 8985
        // sec. 6.2 step 2).
        let mut rack = (self.max_delivered_xmit, self.rack_sent_at);
        let min_rtt = self.rtt.min_rtt();
        while let Some(front) = self.inflight.front() {
            if front.seq >= ack.cumulative {
                break;
            }
            // The loop condition guarantees a front entry.
            let done = self.inflight.pop_front().expect("front exists");
            self.frames.pop_front();
            self.buffered -= done.len;
            if done.lost {
                self.lost -= 1;
            } else {
                self.flight -= done.len + MESSAGE_CHARGE;
                acked += done.len + MESSAGE_CHARGE;
            }
            self.sacked -= usize::from(done.sacked);
            if done.sacked {
                self.sacked_bytes -= done.len + MESSAGE_CHARGE;
            } else {
                delivered += done.len + MESSAGE_CHARGE;
                largest_delivered = Some(done.seq);
                if done.xmit > rack.0 && Self::rack_may_take(min_rtt, &done, now) {
                    rack = (done.xmit, done.sent_at);
                }
            }
            if done.transmissions == 1 && !done.probed && !done.sacked {
                sample = Some(now.saturating_duration_since(done.sent_at));
            }
            advanced = true;
        }
        if self.inflight.is_empty() {
            // One message in flight at a time reuses one slot (see
            // `take_front`).
            self.inflight.clear();
            self.frames.clear();
        }
        let base = self.inflight.front().map_or(self.next_seq, |f| f.seq);
        for range in ack.ranges() {
            let from = range.start.max(base) - base;
            let to = range.end.max(base) - base;
            for i in from..to.min(self.inflight.len() as u64) {
                let entry = &mut self.inflight[i as usize];
                if !entry.sacked {
                    entry.sacked = true;
                    self.sacked += 1;
                    self.sacked_bytes += entry.len + MESSAGE_CHARGE;
                    delivered += entry.len + MESSAGE_CHARGE;
                    largest_delivered = largest_delivered.max(Some(entry.seq));
                    if entry.xmit > rack.0 && Self::rack_may_take(min_rtt, entry, now) {
                        rack = (entry.xmit, entry.sent_at);
                    }
                    if entry.lost {
                        // It arrived after all: nothing to resend, and it
                        // counts in flight again until the cumulative ack.
                        entry.lost = false;
                        self.lost -= 1;
                        self.flight += entry.len + MESSAGE_CHARGE;
                    }
                    if entry.transmissions == 1 && !entry.probed {
                        sample = Some(now.saturating_duration_since(entry.sent_at));
                    }
                }
            }
        }
        (self.max_delivered_xmit, self.rack_sent_at) = rack;
        self.reported = ack.highest();
        // Karn's rule (RFC 6298 sec. 3): samples only from single transmissions.
        if let Some(r) = sample {
            self.rtt.on_sample(r);
        }
        if advanced || delivered > 0 {
            self.last_progress = now;
            // Data got through: no probe is outstanding any more.
            self.probes = 0;
            self.cc.on_ack(
                now,
                &AckEvent {
                    delivered,
                    cum_acked: acked,
                    advanced,
                    cumulative: ack.cumulative,
                    largest_delivered,
                    rtt: sample,
                    flight_before,
                    pipe: self.pipe(),
                    app_limited: self.queued.is_empty() && self.lost == 0,
                },
            );
            self.refresh_cc();
        }
        if advanced || ack.cumulative > self.last_cum {
            self.last_cum = self.last_cum.max(ack.cumulative);
            self.dup_acks = 0;
            // RFC 6298 sec. 5.2/5.3: stop or restart the timer.
            self.rto_deadline = (!self.inflight.is_empty()).then(|| now + self.rtt.rto());
        } else if !self.inflight.is_empty() && ack.cumulative == self.last_cum {
            self.dup_acks += 1;
        }
        if advanced || delivered > 0 {
            // The path delivers: the RTO, which gives everything in flight
            // up for lost, measures an RTO without progress, SACKs
            // included (RFC 6298 sec. 5.3 restarts it on new cumulative
            // acks only; with a round trip near `min_rto`, a hole being
            // repaired by fast retransmit would otherwise outlast it).
            // Losses below SACKed data are the rules above's to find.
            self.rto_deadline = (!self.inflight.is_empty()).then(|| now + self.rtt.rto());
            // RFC 8985 sec. 7.2: the probe timer restarts on an ack that
            // delivered data.
            self.arm_probe(now);
        }
        self.fast_retransmit(now, out);
    }

    /// Arms the probe timer (RFC 8985 sec. 7.2): two smoothed round trips
    /// (at least [`PROBE_GRANULARITY`]), plus the peer's `ack_delay` when
    /// one message is in flight (its ack may wait that long), doubled per
    /// probe already sent since data last got through. No probe before
    /// the first RTT sample, after [`MAX_PROBES`], or when the RTO comes
    /// first: the RTO covers those.
    fn arm_probe(&mut self, now: Instant) {
        self.probe_deadline = None;
        if self.inflight.is_empty() || self.probes >= MAX_PROBES {
            return;
        }
        let Some(srtt) = self.rtt.srtt() else {
            return;
        };
        let mut pto = (srtt * 2).max(PROBE_GRANULARITY);
        if self.inflight.len() == 1 {
            pto += self.config.ack_delay;
        }
        let at = now + pto * (1 << self.probes);
        if self.rto_deadline.is_none_or(|rto| at < rto) {
            self.probe_deadline = Some(at);
        }
    }

    /// Sends a tail loss probe (RFC 8985 sec. 7.3): the next queued
    /// message if the message window allows one more (whatever the
    /// congestion window says), else the highest message neither SACKed
    /// nor given up for lost, again. Its ack carries SACK information that
    /// lets the ack-driven detection below find the messages lost before
    /// it: a tail of lost messages then costs a probe timeout and a
    /// round trip, not an RTO (and, after one, the collapsed window).
    fn probe(&mut self, now: Instant, out: &mut Output) {
        self.probe_deadline = None;
        self.probes += 1;
        if !self.queued.is_empty() && self.inflight.len() < self.config.send_window {
            // Checked non-empty just above.
            let frame = self.queued.pop_front().expect("a queued message");
            self.stats.probes += 1;
            self.transmit_new(now, frame, out);
        } else if let Some(i) = (0..self.inflight.len())
            .rev()
            .find(|&i| !self.inflight[i].sacked && !self.inflight[i].lost)
        {
            self.stats.probes += 1;
            self.inflight[i].probed = true;
            self.send_again(i, now, out);
        }
        self.arm_probe(now);
    }

    /// Whether the delivery of `entry` may advance RACK's latest delivered
    /// transmission (RFC 8985 sec. 6.2 step 2): not when it was sent again
    /// less than a minimum RTT ago, as the ack is then for an earlier copy.
    #[inline]
    fn rack_may_take(min_rtt: Option<Duration>, entry: &InFlight, now: Instant) -> bool {
        (entry.transmissions == 1 && !entry.probed)
            || min_rtt.is_none_or(|min| now.saturating_duration_since(entry.sent_at) >= min)
    }

    /// RACK's time rule (RFC 8985 sec. 6.2 step 5): a transmission that
    /// left more than the reordering window before one the peer received
    /// is lost. The window is a quarter of the minimum RTT (sec. 6.2 step
    /// 4); transmissions of one burst leave together and are never judged
    /// by it against each other. Only below what the latest ack reported:
    /// it lists the lowest ranges only, and a message above them may have
    /// arrived unreported.
    #[inline]
    fn sent_before_delivered(&self, entry: &InFlight) -> bool {
        entry.seq < self.reported
            && entry.xmit < self.max_delivered_xmit
            && self
                .rtt
                .min_rtt()
                .is_some_and(|min| entry.sent_at + min / 4 < self.rack_sent_at)
    }

    /// Tells the controller of a loss and reads its new window.
    fn on_loss(&mut self, now: Instant, kind: LossKind) {
        self.cc.on_loss(
            now,
            &LossEvent {
                kind,
                flight: self.flight,
                next_seq: self.next_seq,
            },
        );
        self.refresh_cc();
    }

    /// Whether the fast retransmission of `entry` was lost too: the peer
    /// acked a transmission sent `dup_thresh` transmissions after it (as
    /// RACK, RFC 8985 sec. 6.2, orders by transmission, not by sequence
    /// number). Without this, a lost retransmission waits for the RTO,
    /// which on a path losing a few percent at random happens often.
    #[inline]
    fn retransmission_lost(&self, entry: &InFlight) -> bool {
        entry.fast_retransmitted
            && self.max_delivered_xmit >= entry.xmit + u64::from(self.config.dup_thresh)
    }

    /// RFC 5681 sec. 3.2 (dup acks) and RFC 6675 sec. 4 (SACK evidence).
    fn fast_retransmit(&mut self, now: Instant, out: &mut Output) {
        let thresh = self.config.dup_thresh;
        if self.dup_acks >= thresh {
            if let Some(front) = self.inflight.front() {
                if !front.sacked
                    && !front.lost
                    && (!front.fast_retransmitted
                        || self.retransmission_lost(front)
                        || self.sent_before_delivered(front))
                {
                    self.stats.fast_retransmits += 1;
                    self.stats.lost_retransmits += u64::from(front.fast_retransmitted);
                    self.inflight[0].fast_retransmitted = true;
                    self.on_loss(now, LossKind::FastRetransmit);
                    self.retransmit(0, now, out);
                }
            }
        }
        // Without SACKed messages above a hole, only the time rule can
        // find one, and only below a later transmission the peer received:
        // an ack of in-order data skips the scan of the whole window.
        let behind = self
            .inflight
            .front()
            .is_some_and(|f| f.xmit < self.max_delivered_xmit);
        if self.sacked == 0 && !behind {
            return;
        }
        let mut sacked_above = 0;
        for i in (0..self.inflight.len()).rev() {
            let entry = &self.inflight[i];
            if entry.sacked {
                sacked_above += 1;
            } else if !entry.lost
                && ((sacked_above >= thresh && !entry.fast_retransmitted)
                    || self.retransmission_lost(entry)
                    || self.sent_before_delivered(entry))
            {
                self.stats.fast_retransmits += 1;
                self.stats.lost_retransmits += u64::from(entry.fast_retransmitted);
                self.inflight[i].fast_retransmitted = true;
                self.on_loss(now, LossKind::FastRetransmit);
                self.retransmit(i, now, out);
            }
        }
    }

    #[inline]
    fn on_data(
        &mut self,
        now: Instant,
        seq: u64,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), DeliveryError> {
        let window_end = self.rcv_cum.saturating_add(self.received.len() as u64);
        if seq < self.rcv_cum || (seq < window_end && self.received[self.slot(seq)]) {
            self.ack_now = true;
            self.stats.duplicates += 1;
            return Err(DeliveryError::Duplicate { seq });
        }
        if seq >= window_end {
            self.ack_now = true;
            self.stats.beyond_window += 1;
            return Err(DeliveryError::BeyondWindow { seq });
        }
        let slot = self.slot(seq);
        self.received[slot] = true;
        self.rcv_max = self.rcv_max.max(seq + 1);
        let in_order = seq == self.rcv_cum;
        while self.received[self.slot(self.rcv_cum)] && self.rcv_cum < self.rcv_max {
            let slot = self.slot(self.rcv_cum);
            self.received[slot] = false;
            self.rcv_cum += 1;
        }
        out.push_up(frame);
        self.ack_pending += 1;
        // RFC 5681 sec. 4.2: ack out-of-order and gap-filling data at once.
        let filled_gap = self.rcv_cum > seq + 1;
        if !in_order
            || filled_gap
            || self.rcv_max > self.rcv_cum
            || self.ack_pending >= self.config.ack_every
        {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.config.ack_delay);
        }
        Ok(())
    }

    fn fail(&mut self, seq: u64, attempts: u32, out: &mut Output) {
        let lost = self.inflight.len() + self.queued.len();
        out.push_event(LinkEvent::DeliveryFailed {
            seq,
            attempts,
            lost,
        });
        out.close(LinkError::DeliveryFailed { seq, attempts });
        self.failed = true;
        self.inflight.clear();
        self.frames.clear();
        self.queued.clear();
        self.buffered = 0;
        self.flight = 0;
        self.sacked = 0;
        self.lost = 0;
        self.sacked_bytes = 0;
        self.rto_deadline = None;
        self.probe_deadline = None;
        self.ack_deadline = None;
        self.pace_wait = None;
    }

    fn send_ack_if_due(&mut self, out: &mut Output) {
        if self.ack_now {
            self.emit(None, Frame::new(), out);
        }
    }
}

impl Layer for Delivery {
    fn name(&self) -> &'static str {
        DeliveryConfig::NAME
    }

    fn max_frame_len(&self, below: Option<usize>) -> Option<usize> {
        below.map(|b| b.saturating_sub(MAX_HEADER_LEN))
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn can_send(&self) -> bool {
        !self.failed
            && self.queued.len() < self.config.send_queue
            && self.buffered < self.config.send_buffer
    }

    fn handle_send(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        // `can_send` is the bound, checked by the stack before it takes a
        // message. A frame that reaches this point anyway comes from a layer
        // above that pushes down on its own: one that held it back to
        // combine (`batching` at its flush) after the stack took its
        // messages, or one that sends on a timer or on input (a heartbeat
        // placed above). Refusing it now would lose it, so it is taken
        // beyond the bound, which that layer's own pace limits.
        if self.failed {
            return Err(StackSendError::WouldBlock(frame));
        }
        self.buffered += frame.len();
        if self.queued.is_empty() && self.window_has_room(frame.len()) && self.pace_allows(now) {
            // Straight into the window, without a round trip through the
            // queue.
            self.transmit_new(now, frame, out);
        } else {
            self.queued.push_back(frame);
            self.flush(now, out);
        }
        Ok(())
    }

    fn handle_receive(
        &mut self,
        now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        if self.failed {
            return Ok(());
        }
        let mut scratch = [0; MAX_HEADER_LEN];
        let (header, len) = DeliveryHeader::parse(frame.prefix(&mut scratch))?;
        if let Some(ack) = &header.ack {
            if ack.highest() > self.next_seq {
                return Err(DeliveryError::AckForUnsent {
                    acked: ack.highest(),
                    sent: self.next_seq,
                }
                .into());
            }
        }
        if let Some(ack) = &header.ack {
            self.on_ack(now, ack, out);
        }
        let mut result = Ok(());
        if let Some(seq) = header.seq {
            frame.advance(len);
            result = self.on_data(now, seq, frame, out);
        }
        self.flush(now, out);
        // The ack itself waits for `handle_flush`: one per batch.
        Ok(result?)
    }

    fn handle_flush(&mut self, _now: Instant, out: &mut Output) {
        self.send_ack_if_due(out);
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Output) {
        if self.ack_deadline.is_some_and(|t| t <= now) {
            self.ack_now = true;
        }
        if self.rto_deadline.is_some_and(|t| t <= now) {
            // RFC 6298 sec. 5.4-5.6: retransmit, back off, restart the timer.
            if let Some(dead) = self
                .inflight
                .iter()
                .find(|e| !e.sacked && e.transmissions > self.config.max_retries)
            {
                let (seq, attempts) = (dead.seq, dead.transmissions);
                self.fail(seq, attempts, out);
                return;
            }
            self.stats.timeouts += 1;
            self.probe_deadline = None;
            self.stats.stalled += now.saturating_duration_since(self.last_progress);
            self.last_progress = now;
            // Before the first RTT sample the RTO is `initial_rto`, a
            // guess: its expiry says the path's round trip is longer than
            // that (a 300 ms path against the 200 ms default), not that
            // the path is congested. The timer backs off and the message
            // goes again, but the controller keeps its initial window;
            // told of a loss, NewReno would go on with a window of one
            // segment and a slow-start threshold of two (growing by a
            // segment per round trip), BBR would end Startup on a model of
            // nothing (RFC 6298 sec. 5.7 likewise keeps a lost SYN out of
            // the data's congestion state).
            let measured = self.rtt.srtt().is_some();
            self.rtt.on_timeout();
            if measured {
                self.on_loss(now, LossKind::Timeout);
            }
            // RFC 6298 sec. 5.4: retransmit the earliest message the peer
            // has not acknowledged. The others are given up for lost (out of
            // the flight count) and resent by `flush` as acks open the
            // collapsed window, not in one burst into a path that just
            // dropped them.
            let mut earliest = true;
            for i in 0..self.inflight.len() {
                let entry = &mut self.inflight[i];
                if entry.sacked {
                    continue;
                }
                entry.fast_retransmitted = false;
                let len = entry.len + MESSAGE_CHARGE;
                if earliest {
                    earliest = false;
                    if entry.lost {
                        entry.lost = false;
                        self.lost -= 1;
                        self.flight += len;
                    }
                    self.stats.timeout_retransmits += 1;
                    self.retransmit(i, now, out);
                } else if !entry.lost {
                    entry.lost = true;
                    self.lost += 1;
                    self.flight -= len;
                }
            }
            // RFC 6298 sec. 5.5-5.6: the backed-off timer restarts.
            self.rto_deadline = (!self.inflight.is_empty()).then(|| now + self.rtt.rto());
        }
        if self.probe_deadline.is_some_and(|t| t <= now) {
            self.probe(now, out);
        }
        if self.pace_wait.is_some_and(|t| t <= now) {
            self.flush(now, out);
        }
        self.send_ack_if_due(out);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        earliest(
            earliest(self.rto_deadline, self.ack_deadline),
            earliest(self.pace_wait, self.probe_deadline),
        )
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod cc_tests;
