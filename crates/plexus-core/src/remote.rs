//! The extension point through which a node (crate `plexus-remote`) makes
//! [`ActorRef`]s reach actors on other nodes. Most programs never use this
//! module directly; they use [`RemoteMessage`] (usually through
//! [`remote_message!`](crate::remote_message)) and the node's API.
//!
//! ```text
//!  ActorRef<M> ──► Sink<M> ──► Mailbox<M>                   (local)
//!                        └──► RemoteSink<M> ──► RemoteEndpoint (a node's
//!                              encodes M         per-actor proxy, untyped)
//! ```
//!
//! Refs and reply handles inside messages travel as paths. While a node
//! encodes or decodes a payload it installs a [`WireContext`] for the
//! current thread ([`with_context`]); the serde impls of [`ActorRef`] and
//! [`ReplyTo`](crate::ReplyTo) use it to export local actors and pending
//! replies, and to turn received paths back into refs.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

/// Payloads are `bytes::Bytes` (re-exported for the macro).
pub use bytes::Bytes;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::sync::Semaphore;

pub use crate::actor_ref::{ReceiptFuture, RoomWait, Sink};
use crate::dead_letters::DeadLetterReason;
use crate::lane::{Lane, MessageProperties, RouteError};
pub use crate::mailbox::{Control, Refusal, Signal, Watcher};
use crate::trace::TraceContext;
use crate::{ActorId, ActorRef, ExitReason};

/// A message type that can cross nodes, with a stable name on the wire.
///
/// Implement it with [`remote_message!`](crate::remote_message) for serde
/// types (encoded with postcard), or by hand for types whose payload is
/// already bytes (see [`Bulk`]), which then travel without a copy.
pub trait RemoteMessage: Send + Sized + 'static {
    /// Stable, unique name of the type on the wire, e.g. `"chat.Post"`.
    /// Renaming the Rust type does not change it; changing it breaks
    /// compatibility with nodes that use the old name.
    const TYPE_NAME: &'static str;
    /// The 64-bit id carried in each message (FNV-1a of the name).
    const TYPE_ID: u64 = type_id_of(Self::TYPE_NAME);
    /// The lane messages of this type take to other nodes unless a send
    /// names another ([`ActorRef::via`](crate::ActorRef::via)). Default
    /// [`Lane::Default`]; set it with `remote_message!(T = "name", lane =
    /// Bulk)`.
    const LANE: Lane = Lane::Default;

    /// Encodes the message.
    ///
    /// # Errors
    ///
    /// [`CodecError`] if the value cannot be encoded.
    fn into_payload(self) -> Result<Bytes, CodecError>;

    /// Decodes a message received from another node.
    ///
    /// # Errors
    ///
    /// [`CodecError`] if the bytes are not a valid encoding.
    fn from_payload(payload: Bytes) -> Result<Self, CodecError>;

    /// Appends the encoded message to `buf` (after a frame header already
    /// there). The default copies [`into_payload`](Self::into_payload)'s
    /// bytes; serde types encode in place, so a node can encode every
    /// message into one reused buffer (no allocation per message).
    ///
    /// # Errors
    ///
    /// [`CodecError`] if the value cannot be encoded; `buf` may then hold
    /// part of the encoding.
    fn encode_append(self, buf: &mut Vec<u8>) -> Result<(), CodecError> {
        let payload = self.into_payload()?;
        append_in_pieces(buf, &payload);
        Ok(())
    }
}

/// Appends `bytes` to `buf` in pieces of 1 KiB. From 2,112 bytes up
/// (glibc's default `x86_rep_movsb_threshold`) memcpy uses `rep movsb`,
/// which on AMD Zen runs some 30 times slower when the destination lies a
/// few bytes past the source modulo 4 KiB (2.9 us instead of 0.1 us for
/// 8 KiB, measured on the project's machine), and a payload appended
/// behind a frame header lands just there: in W5 this one copy was a third
/// of a device process's time.
pub fn append_in_pieces(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.reserve(bytes.len());
    for piece in bytes.chunks(1024) {
        buf.extend_from_slice(piece);
    }
}

