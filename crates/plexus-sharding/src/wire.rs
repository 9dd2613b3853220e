//! The sharding protocol's control messages and their byte format.
//!
//! Every message: `version: u8 (2) | kind: u8 | from: str8 | entity_type:
//! str8 | body`, where `from` is the sender's member address, `str8` is a
//! length byte and that many UTF-8 bytes, and integers are big endian.
//! Bodies:
//!
//! | kind | body | from, to | meaning |
//! | --- | --- | --- | --- |
//! | 0 ask home | `shard: u32` | region, coordinator | where does it live? |
//! | 1 home | `shard: u32, home: str8` | coordinator, region | it lives there |
//! | 2 begin hand-off | `shard: u32, hand-off: u64, old home: str8` | coordinator, every region | hold its messages, mark the old home |
//! | 3 hand-off ack | `shard: u32, hand-off: u64` | region, coordinator | held, marked |
//! | 4 hand-off | `shard: u32, hand-off: u64, count: u16, regions: str8 × count` | coordinator, old home | stop it after these regions' markers |
//! | 5 shard stopped | `shard: u32, hand-off: u64` | old home, coordinator | stopped |
//! | 6 renew | `seq: u64, leased: u8, shards` | region, coordinator | renew my lease (1: it still holds); I host these |
//! | 7 renewed | `seq: u64, shards` | coordinator, region | renewed, from when you asked; these are not yours |
//! | 9 leaving | (none) | region, coordinator | my member leaves: take my shards |
//! | 10 drained | (none) | coordinator, region | you host nothing any more |
//! | 11 refused | `request: u64, error: u8, [shard: u32, limit: u32]` | home, sender | your message was refused |
//! | 12 delivered | `request: u64` | home, sender | your message is in its entity's mailbox |
//! | 13 no home | `shard: u32` | coordinator, region | no member hosts the type |
//!
//! `shards` is `count: u32, shard: u32 × count`. A renewal carries what
//! the region hosts, and its answer what it must give up before its lease
//! is extended: one message each, so no lost report can leave a region
//! leased with a shard homed elsewhere (`ALGORITHM.md`). Kind 8 is unused.
//!
//! A refusal's error is 0 (the home holds no lease), 1 (the shard's
//! hand-off buffer is full; then `shard` and `limit` follow), 2 (it went
//! to a member that went away) or 3 (no member hosts the type).
//!
//! Messages for entities, and the hand-off markers that must travel behind
//! them on the same link and lane, are not here: they are typed remote
//! messages ([`Envelope`](crate::envelope::Envelope)).
//!
//! Decoding is the checked path for untrusted bytes: lengths, counts and
//! codes are validated, nothing panics, trailing bytes are an error. The
//! `wire` fuzz target checks that on arbitrary input.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::allocation::Placement;
use crate::lease::Stamp;
use crate::region::EntityError;
use crate::routing::RouteError;
use crate::shard::{EntityIdError, HandOffId, ShardId};

const VERSION: u8 = 3;

/// The most regions a hand-off names.
pub const MAX_REGIONS: usize = 4096;

/// The most shards a renewal or its answer names.
pub const MAX_SHARDS: usize = 1 << 16;

/// A sharding message. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The sender's member address.
    pub from: Arc<str>,
    /// The entity type it is about.
    pub entity_type: Arc<str>,
    /// What it says.
    pub body: Body,
}

