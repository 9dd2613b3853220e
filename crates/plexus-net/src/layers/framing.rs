//! `framing`: length-prefixed messages over a byte stream.
//!
//! **Guarantee.** Turns an ordered, reliable byte stream (`tcp`, `uds`,
//! `tls`) into messages: every message handed to `handle_send` comes out of
//! the peer's stack whole and alone, however the stream was chunked. Order and
//! reliability are the transport's. A peer announcing a frame longer than
//! `max_frame` closes the link ([`FramingError::FrameTooLarge`] is fatal):
//! memory held for a partial frame never exceeds `max_frame + 4` bytes.
//!
//! **Wire format.** `len: u32 big-endian | payload (len bytes)`.
//!
//! **Spec options.** `framing(max_frame=16MiB)`.
//!
//! The decoder follows tokio-util's `Decoder`: [`decode`] returns `Ok(None)`
//! when more bytes are needed and `Err` when the stream is corrupt. The layer
//! itself decodes straight out of the received chunks: a frame wholly inside
//! one chunk is handed up as a slice of that chunk (no copy); only a frame
//! split across chunks is copied once into a reassembly buffer.
//!
//! A run of frames handed down together ([`Layer::handle_send_run`]) leaves
//! as few frames: the small ones, prefixed, are copied into one buffer of
//! up to [`RUN_BYTES`] (what the layer below accepts, if less), which the
//! transport writes as it is; a large one keeps its own buffer behind its
//! prefix. The bytes on the stream are the same as for frames handed down
//! one by one.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{take_front, DataUnit, Interface, Layer, LinkContext, Output};
use crate::options::{LayerOptions, OptionError};
use crate::packed::Packed;
use crate::registry::LayerConfig;
use crate::wire;

/// Configuration of the `framing` layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramingConfig {
    /// Largest payload in one frame, in bytes. Option `max_frame`; default
    /// 16 MiB. Memory for a partial frame is bounded by this (plus 4 bytes).
    pub max_frame_len: usize,
}

impl Default for FramingConfig {
    fn default() -> Self {
        Self {
            max_frame_len: 16 << 20,
        }
    }
}

impl LayerConfig for FramingConfig {
    const NAME: &'static str = "framing";
    const INTERFACE: Interface = Interface {
        needs: DataUnit::ByteStream,
        offers: DataUnit::Message,
    };

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut config = Self::default();
        for o in options.iter() {
            match o.key() {
                "max_frame" => config.max_frame_len = o.size()?.min(u32::MAX as usize),
                _ => return Err(o.unknown()),
            }
        }
        Ok(config)
    }

    fn build(&self, _link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Framing::new(self.clone()))
    }
}

/// Errors of the framing decoder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FramingError {
    /// The peer announced a frame longer than the limit. Fatal: the stream
    /// cannot be resynchronised, the link is closed.
    #[error("announced frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The announced length.
        len: u64,
        /// The configured limit.
        max: usize,
    },
}

impl FramingError {
    /// Whether the link must be closed (always: a stream cannot resync).
    pub fn is_fatal(&self) -> bool {
        true
    }
}

/// The frame header: a 4-byte big-endian payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length in bytes.
    pub len: u32,
}

impl FrameHeader {
    /// Encoded size.
    pub const LEN: usize = 4;

    /// Parses a header from the start of `buf`, checking the announced length
    /// against `max`. `Ok(None)`: fewer than 4 bytes.
    ///
    /// # Errors
    ///
    /// [`FramingError::FrameTooLarge`].
    pub fn parse(buf: &[u8], max: usize) -> Result<Option<FrameHeader>, FramingError> {
        let Some(len) = wire::u32_at(buf, 0) else {
            return Ok(None);
        };
        if len as usize > max {
            return Err(FramingError::FrameTooLarge {
                len: len.into(),
                max,
            });
        }
        Ok(Some(FrameHeader { len }))
    }

