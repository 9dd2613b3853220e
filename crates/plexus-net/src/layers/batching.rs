//! `batching`: packs the small messages of one send batch into one frame
//! for the layers below, and unpacks them on receipt.
//!
//! **Guarantee.** The peer hands up exactly the messages that were sent, in
//! the order they were sent, each byte-identical; a frame that carries a
//! batch is delivered, lost, retransmitted and ordered by the layers below
//! as one unit, so the messages in it share its fate. Put the layer on top
//! of the stack (`udp / slicing / delivery / ordering / batching`): every
//! per-frame cost below it (a sequence number, an entry in the
//! retransmission queue, an ack, a reorder slot, a fragment header) is then
//! paid once per batch instead of once per message.
//!
//! **When a batch leaves.** Messages handed over between two drains of the
//! transmit queue ([`Layer::handle_flush`]) form the batches: a batch is
//! pushed down when the next message would make it larger than
//! `max_batch`, and at the flush. Holding messages until the flush adds no
//! latency (a driver drains right after every batch of input). A lone
//! message, an empty one and one too large to share a batch travel alone in
//! the single format, without a copy; batched messages are copied once into
//! the batch.
//!
//! **Wire format.** `kind: u8` then either `0 (single) | message` (the
//! message runs to the end of the frame) or `1 (batch) | record*`, each
//! record `len: LEB128 varint (1-3 bytes) | len bytes` with `1 <= len`,
//! records running to the end of the frame. A decoder rejects an unknown
//! kind, a batch longer than its own `max_batch`, an empty batch, an empty
//! record, a varint longer than three bytes, and a length beyond the frame,
//! with [`BatchingError`]; nothing of a malformed batch is handed up. The
//! error is fatal (the link closes): under a stack that checks what it
//! delivers, the peer sent that frame. On a stack without such a check
//! (`udp / batching`) a forged datagram can therefore close the link; put
//! `encryption` below to rule that out.
//!
//! **Memory.** Sender: the open batch, at most `max_batch` bytes, cut from
//! 64 KiB buffers so a batch costs no allocation of its own (a buffer lives
//! until every batch cut from it has been sent and acknowledged). Receiver:
//! no state; records are handed up as slices of the received frame (so one
//! kept message keeps its whole frame alive), and a frame longer than
//! `max_batch` is rejected, so one frame fans out into at most
//! `max_batch / 2` messages.
//!
//! **Limits below.** `max_batch` is lowered to what the layer below accepts
//! ([`Layer::bind_below`]), so a batch never exceeds it.
//!
//! **Spec options.** `batching(max_batch=1KiB)` (at least 16 bytes, at most
//! 1 MiB). The default fits a batch and the headers of `delivery`,
//! `ordering` and `slicing` in one datagram of slicing's default 1200-byte
//! MTU, so a lost datagram loses one batch.

use std::time::Instant;

use bytes::{BufMut, BytesMut};

use crate::error::{ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{Interface, Layer, LinkContext, Output};
use crate::options::{LayerOptions, OptionError};
use crate::packed::Packed;
use crate::registry::LayerConfig;

/// Kind byte of a frame carrying one message.
pub const SINGLE: u8 = 0;
/// Kind byte of a frame carrying a batch of records.
pub const BATCH: u8 = 1;
/// Longest record length prefix: three LEB128 bytes (lengths below 2 MiB).
pub const MAX_VARINT_LEN: usize = 3;

/// Smallest and largest `max_batch`.
const MIN_BATCH: usize = 16;
const MAX_BATCH: usize = 1 << 20;
/// Batches are cut from buffers of this size (see the module docs).
const BATCH_CHUNK: usize = 64 << 10;

/// Configuration of the `batching` layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchingConfig {
    /// Largest batch frame in bytes (kind byte and length prefixes
    /// included). Option `max_batch`; default 1 KiB. A message that cannot
    /// share a batch of this size travels alone.
    pub max_batch: usize,
}

impl Default for BatchingConfig {
    fn default() -> Self {
        Self { max_batch: 1024 }
    }
}

impl LayerConfig for BatchingConfig {
    const NAME: &'static str = "batching";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::default();
        for o in options.iter() {
            match o.key() {
                "max_batch" => c.max_batch = o.size()?.clamp(MIN_BATCH, MAX_BATCH),
                _ => return Err(o.unknown()),
            }
        }
        Ok(c)
    }

    fn build(&self, _link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Batching::new(self.clone()))
    }
}

