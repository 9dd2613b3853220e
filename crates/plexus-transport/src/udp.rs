//! UDP: one socket serving many peers (the CAF thesis' UDP dispatcher).
//!
//! ```text
//!             ┌──────────── socket task ────────────┐
//!  datagram ─▶│ source addr ─▶ peer table ─▶ Stack  │─▶ Link (per peer)
//!             │   unknown: new peer, if room        │
//!  send_to  ◀─│ tx queue ◀── poll_transmit ◀── Stack│◀─ Link::send
//!             │ timers: BTreeSet<(deadline, peer)>  │
//!             └─────────────────────────────────────┘
//! ```
//!
//! Each peer (source address) gets its own [`Stack`](plexus_net::Stack) built from the
//! endpoint's spec, so garbage from one source only ever reaches that
//! source's stack. A datagram from an unknown source creates a peer only if
//! the table has room ([`UdpConfig::max_peers`]), the accept backlog has
//! room, and the stack accepts the datagram (garbage is counted, not
//! admitted); otherwise it is dropped and counted ([`UdpStats`]). A peer
//! silent for [`UdpConfig::idle_timeout`] is dropped, closing its link with
//! [`CloseReason::IdleTimeout`]. A peer's stack timers fire at the first
//! read after they are due, and on an idle socket at most 2 ms late
//! (`TIMER_SLACK`; off Linux also tokio's 1 ms timer granularity). The
//! task's alarm is a timerfd that stays armed across waits and only ever
//! moves earlier (see `alarm`): a busy socket does not arm and cancel a
//! kernel timer every time it waits for the next datagram.
//! While a peer's receive buffer is full its
//! datagrams are dropped before its stack sees them, so `delivery`
//! retransmits them later and memory stays bounded.
//!
//! System calls are batched with `quinn-udp`: consecutive datagrams to one
//! peer of equal size (a run of full bundles or fragments, the last one may
//! be shorter) leave in one `sendmsg` with UDP segmentation offload (GSO)
//! where the kernel has it, and the socket reads coalesced runs (GRO) and
//! several datagrams per `recvmmsg`.
//!
//! A peer's link state is shared with the link's senders under a lock: after
//! a turn that handed received messages to the application, the next
//! sender runs the stack and sends the reply's datagrams itself, without a
//! second turn of the socket task (see `peer`).
//!
//! There is no connection handshake: [`UdpEndpoint::connect`] only creates
//! local peer state, and the remote endpoint sees the peer when its first
//! datagram arrives ([`UdpEndpoint::accept`]).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::poll_fn;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use plexus_net::{Frame, LinkContext, StackSpec, TransportProfile};
use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot, Notify};

mod peer;
pub(crate) mod socket;
use peer::{contiguous, sender_turn, PeerCell, PeerState};
use socket::EndpointSocket;

use crate::alarm::Alarm;
use crate::conn::{now, Conn};
use crate::error::{AcceptError, BindError, CloseReason, ConnectError};
use crate::link::{lock, Extras, Link, LinkConfig, Shared};

/// Bytes of datagrams queued for the socket before peers stop being pumped.
const TX_BUDGET: usize = 256 << 10;
/// Reads per readiness event before other work gets a turn. One read takes
/// a datagram or a coalesced (GRO) run of up to 64 KiB; the peers it reached
/// are serviced once after it (one ack, one hand-over to the application,
/// one timer update per peer), so a peer's inbound queue may overshoot its
/// bound by at most one read.
const RX_BATCH: usize = 64;
/// Receive buffer: datagrams are read into it and split off without copies.
const RX_BUF: usize = 512 << 10;
/// Room left in the receive buffer for one read: the largest datagram or
/// coalesced (GRO) run.
const RX_MAX: usize = 64 << 10;
/// Bytes of one segmentation-offload send (the kernel's limit is one IP
/// datagram, 64 KiB with headers).
const GSO_BYTES: usize = 60 << 10;
/// Socket buffers asked for (the kernel caps them at `rmem_max`/`wmem_max`):
/// a burst of a large congestion window must not overflow the receive
/// queue while the task is busy.
pub(crate) const SOCKET_BUFFER: usize = 4 << 20;
/// How long a link whose handles are all dropped keeps its state to finish
/// delivery (at most; it goes as soon as the stack has no timer).
const LINGER: Duration = Duration::from_secs(5);
/// How late the socket task's alarm may wake it for a due timer. With
/// traffic, a due timer fires earlier: at the first read after it is due.
/// Most timer entries fire early and find nothing due (see `service`): in
/// a request–response exchange each peer's delivery timer is filed at the
/// delayed-ack deadline of a request, and its reply takes the ack along.
/// Without the slack each such entry would wake an otherwise idle process
/// to find nothing to do; with it, the next request usually comes first.
const TIMER_SLACK: Duration = Duration::from_millis(2);

