//! [`Body`]: what a response carries, bytes in memory or a range of a file.
//!
//! A file body ([`Body::File`]) is never read by this crate: the `http`
//! layer puts it behind the response head as the frame's file region, and
//! the connection's driver sends it from the page cache (`sendfile`) where
//! it can, or its sender reads it into memory where it cannot (see
//! [`plexus_net::file_region`]). A response stays serialisable: a file body
//! is read when serialised (a route answered by another node) and arrives
//! as bytes.

use bytes::Bytes;
use plexus_net::FileRegion;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A response's body.
#[derive(Debug, Clone)]
pub enum Body {
    /// Bytes in memory.
    Bytes(Bytes),
    /// A range of an open file, sent without copying it through user space
    /// where the connection allows.
    File(FileRegion),
}

impl Body {
    /// The body's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Body::Bytes(bytes) => bytes.len(),
            Body::File(region) => region.len(),
        }
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, for a body held in memory.
    pub fn as_bytes(&self) -> Option<&Bytes> {
        match self {
            Body::Bytes(bytes) => Some(bytes),
            Body::File(_) => None,
        }
    }

    /// The body's bytes, read from its file for a file body.
    ///
    /// # Errors
    ///
    /// The read's error ([`FileRegion::read`]).
    pub fn to_bytes(&self) -> std::io::Result<Bytes> {
        match self {
            Body::Bytes(bytes) => Ok(bytes.clone()),
            Body::File(region) => region.read(),
        }
    }

    /// The part `start..end` of the body (relative to its start).
    ///
    /// # Panics
    ///
    /// If `start > end` or `end > self.len()`.
    pub fn slice(&self, start: usize, end: usize) -> Body {
        match self {
            Body::Bytes(bytes) => Body::Bytes(bytes.slice(start..end)),
            Body::File(region) => Body::File(region.slice(start, end)),
        }
    }
}

impl Default for Body {
    fn default() -> Self {
        Body::Bytes(Bytes::new())
    }
}

/// Equal bytes, or the same range of the same open file.
impl PartialEq for Body {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Body::Bytes(a), Body::Bytes(b)) => a == b,
            (Body::File(a), Body::File(b)) => a.same_as(b),
            _ => false,
        }
    }
}

impl Eq for Body {}

/// A body in memory equal to `other`; a file body never is (it is not read).
impl PartialEq<[u8]> for Body {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_bytes().is_some_and(|bytes| bytes == other)
    }
}

impl From<Bytes> for Body {
    fn from(bytes: Bytes) -> Self {
        Body::Bytes(bytes)
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Self {
        Body::Bytes(bytes.into())
    }
}

impl From<String> for Body {
    fn from(text: String) -> Self {
        Body::Bytes(text.into())
    }
}

impl From<&'static str> for Body {
    fn from(text: &'static str) -> Self {
        Body::Bytes(Bytes::from_static(text.as_bytes()))
    }
}

impl From<&'static [u8]> for Body {
    fn from(bytes: &'static [u8]) -> Self {
        Body::Bytes(Bytes::from_static(bytes))
    }
}

impl From<FileRegion> for Body {
    fn from(region: FileRegion) -> Self {
        Body::File(region)
    }
}

/// As bytes; a file body is read (an error if that fails).
impl Serialize for Body {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_bytes()
            .map_err(|e| serde::ser::Error::custom(format!("read the body's file: {e}")))?
            .serialize(serializer)
    }
}

/// Always as bytes in memory.
impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Bytes::deserialize(deserializer).map(Body::Bytes)
    }
}
