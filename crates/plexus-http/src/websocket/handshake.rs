//! The opening handshake (RFC 6455, section 4): a server checks a client's
//! upgrade request and answers `101 Switching Protocols`; a client builds
//! the request and checks the answer's `Sec-WebSocket-Accept`.
//!
//! Extensions (RFC 6455, 9.1) are negotiated here too, permessage-deflate
//! (RFC 7692) the only one known, when [`WsConfig::deflate`] enables it:
//!
//! - a client offers it once, with the parameters of its
//!   [`DeflateConfig`] ([`client_request`]), and fails the handshake with
//!   [`HandshakeError::Extension`] if the answer names an extension it did
//!   not offer, repeats one, or gives a parameter that is unknown,
//!   repeated, malformed or beyond what was offered
//!   ([`check_server_response`]);
//! - a server accepts the first permessage-deflate offer it can, in the
//!   client's order of preference, and answers with the parameters both
//!   ends will use ([`server_response`]); an offer that is malformed, or
//!   has an unknown, repeated or invalid parameter, is declined and the
//!   next one tried (RFC 7692, 5 and 7), never a reason to refuse the
//!   upgrade. Extensions other than permessage-deflate are declined.
//!
//! Both ends come out with the same [`Extensions`]; give them to
//! [`WebSocket::with_extensions`](super::WebSocket::with_extensions).

use base64::Engine;
use bytes::{Bytes, BytesMut};
use sha1::{Digest, Sha1};

use super::deflate::{DeflateConfig, DeflateParams, WINDOW_BITS};
use super::WsConfig;
use crate::decoder::trim;
use crate::message::{Method, Request, Version};
use crate::response::Response;

/// The extension's name (RFC 7692, 7).
const PERMESSAGE_DEFLATE: &str = "permessage-deflate";

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
    /// The server's answer agrees on extensions in a way the client must
    /// not accept (RFC 6455, 4.1; RFC 7692, 7.1): the client fails the
    /// connection.
    #[error("the server's Sec-WebSocket-Extensions: {0}")]
    Extension(#[from] ExtensionError),
}

/// Why a server's `Sec-WebSocket-Extensions` answer fails a client's
/// handshake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExtensionError {
    /// The header does not follow RFC 6455's extension grammar (9.1).
    #[error("it does not parse: {0}")]
    Malformed(&'static str),
    /// An extension the client did not offer, or one named twice.
    #[error("{0:?} was not offered (or is named twice)")]
    Unrequested(String),
    /// A permessage-deflate parameter that is unknown, repeated, has a
    /// value it may not have, or goes beyond the offer (RFC 7692, 7.1).
    #[error("permessage-deflate parameter {name:?}: {why}")]
    Parameter {
        /// The parameter.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// What an opening handshake agreed on beyond RFC 6455 itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Extensions {
    /// permessage-deflate (RFC 7692) and its parameters, if agreed.
    pub deflate: Option<DeflateParams>,
}

/// What a client's upgrade request asked for, to check the server's answer
/// against ([`check_server_response`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOffer {
    accept: String,
    deflate: Option<DeflateConfig>,
}