/// The transport's name: the first word of its stack specs.
pub const NAME: &str = "udp";

/// What the transport carries.
pub const PROFILE: TransportProfile = TransportProfile::datagrams(Some(65_507));

fn url(addr: SocketAddr) -> String {
    format!("udp://{addr}")
}

/// Settings of a UDP endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpConfig {
    /// Buffers of every link.
    pub link: LinkConfig,
    /// Peers (links) held at once. Default 1024. Memory per peer is its
    /// stack's bounds plus [`LinkConfig`]'s buffers.
    pub max_peers: usize,
    /// A peer that sent nothing for this long is dropped. Default 60 s.
    pub idle_timeout: Duration,
    /// New peers waiting for [`UdpEndpoint::accept`]; beyond, new peers are
    /// refused. Default 128.
    pub accept_backlog: usize,
}

impl Default for UdpConfig {
    fn default() -> Self {
        Self {
            link: LinkConfig::default(),
            max_peers: 1024,
            idle_timeout: Duration::from_secs(60),
            accept_backlog: 128,
        }
    }
}

/// Counters of a UDP endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UdpStats {
    /// Peers currently held.
    pub peers: usize,
    /// Peers created by an inbound datagram.
    pub accepted: u64,
    /// Datagrams from new sources refused because the peer table or the
    /// accept backlog was full.
    pub refused_peers: u64,
    /// Datagrams from new sources that the stack rejected (garbage): no
    /// peer state was created for them.
    pub rejected_datagrams: u64,
    /// Datagrams of known peers dropped before their stack because the
    /// peer's receive buffer was full.
    pub dropped_datagrams: u64,
    /// Peers dropped after [`UdpConfig::idle_timeout`].
    pub idle_timeouts: u64,
    /// Datagrams the socket refused to send (other than would-block).
    pub send_errors: u64,
}

#[derive(Default)]
struct Counters {
    peers: AtomicUsize,
    accepted: AtomicU64,
    refused_peers: AtomicU64,
    rejected_datagrams: AtomicU64,
    dropped_datagrams: AtomicU64,
    idle_timeouts: AtomicU64,
    send_errors: AtomicU64,
}

/// A pending `connect` and where to send its result.
type ConnectRequest = (SocketAddr, oneshot::Sender<Result<Link, ConnectError>>);

/// State shared by the endpoint handle, the links' senders and the task.
struct EpShared {
    ready: Mutex<Vec<u64>>,
    commands: Mutex<VecDeque<ConnectRequest>>,
    notify: Notify,
    /// Set after something is put in `ready` or `commands`: the task takes
    /// their locks only then, not on every turn (most turns are reads).
    queued: AtomicBool,
    closed: AtomicBool,
    counters: Counters,
    /// The task's socket, for senders' direct sends (`peer::sender_turn`).
    socket: UdpSocket,
    /// The task has no datagrams queued for the socket: a sender's direct
    /// send overtakes none. Cleared by the task while it holds the lock of
    /// the peer whose datagrams it queues.
    tx_idle: AtomicBool,
}

impl EpShared {
    fn wake(&self, peer: u64) {
        lock(&self.ready).push(peer);
        self.signal_queued();
    }

