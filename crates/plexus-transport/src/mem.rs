//! In-memory transport for tests: links whose datagrams travel through
//! bounded tokio channels instead of sockets, with the same driver loop,
//! queues and backpressure as the socket transports.
//!
//! A [`MemHub`] is a namespace of listeners (`mem://name`);
//! [`pair`] makes two connected links without one. Each direction is a
//! channel of [`MEM_CHANNEL`] datagrams: a driver whose peer does not read
//! stops taking messages from its application, like a full socket buffer.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bytes::Bytes;
//! use plexus_transport::mem;
//!
//! let (a, mut b) = mem::pair(&"mem / ordering".parse()?);
//! a.send(Bytes::from_static(b"ping")).await?;
//! assert_eq!(b.recv_message().await?, "ping");
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use plexus_net::{LinkContext, StackSpec, TransportProfile};
use tokio::sync::{mpsc, Notify};

use crate::conn::{now, Conn};
use crate::error::{AcceptError, BindError, CloseReason, ConnectError};
use crate::link::{lock, Link, LinkConfig, Shared};
use crate::stream::WRITE_BUDGET;

/// Datagrams buffered per direction of an in-memory link.
pub const MEM_CHANNEL: usize = 1024;

/// Connections waiting for [`MemListener::accept`].
const ACCEPT_BACKLOG: usize = 64;

/// The transport's name: the first word of its stack specs.
pub const NAME: &str = "mem";

/// What the transport carries.
pub const PROFILE: TransportProfile =
    TransportProfile::datagrams(None).with_guarantees(plexus_net::Guarantees::RELIABLE_ORDERED);

fn url(name: &str) -> String {
    format!("mem://{name}")
}

/// One end of an in-memory wire: datagrams out, datagrams in.
struct Wire {
    tx: mpsc::Sender<Bytes>,
    rx: mpsc::Receiver<Bytes>,
}

fn wires() -> (Wire, Wire) {
    let (atx, brx) = mpsc::channel(MEM_CHANNEL);
    let (btx, arx) = mpsc::channel(MEM_CHANNEL);
    (Wire { tx: atx, rx: arx }, Wire { tx: btx, rx: brx })
}

type Listeners = Arc<Mutex<HashMap<String, mpsc::Sender<(Wire, String)>>>>;

/// A namespace of in-memory listeners. Cheap to clone (clones share the
/// namespace).
#[derive(Clone, Default)]
pub struct MemHub {
    listeners: Listeners,
    next_link: Arc<AtomicU64>,
}

impl std::fmt::Debug for MemHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemHub").finish_non_exhaustive()
    }
}

impl MemHub {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    /// Listens under `name` with links built from `spec` (a `mem / ...`
    /// spec) and default buffers. The name is freed when the listener is
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`BindError::Spec`] if `spec` is not a `mem` spec, or [`BindError::AddrInUse`] if `name`
    /// is taken.
    pub fn bind(&self, spec: &StackSpec, name: &str) -> Result<MemListener, BindError> {
        self.bind_with(spec, name, LinkConfig::default())
    }

    /// As [`bind`](MemHub::bind), with `config` for every accepted link.
    ///
    /// # Errors
    ///
    /// As [`bind`](MemHub::bind).
    pub fn bind_with(
        &self,
        spec: &StackSpec,
        name: &str,
        config: LinkConfig,
    ) -> Result<MemListener, BindError> {
        let spec = &BindError::fit(spec, NAME, PROFILE, || url(name))?;
        let mut listeners = lock(&self.listeners);
        if listeners.get(name).is_some_and(|tx| !tx.is_closed()) {
            return Err(BindError::AddrInUse { addr: url(name) });
        }
        let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
        listeners.insert(name.to_owned(), tx);
        Ok(MemListener {
            rx: tokio::sync::Mutex::new(rx),
            spec: spec.clone(),
            config,
            name: name.to_owned(),
            hub: self.clone(),
        })
    }

    /// Connects to the listener bound under `name`.
    ///
    /// # Errors
    ///
    /// [`ConnectError::Spec`] if `spec` is not a `mem` spec, or
    /// [`ConnectError::NoListener`] if nothing listens under `name` (or its
    /// backlog is full).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn connect(&self, spec: &StackSpec, name: &str) -> Result<Link, ConnectError> {
        self.connect_with(spec, name, LinkConfig::default())
    }

    /// As [`connect`](MemHub::connect), with `config` for the link.
    ///
    /// # Errors
    ///
    /// As [`connect`](MemHub::connect).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn connect_with(
        &self,
        spec: &StackSpec,
        name: &str,
        config: LinkConfig,
    ) -> Result<Link, ConnectError> {
        let spec = &ConnectError::fit(spec, NAME, PROFILE, || url(name))?;
        let id = self.next_link.fetch_add(1, Ordering::Relaxed);
        let (ours, theirs) = wires();
        let listener = lock(&self.listeners).get(name).cloned();
        let accepted =
            listener.is_some_and(|tx| tx.try_send((theirs, format!("{}#{id}", url(name)))).is_ok());
        if !accepted {
            return Err(ConnectError::NoListener { addr: url(name) });
        }
        let stack = spec.build_link(LinkContext {
            now: now(),
            link_id: id,
        });
        Ok(spawn(ours, stack, url(name).into(), config))
    }
}

