//! HTTP/1.1 for Plexus, sans-IO: bytes in, requests out; responses in,
//! bytes out. No socket, no clock, no task: a driver (a transport, a layer
//! of the composable stack, a test) feeds what it read and writes what it
//! is given.
//!
//! ```text
//!  bytes from the peer ─► RequestDecoder::decode ─► Decoded::Request(Request)
//!                                                  Decoded::Continue (send 100)
//!  Response ─► encode_response (Content-Length) ─► bytes to the peer
//!           └► encode_chunked_head / encode_chunk / encode_last_chunk
//! ```
//!
//! On top: the [`HttpLayer`] (`http` in stack specs, `tcp / http`) and,
//! with the `server` feature, the actor web server ([`server`]).
//!
//! Request heads are parsed by `httparse`; everything around it (bodies by
//! `Content-Length` or chunked, trailers, keep-alive, pipelined requests,
//! `Expect: 100-continue`) is this crate's.
//!
//! # What it guarantees
//!
//! - **Bounded**: a head larger than [`Limits::max_head`] or with more
//!   than [`Limits::max_headers`] fields, a body larger than
//!   [`Limits::max_body`] (declared or chunked), a chunk-size line or a
//!   trailer section past its bound: each is refused with an error before
//!   more is buffered. The decoder holds at most the head bound plus the
//!   body bound.
//! - **Typed refusals with their status**: every [`RequestError`] names
//!   the status code to answer with ([`RequestError::status`]) and the
//!   connection must then be closed (nothing after a malformed request can
//!   be framed).
//! - **No request smuggling**: a request with both `Content-Length` and
//!   `Transfer-Encoding`, with `Content-Length` values that differ, with a
//!   `Content-Length` that is not plain digits, or with a transfer coding
//!   other than a final `chunked` is refused (RFC 9112, section 6.3), so no
//!   proxy in front can read a different body length than this decoder.
//! - **One host**: an HTTP/1.1 request without `Host`, any request with
//!   two, or a `Host` that is not a host and port, is refused with 400
//!   (RFC 9112, 3.2); an absolute-form target is read like its origin form
//!   ([`Request::path`], [`Request::host`]).
//! - **Pipelining**: requests are decoded one after the other from one
//!   buffer, in order; the driver answers them in that order.
//! - **Never panics** on any input (a fuzz target checks it).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod body;
mod chunked;
mod decoder;
mod error;
pub mod layer;
#[cfg(feature = "loadgen")]
pub mod loadgen;
mod message;
mod response;
mod response_decoder;
#[cfg(feature = "server")]
pub mod server;
pub mod telemetry;
pub mod websocket;
pub mod wire;
#[cfg(feature = "server")]
pub mod ws_transport;

pub use body::Body;
pub use decoder::{Decoded, Limits, RequestDecoder};
pub use error::{HttpClose, RequestError};
pub use layer::{HttpConfig, HttpLayer, HttpStats, HttpTotals};
pub use message::{Method, Request, Version};
pub use response::{
    encode_chunk, encode_chunked_head, encode_last_chunk, encode_response, reason_phrase, Response,
    ResponseError,
};
pub use response_decoder::{ResponseDecodeError, ResponseDecoder, ResponseSummary};
