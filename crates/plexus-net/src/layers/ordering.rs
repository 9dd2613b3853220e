//! `ordering`: FIFO per peer, strict or lossy.
//!
//! **Guarantee.** Messages are handed up in the order they were sent, each
//! at most once; messages arriving early wait in a bounded pending buffer.
//!
//! * `strict` (default): waits for the gap to be filled (put `delivery`
//!   below). If the buffer would overflow (a message `max_pending` or more
//!   ahead, or over `max_pending_bytes`) or a gap stays open longer than
//!   `gap_timeout`, the guarantee cannot be kept and the link is closed
//!   ([`OrderingError::Overflow`] / [`LinkError::OrderingStalled`]).
//! * `lossy`: when the buffer is full or the gap is older than
//!   `gap_timeout`, the missing messages are skipped: what is pending is
//!   handed up in order and [`LinkEvent::GapSkipped`] is raised. A message
//!   arriving after its turn (late) or twice is dropped, so nothing is handed
//!   up twice and the sequence handed up always increases.
//!
//! **Memory.** A ring of `max_pending` slots allocated once, when the first
//! message has to wait; at most
//! `max_pending_bytes` of payload held.
//!
//! **Wire format.** `seq: u64 big-endian | payload`.
//!
//! **Spec options.** `ordering(mode=strict|lossy, max_pending=1024,
//! max_pending_bytes=16MiB, gap_timeout=60s)`; in lossy mode `gap_timeout`
//! defaults to 100 ms.

use std::time::{Duration, Instant};

use crate::error::{LinkError, ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{Interface, Layer, LinkContext, LinkEvent, Output};
use crate::options::{LayerOptions, OptionError};
use crate::registry::LayerConfig;
use crate::wire;

/// What to do about a gap that is not filled in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderingMode {
    /// Wait; close the link if the buffer overflows or the gap times out.
    Strict,
    /// Skip the gap; drop late and duplicate messages.
    Lossy,
}

/// Configuration of the `ordering` layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderingConfig {
    /// Option `mode=strict|lossy`; default strict.
    pub mode: OrderingMode,
    /// Largest distance ahead of the next expected message that can be
    /// buffered. Option `max_pending`; default 1024 (at least the delivery
    /// window below, 1024 by default). Costs one frame slot (128 bytes)
    /// each, allocated when the first message has to wait (never on a link
    /// without reordering or loss).
    pub max_pending: usize,
    /// Payload bytes held in the buffer. Option `max_pending_bytes`; default
    /// 16 MiB.
    pub max_pending_bytes: usize,
    /// Longest time a gap may stay open. Option `gap_timeout`; default 60 s
    /// in strict mode (longer than `delivery` takes to give up with its
    /// defaults, so a dead link is reported as a delivery failure), 100 ms in
    /// lossy mode.
    pub gap_timeout: Duration,
}

impl Default for OrderingConfig {
    fn default() -> Self {
        Self::strict()
    }
}

impl OrderingConfig {
    /// Strict mode with its defaults.
    pub fn strict() -> Self {
        Self {
            mode: OrderingMode::Strict,
            max_pending: 1024,
            max_pending_bytes: 16 << 20,
            gap_timeout: Duration::from_secs(60),
        }
    }

    /// Lossy mode with its defaults.
    pub fn lossy() -> Self {
        Self {
            mode: OrderingMode::Lossy,
            gap_timeout: Duration::from_millis(100),
            ..Self::strict()
        }
    }
}

impl LayerConfig for OrderingConfig {
    const NAME: &'static str = "ordering";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::strict();
        let mut timeout = None;
        for o in options.iter() {
            match o.key() {
                "mode" => {
                    let lossy = o.word(&["strict", "lossy"], "strict or lossy")? == 1;
                    let (pending, bytes) = (c.max_pending, c.max_pending_bytes);
                    c = if lossy { Self::lossy() } else { Self::strict() };
                    (c.max_pending, c.max_pending_bytes) = (pending, bytes);
                }
                "max_pending" => c.max_pending = o.count_usize()?.clamp(1, 1 << 16),
                "max_pending_bytes" => c.max_pending_bytes = o.size()?,
                "gap_timeout" => timeout = Some(o.duration()?),
                _ => return Err(o.unknown()),
            }
        }
        if let Some(t) = timeout {
            c.gap_timeout = t;
        }
        Ok(c)
    }

    fn build(&self, _link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Ordering::new(self.clone()))
    }

    fn guarantees(&self) -> crate::GuaranteeEffect {
        crate::GuaranteeEffect::adds(crate::Guarantees {
            reliable: false,
            ordered: true,
        })
    }
}