/// FNV-1a, 64 bit: the wire id of a type name.
pub const fn type_id_of(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// Implements [`RemoteMessage`] for a serde type under a stable name.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Ping(u64);
/// plexus_core::remote_message!(Ping = "bench.Ping");
///
/// // A type whose messages take the bulk lane unless a send says otherwise.
/// #[derive(Serialize, Deserialize)]
/// struct Chunk(Vec<u8>);
/// plexus_core::remote_message!(Chunk = "bench.Chunk", lane = Bulk);
/// ```
#[macro_export]
macro_rules! remote_message {
    ($ty:ty = $name:expr) => {
        $crate::remote_message!($ty = $name, lane = Default);
    };
    ($ty:ty = $name:expr, lane = $lane:ident) => {
        impl $crate::remote::RemoteMessage for $ty {
            const TYPE_NAME: &'static str = $name;
            const LANE: $crate::Lane = $crate::Lane::$lane;
            fn into_payload(
                self,
            ) -> ::std::result::Result<$crate::remote::Bytes, $crate::remote::CodecError> {
                $crate::remote::encode(&self)
            }
            fn from_payload(
                payload: $crate::remote::Bytes,
            ) -> ::std::result::Result<Self, $crate::remote::CodecError> {
                $crate::remote::decode(&payload)
            }
            fn encode_append(
                self,
                buf: &mut ::std::vec::Vec<u8>,
            ) -> ::std::result::Result<(), $crate::remote::CodecError> {
                $crate::remote::encode_append(&self, buf)
            }
        }
    };
}

/// A message payload could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{context}: {detail}")]
pub struct CodecError {
    /// What was being done ("encode chat.Post", "decode chat.Post").
    pub context: String,
    /// What went wrong.
    pub detail: String,
}

/// Encodes a serde value with the wire codec (postcard).
///
/// # Errors
///
/// [`CodecError`] if serialization fails (e.g. a ref serialized outside a
/// node's wire context).
pub fn encode<T: Serialize>(value: &T) -> Result<Bytes, CodecError> {
    postcard::to_allocvec(value)
        .map(Bytes::from)
        .map_err(|e| CodecError {
            context: format!("encode {}", std::any::type_name::<T>()),
            detail: take_error_note().unwrap_or_else(|| e.to_string()),
        })
}

/// Appends a serde value, encoded with the wire codec, to `buf` (after a
/// frame header).
///
/// # Errors
///
/// [`CodecError`] if serialization fails; `buf` is then emptied.
pub fn encode_append<T: Serialize>(value: &T, buf: &mut Vec<u8>) -> Result<(), CodecError> {
    // postcard extends a writer it owns: lend it the buffer (a move, no copy).
    match postcard::to_extend(value, std::mem::take(buf)) {
        Ok(filled) => {
            *buf = filled;
            Ok(())
        }
        Err(e) => Err(CodecError {
            context: format!("encode {}", std::any::type_name::<T>()),
            detail: take_error_note().unwrap_or_else(|| e.to_string()),
        }),
    }
}

/// Decodes a serde value with the wire codec (postcard).
///
/// # Errors
///
/// [`CodecError`] if the bytes are not a valid encoding of `T`.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, CodecError> {
    postcard::from_bytes(payload).map_err(|e| CodecError {
        context: format!("decode {}", std::any::type_name::<T>()),
        detail: take_error_note().unwrap_or_else(|| e.to_string()),
    })
}

