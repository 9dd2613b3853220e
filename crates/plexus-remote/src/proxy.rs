//! The proxy of a remote actor: what an `ActorRef<M>` to an actor on
//! another node points to (through the typed sink of `plexus-core`).
//!
//! Messages become `MESSAGE` frames on the peer link; stop, kill, monitors
//! and links become their frames. A forged proxy (see
//! [`Node::forge`](crate::Node::forge)) addresses its actor by name until a
//! background resolve, started on first use, pins it to a serial.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::{BufMut, Bytes, BytesMut};
use plexus_core::remote::{
    ActorPath, CodecError, Control, ReceiptError, Refusal, RemoteEndpoint, RemoteMessage, Signal,
    Watcher, WireContext,
};
use plexus_core::{ActorId, DeadLetterReason, Down, ExitReason};
use plexus_transport::Lane;
use tokio::sync::{oneshot, Semaphore};

use crate::node::{lock, NodeInner};
use crate::peer::{message_frame, Peer};
use crate::wire::{Frame, Resolution};

pub(crate) struct RemoteActor {
    /// Itself, for work that outlives a call (a forged proxy's resolve).
    me: Weak<RemoteActor>,
    id: ActorId,
    inner: Weak<NodeInner>,
    peer: Arc<Peer>,
    addr: String,
    runtime: tokio::runtime::Handle,
    dead: AtomicBool,
    named: Option<Named>,
}

/// A forged proxy's name and resolution state.
struct Named {
    name: String,
    uri: String,
    type_id: u64,
    type_name: &'static str,
    state: Mutex<NamedState>,
}

enum NamedState {
    Unresolved { watchers: Vec<(u64, Watcher)> },
    Resolving { watchers: Vec<(u64, Watcher)> },
    Resolved(ActorId),
    Failed(ExitReason),
}

impl RemoteActor {
    pub(crate) fn resolved(
        inner: &Arc<NodeInner>,
        id: ActorId,
        peer: Arc<Peer>,
        addr: String,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            id,
            inner: Arc::downgrade(inner),
            peer,
            addr,
            runtime: inner.system_runtime(),
            dead: AtomicBool::new(false),
            named: None,
        })
    }

    pub(crate) fn forged<M: RemoteMessage>(
        inner: &Arc<NodeInner>,
        id: ActorId,
        peer: Arc<Peer>,
        name: String,
        uri: String,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            id,
            inner: Arc::downgrade(inner),
            addr: peer.dial_uri(),
            peer,
            runtime: inner.system_runtime(),
            dead: AtomicBool::new(false),
            named: Some(Named {
                name,
                uri,
                type_id: M::TYPE_ID,
                type_name: M::TYPE_NAME,
                state: Mutex::new(NamedState::Unresolved {
                    watchers: Vec::new(),
                }),
            }),
        })
    }

    /// The actor's id on its node: the resolved one for forged proxies.
    fn target(self: &Arc<Self>) -> Option<ActorId> {
        match &self.named {
            None => Some(self.id),
            Some(n) => {
                let mut st = lock(&n.state);
                match &mut *st {
                    NamedState::Resolved(id) => Some(*id),
                    NamedState::Unresolved { watchers } => {
                        let watchers = std::mem::take(watchers);
                        *st = NamedState::Resolving { watchers };
                        drop(st);
                        let me = self.clone();
                        self.runtime.spawn(async move { me.resolve_forged().await });
                        None
                    }
                    _ => None,
                }
            }
        }
    }

    async fn resolve_forged(self: Arc<Self>) {
        let Some(n) = &self.named else { return };
        let outcome = async {
            let node = self.peer.wait_up().await.map_err(|e| e.to_string())?;
            let rx = self
                .peer
                .resolve(n.type_id, n.type_name, &n.name)
                .map_err(|e| e.to_string())?;
            match rx.await {
                Ok(Ok(Resolution::Found(serial))) => Ok(ActorId::new(node, serial)),
                Ok(Ok(Resolution::NoSuchName)) => {
                    Err(format!("no actor named {:?} on that node", n.name))
                }
                Ok(Ok(Resolution::WrongType { actual })) => Err(format!(
                    "wrong message type: expected {}, the actor accepts {actual}",
                    n.type_name
                )),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("node dropped".into()),
            }
        }
        .await;
        let watchers = {
            let mut st = lock(&n.state);
            let watchers = match &mut *st {
                NamedState::Resolving { watchers } | NamedState::Unresolved { watchers } => {
                    std::mem::take(watchers)
                }
                _ => Vec::new(),
            };
            *st = match &outcome {
                Ok(id) => NamedState::Resolved(*id),
                Err(why) => {
                    NamedState::Failed(ExitReason::Failed(format!("resolve {}: {why}", n.uri)))
                }
            };
            watchers
        };
        match outcome {
            Ok(id) => {
                for (_, w) in watchers {
                    self.peer.watch(id, w);
                }
            }
            Err(why) => {
                tracing::warn!(target: "plexus::remote", uri = %n.uri, "forged ref failed: {why}");
                self.dead.store(true, Ordering::Release);
                let reason = ExitReason::Failed(format!("resolve {}: {why}", n.uri));
                for (_, w) in watchers {
                    w.notify(Down {
                        id: self.id,
                        reason: reason.clone(),
                    });
                }
            }
        }
    }

    fn frame_for(self: &Arc<Self>, type_id: u64, receipt: u64, payload: &[u8]) -> Option<Bytes> {
        if let Some(target) = self.target() {
            return Some(message_frame(target.serial(), type_id, receipt, payload));
        }
        let n = self.named.as_ref()?;
        if matches!(*lock(&n.state), NamedState::Failed(_)) {
            return None;
        }
        let mut b = BytesMut::with_capacity(32 + n.name.len() + payload.len());
        Frame::Named {
            name: n.name.clone(),
            type_id,
            receipt,
            payload: Bytes::new(),
        }
        .encode_into(&mut b);
        b.put_slice(payload);
        Some(b.freeze())
    }

    fn dead_letter_here(&self, type_name: &'static str, reason: DeadLetterReason) {
        if let Some(inner) = self.inner.upgrade() {
            inner
                .system
                .dead_letters()
                .record(self.id, type_name, reason);
        }
    }
}