    /// Tells the task that `ready` or `commands` has something: the flag
    /// before the notification, so the woken task sees it.
    fn signal_queued(&self) {
        self.queued.store(true, Release);
        self.notify.notify_one();
    }
}

/// A UDP socket serving many peers, each a [`Link`] with its own stack.
/// Dropping the endpoint closes every link with
/// [`CloseReason::EndpointClosed`].
pub struct UdpEndpoint {
    shared: Arc<EpShared>,
    accept_rx: tokio::sync::Mutex<mpsc::Receiver<Link>>,
    local: SocketAddr,
}

impl std::fmt::Debug for UdpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpEndpoint")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl UdpEndpoint {
    /// Binds a UDP socket on `addr` serving links built from `spec` (a
    /// `udp / ...` spec), with default settings.
    ///
    /// # Errors
    ///
    /// [`BindError`] if the spec is not for UDP or the OS refuses the
    /// address.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the socket task is spawned).
    pub async fn bind(spec: &StackSpec, addr: SocketAddr) -> Result<Self, BindError> {
        Self::bind_with(spec, addr, UdpConfig::default()).await
    }

    /// As [`bind`](UdpEndpoint::bind), with `config`.
    ///
    /// # Errors
    ///
    /// As [`bind`](UdpEndpoint::bind).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub async fn bind_with(
        spec: &StackSpec,
        addr: SocketAddr,
        config: UdpConfig,
    ) -> Result<Self, BindError> {
        let spec = &BindError::fit(spec, NAME, PROFILE, || url(addr))?;
        let io_err = |source| BindError::Io {
            addr: url(addr),
            source,
        };
        let socket = EndpointSocket::bind(addr).map_err(io_err)?;
        let local = socket.get_ref().local_addr().map_err(io_err)?;
        // Enables GRO, and ancillary data that Plexus does not read and
        // turns off again.
        let state = UdpSocketState::new(socket.get_ref().into()).map_err(io_err)?;
        socket::skip_unused_ancillary_data(socket.get_ref());
        for result in [
            state.set_recv_buffer_size(socket.get_ref().into(), SOCKET_BUFFER),
            state.set_send_buffer_size(socket.get_ref().into(), SOCKET_BUFFER),
        ] {
            if let Err(error) = result {
                tracing::debug!(target: "plexus::transport", %error, "udp socket buffer size not set");
            }
        }
        let shared = Arc::new(EpShared {
            ready: Mutex::new(Vec::new()),
            commands: Mutex::new(VecDeque::new()),
            notify: Notify::new(),
            queued: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            counters: Counters::default(),
            socket: socket.get_ref().try_clone().map_err(io_err)?,
            tx_idle: AtomicBool::new(true),
        });
        let (accept_tx, accept_rx) = mpsc::channel(config.accept_backlog.max(1));
        let task = Dispatcher {
            socket,
            state,
            spec: spec.clone(),
            config,
            shared: shared.clone(),
            accept_tx,
            peers: FxHashMap::default(),
            by_addr: HashMap::new(),
            timers: BTreeSet::new(),
            tx: VecDeque::new(),
            tx_bytes: 0,
            deferred: Vec::new(),
            next_id: 0,
            scratch: BytesMut::with_capacity(64 << 10),
            touched: Vec::new(),
        };
        tokio::spawn(task.run());
        Ok(Self {
            shared,
            accept_rx: tokio::sync::Mutex::new(accept_rx),
            local,
        })
    }

    /// The bound address (with the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Counters.
    pub fn stats(&self) -> UdpStats {
        let c = &self.shared.counters;
        UdpStats {
            peers: c.peers.load(Relaxed),
            accepted: c.accepted.load(Relaxed),
            refused_peers: c.refused_peers.load(Relaxed),
            rejected_datagrams: c.rejected_datagrams.load(Relaxed),
            dropped_datagrams: c.dropped_datagrams.load(Relaxed),
            idle_timeouts: c.idle_timeouts.load(Relaxed),
            send_errors: c.send_errors.load(Relaxed),
        }
    }

    /// A link to `addr` served by this endpoint's socket. No datagram is
    /// sent until the link sends a message.
    ///
    /// # Errors
    ///
    /// [`ConnectError::PeerTableFull`], [`ConnectError::AlreadyConnected`]
    /// or [`ConnectError::EndpointClosed`].
    pub async fn connect(&self, addr: SocketAddr) -> Result<Link, ConnectError> {
        let (reply, rx) = oneshot::channel();
        lock(&self.shared.commands).push_back((addr, reply));
        self.shared.signal_queued();
        rx.await
            .unwrap_or_else(|_| Err(ConnectError::EndpointClosed { addr: url(addr) }))
    }

    /// The link of the next new peer: a source whose first datagram was
    /// accepted.
    ///
    /// # Errors
    ///
    /// [`AcceptError::Closed`] if the socket task ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn accept(&self) -> Result<Link, AcceptError> {
        self.accept_rx
            .lock()
            .await
            .recv()
            .await
            .ok_or_else(|| AcceptError::Closed {
                addr: url(self.local),
            })
    }
}