thread_local! {
    // postcard replaces custom serde error messages with a generic one; the
    // impls in this crate leave theirs here so `encode`/`decode` can report it.
    static ERROR_NOTE: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn take_error_note() -> Option<String> {
    ERROR_NOTE.with(|n| n.borrow_mut().take())
}

/// A serde error with a message that survives the codec.
pub(crate) fn codec_error<E: serde::ser::Error>(msg: &str) -> E {
    ERROR_NOTE.with(|n| *n.borrow_mut() = Some(msg.to_owned()));
    E::custom(msg)
}

/// A serde error with a message that survives the codec.
pub(crate) fn codec_de_error<E: serde::de::Error>(msg: &str) -> E {
    ERROR_NOTE.with(|n| *n.borrow_mut() = Some(msg.to_owned()));
    E::custom(msg)
}

/// Declares a message whose payload is its bytes, sent and received
/// without encoding or copying (like [`Bulk`], under a name of its own, so
/// a protocol's packets reach only the actor published for them).
///
/// ```
/// plexus_core::bytes_message! {
///     /// A packet of my protocol.
///     pub struct MyPacket = "my.Packet";
/// }
/// let p = MyPacket(bytes::Bytes::from_static(b"hi"));
/// assert_eq!(p.0.as_ref(), b"hi");
/// ```
#[macro_export]
macro_rules! bytes_message {
    ($(#[$meta:meta])* $vis:vis struct $name:ident = $type_name:expr;) => {
        $crate::bytes_message! {
            $(#[$meta])*
            $vis struct $name = $type_name, lane = Default;
        }
    };
    ($(#[$meta:meta])* $vis:vis struct $name:ident = $type_name:expr, lane = $lane:ident;) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        $vis struct $name(pub $crate::remote::Bytes);

        impl $crate::remote::RemoteMessage for $name {
            const TYPE_NAME: &'static str = $type_name;
            const LANE: $crate::Lane = $crate::Lane::$lane;
            fn into_payload(
                self,
            ) -> ::std::result::Result<$crate::remote::Bytes, $crate::remote::CodecError> {
                ::std::result::Result::Ok(self.0)
            }
            fn from_payload(
                payload: $crate::remote::Bytes,
            ) -> ::std::result::Result<Self, $crate::remote::CodecError> {
                ::std::result::Result::Ok(Self(payload))
            }
        }
    };
}

bytes_message! {
    /// Bulk data: its payload is the bytes themselves, sent and received
    /// without encoding or copying, on the bulk lane.
    pub struct Bulk = "plexus.Bulk", lane = Bulk;
}

/// Where an actor lives, as carried on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActorPath {
    /// The actor's id (its node and serial).
    pub id: ActorId,
    /// A URI the hosting node listens on (`tcp://127.0.0.1:4000`), or empty
    /// if it only reaches out (then only an existing link leads to it).
    pub addr: String,
}

/// Where a pending reply waits, as carried on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReplyPath {
    /// The node waiting for the reply.
    pub node: crate::NodeId,
    /// The request's number on that node.
    pub id: u64,
    /// A URI the waiting node listens on, or empty.
    pub addr: String,
}

/// An actor on another node, as a node presents it: the untyped half of a
/// remote [`ActorRef`].
pub trait RemoteEndpoint: Control {
    /// The actor's path, for refs that are passed on.
    fn path(&self) -> ActorPath;
    /// The context for encoding messages to this actor (refs inside them are
    /// exported relative to its node).
    fn wire_context(&self) -> &Arc<dyn WireContext>;
    /// Sends an encoded message on `lane`, for which room was taken with
    /// [`Control::try_acquire`].
    fn send(&self, lane: Lane, type_id: u64, type_name: &'static str, payload: Bytes);
    /// Sends a message on `lane` that `encode` appends to the endpoint's
    /// frame buffer (after the frame header), saving the payload's own
    /// allocation and copy. Returns `Ok(false)` without calling `encode`
    /// when this path is not available now (the caller then encodes and
    /// uses [`send`](Self::send)). An undeliverable message is the
    /// endpoint's to dead-letter, as with `send`.
    ///
    /// # Errors
    ///
    /// The [`CodecError`] of `encode`; nothing was sent.
    fn send_encoded(
        &self,
        lane: Lane,
        type_id: u64,
        type_name: &'static str,
        encode: &mut dyn FnMut(&mut Vec<u8>) -> Result<(), CodecError>,
    ) -> Result<bool, CodecError> {
        let _ = (lane, type_id, type_name, encode);
        Ok(false)
    }
    /// [`send`](Self::send), reporting a refused message (already dead
    /// lettered) to the caller. The default sends and reports success.
    ///
    /// # Errors
    ///
    /// The [`DeadLetterReason`] of the refused message.
    fn send_checked(
        &self,
        lane: Lane,
        type_id: u64,
        type_name: &'static str,
        payload: Bytes,
    ) -> Result<(), DeadLetterReason> {
        self.send(lane, type_id, type_name, payload);
        Ok(())
    }
    /// [`send`](Self::send) for a sender that waits for room
    /// ([`ActorRef::send`]): `None` once the message is queued (or dead
    /// lettered), or a future that queues it as soon as the link to the
    /// actor's node has room. The default sends at once.
    fn send_when_room(
        &self,
        lane: Lane,
        type_id: u64,
        type_name: &'static str,
        payload: Bytes,
    ) -> Option<RoomWait<'_>> {
        self.send(lane, type_id, type_name, payload);
        None
    }
    /// Like [`send`](Self::send), but asks the receiving node to confirm
    /// that the message is in the actor's mailbox; on a lane whose stack
    /// may lose it, the receipt says only that it was sent.
    fn send_with_receipt(
        &self,
        lane: Lane,
        type_id: u64,
        type_name: &'static str,
        payload: Bytes,
    ) -> ReceiptFuture;
    /// The lane `properties` pick, if its stack towards this actor's node
    /// honours them.
    ///
    /// # Errors
    ///
    /// [`RouteError`] naming the lane, its stack and what it lacks.
    fn route(&self, properties: &MessageProperties) -> Result<Lane, RouteError> {
        Ok(properties.lane())
    }
    /// Records a message that could not be sent as a dead letter.
    fn dead_letter(&self, type_name: &'static str, reason: DeadLetterReason);
}

/// Where a remote [`ReplyTo`](crate::ReplyTo) sends its value.
pub trait RemoteReply: Send + Sync + 'static {
    /// Sends the encoded reply for request `id`.
    fn send_reply(&self, id: u64, payload: Bytes);
}

/// Delivery of messages that arrive from other nodes to a local actor
/// exported under one message type.
pub trait Inbound: Send + Sync + 'static {
    /// The local actor.
    fn id(&self) -> ActorId;
    /// The exported ref, as `ActorRef<M>` for the exported type.
    fn as_any(&self) -> &dyn Any;
    /// Decodes and enqueues one message.
    ///
    /// # Errors
    ///
    /// [`ReceiptError`] saying why the message was not enqueued.
    fn deliver(&self, payload: Bytes) -> Result<(), ReceiptError>;
    /// [`deliver`](Self::deliver) of a message that came with a trace
    /// context: the actor handles it in a span under `trace` (see
    /// [`crate::trace`]). The default drops the context.
    ///
    /// # Errors
    ///
    /// [`ReceiptError`] saying why the message was not enqueued.
    fn deliver_traced(&self, payload: Bytes, trace: TraceContext) -> Result<(), ReceiptError> {
        let _ = trace;
        self.deliver(payload)
    }
    /// Decodes and enqueues several messages, in order, together (see
    /// [`ActorRef::try_tell_batch`]); `failed` gets the reason of each one
    /// not enqueued. The default delivers them one by one.
    fn deliver_batch(
        &self,
        payloads: &mut dyn Iterator<Item = Bytes>,
        failed: &mut dyn FnMut(ReceiptError),
    ) {
        for payload in payloads {
            if let Err(e) = self.deliver(payload) {
                failed(e);
            }
        }
    }
    /// Whether the actor is alive.
    fn is_alive(&self) -> bool;
    /// The actor's control block (monitors, links, stop).
    fn control(&self) -> Arc<dyn Control>;
    /// Messages waiting in the actor's mailbox.
    fn queued(&self) -> usize;
}

/// The [`Inbound`] of a local `ActorRef<M>`.
pub fn inbound<M: RemoteMessage>(target: ActorRef<M>) -> Arc<dyn Inbound> {
    Arc::new(TypedInbound { target })
}

struct TypedInbound<M> {
    target: ActorRef<M>,
}

impl<M: RemoteMessage> Inbound for TypedInbound<M> {
    fn id(&self) -> ActorId {
        self.target.id()
    }
    fn as_any(&self) -> &dyn Any {
        &self.target
    }
    fn deliver(&self, payload: Bytes) -> Result<(), ReceiptError> {
        let msg = M::from_payload(payload).map_err(ReceiptError::Decode)?;
        self.target.try_tell(msg).map_err(|e| refusal(&e))
    }
    fn deliver_traced(&self, payload: Bytes, trace: TraceContext) -> Result<(), ReceiptError> {
        let msg = M::from_payload(payload).map_err(ReceiptError::Decode)?;
        self.target
            .try_tell_traced(msg, trace)
            .map_err(|e| refusal(&e))
    }
    fn deliver_batch(
        &self,
        payloads: &mut dyn Iterator<Item = Bytes>,
        failed: &mut dyn FnMut(ReceiptError),
    ) {
        let mut msgs = Vec::with_capacity(payloads.size_hint().0);
        for payload in payloads {
            match M::from_payload(payload) {
                Ok(msg) => msgs.push(msg),
                Err(e) => failed(ReceiptError::Decode(e)),
            }
        }
        self.target
            .try_tell_batch(&mut msgs, |e| failed(refusal(&e)));
    }
    fn is_alive(&self) -> bool {
        self.target.is_alive()
    }
    fn control(&self) -> Arc<dyn Control> {
        self.target.control_arc()
    }
    fn queued(&self) -> usize {
        self.target.control().queued()
    }
}

/// The receipt error of a message the actor's mailbox refused.
fn refusal<M>(e: &crate::TrySendError<M>) -> ReceiptError {
    match e {
        crate::TrySendError::Full { .. } => ReceiptError::MailboxFull,
        _ => ReceiptError::Stopped,
    }
}

/// Why a delivery receipt reports failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The receiving node has no live actor with that id and type.
    #[error("no such actor on the receiving node")]
    NoSuchActor,
    /// The actor stopped.
    #[error("actor has stopped")]
    Stopped,
    /// The actor's bounded mailbox was full.
    #[error("mailbox full")]
    MailboxFull,
    /// The payload did not decode as the registered type.
    #[error("{0}")]
    Decode(CodecError),
    /// The link to the node closed before the receipt came, or could not be
    /// made, for this cause.
    #[error("link to node closed: {0}")]
    LinkClosed(crate::LinkCause),
    /// The send buffer of the link to the actor's node was full: the
    /// message was not sent.
    #[error("send buffer of the link to the node is full")]
    SendBufferFull,
    /// The message cannot travel on the link at all (larger than its stack
    /// carries, a file region that could not be read): it was not sent.
    #[error("the message cannot travel on the link to the node")]
    Undeliverable,
    /// The local node stopped (shut down, or was dropped) before the
    /// message was confirmed.
    #[error("the local node stopped before the message was confirmed")]
    NodeStopped,
    /// The receipt's future was polled again after it completed.
    #[error("receipt already taken")]
    AlreadyTaken,
}

