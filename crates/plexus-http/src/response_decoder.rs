//! [`ResponseDecoder`]: responses out of the bytes a client connection
//! received (for the load generator and clients of the stack), bounded
//! like the request decoder.

use bytes::BytesMut;

use crate::chunked::{ChunkStep, Chunked};
use crate::decoder::{trim, Limits};

/// A decoded response: its status, field count, and sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseSummary {
    /// The status code.
    pub status: u16,
    /// Bytes of the head.
    pub head_len: usize,
    /// Bytes of the body (de-chunked).
    pub body_len: usize,
    /// Whether the server keeps the connection open.
    pub keep_alive: bool,
}

/// A response that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed response: {0}")]
pub struct ResponseDecodeError(pub &'static str);

/// Decodes the responses of one client connection, one after the other.
/// The body is counted and dropped, not kept: a load generator needs its
/// size, not its bytes.
#[derive(Debug, Default)]
pub struct ResponseDecoder {
    limits: Limits,
    state: State,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Head,
    Sized {
        summary: ResponseSummary,
        left: usize,
    },
    Chunked {
        summary: ResponseSummary,
        chunked: Box<Chunked>,
    },
    /// Until the connection closes (no length, no chunks).
    ToClose { summary: ResponseSummary },
}

impl ResponseDecoder {
    /// A decoder with `limits` (`max_body` bounds chunked bodies, which it
    /// must buffer; sized ones are counted as they pass).
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: State::Head,
        }
    }

    /// Decodes the next response from the front of `buf` (a response to a
    /// `HEAD` request when `head_request`, which has no body whatever its
    /// length says).
    ///
    /// # Errors
    ///
    /// [`ResponseDecodeError`] for bytes that are not a response.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        head_request: bool,
    ) -> Result<Option<ResponseSummary>, ResponseDecodeError> {
        loop {
            match std::mem::take(&mut self.state) {
                State::Head => {
                    let mut fields = vec![httparse::EMPTY_HEADER; self.limits.max_headers];
                    let mut parsed = httparse::Response::new(&mut fields);
                    let window = &buf[..buf.len().min(self.limits.max_head)];
                    let len = match parsed.parse(window) {
                        Ok(httparse::Status::Complete(len)) => len,
                        Ok(httparse::Status::Partial) if buf.len() >= self.limits.max_head => {
                            return Err(ResponseDecodeError("head too large"))
                        }
                        Ok(httparse::Status::Partial) => return Ok(None),
                        Err(_) => return Err(ResponseDecodeError("not an HTTP/1.x response head")),
                    };
                    let status = parsed.code.unwrap_or(0);
                    let mut keep_alive = parsed.version == Some(1);
                    let mut length = None;
                    let mut chunked = false;
                    for h in parsed.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let v = std::str::from_utf8(trim(h.value))
                                .ok()
                                .and_then(|s| s.parse::<usize>().ok())
                                .ok_or(ResponseDecodeError("invalid Content-Length"))?;
                            length = Some(v);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = trim(h.value).eq_ignore_ascii_case(b"chunked");
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            let v = trim(h.value);
                            if v.eq_ignore_ascii_case(b"close") {
                                keep_alive = false;
                            } else if v.eq_ignore_ascii_case(b"keep-alive") {
                                keep_alive = true;
                            }
                        }
                    }
                    let _ = buf.split_to(len);
                    let summary = ResponseSummary {
                        status,
                        head_len: len,
                        body_len: 0,
                        keep_alive,
                    };
                    let bodiless = head_request || matches!(status, 100..=199 | 204 | 304);
                    if (100..200).contains(&status) && status != 101 {
                        // An interim response: the final one follows.
                        continue;
                    }
                    self.state = if bodiless {
                        return Ok(Some(summary));
                    } else if chunked {
                        State::Chunked {
                            summary,
                            chunked: Box::new(Chunked::new()),
                        }
                    } else if let Some(left) = length {
                        State::Sized { summary, left }
                    } else {
                        State::ToClose { summary }
                    };
                }
                State::Sized { mut summary, left } => {
                    let take = left.min(buf.len());
                    let _ = buf.split_to(take);
                    summary.body_len += take;
                    if take == left {
                        return Ok(Some(summary));
                    }
                    self.state = State::Sized {
                        summary,
                        left: left - take,
                    };
                    return Ok(None);
                }
                State::Chunked {
                    mut summary,
                    mut chunked,
                } => match chunked.step(buf, &self.limits) {
                    Ok(ChunkStep::Done { body, .. }) => {
                        summary.body_len = body.len();
                        return Ok(Some(summary));
                    }
                    Ok(ChunkStep::NeedMore) => {
                        self.state = State::Chunked { summary, chunked };
                        return Ok(None);
                    }
                    Err(_) => return Err(ResponseDecodeError("malformed chunked body")),
                },
                State::ToClose { mut summary } => {
                    summary.body_len += buf.len();
                    buf.clear();
                    self.state = State::ToClose { summary };
                    return Ok(None);
                }
            }
        }
    }

    /// The connection closed: the response that ran until the close, if
    /// one did.
    pub fn closed(&mut self) -> Option<ResponseSummary> {
        match std::mem::take(&mut self.state) {
            State::ToClose { summary } => Some(summary),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_decode_by_length_chunks_and_close() {
        let mut d = ResponseDecoder::default();
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"[..],
        );
        let a = d.decode(&mut buf, false).unwrap().unwrap();
        assert_eq!((a.status, a.body_len, a.keep_alive), (200, 3, true));
        let b = d.decode(&mut buf, false).unwrap().unwrap();
        assert_eq!((b.status, b.body_len), (404, 2));
        assert!(buf.is_empty());
        let mut buf = BytesMut::from(&b"HTTP/1.0 200 OK\r\n\r\nbody until close"[..]);
        assert_eq!(d.decode(&mut buf, false), Ok(None));
        let c = d.closed().unwrap();
        assert_eq!((c.body_len, c.keep_alive), (16, false));
        let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"[..]);
        let h = d.decode(&mut buf, true).unwrap().unwrap();
        assert_eq!(h.body_len, 0, "a HEAD response has no body");
        assert!(d
            .decode(&mut BytesMut::from(&b"garbage\r\n\r\n"[..]), false)
            .is_err());
    }
}
