//! The device protocol's packets: a tag byte, then fixed-width
//! little-endian fields; addresses are a length byte and UTF-8.
//!
//! ```text
//!  device -> server   1 Register  device u64 | session u64 | hops u8 | heartbeat_ms u32 | reply_to addr | failed addr (len 0: none)
//!                     2 Heartbeat device u64 | session u64 | reply_to addr
//!                     3 Report    device u64 | session u64 | seq u64 | count u16 | count x i64
//!                     4 NotYours  device u64 | session u64 | server_tag u64
//!  server -> device  10 Welcome   device u64 | session u64 | server_tag u64 | server addr
//!                    11 Heartbeat device u64 | session u64 | server_tag u64 | server addr
//!                    12 Request   device u64 | session u64 | server_tag u64 | seq u64
//!                    13 Stop      device u64 | session u64 | reason u8
//!                    14 Refused   device u64 | session u64 | reason u8
//! ```
//!
//! A server forwards a registration to the device's owner as the same
//! `Register` with `hops` raised; the receiver of a forwarded one keeps it
//! (no second hop, so servers whose rings disagree for a moment cannot
//! loop). Packets travel as the payload of a [`DevicePacket`] remote
//! message when the drivers run on Plexus nodes.
//!
//! **Untrusted input.** [`Packet::parse`] checks every length before it
//! reads, bounds addresses to [`MAX_ADDR`] bytes and reports to
//! [`MAX_VALUES`] values, and never panics: whatever the bytes, it returns
//! a packet or a [`WireError`] (tested on every truncation of every kind
//! and on random bytes below).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

/// Longest address in a packet (bytes of UTF-8).
pub const MAX_ADDR: usize = 255;
/// Most values in one report.
pub const MAX_VALUES: usize = 8192;

/// A device's id, unique in a cluster (chosen by whoever deploys the
/// devices). It is the key the ring assigns.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct DeviceId(pub u64);

impl DeviceId {
    /// The ring key of this device.
    pub fn key(self) -> [u8; 8] {
        self.0.to_le_bytes()
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "d{}", self.0)
    }
}

/// One run of a device driver. Higher is newer: drivers make it from the
/// wall clock in milliseconds shifted left 16 bits, with random low bits
/// ([`SessionId::from_parts`]), so a restarted driver outranks the run it
/// replaces. Of two drivers of one device id, the newer session holds it
/// and the older one is told to stop.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct SessionId(pub u64);

impl SessionId {
    /// A session from a start time in milliseconds and 16 random bits.
    pub fn from_parts(start_ms: u64, random: u16) -> Self {
        Self((start_ms << 16) | u64::from(random))
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// The 64-bit tag of a server address carried in frequent packets
/// (FNV-1a of its bytes), so a `Request` need not carry the address.
pub fn server_tag(address: &str) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for b in address.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Why a server tells a driver to stop for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// A newer session of the same device id holds it.
    Duplicate,
}

/// Why a server did not take a packet; the driver tries again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefuseReason {
    /// Too many registrations from the device's process; back off.
    RateLimited,
    /// The server's table is full.
    TableFull,
    /// The server does not know this device (it restarted, or forgot a
    /// silent device): register again.
    Unknown,
}

impl StopReason {
    fn code(self) -> u8 {
        match self {
            StopReason::Duplicate => 1,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        (c == 1).then_some(StopReason::Duplicate)
    }
}

impl RefuseReason {
    fn code(self) -> u8 {
        match self {
            RefuseReason::RateLimited => 1,
            RefuseReason::TableFull => 2,
            RefuseReason::Unknown => 3,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(RefuseReason::RateLimited),
            2 => Some(RefuseReason::TableFull),
            3 => Some(RefuseReason::Unknown),
            _ => None,
        }
    }
}

/// A report's values as they arrived (little-endian `i64`s), read without
/// copying them out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Values(Bytes);

impl Values {
    /// Values encoded from a slice.
    pub fn from_slice(values: &[i64]) -> Self {
        let mut b = BytesMut::with_capacity(values.len() * 8);
        for v in values {
            b.put_i64_le(*v);
        }
        Self(b.freeze())
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.0.len() / 8
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values in order.
    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        self.0
            .chunks_exact(8)
            // chunks_exact(8) gives 8-byte slices.
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
    }