/// A message's body. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Where does the shard live?
    AskHome(ShardId),
    /// The shard lives in `home`.
    Home {
        /// The shard.
        shard: ShardId,
        /// Its home region.
        home: Arc<str>,
    },
    /// Hold the shard's messages and mark its old home.
    BeginHandOff {
        /// The shard.
        shard: ShardId,
        /// The hand-off.
        handoff: HandOffId,
        /// Its old home.
        from: Arc<str>,
    },
    /// Held and marked.
    HandOffAck(ShardId, HandOffId),
    /// Stop the shard after these regions' markers.
    HandOff {
        /// The shard.
        shard: ShardId,
        /// The hand-off.
        handoff: HandOffId,
        /// The regions whose markers to await.
        regions: Vec<Arc<str>>,
    },
    /// The shard stopped at the sender.
    ShardStopped(ShardId, HandOffId),
    /// Renew the sender's lease.
    Renew {
        /// The request's number.
        seq: u64,
        /// The sender's lease still holds: its report is current (one
        /// from a region whose lease ran out is never adopted).
        leased: bool,
        /// Where the type's shards go, as the sender registered it.
        placement: Placement,
        /// The shards the sender hosts.
        hosted: Vec<ShardId>,
        /// The mark of the coordinator's last answer the sender heard.
        echo: Stamp,
    },
    /// Renewed, from when the request left.
    Renewed {
        /// The request's number.
        seq: u64,
        /// Shards the region reported that are not its own: it gives them
        /// up before the lease is extended.
        revoked: Vec<ShardId>,
        /// The mark to echo in the next renewal.
        stamp: Stamp,
    },
    /// Not renewed (the coordinator heard from no majority of its regions
    /// within a lease): the mark to echo in the next renewal.
    NotRenewed {
        /// The request's number.
        seq: u64,
        /// The mark.
        stamp: Stamp,
    },
    /// The sender's member leaves: hand over its shards.
    Leaving,
    /// The sender routes to the type's shards without hosting any: tell
    /// it of every hand-off (a new coordinator hears it from each).
    Follow,
    /// The leaving region hosts nothing any more.
    Drained,
    /// The sender's message with this request number is in its entity's
    /// mailbox.
    Delivered(u64),
    /// No member hosts the type: the shard will have no home.
    NoHome(ShardId),
    /// The sender's message with this request number was refused.
    Refused {
        /// The request number the sender gave it.
        request: u64,
        /// Why.
        error: EntityError,
    },
}

