//! What travels between the regions of one entity type: messages for
//! entities, and the hand-off markers behind them.
//!
//! Both go to the type's region actor on the home's member
//! (`<member>/plexus.sharding.<type>`) as one typed remote message, so a
//! marker takes the link and lane its region's messages took and arrives
//! behind every one of them (`ALGORITHM.md`, "Planned hand-off"). The
//! node encodes the entity's message itself, so refs and ask replies
//! inside it travel as they do in any remote message.
//!
//! Format, after the node's frame: `version: u8 (1) | kind: u8 | header |
//! payload`:
//!
//! | kind | header | payload |
//! | --- | --- | --- |
//! | 0 entity | `id: str16, origin: u8 (0, 1 or 2), [node: str8, request: u64]` | the message's own encoding |
//! | 1 marker | `from: str8, shard: u32, hand-off: u64` | none |
//!
//! `origin` names the member and request number a refusal goes back to:
//! 1 for an `ask` (refusals only: the reply says the rest), 2 for a
//! `tell_with_receipt` (the delivery too); a `tell` has none (0).
//!
//! [`Header::decode`] is the checked path for untrusted bytes (the `wire`
//! fuzz target runs it too).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::shard::{EntityId, HandOffId, ShardId};
use crate::wire::{Reader, WireError};

const VERSION: u8 = 1;

/// Where a refusal of an entity's message goes: the sending member and
/// its number for the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The sending member's address.
    pub node: Arc<str>,
    /// The request's number there.
    pub request: u64,
    /// The sender waits for the delivery too, not only a refusal.
    pub confirm: bool,
}

/// An envelope's header: what comes before an entity's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message for entity `id` follows.
    Entity {
        /// The entity.
        id: EntityId,
        /// Where a refusal goes, if the sender waits for one.
        origin: Option<Origin>,
    },
    /// `from`'s messages for `shard` are all in.
    Marker {
        /// The region that sent it.
        from: Arc<str>,
        /// The shard.
        shard: ShardId,
        /// The hand-off.
        handoff: HandOffId,
    },
}

impl Header {
    /// Appends the header's bytes to `b`.
    ///
    /// # Panics
    ///
    /// If a member address is over 255 bytes (a node's address never is).
    pub fn encode(&self, b: &mut impl BufMut) {
        b.put_u8(VERSION);
        match self {
            Header::Entity { id, origin } => {
                b.put_u8(0);
                let id = id.as_str();
                b.put_u16(u16::try_from(id.len()).expect("ids are bounded"));
                b.put_slice(id.as_bytes());
                match origin {
                    None => b.put_u8(0),
                    Some(Origin {
                        node,
                        request,
                        confirm,
                    }) => {
                        b.put_u8(1 + u8::from(*confirm));
                        crate::wire::put_str8(b, node);
                        b.put_u64(*request);
                    }
                }
            }
            Header::Marker {
                from,
                shard,
                handoff,
            } => {
                b.put_u8(1);
                crate::wire::put_str8(b, from);
                b.put_u32(shard.0);
                b.put_u64(handoff.0);
            }
        }
    }

    /// Parses a header from the front of `bytes`; returns it with the rest
    /// (the entity's message; empty after a marker).
    ///
    /// # Errors
    ///
    /// [`WireError`] for a header that is not well formed, or bytes after
    /// a marker.
    pub fn decode(bytes: &Bytes) -> Result<(Self, Bytes), WireError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let header = match r.u8()? {
            0 => {
                let len = usize::from(r.u16()?);
                let id = std::str::from_utf8(r.take(len)?).map_err(|_| WireError::Utf8)?;
                let id = EntityId::new(id)?;
                let origin = match r.u8()? {
                    0 => None,
                    code @ (1 | 2) => Some(Origin {
                        node: r.str8()?.into(),
                        request: r.u64()?,
                        confirm: code == 2,
                    }),
                    other => return Err(WireError::Kind(other)),
                };
                Header::Entity { id, origin }
            }
            1 => {
                let header = Header::Marker {
                    from: r.str8()?.into(),
                    shard: ShardId(r.u32()?),
                    handoff: HandOffId(r.u64()?),
                };
                if r.rest() > 0 {
                    return Err(WireError::Trailing(r.rest()));
                }
                header
            }
            other => return Err(WireError::Kind(other)),
        };
        Ok((header, bytes.slice(r.at()..)))
    }

    /// The header's bytes.
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(32);
        self.encode(&mut b);
        b.freeze()
    }
}

/// Decodes arbitrary bytes as a header and, when they are one, checks that
/// it encodes back to the bytes before its payload.
pub fn fuzz_decode(data: &[u8]) {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok((header, payload)) = Header::decode(&bytes) {
        let head = header.to_bytes();
        assert_eq!(head.len() + payload.len(), bytes.len());
        assert_eq!(
            head,
            bytes.slice(..head.len()),
            "a decoded header encodes back"
        );
    }
}

#[cfg(feature = "node")]
mod typed;
#[cfg(feature = "node")]
pub use typed::Envelope;

#[cfg(test)]
mod tests;
