//! The wire protocol: frame kinds and their byte layouts (documented in
//! `docs/PROTOCOL.md`).
//!
//! Sans-IO and hostile-input safe: [`WireFrame::decode`] takes one whole
//! message from a link (the stack below delimits messages) and either
//! returns a validated frame or a [`WireError`]; it never panics, never
//! allocates more than the input's size, bounds every string, list and
//! nesting depth, and hands payloads up as slices of the input (no copy).
//!
//! Integers are LEB128 varints unless the layout says `u16`/`u64` (fixed,
//! little-endian). Strings are a varint length and UTF-8 bytes.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use plexus_core::trace::TraceContext;
use plexus_core::{ActorId, ExitReason, NodeId};

/// Protocol version spoken by this build. Peers must speak the same major
/// version (see `docs/PROTOCOL.md`, Versioning).
pub const PROTOCOL_VERSION: u16 = 4;
/// First four bytes of a `HELLO`.
pub const MAGIC: [u8; 4] = *b"PLXS";
/// Longest actor name, type name or address accepted.
pub const MAX_NAME: usize = 255;
/// Longest free-text detail (reasons, errors).
pub const MAX_DETAIL: usize = 1024;
/// Most listen addresses a `HELLO` may carry.
pub const MAX_ADDRS: usize = 8;
/// Deepest nesting of exit reasons (a linked exit of a linked exit ...).
pub const MAX_REASON_DEPTH: usize = 8;

/// Why a frame could not be decoded. The link it came on can no longer be
/// trusted and is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The frame ended inside a field.
    #[error("frame truncated in {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },
    /// Unknown frame kind byte.
    #[error("unknown frame kind 0x{0:02x}")]
    UnknownKind(u8),
    /// A varint longer than 10 bytes or above `u64::MAX`.
    #[error("malformed varint in {field}")]
    BadVarint {
        /// The field being read.
        field: &'static str,
    },
    /// A string, list or nesting above its bound.
    #[error("{field} too long: {len} > {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Announced length.
        len: u64,
        /// The bound.
        max: usize,
    },
    /// A string that is not UTF-8.
    #[error("{field} is not UTF-8")]
    BadUtf8 {
        /// The field.
        field: &'static str,
    },
    /// A field with a value outside its set.
    #[error("invalid {field}: {value}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The value seen.
        value: u64,
    },
    /// Bytes left after a frame that has no trailing payload.
    #[error("{0} trailing bytes after the frame")]
    Trailing(usize),
}

/// The first frame each side sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version of the sender.
    pub version: u16,
    /// The sender's node id.
    pub node: NodeId,
    /// A fresh random challenge for the peer's cookie proof.
    pub nonce: [u8; 16],
    /// Capability bits the sender offers (see [`capabilities`]).
    pub capabilities: u64,
    /// URIs the sender listens on, so refs to its actors can be dialled.
    pub listen: Vec<String>,
}

/// Capability bits of a `HELLO`.
pub mod capabilities {
    /// Delivery receipts (`MESSAGE` with a receipt id, `RECEIPT`).
    pub const RECEIPTS: u64 = 1 << 0;
    /// Remote monitors and links.
    pub const MONITORS: u64 = 1 << 1;
    /// Everything this build offers.
    pub const ALL: u64 = RECEIPTS | MONITORS;
}

/// Why a handshake was refused (carried in `REJECT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectCode {
    /// Protocol versions differ.
    Version = 1,
    /// The cookie proof did not match.
    Cookie = 2,
    /// The frame was not a handshake frame, or malformed.
    Protocol = 3,
    /// The peer claims our own node id.
    SameNode = 4,
    /// The node is shutting down.
    ShuttingDown = 5,
    /// The node id claimed in `HELLO` is not the one the peer's
    /// certificate certifies.
    Identity = 6,
    /// A lane connection named a session that does not exist, or belongs
    /// to another node.
    Session = 7,
}

impl RejectCode {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Version,
            2 => Self::Cookie,
            3 => Self::Protocol,
            4 => Self::SameNode,
            5 => Self::ShuttingDown,
            6 => Self::Identity,
            7 => Self::Session,
            v => {
                return Err(WireError::Invalid {
                    field: "reject code",
                    value: v.into(),
                })
            }
        })
    }
}

