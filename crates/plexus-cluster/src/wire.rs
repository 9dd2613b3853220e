//! The membership protocol's packets and their byte format.
//!
//! Every packet: `version: u8 (2) | kind: u8 | cluster: str8 |
//! from: str8 | from_incarnation: u64 | from_life: u64 | body | count: u8 |
//! entries`, where `str8` is a length byte and that many UTF-8 bytes,
//! integers are big endian, and an entry is `address: str8 |
//! incarnation: u64 | life: u64 | state: u8 | weight: u16 |
//! up_number: u64` (a life is never after its incarnation). Bodies:
//!
//! | kind | body | meaning |
//! | --- | --- | --- |
//! | 0 ping | `seq: u32` | are you alive? |
//! | 1 ack | `seq: u32` | yes (also relayed for an indirect probe) |
//! | 2 ping-req | `seq: u32, target: str8` | probe `target` for me |
//! | 3 nack | `seq: u32` | I probed it for you and heard nothing (Lifeguard) |
//! | 4 gossip | - | the entries are the message |
//! | 5 join | `weight: u16` | admit me |
//! | 6 sync | `mode: u8, page: u16, pages: u16, digest: u64` | membership pages: a join's answer (0), a push (1), a push's answer (2) |
//! | 7 suspect | `target: str8, incarnation: u64` | my own probes of `target` failed (an independent accusation, Lifeguard's confirmation) |
//!
//! Decoding is the checked path for untrusted bytes: lengths, counts and
//! codes are validated, nothing panics, trailing bytes are an error. The
//! `wire` fuzz target checks that on arbitrary input.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::member::{Member, MemberState};

const VERSION: u8 = 2;

/// The largest packet [`Packet::decode`] accepts, whatever the configured
/// limit (the sender's limit is 1,400 bytes by default).
pub const MAX_PACKET: usize = 64 * 1024;

/// Most entries one packet may carry.
pub const MAX_ENTRIES: usize = 255;

/// Fixed bytes of an entry besides its address.
const ENTRY_FIXED: usize = 1 + 8 + 8 + 1 + 2 + 8;

/// A membership packet. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The sender's cluster name.
    pub cluster: Arc<str>,
    /// The sender's address.
    pub from: Arc<str>,
    /// The sender's incarnation.
    pub from_incarnation: u64,
    /// The sender's life (see [`Member::life`]).
    pub from_life: u64,
    /// What the packet asks or answers.
    pub body: Body,
    /// Claims about members (piggybacked gossip, or a page of membership).
    pub entries: Vec<Member>,
}

/// A packet's body. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// A direct probe.
    Ping {
        /// Matches the ack to the probe.
        seq: u32,
    },
    /// An answer to a ping (or a relayed one, carrying the requester's seq).
    Ack {
        /// The probe's seq.
        seq: u32,
    },
    /// A request to probe `target` on the sender's behalf (SWIM's indirect
    /// probe).
    PingReq {
        /// The requester's seq, echoed in the relayed ack or nack.
        seq: u32,
        /// The member to probe.
        target: Arc<str>,
    },
    /// The helper of a ping-req heard nothing from the target (Lifeguard:
    /// tells the requester that the helper, at least, is alive).
    Nack {
        /// The requester's seq.
        seq: u32,
    },
    /// Gossip only.
    Gossip,
    /// A request to be admitted.
    Join {
        /// The joiner's weight on the ring.
        weight: u16,
    },
    /// The sender's own probes of `target` failed: an independent
    /// accusation (Lifeguard counts these to shorten a suspicion).
    Suspect {
        /// The suspected member.
        target: Arc<str>,
        /// Its incarnation as the accuser knows it.
        incarnation: u64,
    },
    /// A page of the sender's membership.
    Sync {
        /// Why it is sent.
        mode: SyncMode,
        /// This page's index.
        page: u16,
        /// How many pages the sender sent.
        pages: u16,
        /// Digest of the sender's whole membership (equal digests need no
        /// answer).
        digest: u64,
    },
}

