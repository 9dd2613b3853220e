//! `slicing`: fragments messages larger than a datagram and reassembles them.
//!
//! **Guarantee.** A message of up to `max_message` bytes is sent as
//! `ceil(len / (mtu - 12))` fragments of at most `mtu` bytes each; the peer
//! hands it up whole once every fragment arrived, at most once per send.
//! Slicing adds no reliability: if a fragment is lost the partial message is
//! discarded after `reassembly_timeout` (or evicted earlier to respect the
//! memory bounds); put `delivery` above it to retransmit (the whole message),
//! or below it to retransmit fragments. Duplicate fragments are ignored.
//! With `delivery` below, a fragment dropped by the timeout or an eviction
//! was acknowledged already and never comes again: the message is lost
//! for good. Such a stack needs bounds that hold every message in flight
//! and a `reassembly_timeout` longer than delivery takes to give a dead
//! link up (about 36 s with its defaults).
//!
//! **Memory.** Per peer at most `max_partials` partial messages and
//! `max_partial_bytes` bytes (payload plus 32 bytes of bookkeeping per
//! announced fragment) are held; when a new fragment would exceed either, the
//! oldest partial messages are evicted. Fragments are collected and the
//! message assembled with one copy when complete (no quadratic copying); a
//! single-fragment message is handed up without any copy.
//!
//! **Bundling.** Small messages handed over in one batch (between two
//! drains of the transmit queue, [`Layer::handle_flush`]) share a datagram
//! of at most `mtu` bytes: per-datagram costs (a system call each way, an
//! ack, a wake-up) are paid once per bundle instead of once per message. A
//! lone message still leaves at the next drain, in the plain format and
//! without a copy; bundled messages are copied once into the bundle.
//!
//! **Wire format** (big-endian). A datagram is a sequence of records:
//! `message id: u32 | fragment index: u32 | flags+count: u32 | [len: u16] |
//! bytes`. Bit 31 of the third word ([`BUNDLED`]) says that a `len` follows
//! and that the record's bytes are the next `len` bytes, after which another
//! record may start; without it (12-byte header, the plain format) the
//! record's bytes run to the end of the datagram. Zero bytes after the last
//! bundled record are padding: a bundle followed by more datagrams of the
//! same batch is padded to `mtu` when that costs at most an eighth of it, so
//! a driver can hand a run of equal-sized datagrams to the kernel in one
//! segmentation-offload call (UDP GSO). A decoder rejects `count
//! == 0`, `index >= count`, counts larger than `max_message` could need at
//! the smallest allowed MTU ([`MIN_MTU`]), and a `len` beyond the datagram;
//! the records before a malformed one are kept.
//!
//! **Spec options.** `slicing(mtu=1200, max_message=4MiB, max_partials=32,
//! max_partial_bytes=8MiB, reassembly_timeout=2s, bundle=true)`.

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{Interface, Layer, LinkContext, Output};
use crate::options::{LayerOptions, OptionError};
use crate::registry::LayerConfig;
use crate::wire;

/// Smallest accepted `mtu`; bounds the fragment count a peer may announce.
pub const MIN_MTU: usize = 256;

/// Bookkeeping bytes charged per announced fragment of a partial message.
const SLOT_COST: usize = std::mem::size_of::<Bytes>();

/// Flag in the count word: a `len: u16` follows the header and the record
/// ends after `len` bytes (a bundle of several records).
pub const BUNDLED: u32 = 1 << 31;

/// Header bytes of a bundled record (the plain header and its `len`).
pub const BUNDLED_HEADER_LEN: usize = FragmentHeader::LEN + 2;

/// Bundles are cut from buffers of this size, so a bundle costs no
/// allocation of its own (the buffer is shared until every bundle cut from
/// it has been sent and acknowledged).
const BUNDLE_CHUNK: usize = 64 << 10;

/// Configuration of the `slicing` layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicingConfig {
    /// Largest fragment frame (header included) in bytes. Option `mtu`;
    /// default 1200 (fits any IPv6 path with room for lower headers); at
    /// least [`MIN_MTU`].
    pub mtu: usize,
    /// Largest message in bytes. Option `max_message`; default 4 MiB.
    pub max_message: usize,
    /// Partial messages held at once. Option `max_partials`; default 32.
    pub max_partials: usize,
    /// Bytes held in partial messages. Option `max_partial_bytes`; default
    /// 8 MiB (must be at least what one `max_message` needs).
    pub max_partial_bytes: usize,
    /// A partial message older than this is dropped. Option
    /// `reassembly_timeout`; default 2 s.
    pub reassembly_timeout: Duration,
    /// Whether small messages sent in one batch share a datagram. Option
    /// `bundle=true|false`; default true. Costs one copy of each bundled
    /// message; a peer of any setting decodes bundles.
    pub bundle: bool,
}