/// Why a node closes a link on purpose: the code a `GOODBYE` carries, so
/// the other side acts on its meaning (a duplicate link is replaced, a node
/// that shuts down is down) and never on text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum GoodbyeCode {
    /// The node is shutting down.
    Shutdown = 1,
    /// Another link between the same two nodes won the duplicate-connect
    /// tie-break (the one dialled by the lower node id); this one retires.
    Duplicate = 2,
}

impl GoodbyeCode {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Shutdown,
            2 => Self::Duplicate,
            v => {
                return Err(WireError::Invalid {
                    field: "goodbye code",
                    value: v.into(),
                })
            }
        })
    }
}

impl std::fmt::Display for GoodbyeCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Shutdown => "node shutting down",
            Self::Duplicate => "duplicate link",
        })
    }
}

/// Outcome of a resolve request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The name is published and accepts the type: the actor's serial.
    Found(u64),
    /// Nothing is published under the name.
    NoSuchName,
    /// The name is published for other message types.
    WrongType {
        /// The type names the actor is published for.
        actual: String,
    },
}

/// Status in a `RECEIPT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptStatus {
    /// In the mailbox.
    Delivered = 0,
    /// No exported actor with that serial and type.
    NoSuchActor = 1,
    /// The actor has stopped.
    Stopped = 2,
    /// Its bounded mailbox was full.
    MailboxFull = 3,
    /// The payload did not decode as the type.
    Undecodable = 4,
}

impl ReceiptStatus {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => Self::Delivered,
            1 => Self::NoSuchActor,
            2 => Self::Stopped,
            3 => Self::MailboxFull,
            4 => Self::Undecodable,
            v => {
                return Err(WireError::Invalid {
                    field: "receipt status",
                    value: v.into(),
                })
            }
        })
    }
}

/// One protocol frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireFrame {
    /// Handshake, first frame of each side.
    Hello(Hello),
    /// Handshake: proof of the cookie for the peer's nonce.
    Auth {
        /// Keyed hash of the peer's nonce and both node ids.
        proof: [u8; 32],
    },
    /// Handshake refused; the sender closes the link.
    Reject {
        /// Why.
        code: RejectCode,
        /// Human-readable detail.
        detail: String,
    },
    /// An actor message.
    Message {
        /// Receiving actor's serial on the receiving node.
        to: u64,
        /// Wire id of the message type.
        type_id: u64,
        /// Non-zero: confirm the enqueue with a `RECEIPT` of this id.
        receipt: u64,
        /// The encoded message (rest of the frame).
        payload: Bytes,
    },
    /// An actor message addressed by published name (sent by forged refs
    /// until their first resolve completes).
    Named {
        /// The published name.
        name: String,
        /// Wire id of the message type.
        type_id: u64,
        /// Non-zero: confirm the enqueue with a `RECEIPT` of this id.
        receipt: u64,
        /// The encoded message (rest of the frame).
        payload: Bytes,
    },
    /// Answer to a message that asked for a receipt.
    Receipt {
        /// The message's receipt id.
        id: u64,
        /// What happened to it.
        status: ReceiptStatus,
    },
    /// The value for a pending ask.
    Reply {
        /// The pending reply's id on the receiving node.
        id: u64,
        /// The encoded value (rest of the frame).
        payload: Bytes,
    },
    /// Look up a published name for a message type.
    Resolve {
        /// Request id, echoed in the answer.
        request: u64,
        /// Wire id of the type the caller will send.
        type_id: u64,
        /// Its name, for error messages.
        type_name: String,
        /// The published name.
        name: String,
    },
    /// Answer to `RESOLVE`.
    Resolved {
        /// The request id.
        request: u64,
        /// The outcome.
        resolution: Resolution,
    },
    /// Watch an actor of the receiving node.
    Monitor {
        /// The watched actor's serial.
        target: u64,
        /// The watcher's token, echoed in `DOWN`.
        token: u64,
    },
    /// Cancel a monitor.
    Demonitor {
        /// The watched actor's serial.
        target: u64,
        /// The token.
        token: u64,
    },
    /// A watched actor stopped.
    Down {
        /// The monitor's token.
        token: u64,
        /// Why it stopped.
        reason: ExitReason,
    },
    /// Link an actor of the sender (`from`) with one of the receiver (`to`).
    Link {
        /// Sender-side actor serial.
        from: u64,
        /// Receiver-side actor serial.
        to: u64,
    },
    /// Remove a link.
    Unlink {
        /// Sender-side actor serial.
        from: u64,
        /// Receiver-side actor serial.
        to: u64,
    },
    /// A linked actor of the sender exited.
    Exit {
        /// Sender-side actor that exited.
        from: u64,
        /// Receiver-side actor linked to it.
        to: u64,
        /// Why it exited.
        reason: ExitReason,
    },
    /// Stop (or kill) an actor of the receiver.
    Stop {
        /// The actor's serial.
        target: u64,
        /// Kill instead of a graceful stop.
        kill: bool,
    },
    /// The sender closes the link on purpose.
    Goodbye {
        /// Why.
        code: GoodbyeCode,
    },
    /// The first frame after the handshake on a lane connection: binds it
    /// to the session of the node pair's primary link. The receiver echoes
    /// it once bound, or refuses with `REJECT` (code `Session`).
    Bind {
        /// The session (see `handshake::Verified::session`).
        session: u64,
        /// The lane the connection carries (`plexus_core::Lane::index`).
        lane: u8,
        /// Which of the lane's candidate stacks it is (0 for a lane with
        /// one).
        candidate: u8,
    },
    /// The first frame after the handshake on a primary link: the lane
    /// connections the dialler bound to this session, all acknowledged.
    /// The session is up from here, on both sides.
    Lanes {
        /// `(lane, candidate)` of every bound lane connection.
        bound: Vec<(u8, u8)>,
    },
    /// A frame on a lane with several candidate stacks, numbered so the
    /// receiver restores the sender's order.
    Sequenced {
        /// The lane (`plexus_core::Lane::index`).
        lane: u8,
        /// The lane's sequence number of this frame, from 0.
        seq: u64,
        /// The frame itself (any frame but `SEQUENCED`).
        frame: Bytes,
    },
    /// A message with the trace context of the span it was sent from (see
    /// `plexus_core::trace`): the receiving actor handles it in a span
    /// under that context.
    Traced {
        /// The sender's span.
        context: TraceContext,
        /// The message: a `MESSAGE` or `NAMED` frame.
        frame: Bytes,
    },
}