impl Serialize for CodecError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (&self.context, &self.detail).serialize(s)
    }
}

impl<'de> Deserialize<'de> for CodecError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (context, detail) = <(String, String)>::deserialize(d)?;
        Ok(Self { context, detail })
    }
}

/// A reply a local asker waits for from another node.
pub trait PendingReply: Send + 'static {
    /// Decodes the value and hands it to the asker.
    fn deliver(self: Box<Self>, payload: Bytes);
    /// Whether the asker stopped waiting (timed out, dropped), so the entry
    /// can be forgotten.
    fn is_abandoned(&self) -> bool;
    /// The reply cannot come: the link to `node` was lost (or never came
    /// up) for `cause`. The asker fails with
    /// [`AskError::NodeUnreachable`](crate::AskError::NodeUnreachable).
    fn node_unreachable(self: Box<Self>, node: crate::NodeId, cause: crate::LinkCause);
}

/// What a node provides while it encodes or decodes one message.
pub trait WireContext: Send + Sync {
    /// Exports a local actor under one message type so messages for it can
    /// come back; returns its path.
    fn export(
        &self,
        id: ActorId,
        type_id: u64,
        inbound: &dyn Fn() -> Arc<dyn Inbound>,
    ) -> ActorPath;
    /// Resolves a received path: the exported local actor, if the path is
    /// this node's.
    fn import_local(&self, path: &ActorPath, type_id: u64) -> Option<Arc<dyn Inbound>>;
    /// Resolves a received path to a remote actor (or a stopped one).
    fn import_remote(&self, path: &ActorPath) -> Arc<dyn RemoteEndpoint>;
    /// Keeps a pending reply until its value arrives from the peer; returns
    /// its path.
    fn export_reply(&self, pending: Box<dyn PendingReply>) -> ReplyPath;
    /// Where to send the reply of a received reply path.
    fn import_reply(&self, path: &ReplyPath) -> Arc<dyn RemoteReply>;
    /// What a layer above put on the node under `key` (its type), for the
    /// serde impls of its own handles inside messages (an entity ref finds
    /// the node's sharding this way). None by default.
    fn extension(&self, key: std::any::TypeId) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        let _ = key;
        None
    }
}