    /// Writes the header.
    pub fn emit(&self) -> [u8; 4] {
        self.len.to_be_bytes()
    }
}

/// Decodes one frame from the front of `src`, tokio-util `Decoder` style:
/// `Ok(Some(payload))` consumed a whole frame, `Ok(None)` needs more bytes
/// (nothing consumed), `Err` means the stream is corrupt. Never panics.
///
/// # Errors
///
/// [`FramingError::FrameTooLarge`] when the announced length exceeds `max`.
pub fn decode(src: &mut BytesMut, max: usize) -> Result<Option<Bytes>, FramingError> {
    let Some(header) = FrameHeader::parse(src, max)? else {
        return Ok(None);
    };
    let total = FrameHeader::LEN + header.len as usize;
    if src.len() < total {
        src.reserve(total - src.len());
        return Ok(None);
    }
    let mut frame = src.split_to(total);
    frame.advance(FrameHeader::LEN);
    Ok(Some(frame.freeze()))
}

/// The most bytes a run of small frames is gathered into
/// ([`Layer::handle_send_run`]).
pub const RUN_BYTES: usize = 16 << 10;

/// The largest frame copied into a run's buffer; a longer one goes down
/// with its own buffer (a copy would cost more than the frame it saves).
const RUN_COPY_MAX: usize = 1024;

/// The `framing` layer. See the [module docs](self).
#[derive(Debug)]
pub struct Framing {
    config: FramingConfig,
    /// Bytes of a frame split across chunks (header included).
    partial: BytesMut,
    /// The run being gathered: prefixed small frames, sent down as one.
    run: BytesMut,
    /// The most bytes of one gathered run: [`RUN_BYTES`], or less if the
    /// layer below takes less.
    run_max: usize,
}

impl Framing {
    /// A framing layer with `config`.
    pub fn new(config: FramingConfig) -> Self {
        Self {
            config,
            partial: BytesMut::new(),
            run: BytesMut::new(),
            run_max: RUN_BYTES,
        }
    }

    /// Sends the run gathered so far down as one frame.
    /// Writes the header of a frame of `len` bytes (at most
    /// [`RUN_COPY_MAX`]) into the run, sealing it first if the frame does
    /// not fit; the caller writes the payload after it.
    fn open_record(&mut self, len: usize, out: &mut Output) {
        let framed = FrameHeader::LEN + len;
        if self.run.len() + framed > self.run_max {
            self.seal_run(out);
        }
        if self.run.capacity() - self.run.len() < framed {
            self.run.reserve(self.run_max);
        }
        // Fits u32: at most RUN_COPY_MAX.
        self.run
            .extend_from_slice(&FrameHeader { len: len as u32 }.emit());
    }

    fn seal_run(&mut self, out: &mut Output) {
        if !self.run.is_empty() {
            out.push_down(Frame::from_payload(self.run.split().freeze()));
        }
    }

    /// Bytes held for a partial frame.
    pub fn buffered(&self) -> usize {
        self.partial.len()
    }

    /// Bytes the partial frame will hold once whole (its header included),
    /// as its header announces; what is held while the header itself is
    /// incomplete. A driver bounding the memory of many streams together
    /// counts this: a peer's announced frame is charged before it arrives.
    pub fn partial_len(&self) -> usize {
        match FrameHeader::parse(&self.partial, self.config.max_frame_len) {
            Ok(Some(header)) => FrameHeader::LEN + header.len as usize,
            _ => self.partial.len(),
        }
    }

    /// Completes the partial frame from `data`; returns whether it is done.
    fn fill_partial(&mut self, data: &mut Bytes, out: &mut Output) -> Result<(), FramingError> {
        if self.partial.len() < FrameHeader::LEN {
            let take = (FrameHeader::LEN - self.partial.len()).min(data.len());
            self.partial.extend_from_slice(&data[..take]);
            data.advance(take);
        }
        let Some(header) = FrameHeader::parse(&self.partial, self.config.max_frame_len)? else {
            return Ok(());
        };
        let total = FrameHeader::LEN + header.len as usize;
        let take = (total - self.partial.len()).min(data.len());
        self.partial.extend_from_slice(&data[..take]);
        data.advance(take);
        if self.partial.len() == total {
            let mut frame = self.partial.split().freeze();
            frame.advance(FrameHeader::LEN);
            out.push_up_payload(frame);
        }
        Ok(())
    }
}