/// Most lane connections one session may bind: four lanes of at most
/// [`MAX_CANDIDATES`] candidates.
pub const MAX_BOUND: usize = 16;
/// Most candidate stacks of one lane.
pub const MAX_CANDIDATES: usize = 4;

mod kind {
    pub const HELLO: u8 = 0x01;
    pub const AUTH: u8 = 0x02;
    pub const REJECT: u8 = 0x03;
    pub const MESSAGE: u8 = 0x10;
    pub const RECEIPT: u8 = 0x11;
    pub const NAMED: u8 = 0x13;
    pub const REPLY: u8 = 0x12;
    pub const RESOLVE: u8 = 0x20;
    pub const RESOLVED: u8 = 0x21;
    pub const MONITOR: u8 = 0x30;
    pub const DEMONITOR: u8 = 0x31;
    pub const DOWN: u8 = 0x32;
    pub const LINK: u8 = 0x40;
    pub const UNLINK: u8 = 0x41;
    pub const EXIT: u8 = 0x42;
    pub const STOP: u8 = 0x43;
    pub const GOODBYE: u8 = 0x50;
    pub const BIND: u8 = 0x60;
    pub const LANES: u8 = 0x61;
    pub const SEQUENCED: u8 = 0x62;
    pub const TRACE: u8 = 0x14;
}

/// The header of a `MESSAGE` frame, read in place: the receive path's fast
/// path (no [`WireFrame`] is built for the most common frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    /// The receiving actor's serial on this node.
    pub to: u64,
    /// The message type id.
    pub type_id: u64,
    /// The delivery receipt id (0: none asked).
    pub receipt: u64,
    /// Bytes of the frame before the payload (kind byte included).
    pub len: usize,
}

impl MessageHeader {
    /// `None` if `frame` is not a `MESSAGE` frame; otherwise its header, or
    /// the error [`WireFrame::decode`] would give. Never panics.
    ///
    /// # Errors
    ///
    /// [`WireError`] for a truncated header or a bad varint.
    pub fn parse(frame: &[u8]) -> Option<Result<MessageHeader, WireError>> {
        match frame.split_first() {
            Some((&kind::MESSAGE, fields)) => Some(Self::parse_fields(fields)),
            _ => None,
        }
    }

