//! Encoding responses: a whole one with `Content-Length`, or a chunked one
//! piece by piece.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use crate::body::Body;
use crate::message::Version;

/// A response with its whole body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The status code (100-999).
    pub status: u16,
    /// Header fields; `Content-Length` and `Connection` are written by the
    /// encoder and must not be among them.
    pub headers: Vec<(String, Bytes)>,
    /// The body: bytes, or a region of a file ([`Body::File`]).
    pub body: Body,
}

impl Response {
    /// A response of `status` with `body` and no header fields.
    pub fn new(status: u16, body: impl Into<Body>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// Adds a header field.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// The reason phrase of a status code (empty for unknown codes, which
/// HTTP/1.1 allows).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// A response the encoder refuses to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseError {
    /// A header name that is not a token, or a value with CR, LF or NUL:
    /// written out, it would split the response (response splitting).
    #[error(
        "invalid header field {name:?}: a name must be a token and a value free of CR, LF and NUL"
    )]
    InvalidHeader {
        /// The field's name (lossy).
        name: String,
    },
    /// A status code outside 100-999.
    #[error("status code {0} is not three digits")]
    Status(u16),
    /// A file body ([`Body::File`]) asked of an encoder that writes into a
    /// buffer: its bytes are sent by the connection (`HttpLayer`), not
    /// copied here.
    #[error("a file body is sent by the connection, not encoded into a buffer")]
    FileBody,
}

fn check_head(status: u16, headers: &[(String, Bytes)]) -> Result<(), ResponseError> {
    if !(100..=999).contains(&status) {
        return Err(ResponseError::Status(status));
    }
    for (name, value) in headers {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token || value.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(ResponseError::InvalidHeader { name: name.clone() });
        }
    }
    Ok(())
}

/// What a response's head says about its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Persistence {
    /// `Connection: close`: the connection closes after the response.
    Close,
    /// Nothing: an HTTP/1.1 connection persists unless told otherwise
    /// (RFC 9112, 9.3).
    Default,
    /// `Connection: keep-alive`: an HTTP/1.0 client keeps its connection
    /// only if the response says so (RFC 9112, C.2.2).
    KeepAlive,
}

impl Persistence {
    /// What the response to a request of `version` says, the connection
    /// staying open or not.
    pub(crate) fn of(version: Version, keep_alive: bool) -> Self {
        match (keep_alive, version) {
            (false, _) => Persistence::Close,
            (true, Version::Http11) => Persistence::Default,
            (true, Version::Http10) => Persistence::KeepAlive,
        }
    }
}

fn put_head(
    out: &mut BytesMut,
    status: u16,
    headers: &[(String, Bytes)],
    persistence: Persistence,
) {
    out.put_slice(b"HTTP/1.1 ");
    put_decimal(out, u64::from(status));
    out.put_u8(b' ');
    out.put_slice(reason_phrase(status).as_bytes());
    out.put_slice(b"\r\n");
    for (name, value) in headers {
        out.put_slice(name.as_bytes());
        out.put_slice(b": ");
        out.put_slice(value);
        out.put_slice(b"\r\n");
    }
    match persistence {
        Persistence::Close => out.put_slice(b"connection: close\r\n"),
        Persistence::Default => {}
        Persistence::KeepAlive => out.put_slice(b"connection: keep-alive\r\n"),
    }
}

/// Appends `response` with a `Content-Length` to `out`. `head_only`
/// leaves the body out (the answer to a `HEAD`), keeping its length;
/// `keep_alive: false` adds `Connection: close`. A 1xx, 204 or 304
/// response carries no body and no length (RFC 9110, 8.6).
///
/// # Errors
///
/// [`ResponseError`] for a header field or status that cannot be written,
/// or a file body (except for `head_only`); `out` is unchanged.
pub fn encode_response(
    out: &mut BytesMut,
    response: &Response,
    keep_alive: bool,
    head_only: bool,
) -> Result<(), ResponseError> {
    let bytes = match &response.body {
        Body::Bytes(bytes) => Some(bytes),
        Body::File(_) if head_only => None,
        Body::File(_) => return Err(ResponseError::FileBody),
    };
    if encode_head(out, response, keep_alive)? && !head_only {
        out.put_slice(bytes.map_or(&[][..], |b| &b[..]));
    }
    Ok(())
}

/// Appends the head of `response` (with its `Content-Length`) to `out`,
/// not its body; returns whether a body follows (not for 1xx, 204, 304),
/// for a writer that sends the body as a buffer of its own.
///
/// # Errors
///
/// As [`encode_response`].
pub fn encode_head(
    out: &mut BytesMut,
    response: &Response,
    keep_alive: bool,
) -> Result<bool, ResponseError> {
    encode_head_as(out, response, Persistence::of(Version::Http11, keep_alive))
}

/// [`encode_head`] saying `persistence` about the connection.
pub(crate) fn encode_head_as(
    out: &mut BytesMut,
    response: &Response,
    persistence: Persistence,
) -> Result<bool, ResponseError> {
    check_head(response.status, &response.headers)?;
    let bodiless = matches!(response.status, 100..=199 | 204 | 304);
    out.reserve(64);
    put_head(out, response.status, &response.headers, persistence);
    if !bodiless {
        out.put_slice(b"content-length: ");
        put_decimal(out, response.body.len() as u64);
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    Ok(!bodiless)
}

/// Appends the head of a chunked response (`Transfer-Encoding: chunked`)
/// to `out`; its body follows as [`encode_chunk`]s and one
/// [`encode_last_chunk`].
///
/// # Errors
///
/// As [`encode_response`].
pub fn encode_chunked_head(
    out: &mut BytesMut,
    status: u16,
    headers: &[(String, Bytes)],
    keep_alive: bool,
) -> Result<(), ResponseError> {
    encode_chunked_head_as(
        out,
        status,
        headers,
        Persistence::of(Version::Http11, keep_alive),
    )
}

/// [`encode_chunked_head`] saying `persistence` about the connection.
pub(crate) fn encode_chunked_head_as(
    out: &mut BytesMut,
    status: u16,
    headers: &[(String, Bytes)],
    persistence: Persistence,
) -> Result<(), ResponseError> {
    check_head(status, headers)?;
    put_head(out, status, headers, persistence);
    out.put_slice(b"transfer-encoding: chunked\r\n\r\n");
    Ok(())
}

/// Appends one chunk of a chunked body to `out` (nothing for empty data:
/// an empty chunk would end the body).
pub fn encode_chunk(out: &mut BytesMut, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    encode_chunk_size(out, data.len());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// Appends the size line of a chunk of `len` bytes (its data and a CRLF
/// follow), for a writer that sends the data as a buffer of its own.
pub fn encode_chunk_size(out: &mut BytesMut, len: usize) {
    out.put_slice(format!("{len:x}\r\n").as_bytes());
}

/// Appends the last chunk (and no trailers) to `out`.
pub fn encode_last_chunk(out: &mut BytesMut) {
    out.put_slice(b"0\r\n\r\n");
}

fn put_decimal(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[i..]);
}