impl Layer for Framing {
    fn name(&self) -> &'static str {
        FramingConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn flushes(&self) -> bool {
        false
    }

    fn bind_below(&mut self, below: Option<usize>) {
        if let Some(below) = below {
            self.run_max = self.run_max.min(below);
        }
    }

    fn max_frame_len(&self, _below: Option<usize>) -> Option<usize> {
        Some(self.config.max_frame_len)
    }

    /// Framing only prepends a length: a file region stays at the end.
    fn passes_file_regions(&self) -> bool {
        true
    }

    fn handle_send(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        let max = self.config.max_frame_len;
        let len = frame.len();
        if len > max {
            return Err(StackSendError::TooLarge { frame, max });
        }
        // Fits u32: max_frame_len is capped at u32::MAX when configured.
        let header = FrameHeader { len: len as u32 };
        out.push_down_with_header(frame, &header.emit());
        Ok(())
    }

    fn handle_send_run(
        &mut self,
        now: Instant,
        frames: &mut VecDeque<Frame>,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        if frames.len() < 2 {
            // Nothing to gather: the frame goes down as it is.
            return match take_front(frames) {
                Some(frame) => self.handle_send(now, frame, out),
                None => Ok(()),
            };
        }
        while let Some(frame) = frames.front() {
            let len = frame.len();
            let framed = FrameHeader::LEN + len;
            if len > RUN_COPY_MAX.min(self.config.max_frame_len)
                || framed > self.run_max
                || frame.has_file_region()
            {
                // On its own (and refused there if too long), after what
                // was gathered before it.
                self.seal_run(out);
                let frame = take_front(frames).expect("a front frame");
                self.handle_send(now, frame, out)?;
                continue;
            }
            self.open_record(len, out);
            frame.extend_into(&mut self.run);
            take_front(frames);
        }
        self.seal_run(out);
        Ok(())
    }

    fn handle_send_packed(
        &mut self,
        now: Instant,
        messages: &mut Packed<'_>,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        while let Some(message) = messages.front() {
            let len = message.len();
            let framed = FrameHeader::LEN + len;
            if len > RUN_COPY_MAX.min(self.config.max_frame_len) || framed > self.run_max {
                // On its own (and refused there if too long), after what
                // was gathered before it.
                self.seal_run(out);
                messages.next();
                self.handle_send(now, Frame::copy_from_slice(message), out)?;
                continue;
            }
            self.open_record(len, out);
            self.run.extend_from_slice(message);
            messages.next();
        }
        self.seal_run(out);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        let mut data = frame.into_bytes();
        while !data.is_empty() {
            if !self.partial.is_empty() {
                self.fill_partial(&mut data, out)?;
                continue;
            }
            match FrameHeader::parse(&data, self.config.max_frame_len)? {
                Some(header) if data.len() >= FrameHeader::LEN + header.len as usize => {
                    let end = FrameHeader::LEN + header.len as usize;
                    if data.len() == end {
                        // The rest of the chunk is this frame (the usual
                        // case): hand the chunk itself up. A slice would bump
                        // a reference count, or allocate one for a
                        // vector-backed chunk.
                        data.advance(FrameHeader::LEN);
                        out.push_up_payload(std::mem::take(&mut data));
                    } else {
                        out.push_up_payload(data.slice(FrameHeader::LEN..end));
                        data.advance(end);
                    }
                }
                _ => {
                    self.partial.extend_from_slice(&data);
                    data.clear();
                }
            }
        }
        Ok(())
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
mod tests {
    use super::*;