    /// The fields after the kind byte.
    fn parse_fields(b: &[u8]) -> Result<MessageHeader, WireError> {
        let (to, n1) = slice_varint(b, "receiver")?;
        let type_id = b
            .get(n1..n1 + 8)
            .ok_or(WireError::Truncated { field: "type id" })?;
        let type_id = u64::from_le_bytes(type_id.try_into().expect("8 bytes"));
        let (receipt, n2) = slice_varint(&b[n1 + 8..], "receipt id")?;
        Ok(MessageHeader {
            to,
            type_id,
            receipt,
            len: 1 + n1 + 8 + n2,
        })
    }
}

/// A varint at the start of `b` (as [`Reader::varint`]) and its length.
fn slice_varint(b: &[u8], field: &'static str) -> Result<(u64, usize), WireError> {
    let mut v = 0u64;
    for i in 0..10 {
        let byte = *b.get(i).ok_or(WireError::Truncated { field })?;
        if i == 9 && byte > 1 {
            return Err(WireError::BadVarint { field });
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    Err(WireError::BadVarint { field })
}

impl WireFrame {
    /// The frame's kind as `docs/PROTOCOL.md` names it (`MESSAGE`,
    /// `GOODBYE`, ...), for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            WireFrame::Hello(_) => "HELLO",
            WireFrame::Auth { .. } => "AUTH",
            WireFrame::Reject { .. } => "REJECT",
            WireFrame::Message { .. } => "MESSAGE",
            WireFrame::Named { .. } => "NAMED",
            WireFrame::Receipt { .. } => "RECEIPT",
            WireFrame::Reply { .. } => "REPLY",
            WireFrame::Resolve { .. } => "RESOLVE",
            WireFrame::Resolved { .. } => "RESOLVED",
            WireFrame::Monitor { .. } => "MONITOR",
            WireFrame::Demonitor { .. } => "DEMONITOR",
            WireFrame::Down { .. } => "DOWN",
            WireFrame::Link { .. } => "LINK",
            WireFrame::Unlink { .. } => "UNLINK",
            WireFrame::Exit { .. } => "EXIT",
            WireFrame::Stop { .. } => "STOP",
            WireFrame::Goodbye { .. } => "GOODBYE",
            WireFrame::Bind { .. } => "BIND",
            WireFrame::Lanes { .. } => "LANES",
            WireFrame::Sequenced { .. } => "SEQUENCED",
            WireFrame::Traced { .. } => "TRACE",
        }
    }

    /// Encodes the frame into one buffer (payload copied after the header).
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.encoded_len_hint());
        self.encode_into(&mut b);
        b.freeze()
    }

    fn encoded_len_hint(&self) -> usize {
        match self {
            Self::Message { payload, .. }
            | Self::Reply { payload, .. }
            | Self::Named { payload, .. } => 300 + payload.len(),
            _ => 64,
        }
    }

    /// Appends the frame's encoding to `b`.
    pub fn encode_into(&self, b: &mut BytesMut) {
        match self {
            Self::Hello(h) => {
                b.put_u8(kind::HELLO);
                b.put_slice(&MAGIC);
                b.put_u16_le(h.version);
                b.put_u64_le(h.node.as_u64());
                b.put_slice(&h.nonce);
                b.put_u64_le(h.capabilities);
                put_varint(b, h.listen.len() as u64);
                for a in &h.listen {
                    put_str(b, a);
                }
            }
            Self::Auth { proof } => {
                b.put_u8(kind::AUTH);
                b.put_slice(proof);
            }
            Self::Reject { code, detail } => {
                b.put_u8(kind::REJECT);
                b.put_u8(*code as u8);
                put_str(b, detail);
            }
            Self::Message {
                to,
                type_id,
                receipt,
                payload,
            } => {
                b.put_u8(kind::MESSAGE);
                put_varint(b, *to);
                b.put_u64_le(*type_id);
                put_varint(b, *receipt);
                b.put_slice(payload);
            }
            Self::Named {
                name,
                type_id,
                receipt,
                payload,
            } => {
                b.put_u8(kind::NAMED);
                put_str(b, name);
                b.put_u64_le(*type_id);
                put_varint(b, *receipt);
                b.put_slice(payload);
            }
            Self::Receipt { id, status } => {
                b.put_u8(kind::RECEIPT);
                put_varint(b, *id);
                b.put_u8(*status as u8);
            }
            Self::Reply { id, payload } => {
                b.put_u8(kind::REPLY);
                put_varint(b, *id);
                b.put_slice(payload);
            }
            Self::Resolve {
                request,
                type_id,
                type_name,
                name,
            } => {
                b.put_u8(kind::RESOLVE);
                put_varint(b, *request);
                b.put_u64_le(*type_id);
                put_str(b, type_name);
                put_str(b, name);
            }
            Self::Resolved {
                request,
                resolution,
            } => {
                b.put_u8(kind::RESOLVED);
                put_varint(b, *request);
                match resolution {
                    Resolution::Found(serial) => {
                        b.put_u8(0);
                        put_varint(b, *serial);
                    }
                    Resolution::NoSuchName => b.put_u8(1),
                    Resolution::WrongType { actual } => {
                        b.put_u8(2);
                        put_str(b, actual);
                    }
                }
            }
            Self::Monitor { target, token } => {
                b.put_u8(kind::MONITOR);
                put_varint(b, *target);
                put_varint(b, *token);
            }
            Self::Demonitor { target, token } => {
                b.put_u8(kind::DEMONITOR);
                put_varint(b, *target);
                put_varint(b, *token);
            }
            Self::Down { token, reason } => {
                b.put_u8(kind::DOWN);
                put_varint(b, *token);
                put_reason(b, reason, 0);
            }
            Self::Link { from, to } => {
                b.put_u8(kind::LINK);
                put_varint(b, *from);
                put_varint(b, *to);
            }
            Self::Unlink { from, to } => {
                b.put_u8(kind::UNLINK);
                put_varint(b, *from);
                put_varint(b, *to);
            }
            Self::Exit { from, to, reason } => {
                b.put_u8(kind::EXIT);
                put_varint(b, *from);
                put_varint(b, *to);
                put_reason(b, reason, 0);
            }
            Self::Stop { target, kill } => {
                b.put_u8(kind::STOP);
                put_varint(b, *target);
                b.put_u8(u8::from(*kill));
            }
            Self::Goodbye { code } => {
                b.put_u8(kind::GOODBYE);
                b.put_u8(*code as u8);
            }
            Self::Bind {
                session,
                lane,
                candidate,
            } => {
                b.put_u8(kind::BIND);
                b.put_u64_le(*session);
                b.put_u8(*lane);
                b.put_u8(*candidate);
            }
            Self::Lanes { bound } => {
                b.put_u8(kind::LANES);
                put_varint(b, bound.len() as u64);
                for (lane, candidate) in bound {
                    b.put_u8(*lane);
                    b.put_u8(*candidate);
                }
            }
            Self::Sequenced { lane, seq, frame } => {
                put_sequenced_header(b, *lane, *seq);
                b.put_slice(frame);
            }
            Self::Traced { context, frame } => {
                put_trace_header(b, context);
                b.put_slice(frame);
            }
        }
    }

    /// Decodes one frame (one whole link message). A `MESSAGE` frame, the
    /// common case, can be read without building a `WireFrame` with
    /// [`MessageHeader::parse`].
    ///
    /// # Errors
    ///
    /// [`WireError`] for anything but a well-formed frame within bounds.
    pub fn decode(bytes: Bytes) -> Result<WireFrame, WireError> {
        let mut r = Reader { b: bytes };
        let k = r.u8("kind")?;
        let frame = match k {
            kind::HELLO => {
                let magic = r.array::<4>("magic")?;
                if magic != MAGIC {
                    return Err(WireError::Invalid {
                        field: "magic",
                        value: u32::from_le_bytes(magic).into(),
                    });
                }
                let version = r.u16("version")?;
                let node = NodeId::from_u64(r.u64("node id")?);
                let nonce = r.array::<16>("nonce")?;
                let capabilities = r.u64("capabilities")?;
                let n = r.len("listen addresses", MAX_ADDRS)?;
                let mut listen = Vec::with_capacity(n);
                for _ in 0..n {
                    listen.push(r.string("listen address", MAX_NAME)?);
                }
                WireFrame::Hello(Hello {
                    version,
                    node,
                    nonce,
                    capabilities,
                    listen,
                })
            }
            kind::AUTH => WireFrame::Auth {
                proof: r.array::<32>("proof")?,
            },
            kind::REJECT => WireFrame::Reject {
                code: RejectCode::from_u8(r.u8("reject code")?)?,
                detail: r.string("reject detail", MAX_DETAIL)?,
            },
            kind::MESSAGE => {
                // The same parse as the receive path's fast path.
                let header = MessageHeader::parse_fields(&r.b)?;
                let mut payload = r.rest();
                payload.advance(header.len - 1);
                return Ok(WireFrame::Message {
                    to: header.to,
                    type_id: header.type_id,
                    receipt: header.receipt,
                    payload,
                });
            }
            kind::NAMED => {
                let name = r.string("actor name", MAX_NAME)?;
                let type_id = r.u64("type id")?;
                let receipt = r.varint("receipt id")?;
                return Ok(WireFrame::Named {
                    name,
                    type_id,
                    receipt,
                    payload: r.rest(),
                });
            }
            kind::RECEIPT => WireFrame::Receipt {
                id: r.varint("receipt id")?,
                status: ReceiptStatus::from_u8(r.u8("receipt status")?)?,
            },
            kind::REPLY => {
                let id = r.varint("reply id")?;
                return Ok(WireFrame::Reply {
                    id,
                    payload: r.rest(),
                });
            }
            kind::RESOLVE => WireFrame::Resolve {
                request: r.varint("request id")?,
                type_id: r.u64("type id")?,
                type_name: r.string("type name", MAX_NAME)?,
                name: r.string("actor name", MAX_NAME)?,
            },
            kind::RESOLVED => {
                let request = r.varint("request id")?;
                let resolution = match r.u8("resolution")? {
                    0 => Resolution::Found(r.varint("serial")?),
                    1 => Resolution::NoSuchName,
                    2 => Resolution::WrongType {
                        actual: r.string("actual type", MAX_DETAIL)?,
                    },
                    v => {
                        return Err(WireError::Invalid {
                            field: "resolution",
                            value: v.into(),
                        })
                    }
                };
                WireFrame::Resolved {
                    request,
                    resolution,
                }
            }
            kind::MONITOR => WireFrame::Monitor {
                target: r.varint("target")?,
                token: r.varint("token")?,
            },
            kind::DEMONITOR => WireFrame::Demonitor {
                target: r.varint("target")?,
                token: r.varint("token")?,
            },
            kind::DOWN => WireFrame::Down {
                token: r.varint("token")?,
                reason: r.reason(0)?,
            },
            kind::LINK => WireFrame::Link {
                from: r.varint("from")?,
                to: r.varint("to")?,
            },
            kind::UNLINK => WireFrame::Unlink {
                from: r.varint("from")?,
                to: r.varint("to")?,
            },
            kind::EXIT => WireFrame::Exit {
                from: r.varint("from")?,
                to: r.varint("to")?,
                reason: r.reason(0)?,
            },
            kind::STOP => WireFrame::Stop {
                target: r.varint("target")?,
                kill: match r.u8("kill flag")? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(WireError::Invalid {
                            field: "kill flag",
                            value: v.into(),
                        })
                    }
                },
            },
            kind::GOODBYE => WireFrame::Goodbye {
                code: GoodbyeCode::from_u8(r.u8("goodbye code")?)?,
            },
            kind::BIND => WireFrame::Bind {
                session: r.u64("session")?,
                lane: r.u8("lane")?,
                candidate: r.u8("candidate")?,
            },
            kind::LANES => {
                let n = r.len("bound lanes", MAX_BOUND)?;
                let mut bound = Vec::with_capacity(n);
                for _ in 0..n {
                    bound.push((r.u8("lane")?, r.u8("candidate")?));
                }
                WireFrame::Lanes { bound }
            }
            kind::SEQUENCED => {
                let lane = r.u8("lane")?;
                let seq = r.varint("sequence number")?;
                let frame = r.rest();
                if frame.first() == Some(&kind::SEQUENCED) {
                    return Err(WireError::Invalid {
                        field: "sequenced frame kind",
                        value: kind::SEQUENCED.into(),
                    });
                }
                return Ok(WireFrame::Sequenced { lane, seq, frame });
            }
            kind::TRACE => {
                let version = r.u8("trace context version")?;
                if version != TRACE_VERSION {
                    return Err(WireError::Invalid {
                        field: "trace context version",
                        value: version.into(),
                    });
                }
                let trace_id = r.array::<16>("trace id")?;
                let span_id = r.array::<8>("span id")?;
                let flags = r.u8("trace flags")?;
                let context =
                    TraceContext::new(trace_id, span_id, flags).ok_or(WireError::Invalid {
                        field: "trace context (an all-zero id)",
                        value: 0,
                    })?;
                let frame = r.rest();
                // The carried frame is validated here too (and decoded
                // again where it is delivered: traced messages are few).
                match frame.first() {
                    Some(&kind::MESSAGE) => {
                        MessageHeader::parse_fields(&frame[1..])?;
                    }
                    Some(&kind::NAMED) => {
                        WireFrame::decode(frame.clone())?;
                    }
                    Some(&k) => {
                        return Err(WireError::Invalid {
                            field: "traced frame kind",
                            value: k.into(),
                        })
                    }
                    None => {
                        return Err(WireError::Truncated {
                            field: "traced frame",
                        })
                    }
                }
                return Ok(WireFrame::Traced { context, frame });
            }
            k => return Err(WireError::UnknownKind(k)),
        };
        if r.b.has_remaining() {
            return Err(WireError::Trailing(r.b.remaining()));
        }
        Ok(frame)
    }
}