impl Drop for UdpEndpoint {
    fn drop(&mut self) {
        self.shared.closed.store(true, Relaxed);
        self.shared.notify.notify_one();
    }
}

struct Peer {
    state: Arc<PeerCell>,
    addr: SocketAddr,
    last_heard: Instant,
    /// Set once every handle is dropped: drop the state by then.
    linger_until: Option<Instant>,
    deferred: bool,
    /// Fed a datagram in the current receive batch; serviced after it.
    touched: bool,
}

impl Peer {
    /// When the task must next look at the peer: its idle timeout, its
    /// stack's deadline and its linger deadline, whichever comes first.
    fn deadline(&self, idle_timeout: Duration, stack_deadline: Option<Instant>) -> Instant {
        [stack_deadline, self.linger_until]
            .into_iter()
            .flatten()
            .fold(self.last_heard + idle_timeout, Instant::min)
    }
}

/// The socket task.
struct Dispatcher {
    socket: EndpointSocket,
    state: UdpSocketState,
    spec: StackSpec,
    config: UdpConfig,
    shared: Arc<EpShared>,
    accept_tx: mpsc::Sender<Link>,
    /// By the ids this task hands out (a fast hash; nobody else picks
    /// them).
    peers: FxHashMap<u64, Peer>,
    /// By source address: the network picks these, so the hash is the
    /// standard library's, which resists chosen collisions.
    by_addr: HashMap<SocketAddr, u64>,
    timers: BTreeSet<(Instant, u64)>,
    tx: VecDeque<(SocketAddr, Frame)>,
    tx_bytes: usize,
    /// Peers not pumped because the tx queue was over budget.
    deferred: Vec<u64>,
    next_id: u64,
    scratch: BytesMut,
    /// Peers fed in the current receive batch.
    touched: Vec<u64>,
}

