//! The envelope as a typed remote message of the node.

use bytes::Bytes;
use plexus_core::remote::{CodecError, RemoteMessage};
use plexus_core::Lane;

use super::Header;

/// What the regions of an entity type whose messages are `M` send each
/// other: a message for an entity, or a hand-off marker. See the
/// [module docs](super).
#[derive(Debug)]
pub struct Envelope<M> {
    /// Which entity, or which shard's marker.
    pub header: Header,
    /// The entity's message (`None` for a marker).
    pub message: Option<M>,
}

impl<M: RemoteMessage> RemoteMessage for Envelope<M> {
    /// One name for every message type: each region actor takes the
    /// envelopes of its own type only.
    const TYPE_NAME: &'static str = "plexus.sharding.Envelope";
    /// The entity type's messages' lane, which its markers take too.
    const LANE: Lane = M::LANE;

    fn into_payload(self) -> Result<Bytes, CodecError> {
        let mut buf = Vec::new();
        self.encode_append(&mut buf)?;
        Ok(Bytes::from(buf))
    }

    fn encode_append(self, buf: &mut Vec<u8>) -> Result<(), CodecError> {
        self.header.encode(buf);
        match self.message {
            Some(message) => message.encode_append(buf),
            None => Ok(()),
        }
    }

    fn from_payload(payload: Bytes) -> Result<Self, CodecError> {
        let (header, rest) = Header::decode(&payload).map_err(|e| CodecError {
            context: format!("decode {}", Self::TYPE_NAME),
            detail: e.to_string(),
        })?;
        let message = match header {
            Header::Entity { .. } => Some(M::from_payload(rest)?),
            Header::Marker { .. } => None,
        };
        Ok(Self { header, message })
    }
}
