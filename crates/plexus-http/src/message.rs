//! The request a decoder produces: serialisable, so that a route may be
//! served by an actor on any node.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A request method. The common ones are variants; any other valid token
/// is kept as [`Method::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
    /// `OPTIONS`
    Options,
    /// `PATCH`
    Patch,
    /// Any other method token.
    Other(String),
}

impl Method {
    pub(crate) fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            other => Method::Other(other.to_owned()),
        }
    }

    /// The method's token as sent.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Other(s) => s,
        }
    }
}

/// The protocol version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Version {
    /// HTTP/1.0: the connection closes after the response unless the
    /// request asks to keep it alive.
    Http10,
    /// HTTP/1.1: the connection stays open unless the request says
    /// `Connection: close`.
    Http11,
}

/// A decoded request: its head and its whole body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The request target as sent (`/index.html?x=1`).
    pub target: String,
    /// The protocol version.
    pub version: Version,
    /// Header fields in the order sent (names as sent; compare them with
    /// [`header`](Self::header), which ignores case). Trailer fields of a
    /// chunked body follow them.
    pub headers: Vec<(String, Bytes)>,
    /// The body (empty without one), de-chunked.
    pub body: Bytes,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
}

impl Request {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }

    /// The path of the target, without its query: of an origin-form target
    /// (`/a/b?x`) or of an absolute-form one (`http://host/a/b?x`, RFC 9112,
    /// 3.2.2: served as its origin form would be; an empty path is `/`).
    pub fn path(&self) -> &str {
        let (absolute, target) = match split_absolute(&self.target) {
            Some((_, rest)) => (true, rest),
            None => (false, self.target.as_str()),
        };
        match target.split(['?', '#']).next().unwrap_or("") {
            "" if absolute => "/",
            path => path,
        }
    }

    /// The host (and port) the request is for: the authority of an
    /// absolute-form target, which replaces any `Host` field (RFC 9112,
    /// 3.2.2), or else the `Host` field; `None` without either (HTTP/1.0).
    pub fn host(&self) -> Option<&[u8]> {
        match split_absolute(&self.target) {
            Some((authority, _)) => Some(authority.as_bytes()),
            None => self.header("host").map(crate::decoder::trim),
        }
    }
}

/// An absolute-form target (`scheme://authority/path?query`, RFC 9112,
/// 3.2.2) split into its authority and the rest from the path on; `None`
/// for any other form.
fn split_absolute(target: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = target.split_once("://")?;
    let mut chars = scheme.chars();
    // RFC 3986, 3.1: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(rest.split_at(end))
}