impl Dispatcher {
    async fn run(mut self) {
        let mut rbuf = BytesMut::new();
        let mut ready = Vec::new();
        let mut alarm = Alarm::new();
        // Kept across turns, registered once: a new `Notified` per turn
        // would queue and unqueue a waiter in the `Notify` every time.
        let ep = self.shared.clone();
        let notified = ep.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        while !self.shared.closed.load(Relaxed) {
            if self.shared.queued.swap(false, Acquire) {
                let commands = std::mem::take(&mut *lock(&self.shared.commands));
                for (addr, reply) in commands {
                    // The caller may have given up; nothing to do then.
                    let _ = reply.send(self.connect(addr));
                }
                std::mem::swap(&mut *lock(&self.shared.ready), &mut ready);
                if !ready.is_empty() {
                    let t = now();
                    for id in ready.drain(..) {
                        if let Some(peer) = self.peers.get_mut(&id) {
                            lock(&peer.state).conn.refresh_inbox();
                            self.service(id, t);
                        }
                    }
                }
            }
            self.flush();
            if self.tx_bytes < TX_BUDGET && !self.deferred.is_empty() {
                let t = now();
                for id in std::mem::take(&mut self.deferred) {
                    if let Some(peer) = self.peers.get_mut(&id) {
                        peer.deferred = false;
                        self.service(id, t);
                    }
                }
                self.flush();
            }
            if let Some(&(d, _)) = self.timers.first() {
                // Only ever earlier: a ring before the first entry is due
                // finds nothing to fire and comes back here to arm again.
                alarm.arm_by(d + TIMER_SLACK);
            }
            tokio::select! {
                r = poll_fn(|cx| self.socket.poll_readable(cx)) => {
                    if let Err(error) = r {
                        tracing::warn!(target: "plexus::transport", %error, "udp socket failed");
                        break;
                    }
                    if let Some(t) = self.read(&mut rbuf) {
                        // Due timers fire now, while the task is awake
                        // anyway, instead of at the alarm's later ring.
                        if self.timers.first().is_some_and(|&(d, _)| d <= t) {
                            self.fire_timers();
                        }
                    }
                }
                r = self.socket.writable(), if !self.tx.is_empty() => {
                    if let Err(error) = r {
                        tracing::warn!(target: "plexus::transport", %error, "udp socket failed");
                        break;
                    }
                }
                () = &mut notified => {
                    notified.set(ep.notify.notified());
                    notified.as_mut().enable();
                }
                // Deferred peers with an idle socket: serve them next turn.
                () = tokio::task::yield_now(), if !self.deferred.is_empty() && self.tx.is_empty() => {}
                () = alarm.ring(), if alarm.is_armed() => self.fire_timers(),
            }
        }
        for (_, peer) in self.peers.drain() {
            lock(&peer.state).close(CloseReason::EndpointClosed);
        }
        self.shared.counters.peers.store(0, Relaxed);
    }

    /// Reads until the socket has no more datagrams (or a batch's worth),
    /// feeding each to its peer's stack. Returns the time of the last read
    /// that got datagrams, if any did.
    fn read(&mut self, rbuf: &mut BytesMut) -> Option<Instant> {
        let mut last = None;
        // Two entries, as two buffers are read into: a batch-sized array
        // would be 1.5 KiB of stack written on every read.
        let mut meta = [RecvMeta::default(); 2];
        for _ in 0..RX_BATCH {
            if rbuf.len() < 2 * RX_MAX {
                // Zeroed once: safe code cannot read into uninitialised
                // memory. Reads then fill it front to back and split off
                // what they got, so each byte is zeroed once.
                *rbuf = BytesMut::zeroed(RX_BUF);
            }
            // Two buffers per read, each room for a datagram or a coalesced
            // run of up to 64 KiB. Fewer than two datagrams read means the
            // socket had no more: its readiness is cleared then, instead of
            // by another read that would block (one system call less per
            // message of a request–response exchange).
            let received = self.socket.try_recv_until_drained(|socket| {
                let (first, second) = rbuf[..2 * RX_MAX].split_at_mut(RX_MAX);
                let mut bufs = [IoSliceMut::new(first), IoSliceMut::new(second)];
                let n = self.state.recv(socket.into(), &mut bufs, &mut meta)?;
                Ok((n, n < bufs.len()))
            });
            match received {
                Ok(n) => {
                    let t = now();
                    if n == 2 {
                        // Move the second datagram next to the first, so
                        // both are split off the front.
                        let (len, at) = (meta[1].len, RX_MAX - meta[0].len);
                        rbuf[meta[0].len..].copy_within(at..at + len, 0);
                    }
                    for m in &meta[..n] {
                        let mut run = rbuf.split_to(m.len).freeze();
                        // A coalesced run holds datagrams of `stride` bytes
                        // (the last may be shorter).
                        let stride = if m.stride == 0 { m.len } else { m.stride };
                        while !run.is_empty() {
                            let datagram = run.split_to(stride.min(run.len()));
                            self.on_datagram(m.addr, datagram, t);
                        }
                    }
                    // Before the next read: a lone datagram (a round trip
                    // waiting on it) is answered without another system
                    // call first; a coalesced run still gets one service.
                    self.service_touched(t);
                    last = Some(t);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    // ICMP errors of earlier sends surface here (Linux
                    // reports connection refused); they concern one peer.
                    tracing::debug!(target: "plexus::transport", %error, "udp receive error");
                }
            }
        }
        last
    }

