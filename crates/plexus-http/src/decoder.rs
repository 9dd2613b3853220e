//! [`RequestDecoder`]: requests out of the bytes a connection received.

use bytes::{Bytes, BytesMut};

use crate::chunked::{ChunkStep, Chunked};
use crate::error::RequestError;
use crate::message::{Method, Request, Version};

/// The decoder's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of a request head (request line and fields). Default 16 KiB.
    pub max_head: usize,
    /// Header fields of a head (and of a chunked body's trailers). Default
    /// 64.
    pub max_headers: usize,
    /// Bytes of a body, declared or de-chunked. Default 1 MiB.
    pub max_body: usize,
    /// Bytes of a chunk-size line, extensions included. Default 256.
    pub max_chunk_line: usize,
    /// Bytes of a chunked body's trailer section. Default 8 KiB.
    pub max_trailers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_head: 16 << 10,
            max_headers: 64,
            max_body: 1 << 20,
            max_chunk_line: 256,
            max_trailers: 8 << 10,
        }
    }
}

/// What [`RequestDecoder::decode`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// The request's head asked `Expect: 100-continue` and its body has not
    /// come yet: send `HTTP/1.1 100 Continue` now (or a final response, and
    /// close), then keep decoding.
    Continue,
    /// A whole request.
    Request(Request),
}

/// Decodes the requests of one connection, one after the other (see the
/// [crate docs](crate)).
///
/// Feed it the connection's received bytes by appending them to a buffer
/// and calling [`decode`](Self::decode) until it returns `Ok(None)` (it
/// needs more). It takes what it decodes off the front of the buffer and
/// leaves the rest (a pipelined request) for the next call.
#[derive(Debug)]
pub struct RequestDecoder {
    limits: Limits,
    state: State,
}

#[derive(Debug)]
enum State {
    Head,
    /// A body of a known length.
    Sized {
        head: Head,
        len: usize,
    },
    Chunked {
        head: Head,
        chunked: Chunked,
    },
    /// Refused: the error repeats; the connection must close.
    Failed(RequestError),
}

/// A parsed head waiting for its body.
#[derive(Debug)]
struct Head {
    method: Method,
    target: String,
    version: Version,
    headers: Vec<(String, Bytes)>,
    keep_alive: bool,
    /// `Expect: 100-continue` not answered yet.
    expects: bool,
}

impl Head {
    fn into_request(self, body: Bytes) -> Request {
        Request {
            method: self.method,
            target: self.target,
            version: self.version,
            headers: self.headers,
            body,
            keep_alive: self.keep_alive,
        }
    }
}

/// How a request's body is framed.
enum Framing {
    None,
    Length(usize),
    Chunked,
}

impl RequestDecoder {
    /// A decoder with `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: State::Head,
        }
    }

    /// Whether a request has begun and not ended (a head is parsed, its
    /// body is still coming): a driver's read timeout for a request in
    /// progress applies.
    pub fn in_request(&self) -> bool {
        matches!(self.state, State::Sized { .. } | State::Chunked { .. })
    }

    /// Decodes the next request from the front of `buf`.
    ///
    /// # Errors
    ///
    /// [`RequestError`] for a request that must be refused (answer with
    /// its [`status`](RequestError::status) and close); every later call
    /// returns it again.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, RequestError> {
        let result = self.step(buf);
        if let Err(e) = &result {
            self.state = State::Failed(e.clone());
        }
        result
    }

    fn step(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, RequestError> {
        loop {
            match std::mem::replace(&mut self.state, State::Head) {
                State::Failed(e) => return Err(e),
                State::Head => {
                    let Some((head, framing)) = self.parse_head(buf)? else {
                        return Ok(None);
                    };
                    self.state = match framing {
                        Framing::None => {
                            return Ok(Some(Decoded::Request(head.into_request(Bytes::new()))))
                        }
                        Framing::Length(len) => State::Sized { head, len },
                        Framing::Chunked => State::Chunked {
                            head,
                            chunked: Chunked::new(),
                        },
                    };
                }
                State::Sized { mut head, len } => {
                    if buf.len() >= len {
                        let body = buf.split_to(len).freeze();
                        return Ok(Some(Decoded::Request(head.into_request(body))));
                    }
                    let expects = std::mem::take(&mut head.expects);
                    self.state = State::Sized { head, len };
                    return Ok(expects.then_some(Decoded::Continue));
                }
                State::Chunked {
                    mut head,
                    mut chunked,
                } => match chunked.step(buf, &self.limits)? {
                    ChunkStep::Done { body, trailers } => {
                        head.headers.extend(trailers);
                        return Ok(Some(Decoded::Request(head.into_request(body))));
                    }
                    ChunkStep::NeedMore => {
                        let expects = chunked.is_empty() && std::mem::take(&mut head.expects);
                        self.state = State::Chunked { head, chunked };
                        return Ok(expects.then_some(Decoded::Continue));
                    }
                },
            }
        }
    }

    /// Parses a request head off the front of `buf`, if whole.
    fn parse_head(&self, buf: &mut BytesMut) -> Result<Option<(Head, Framing)>, RequestError> {
        let limits = &self.limits;
        let too_large = RequestError::HeadTooLarge {
            limit: limits.max_head,
            fields: limits.max_headers,
        };
        let mut fields = vec![httparse::EMPTY_HEADER; limits.max_headers];
        let mut parsed = httparse::Request::new(&mut fields);
        let window = &buf[..buf.len().min(limits.max_head)];
        let len = match parsed.parse(window) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() >= limits.max_head => return Err(too_large),
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(too_large),
            Err(httparse::Error::Version) => return Err(RequestError::Version),
            Err(e) => return Err(RequestError::MalformedHead(describe(e))),
        };
        let version = match parsed.version {
            Some(0) => Version::Http10,
            Some(1) => Version::Http11,
            _ => return Err(RequestError::Version),
        };
        let method = Method::from_token(parsed.method.unwrap_or_default());
        let target = parsed.path.unwrap_or_default().to_owned();
        let headers: Vec<(String, Bytes)> = parsed
            .headers
            .iter()
            .map(|h| (h.name.to_owned(), Bytes::copy_from_slice(h.value)))
            .collect();
        let _ = buf.split_to(len);
        let framing = framing(&headers, version, limits)?;
        let mut keep_alive = version == Version::Http11;
        let mut expects = false;
        for (name, value) in &headers {
            if name.eq_ignore_ascii_case("connection") {
                for token in value.split(|&b| b == b',').map(trim) {
                    if token.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive = true;
                    }
                }
            } else if name.eq_ignore_ascii_case("expect") {
                if !trim(value).eq_ignore_ascii_case(b"100-continue") {
                    return Err(RequestError::Expectation(
                        String::from_utf8_lossy(value).into_owned(),
                    ));
                }
                // HTTP/1.0 clients do not wait for it (RFC 9110, 10.1.1).
                expects = version == Version::Http11;
            }
        }
        check_host(&headers, version)?;
        // Connection: close wins over keep-alive in one request.
        if headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("connection")
                && v.split(|&b| b == b',')
                    .any(|t| trim(t).eq_ignore_ascii_case(b"close"))
        }) {
            keep_alive = false;
        }
        Ok(Some((
            Head {
                method,
                target,
                version,
                headers,
                keep_alive,
                expects,
            },
            framing,
        )))
    }
}