/// Appends the header of a `SEQUENCED` frame; the numbered frame follows
/// it.
pub fn put_sequenced_header(b: &mut impl BufMut, lane: u8, seq: u64) {
    b.put_u8(kind::SEQUENCED);
    b.put_u8(lane);
    put_varint(b, seq);
}

/// The version byte of a `TRACE` frame's context (W3C `traceparent`'s).
pub const TRACE_VERSION: u8 = 0;

/// Bytes a `TRACE` header adds before the frame it carries.
pub const TRACE_HEADER_LEN: usize = 1 + 1 + 16 + 8 + 1;

/// Appends the header of a `TRACE` frame; the `MESSAGE` or `NAMED` frame it
/// carries follows it.
pub fn put_trace_header(b: &mut impl BufMut, context: &TraceContext) {
    b.put_u8(kind::TRACE);
    b.put_u8(TRACE_VERSION);
    b.put_slice(&context.trace_id());
    b.put_slice(&context.span_id());
    b.put_u8(context.flags());
}

/// Appends the header of a `MESSAGE` frame; the payload follows it. Lets the
/// hot path build a frame without an intermediate [`WireFrame`].
pub fn put_message_header(b: &mut impl BufMut, to: u64, type_id: u64, receipt: u64) {
    b.put_u8(kind::MESSAGE);
    put_varint(b, to);
    b.put_u64_le(type_id);
    put_varint(b, receipt);
}