    /// Services every peer fed since the last call, once each.
    fn service_touched(&mut self, t: Instant) {
        let mut touched = std::mem::take(&mut self.touched);
        for &id in &touched {
            if let Some(peer) = self.peers.get_mut(&id) {
                peer.touched = false;
                self.service(id, t);
            }
        }
        // The list goes back for its allocation (a round trip would
        // otherwise allocate it anew for its one peer), unless servicing
        // touched a peer again.
        touched.clear();
        if self.touched.is_empty() {
            self.touched = touched;
        }
    }

    fn on_datagram(&mut self, src: SocketAddr, datagram: Bytes, t: Instant) {
        let Some(&id) = self.by_addr.get(&src) else {
            self.on_new_peer(src, datagram, t);
            return;
        };
        // The id is in by_addr, so it is in peers.
        let Some(peer) = self.peers.get_mut(&id) else {
            return;
        };
        let mut st = lock(&peer.state);
        if st.conn.inbox_full {
            self.shared.counters.dropped_datagrams.fetch_add(1, Relaxed);
            return;
        }
        peer.last_heard = t;
        // An error closes the stack; service() (after the batch) removes
        // the peer.
        let _ = st.conn.stack.handle_receive(t, datagram);
        drop(st);
        if !peer.touched {
            peer.touched = true;
            self.touched.push(id);
        }
    }

    fn on_new_peer(&mut self, src: SocketAddr, datagram: Bytes, t: Instant) {
        let ep = self.shared.clone();
        let counters = &ep.counters;
        if self.peers.len() >= self.config.max_peers {
            counters.refused_peers.fetch_add(1, Relaxed);
            tracing::debug!(target: "plexus::transport", %src, max = self.config.max_peers, "peer table full; datagram refused");
            return;
        }
        let Ok(permit) = self.accept_tx.clone().try_reserve_owned() else {
            counters.refused_peers.fetch_add(1, Relaxed);
            tracing::debug!(target: "plexus::transport", %src, "accept backlog full; datagram refused");
            return;
        };
        let mut stack = self.spec.build_link(LinkContext {
            now: t,
            link_id: self.next_id,
        });
        let accepted = stack.handle_receive(t, datagram).is_ok() && stack.stats().dropped == 0;
        if !accepted {
            counters.rejected_datagrams.fetch_add(1, Relaxed);
            tracing::trace!(target: "plexus::transport", %src, "garbage from a new source; no peer created");
            return;
        }
        let (id, link) = self.insert(src, stack, t);
        counters.accepted.fetch_add(1, Relaxed);
        permit.send(link);
        self.service(id, t);
    }

    fn connect(&mut self, addr: SocketAddr) -> Result<Link, ConnectError> {
        if let Some(&id) = self.by_addr.get(&addr) {
            let abandoned = self.peers.get(&id).is_some_and(|p| {
                let st = lock(&p.state);
                st.conn.send_done() && !st.conn.receiver_alive()
            });
            if !abandoned {
                return Err(ConnectError::AlreadyConnected { addr: url(addr) });
            }
            // The application let go of that link (e.g. its peer died); a
            // new connect replaces whatever of it still lingers.
            self.remove(id, CloseReason::Local);
        }
        if self.peers.len() >= self.config.max_peers {
            return Err(ConnectError::PeerTableFull {
                addr: url(addr),
                max: self.config.max_peers,
            });
        }
        let t = now();
        let stack = self.spec.build_link(LinkContext {
            now: t,
            link_id: self.next_id,
        });
        let (id, link) = self.insert(addr, stack, t);
        self.service(id, t);
        Ok(link)
    }

