//! WebSocket frames (RFC 6455, section 5): the header, masking, and the
//! checks a frame must pass on its own. RSV1 is let through only where an
//! extension that defines it (permessage-deflate, RFC 7692) was agreed;
//! RSV2 and RSV3 never are.

use bytes::{BufMut, BytesMut};

use super::CloseCode;

/// A frame's opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// Continues a fragmented message.
    Continuation,
    /// UTF-8 text.
    Text,
    /// Binary data.
    Binary,
    /// Close (control).
    Close,
    /// Ping (control).
    Ping,
    /// Pong (control).
    Pong,
}

impl Opcode {
    fn from_bits(bits: u8) -> Option<Opcode> {
        Some(match bits {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xA => Opcode::Pong,
            _ => return None,
        })
    }

    fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    /// Whether it is a control frame's (close, ping, pong).
    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) fin: bool,
    /// RSV1: the message is compressed (only with permessage-deflate).
    pub(crate) rsv1: bool,
    pub(crate) opcode: Opcode,
    pub(crate) mask: Option<[u8; 4]>,
    /// Bytes of the header.
    pub(crate) len: usize,
    /// Bytes of the payload.
    pub(crate) payload: usize,
}

/// Why a frame is refused, as the close code to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameError {
    pub(crate) code: CloseCode,
    pub(crate) why: &'static str,
}

const fn protocol(why: &'static str) -> FrameError {
    FrameError {
        code: CloseCode::PROTOCOL_ERROR,
        why,
    }
}

/// Parses the header at the front of `buf`, if whole. `masked` says
/// whether frames must be masked (from a client) or must not be (from a
/// server); `rsv1` whether an extension gave RSV1 a meaning;
/// `max_payload` bounds a frame's payload.
pub(crate) fn parse_header(
    buf: &[u8],
    masked: bool,
    rsv1: bool,
    max_payload: usize,
) -> Result<Option<Header>, FrameError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    // RFC 6455, 5.2: a reserved bit no extension defines fails the
    // connection.
    let allowed = if rsv1 { 0x40 } else { 0 };
    if b0 & 0x70 & !allowed != 0 {
        return Err(protocol("reserved bits set without an extension"));
    }
    let opcode = Opcode::from_bits(b0 & 0x0F).ok_or(protocol("unknown opcode"))?;
    let fin = b0 & 0x80 != 0;
    let has_mask = b1 & 0x80 != 0;
    if has_mask != masked {
        return Err(protocol(if masked {
            "a client frame must be masked"
        } else {
            "a server frame must not be masked"
        }));
    }
    let (payload, mut at) = match b1 & 0x7F {
        126 => {
            let Some(b) = buf.get(2..4) else {
                return Ok(None);
            };
            (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)
        }
        127 => {
            let Some(b) = buf.get(2..10) else {
                return Ok(None);
            };
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            let n = u64::from_be_bytes(a);
            if n >> 63 != 0 {
                return Err(protocol("payload length with its top bit set"));
            }
            (n, 10)
        }
        n => (u64::from(n), 2),
    };
    if opcode.is_control() {
        if !fin {
            return Err(protocol("a fragmented control frame"));
        }
        if payload > 125 {
            return Err(protocol("a control frame over 125 bytes"));
        }
    }
    if payload > max_payload as u64 {
        return Err(FrameError {
            code: CloseCode::MESSAGE_TOO_BIG,
            why: "a frame over the size limit",
        });
    }
    let mask = if has_mask {
        let Some(b) = buf.get(at..at + 4) else {
            return Ok(None);
        };
        at += 4;
        Some([b[0], b[1], b[2], b[3]])
    } else {
        None
    };
    Ok(Some(Header {
        fin,
        rsv1: b0 & 0x40 != 0,
        opcode,
        mask,
        len: at,
        payload: payload as usize,
    }))
}

/// XORs `data` with `mask`, starting at offset `start` of the payload.
pub(crate) fn apply_mask(data: &mut [u8], mask: [u8; 4], start: usize) {
    for (i, b) in data.iter_mut().enumerate() {
        *b ^= mask[(start + i) % 4];
    }
}

/// Appends a whole frame to `out` (masked with `mask` when given).
pub(crate) fn put_frame(
    out: &mut BytesMut,
    fin: bool,
    opcode: Opcode,
    mask: Option<[u8; 4]>,
    payload: &[u8],
) {
    put_frame_rsv1(out, fin, false, opcode, mask, payload);
}

/// As [`put_frame`], with RSV1 set if `rsv1` (a compressed message's first
/// frame, RFC 7692, 6).
pub(crate) fn put_frame_rsv1(
    out: &mut BytesMut,
    fin: bool,
    rsv1: bool,
    opcode: Opcode,
    mask: Option<[u8; 4]>,
    payload: &[u8],
) {
    out.reserve(14 + payload.len());
    out.put_u8(u8::from(fin) << 7 | u8::from(rsv1) << 6 | opcode.bits());
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => out.put_u8(mask_bit | n as u8),
        n @ 126..=0xFFFF => {
            out.put_u8(mask_bit | 126);
            out.put_u16(n as u16);
        }
        n => {
            out.put_u8(mask_bit | 127);
            out.put_u64(n as u64);
        }
    }
    match mask {
        Some(key) => {
            out.put_slice(&key);
            let start = out.len();
            out.put_slice(payload);
            apply_mask(&mut out[start..], key, 0);
        }
        None => out.put_slice(payload),
    }
}
