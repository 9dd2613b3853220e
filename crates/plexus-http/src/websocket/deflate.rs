//! permessage-deflate (RFC 7692), sans-IO: the settings an end offers or
//! accepts the extension with ([`DeflateConfig`]), the parameters an
//! opening handshake agreed on ([`DeflateParams`]; the negotiation itself
//! is in [`handshake`](super::handshake)), and a connection's compressor
//! and decompressor, which [`WebSocket`](super::WebSocket) runs its data
//! messages through once the extension is agreed.
//!
//! **Guarantees.**
//!
//! - A message received with RSV1 on its first frame is inflated as its
//!   payload arrives (RFC 7692, 7.2.2: the four bytes `00 00 ff ff` are put
//!   back after its last frame), into a buffer that never holds more than
//!   the connection's `max_message` plus one byte: a message that inflates
//!   past `max_message` fails the connection with 1009 at that byte,
//!   however small it was on the wire, so a "zip bomb" costs at most one
//!   bounded message. Text is checked as UTF-8 as it is inflated (1007).
//! - Data that does not inflate (an invalid block, a back reference before
//!   the window's start) fails the connection with 1007. Bytes after a
//!   final block (BFINAL) inside a message are ignored, and the next
//!   message starts a new stream.
//! - Each message sent is compressed whole and ends with a sync flush
//!   whose tail is taken off (RFC 7692, 7.2.1); RSV1 is set on its frame.
//!   Compressing never fails a send: should the compressor fail, the
//!   message goes uncompressed (RFC 7692, 6: RSV1 clear) and the
//!   compressor starts over, which the peer's decompressor needs no notice
//!   of.
//! - Context takeover (RFC 7692, 7.1.1): a direction whose
//!   `*_no_context_takeover` was agreed starts every message with an empty
//!   window (our compressor is reset after each message we send, our
//!   decompressor after each one we receive); otherwise the window carries
//!   over.
//! - Window bits (RFC 7692, 7.1.2) from 8 to 15 are agreed. zlib cannot
//!   deflate with a 256-byte window, so where 8 is agreed for our
//!   compressor it uses 9, as zlib itself does: its back references then
//!   reach 2^9 - 262 = 250 bytes at most, inside the 256 agreed. The
//!   decompressor likewise uses at least 9 bits, which decodes every
//!   stream an 8-bit window produces.
//!
//! **Memory.** With the extension agreed, a connection holds a compressor
//! of about `2^(w+2) + 128 KiB` (w its window bits: 256 KiB at 15) and a
//! decompressor of about `2^w + 7 KiB` (40 KiB at 15), on top of the
//! message bound; without it, nothing.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::Role;

/// The four bytes a sync flush ends with: taken off each message sent and
/// put back after each one received (RFC 7692, 7.2.1 and 7.2.2).
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// The smallest step an inflated message's buffer grows by.
const MIN_GROWTH: usize = 4 << 10;

/// The smallest and largest LZ77 window, in bits, RFC 7692 lets a
/// handshake agree on.
pub(crate) const WINDOW_BITS: std::ops::RangeInclusive<u8> = 8..=15;

/// How an end offers (a client) or accepts (a server) permessage-deflate:
/// set [`WsConfig::deflate`](super::WsConfig::deflate) to it.
///
/// Window bits are the base-2 logarithm of the LZ77 window in bytes;
/// values outside 8..=15 are taken as the nearest bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateConfig {
    /// Compression level of what we send, 0 (stored, no compression) to 9
    /// (smallest, slowest); larger is taken as 9. Default 6 (zlib's).
    pub level: u8,
    /// Largest window our compressor uses: a server answers with the
    /// smaller of this and the client's `server_max_window_bits`; a
    /// client offers `client_max_window_bits` with it (without a value at
    /// 15). Default 15. The compressor's memory is about `2^(bits+2) +
    /// 128 KiB`.
    pub max_window_bits: u8,
    /// Largest window the peer is asked to compress with: a client offers
    /// `server_max_window_bits` with it, a server answers with
    /// `client_max_window_bits` if the client offered that parameter. 15
    /// asks for nothing. Default 15. Our decompressor's memory is about
    /// `2^bits + 7 KiB`.
    pub peer_max_window_bits: u8,
    /// Start every message we send with an empty window (our compressor
    /// is reset after each message): a client offers
    /// `client_no_context_takeover`, a server answers with
    /// `server_no_context_takeover`. Repeated content compresses less.
    /// Default false.
    pub no_context_takeover: bool,
    /// Ask the peer to do the same: a client offers
    /// `server_no_context_takeover`, a server answers with
    /// `client_no_context_takeover`. Default false.
    pub peer_no_context_takeover: bool,
}