impl Default for SlicingConfig {
    fn default() -> Self {
        Self {
            mtu: 1200,
            max_message: 4 << 20,
            max_partials: 32,
            max_partial_bytes: 8 << 20,
            reassembly_timeout: Duration::from_secs(2),
            bundle: true,
        }
    }
}

impl LayerConfig for SlicingConfig {
    const NAME: &'static str = "slicing";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::default();
        for o in options.iter() {
            match o.key() {
                "mtu" => c.mtu = o.size()?.clamp(MIN_MTU, u32::MAX as usize),
                "max_message" => c.max_message = o.size()?.min(u32::MAX as usize),
                "max_partials" => c.max_partials = o.count_usize()?.max(1),
                "max_partial_bytes" => c.max_partial_bytes = o.size()?,
                "reassembly_timeout" => c.reassembly_timeout = o.duration()?,
                "bundle" => c.bundle = o.flag()?,
                _ => return Err(o.unknown()),
            }
        }
        Ok(c)
    }

    fn build(&self, _link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Slicing::new(self.clone()))
    }
}

/// Fragments rejected by the slicing decoder. None is fatal: the fragment
/// (or, for [`SlicingError::TooLarge`], its partial message) is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlicingError {
    /// Shorter than the 12-byte header.
    #[error("fragment of {len} bytes is shorter than its header")]
    Truncated {
        /// Received length.
        len: usize,
    },
    /// Impossible index or count.
    #[error("impossible fragment {index} of {count}")]
    BadIndex {
        /// Announced index.
        index: u32,
        /// Announced count.
        count: u32,
    },
    /// A fragment disagrees with earlier ones of its message about the count.
    #[error("fragment count {count} disagrees with earlier {expected}")]
    InconsistentCount {
        /// Announced count.
        count: u32,
        /// Count announced by earlier fragments.
        expected: u32,
    },
    /// The fragment was already received.
    #[error("duplicate fragment {index} of message {id}")]
    Duplicate {
        /// Message id.
        id: u32,
        /// Fragment index.
        index: u32,
    },
    /// The message grew past `max_message`; its partial was dropped.
    #[error("message exceeds the limit of {max} bytes")]
    TooLarge {
        /// The limit.
        max: usize,
    },
    /// A single message would need more than `max_partial_bytes`.
    #[error("message needs more than the reassembly budget of {budget} bytes")]
    OverBudget {
        /// The budget.
        budget: usize,
    },
}

/// The fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader {
    /// Message id (per sender, wrapping).
    pub id: u32,
    /// Index of this fragment, `< count`.
    pub index: u32,
    /// Fragments in the message, `>= 1`.
    pub count: u32,
}

impl FragmentHeader {
    /// Encoded size.
    pub const LEN: usize = 12;

    /// Parses and validates a header; `max_count` bounds the count.
    ///
    /// # Errors
    ///
    /// [`SlicingError::Truncated`] or [`SlicingError::BadIndex`].
    pub fn parse(buf: &[u8], max_count: u32) -> Result<Self, SlicingError> {
        let (Some(id), Some(index), Some(count)) = (
            wire::u32_at(buf, 0),
            wire::u32_at(buf, 4),
            wire::u32_at(buf, 8),
        ) else {
            return Err(SlicingError::Truncated { len: buf.len() });
        };
        if count == 0 || index >= count || count > max_count {
            return Err(SlicingError::BadIndex { index, count });
        }
        Ok(Self { id, index, count })
    }