impl Default for RequestDecoder {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

/// How the body of a request with `headers` is framed (RFC 9112, 6.3), or
/// why the request is refused.
fn framing(
    headers: &[(String, Bytes)],
    version: Version,
    limits: &Limits,
) -> Result<Framing, RequestError> {
    let mut length: Option<u64> = None;
    let mut codings: Vec<&[u8]> = Vec::new();
    let mut encoded = false;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("content-length") {
            let v = trim(value);
            if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
                return Err(RequestError::BadContentLength("not a decimal number"));
            }
            let n = std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(RequestError::BadContentLength("too large a number"))?;
            match length {
                Some(m) if m != n => {
                    return Err(RequestError::BadContentLength("two different values"))
                }
                _ => length = Some(n),
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            encoded = true;
            codings.extend(
                value
                    .split(|&b| b == b',')
                    .map(trim)
                    .filter(|c| !c.is_empty()),
            );
        }
    }
    if encoded {
        if version == Version::Http10 {
            // RFC 9112, 6.1: the framing of such a message is faulty.
            return Err(RequestError::MalformedHead(
                "Transfer-Encoding in an HTTP/1.0 request",
            ));
        }
        if length.is_some() {
            return Err(RequestError::LengthAndEncoding);
        }
        return match codings.as_slice() {
            [only] if only.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
            _ => Err(RequestError::UnsupportedEncoding(
                codings
                    .iter()
                    .map(|c| String::from_utf8_lossy(c))
                    .collect::<Vec<_>>()
                    .join(", "),
            )),
        };
    }
    match length {
        None | Some(0) => Ok(Framing::None),
        Some(n) if n > limits.max_body as u64 => Err(RequestError::BodyTooLarge {
            limit: limits.max_body,
        }),
        Some(n) => Ok(Framing::Length(n as usize)),
    }
}

/// RFC 9112, 3.2: "A server MUST respond with a 400 (Bad Request) status
/// code to any HTTP/1.1 request message that lacks a Host header field and
/// to any request message that contains more than one Host header field
/// line or a Host header field with an invalid field value." Checked after
/// the framing, whose refusals (413, 501) say more.
fn check_host(headers: &[(String, Bytes)], version: Version) -> Result<(), RequestError> {
    let mut hosts = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("host"));
    match (hosts.next(), hosts.next()) {
        (None, _) if version == Version::Http11 => Err(RequestError::MissingHost),
        (None, _) => Ok(()),
        (Some(_), Some(_)) => Err(RequestError::RepeatedHost),
        (Some((_, value)), None) if !is_authority(trim(value)) => Err(RequestError::InvalidHost),
        (Some(_), None) => Ok(()),
    }
}

/// Whether `value` is a `uri-host [ ":" port ]` (RFC 3986, 3.2.2): only
/// the characters of a registered name, an IP literal and a port; empty is
/// allowed (RFC 9110, 7.2).
fn is_authority(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(&b))
}

/// `b` without leading and trailing spaces and tabs.
pub(crate) fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !matches!(c, b' ' | b'\t'));
    let Some(start) = start else { return &[] };
    let end = b
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t'))
        .unwrap_or(start);
    &b[start..=end]
}

fn describe(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid method or target",
        httparse::Error::TooManyHeaders => "too many header fields",
        httparse::Error::Version => "invalid version",
    }
}

#[cfg(test)]
mod tests;
