//! WebSocket (RFC 6455), sans-IO: the opening handshake ([`handshake`]) and
//! a connection's frames ([`WebSocket`]): masking, fragmentation, ping and
//! pong, the closing handshake and close codes.
//!
//! **Guarantees.** Every message the peer sends within the bounds comes
//! out whole, in order, with its kind (text or binary), text checked as
//! UTF-8 (failing fast: payload is read as it arrives, and an invalid
//! sequence closes the connection as soon as its byte is seen, not at the
//! frame's or the message's end). A protocol violation is answered with
//! its close code and the connection ends: an unmasked client frame, a
//! masked server frame, reserved bits no extension defines, an unknown
//! opcode, a fragmented or oversized control frame, a continuation without
//! a start, a new message inside a fragmented one, a close code that may
//! not be sent (1002); invalid UTF-8 in a text message or close reason
//! (1007); a frame or message over the bounds, refused from its header
//! before its payload is read (a compressed message: as soon as it
//! inflates past the bound) (1009); pings faster than
//! `max_pings_per_second` (1008). Each ping
//! is answered with a pong carrying its payload, in order; at most
//! [`MAX_PENDING_PONGS`] wait to be sent, and past that the oldest waiting
//! one is dropped (RFC 6455, 5.5.3 lets an endpoint answer only the most
//! recent ping), so a ping flood costs bounded memory. Memory is bounded by
//! one message (`max_message`) plus one control frame's 125 bytes and the
//! waiting pongs, and permessage-deflate's fixed state when agreed; the
//! input buffer is the caller's and is drained as read.
//!
//! **permessage-deflate** (RFC 7692, [`deflate`]) is used when the opening
//! handshake agreed on it ([`WsConfig::deflate`] enables offering and
//! accepting it; [`WebSocket::with_extensions`] takes what was agreed).
//! Then each data message sent is compressed, and a message whose first
//! frame has RSV1 set is inflated as it arrives, within the same
//! `max_message` bound (1009 past it, however small it is on the wire; a
//! "zip bomb" costs no more than an honest message), its text checked as
//! it is inflated (1007); data that does not inflate is refused with 1007.
//! RSV1 on a control frame or a continuation frame is a protocol error
//! (1002), as is RSV1 on any frame without the extension. Control frames
//! are never compressed.
//!
//! `.ci/autobahn` runs the Autobahn test suite against this module both
//! ways (through this crate's `autobahn` example; results in
//! `docs/autobahn.md`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

pub mod deflate;
mod frame;
pub mod handshake;
pub mod layer;

use deflate::{Codec, InflateError};
pub use deflate::{DeflateConfig, DeflateParams};
pub use frame::Opcode;
use frame::{apply_mask, parse_header, put_frame, put_frame_rsv1, FrameError, Header};
use handshake::Extensions;

/// Pongs waiting to be sent at most; past it, the oldest is dropped.
pub const MAX_PENDING_PONGS: usize = 16;

/// A close code (RFC 6455, 7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseCode(pub u16);

impl CloseCode {
    /// 1000: normal closure.
    pub const NORMAL: CloseCode = CloseCode(1000);
    /// 1001: going away.
    pub const GOING_AWAY: CloseCode = CloseCode(1001);
    /// 1002: protocol error.
    pub const PROTOCOL_ERROR: CloseCode = CloseCode(1002);
    /// 1003: a data type the endpoint does not take.
    pub const UNSUPPORTED: CloseCode = CloseCode(1003);
    /// 1007: a payload inconsistent with its type (invalid UTF-8).
    pub const INVALID_PAYLOAD: CloseCode = CloseCode(1007);
    /// 1008: a policy violation (a ping flood).
    pub const POLICY: CloseCode = CloseCode(1008);
    /// 1009: a frame or message too big.
    pub const MESSAGE_TOO_BIG: CloseCode = CloseCode(1009);
    /// 1011: the endpoint failed.
    pub const INTERNAL: CloseCode = CloseCode(1011);