    /// Their sum (wrapping, as a running total does).
    pub fn sum(&self) -> i64 {
        self.iter().fold(0i64, i64::wrapping_add)
    }
}

/// A device protocol packet. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Packet {
    /// A driver asks to be tracked.
    Register {
        /// The device.
        device: DeviceId,
        /// The driver's run.
        session: SessionId,
        /// 0 from the device, 1 forwarded by a server.
        hops: u8,
        /// The interval the device sends heartbeats at.
        heartbeat_ms: u32,
        /// Where the server sends to the device.
        reply_to: Arc<str>,
        /// A server the device lost: not to be given the device again.
        failed: Option<Arc<str>>,
    },
    /// A device's sign of life.
    DeviceHeartbeat {
        /// The device.
        device: DeviceId,
        /// The driver's run.
        session: SessionId,
        /// Where the server answers (a server that forgot it says so).
        reply_to: Arc<str>,
    },
    /// A device's answer to a report request.
    Report {
        /// The device.
        device: DeviceId,
        /// The driver's run.
        session: SessionId,
        /// The request answered.
        seq: u64,
        /// The values.
        values: Values,
    },
    /// A device tells a server it is not the device's server.
    NotYours {
        /// The device.
        device: DeviceId,
        /// The driver's run.
        session: SessionId,
        /// The server addressed.
        server_tag: u64,
    },
    /// The responsible server took the device.
    Welcome {
        /// The device.
        device: DeviceId,
        /// The driver's run.
        session: SessionId,
        /// [`server_tag`] of `server`.
        server_tag: u64,
        /// The responsible server.
        server: Arc<str>,
    },
    /// A server's sign of life to a device.
    ServerHeartbeat {
        /// The device.
        device: DeviceId,
        /// The driver's run.
        session: SessionId,
        /// [`server_tag`] of `server`.
        server_tag: u64,
        /// The server sending it.
        server: Arc<str>,
    },
    /// A server asks for a report.
    Request {
        /// The device.
        device: DeviceId,
        /// The driver's run.
        session: SessionId,
        /// The sending server's tag.
        server_tag: u64,
        /// Which report.
        seq: u64,
    },
    /// The driver must stop.
    Stop {
        /// The device.
        device: DeviceId,
        /// The run that must stop.
        session: SessionId,
        /// Why.
        reason: StopReason,
    },
    /// The server did not take the packet.
    Refused {
        /// The device.
        device: DeviceId,
        /// The driver's run.
        session: SessionId,
        /// Why.
        reason: RefuseReason,
    },
}

/// Bytes that are no device packet. Nothing was changed by them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The packet ends early (a truncated or foreign packet).
    #[error("device packet: truncated (tag {tag}, needs {need} bytes, has {have})")]
    Truncated {
        /// The packet's tag.
        tag: u8,
        /// Bytes needed so far.
        need: usize,
        /// Bytes there.
        have: usize,
    },
    /// The tag is no known packet kind (a newer protocol, or garbage).
    #[error("device packet: unknown tag {0}")]
    UnknownTag(u8),
    /// An address is not UTF-8.
    #[error("device packet: an address is not UTF-8")]
    BadAddress,
    /// A report claims more than [`MAX_VALUES`] values.
    #[error("device packet: a report of {0} values (at most {MAX_VALUES})")]
    TooManyValues(usize),
    /// A reason code is unknown.
    #[error("device packet: unknown reason code {0}")]
    BadReason(u8),
    /// Bytes follow the packet.
    #[error("device packet: {0} bytes after the end")]
    Trailing(usize),
}

