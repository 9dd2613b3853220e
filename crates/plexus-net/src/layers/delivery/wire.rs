//! Delivery header: zero-copy parse of untrusted bytes into a validated
//! [`DeliveryHeader`], and `emit` back (smoltcp style `parse` / `emit` /
//! `buffer_len`).
//!
//! ```text
//! flags: u8            bit 0 DATA, bit 1 ACK, other bits must be zero
//! [DATA] seq: u64      sequence number of the message that follows
//! [ACK]  cum: u64      every seq < cum was received
//!        n: u8         SACK ranges, at most 16
//!        n × (start: u32, end: u32)   offsets from cum, received [cum+start, cum+end),
//!                                     0 < start < end, sorted and disjoint
//! ```

use super::DeliveryError;
use crate::wire;

/// Largest number of SACK ranges in one header. TCP's option space (RFC
/// 2018 sec. 3) allows 3-4; a stand-alone ack here has room for more, and
/// a path losing a tenth of its messages keeps a dozen holes open in a
/// window of a few hundred: ranges left out hide what arrived above them,
/// and the sender counts it in the network until they are reported.
pub const MAX_SACK_RANGES: usize = 16;

/// SACK ranges at most in an ack that rides on data: a data frame keeps
/// its header small (a full one would push a batch past one datagram).
pub const PIGGYBACK_SACK_RANGES: usize = 4;

/// Largest encoded header: flags, seq, cum, count and sixteen ranges.
pub const MAX_HEADER_LEN: usize = 1 + 8 + 8 + 1 + MAX_SACK_RANGES * 8;

const FLAG_DATA: u8 = 0x01;
const FLAG_ACK: u8 = 0x02;

/// A range of received sequence numbers `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SackRange {
    /// First received.
    pub start: u64,
    /// One past the last received.
    pub end: u64,
}

/// A validated acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ack {
    /// Every sequence number below this was received.
    pub cumulative: u64,
    ranges: [SackRange; MAX_SACK_RANGES],
    len: u8,
}

impl Ack {
    /// An ack of everything below `cumulative` and nothing above.
    pub fn new(cumulative: u64) -> Self {
        Self {
            cumulative,
            ..Self::default()
        }
    }

    /// Adds a SACK range; returns `false` (and adds nothing) when full or
    /// when the range is not above `cumulative` and the previous range.
    pub fn push_range(&mut self, range: SackRange) -> bool {
        let floor = self.ranges().last().map_or(self.cumulative, |r| r.end);
        if (self.len as usize) < MAX_SACK_RANGES
            && range.start > floor
            && range.end > range.start
            && range.end - self.cumulative <= u64::from(u32::MAX)
        {
            self.ranges[self.len as usize] = range;
            self.len += 1;
            true
        } else {
            false
        }
    }

    /// The SACK ranges, ascending.
    pub fn ranges(&self) -> &[SackRange] {
        &self.ranges[..self.len as usize]
    }

    /// One past the highest sequence number this ack claims received.
    pub fn highest(&self) -> u64 {
        self.ranges().last().map_or(self.cumulative, |r| r.end)
    }
}

/// A validated delivery header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryHeader {
    /// Sequence number of the data that follows, if any.
    pub seq: Option<u64>,
    /// Piggy-backed or stand-alone acknowledgement.
    pub ack: Option<Ack>,
}

impl DeliveryHeader {
    /// Parses and validates a header from the front of `buf`, returning it
    /// and its encoded length. Never panics.
    ///
    /// # Errors
    ///
    /// [`DeliveryError::Truncated`], [`DeliveryError::BadFlags`],
    /// [`DeliveryError::BadSack`].
    pub fn parse(buf: &[u8]) -> Result<(Self, usize), DeliveryError> {
        let truncated = DeliveryError::Truncated { len: buf.len() };
        let flags = wire::u8_at(buf, 0).ok_or(truncated.clone())?;
        if flags & !(FLAG_DATA | FLAG_ACK) != 0 || flags == 0 {
            return Err(DeliveryError::BadFlags { flags });
        }
        let mut at = 1;
        let mut seq = None;
        if flags & FLAG_DATA != 0 {
            seq = Some(wire::u64_at(buf, at).ok_or(truncated.clone())?);
            at += 8;
        }
        let mut ack = None;
        if flags & FLAG_ACK != 0 {
            let cum = wire::u64_at(buf, at).ok_or(truncated.clone())?;
            let n = wire::u8_at(buf, at + 8).ok_or(truncated.clone())? as usize;
            at += 9;
            if n > MAX_SACK_RANGES {
                return Err(DeliveryError::BadSack);
            }
            let mut a = Ack::new(cum);
            for _ in 0..n {
                let start = wire::u32_at(buf, at).ok_or(truncated.clone())?;
                let end = wire::u32_at(buf, at + 4).ok_or(truncated.clone())?;
                at += 8;
                let range = cum
                    .checked_add(start.into())
                    .zip(cum.checked_add(end.into()))
                    .map(|(start, end)| SackRange { start, end })
                    .ok_or(DeliveryError::BadSack)?;
                if !a.push_range(range) {
                    return Err(DeliveryError::BadSack);
                }
            }
            ack = Some(a);
        }
        Ok((Self { seq, ack }, at))
    }

    /// Encoded length.
    pub fn buffer_len(&self) -> usize {
        1 + self.seq.map_or(0, |_| 8) + self.ack.map_or(0, |a| 9 + 8 * a.ranges().len())
    }

    /// Writes the header into `buf`, returning its length.
    pub fn emit(&self, buf: &mut [u8; MAX_HEADER_LEN]) -> usize {
        let mut flags = 0;
        let mut at = 1;
        if let Some(seq) = self.seq {
            flags |= FLAG_DATA;
            buf[at..at + 8].copy_from_slice(&seq.to_be_bytes());
            at += 8;
        }
        if let Some(ack) = &self.ack {
            flags |= FLAG_ACK;
            buf[at..at + 8].copy_from_slice(&ack.cumulative.to_be_bytes());
            buf[at + 8] = ack.len;
            at += 9;
            for r in ack.ranges() {
                // push_range keeps offsets within u32.
                let start = (r.start - ack.cumulative) as u32;
                let end = (r.end - ack.cumulative) as u32;
                buf[at..at + 4].copy_from_slice(&start.to_be_bytes());
                buf[at + 4..at + 8].copy_from_slice(&end.to_be_bytes());
                at += 8;
            }
        }
        buf[0] = flags;
        at
    }
}