impl ClientOffer {
    /// The `Sec-WebSocket-Accept` value the server must answer with.
    pub fn accept(&self) -> &str {
        &self.accept
    }
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

/// The `101 Switching Protocols` answer to a valid upgrade request, and
/// the extensions it agrees on: permessage-deflate if `config` enables it
/// and the client offered it acceptably (see the [module docs](self)).
///
/// # Errors
///
/// [`HandshakeError`] saying what is missing; send its
/// [`response`](HandshakeError::response). Extension offers never cause
/// one.
pub fn server_response(
    request: &Request,
    config: &WsConfig,
) -> Result<(Response, Extensions), HandshakeError> {
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
    let mut response = Response::new(101, Bytes::new())
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", accept_key(key));
    let mut extensions = Extensions::default();
    if let Some(config) = &config.deflate {
        let offers = request
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-extensions"))
            .map(|(_, v)| v.as_ref());
        if let Some((params, answer)) = accept_deflate(offers, config) {
            response = response.header("sec-websocket-extensions", answer);
            extensions.deflate = Some(params);
        }
    }
    Ok((response, extensions))
}

/// A client's upgrade request for `path` on `host` with the 16 random
/// bytes `nonce`, offering permessage-deflate if `config` enables it;
/// returns the request and what to check the server's answer against.
pub fn client_request(
    host: &str,
    path: &str,
    nonce: [u8; 16],
    config: &WsConfig,
) -> (Vec<u8>, ClientOffer) {
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    let extensions = config
        .deflate
        .as_ref()
        .map(|c| format!("Sec-WebSocket-Extensions: {}\r\n", deflate_offer(c)))
        .unwrap_or_default();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extensions}\r\n"
    );
    let offer = ClientOffer {
        accept: accept_key(key.as_bytes()),
        deflate: config.deflate,
    };
    (request.into_bytes(), offer)
}

/// Checks the server's answer at the front of `buf` (taking its head off
/// when whole) against what `offer` asked for: `Ok(None)` while
/// incomplete, then the extensions agreed on.
///
/// # Errors
///
/// [`HandshakeError::Refused`] for anything but `101` with the expected
/// accept value; [`HandshakeError::Extension`] for extensions the client
/// cannot accept (see the [module docs](self)).
pub fn check_server_response(
    buf: &mut BytesMut,
    offer: &ClientOffer,
) -> Result<Option<Extensions>, HandshakeError> {
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
    if got != Some(offer.accept.as_bytes()) {
        return Err(HandshakeError::Refused(
            "a wrong Sec-WebSocket-Accept".into(),
        ));
    }
    let answers = parsed
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-extensions"))
        .map(|h| h.value);
    let deflate = check_deflate_answer(answers, offer.deflate.as_ref())?;
    let _ = buf.split_to(len);
    Ok(Some(Extensions { deflate }))
}

/// The permessage-deflate offer of a client with `config` (RFC 7692, 7.1).
/// `client_max_window_bits` is always offered: it lets the server bound
/// our window, and says we can.
fn deflate_offer(config: &DeflateConfig) -> String {
    let mut offer = String::from(PERMESSAGE_DEFLATE);
    if config.no_context_takeover {
        offer.push_str("; client_no_context_takeover");
    }
    if config.peer_no_context_takeover {
        offer.push_str("; server_no_context_takeover");
    }
    if config.peer_bits() < 15 {
        offer.push_str(&format!("; server_max_window_bits={}", config.peer_bits()));
    }
    offer.push_str("; client_max_window_bits");
    if config.own_bits() < 15 {
        offer.push_str(&format!("={}", config.own_bits()));
    }
    offer
}

/// The first of the client's `offers` (header values) a server with
/// `config` accepts, and the header value that answers it.
fn accept_deflate<'a>(
    offers: impl Iterator<Item = &'a [u8]>,
    config: &DeflateConfig,
) -> Option<(DeflateParams, String)> {
    elements(offers)
        .filter_map(|element| parse_extension(element).ok())
        .filter(|ext| ext.name.eq_ignore_ascii_case(PERMESSAGE_DEFLATE))
        .find_map(|ext| {
            // RFC 7692, 7: an offer with a bad parameter is declined.
            let offer = DeflateWords::parse(&ext.params).ok()?;
            Some(accept_offer(&offer, config))
        })
}