    /// Parses and validates the header of one record of a datagram: the
    /// header and, for a bundled record ([`BUNDLED`] set), the length of its
    /// bytes (which the caller checks against what remains). The header is
    /// [`FragmentHeader::LEN`] bytes, or [`BUNDLED_HEADER_LEN`] with a
    /// length.
    ///
    /// # Errors
    ///
    /// [`SlicingError::Truncated`] or [`SlicingError::BadIndex`].
    pub fn parse_record(buf: &[u8], max_count: u32) -> Result<(Self, Option<u16>), SlicingError> {
        let (Some(id), Some(index), Some(word)) = (
            wire::u32_at(buf, 0),
            wire::u32_at(buf, 4),
            wire::u32_at(buf, 8),
        ) else {
            return Err(SlicingError::Truncated { len: buf.len() });
        };
        let count = word & !BUNDLED;
        if count == 0 || index >= count || count > max_count {
            return Err(SlicingError::BadIndex { index, count });
        }
        let header = Self { id, index, count };
        if word & BUNDLED == 0 {
            return Ok((header, None));
        }
        match buf.get(FragmentHeader::LEN..BUNDLED_HEADER_LEN) {
            Some(&[hi, lo]) => Ok((header, Some(u16::from_be_bytes([hi, lo])))),
            _ => Err(SlicingError::Truncated { len: buf.len() }),
        }
    }

    /// Writes the header.
    pub fn emit(&self) -> [u8; 12] {
        let mut b = [0; 12];
        b[0..4].copy_from_slice(&self.id.to_be_bytes());
        b[4..8].copy_from_slice(&self.index.to_be_bytes());
        b[8..12].copy_from_slice(&self.count.to_be_bytes());
        b
    }
}

#[derive(Debug)]
struct Partial {
    id: u32,
    started: Instant,
    received: u32,
    bytes: usize,
    fragments: Vec<Option<Bytes>>,
}

impl Partial {
    fn cost(&self) -> usize {
        self.bytes + self.fragments.len() * SLOT_COST
    }
}

/// The `slicing` layer. See the [module docs](self).
#[derive(Debug)]
pub struct Slicing {
    config: SlicingConfig,
    max_count: u32,
    next_id: u32,
    partials: Vec<Partial>,
    held: usize,
    /// The open bundle's first message and its id while it is alone: sent
    /// in the plain format, uncopied, if nothing joins it before the flush.
    lone: Option<(u32, Frame)>,
    /// The open bundle's records once it has two or more (else empty).
    bundle: BytesMut,
    /// Bytes of the open bundle, as bundled records.
    open: usize,
}

impl Slicing {
    /// A slicing layer with `config`.
    pub fn new(config: SlicingConfig) -> Self {
        let per = MIN_MTU - FragmentHeader::LEN;
        let max_count = config.max_message.div_ceil(per).clamp(1, u32::MAX as usize) as u32;
        Self {
            max_count,
            next_id: 0,
            partials: Vec::with_capacity(config.max_partials),
            held: 0,
            lone: None,
            bundle: BytesMut::new(),
            open: 0,
            config,
        }
    }

    /// Partial messages held.
    pub fn partials(&self) -> usize {
        self.partials.len()
    }

    /// Bytes charged to partial messages.
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// Adds a one-fragment message to the open bundle, flushing the bundle
    /// first if the message does not fit.
    fn bundle_message(&mut self, id: u32, frame: Frame, out: &mut Output) {
        let record = BUNDLED_HEADER_LEN + frame.len();
        if self.open + record > self.config.mtu {
            self.flush_bundle(out, true);
        }
        self.open += record;
        if self.open == record {
            self.lone = Some((id, frame));
            return;
        }
        if let Some((first_id, first)) = self.lone.take() {
            if self.bundle.capacity() < self.config.mtu {
                // The previous buffer is (nearly) used up by bundles still
                // in flight; start a new one.
                self.bundle = BytesMut::with_capacity(BUNDLE_CHUNK.max(self.config.mtu));
            }
            Self::write_record(&mut self.bundle, first_id, &first);
        }
        Self::write_record(&mut self.bundle, id, &frame);
    }

    fn write_record(buf: &mut BytesMut, id: u32, frame: &Frame) {
        buf.put_u32(id);
        buf.put_u32(0);
        buf.put_u32(1 | BUNDLED);
        // The caller checked `frame.len() + BUNDLED_HEADER_LEN <= mtu`, and
        // a bundled record is only written for a message of at most
        // `u16::MAX` bytes (see `handle_send`).
        buf.put_u16(frame.len() as u16);
        frame.extend_into(buf);
    }