/// A malformed frame. Fatal: the link is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchingError {
    /// The frame is empty (no kind byte).
    #[error("empty frame: no batching kind byte")]
    Empty,
    /// The kind byte is neither single (0) nor batch (1).
    #[error("unknown batching kind {0}")]
    UnknownKind(u8),
    /// A batch without records.
    #[error("batch without records")]
    EmptyBatch,
    /// A record of length zero (empty messages travel alone).
    #[error("empty record at offset {offset}")]
    EmptyRecord {
        /// Offset of its length prefix in the frame.
        offset: usize,
    },
    /// A length prefix that is longer than three bytes or cut off by the
    /// end of the frame.
    #[error("malformed record length at offset {offset}")]
    BadLength {
        /// Offset of the length prefix in the frame.
        offset: usize,
    },
    /// A batch longer than the receiver's `max_batch` (both ends must run
    /// the same stack).
    #[error("batch of {len} bytes exceeds max_batch {max}")]
    TooLong {
        /// The frame's length.
        len: usize,
        /// The receiver's limit.
        max: usize,
    },
    /// A record that runs past the end of the frame.
    #[error(
        "record of {len} bytes at offset {offset} runs past the end of the {frame} byte frame"
    )]
    Truncated {
        /// Offset of its length prefix.
        offset: usize,
        /// Its announced length.
        len: usize,
        /// The frame's length.
        frame: usize,
    },
}

/// Reads the LEB128 length prefix at `at`: `(len, prefix bytes)`.
fn read_len(buf: &[u8], at: usize) -> Result<(usize, usize), BatchingError> {
    let mut len = 0usize;
    for i in 0..MAX_VARINT_LEN {
        let byte = *buf
            .get(at + i)
            .ok_or(BatchingError::BadLength { offset: at })?;
        len |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((len, i + 1));
        }
    }
    Err(BatchingError::BadLength { offset: at })
}