impl Default for DeflateConfig {
    fn default() -> Self {
        Self {
            level: 6,
            max_window_bits: 15,
            peer_max_window_bits: 15,
            no_context_takeover: false,
            peer_no_context_takeover: false,
        }
    }
}

impl DeflateConfig {
    /// [`max_window_bits`](Self::max_window_bits) within 8..=15.
    pub(crate) fn own_bits(&self) -> u8 {
        clamp_bits(self.max_window_bits)
    }

    /// [`peer_max_window_bits`](Self::peer_max_window_bits) within 8..=15.
    pub(crate) fn peer_bits(&self) -> u8 {
        clamp_bits(self.peer_max_window_bits)
    }
}

fn clamp_bits(bits: u8) -> u8 {
    bits.clamp(*WINDOW_BITS.start(), *WINDOW_BITS.end())
}

/// permessage-deflate as an opening handshake agreed on it, in the
/// header's terms (RFC 7692, 7.1): what the server's and the client's
/// compressors do. Both ends derive the same value from the handshake;
/// give it to [`WebSocket::with_extensions`](super::WebSocket::with_extensions)
/// through [`Extensions`](super::handshake::Extensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateParams {
    /// The server starts every message with an empty window.
    pub server_no_context_takeover: bool,
    /// The client starts every message with an empty window.
    pub client_no_context_takeover: bool,
    /// The server's window, in bits (8..=15; 15 when nothing was said).
    pub server_max_window_bits: u8,
    /// The client's window, in bits (8..=15; 15 when nothing was said).
    pub client_max_window_bits: u8,
}

impl Default for DeflateParams {
    /// No parameter: both windows of 15 bits, carried over between
    /// messages.
    fn default() -> Self {
        Self {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
        }
    }
}

/// Why a compressed message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum InflateError {
    /// It inflates past the message bound (close with 1009); what was
    /// inflated is in the buffer, at most the bound plus one byte.
    #[error("a compressed message that inflates over the size limit")]
    TooBig,
    /// It is not valid deflate data (close with 1007); the decompressor's
    /// state is lost.
    #[error("a compressed message that does not inflate")]
    Corrupt,
}

/// A connection's compressor and decompressor.
pub(crate) struct Codec {
    compress: Compress,
    /// Reset the compressor after each message (no context takeover).
    reset_compress: bool,
    decompress: Decompress,
    /// The decompressor's window bits (9..=15).
    decompress_bits: u8,
    /// Start the decompressor over after each message.
    reset_decompress: bool,
    /// The peer's stream ended (a final block) in the message being read.
    ended: bool,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("reset_compress", &self.reset_compress)
            .field("decompress_bits", &self.decompress_bits)
            .field("reset_decompress", &self.reset_decompress)
            .finish_non_exhaustive()
    }
}

impl Codec {
    /// The codec of the `role` end of a connection that agreed on
    /// `params`, compressing at `level` (0..=9; larger is 9).
    pub(crate) fn new(role: Role, params: &DeflateParams, level: u8) -> Self {
        let server = (
            params.server_max_window_bits,
            params.server_no_context_takeover,
        );
        let client = (
            params.client_max_window_bits,
            params.client_no_context_takeover,
        );
        let ((own_bits, own_reset), (peer_bits, peer_reset)) = match role {
            Role::Server => (server, client),
            Role::Client => (client, server),
        };
        // zlib deflates and inflates raw streams with 9 to 15 bits (see the
        // module docs for 8).
        let own_bits = own_bits.clamp(9, 15);
        let decompress_bits = peer_bits.clamp(9, 15);
        Self {
            compress: Compress::new_with_window_bits(
                Compression::new(u32::from(level.min(9))),
                false,
                own_bits,
            ),
            reset_compress: own_reset,
            decompress: Decompress::new_with_window_bits(false, decompress_bits),
            decompress_bits,
            reset_decompress: peer_reset,
            ended: false,
        }
    }