    fn insert(&mut self, addr: SocketAddr, stack: plexus_net::Stack, t: Instant) -> (u64, Link) {
        let id = self.next_id;
        self.next_id += 1;
        let mut link = None;
        let state = Arc::new_cyclic(|cell: &Weak<PeerCell>| {
            let (ep, cell) = (Arc::downgrade(&self.shared), cell.clone());
            let turn = Box::new(move || match (ep.upgrade(), cell.upgrade()) {
                (Some(ep), Some(cell)) => sender_turn(&ep, &cell, addr),
                // Gone: so is the task, and waking it does nothing.
                _ => false,
            });
            let ep = Arc::downgrade(&self.shared);
            let shared = Shared::with_extras(
                url(addr).into(),
                stack.max_message_len(),
                self.config.link,
                Box::new(move || {
                    if let Some(ep) = ep.upgrade() {
                        ep.wake(id);
                    }
                }),
                Extras {
                    sender_turn: Some(turn),
                    ..Extras::default()
                },
            );
            link = Some(Link::new(shared.clone()));
            Mutex::new(PeerState::new(Conn::new(stack, shared)))
        });
        let link = link.expect("new_cyclic ran the constructor");
        self.peers.insert(
            id,
            Peer {
                state,
                addr,
                last_heard: t,
                linger_until: None,
                deferred: false,
                touched: false,
            },
        );
        self.by_addr.insert(addr, id);
        self.shared.counters.peers.store(self.peers.len(), Relaxed);
        (id, link)
    }

    /// Runs one peer's outputs after any input: pump its messages into the
    /// stack, queue its datagrams, deliver, and re-arm its timer.
    fn service(&mut self, id: u64, t: Instant) {
        let Some(peer) = self.peers.get_mut(&id) else {
            return;
        };
        let mut guard = lock(&peer.state);
        let st = &mut *guard;
        st.task_woken = false;
        let budget = TX_BUDGET.saturating_sub(self.tx_bytes);
        let more = st.conn.pump(t, budget);
        // What a sender's direct send could not send goes first.
        let spilled = st.spill.drain(..);
        let produced = std::iter::from_fn(|| st.conn.stack.poll_transmit());
        for frame in spilled.chain(produced) {
            self.tx_bytes += frame.len();
            self.tx.push_back((peer.addr, frame));
        }
        if !self.tx.is_empty() {
            self.shared.tx_idle.store(false, Relaxed);
        }
        let delivered = st.conn.deliver();
        // A request handed over, nothing left to send: the reply may leave
        // from its sender (`peer::sender_turn`).
        st.send_window = delivered && !more;
        if (more || self.tx_bytes >= TX_BUDGET) && !peer.deferred {
            peer.deferred = true;
            self.deferred.push(id);
        }
        if let Some(reason) = st.conn.stack.close_reason() {
            let reason = reason.clone().into();
            drop(guard);
            self.remove(id, reason);
            return;
        }
        let idle = st.conn.send_done() && !st.conn.receiver_alive();
        if idle && peer.linger_until.is_none() {
            peer.linger_until = Some(t + LINGER.min(self.config.idle_timeout));
        }
        let stack_deadline = st.conn.stack.poll_timeout();
        if peer.linger_until.is_some() && stack_deadline.is_none() {
            drop(guard);
            self.remove(id, CloseReason::Local);
            return;
        }
        let deadline = peer.deadline(self.config.idle_timeout, stack_deadline);
        // The entry only ever moves earlier. A later deadline (every
        // message moves the delivery and heartbeat timers on) leaves it
        // where it is: it fires early (at a read, mostly: `TIMER_SLACK`),
        // and the service it runs finds nothing due and files the peer
        // again. One early firing per deadline instead of two timer-set
        // updates per message.
        if st.timer.is_none_or(|armed| deadline < armed) {
            if let Some(old) = st.timer.replace(deadline) {
                self.timers.remove(&(old, id));
            }
            self.timers.insert((deadline, id));
        }
    }