/// A checked reader over a packet.
struct Reader<'a> {
    bytes: &'a Bytes,
    at: usize,
    tag: u8,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], WireError> {
        let end = self.at.saturating_add(n);
        if end > self.bytes.len() {
            return Err(WireError::Truncated {
                tag: self.tag,
                need: end,
                have: self.bytes.len(),
            });
        }
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn addr(&mut self) -> Result<Arc<str>, WireError> {
        let n = usize::from(self.u8()?);
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(Arc::from)
            .map_err(|_| WireError::BadAddress)
    }
    fn ids(&mut self) -> Result<(DeviceId, SessionId), WireError> {
        Ok((DeviceId(self.u64()?), SessionId(self.u64()?)))
    }
    fn end(&self) -> Result<(), WireError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

fn put_addr(b: &mut BytesMut, a: &str) {
    // Addresses are cut to MAX_ADDR bytes by their makers (the drivers
    // check theirs at start); a longer one would not parse, so cut here too.
    let n = a.len().min(MAX_ADDR);
    b.put_u8(n as u8);
    b.put_slice(&a.as_bytes()[..n]);
}

impl Packet {
    /// Parses a packet (a slice of `bytes` is kept for report values).
    ///
    /// # Errors
    ///
    /// [`WireError`] if the bytes are not a whole, valid packet.
    pub fn parse(bytes: &Bytes) -> Result<Packet, WireError> {
        let Some(&tag) = bytes.first() else {
            return Err(WireError::Truncated {
                tag: 0,
                need: 1,
                have: 0,
            });
        };
        let mut r = Reader { bytes, at: 1, tag };
        let p = match tag {
            1 => {
                let (device, session) = r.ids()?;
                let hops = r.u8()?;
                let heartbeat_ms = r.u32()?;
                let reply_to = r.addr()?;
                let failed = r.addr()?;
                Packet::Register {
                    device,
                    session,
                    hops,
                    heartbeat_ms,
                    reply_to,
                    failed: (!failed.is_empty()).then_some(failed),
                }
            }
            2 => {
                let (device, session) = r.ids()?;
                Packet::DeviceHeartbeat {
                    device,
                    session,
                    reply_to: r.addr()?,
                }
            }
            3 => {
                let (device, session) = r.ids()?;
                let seq = r.u64()?;
                let count = usize::from(r.u16()?);
                if count > MAX_VALUES {
                    return Err(WireError::TooManyValues(count));
                }
                let start = r.at;
                r.take(count * 8)?;
                Packet::Report {
                    device,
                    session,
                    seq,
                    values: Values(bytes.slice(start..start + count * 8)),
                }
            }
            4 => {
                let (device, session) = r.ids()?;
                Packet::NotYours {
                    device,
                    session,
                    server_tag: r.u64()?,
                }
            }
            10 | 11 => {
                let (device, session) = r.ids()?;
                let server_tag = r.u64()?;
                let server = r.addr()?;
                if tag == 10 {
                    Packet::Welcome {
                        device,
                        session,
                        server_tag,
                        server,
                    }
                } else {
                    Packet::ServerHeartbeat {
                        device,
                        session,
                        server_tag,
                        server,
                    }
                }
            }
            12 => {
                let (device, session) = r.ids()?;
                Packet::Request {
                    device,
                    session,
                    server_tag: r.u64()?,
                    seq: r.u64()?,
                }
            }
            13 => {
                let (device, session) = r.ids()?;
                let c = r.u8()?;
                Packet::Stop {
                    device,
                    session,
                    reason: StopReason::from_code(c).ok_or(WireError::BadReason(c))?,
                }
            }
            14 => {
                let (device, session) = r.ids()?;
                let c = r.u8()?;
                Packet::Refused {
                    device,
                    session,
                    reason: RefuseReason::from_code(c).ok_or(WireError::BadReason(c))?,
                }
            }
            t => return Err(WireError::UnknownTag(t)),
        };
        r.end()?;
        Ok(p)
    }

    /// The packet's bytes.
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.buffer_len());
        self.emit(&mut b);
        b.freeze()
    }

    /// Bytes [`Packet::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        1 + 16
            + match self {
                Packet::Register {
                    reply_to, failed, ..
                } => 1 + 4 + 2 + reply_to.len() + failed.as_ref().map_or(0, |f| f.len()),
                Packet::DeviceHeartbeat { reply_to, .. } => 1 + reply_to.len(),
                Packet::Report { values, .. } => 8 + 2 + values.0.len(),
                Packet::NotYours { .. } => 8,
                Packet::Welcome { server, .. } | Packet::ServerHeartbeat { server, .. } => {
                    8 + 1 + server.len()
                }
                Packet::Request { .. } => 16,
                Packet::Stop { .. } | Packet::Refused { .. } => 1,
            }
    }

    /// Appends the packet to `b`.
    pub fn emit(&self, b: &mut BytesMut) {
        let ids = |b: &mut BytesMut, tag: u8, d: DeviceId, s: SessionId| {
            b.put_u8(tag);
            b.put_u64_le(d.0);
            b.put_u64_le(s.0);
        };
        match self {
            Packet::Register {
                device,
                session,
                hops,
                heartbeat_ms,
                reply_to,
                failed,
            } => {
                ids(b, 1, *device, *session);
                b.put_u8(*hops);
                b.put_u32_le(*heartbeat_ms);
                put_addr(b, reply_to);
                put_addr(b, failed.as_deref().unwrap_or(""));
            }
            Packet::DeviceHeartbeat {
                device,
                session,
                reply_to,
            } => {
                ids(b, 2, *device, *session);
                put_addr(b, reply_to);
            }
            Packet::Report {
                device,
                session,
                seq,
                values,
            } => {
                ids(b, 3, *device, *session);
                b.put_u64_le(*seq);
                let n = values.len().min(MAX_VALUES);
                b.put_u16_le(n as u16);
                b.put_slice(&values.0[..n * 8]);
            }
            Packet::NotYours {
                device,
                session,
                server_tag,
            } => {
                ids(b, 4, *device, *session);
                b.put_u64_le(*server_tag);
            }
            Packet::Welcome {
                device,
                session,
                server_tag,
                server,
            } => {
                ids(b, 10, *device, *session);
                b.put_u64_le(*server_tag);
                put_addr(b, server);
            }
            Packet::ServerHeartbeat {
                device,
                session,
                server_tag,
                server,
            } => {
                ids(b, 11, *device, *session);
                b.put_u64_le(*server_tag);
                put_addr(b, server);
            }
            Packet::Request {
                device,
                session,
                server_tag,
                seq,
            } => {
                ids(b, 12, *device, *session);
                b.put_u64_le(*server_tag);
                b.put_u64_le(*seq);
            }
            Packet::Stop {
                device,
                session,
                reason,
            } => {
                ids(b, 13, *device, *session);
                b.put_u8(reason.code());
            }
            Packet::Refused {
                device,
                session,
                reason,
            } => {
                ids(b, 14, *device, *session);
                b.put_u8(reason.code());
            }
        }
    }
}