/// A scratch buffer that survives the frame larger than this is given back
/// to the allocator instead.
const SCRATCH_KEEP: usize = 64 << 10;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's empty frame buffer: messages are encoded into
/// it and copied once into the link's outgoing bytes, so a message costs no
/// allocation of its own. Re-entered (a message encoded while encoding
/// another), it falls back to a fresh buffer.
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let r = f(&mut buf);
            if buf.capacity() > SCRATCH_KEEP {
                *buf = Vec::new();
            }
            r
        }
        Err(_) => f(&mut Vec::with_capacity(64)),
    })
}

impl RemoteEndpoint for RemoteActor {
    fn path(&self) -> ActorPath {
        ActorPath {
            id: self.id,
            addr: self.addr.clone(),
        }
    }

    fn wire_context(&self) -> &Arc<dyn WireContext> {
        self.peer.canonical().context()
    }

    fn send_encoded(
        &self,
        type_id: u64,
        type_name: &'static str,
        encode: &mut dyn FnMut(&mut Vec<u8>) -> Result<(), CodecError>,
    ) -> Result<bool, CodecError> {
        // Forged proxies still resolving take the general path.
        let target = match &self.named {
            None => self.id,
            Some(n) => match &*lock(&n.state) {
                NamedState::Resolved(id) => *id,
                _ => return Ok(false),
            },
        };
        with_scratch(|frame| {
            crate::wire::put_message_header(frame, target.serial(), type_id, 0);
            encode(frame)?;
            if self.peer.send_slice(self.lane(), frame).is_err() {
                self.dead_letter_here(type_name, DeadLetterReason::MailboxFull);
            }
            Ok(true)
        })
    }

    fn send(&self, type_id: u64, type_name: &'static str, payload: Bytes) {
        // Called through an Arc, so the upgrade succeeds; never drop silently.
        let Some(me) = self.arc() else {
            self.dead_letter_here(type_name, DeadLetterReason::Undeliverable);
            return;
        };
        match me.frame_for(type_id, 0, &payload) {
            Some(frame) => {
                if self.peer.send_frame(self.lane(), frame).is_err() {
                    self.dead_letter_here(type_name, DeadLetterReason::MailboxFull);
                }
            }
            None => self.dead_letter_here(type_name, DeadLetterReason::Stopped),
        }
    }

    fn send_with_receipt(
        &self,
        type_id: u64,
        type_name: &'static str,
        payload: Bytes,
    ) -> oneshot::Receiver<Result<(), ReceiptError>> {
        let Some(me) = self.arc() else {
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(ReceiptError::Stopped));
            return rx;
        };
        if me.frame_for(type_id, 0, &[]).is_none() {
            self.dead_letter_here(type_name, DeadLetterReason::Stopped);
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(ReceiptError::Stopped));
            return rx;
        }
        self.peer.send_with_receipt(self.lane(), |id| {
            me.frame_for(type_id, id, &payload)
                .unwrap_or_else(|| message_frame(me.id.serial(), type_id, id, &payload))
        })
    }

    fn dead_letter(&self, type_name: &'static str, reason: DeadLetterReason) {
        self.dead_letter_here(type_name, reason);
    }
}