/// The extension of type `T` of the node whose wire context this thread
/// runs in (see [`WireContext::extension`]): for the serde impls of
/// handles a layer above puts inside messages.
pub fn context_extension<T: std::any::Any + Send + Sync>() -> Option<Arc<T>> {
    current_context()?
        .extension(std::any::TypeId::of::<T>())?
        .downcast::<T>()
        .ok()
}

thread_local! {
    static CONTEXT: RefCell<Option<Arc<dyn WireContext>>> = const { RefCell::new(None) };
}

/// Runs `f` with `ctx` as the wire context of this thread (for the serde
/// impls of refs and reply handles).
///
/// The context stays installed after `f` (until another one replaces it),
/// so a thread that keeps encoding for the same peer pays one pointer
/// comparison per message, not a reference-count round trip.
pub fn with_context<T>(ctx: &Arc<dyn WireContext>, f: impl FnOnce() -> T) -> T {
    CONTEXT.with(|c| {
        let mut current = c.borrow_mut();
        if !current.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, ctx)) {
            *current = Some(ctx.clone());
        }
    });
    f()
}

pub(crate) fn current_context() -> Option<Arc<dyn WireContext>> {
    CONTEXT.with(|c| c.borrow().clone())
}

const NO_CONTEXT: &str =
    "actor refs and reply handles can only be encoded by a Plexus node (no wire context on this thread)";