    fn fire_timers(&mut self) {
        let t = now();
        while let Some(&(deadline, id)) = self.timers.first() {
            if deadline > t {
                break;
            }
            self.timers.pop_first();
            let Some(peer) = self.peers.get_mut(&id) else {
                continue;
            };
            let mut st = lock(&peer.state);
            st.timer = None;
            if t >= peer.last_heard + self.config.idle_timeout {
                drop(st);
                self.shared.counters.idle_timeouts.fetch_add(1, Relaxed);
                let reason = CloseReason::IdleTimeout(self.config.idle_timeout);
                self.remove(id, reason);
                continue;
            }
            if peer.linger_until.is_some_and(|l| t >= l) {
                drop(st);
                self.remove(id, CloseReason::Local);
                continue;
            }
            // Filed early (an entry only moves earlier, see `service`) and
            // nothing of the stack is due yet: filed again at the stack's
            // deadline, without a turn of the stack. Most firings are
            // these.
            if peer.linger_until.is_none() {
                if let Some(d) = st.conn.stack.poll_timeout().filter(|&d| d > t) {
                    let deadline = peer.deadline(self.config.idle_timeout, Some(d));
                    st.timer = Some(deadline);
                    self.timers.insert((deadline, id));
                    continue;
                }
            }
            let _ = st.conn.stack.handle_timeout(t);
            drop(st);
            self.service(id, t);
        }
    }

    fn remove(&mut self, id: u64, reason: CloseReason) {
        if let Some(peer) = self.peers.remove(&id) {
            self.by_addr.remove(&peer.addr);
            let mut st = lock(&peer.state);
            if let Some(t) = st.timer {
                self.timers.remove(&(t, id));
            }
            st.close(reason);
            self.shared.counters.peers.store(self.peers.len(), Relaxed);
        }
    }

    /// Sends queued datagrams until the socket would block: each run of
    /// datagrams to one peer with equal sizes (the last may be shorter) in
    /// one segmentation-offload call.
    fn flush(&mut self) {
        while let Some((addr, first)) = self.tx.front() {
            let (addr, segment) = (*addr, first.len());
            let max = self.state.max_gso_segments();
            let mut n = 0;
            let mut bytes = 0;
            for (to, frame) in &self.tx {
                let len = frame.len();
                if n == max || *to != addr || len > segment || bytes + len > GSO_BYTES {
                    break;
                }
                n += 1;
                bytes += len;
                if len < segment {
                    break;
                }
            }
            let n = n.max(1);
            let contents: &[u8] = if n == 1 {
                contiguous(first, &mut self.scratch)
            } else {
                self.scratch.clear();
                for (_, frame) in self.tx.iter().take(n) {
                    frame.extend_into(&mut self.scratch);
                }
                &self.scratch
            };
            let sent = if n == 1 {
                // A lone datagram: plain sendto, without the control
                // messages quinn-udp's sendmsg carries.
                self.socket
                    .try_send(|socket| socket.send_to(contents, addr))
                    .map(drop)
            } else {
                let transmit = Transmit {
                    destination: addr,
                    ecn: None,
                    contents,
                    segment_size: Some(segment),
                    src_ip: None,
                };
                let state = &self.state;
                self.socket
                    .try_send(|socket| state.try_send(socket.into(), &transmit))
            };
            match sent {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) if n > 1 && self.state.max_gso_segments() == 1 => {
                    // The kernel refused offload and quinn-udp turned it
                    // off: send the run again, one datagram at a time.
                    continue;
                }
                Err(error) => {
                    self.shared
                        .counters
                        .send_errors
                        .fetch_add(n as u64, Relaxed);
                    tracing::debug!(target: "plexus::transport", %addr, %error, n, "udp send failed; datagrams dropped");
                }
            }
            for _ in 0..n {
                if let Some((_, frame)) = self.tx.pop_front() {
                    self.tx_bytes -= frame.len();
                }
            }
        }
        // Everything queued is with the kernel: senders' direct sends come
        // after it.
        self.shared.tx_idle.store(true, Release);
        // Back to the front of its buffer (see `plexus_net`'s queues
        // between layers): one datagram at a time reuses one slot.
        self.tx.clear();
    }
}