/// Appends `len` as a LEB128 varint (`len` < 2 MiB: at most three bytes).
fn put_len(buf: &mut BytesMut, mut len: usize) {
    debug_assert!(len < 1 << (7 * MAX_VARINT_LEN));
    while len >= 0x80 {
        buf.put_u8((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    buf.put_u8(len as u8);
}

/// Wire bytes of the record of a message of `len` bytes (its length prefix
/// and itself).
pub(crate) fn record_len(len: usize) -> usize {
    len_of_len(len) + len
}

/// Whether a message of `len` bytes may travel in a batch of at most
/// `max_batch` bytes (it is not empty, and its record fits behind the kind
/// byte).
pub(crate) fn batchable(len: usize, max_batch: usize) -> bool {
    len > 0 && record_len(len) < max_batch
}

/// Bytes of the length prefix of a record of `len` bytes.
fn len_of_len(len: usize) -> usize {
    match len {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        _ => 3,
    }
}

/// Decodes one frame of the layer's wire format into the ranges of the
/// messages it carries (`start..end` into `buf`), checking the whole frame
/// before returning any. Used by the layer and the fuzzer.
///
/// # Errors
///
/// See [`BatchingError`].
pub fn decode(buf: &[u8], mut each: impl FnMut(usize, usize)) -> Result<(), BatchingError> {
    match buf.first() {
        None => Err(BatchingError::Empty),
        Some(&SINGLE) => {
            each(1, buf.len());
            Ok(())
        }
        Some(&BATCH) => {
            if buf.len() == 1 {
                return Err(BatchingError::EmptyBatch);
            }
            // Checked in full first: a malformed batch hands up nothing.
            let mut at = 1;
            while at < buf.len() {
                let (len, prefix) = read_len(buf, at)?;
                if len == 0 {
                    return Err(BatchingError::EmptyRecord { offset: at });
                }
                if len > buf.len() - at - prefix {
                    return Err(BatchingError::Truncated {
                        offset: at,
                        len,
                        frame: buf.len(),
                    });
                }
                at += prefix + len;
            }
            let mut at = 1;
            while at < buf.len() {
                let (len, prefix) = read_len(buf, at)?;
                each(at + prefix, at + prefix + len);
                at += prefix + len;
            }
            Ok(())
        }
        Some(&kind) => Err(BatchingError::UnknownKind(kind)),
    }
}

/// The `batching` layer. See the [module docs](self).
#[derive(Debug)]
pub struct Batching {
    /// `max_batch`, bounded by what the layer below accepts
    /// ([`Layer::bind_below`]).
    limit: usize,
    /// The first message of the open batch, kept uncopied: if no second
    /// one comes before the flush it leaves alone in the single format.
    first: Option<Frame>,
    /// The open batch (kind byte and records), once it holds two messages;
    /// empty otherwise, its spare capacity the buffer the next batch is
    /// cut from.
    open: BytesMut,
    batches: u64,
    batched_messages: u64,
}

impl Batching {
    /// A batching layer with `config`.
    pub fn new(config: BatchingConfig) -> Self {
        Self {
            limit: config.max_batch,
            first: None,
            open: BytesMut::new(),
            batches: 0,
            batched_messages: 0,
        }
    }

    /// Batch frames this layer built so far, and the messages they carried
    /// (a message sent alone counts in neither).
    pub fn batches_sent(&self) -> (u64, u64) {
        (self.batches, self.batched_messages)
    }

    /// The largest batch frame, in bytes: `max_batch`, or less if the layer
    /// below accepts less.
    pub fn max_batch(&self) -> usize {
        self.limit
    }

    /// Pushes down whatever is open: the held message alone, or the batch.
    fn emit(&mut self, out: &mut Output) {
        if let Some(frame) = self.first.take() {
            out.push_down_with_header(frame, &[SINGLE]);
            return;
        }
        if self.open.is_empty() {
            return;
        }
        self.batches += 1;
        let batch = self.open.split().freeze();
        out.push_down(Frame::from_payload(batch));
    }

    /// Starts the open batch with the held message `first`, then room for
    /// at least `need` more bytes in the same buffer.
    fn open_batch(&mut self, first: Frame, need: usize) {
        let total = 1 + len_of_len(first.len()) + first.len() + need;
        if self.open.capacity() < total.max(self.limit) {
            // Reclaims the chunk if every batch cut from it is gone.
            self.open.reserve(BATCH_CHUNK.max(self.limit));
        }
        self.open.put_u8(BATCH);
        put_len(&mut self.open, first.len());
        first.extend_into(&mut self.open);
        self.batched_messages += 1;
    }

    fn append(&mut self, message: &impl Message) {
        put_len(&mut self.open, message.len());
        message.extend_into(&mut self.open);
        self.batched_messages += 1;
    }

    /// Takes one message from above: into the open batch if it fits, else
    /// what is open leaves first.
    fn send(&mut self, message: impl Message, out: &mut Output) {
        let len = message.len();
        if !batchable(len, self.limit) {
            // Order: what is open leaves first.
            self.emit(out);
            out.push_down_with_header(message.into_frame(), &[SINGLE]);
            return;
        }
        let record = len_of_len(len) + len;
        if let Some(first) = self.first.take() {
            if 1 + len_of_len(first.len()) + first.len() + record <= self.limit {
                self.open_batch(first, record);
                self.append(&message);
            } else {
                out.push_down_with_header(first, &[SINGLE]);
                self.first = Some(message.into_frame());
            }
            return;
        }
        if self.open.is_empty() {
            self.first = Some(message.into_frame());
            return;
        }
        if self.open.len() + record > self.limit {
            self.emit(out);
            self.first = Some(message.into_frame());
            return;
        }
        self.append(&message);
    }
}

/// What the layer batches: a frame, or a packed message's bytes (copied
/// into a frame only if it is held or leaves alone).
trait Message {
    fn len(&self) -> usize;
    fn extend_into(&self, buf: &mut BytesMut);
    fn into_frame(self) -> Frame;
}

impl Message for Frame {
    fn len(&self) -> usize {
        Frame::len(self)
    }

    fn extend_into(&self, buf: &mut BytesMut) {
        Frame::extend_into(self, buf);
    }

    fn into_frame(self) -> Frame {
        self
    }
}

impl Message for &[u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn extend_into(&self, buf: &mut BytesMut) {
        buf.extend_from_slice(self);
    }

    fn into_frame(self) -> Frame {
        Frame::copy_from_slice(self)
    }
}

impl Layer for Batching {
    fn name(&self) -> &'static str {
        BatchingConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn bind_below(&mut self, below: Option<usize>) {
        if let Some(below) = below {
            self.limit = self.limit.min(below);
        }
    }

    fn max_frame_len(&self, below: Option<usize>) -> Option<usize> {
        below.map(|b| b.saturating_sub(1))
    }

    fn handle_send(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        self.send(frame, out);
        Ok(())
    }

    fn handle_send_packed(
        &mut self,
        _now: Instant,
        messages: &mut Packed<'_>,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        for message in messages {
            self.send(message, out);
        }
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        let mut kind = [0; 1];
        if frame.prefix(&mut kind).first() == Some(&SINGLE) {
            frame.advance(1);
            out.push_up(frame);
            return Ok(());
        }
        // The peer builds batches of at most `limit` bytes (the same stack
        // on both ends): a longer one would fan out into more messages than
        // a batch can hold.
        if frame.len() > self.limit {
            return Err(BatchingError::TooLong {
                len: frame.len(),
                max: self.limit,
            }
            .into());
        }
        let data = frame.into_bytes();
        decode(&data, |start, end| {
            out.push_up_payload(data.slice(start..end))
        })?;
        Ok(())
    }

    fn handle_flush(&mut self, _now: Instant, out: &mut Output) {
        self.emit(out);
    }

    fn handle_timeout(&mut self, _now: Instant, _out: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