/// Input rejected by the ordering layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OrderingError {
    /// Shorter than the 8-byte header. Dropped.
    #[error("truncated header ({len} bytes)")]
    Truncated {
        /// Received length.
        len: usize,
    },
    /// Sequence number `u64::MAX` is reserved (never sent: it would take
    /// 2^64 messages). Dropped.
    #[error("reserved sequence number")]
    Reserved,
    /// Its turn has passed or it is already buffered. Dropped.
    #[error("late or duplicate message {seq} (expecting {expected})")]
    Stale {
        /// Its sequence number.
        seq: u64,
        /// The next expected sequence number.
        expected: u64,
    },
    /// Strict mode only: buffering it would exceed the bounds. Fatal.
    #[error("message {seq} overflows the pending buffer (expecting {expected})")]
    Overflow {
        /// Its sequence number.
        seq: u64,
        /// The next expected sequence number.
        expected: u64,
    },
}

impl OrderingError {
    /// Whether the link must be closed.
    pub fn is_fatal(&self) -> bool {
        matches!(self, OrderingError::Overflow { .. })
    }
}

/// The ordering header: the sender's message sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderingHeader {
    /// Sequence number, from 0.
    pub seq: u64,
}

impl OrderingHeader {
    /// Encoded size.
    pub const LEN: usize = 8;

    /// Parses a header.
    ///
    /// # Errors
    ///
    /// [`OrderingError::Truncated`], [`OrderingError::Reserved`].
    pub fn parse(buf: &[u8]) -> Result<Self, OrderingError> {
        match wire::u64_at(buf, 0) {
            None => Err(OrderingError::Truncated { len: buf.len() }),
            Some(u64::MAX) => Err(OrderingError::Reserved),
            Some(seq) => Ok(Self { seq }),
        }
    }

    /// Writes the header.
    pub fn emit(&self) -> [u8; 8] {
        self.seq.to_be_bytes()
    }
}

/// The `ordering` layer. See the [module docs](self).
#[derive(Debug)]
pub struct Ordering {
    config: OrderingConfig,
    send_seq: u64,
    /// Next sequence number to hand up.
    next: u64,
    /// `slots[seq % max_pending]` holds message `seq` for `next < seq <
    /// next + max_pending`; empty until the first message waits.
    slots: Vec<Option<Frame>>,
    /// `slots.len() - 1` when that is a power of two.
    slot_mask: Option<u64>,
    pending: usize,
    pending_bytes: usize,
    /// When the current gap opened (first message buffered behind it).
    gap_since: Option<Instant>,
}

impl Ordering {
    /// An ordering layer with `config`.
    pub fn new(config: OrderingConfig) -> Self {
        Self {
            slots: Vec::new(),
            slot_mask: ring_mask(config.max_pending),
            config,
            send_seq: 0,
            next: 0,
            pending: 0,
            pending_bytes: 0,
            gap_since: None,
        }
    }

    /// Messages waiting for a gap to be filled.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// The next sequence number to be handed up.
    pub fn next_expected(&self) -> u64 {
        self.next
    }

    fn slot(&self, seq: u64) -> usize {
        // A power-of-two ring (the default) takes a mask, not a division.
        match self.slot_mask {
            Some(mask) => (seq & mask) as usize,
            None => (seq % self.config.max_pending as u64) as usize,
        }
    }

    /// Whether message `seq` waits in the buffer.
    fn is_pending(&self, seq: u64) -> bool {
        self.pending > 0 && self.slots[self.slot(seq)].is_some()
    }