    /// Pushes the open bundle down: a lone message in the plain format, two
    /// or more as one datagram of bundled records, padded to `mtu` if `pad`
    /// (more datagrams follow in this batch) and the padding is short.
    fn flush_bundle(&mut self, out: &mut Output, pad: bool) {
        if let Some((id, frame)) = self.lone.take() {
            let header = FragmentHeader {
                id,
                index: 0,
                count: 1,
            };
            out.push_down_with_header(frame, &header.emit());
        } else if !self.bundle.is_empty() {
            let short = self.config.mtu - self.bundle.len();
            if pad && short <= self.config.mtu / 8 {
                // Within the capacity reserved when the bundle started.
                self.bundle.resize(self.config.mtu, 0);
            }
            out.push_down(Frame::from_payload(self.bundle.split().freeze()));
        }
        self.open = 0;
    }

    /// Hands up one received record (a whole message or a fragment).
    fn receive_record(
        &mut self,
        now: Instant,
        header: FragmentHeader,
        payload: Bytes,
        out: &mut Output,
    ) -> Result<(), SlicingError> {
        if header.count == 1 {
            out.push_up_payload(payload);
            return Ok(());
        }
        self.receive_fragment(now, header, payload, out)
    }

    /// Unpacks a datagram of bundled records whose first header is `first`.
    /// A malformed record ends the datagram; an error of one record (a
    /// duplicate fragment) does not stop the others. The first error is
    /// returned.
    fn receive_bundle(
        &mut self,
        now: Instant,
        first: (FragmentHeader, Option<u16>),
        mut rest: Bytes,
        out: &mut Output,
    ) -> Result<(), SlicingError> {
        let mut result = Ok(());
        let (mut header, mut len) = first;
        loop {
            let payload = match len {
                None => {
                    rest.advance(FragmentHeader::LEN);
                    std::mem::take(&mut rest)
                }
                Some(len) => {
                    let end = BUNDLED_HEADER_LEN + len as usize;
                    if end > rest.len() {
                        return result.and(Err(SlicingError::Truncated { len: rest.len() }));
                    }
                    let payload = rest.slice(BUNDLED_HEADER_LEN..end);
                    rest.advance(end);
                    payload
                }
            };
            let r = self.receive_record(now, header, payload, out);
            result = result.and(r);
            // The end, or padding (a record never starts with 12 zero
            // bytes: its count would be 0). Stops at the first non-zero
            // byte, within a record's first 12 bytes.
            if rest.iter().all(|&b| b == 0) {
                return result;
            }
            match FragmentHeader::parse_record(&rest, self.max_count) {
                Ok(next) => (header, len) = next,
                Err(e) => return result.and(Err(e)),
            }
        }
    }

    fn evict_oldest(&mut self) {
        if let Some(i) = (0..self.partials.len()).min_by_key(|&i| self.partials[i].started) {
            let p = self.partials.swap_remove(i);
            self.held -= p.cost();
        }
    }

