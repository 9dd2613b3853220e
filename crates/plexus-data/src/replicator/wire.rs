//! The replicator's packets and their byte format.
//!
//! A packet is `version: u8 (1)` followed by the postcard encoding of
//! [`Packet`]: the sender's cluster (a 64-bit hash of its name, so a packet
//! from another cluster is refused before anything in it is looked at), the
//! sender's replica, and a [`Body`]. States travel as [`WireEntry`]s: key,
//! type tag, the state's own postcard bytes and its pruning markers.
//!
//! No packet handed to the network is larger than the configured
//! `max_packet`: a bigger one is cut into [`Body::Chunk`]s that the receiver
//! reassembles within bounds (bytes buffered per peer, transfers at once,
//! a deadline), so no key or value size ever produces a message over a
//! transport's frame limit.
//!
//! Decoding is the checked path for untrusted bytes: postcard never
//! allocates more than the input can fill, keys are bounded, trailing bytes
//! are an error, and nothing panics (the `packet` fuzz target).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::envelope::PruningMarkers;
use crate::crdt::ReplicaId;
use crate::registry::TypeTag;

const VERSION: u8 = 1;

/// The longest key name, in bytes.
pub const MAX_KEY: usize = 1024;

/// The hash of a cluster name carried by every packet.
pub(crate) fn cluster_hash(name: &str) -> u64 {
    twox_hash::XxHash3_64::oneshot(name.as_bytes())
}

/// A key's state (or delta) on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEntry {
    /// The key.
    pub key: String,
    /// The type of the state ([`type_tag`](crate::registry::type_tag)).
    pub tag: TypeTag,
    /// The state's postcard bytes.
    pub data: Bytes,
    /// The key's pruning markers.
    pub pruning: PruningMarkers,
}

/// A replicator packet. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Packet {
    /// The hash of the sender's cluster name.
    pub cluster: u64,
    /// The sender's replica.
    pub from: ReplicaId,
    /// The sender's member address.
    pub from_address: String,
    /// What it says.
    pub body: Body,
}

/// A packet's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Body {
    /// The join of the sender's deltas after the receiver's last
    /// acknowledgement, up to and including sequence number `to_seq`.
    Delta {
        /// The last delta sequence number the entries cover.
        to_seq: u64,
        /// The joined deltas, one entry per key.
        entries: Vec<WireEntry>,
    },
    /// Every delta up to `seq` is merged.
    DeltaAck {
        /// The highest sequence number merged.
        seq: u64,
    },
    /// Merge this (a delta of an update with a consistency level) and say so.
    Write {
        /// The writer's request.
        request: u64,
        /// The delta.
        entry: WireEntry,
    },
    /// The answer to a [`Body::Write`].
    WriteAck {
        /// The writer's request.
        request: u64,
        /// Whether the delta was merged (false: refused; the refusal is
        /// logged at the receiver).
        merged: bool,
    },
    /// Send me your state of `key`.
    Read {
        /// The reader's request.
        request: u64,
        /// The key.
        key: String,
    },
    /// The answer to a [`Body::Read`]: the state, or `None` if the key is
    /// unknown here.
    ReadReply {
        /// The reader's request.
        request: u64,
        /// The key.
        key: String,
        /// The state.
        entry: Option<WireEntry>,
    },
    /// Anti-entropy, first step: the digests of the `buckets` key ranges
    /// (those not empty: a range missing here is empty).
    Digests {
        /// How many buckets the keys are hashed into.
        buckets: u32,
        /// `(bucket, digest)` of every bucket holding keys.
        digests: Vec<(u32, u64)>,
    },
    /// Anti-entropy, second step: for the buckets whose digests differed,
    /// the answerer's key hashes, and (for buckets the asker has nothing
    /// in) its states outright.
    Keys {
        /// Bucket count the hashes refer to.
        buckets: u32,
        /// `(bucket, [(key, hash)])` per differing bucket.
        keys: Vec<(u32, Vec<(String, u64)>)>,
        /// States of buckets the asker had nothing in.
        pushed: Vec<WireEntry>,
        /// More buckets differ than one round carries.
        more: bool,
    },
    /// Anti-entropy, third step: the asker's states of keys that differ, and
    /// the keys it lacks.
    States {
        /// States the answerer lacks or holds otherwise.
        entries: Vec<WireEntry>,
        /// Keys the asker does not have.
        want: Vec<String>,
        /// More buckets differ than one round carries.
        more: bool,
    },
    /// Anti-entropy, last step: what the asker lacks of the answerer's
    /// states (each stripped of what the asker sent), and the wanted keys.
    Reply {
        /// The states.
        entries: Vec<WireEntry>,
        /// More buckets differ: the asker starts the next round at once.
        more: bool,
    },
    /// One piece of a packet larger than `max_packet`.
    Chunk {
        /// The sender's transfer number.
        transfer: u64,
        /// This piece's index.
        index: u32,
        /// How many pieces there are.
        count: u32,
        /// The piece.
        bytes: Bytes,
    },
}