/// The server's side of RFC 7692, 7.1.1 and 7.1.2 for one valid offer.
fn accept_offer(offer: &DeflateWords, config: &DeflateConfig) -> (DeflateParams, String) {
    // 7.1.1.1: an offered server_no_context_takeover must be accepted;
    // 7.1.1.2: client_no_context_takeover may be answered whether offered
    // or not (an offered one is a hint the client resets anyway).
    let server_no_context_takeover = offer.server_no_context_takeover || config.no_context_takeover;
    let client_no_context_takeover =
        offer.client_no_context_takeover || config.peer_no_context_takeover;
    // 7.1.2.1: the same or a smaller server window than offered; may be
    // answered without an offer.
    let server_bits = config
        .own_bits()
        .min(offer.server_max_window_bits.unwrap_or(15));
    // 7.1.2.2: a client window only if the client offered the parameter,
    // no larger than a value it offered (which binds it even unanswered).
    let client_bits = match offer.client_max_window_bits {
        None => 15,
        Some(offered) => config.peer_bits().min(offered.unwrap_or(15)),
    };
    let mut answer = String::from(PERMESSAGE_DEFLATE);
    if server_no_context_takeover {
        answer.push_str("; server_no_context_takeover");
    }
    if client_no_context_takeover {
        answer.push_str("; client_no_context_takeover");
    }
    if offer.server_max_window_bits.is_some() || server_bits < 15 {
        answer.push_str(&format!("; server_max_window_bits={server_bits}"));
    }
    if offer.client_max_window_bits.is_some() && client_bits < 15 {
        answer.push_str(&format!("; client_max_window_bits={client_bits}"));
    }
    let params = DeflateParams {
        server_no_context_takeover,
        client_no_context_takeover,
        server_max_window_bits: server_bits,
        client_max_window_bits: client_bits,
    };
    (params, answer)
}

/// The client's side: the server's `answers` (header values) checked
/// against what was `offered` (RFC 6455, 4.1: an extension not offered
/// fails the connection; RFC 7692, 7.1).
fn check_deflate_answer<'a>(
    answers: impl Iterator<Item = &'a [u8]>,
    offered: Option<&DeflateConfig>,
) -> Result<Option<DeflateParams>, ExtensionError> {
    let mut agreed = None;
    for element in elements(answers) {
        let ext = parse_extension(element).map_err(ExtensionError::Malformed)?;
        let config = match offered {
            Some(config)
                if agreed.is_none() && ext.name.eq_ignore_ascii_case(PERMESSAGE_DEFLATE) =>
            {
                config
            }
            _ => return Err(ExtensionError::Unrequested(ext.name)),
        };
        let answer = DeflateWords::parse(&ext.params)?;
        let beyond = |name: &str| ExtensionError::Parameter {
            name: name.to_owned(),
            why: "larger than offered",
        };
        if answer
            .server_max_window_bits
            .is_some_and(|bits| bits > config.peer_bits())
        {
            return Err(beyond("server_max_window_bits"));
        }
        let client_bits = match answer.client_max_window_bits {
            // What the offer said binds us.
            None => config.own_bits(),
            Some(None) => {
                return Err(ExtensionError::Parameter {
                    name: "client_max_window_bits".into(),
                    why: "needs a value in an answer",
                })
            }
            Some(Some(bits)) if bits > config.own_bits() => {
                return Err(beyond("client_max_window_bits"))
            }
            Some(Some(bits)) => bits,
        };
        agreed = Some(DeflateParams {
            server_no_context_takeover: answer.server_no_context_takeover,
            // Offered, we keep to it whatever the answer.
            client_no_context_takeover: answer.client_no_context_takeover
                || config.no_context_takeover,
            server_max_window_bits: answer.server_max_window_bits.unwrap_or(15),
            client_max_window_bits: client_bits,
        });
    }
    Ok(agreed)
}

/// The parameters of one permessage-deflate offer or answer, each at most
/// once (RFC 7692, 7).
#[derive(Debug, Default, PartialEq, Eq)]
struct DeflateWords {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: Option<u8>,
    /// Present, with a value or without.
    client_max_window_bits: Option<Option<u8>>,
}