    /// Whether a peer may send this code in a close frame: 1000-1003,
    /// 1007-1014 and 3000-4999 (1004-1006 and 1015 are never sent; the rest
    /// is reserved).
    pub fn is_sendable(self) -> bool {
        matches!(self.0, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}

/// The data message being read.
#[derive(Debug)]
struct Fragment {
    /// Its first frame's opcode (text or binary).
    opcode: Opcode,
    /// What it holds so far.
    body: Body,
}

/// A message's bytes so far.
#[derive(Debug)]
enum Body {
    /// As they came.
    Plain(BytesMut),
    /// Inflated (RSV1 was set: permessage-deflate).
    Inflated(Vec<u8>),
}

impl Body {
    fn bytes(&self) -> &[u8] {
        match self {
            Body::Plain(b) => b,
            Body::Inflated(b) => b,
        }
    }
}

/// The frame whose payload is being read (its header was).
#[derive(Debug, Clone, Copy)]
struct Reading {
    fin: bool,
    opcode: Opcode,
    mask: Option<[u8; 4]>,
    /// Payload bytes read so far (where the mask continues).
    read: usize,
    /// Payload bytes still to come.
    left: usize,
}

/// Which end of the connection this is: clients mask their frames,
/// servers must not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The end that accepted the connection.
    Server,
    /// The end that opened it.
    Client,
}

/// The bounds of a connection, and the extensions it may negotiate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WsConfig {
    /// Largest frame payload accepted. Default 16 MiB.
    pub max_frame: usize,
    /// Largest message accepted (all its fragments). Default 16 MiB.
    pub max_message: usize,
    /// Pings per second accepted before the connection is closed with
    /// 1008. Default 1,000.
    pub max_pings_per_second: u32,
    /// permessage-deflate (RFC 7692): offered by a client's handshake and
    /// accepted by a server's with these settings when set. Default
    /// `None`: neither offered nor accepted (the `ws://` and `wss://`
    /// actor transports leave it off: a stack compresses with its own
    /// layer). Costs about 300 KiB per connection that agrees on it (see
    /// [`deflate`]).
    pub deflate: Option<DeflateConfig>,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            max_frame: 16 << 20,
            max_message: 16 << 20,
            max_pings_per_second: 1000,
            deflate: None,
        }
    }
}

/// A message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsMessage {
    /// A text message (valid UTF-8).
    Text(String),
    /// A binary message.
    Binary(Bytes),
}

/// What the peer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsEvent {
    /// A whole message.
    Message(WsMessage),
    /// The connection is closing: the peer sent a close frame (its code and
    /// reason), or broke the protocol (our code; the close frame saying so
    /// is queued). Send what [`WebSocket::poll_transmit`] gives, then end
    /// the connection.
    Closed {
        /// The code, if any.
        code: Option<CloseCode>,
        /// The reason.
        reason: String,
        /// Whether this end found the violation.
        by_us: bool,
    },
}

/// Why a WebSocket connection closed: the
/// [`LinkError::Layer`](plexus_net::LinkError::Layer) source the WebSocket
/// layer closes with (`downcast_ref::<WsClose>()`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} closed the connection ({}{})",
    if *by_us { "we" } else { "the peer" },
    code.map_or("no code".to_owned(), |c| c.0.to_string()),
    if reason.is_empty() { String::new() } else { format!(": {reason}") }
)]
pub struct WsClose {
    /// The close code, if any.
    pub code: Option<CloseCode>,
    /// The reason given with it.
    pub reason: String,
    /// Whether this end closed it.
    pub by_us: bool,
}

/// The counters of a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsStats {
    /// Messages received.
    pub messages: u64,
    /// Pings received.
    pub pings: u64,
    /// Pongs sent.
    pub pongs: u64,
}

/// A send after the close handshake began.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the WebSocket connection is closing: nothing more can be sent")]
pub struct WsClosed;

/// One WebSocket connection after its handshake. See the [module
/// docs](self).
#[derive(Debug)]
pub struct WebSocket {
    role: Role,
    config: WsConfig,
    /// State of the client's masking keys (xorshift).
    mask_state: u64,
    /// The frame whose payload is being read, once its header is.
    reading: Option<Reading>,
    /// The message in progress.
    fragment: Option<Fragment>,
    /// permessage-deflate's compressor and decompressor, once agreed.
    deflate: Option<Codec>,
    /// Bytes of the text message in progress already checked as UTF-8.
    checked: usize,
    /// The payload of the control frame being read.
    control: BytesMut,
    out: BytesMut,
    /// Pongs to send, oldest first, at most [`MAX_PENDING_PONGS`].
    pending_pongs: VecDeque<Bytes>,
    close_sent: bool,
    close_received: bool,
    /// Input is ignored from here (a violation, or the peer's close).
    done: bool,
    ping_window: (Option<Instant>, u32),
    stats: WsStats,
}