/// Encodes a report straight from the values (no intermediate [`Values`]).
pub fn encode_report(
    device: DeviceId,
    session: SessionId,
    seq: u64,
    values: &[i64],
    b: &mut BytesMut,
) {
    let n = values.len().min(MAX_VALUES);
    b.reserve(1 + 16 + 8 + 2 + n * 8);
    b.put_u8(3);
    b.put_u64_le(device.0);
    b.put_u64_le(session.0);
    b.put_u64_le(seq);
    b.put_u16_le(n as u16);
    // One resize and a loop the compiler vectorises: a `put_i64_le` per
    // value checks the capacity every time (a tenth of a W5 device
    // process's time).
    let at = b.len();
    b.resize(at + n * 8, 0);
    for (slot, v) in b[at..].chunks_exact_mut(8).zip(&values[..n]) {
        slot.copy_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Packet> {
        let (d, s) = (DeviceId(7), SessionId(0x1234));
        vec![
            Packet::Register {
                device: d,
                session: s,
                hops: 1,
                heartbeat_ms: 100,
                reply_to: "udp://127.0.0.1:5000/plexus.device".into(),
                failed: Some("tcp://10.0.0.1:4000".into()),
            },
            Packet::Register {
                device: d,
                session: s,
                hops: 0,
                heartbeat_ms: 100,
                reply_to: "x".into(),
                failed: None,
            },
            Packet::DeviceHeartbeat {
                device: d,
                session: s,
                reply_to: "r".into(),
            },
            Packet::Report {
                device: d,
                session: s,
                seq: 9,
                values: Values::from_slice(&[1, -2, i64::MAX]),
            },
            Packet::NotYours {
                device: d,
                session: s,
                server_tag: 3,
            },
            Packet::Welcome {
                device: d,
                session: s,
                server_tag: server_tag("a"),
                server: "a".into(),
            },
            Packet::ServerHeartbeat {
                device: d,
                session: s,
                server_tag: 1,
                server: "b".into(),
            },
            Packet::Request {
                device: d,
                session: s,
                server_tag: 1,
                seq: 2,
            },
            Packet::Stop {
                device: d,
                session: s,
                reason: StopReason::Duplicate,
            },
            Packet::Refused {
                device: d,
                session: s,
                reason: RefuseReason::Unknown,
            },
        ]
    }

    #[test]
    fn every_packet_round_trips_with_its_announced_length() {
        for p in samples() {
            let b = p.to_bytes();
            assert_eq!(b.len(), p.buffer_len(), "{p:?}");
            assert_eq!(Packet::parse(&b), Ok(p));
        }
    }

    #[test]
    fn encode_report_matches_the_packet() {
        let mut b = BytesMut::new();
        encode_report(
            DeviceId(7),
            SessionId(0x1234),
            9,
            &[1, -2, i64::MAX],
            &mut b,
        );
        assert_eq!(b.freeze(), samples()[3].to_bytes());
    }

    #[test]
    fn every_truncation_and_extension_is_an_error_not_a_panic() {
        for p in samples() {
            let b = p.to_bytes();
            for n in 0..b.len() {
                assert!(Packet::parse(&b.slice(..n)).is_err(), "{p:?} cut at {n}");
            }
            let mut longer = BytesMut::from(&b[..]);
            longer.put_u8(0);
            assert_eq!(Packet::parse(&longer.freeze()), Err(WireError::Trailing(1)));
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // A fixed xorshift stream: the same inputs every run.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 64) as usize;
            let mut v = Vec::with_capacity(len);
            let mut y = x;
            for _ in 0..len {
                y ^= y << 13;
                y ^= y >> 7;
                y ^= y << 17;
                v.push(y as u8);
            }
            // Valid tags more often than chance.
            if let Some(t) = v.first_mut() {
                *t = [1, 2, 3, 4, 10, 11, 12, 13, 14, 99][(x % 10) as usize];
            }
            let _ = Packet::parse(&Bytes::from(v));
        }
    }

    #[test]
    fn oversized_reports_and_bad_codes_are_refused() {
        let mut b = BytesMut::new();
        b.put_u8(3);
        b.put_slice(&[0; 24]);
        b.put_u16_le(u16::MAX);
        assert_eq!(
            Packet::parse(&b.freeze()),
            Err(WireError::TooManyValues(usize::from(u16::MAX)))
        );
        let mut b = BytesMut::new();
        b.put_u8(13);
        b.put_slice(&[0; 16]);
        b.put_u8(77);
        assert_eq!(Packet::parse(&b.freeze()), Err(WireError::BadReason(77)));
        let values = Values::from_slice(&(1..=1000).collect::<Vec<_>>());
        assert_eq!(values.sum(), 500_500);
    }
}
