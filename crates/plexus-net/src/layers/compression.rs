//! `compression`: per-message LZ4 (lz4_flex block format) above a size
//! threshold.
//!
//! **Guarantee.** The peer hands up exactly the bytes that were sent. A
//! message of at least `threshold` bytes is compressed when that makes it
//! smaller; otherwise it travels as is, so the layer adds one byte at most.
//! Decompressed sizes are bounded by `max_decompressed`: a frame announcing
//! more (a decompression bomb) is dropped with
//! [`CompressionError::TooLarge`] before any allocation; malformed LZ4 data is
//! dropped with [`CompressionError::Corrupt`]. Never panics on input.
//!
//! **Wire format.** `flag: u8 (0 = raw, 1 = lz4) | raw payload` or
//! `1 | decompressed length: u32 big-endian | lz4 block`.
//!
//! **Spec options.** `compression(threshold=1KiB, max_decompressed=16MiB)`.

use std::time::Instant;

use bytes::Bytes;

use crate::error::{ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{Interface, Layer, LinkContext, Output};
use crate::options::{LayerOptions, OptionError};
use crate::registry::LayerConfig;
use crate::wire;

const RAW: u8 = 0;
const LZ4: u8 = 1;

/// Configuration of the `compression` layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressionConfig {
    /// Messages shorter than this are never compressed. Option `threshold`;
    /// default 1 KiB.
    pub threshold: usize,
    /// Largest decompressed message accepted. Option `max_decompressed`;
    /// default 16 MiB.
    pub max_decompressed: usize,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        Self {
            threshold: 1024,
            max_decompressed: 16 << 20,
        }
    }
}

impl LayerConfig for CompressionConfig {
    const NAME: &'static str = "compression";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::default();
        for o in options.iter() {
            match o.key() {
                "threshold" => c.threshold = o.size()?,
                "max_decompressed" => c.max_decompressed = o.size()?.min(u32::MAX as usize),
                _ => return Err(o.unknown()),
            }
        }
        Ok(c)
    }

    fn build(&self, _link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Compression::new(self.clone()))
    }
}

/// Input rejected by the compression layer. Not fatal; the frame is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompressionError {
    /// Empty, or compressed without its length.
    #[error("truncated compression header")]
    Truncated,
    /// The flag byte is neither raw nor lz4.
    #[error("unknown compression flag {0}")]
    UnknownFlag(u8),
    /// Announces more than `max_decompressed` bytes.
    #[error("announced {len} decompressed bytes, limit {max}")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The LZ4 block is malformed or does not decompress to the announced
    /// length.
    #[error("corrupt lz4 block")]
    Corrupt,
}

/// Decodes one compressed-or-raw message body (after nothing was stripped),
/// bounding the output to `max` bytes. Used by the layer and the fuzzer.
///
/// # Errors
///
/// See [`CompressionError`].
pub fn decode(buf: &[u8], max: usize) -> Result<Option<Vec<u8>>, CompressionError> {
    match wire::u8_at(buf, 0) {
        None => Err(CompressionError::Truncated),
        Some(RAW) => Ok(None),
        Some(LZ4) => {
            let len = wire::u32_at(buf, 1).ok_or(CompressionError::Truncated)? as usize;
            if len > max {
                return Err(CompressionError::TooLarge { len, max });
            }
            let out = lz4_flex::block::decompress(&buf[5..], len)
                .map_err(|_| CompressionError::Corrupt)?;
            if out.len() != len {
                return Err(CompressionError::Corrupt);
            }
            Ok(Some(out))
        }
        Some(flag) => Err(CompressionError::UnknownFlag(flag)),
    }
}

/// The `compression` layer. See the [module docs](self).
#[derive(Debug)]
pub struct Compression {
    config: CompressionConfig,
}

impl Compression {
    /// A compression layer with `config`.
    pub fn new(config: CompressionConfig) -> Self {
        Self { config }
    }
}

impl Layer for Compression {
    fn name(&self) -> &'static str {
        CompressionConfig::NAME
    }

    fn limits_sends(&self) -> bool {
        false
    }

    fn flushes(&self) -> bool {
        false
    }

    fn max_frame_len(&self, below: Option<usize>) -> Option<usize> {
        let own = self.config.max_decompressed;
        Some(below.map_or(own, |b| b.saturating_sub(1).min(own)))
    }

    fn handle_send(
        &mut self,
        _now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        if frame.len() >= self.config.threshold {
            let plain = frame.to_bytes();
            let packed = lz4_flex::block::compress(&plain);
            if packed.len() + 4 < plain.len() {
                let mut compressed = Frame::from_payload(Bytes::from(packed));
                // len <= max_frame_len <= u32::MAX.
                compressed.push_header(&(plain.len() as u32).to_be_bytes());
                compressed.push_header(&[LZ4]);
                out.push_down(compressed);
                return Ok(());
            }
        }
        frame.push_header(&[RAW]);
        out.push_down(frame);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _now: Instant,
        mut frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        let mut scratch = [0; 1];
        if frame.prefix(&mut scratch).first() == Some(&RAW) {
            frame.advance(1);
            out.push_up(frame);
            return Ok(());
        }
        let data = frame.into_bytes();
        let plain =
            decode(&data, self.config.max_decompressed)?.ok_or(CompressionError::Corrupt)?;
        out.push_up(Frame::from_payload(Bytes::from(plain)));
        Ok(())
    }

    fn handle_timeout(&mut self, _now: Instant, _out: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(msg: &[u8]) -> (usize, Bytes) {
        let now = Instant::now();
        let mut layer = Compression::new(CompressionConfig::default());
        let mut out = Output::new();
        layer
            .handle_send(
                now,
                Frame::from_payload(Bytes::copy_from_slice(msg)),
                &mut out,
            )
            .expect("no send errors");
        let wire = out.pop_down().expect("one frame").to_bytes();
        layer
            .handle_receive(now, Frame::from_payload(wire.clone()), &mut out)
            .expect("valid");
        (wire.len(), out.pop_up().expect("one message").into_bytes())
    }

    #[test]
    fn compressible_message_above_threshold_shrinks_and_round_trips() {
        let msg = vec![b'a'; 10_000];
        let (wire_len, got) = round_trip(&msg);
        assert!(wire_len < 200, "wire {wire_len}");
        assert_eq!(got, msg);
    }

    #[test]
    fn small_or_incompressible_messages_cost_one_byte() {
        let (wire_len, got) = round_trip(b"tiny");
        assert_eq!((wire_len, &got[..]), (5, &b"tiny"[..]));
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let (wire_len, got) = round_trip(&noise);
        assert_eq!(wire_len, noise.len() + 1);
        assert_eq!(got, noise);
    }

    #[test]
    fn decompression_bomb_is_rejected_before_allocating() {
        let mut bomb = vec![LZ4];
        bomb.extend((u32::MAX).to_be_bytes());
        bomb.extend([0x1f, 0, 0]);
        assert_eq!(
            decode(&bomb, 1 << 20),
            Err(CompressionError::TooLarge {
                len: u32::MAX as usize,
                max: 1 << 20
            })
        );
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        assert_eq!(decode(&[], 10), Err(CompressionError::Truncated));
        assert_eq!(decode(&[7], 10), Err(CompressionError::UnknownFlag(7)));
        assert_eq!(decode(&[LZ4, 0, 0], 10), Err(CompressionError::Truncated));
        assert_eq!(
            decode(&[LZ4, 0, 0, 0, 5, 0xff, 0xff], 10),
            Err(CompressionError::Corrupt)
        );
    }
}