    fn receive_fragment(
        &mut self,
        now: Instant,
        h: FragmentHeader,
        payload: Bytes,
        out: &mut Output,
    ) -> Result<(), SlicingError> {
        let pos = match self.partials.iter().position(|p| p.id == h.id) {
            Some(pos) => pos,
            None => {
                let cost = h.count as usize * SLOT_COST;
                if cost + payload.len() > self.config.max_partial_bytes {
                    return Err(SlicingError::OverBudget {
                        budget: self.config.max_partial_bytes,
                    });
                }
                while self.partials.len() >= self.config.max_partials
                    || self.held + cost > self.config.max_partial_bytes
                {
                    self.evict_oldest();
                }
                self.partials.push(Partial {
                    id: h.id,
                    started: now,
                    received: 0,
                    bytes: 0,
                    fragments: vec![None; h.count as usize],
                });
                self.held += cost;
                self.partials.len() - 1
            }
        };
        let p = &self.partials[pos];
        if p.fragments.len() != h.count as usize {
            return Err(SlicingError::InconsistentCount {
                count: h.count,
                expected: p.fragments.len() as u32,
            });
        }
        if p.fragments[h.index as usize].is_some() {
            return Err(SlicingError::Duplicate {
                id: h.id,
                index: h.index,
            });
        }
        if p.bytes + payload.len() > self.config.max_message {
            let p = self.partials.swap_remove(pos);
            self.held -= p.cost();
            return Err(SlicingError::TooLarge {
                max: self.config.max_message,
            });
        }
        while self.held + payload.len() > self.config.max_partial_bytes {
            // Evict others first; the current partial is the newest or in use.
            let oldest_other = (0..self.partials.len())
                .filter(|&i| self.partials[i].id != h.id)
                .min_by_key(|&i| self.partials[i].started);
            match oldest_other {
                Some(i) => {
                    let q = self.partials.swap_remove(i);
                    self.held -= q.cost();
                }
                None => {
                    let i = self.partials.iter().position(|p| p.id == h.id);
                    if let Some(i) = i {
                        let q = self.partials.swap_remove(i);
                        self.held -= q.cost();
                    }
                    return Err(SlicingError::OverBudget {
                        budget: self.config.max_partial_bytes,
                    });
                }
            }
        }
        // Evictions may have moved it.
        let Some(pos) = self.partials.iter().position(|p| p.id == h.id) else {
            return Ok(());
        };
        let p = &mut self.partials[pos];
        p.bytes += payload.len();
        p.received += 1;
        self.held += payload.len();
        p.fragments[h.index as usize] = Some(payload);
        if p.received == h.count {
            let p = self.partials.swap_remove(pos);
            self.held -= p.cost();
            let mut whole = BytesMut::with_capacity(p.bytes);
            for fragment in p.fragments.iter().flatten() {
                whole.extend_from_slice(fragment);
            }
            out.push_up(Frame::from_payload(whole.freeze()));
        }
        Ok(())
    }
}

impl Layer for Slicing {
    fn name(&self) -> &'static str {
        SlicingConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn max_frame_len(&self, _below: Option<usize>) -> Option<usize> {
        Some(self.config.max_message)
    }

    fn handle_send(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        let max = self.config.max_message;
        if frame.len() > max {
            return Err(StackSendError::TooLarge { frame, max });
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        if self.config.bundle
            && frame.len() + BUNDLED_HEADER_LEN <= self.config.mtu.min(u16::MAX as usize)
        {
            self.bundle_message(id, frame, out);
            return Ok(());
        }
        // Whatever was bundled before goes first: sends keep their order.
        // Fragments of `mtu` bytes follow, so the bundle is padded to match.
        self.flush_bundle(out, true);
        let per = self.config.mtu - FragmentHeader::LEN;
        let count = frame.len().div_ceil(per).max(1);
        if count == 1 {
            let mut frame = frame;
            frame.push_header(
                &FragmentHeader {
                    id,
                    index: 0,
                    count: 1,
                }
                .emit(),
            );
            out.push_down(frame);
            return Ok(());
        }
        for index in 0..count {
            let mut fragment = frame.slice(index * per, ((index + 1) * per).min(frame.len()));
            // count <= max_message / per, which fits u32 (max_message <= u32::MAX).
            let header = FragmentHeader {
                id,
                index: index as u32,
                count: count as u32,
            };
            fragment.push_header(&header.emit());
            out.push_down(fragment);
        }
        Ok(())
    }

    fn handle_receive(
        &mut self,
        now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        let mut scratch = [0; BUNDLED_HEADER_LEN];
        let (header, len) =
            FragmentHeader::parse_record(frame.prefix(&mut scratch), self.max_count)?;
        if len.is_some() {
            self.receive_bundle(now, (header, len), frame.into_bytes(), out)?;
            return Ok(());
        }
        frame.advance(FragmentHeader::LEN);
        if header.count == 1 {
            out.push_up(frame);
            return Ok(());
        }
        self.receive_fragment(now, header, frame.into_bytes(), out)?;
        Ok(())
    }

    fn handle_flush(&mut self, _now: Instant, out: &mut Output) {
        self.flush_bundle(out, false);
    }

    fn handle_timeout(&mut self, now: Instant, _out: &mut Output) {
        let timeout = self.config.reassembly_timeout;
        let mut i = 0;
        while i < self.partials.len() {
            if now.saturating_duration_since(self.partials[i].started) >= timeout {
                let p = self.partials.swap_remove(i);
                self.held -= p.cost();
                tracing::trace!(target: "plexus::net", id = p.id, "partial message timed out");
            } else {
                i += 1;
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.partials
            .iter()
            .map(|p| p.started + self.config.reassembly_timeout)
            .min()
    }
}

#[cfg(test)]
mod tests;
