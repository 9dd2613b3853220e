//! The opening handshake (RFC 6455, section 4): a server checks a client's
//! upgrade request and answers `101 Switching Protocols`; a client builds
//! the request and checks the answer's `Sec-WebSocket-Accept`.

use base64::Engine;
use bytes::{Bytes, BytesMut};
use sha1::{Digest, Sha1};

use crate::decoder::trim;
use crate::message::{Method, Request, Version};
use crate::response::Response;

/// The GUID a server appends to the client's key (RFC 6455, 1.3).
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Why an upgrade was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The request is not a WebSocket upgrade (a server answers 400, or
    /// serves it as plain HTTP).
    #[error("not a WebSocket upgrade: {0}")]
    NotUpgrade(&'static str),
    /// A version other than 13 (a server answers 426 with
    /// `Sec-WebSocket-Version: 13`).
    #[error("unsupported WebSocket version (13 is)")]
    Version,
    /// The server's answer is not a valid acceptance.
    #[error("the server refused the upgrade: {0}")]
    Refused(String),
}

impl HandshakeError {
    /// The response a server sends for this refusal.
    pub fn response(&self) -> Response {
        match self {
            HandshakeError::Version => Response::new(426, "WebSocket version 13 only\n")
                .header("sec-websocket-version", "13"),
            e => Response::new(400, format!("{e}\n")),
        }
    }
}

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &[u8]) -> String {
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

fn has_token(request: &Request, name: &str, token: &[u8]) -> bool {
    request.headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case(name)
            && v.split(|&b| b == b',')
                .any(|t| trim(t).eq_ignore_ascii_case(token))
    })
}

/// Whether `request` asks to upgrade to WebSocket (so a server routes it
/// here rather than to a page).
pub fn is_upgrade(request: &Request) -> bool {
    has_token(request, "upgrade", b"websocket") && has_token(request, "connection", b"upgrade")
}

/// The `101 Switching Protocols` answer to a valid upgrade request.
///
/// # Errors
///
/// [`HandshakeError`] saying what is missing; send its
/// [`response`](HandshakeError::response).
pub fn server_response(request: &Request) -> Result<Response, HandshakeError> {
    if request.method != Method::Get || request.version != Version::Http11 {
        return Err(HandshakeError::NotUpgrade("not a GET over HTTP/1.1"));
    }
    if !is_upgrade(request) {
        return Err(HandshakeError::NotUpgrade(
            "no Upgrade: websocket with Connection: upgrade",
        ));
    }
    if request.header("sec-websocket-version").map(trim) != Some(b"13") {
        return Err(HandshakeError::Version);
    }
    let key = request
        .header("sec-websocket-key")
        .map(trim)
        .ok_or(HandshakeError::NotUpgrade("no Sec-WebSocket-Key"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(key)
        .map_err(|_| HandshakeError::NotUpgrade("a Sec-WebSocket-Key that is not base64"))?;
    if decoded.len() != 16 {
        return Err(HandshakeError::NotUpgrade(
            "a Sec-WebSocket-Key that is not 16 bytes",
        ));
    }
    Ok(Response::new(101, Bytes::new())
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", accept_key(key)))
}

/// A client's upgrade request for `path` on `host` with the 16 random
/// bytes `nonce`; returns the request and the accept value the server must
/// answer with.
pub fn client_request(host: &str, path: &str, nonce: [u8; 16]) -> (Vec<u8>, String) {
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    (request.into_bytes(), accept_key(key.as_bytes()))
}

/// Checks the server's answer at the front of `buf` (taking its head off
/// when whole): `Ok(None)` while incomplete.
///
/// # Errors
///
/// [`HandshakeError::Refused`] for anything but `101` with the expected
/// accept value.
pub fn check_server_response(
    buf: &mut BytesMut,
    accept: &str,
) -> Result<Option<()>, HandshakeError> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Response::new(&mut fields);
    let len = match parsed.parse(&buf[..buf.len().min(16 << 10)]) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= 16 << 10 => {
            return Err(HandshakeError::Refused("an answer head over 16 KiB".into()))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HandshakeError::Refused(format!("not an HTTP answer: {e}"))),
    };
    if parsed.code != Some(101) {
        return Err(HandshakeError::Refused(format!(
            "status {}",
            parsed.code.unwrap_or(0)
        )));
    }
    let got = parsed
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("sec-websocket-accept"))
        .map(|h| trim(h.value));
    if got != Some(accept.as_bytes()) {
        return Err(HandshakeError::Refused(
            "a wrong Sec-WebSocket-Accept".into(),
        ));
    }
    let _ = buf.split_to(len);
    Ok(Some(()))
}