impl<M: RemoteMessage> Serialize for ActorRef<M> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Some(path) = self.sink.remote_path() {
            return path.serialize(s);
        }
        let ctx = current_context().ok_or_else(|| codec_error::<S::Error>(NO_CONTEXT))?;
        let me = self.clone();
        ctx.export(self.id(), M::TYPE_ID, &|| inbound(me.clone()))
            .serialize(s)
    }
}

impl<'de, M: RemoteMessage> Deserialize<'de> for ActorRef<M> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let path = ActorPath::deserialize(d)?;
        let ctx = current_context().ok_or_else(|| codec_de_error::<D::Error>(NO_CONTEXT))?;
        if let Some(local) = ctx.import_local(&path, M::TYPE_ID) {
            if let Some(r) = local.as_any().downcast_ref::<ActorRef<M>>() {
                return Ok(r.clone());
            }
        }
        Ok(remote_ref(ctx.import_remote(&path)))
    }
}

/// The control block behind a ref (monitors, links, stop), for nodes.
pub fn control_of<M: Send + 'static>(actor: &ActorRef<M>) -> Arc<dyn Control> {
    actor.control_arc()
}

/// A typed ref to a remote actor.
pub fn remote_ref<M: RemoteMessage>(endpoint: Arc<dyn RemoteEndpoint>) -> ActorRef<M> {
    ActorRef::from_sink(
        endpoint.id(),
        Arc::new(RemoteSink::<M> {
            endpoint,
            _msg: PhantomData,
        }),
    )
}

/// The typed half of a remote ref: encodes `M`, hands bytes to the endpoint.
struct RemoteSink<M> {
    endpoint: Arc<dyn RemoteEndpoint>,
    _msg: PhantomData<fn(M)>,
}

impl<M: RemoteMessage> RemoteSink<M> {
    fn encode(&self, msg: M) -> Option<Bytes> {
        match with_context(self.endpoint.wire_context(), || msg.into_payload()) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(target: "plexus::remote", actor = %self.endpoint.id(), "cannot send: {e}");
                self.endpoint
                    .dead_letter(M::TYPE_NAME, DeadLetterReason::Undeliverable);
                None
            }
        }
    }
}

impl<M: RemoteMessage> Sink<M> for RemoteSink<M> {
    fn push(&self, msg: M) {
        self.push_via(msg, M::LANE);
    }