fn put_varint(b: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn put_str(b: &mut BytesMut, s: &str) {
    put_varint(b, s.len() as u64);
    b.put_slice(s.as_bytes());
}

mod reason_kind {
    pub const NORMAL: u8 = 0;
    pub const STOPPED: u8 = 1;
    pub const SHUTDOWN: u8 = 2;
    pub const KILLED: u8 = 3;
    pub const PANICKED: u8 = 4;
    pub const FAILED: u8 = 5;
    pub const LINKED: u8 = 6;
    pub const RESTART_LIMIT: u8 = 7;
    pub const NODE_DOWN: u8 = 8;
}

fn put_reason(b: &mut BytesMut, reason: &ExitReason, depth: usize) {
    use reason_kind as k;
    // Deeper chains are cut into a text summary, so a reason always encodes
    // within the decoder's depth bound.
    let truncated = depth + 1 >= MAX_REASON_DEPTH;
    match reason {
        ExitReason::Normal => b.put_u8(k::NORMAL),
        ExitReason::Stopped => b.put_u8(k::STOPPED),
        ExitReason::Shutdown => b.put_u8(k::SHUTDOWN),
        ExitReason::Killed => b.put_u8(k::KILLED),
        ExitReason::Panicked(m) => {
            b.put_u8(k::PANICKED);
            put_str(b, clip(m));
        }
        ExitReason::Failed(m) => {
            b.put_u8(k::FAILED);
            put_str(b, clip(m));
        }
        ExitReason::Linked { .. } | ExitReason::RestartLimit { .. } if truncated => {
            b.put_u8(k::FAILED);
            put_str(b, clip(&reason.to_string()));
        }
        ExitReason::Linked { from, reason } => {
            b.put_u8(k::LINKED);
            b.put_u64_le(from.node().as_u64());
            put_varint(b, from.serial());
            put_reason(b, reason, depth + 1);
        }
        ExitReason::RestartLimit {
            max_restarts,
            within,
            last,
        } => {
            b.put_u8(k::RESTART_LIMIT);
            put_varint(b, (*max_restarts).into());
            put_varint(b, within.as_millis().min(u64::MAX.into()) as u64);
            put_reason(b, last, depth + 1);
        }
        ExitReason::NodeDown { node, cause } => {
            b.put_u8(k::NODE_DOWN);
            b.put_u64_le(node.as_u64());
            put_str(b, clip(cause));
        }
        // A reason added to the runtime after this protocol version travels
        // as text.
        other => {
            b.put_u8(k::FAILED);
            put_str(b, clip(&other.to_string()));
        }
    }
}

/// Cuts text to [`MAX_DETAIL`] bytes on a character boundary.
fn clip(s: &str) -> &str {
    if s.len() <= MAX_DETAIL {
        return s;
    }
    let mut end = MAX_DETAIL;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

struct Reader {
    b: Bytes,
}

impl Reader {
    fn need(&self, n: usize, field: &'static str) -> Result<(), WireError> {
        if self.b.remaining() < n {
            Err(WireError::Truncated { field })
        } else {
            Ok(())
        }
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        self.need(1, field)?;
        Ok(self.b.get_u8())
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        self.need(2, field)?;
        Ok(self.b.get_u16_le())
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        self.need(8, field)?;
        Ok(self.b.get_u64_le())
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        self.need(N, field)?;
        let mut a = [0u8; N];
        self.b.copy_to_slice(&mut a);
        Ok(a)
    }

    fn varint(&mut self, field: &'static str) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let byte = self.u8(field)?;
            let bits = u64::from(byte & 0x7f);
            if i == 9 && byte > 1 {
                return Err(WireError::BadVarint { field });
            }
            v |= bits << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::BadVarint { field })
    }

    fn len(&mut self, field: &'static str, max: usize) -> Result<usize, WireError> {
        let len = self.varint(field)?;
        if len > max as u64 {
            return Err(WireError::TooLong { field, len, max });
        }
        // Bounded by `max` above, which fits in usize.
        Ok(len as usize)
    }

    fn string(&mut self, field: &'static str, max: usize) -> Result<String, WireError> {
        let len = self.len(field, max)?;
        self.need(len, field)?;
        let bytes = self.b.split_to(len);
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::BadUtf8 { field })
    }

    fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.b)
    }

    fn reason(&mut self, depth: usize) -> Result<ExitReason, WireError> {
        use reason_kind as k;
        if depth >= MAX_REASON_DEPTH {
            return Err(WireError::TooLong {
                field: "exit reason nesting",
                len: depth as u64 + 1,
                max: MAX_REASON_DEPTH,
            });
        }
        Ok(match self.u8("exit reason")? {
            k::NORMAL => ExitReason::Normal,
            k::STOPPED => ExitReason::Stopped,
            k::SHUTDOWN => ExitReason::Shutdown,
            k::KILLED => ExitReason::Killed,
            k::PANICKED => ExitReason::Panicked(self.string("panic message", MAX_DETAIL)?),
            k::FAILED => ExitReason::Failed(self.string("failure", MAX_DETAIL)?),
            k::LINKED => {
                let node = NodeId::from_u64(self.u64("linked node")?);
                let serial = self.varint("linked serial")?;
                ExitReason::Linked {
                    from: ActorId::new(node, serial),
                    reason: Box::new(self.reason(depth + 1)?),
                }
            }
            k::RESTART_LIMIT => {
                let max = self.varint("max restarts")?;
                let max_restarts = u32::try_from(max).map_err(|_| WireError::Invalid {
                    field: "max restarts",
                    value: max,
                })?;
                let within = std::time::Duration::from_millis(self.varint("restart window")?);
                ExitReason::RestartLimit {
                    max_restarts,
                    within,
                    last: Box::new(self.reason(depth + 1)?),
                }
            }
            k::NODE_DOWN => ExitReason::NodeDown {
                node: NodeId::from_u64(self.u64("down node")?),
                cause: self.string("down cause", MAX_DETAIL)?.into(),
            },
            v => {
                return Err(WireError::Invalid {
                    field: "exit reason",
                    value: v.into(),
                })
            }
        })
    }
}

#[cfg(test)]
mod tests;