/// Why a packet could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The version byte is missing or unknown.
    #[error("unsupported replicator packet version {0} (this node speaks 1)")]
    Version(u8),
    /// The bytes are not a packet.
    #[error("malformed replicator packet")]
    Malformed,
    /// A key name is over [`MAX_KEY`] bytes.
    #[error("a key name of {0} bytes is over the limit of {MAX_KEY}")]
    KeyTooLong(usize),
}

impl Packet {
    /// The packet's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        // Encoding into a Vec cannot fail for these plain types.
        postcard::to_io(self, &mut out).ok();
        out
    }

    /// Decodes and checks untrusted bytes.
    ///
    /// # Errors
    ///
    /// [`WireError`] says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let (&version, rest) = bytes.split_first().ok_or(WireError::Version(0))?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let (packet, trailing) =
            postcard::take_from_bytes::<Packet>(rest).map_err(|_| WireError::Malformed)?;
        if !trailing.is_empty() {
            return Err(WireError::Malformed);
        }
        if packet.from_address.len() > MAX_KEY {
            return Err(WireError::KeyTooLong(packet.from_address.len()));
        }
        packet.check_keys()?;
        Ok(packet)
    }

    fn check_keys(&self) -> Result<(), WireError> {
        let check = |k: &str| {
            if k.len() > MAX_KEY {
                Err(WireError::KeyTooLong(k.len()))
            } else {
                Ok(())
            }
        };
        let entries = |es: &[WireEntry]| es.iter().try_for_each(|e| check(&e.key));
        match &self.body {
            Body::Delta { entries: es, .. } | Body::Reply { entries: es, .. } => entries(es),
            Body::Write { entry, .. } => check(&entry.key),
            Body::Read { key, .. } => check(key),
            Body::ReadReply { key, entry, .. } => {
                check(key)?;
                entry.iter().try_for_each(|e| check(&e.key))
            }
            Body::Keys { keys, pushed, .. } => {
                keys.iter()
                    .flat_map(|(_, ks)| ks)
                    .try_for_each(|(k, _)| check(k))?;
                entries(pushed)
            }
            Body::States {
                entries: es, want, ..
            } => {
                entries(es)?;
                want.iter().try_for_each(|k| check(k))
            }
            Body::DeltaAck { .. }
            | Body::WriteAck { .. }
            | Body::Digests { .. }
            | Body::Chunk { .. } => Ok(()),
        }
    }
}

/// Cuts `encoded` into packets of at most `max_packet` bytes: itself if it
/// fits, else [`Body::Chunk`]s of transfer `transfer`, each made a packet by
/// `wrap`.
pub(crate) fn split(
    encoded: Vec<u8>,
    max_packet: usize,
    transfer: u64,
    wrap: impl Fn(Body) -> Packet,
) -> Vec<Bytes> {
    if encoded.len() <= max_packet {
        return vec![Bytes::from(encoded)];
    }
    let overhead = wrap(Body::Chunk {
        transfer,
        index: u32::MAX,
        count: u32::MAX,
        bytes: Bytes::new(),
    })
    .encode()
    .len()
        + 5;
    let piece = max_packet.saturating_sub(overhead).max(64);
    let whole = Bytes::from(encoded);
    let count = whole.len().div_ceil(piece) as u32;
    (0..count)
        .map(|index| {
            let start = index as usize * piece;
            let end = (start + piece).min(whole.len());
            Bytes::from(
                wrap(Body::Chunk {
                    transfer,
                    index,
                    count,
                    bytes: whole.slice(start..end),
                })
                .encode(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(body: Body) -> Packet {
        Packet {
            cluster: cluster_hash("test"),
            from: ReplicaId(7),
            from_address: "sim:7".into(),
            body,
        }
    }

    #[test]
    fn round_trips_and_refuses_trailing_bytes_and_long_keys() {
        let p = packet(Body::Read {
            request: 3,
            key: "counter".into(),
        });
        let mut bytes = p.encode();
        assert_eq!(Packet::decode(&bytes), Ok(p));
        bytes.push(0);
        assert_eq!(Packet::decode(&bytes), Err(WireError::Malformed));
        let long = packet(Body::Read {
            request: 3,
            key: "k".repeat(MAX_KEY + 1),
        });
        assert_eq!(
            Packet::decode(&long.encode()),
            Err(WireError::KeyTooLong(MAX_KEY + 1))
        );
        assert_eq!(Packet::decode(&[9, 0]), Err(WireError::Version(9)));
        assert_eq!(Packet::decode(&[]), Err(WireError::Version(0)));
    }

    #[test]
    fn split_pieces_fit_the_limit() {
        let big = packet(Body::Delta {
            to_seq: 1,
            entries: vec![WireEntry {
                key: "k".into(),
                tag: 1,
                data: Bytes::from(vec![7u8; 10_000]),
                pruning: PruningMarkers::new(),
            }],
        })
        .encode();
        let pieces = split(big.clone(), 1_000, 5, packet);
        assert!(pieces.len() > 10);
        let mut joined = Vec::new();
        for p in &pieces {
            assert!(p.len() <= 1_000, "{}", p.len());
            let Body::Chunk { bytes, .. } = Packet::decode(p).unwrap().body else {
                panic!("not a chunk")
            };
            joined.extend_from_slice(&bytes);
        }
        assert_eq!(joined, big);
    }
}