/// Why membership pages are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Answers a join: the joiner is admitted.
    JoinReply,
    /// Push-pull anti-entropy: here is mine, send yours if it differs.
    Push,
    /// Push-pull's answer.
    PushReply,
}

/// Why bytes are not a membership packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The packet ends inside a field.
    #[error("truncated packet")]
    Truncated,
    /// Bigger than [`MAX_PACKET`].
    #[error("packet of {0} bytes is over the {MAX_PACKET}-byte limit")]
    TooLarge(usize),
    /// Another protocol version (or not a membership packet at all).
    #[error("unsupported membership protocol version {0}")]
    Version(u8),
    /// An unknown packet kind.
    #[error("unknown packet kind {0}")]
    Kind(u8),
    /// An unknown sync mode.
    #[error("unknown sync mode {0}")]
    SyncMode(u8),
    /// An unknown member state code.
    #[error("unknown member state {0}")]
    State(u8),
    /// A name that is not UTF-8.
    #[error("a name is not UTF-8")]
    Utf8,
    /// An empty address.
    #[error("empty member address")]
    EmptyAddress,
    /// Bytes after the last entry.
    #[error("{0} bytes after the packet's end")]
    TrailingBytes(usize),
    /// A life that starts after the incarnation it is claimed at.
    #[error("life {life} after incarnation {incarnation}")]
    Life {
        /// The claimed life.
        life: u64,
        /// The claimed incarnation.
        incarnation: u64,
    },
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    fn str8(&mut self) -> Result<Arc<str>, DecodeError> {
        let n = usize::from(self.u8()?);
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(Arc::from)
            .map_err(|_| DecodeError::Utf8)
    }

    fn address(&mut self) -> Result<Arc<str>, DecodeError> {
        let a = self.str8()?;
        if a.is_empty() {
            return Err(DecodeError::EmptyAddress);
        }
        Ok(a)
    }
}

fn put_str8(out: &mut BytesMut, s: &str) {
    // Names are checked to fit 255 bytes where they enter (config, join);
    // a longer one is cut at a char boundary rather than corrupting the
    // packet.
    let mut n = s.len().min(255);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.put_u8(n as u8);
    out.put_slice(&s.as_bytes()[..n]);
}

/// Encoded bytes of one entry.
pub fn entry_len(member: &Member) -> usize {
    ENTRY_FIXED + member.address.len().min(255)
}

impl Packet {
    /// Encoded bytes of everything but the entries (and their count byte).
    pub fn header_len(&self) -> usize {
        let body = match &self.body {
            Body::Ping { .. } | Body::Ack { .. } | Body::Nack { .. } => 4,
            Body::PingReq { target, .. } => 4 + 1 + target.len().min(255),
            Body::Gossip => 0,
            Body::Join { .. } => 2,
            Body::Sync { .. } => 1 + 2 + 2 + 8,
            Body::Suspect { target, .. } => 1 + target.len().min(255) + 8,
        };
        2 + 1 + self.cluster.len().min(255) + 1 + self.from.len().min(255) + 8 + 8 + body
    }

    /// The packet's encoded length.
    pub fn encoded_len(&self) -> usize {
        self.header_len() + 1 + self.entries.iter().map(entry_len).sum::<usize>()
    }