    /// Hands up `next` and every consecutive pending message.
    fn release_ready(&mut self, now: Instant, out: &mut Output) {
        // `pending` counts the occupied slots: none, nothing to release (the
        // in-order fast path).
        if self.pending == 0 {
            self.gap_since = None;
            return;
        }
        loop {
            let slot = self.slot(self.next);
            // Test before taking: `take` moves the whole slot even when empty.
            if !self.is_pending(self.next) {
                break;
            }
            let Some(frame) = self.slots[slot].take() else {
                break;
            };
            self.pending -= 1;
            self.pending_bytes -= frame.len();
            self.next += 1;
            out.push_up(frame);
        }
        // A gap that remains is a new one: its age starts now.
        self.gap_since = (self.pending > 0).then_some(now);
    }

    /// Lossy: skips to the first pending message and releases from there.
    fn skip_gap(&mut self, now: Instant, out: &mut Output) {
        let start = self.next;
        while self.pending > 0 && !self.is_pending(self.next) {
            self.next += 1;
        }
        if self.next > start {
            out.push_event(LinkEvent::GapSkipped {
                missing: self.next - start,
            });
        }
        self.gap_since = None;
        self.release_ready(now, out);
    }
}

impl Layer for Ordering {
    fn name(&self) -> &'static str {
        OrderingConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn flushes(&self) -> bool {
        false
    }

    fn max_frame_len(&self, below: Option<usize>) -> Option<usize> {
        below.map(|b| b.saturating_sub(OrderingHeader::LEN))
    }

    fn handle_send(
        &mut self,
        _now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        frame.push_header(&OrderingHeader { seq: self.send_seq }.emit());
        self.send_seq += 1;
        out.push_down(frame);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        let mut scratch = [0; OrderingHeader::LEN];
        let seq = OrderingHeader::parse(frame.prefix(&mut scratch))?.seq;
        frame.advance(OrderingHeader::LEN);
        let expected = self.next;
        if seq < expected
            || (seq - expected < self.config.max_pending as u64 && self.is_pending(seq))
        {
            return Err(OrderingError::Stale { seq, expected }.into());
        }
        if seq == expected {
            self.next += 1;
            out.push_up(frame);
            self.release_ready(now, out);
            return Ok(());
        }
        let lossy = self.config.mode == OrderingMode::Lossy;
        let len = frame.len();
        let cap = self.config.max_pending as u64;
        let too_far = seq - self.next >= cap;
        let too_big = self.pending_bytes + len > self.config.max_pending_bytes;
        if too_far || too_big {
            if !lossy {
                return Err(OrderingError::Overflow { seq, expected }.into());
            }
            // Skip forward until `seq` fits: hand up what is pending, in order.
            while self.pending > 0
                && seq >= self.next
                && (seq - self.next >= cap
                    || self.pending_bytes + len > self.config.max_pending_bytes)
            {
                self.skip_gap(now, out);
            }
            if seq < self.next {
                return Err(OrderingError::Stale {
                    seq,
                    expected: self.next,
                }
                .into());
            }
            if seq - self.next >= cap || len > self.config.max_pending_bytes {
                // Nothing pending and still out of reach: skip straight to it.
                out.push_event(LinkEvent::GapSkipped {
                    missing: seq - self.next,
                });
                self.next = seq + 1;
                out.push_up(frame);
                self.gap_since = None;
                return Ok(());
            }
            if seq == self.next {
                self.next += 1;
                out.push_up(frame);
                self.release_ready(now, out);
                return Ok(());
            }
        }
        if self.slots.is_empty() {
            self.slots = (0..self.config.max_pending).map(|_| None).collect();
        }
        let slot = self.slot(seq);
        self.slots[slot] = Some(frame);
        self.pending += 1;
        self.pending_bytes += len;
        self.gap_since.get_or_insert(now);
        Ok(())
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Output) {
        let Some(since) = self.gap_since else {
            return;
        };
        if now.saturating_duration_since(since) < self.config.gap_timeout {
            return;
        }
        match self.config.mode {
            OrderingMode::Lossy => self.skip_gap(now, out),
            OrderingMode::Strict => out.close(LinkError::OrderingStalled {
                missing: self.next,
                waited_ms: now.saturating_duration_since(since).as_millis() as u64,
            }),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.gap_since.map(|t| t + self.config.gap_timeout)
    }
}

/// `len - 1` if `len` is a power of two: `seq % len == seq & mask`.
pub(crate) fn ring_mask(len: usize) -> Option<u64> {
    len.is_power_of_two().then(|| len as u64 - 1)
}

#[cfg(test)]
mod tests;