/// Why bytes are not a [`Message`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes end inside a field.
    #[error("sharding message truncated")]
    Truncated,
    /// A version this build does not speak.
    #[error("sharding message of version {0}; this build speaks {VERSION}")]
    Version(u8),
    /// An unknown kind.
    #[error("unknown sharding message kind {0}")]
    Kind(u8),
    /// An unknown refusal code.
    #[error("unknown sharding refusal code {0}")]
    Refusal(u8),
    /// Unknown flags in a lease renewal.
    #[error("unknown sharding renewal flags {0:#04x}")]
    RenewFlags(u8),
    /// A string that is not UTF-8.
    #[error("sharding message with a string that is not UTF-8")]
    Utf8,
    /// A count over its bound.
    #[error("sharding message names {count} {what}, over the limit of {max}")]
    TooMany {
        /// What is counted.
        what: &'static str,
        /// How many the message says.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// An entity id that is not one.
    #[error("sharding message with a bad entity id: {0}")]
    Id(#[from] EntityIdError),
    /// Bytes after the message.
    #[error("{0} bytes after the sharding message")]
    Trailing(usize),
}

impl Message {
    /// The message's bytes.
    ///
    /// # Panics
    ///
    /// If a string is longer than its length field holds (a member address
    /// over 255 bytes, an entity type over 255): type names are checked
    /// when registered, and a node's address is at most 255 bytes.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        b.put_u8(VERSION);
        b.put_u8(self.body.kind());
        put_str8(&mut b, &self.from);
        put_str8(&mut b, &self.entity_type);
        match &self.body {
            Body::AskHome(s) | Body::NoHome(s) => b.put_u32(s.0),
            Body::HandOffAck(s, h) | Body::ShardStopped(s, h) => {
                b.put_u32(s.0);
                b.put_u64(h.0);
            }
            Body::Home { shard, home } => {
                b.put_u32(shard.0);
                put_str8(&mut b, home);
            }
            Body::BeginHandOff {
                shard,
                handoff,
                from,
            } => {
                b.put_u32(shard.0);
                b.put_u64(handoff.0);
                put_str8(&mut b, from);
            }
            Body::HandOff {
                shard,
                handoff,
                regions,
            } => {
                b.put_u32(shard.0);
                b.put_u64(handoff.0);
                b.put_u16(u16::try_from(regions.len()).expect("at most MAX_REGIONS"));
                for r in regions {
                    put_str8(&mut b, r);
                }
            }
            Body::Delivered(seq) => b.put_u64(*seq),
            Body::Renew {
                seq,
                leased,
                placement,
                hosted,
                echo,
            } => {
                b.put_u64(*seq);
                let oldest = u8::from(*placement == Placement::Oldest);
                b.put_u8(u8::from(*leased) | (oldest << 1));
                put_shards(&mut b, hosted);
                put_stamp(&mut b, *echo);
            }
            Body::Renewed {
                seq,
                revoked,
                stamp,
            } => {
                b.put_u64(*seq);
                put_shards(&mut b, revoked);
                put_stamp(&mut b, *stamp);
            }
            Body::NotRenewed { seq, stamp } => {
                b.put_u64(*seq);
                put_stamp(&mut b, *stamp);
            }
            Body::Leaving | Body::Drained | Body::Follow => {}
            Body::Refused { request, error } => {
                b.put_u64(*request);
                match error {
                    EntityError::Unavailable => b.put_u8(0),
                    EntityError::Lost => b.put_u8(2),
                    EntityError::NoRegion => b.put_u8(3),
                    EntityError::Route(RouteError::HandOffBufferFull { shard, limit }) => {
                        b.put_u8(1);
                        b.put_u32(shard.0);
                        b.put_u32(u32::try_from(*limit).unwrap_or(u32::MAX));
                    }
                }
            }
        }
        b.freeze()
    }

    /// Parses `bytes`.
    ///
    /// # Errors
    ///
    /// [`WireError`] for anything but exactly one well-formed message.
    pub fn decode(bytes: &Bytes) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let kind = r.u8()?;
        let from: Arc<str> = r.str8()?.into();
        let entity_type: Arc<str> = r.str8()?.into();
        let body = match kind {
            0 => Body::AskHome(r.shard()?),
            1 => Body::Home {
                shard: r.shard()?,
                home: r.str8()?.into(),
            },
            2 => Body::BeginHandOff {
                shard: r.shard()?,
                handoff: HandOffId(r.u64()?),
                from: r.str8()?.into(),
            },
            3 => Body::HandOffAck(r.shard()?, HandOffId(r.u64()?)),
            4 => {
                let shard = r.shard()?;
                let handoff = HandOffId(r.u64()?);
                let count = usize::from(r.u16()?);
                if count > MAX_REGIONS {
                    return Err(WireError::TooMany {
                        what: "regions",
                        count,
                        max: MAX_REGIONS,
                    });
                }
                let regions = (0..count)
                    .map(|_| r.str8().map(Arc::from))
                    .collect::<Result<_, _>>()?;
                Body::HandOff {
                    shard,
                    handoff,
                    regions,
                }
            }
            5 => Body::ShardStopped(r.shard()?, HandOffId(r.u64()?)),
            6 => {
                let seq = r.u64()?;
                let flags = r.u8()?;
                if flags > 3 {
                    return Err(WireError::RenewFlags(flags));
                }
                Body::Renew {
                    seq,
                    leased: flags & 1 == 1,
                    placement: if flags & 2 == 2 {
                        Placement::Oldest
                    } else {
                        Placement::Spread
                    },
                    hosted: r.shards()?,
                    echo: r.stamp()?,
                }
            }
            7 => Body::Renewed {
                seq: r.u64()?,
                revoked: r.shards()?,
                stamp: r.stamp()?,
            },
            14 => Body::NotRenewed {
                seq: r.u64()?,
                stamp: r.stamp()?,
            },
            9 => Body::Leaving,
            15 => Body::Follow,
            10 => Body::Drained,
            11 => {
                let request = r.u64()?;
                let error = match r.u8()? {
                    0 => EntityError::Unavailable,
                    2 => EntityError::Lost,
                    3 => EntityError::NoRegion,
                    1 => EntityError::Route(RouteError::HandOffBufferFull {
                        shard: r.shard()?,
                        limit: r.u32()? as usize,
                    }),
                    other => return Err(WireError::Refusal(other)),
                };
                Body::Refused { request, error }
            }
            12 => Body::Delivered(r.u64()?),
            13 => Body::NoHome(r.shard()?),
            other => return Err(WireError::Kind(other)),
        };
        if r.rest() > 0 {
            return Err(WireError::Trailing(r.rest()));
        }
        Ok(Self {
            from,
            entity_type,
            body,
        })
    }
}