    /// The packet's bytes. At most [`MAX_ENTRIES`] entries are written.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        out.put_u8(VERSION);
        let (kind, _) = self.kind();
        out.put_u8(kind);
        put_str8(&mut out, &self.cluster);
        put_str8(&mut out, &self.from);
        out.put_u64(self.from_incarnation);
        out.put_u64(self.from_life);
        match &self.body {
            Body::Ping { seq } | Body::Ack { seq } | Body::Nack { seq } => out.put_u32(*seq),
            Body::PingReq { seq, target } => {
                out.put_u32(*seq);
                put_str8(&mut out, target);
            }
            Body::Gossip => {}
            Body::Join { weight } => out.put_u16(*weight),
            Body::Suspect {
                target,
                incarnation,
            } => {
                put_str8(&mut out, target);
                out.put_u64(*incarnation);
            }
            Body::Sync {
                mode,
                page,
                pages,
                digest,
            } => {
                out.put_u8(match mode {
                    SyncMode::JoinReply => 0,
                    SyncMode::Push => 1,
                    SyncMode::PushReply => 2,
                });
                out.put_u16(*page);
                out.put_u16(*pages);
                out.put_u64(*digest);
            }
        }
        let count = self.entries.len().min(MAX_ENTRIES);
        out.put_u8(count as u8);
        for m in &self.entries[..count] {
            put_str8(&mut out, &m.address);
            out.put_u64(m.incarnation);
            out.put_u64(m.life);
            out.put_u8(m.state.code());
            out.put_u16(m.weight);
            out.put_u64(m.up_number);
        }
        out.freeze()
    }

    fn kind(&self) -> (u8, &'static str) {
        match self.body {
            Body::Ping { .. } => (0, "ping"),
            Body::Ack { .. } => (1, "ack"),
            Body::PingReq { .. } => (2, "ping-req"),
            Body::Nack { .. } => (3, "nack"),
            Body::Gossip => (4, "gossip"),
            Body::Join { .. } => (5, "join"),
            Body::Sync { .. } => (6, "sync"),
            Body::Suspect { .. } => (7, "suspect"),
        }
    }

    /// The packet's kind, for logs.
    pub fn kind_name(&self) -> &'static str {
        self.kind().1
    }

    /// Parses untrusted bytes.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] says what is wrong; nothing is kept of a bad packet.
    pub fn decode(bytes: &[u8]) -> Result<Packet, DecodeError> {
        if bytes.len() > MAX_PACKET {
            return Err(DecodeError::TooLarge(bytes.len()));
        }
        let mut r = Reader { bytes };
        let version = r.u8()?;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let kind = r.u8()?;
        let cluster = r.str8()?;
        let from = r.address()?;
        let from_incarnation = r.u64()?;
        let from_life = life(r.u64()?, from_incarnation)?;
        let body = match kind {
            0 => Body::Ping { seq: r.u32()? },
            1 => Body::Ack { seq: r.u32()? },
            2 => Body::PingReq {
                seq: r.u32()?,
                target: r.address()?,
            },
            3 => Body::Nack { seq: r.u32()? },
            4 => Body::Gossip,
            5 => Body::Join { weight: r.u16()? },
            6 => {
                let mode = match r.u8()? {
                    0 => SyncMode::JoinReply,
                    1 => SyncMode::Push,
                    2 => SyncMode::PushReply,
                    other => return Err(DecodeError::SyncMode(other)),
                };
                Body::Sync {
                    mode,
                    page: r.u16()?,
                    pages: r.u16()?,
                    digest: r.u64()?,
                }
            }
            7 => Body::Suspect {
                target: r.address()?,
                incarnation: r.u64()?,
            },
            other => return Err(DecodeError::Kind(other)),
        };
        let count = usize::from(r.u8()?);
        // Each entry takes at least ENTRY_FIXED + 1 bytes: a count the
        // remaining bytes cannot hold is refused before allocating.
        if count * (ENTRY_FIXED + 1) > r.bytes.len() {
            return Err(DecodeError::Truncated);
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let address = r.address()?;
            let incarnation = r.u64()?;
            let life = life(r.u64()?, incarnation)?;
            let code = r.u8()?;
            let state = MemberState::from_code(code).ok_or(DecodeError::State(code))?;
            entries.push(Member {
                address,
                incarnation,
                life,
                state,
                weight: r.u16()?,
                up_number: r.u64()?,
            });
        }
        if !r.bytes.is_empty() {
            return Err(DecodeError::TrailingBytes(r.bytes.len()));
        }
        Ok(Packet {
            cluster,
            from,
            from_incarnation,
            from_life,
            body,
            entries,
        })
    }
}