impl RemoteActor {
    /// The lane of everything sent through this ref (messages, stop, exit):
    /// by the target's serial, or for a ref made from a published name by
    /// the name, also once resolved, so frames sent before and after the
    /// resolve stay in order.
    fn lane(&self) -> Lane {
        match &self.named {
            Some(n) => Lane::for_key(crate::peer::name_key(&n.name)),
            None => Lane::for_key(self.id.serial()),
        }
    }

    fn arc(&self) -> Option<Arc<Self>> {
        self.me.upgrade()
    }

    pub(crate) fn mark_dead(&self) {
        self.dead.store(true, Ordering::Release);
    }
}

impl Control for RemoteActor {
    fn id(&self) -> ActorId {
        self.id
    }

    fn is_alive(&self) -> bool {
        if self.dead.load(Ordering::Acquire) {
            return false;
        }
        match &self.named {
            None => self.peer.node_alive(self.id.node()),
            Some(n) => match &*lock(&n.state) {
                NamedState::Failed(_) => false,
                NamedState::Resolved(id) => self.peer.node_alive(id.node()),
                _ => true,
            },
        }
    }

    fn try_acquire(&self) -> Result<(), Refusal> {
        if self.is_alive() {
            Ok(())
        } else {
            Err(Refusal::Stopped)
        }
    }

    fn semaphore(&self) -> Option<&Semaphore> {
        None
    }

    fn signal(&self, signal: Signal) -> bool {
        let Some(me) = self.arc() else { return false };
        let Some(target) = me.target() else {
            return false;
        };
        let frame = match signal {
            Signal::Stop(_) => Frame::Stop {
                target: target.serial(),
                kill: false,
            },
            Signal::Kill => Frame::Stop {
                target: target.serial(),
                kill: true,
            },
            // A local actor linked to this one exited.
            Signal::Exit(exit) => Frame::Exit {
                from: exit.from.serial(),
                to: target.serial(),
                reason: exit.reason,
            },
            Signal::Down(_) => return false,
        };
        self.peer.send_frame(self.lane(), frame.encode()).is_ok()
    }

    fn kill(&self) {
        self.signal(Signal::Kill);
    }

    fn watch(&self, watcher: Watcher) -> Option<u64> {
        if let Some(n) = &self.named {
            let mut st = lock(&n.state);
            match &mut *st {
                NamedState::Resolved(id) => {
                    let id = *id;
                    drop(st);
                    return self.peer.watch(id, watcher);
                }
                NamedState::Failed(reason) => {
                    let reason = reason.clone();
                    drop(st);
                    watcher.notify(Down {
                        id: self.id,
                        reason,
                    });
                    return None;
                }
                NamedState::Unresolved { watchers } | NamedState::Resolving { watchers } => {
                    let token = self.inner.upgrade().map_or(0, |i| i.next_id());
                    watchers.push((token, watcher));
                    drop(st);
                    if let Some(me) = self.arc() {
                        me.target();
                    }
                    return Some(token);
                }
            }
        }
        self.peer.watch(self.id, watcher)
    }

    fn unwatch(&self, token: u64) {
        if let Some(n) = &self.named {
            let mut st = lock(&n.state);
            match &mut *st {
                NamedState::Unresolved { watchers } | NamedState::Resolving { watchers } => {
                    watchers.retain(|(t, _)| *t != token);
                    return;
                }
                NamedState::Resolved(id) => {
                    let id = *id;
                    drop(st);
                    self.peer.unwatch(id, token);
                    return;
                }
                NamedState::Failed(_) => return,
            }
        }
        self.peer.unwatch(self.id, token);
    }

    fn add_link(&self, other: Arc<dyn Control>) -> Result<(), ExitReason> {
        let Some(inner) = self.inner.upgrade() else {
            return Err(ExitReason::Killed);
        };
        let Some(target) = self.arc().and_then(|me| me.target()) else {
            return Err(ExitReason::Failed(
                "the forged ref is not resolved yet".into(),
            ));
        };
        if !self.is_alive() {
            return Err(ExitReason::NodeDown {
                node: target.node(),
                cause: "no link to the node".into(),
            });
        }
        inner.export_control(other.clone());
        self.peer.add_link(other, target);
        Ok(())
    }

    fn remove_link(&self, other: ActorId) {
        if let Some(target) = self.arc().and_then(|me| me.target()) {
            self.peer.remove_link(other, target);
        }
    }

    fn add_name(&self, _name: &str) -> bool {
        self.is_alive()
    }

    fn remove_name(&self, _name: &str) {}

    fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }
}