impl Body {
    fn kind(&self) -> u8 {
        match self {
            Body::AskHome(_) => 0,
            Body::Home { .. } => 1,
            Body::BeginHandOff { .. } => 2,
            Body::HandOffAck(..) => 3,
            Body::HandOff { .. } => 4,
            Body::ShardStopped(..) => 5,
            Body::Renew { .. } => 6,
            Body::Renewed { .. } => 7,
            Body::NotRenewed { .. } => 14,
            Body::Leaving => 9,
            Body::Follow => 15,
            Body::Drained => 10,
            Body::Refused { .. } => 11,
            Body::Delivered(_) => 12,
            Body::NoHome(_) => 13,
        }
    }
}

fn put_shards(b: &mut impl BufMut, shards: &[ShardId]) {
    b.put_u32(u32::try_from(shards.len()).expect("at most MAX_SHARDS"));
    for s in shards {
        b.put_u32(s.0);
    }
}

fn put_stamp(b: &mut impl BufMut, stamp: Stamp) {
    b.put_u32(stamp.epoch);
    b.put_u64(stamp.nanos);
}

pub(crate) fn put_str8(b: &mut impl BufMut, s: &str) {
    b.put_u8(u8::try_from(s.len()).expect("a name of at most 255 bytes"));
    b.put_slice(s.as_bytes());
}

/// A cursor over untrusted bytes: every read is checked.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Bytes read so far.
    pub(crate) fn at(&self) -> usize {
        self.at
    }

    pub(crate) fn rest(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest() < n {
            return Err(WireError::Truncated);
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }

    /// `count: u32, shard: u32 × count`, bounded by [`MAX_SHARDS`].
    fn shards(&mut self) -> Result<Vec<ShardId>, WireError> {
        let count = self.u32()? as usize;
        if count > MAX_SHARDS {
            return Err(WireError::TooMany {
                what: "shards",
                count,
                max: MAX_SHARDS,
            });
        }
        // Four bytes each must be there before anything is kept.
        if self.rest() < count * 4 {
            return Err(WireError::Truncated);
        }
        (0..count).map(|_| self.shard()).collect()
    }

    fn shard(&mut self) -> Result<ShardId, WireError> {
        self.u32().map(ShardId)
    }

    fn stamp(&mut self) -> Result<Stamp, WireError> {
        Ok(Stamp {
            epoch: self.u32()?,
            nanos: self.u64()?,
        })
    }

    pub(crate) fn str8(&mut self) -> Result<&'a str, WireError> {
        let len = usize::from(self.u8()?);
        std::str::from_utf8(self.take(len)?).map_err(|_| WireError::Utf8)
    }
}

/// Decodes arbitrary bytes and, when they are a message, checks that it
/// encodes back to the same bytes: the `wire` fuzz target's body.
pub fn fuzz_decode(data: &[u8]) {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(message) = Message::decode(&bytes) {
        assert_eq!(message.encode(), bytes, "a decoded message encodes back");
    }
}

#[cfg(test)]
mod tests;