/// Accepts in-memory connections made with [`MemHub::connect`].
#[derive(Debug)]
pub struct MemListener {
    rx: tokio::sync::Mutex<mpsc::Receiver<(Wire, String)>>,
    spec: StackSpec,
    config: LinkConfig,
    name: String,
    hub: MemHub,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").finish_non_exhaustive()
    }
}

impl MemListener {
    /// Waits for the next connection and starts its driver.
    ///
    /// # Errors
    ///
    /// [`AcceptError::Closed`] if the hub dropped the listener's name.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn accept(&self) -> Result<Link, AcceptError> {
        let (wire, peer) =
            self.rx
                .lock()
                .await
                .recv()
                .await
                .ok_or_else(|| AcceptError::Closed {
                    addr: url(&self.name),
                })?;
        let link_id = self.hub.next_link.fetch_add(1, Ordering::Relaxed);
        let stack = self.spec.build_link(LinkContext {
            now: now(),
            link_id,
        });
        Ok(spawn(wire, stack, peer.into(), self.config))
    }
}

impl Drop for MemListener {
    fn drop(&mut self) {
        lock(&self.hub.listeners).remove(&self.name);
    }
}

/// Two links connected to each other, with stacks built from `spec` (a
/// `mem / ...` spec; any other transport kind is treated as `mem`).
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn pair(spec: &StackSpec) -> (Link, Link) {
    let (a, b) = wires();
    let t = now();
    let sa = spec.build_link(LinkContext { now: t, link_id: 0 });
    let sb = spec.build_link(LinkContext { now: t, link_id: 1 });
    (
        spawn(a, sa, "mem://pair#1".into(), LinkConfig::default()),
        spawn(b, sb, "mem://pair#0".into(), LinkConfig::default()),
    )
}

fn spawn(wire: Wire, stack: plexus_net::Stack, peer: Arc<str>, config: LinkConfig) -> Link {
    let notify = Arc::new(Notify::new());
    let waker = notify.clone();
    let shared = Shared::new(
        peer,
        stack.max_message_len(),
        config,
        Box::new(move || waker.notify_one()),
    );
    let link = Link::new(shared.clone());
    let conn = Conn::new(stack, shared);
    tokio::spawn(async move {
        let mut conn = conn;
        let reason = run(&mut conn, &notify, wire).await;
        conn.close(reason);
    });
    link
}

async fn run(conn: &mut Conn, notify: &Notify, wire: Wire) -> CloseReason {
    let Wire { tx, mut rx } = wire;
    let mut tx = Some(tx);
    let mut pending: VecDeque<Bytes> = VecDeque::with_capacity(64);
    let mut pending_bytes = 0usize;
    let sleep = tokio::time::sleep(std::time::Duration::ZERO);
    tokio::pin!(sleep);
    let mut spins = 0u32;
    loop {
        let more = conn.pump(now(), WRITE_BUDGET.saturating_sub(pending_bytes));
        while let Some(frame) = conn.stack.poll_transmit() {
            pending_bytes += frame.len();
            pending.push_back(frame.into_bytes());
        }
        conn.deliver();
        if let Some(reason) = conn.stack.close_reason() {
            return reason.clone().into();
        }
        if let Some(t) = &tx {
            while let Some(datagram) = pending.pop_front() {
                let len = datagram.len();
                match t.try_send(datagram) {
                    Ok(()) => pending_bytes -= len,
                    Err(mpsc::error::TrySendError::Full(d)) => {
                        pending.push_front(d);
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return CloseReason::PeerClosed,
                }
            }
            if pending.is_empty() && conn.send_done() {
                // Dropping our sender is the in-memory FIN.
                tx = None;
            }
        }
        if tx.is_none() && (conn.inbound_ended() || !conn.receiver_alive()) {
            return if conn.inbound_ended() {
                CloseReason::PeerClosed
            } else {
                CloseReason::Local
            };
        }
        if more && pending_bytes < WRITE_BUDGET {
            // The channel took everything: go on with the queued messages.
            spins += 1;
            if spins % 16 == 0 {
                tokio::task::yield_now().await;
            }
            continue;
        }
        let deadline = conn.stack.poll_timeout();
        if let Some(d) = deadline {
            sleep.as_mut().reset(d.into());
        }
        let can_read = !conn.inbound_ended() && !conn.inbox_full;
        let reserve = async {
            match &tx {
                Some(t) if !pending.is_empty() => t.reserve().await.is_ok(),
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            d = rx.recv(), if can_read => match d {
                Some(datagram) => {
                    let _ = conn.stack.handle_receive(now(), datagram);
                    for _ in 0..64 {
                        match rx.try_recv() {
                            Ok(datagram) => {
                                if conn.stack.handle_receive(now(), datagram).is_err() {
                                    break;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                None => conn.end_inbound(CloseReason::PeerClosed),
            },
            open = reserve => {
                // The permit is dropped at once: the loop's try_send uses
                // the room it signalled.
                if !open {
                    return CloseReason::PeerClosed;
                }
            }
            () = notify.notified() => conn.refresh_inbox(),
            () = &mut sleep, if deadline.is_some() => {
                let _ = conn.stack.handle_timeout(now());
            }
        }
    }
}
