//! Why a request was refused, with the status code to answer.

/// A request the decoder refuses. Answer with [`status`](Self::status)
/// and close the connection: what follows it cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The request line or a header field is malformed.
    #[error("malformed request head: {0}")]
    MalformedHead(&'static str),
    /// The head is longer than the limit, or has more fields.
    #[error("request head over the limit of {limit} bytes or {fields} fields")]
    HeadTooLarge {
        /// The byte limit.
        limit: usize,
        /// The field limit.
        fields: usize,
    },
    /// The body (declared, or chunks so far) is over the limit.
    #[error("request body over the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// `Content-Length` is not plain digits, or given twice with different
    /// values.
    #[error("invalid Content-Length: {0}")]
    BadContentLength(&'static str),
    /// Both `Content-Length` and `Transfer-Encoding`: a proxy and this
    /// server could frame the body differently (request smuggling).
    #[error("both Content-Length and Transfer-Encoding: refused (request smuggling)")]
    LengthAndEncoding,
    /// A transfer coding this server does not decode, or `chunked` not
    /// last.
    #[error("unsupported Transfer-Encoding: {0}")]
    UnsupportedEncoding(String),
    /// A chunk-size line is malformed or too long, a chunk lacks its CRLF,
    /// or the trailer section is malformed.
    #[error("malformed chunked body: {0}")]
    BadChunk(&'static str),
    /// A version other than HTTP/1.0 and HTTP/1.1.
    #[error("unsupported HTTP version")]
    Version,
    /// An `Expect` other than `100-continue`.
    #[error("unsupported Expect: {0}")]
    Expectation(String),
    /// An HTTP/1.1 request without a `Host` field (RFC 9112, 3.2).
    #[error("HTTP/1.1 request without a Host field")]
    MissingHost,
    /// A request with more than one `Host` field (RFC 9112, 3.2).
    #[error("more than one Host field")]
    RepeatedHost,
    /// A `Host` field that is not a host and an optional port (RFC 9112,
    /// 3.2; RFC 3986, 3.2.2).
    #[error("invalid Host field")]
    InvalidHost,
}

impl RequestError {
    /// The status code that answers this error.
    pub fn status(&self) -> u16 {
        match self {
            RequestError::MalformedHead(_)
            | RequestError::BadContentLength(_)
            | RequestError::LengthAndEncoding
            | RequestError::BadChunk(_)
            | RequestError::MissingHost
            | RequestError::RepeatedHost
            | RequestError::InvalidHost => 400,
            RequestError::HeadTooLarge { .. } => 431,
            RequestError::BodyTooLarge { .. } => 413,
            RequestError::UnsupportedEncoding(_) => 501,
            RequestError::Version => 505,
            RequestError::Expectation(_) => 417,
        }
    }
}

/// Why the HTTP layer closed a connection: the
/// [`LinkError::Layer`](plexus_net::LinkError::Layer) source it closes with
/// (`downcast_ref::<HttpClose>()`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpClose {
    /// A request was refused; its answer, with this status, was the last
    /// thing written.
    #[error("refused a request with {status}: {why}")]
    Refused {
        /// The status answered.
        status: u16,
        /// Why, as answered in the body.
        why: String,
    },
    /// A request or response said `Connection: close` (or was HTTP/1.0
    /// without keep-alive), and everything owed was written.
    #[error("connection: close")]
    ConnectionClose,
    /// No request for this long.
    #[error("idle for {0:?}")]
    Idle(std::time::Duration),
}