    fn now() -> Instant {
        Instant::now()
    }

    fn encode(msgs: &[&[u8]]) -> Vec<u8> {
        let mut layer = Framing::new(FramingConfig::default());
        let mut out = Output::new();
        let mut wire = Vec::new();
        for m in msgs {
            layer
                .handle_send(
                    now(),
                    Frame::from_payload(Bytes::copy_from_slice(m)),
                    &mut out,
                )
                .expect("within limit");
            while let Some(f) = out.pop_down() {
                wire.extend(f.chunks().flatten());
            }
        }
        wire
    }

    fn decode_chunks(layer: &mut Framing, chunks: &[&[u8]]) -> Result<Vec<Bytes>, ReceiveError> {
        let mut out = Output::new();
        for c in chunks {
            layer.handle_receive(
                now(),
                Frame::from_payload(Bytes::copy_from_slice(c)),
                &mut out,
            )?;
        }
        Ok(std::iter::from_fn(|| out.pop_up().map(Frame::into_bytes)).collect())
    }

    #[test]
    fn messages_survive_any_split_of_the_stream() {
        let wire = encode(&[b"hello", b"", b"world!"]);
        for cut in 0..=wire.len() {
            let mut layer = Framing::new(FramingConfig::default());
            let got = decode_chunks(&mut layer, &[&wire[..cut], &wire[cut..]]).expect("valid");
            assert_eq!(got, [&b"hello"[..], b"", b"world!"], "cut at {cut}");
            assert_eq!(layer.buffered(), 0);
        }
    }

    #[test]
    fn one_byte_chunks_reassemble() {
        let wire = encode(&[b"abc", b"defgh"]);
        let chunks: Vec<&[u8]> = wire.chunks(1).collect();
        let mut layer = Framing::new(FramingConfig::default());
        assert_eq!(
            decode_chunks(&mut layer, &chunks).expect("valid"),
            [&b"abc"[..], b"defgh"]
        );
    }

    #[test]
    fn frame_inside_one_chunk_is_not_copied() {
        let chunk = Bytes::from(encode(&[b"zero-copy"]));
        let mut layer = Framing::new(FramingConfig::default());
        let mut out = Output::new();
        layer
            .handle_receive(now(), Frame::from_payload(chunk.clone()), &mut out)
            .expect("valid");
        let msg = out.pop_up().expect("one message").into_bytes();
        assert_eq!(msg.as_ptr(), chunk[4..].as_ptr());
    }

    #[test]
    fn announced_length_over_limit_is_fatal() {
        let mut layer = Framing::new(FramingConfig { max_frame_len: 8 });
        let err = decode_chunks(&mut layer, &[&[0, 0, 0, 9, 1]]).unwrap_err();
        assert!(err.is_fatal());
        assert_eq!(
            err,
            ReceiveError::Framing(FramingError::FrameTooLarge { len: 9, max: 8 })
        );
    }

    #[test]
    fn oversized_send_is_handed_back() {
        let mut layer = Framing::new(FramingConfig { max_frame_len: 2 });
        let err = layer
            .handle_send(
                now(),
                Frame::from_payload(Bytes::from_static(b"abc")),
                &mut Output::new(),
            )
            .unwrap_err();
        assert!(matches!(err, StackSendError::TooLarge { max: 2, .. }));
        assert_eq!(err.into_frame().len(), 3);
    }

    #[test]
    fn tokio_style_decoder_needs_more_then_yields() {
        let mut src = BytesMut::from(&[0, 0, 0, 3, b'a'][..]);
        assert_eq!(decode(&mut src, 16), Ok(None));
        src.extend_from_slice(b"bc\x00");
        assert_eq!(decode(&mut src, 16), Ok(Some(Bytes::from_static(b"abc"))));
        assert_eq!(decode(&mut src, 16), Ok(None));
        assert_eq!(&src[..], &[0]);
    }
}