    fn push_via(&self, msg: M, lane: Lane) {
        let mut msg = Some(msg);
        let sent = with_context(self.endpoint.wire_context(), || {
            self.endpoint.send_encoded(
                lane,
                M::TYPE_ID,
                M::TYPE_NAME,
                &mut |buf| match msg.take() {
                    Some(m) => m.encode_append(buf),
                    None => Err(CodecError {
                        context: format!("encode {}", M::TYPE_NAME),
                        detail: "the endpoint asked for the message twice".into(),
                    }),
                },
            )
        });
        match sent {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(target: "plexus::remote", actor = %self.endpoint.id(), "cannot send: {e}");
                self.endpoint
                    .dead_letter(M::TYPE_NAME, DeadLetterReason::Undeliverable);
                return;
            }
        }
        let Some(msg) = msg else { return };
        if let Some(payload) = self.encode(msg) {
            self.endpoint.send(lane, M::TYPE_ID, M::TYPE_NAME, payload);
        }
    }

    fn reject(&self, _msg: M, reason: DeadLetterReason) {
        self.endpoint.dead_letter(M::TYPE_NAME, reason);
    }

    fn push_request(&self, msg: M) -> Result<(), DeadLetterReason> {
        // `encode` dead-letters what it cannot encode.
        let payload = self.encode(msg).ok_or(DeadLetterReason::Undeliverable)?;
        self.endpoint
            .send_checked(M::LANE, M::TYPE_ID, M::TYPE_NAME, payload)
    }

    fn push_when_room(&self, msg: M, lane: Lane) -> Option<RoomWait<'_>> {
        let payload = self.encode(msg)?;
        self.endpoint
            .send_when_room(lane, M::TYPE_ID, M::TYPE_NAME, payload)
    }

    fn push_with_receipt(&self, msg: M) -> ReceiptFuture {
        self.push_with_receipt_via(msg, M::LANE)
    }

    fn push_with_receipt_via(&self, msg: M, lane: Lane) -> ReceiptFuture {
        match self.encode(msg) {
            Some(payload) => {
                self.endpoint
                    .send_with_receipt(lane, M::TYPE_ID, M::TYPE_NAME, payload)
            }
            None => ReceiptFuture::ready(Err(ReceiptError::Decode(CodecError {
                context: format!("encode {}", M::TYPE_NAME),
                detail: "see the log".into(),
            }))),
        }
    }

    fn route(&self, properties: &MessageProperties) -> Result<Lane, RouteError> {
        self.endpoint.route(properties)
    }

    fn default_lane(&self) -> Lane {
        M::LANE
    }

    fn remote_path(&self) -> Option<ActorPath> {
        Some(self.endpoint.path())
    }
}

impl<M: RemoteMessage> Control for RemoteSink<M> {
    fn id(&self) -> ActorId {
        self.endpoint.id()
    }
    fn is_alive(&self) -> bool {
        self.endpoint.is_alive()
    }
    fn try_acquire(&self) -> Result<(), Refusal> {
        self.endpoint.try_acquire()
    }
    fn semaphore(&self) -> Option<&Semaphore> {
        self.endpoint.semaphore()
    }
    fn signal(&self, signal: Signal) -> bool {
        self.endpoint.signal(signal)
    }
    fn kill(&self) {
        self.endpoint.kill();
    }
    fn watch(&self, watcher: Watcher) -> Option<u64> {
        self.endpoint.watch(watcher)
    }
    fn unwatch(&self, token: u64) {
        self.endpoint.unwatch(token);
    }
    fn add_link(&self, other: Arc<dyn Control>) -> Result<(), ExitReason> {
        self.endpoint.add_link(other)
    }
    fn remove_link(&self, other: ActorId) {
        self.endpoint.remove_link(other);
    }
    fn add_name(&self, name: &str) -> bool {
        self.endpoint.add_name(name)
    }
    fn remove_name(&self, name: &str) {
        self.endpoint.remove_name(name);
    }
    fn runtime(&self) -> &tokio::runtime::Handle {
        self.endpoint.runtime()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_are_stable_fnv1a() {
        // Reference values of FNV-1a 64.
        assert_eq!(type_id_of(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(type_id_of("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(type_id_of("bench.Ping"), type_id_of("bench.Pong"));
    }

    #[test]
    fn bulk_payload_is_not_copied() {
        let data = Bytes::from(vec![7u8; 4096]);
        let ptr = data.as_ptr();
        let out = Bulk(data).into_payload().unwrap();
        assert_eq!(out.as_ptr(), ptr);
        assert_eq!(Bulk::from_payload(out.clone()).unwrap().0.as_ptr(), ptr);
    }

    #[test]
    fn refs_do_not_encode_outside_a_node() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let system = crate::ActorSystem::new();
            let r: ActorRef<Bulk> = system.spawn_fn(|_b: Bulk, _ctx| {});
            let err = encode(&r).unwrap_err();
            assert!(
                err.detail.contains("only be encoded by a Plexus node"),
                "{err}"
            );
        });
    }
}