/// `life`, checked against the `incarnation` it is claimed at.
fn life(life: u64, incarnation: u64) -> Result<u64, DecodeError> {
    if life > incarnation {
        return Err(DecodeError::Life { life, incarnation });
    }
    Ok(life)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = Arc<str>> {
        "[a-z0-9:/.]{1,40}".prop_map(Arc::from)
    }

    fn member() -> impl Strategy<Value = Member> {
        (
            name(),
            any::<u64>(),
            any::<u64>(),
            0u8..6,
            any::<u16>(),
            any::<u64>(),
        )
            .prop_map(
                |(address, incarnation, back, code, weight, up_number)| Member {
                    address,
                    incarnation,
                    life: incarnation.saturating_sub(back),
                    state: MemberState::from_code(code).expect("codes 0..6 exist"),
                    weight,
                    up_number,
                },
            )
    }

    fn body() -> impl Strategy<Value = Body> {
        prop_oneof![
            any::<u32>().prop_map(|seq| Body::Ping { seq }),
            any::<u32>().prop_map(|seq| Body::Ack { seq }),
            (any::<u32>(), name()).prop_map(|(seq, target)| Body::PingReq { seq, target }),
            any::<u32>().prop_map(|seq| Body::Nack { seq }),
            Just(Body::Gossip),
            any::<u16>().prop_map(|weight| Body::Join { weight }),
            (name(), any::<u64>()).prop_map(|(target, incarnation)| Body::Suspect {
                target,
                incarnation
            }),
            (0u8..3, any::<u16>(), any::<u16>(), any::<u64>()).prop_map(
                |(m, page, pages, digest)| Body::Sync {
                    mode: [SyncMode::JoinReply, SyncMode::Push, SyncMode::PushReply]
                        [usize::from(m)],
                    page,
                    pages,
                    digest,
                }
            ),
        ]
    }

    proptest! {
        #[test]
        fn packets_round_trip(
            cluster in "[a-z]{0,20}",
            from in name(),
            from_incarnation in any::<u64>(),
            back in any::<u64>(),
            body in body(),
            entries in proptest::collection::vec(member(), 0..30),
        ) {
            let from_life = from_incarnation.saturating_sub(back);
            let p = Packet { cluster: cluster.into(), from, from_incarnation, from_life, body, entries };
            let bytes = p.encode();
            prop_assert_eq!(bytes.len(), p.encoded_len());
            prop_assert_eq!(Packet::decode(&bytes), Ok(p));
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Packet::decode(&bytes);
        }
    }

    #[test]
    fn bad_packets_get_typed_errors() {
        let p = Packet {
            cluster: "c".into(),
            from: "a".into(),
            from_incarnation: 1,
            from_life: 1,
            body: Body::Gossip,
            entries: vec![Member::joining("b", 1, 1)],
        };
        let good = p.encode().to_vec();
        assert_eq!(
            Packet::decode(&good[..good.len() - 1]),
            Err(DecodeError::Truncated)
        );
        let mut v = good.clone();
        v[0] = 9;
        assert_eq!(Packet::decode(&v), Err(DecodeError::Version(9)));
        let mut v = good.clone();
        v[1] = 77;
        assert_eq!(Packet::decode(&v), Err(DecodeError::Kind(77)));
        let mut v = good.clone();
        let state_at = v.len() - 11;
        v[state_at] = 9;
        assert_eq!(Packet::decode(&v), Err(DecodeError::State(9)));
        let mut v = good.clone();
        let life_at = v.len() - 11 - 8;
        v[life_at] = 1;
        assert_eq!(
            Packet::decode(&v),
            Err(DecodeError::Life {
                life: 1 << 56 | 1,
                incarnation: 1
            })
        );
        let mut v = good.clone();
        v.push(0);
        assert_eq!(Packet::decode(&v), Err(DecodeError::TrailingBytes(1)));
        let mut v = good;
        let count_at = v.len() - 29 - 1;
        v[count_at] = 200;
        assert_eq!(Packet::decode(&v), Err(DecodeError::Truncated));
        assert_eq!(
            Packet::decode(&vec![1; MAX_PACKET + 1]),
            Err(DecodeError::TooLarge(MAX_PACKET + 1))
        );
    }
}