impl DeflateWords {
    fn parse(params: &[(String, Option<String>)]) -> Result<Self, ExtensionError> {
        let mut words = DeflateWords::default();
        let mut seen = [false; 4];
        for (name, value) in params {
            let bad = |why| ExtensionError::Parameter {
                name: name.clone(),
                why,
            };
            let index = match name.as_str() {
                "server_no_context_takeover" => 0,
                "client_no_context_takeover" => 1,
                "server_max_window_bits" => 2,
                "client_max_window_bits" => 3,
                _ => return Err(bad("not a permessage-deflate parameter")),
            };
            if std::mem::replace(&mut seen[index], true) {
                return Err(bad("given twice"));
            }
            let bits = || {
                value
                    .as_deref()
                    .and_then(window_bits)
                    .ok_or(bad("not a window size from 8 to 15"))
            };
            match (index, value) {
                (0 | 1, Some(_)) => return Err(bad("takes no value")),
                (0, None) => words.server_no_context_takeover = true,
                (1, None) => words.client_no_context_takeover = true,
                (2, _) => words.server_max_window_bits = Some(bits()?),
                (_, None) => words.client_max_window_bits = Some(None),
                (_, Some(_)) => words.client_max_window_bits = Some(Some(bits()?)),
            }
        }
        Ok(words)
    }
}

/// A window size parameter's value: a decimal from 8 to 15 without
/// leading zeros (RFC 7692, 7.1.2.1).
fn window_bits(value: &str) -> Option<u8> {
    if value.starts_with('0') || value.len() > 2 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().filter(|bits| WINDOW_BITS.contains(bits))
}

/// One element of an extension list: its name and its parameters, quoted
/// values unquoted.
#[derive(Debug, PartialEq, Eq)]
struct Extension {
    name: String,
    params: Vec<(String, Option<String>)>,
}

/// The non-empty elements of the comma-separated lists in `values` (a
/// field given several times is one list, RFC 9110, 5.3).
fn elements<'a>(values: impl Iterator<Item = &'a [u8]>) -> impl Iterator<Item = &'a [u8]> {
    values
        .flat_map(|v| split_unquoted(v, b','))
        .map(trim)
        .filter(|e| !e.is_empty())
}

/// Parses `extension *( ";" extension-param )` (RFC 6455, 9.1), where
/// `extension-param = token [ "=" (token | quoted-string) ]` and a quoted
/// value must be a token once unquoted.
fn parse_extension(element: &[u8]) -> Result<Extension, &'static str> {
    let mut parts = split_unquoted(element, b';').into_iter().map(trim);
    let name = parts.next().unwrap_or_default();
    if !is_token(name) {
        return Err("an extension name that is not a token");
    }
    let mut params = Vec::new();
    for part in parts {
        let (key, value) = match part.iter().position(|&b| b == b'=') {
            None => (part, None),
            Some(at) => (trim(&part[..at]), Some(unquote(trim(&part[at + 1..]))?)),
        };
        if !is_token(key) {
            return Err("a parameter name that is not a token");
        }
        params.push((ascii(key).to_ascii_lowercase(), value));
    }
    Ok(Extension {
        name: ascii(name),
        params,
    })
}

/// A parameter's value: a token, or a quoted string holding one.
fn unquote(value: &[u8]) -> Result<String, &'static str> {
    let unquoted = match value {
        [b'"', inner @ .., b'"'] => {
            let mut out = Vec::with_capacity(inner.len());
            let mut bytes = inner.iter();
            while let Some(&b) = bytes.next() {
                out.push(if b == b'\\' {
                    *bytes
                        .next()
                        .ok_or("a quoted string ending in a backslash")?
                } else {
                    b
                });
            }
            out
        }
        _ => value.to_vec(),
    };
    if !is_token(&unquoted) {
        return Err("a parameter value that is not a token");
    }
    Ok(ascii(&unquoted))
}

/// `text` split at `sep` outside quoted strings.
fn split_unquoted(text: &[u8], sep: u8) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in text.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == sep && !quoted {
            parts.push(&text[start..i]);
            start = i + 1;
        }
    }
    parts.push(&text[start..]);
    parts
}

/// RFC 9110, 5.6.2: `1*tchar`.
fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A token as text (tokens are ASCII).
fn ascii(token: &[u8]) -> String {
    String::from_utf8_lossy(token).into_owned()
}
