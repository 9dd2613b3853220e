//! Decoding a chunked request body (RFC 9112, section 7.1): chunk-size
//! lines, chunk data, the last chunk and the trailer section, each bounded.

use bytes::{Bytes, BytesMut};

use crate::decoder::Limits;
use crate::error::RequestError;

/// Where a chunked body's decoding stands.
#[derive(Debug)]
pub(crate) struct Chunked {
    body: BytesMut,
    phase: Phase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before a chunk-size line.
    Size,
    /// In a chunk: this many data bytes, then CRLF.
    Data(usize),
    /// After the last chunk: the trailer section.
    Trailers,
}

/// What a [`Chunked::step`] did.
pub(crate) enum ChunkStep {
    /// More bytes are needed.
    NeedMore,
    /// The body is complete.
    Done {
        body: Bytes,
        trailers: Vec<(String, Bytes)>,
    },
}

/// Most hex digits of a chunk size: 15 keep it below 2^60.
const MAX_SIZE_DIGITS: usize = 15;

impl Chunked {
    pub(crate) fn new() -> Self {
        Self {
            body: BytesMut::new(),
            phase: Phase::Size,
        }
    }

    /// Whether no chunk has been taken yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.body.is_empty() && self.phase == Phase::Size
    }

    /// Takes what it can off the front of `buf`.
    pub(crate) fn step(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<ChunkStep, RequestError> {
        loop {
            match self.phase {
                Phase::Size => {
                    let Some(line_end) = find_crlf(buf, limits.max_chunk_line) else {
                        if buf.len() >= limits.max_chunk_line {
                            return Err(RequestError::BadChunk("chunk-size line too long"));
                        }
                        return Ok(ChunkStep::NeedMore);
                    };
                    let size = chunk_size(&buf[..line_end])?;
                    if self.body.len() as u64 + size > limits.max_body as u64 {
                        return Err(RequestError::BodyTooLarge {
                            limit: limits.max_body,
                        });
                    }
                    let _ = buf.split_to(line_end + 2);
                    self.phase = if size == 0 {
                        Phase::Trailers
                    } else {
                        Phase::Data(size as usize)
                    };
                }
                Phase::Data(size) => {
                    if buf.len() < size + 2 {
                        return Ok(ChunkStep::NeedMore);
                    }
                    if &buf[size..size + 2] != b"\r\n" {
                        return Err(RequestError::BadChunk("chunk data not followed by CRLF"));
                    }
                    self.body.extend_from_slice(&buf[..size]);
                    let _ = buf.split_to(size + 2);
                    self.phase = Phase::Size;
                }
                Phase::Trailers => {
                    let mut fields = vec![httparse::EMPTY_HEADER; limits.max_headers];
                    let window = &buf[..buf.len().min(limits.max_trailers)];
                    return match httparse::parse_headers(window, &mut fields) {
                        Ok(httparse::Status::Complete((len, parsed))) => {
                            let trailers = parsed
                                .iter()
                                .map(|h| (h.name.to_owned(), Bytes::copy_from_slice(h.value)))
                                .collect();
                            let _ = buf.split_to(len);
                            Ok(ChunkStep::Done {
                                body: std::mem::take(&mut self.body).freeze(),
                                trailers,
                            })
                        }
                        Ok(httparse::Status::Partial) if buf.len() >= limits.max_trailers => {
                            Err(RequestError::BadChunk("trailer section too long"))
                        }
                        Ok(httparse::Status::Partial) => Ok(ChunkStep::NeedMore),
                        Err(httparse::Error::TooManyHeaders) => {
                            Err(RequestError::BadChunk("too many trailer fields"))
                        }
                        Err(_) => Err(RequestError::BadChunk("malformed trailer section")),
                    };
                }
            }
        }
    }
}

/// The offset of the first CRLF within the first `max` bytes.
fn find_crlf(buf: &[u8], max: usize) -> Option<usize> {
    buf[..buf.len().min(max)]
        .windows(2)
        .position(|w| w == b"\r\n")
}

/// The size a chunk-size line (without its CRLF) gives: hex digits, then
/// optional extensions after `;` (ignored; the line is bounded).
fn chunk_size(line: &[u8]) -> Result<u64, RequestError> {
    let digits = line
        .iter()
        .position(|&b| b == b';' || b == b' ' || b == b'\t')
        .map_or(line, |end| &line[..end]);
    if digits.is_empty() {
        return Err(RequestError::BadChunk("missing chunk size"));
    }
    if digits.len() > MAX_SIZE_DIGITS {
        return Err(RequestError::BadChunk("chunk size too large"));
    }
    let mut size = 0u64;
    for &d in digits {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(RequestError::BadChunk("chunk size is not hexadecimal")),
        };
        size = (size << 4) | u64::from(v);
    }
    let rest = &line[digits.len()..];
    let rest = crate::decoder::trim(rest);
    if !rest.is_empty() && rest[0] != b';' {
        return Err(RequestError::BadChunk("junk after the chunk size"));
    }
    Ok(size)
}