    /// `data` compressed as one message's payload, the sync flush's tail
    /// taken off; `None` if the compressor failed (send `data` as it is:
    /// the compressor has started over).
    pub(crate) fn compress(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        if data.is_empty() {
            // An empty stored block's header, at a byte boundary: with the
            // tail put back it is the whole block (RFC 7692, 7.2.3.6). The
            // compressor is left as it was, at the end of a flush.
            return Some(vec![0x00]);
        }
        let mut out = Vec::with_capacity(data.len() / 2 + 64);
        let mut input = data;
        let flushed = loop {
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(1024));
            }
            let (before_in, before_out) = (self.compress.total_in(), self.compress.total_out());
            if self
                .compress
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .is_err()
            {
                break false;
            }
            let consumed = usize::try_from(self.compress.total_in() - before_in).unwrap_or(0);
            let produced = self.compress.total_out() != before_out;
            input = input.get(consumed..).unwrap_or_default();
            // Output room left over: the flush is complete.
            if input.is_empty() && out.len() < out.capacity() {
                break out.ends_with(&TAIL);
            }
            if consumed == 0 && !produced && out.len() < out.capacity() {
                // No progress with input and room: give up.
                break false;
            }
        };
        if !flushed {
            self.compress.reset();
            return None;
        }
        out.truncate(out.len() - TAIL.len());
        if self.reset_compress {
            self.compress.reset();
        }
        Some(out)
    }

    /// Inflates `chunk`, the next payload bytes of a compressed message,
    /// onto `out`; `last` says the message ends with it (the tail is put
    /// back and, without context takeover, the decompressor starts over).
    ///
    /// # Errors
    ///
    /// [`InflateError::TooBig`] once `out` would hold more than `max`
    /// bytes (it never holds more than `max + 1`);
    /// [`InflateError::Corrupt`] for data that does not inflate.
    pub(crate) fn decompress(
        &mut self,
        chunk: &[u8],
        last: bool,
        out: &mut Vec<u8>,
        max: usize,
    ) -> Result<(), InflateError> {
        self.inflate(chunk, out, max)?;
        if last {
            self.inflate(&TAIL, out, max)?;
            if self.reset_decompress || self.ended {
                self.restart_decompress();
            }
        }
        Ok(())
    }

    /// Starts the decompressor over: a new stream with an empty window.
    pub(crate) fn restart_decompress(&mut self) {
        // A new decompressor rather than `reset`, which would go back to
        // a 15-bit window.
        self.decompress = Decompress::new_with_window_bits(false, self.decompress_bits);
        self.ended = false;
    }

    fn inflate(
        &mut self,
        mut input: &[u8],
        out: &mut Vec<u8>,
        max: usize,
    ) -> Result<(), InflateError> {
        // `out` filled up on the last call: more may wait inside. Every
        // call ends with `out` not full, so nothing waits from an earlier
        // one.
        let mut full = false;
        while (!input.is_empty() || full) && !self.ended {
            if out.len() == out.capacity() {
                // Grow by doubling, never past the bound plus the one byte
                // that shows it was passed.
                let target = out
                    .len()
                    .saturating_add(out.capacity().max(MIN_GROWTH))
                    .min(max.saturating_add(1));
                if target <= out.len() {
                    return Err(InflateError::TooBig);
                }
                out.reserve_exact(target - out.len());
            }
            let (before_in, before_out) = (self.decompress.total_in(), self.decompress.total_out());
            let status = self
                .decompress
                .decompress_vec(input, out, FlushDecompress::Sync)
                .map_err(|_| InflateError::Corrupt)?;
            if out.len() > max {
                return Err(InflateError::TooBig);
            }
            let consumed = usize::try_from(self.decompress.total_in() - before_in).unwrap_or(0);
            let produced = self.decompress.total_out() != before_out;
            input = input.get(consumed..).unwrap_or_default();
            full = out.len() == out.capacity();
            if status == Status::StreamEnd {
                // RFC 7692, 7.2.3.4: a final block ends the stream; what
                // follows in this message is not read.
                self.ended = true;
            } else if consumed == 0 && !produced && !full && !input.is_empty() {
                // Input left and room for output, yet no progress: zlib
                // cannot go on (this loop would not end otherwise).
                return Err(InflateError::Corrupt);
            }
        }
        Ok(())
    }
}