impl WebSocket {
    /// A connection for `role`; a client's masking keys come from `seed`
    /// (give it fresh randomness: a predictable key lets a page poison
    /// caches of proxies in between, RFC 6455, 10.3).
    pub fn new(role: Role, config: WsConfig, seed: u64) -> Self {
        Self {
            role,
            config,
            mask_state: seed | 1,
            reading: None,
            fragment: None,
            deflate: None,
            checked: 0,
            control: BytesMut::new(),
            out: BytesMut::new(),
            pending_pongs: VecDeque::new(),
            close_sent: false,
            close_received: false,
            done: false,
            ping_window: (None, 0),
            stats: WsStats::default(),
        }
    }

    /// The connection with the `extensions` its opening handshake agreed
    /// on (permessage-deflate compresses at the level of the config's
    /// [`DeflateConfig`], or the default one). Call before any frame goes
    /// either way: a peer that compresses while this side does not know
    /// gets 1002.
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        let level = self.config.deflate.unwrap_or_default().level;
        self.deflate = extensions
            .deflate
            .map(|params| Codec::new(self.role, &params, level));
        self
    }

    /// The counters.
    pub fn stats(&self) -> WsStats {
        self.stats
    }

    /// Whether both close frames went (or a violation ended it): the
    /// transport may close once [`poll_transmit`](Self::poll_transmit) is
    /// drained.
    pub fn is_closed(&self) -> bool {
        self.close_sent && (self.close_received || self.done)
    }

    /// Takes bytes the peer sent off the front of `buf` and returns the
    /// next event, or `None` when more bytes are needed (`buf` is then
    /// empty, or holds the start of a frame header).
    ///
    /// A frame's payload is taken as it arrives, before the frame is
    /// whole: a text message's invalid UTF-8 is refused at the byte that
    /// makes it invalid (RFC 6455, 8.1), even in the middle of a frame.
    pub fn handle_receive(&mut self, now: Instant, buf: &mut BytesMut) -> Option<WsEvent> {
        if self.done {
            // Nothing after a close or a violation is read: drop it.
            buf.clear();
            return None;
        }
        loop {
            let reading = match &mut self.reading {
                Some(reading) => reading,
                None => {
                    let masked = self.role == Role::Server;
                    let rsv1 = self.deflate.is_some();
                    let header = match parse_header(buf, masked, rsv1, self.config.max_frame) {
                        Ok(Some(h)) => h,
                        Ok(None) => return None,
                        Err(e) => return Some(self.fail(e)),
                    };
                    let _ = buf.split_to(header.len);
                    if let Err(e) = self.on_frame_start(&header) {
                        return Some(self.fail(e));
                    }
                    self.reading.insert(Reading {
                        fin: header.fin,
                        opcode: header.opcode,
                        mask: header.mask,
                        read: 0,
                        left: header.payload,
                    })
                }
            };
            let n = reading.left.min(buf.len());
            let mut chunk = buf.split_to(n);
            if let Some(mask) = reading.mask {
                apply_mask(&mut chunk, mask, reading.read);
            }
            reading.read += n;
            reading.left -= n;
            let (fin, opcode, whole) = (reading.fin, reading.opcode, reading.left == 0);
            if whole {
                self.reading = None;
            }
            let event = if opcode.is_control() {
                self.control.extend_from_slice(&chunk);
                if whole {
                    let payload = self.control.split();
                    self.control_frame(now, opcode, payload)
                } else {
                    None
                }
            } else {
                self.data(chunk, fin && whole)
            };
            if event.is_some() {
                return event;
            }
            if !whole {
                // All of `buf` went into the frame: more is needed.
                return None;
            }
        }
    }

    /// Checks a frame's header against the message in progress (RFC 6455,
    /// 5.4: a continuation continues a message, a new message waits for
    /// the last one's end), RSV1 (RFC 7692, 6.1: on a message's first
    /// frame only) and the size bound, before its payload is read. A
    /// compressed message's bound is checked as it inflates instead.
    fn on_frame_start(&mut self, header: &Header) -> Result<(), FrameError> {
        let too_big = FrameError {
            code: CloseCode::MESSAGE_TOO_BIG,
            why: "a message over the size limit",
        };
        let payload = header.payload;
        match header.opcode {
            Opcode::Text | Opcode::Binary => {
                if self.fragment.is_some() {
                    return Err(protocol("a new message inside a fragmented one"));
                }
                let body = if header.rsv1 {
                    Body::Inflated(Vec::new())
                } else if payload > self.config.max_message {
                    return Err(too_big);
                } else {
                    Body::Plain(BytesMut::new())
                };
                self.checked = 0;
                self.fragment = Some(Fragment {
                    opcode: header.opcode,
                    body,
                });
            }
            Opcode::Continuation => {
                if header.rsv1 {
                    return Err(protocol("RSV1 on a continuation frame"));
                }
                match &self.fragment {
                    None => return Err(protocol("a continuation without a message")),
                    Some(Fragment {
                        body: Body::Plain(message),
                        ..
                    }) if message.len() + payload > self.config.max_message => return Err(too_big),
                    Some(_) => {}
                }
            }
            Opcode::Close | Opcode::Ping | Opcode::Pong => {
                if header.rsv1 {
                    return Err(protocol("RSV1 on a control frame"));
                }
                self.control.clear();
            }
        }
        Ok(())
    }

    fn control_frame(
        &mut self,
        now: Instant,
        opcode: Opcode,
        payload: BytesMut,
    ) -> Option<WsEvent> {
        match opcode {
            Opcode::Ping => {
                self.stats.pings += 1;
                let (start, count) = &mut self.ping_window;
                match start {
                    Some(s) if now < *s + Duration::from_secs(1) => *count += 1,
                    _ => {
                        *start = Some(now);
                        *count = 1;
                    }
                }
                if *count > self.config.max_pings_per_second {
                    return Some(self.fail(FrameError {
                        code: CloseCode::POLICY,
                        why: "pings faster than allowed",
                    }));
                }
                if !self.close_sent {
                    // RFC 6455, 5.5.3: an endpoint may answer only the most
                    // recent of several pings; past the bound the oldest
                    // waiting pong is dropped.
                    if self.pending_pongs.len() == MAX_PENDING_PONGS {
                        self.pending_pongs.pop_front();
                    }
                    self.pending_pongs.push_back(payload.freeze());
                }
                None
            }
            Opcode::Close => Some(self.close_frame(&payload)),
            _ => None,
        }
    }

    /// A data frame's payload, `chunk` (possibly part of it): appended to
    /// the message, checked as UTF-8 so far if text, and the message
    /// delivered once `last` (its last frame whole).
    fn data(&mut self, chunk: BytesMut, last: bool) -> Option<WsEvent> {
        // `on_frame_start` began the message for this data frame.
        let fragment = self.fragment.as_mut()?;
        match &mut fragment.body {
            Body::Plain(message) if message.is_empty() => {
                // A message in one frame, whole in the input, is not copied.
                *message = chunk;
            }
            Body::Plain(message) => message.extend_from_slice(&chunk),
            Body::Inflated(message) => {
                // RSV1 is only let through with the extension agreed.
                let codec = self.deflate.as_mut()?;
                if let Err(e) = codec.decompress(&chunk, last, message, self.config.max_message) {
                    return Some(self.fail(match e {
                        InflateError::TooBig => FrameError {
                            code: CloseCode::MESSAGE_TOO_BIG,
                            why: "a compressed message that inflates over the size limit",
                        },
                        InflateError::Corrupt => FrameError {
                            code: CloseCode::INVALID_PAYLOAD,
                            why: "a compressed message that does not inflate",
                        },
                    }));
                }
            }
        }
        let message = fragment.body.bytes();
        if fragment.opcode == Opcode::Text {
            match std::str::from_utf8(&message[self.checked..]) {
                Ok(_) => self.checked = message.len(),
                Err(e) if e.error_len().is_some() || last => {
                    return Some(self.fail(FrameError {
                        code: CloseCode::INVALID_PAYLOAD,
                        why: "a text message that is not UTF-8",
                    }))
                }
                // An incomplete sequence at the end: the next bytes may
                // complete it.
                Err(e) => self.checked += e.valid_up_to(),
            }
        }
        if !last {
            return None;
        }
        let Fragment { opcode, body } = self.fragment.take()?;
        self.stats.messages += 1;
        Some(WsEvent::Message(match (opcode, body) {
            // Checked as UTF-8 above: the fallback is never taken.
            (Opcode::Text, Body::Plain(message)) => {
                WsMessage::Text(String::from_utf8(message.into()).unwrap_or_default())
            }
            (Opcode::Text, Body::Inflated(message)) => {
                WsMessage::Text(String::from_utf8(message).unwrap_or_default())
            }
            (_, Body::Plain(message)) => WsMessage::Binary(message.freeze()),
            (_, Body::Inflated(message)) => WsMessage::Binary(Bytes::from(message)),
        }))
    }

    fn close_frame(&mut self, payload: &[u8]) -> WsEvent {
        let (code, reason) = match payload.len() {
            0 => (None, String::new()),
            1 => return self.fail(protocol("a close frame of one byte")),
            _ => {
                let code = CloseCode(u16::from_be_bytes([payload[0], payload[1]]));
                if !code.is_sendable() {
                    return self.fail(protocol("a close code that may not be sent"));
                }
                let Ok(reason) = std::str::from_utf8(&payload[2..]) else {
                    return self.fail(FrameError {
                        code: CloseCode::INVALID_PAYLOAD,
                        why: "a close reason that is not UTF-8",
                    });
                };
                (Some(code), reason.to_owned())
            }
        };
        self.close_received = true;
        self.done = true;
        if !self.close_sent {
            self.queue_close(code.unwrap_or(CloseCode::NORMAL), "");
        }
        WsEvent::Closed {
            code,
            reason,
            by_us: false,
        }
    }

    fn fail(&mut self, e: FrameError) -> WsEvent {
        self.done = true;
        self.reading = None;
        self.fragment = None;
        if !self.close_sent {
            self.queue_close(e.code, e.why);
        }
        WsEvent::Closed {
            code: Some(e.code),
            reason: e.why.to_owned(),
            by_us: true,
        }
    }

    fn next_mask(&mut self) -> Option<[u8; 4]> {
        (self.role == Role::Client).then(|| {
            let mut x = self.mask_state;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.mask_state = x;
            (x as u32).to_le_bytes()
        })
    }

    fn queue_close(&mut self, code: CloseCode, reason: &str) {
        let mut payload = code.0.to_be_bytes().to_vec();
        // A control frame carries 125 bytes at most.
        let mut end = reason.len().min(123);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        payload.extend_from_slice(&reason.as_bytes()[..end]);
        let mask = self.next_mask();
        put_frame(&mut self.out, true, Opcode::Close, mask, &payload);
        self.close_sent = true;
        self.pending_pongs.clear();
    }

    /// Queues `message` as one frame: compressed, with RSV1 set, once
    /// permessage-deflate was agreed (see [`deflate`]).
    ///
    /// # Errors
    ///
    /// [`WsClosed`] once the close handshake began.
    pub fn send(&mut self, message: &WsMessage) -> Result<(), WsClosed> {
        if self.close_sent {
            return Err(WsClosed);
        }
        let (opcode, data): (Opcode, &[u8]) = match message {
            WsMessage::Text(t) => (Opcode::Text, t.as_bytes()),
            WsMessage::Binary(b) => (Opcode::Binary, b),
        };
        let mask = self.next_mask();
        match self.deflate.as_mut().and_then(|codec| codec.compress(data)) {
            Some(compressed) => {
                put_frame_rsv1(&mut self.out, true, true, opcode, mask, &compressed)
            }
            None => put_frame(&mut self.out, true, opcode, mask, data),
        }
        Ok(())
    }

    /// Queues a ping with `payload` (at most 125 bytes; longer is cut).
    ///
    /// # Errors
    ///
    /// [`WsClosed`] once the close handshake began.
    pub fn ping(&mut self, payload: &[u8]) -> Result<(), WsClosed> {
        if self.close_sent {
            return Err(WsClosed);
        }
        let mask = self.next_mask();
        put_frame(
            &mut self.out,
            true,
            Opcode::Ping,
            mask,
            &payload[..payload.len().min(125)],
        );
        Ok(())
    }

    /// Begins the closing handshake with `code` and `reason`.
    pub fn close(&mut self, code: CloseCode, reason: &str) {
        if !self.close_sent {
            self.queue_close(code, reason);
        }
    }

    /// The bytes to send now, if any.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        if !self.pending_pongs.is_empty() {
            let mut pongs = BytesMut::new();
            while let Some(payload) = self.pending_pongs.pop_front() {
                let mask = self.next_mask();
                put_frame(&mut pongs, true, Opcode::Pong, mask, &payload);
                self.stats.pongs += 1;
            }
            pongs.extend_from_slice(&self.out.split());
            return Some(pongs.freeze());
        }
        (!self.out.is_empty()).then(|| self.out.split().freeze())
    }
}

const fn protocol(why: &'static str) -> FrameError {
    FrameError {
        code: CloseCode::PROTOCOL_ERROR,
        why,
    }
}

#[cfg(test)]
mod tests;
