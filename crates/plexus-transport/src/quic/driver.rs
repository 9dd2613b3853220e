//! The driver of one QUIC link: a task that runs each strand's stack
//! ([`strand_stack`](super::strand_stack)) on the queued messages and hands
//! what it transmits to one writer task per strand, accepts the peer's
//! strand streams (one reader task each, feeding the strand's stack), fires
//! the stacks' timers, reads datagrams, and runs the graceful close (see
//! the [module docs](super)).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::FutureExt;
use plexus_net::{Frame, StackSpec};
use quinn::{Connection, ConnectionError, RecvStream, SendDatagramError, VarInt};
use rustls_pki_types::CertificateDer;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use super::strand_stack::{StrandStacks, StrandWire, COPY_MAX, LEN};
use super::{code, QuicConfig, QuicError};
use crate::conn::now;
use crate::error::{CloseReason, UnreliableError};
use crate::link::{
    lock, Extras, Link, OutQueue, PeerIdentity, Received, Shared, Strand, UnreliableSink,
};
/// A batch holding a message at least this long is sent at a lower
/// priority than other strands: small messages on other strands go first
/// instead of sharing the connection round-robin with it.
const BULK: usize = 256 << 10;
/// Bytes asked of quinn per read.
const READ_CHUNK: usize = 64 << 10;
/// The most messages handed to a strand's stack in one run (as
/// `Conn::pump`'s runs).
const RUN_MAX: usize = 64;
/// Bytes of a read handed to a strand's stack at once.
const RECEIVE_PIECE: usize = 8 << 10;
/// Strand byte of a reader that has not read it yet (for errors).
const NO_STRAND: u8 = u8::MAX;
/// First byte of the stream that says "I have read everything you sent":
/// it carries nothing else.
pub(super) const READ_ALL: u8 = 0x80;
/// Streams a peer may open in a connection's life: one per strand and the
/// read-all one.
pub(super) const MAX_STREAMS: usize = Strand::COUNT + 1;

/// Starts the driver of an established connection and returns its link;
/// the peer's `identity` comes from [`peer_identity`], its strands' stacks
/// from `spec` (fit to the transport).
pub(crate) fn spawn(
    conn: Connection,
    config: &QuicConfig,
    spec: &StackSpec,
    peer: Arc<str>,
    identity: PeerIdentity,
) -> Link {
    let notify = Arc::new(Notify::new());
    let room = Arc::new(Notify::new());
    let wake = (notify.clone(), room.clone());
    // Framing's length prefix is a u32.
    let max_frame = config.max_message_len.min(u32::MAX as usize);
    let stacks = Arc::new(StrandStacks::new(
        spec,
        max_frame,
        conn.stable_id() as u64,
        config.link.send_buffer,
        now(),
    ));
    let max_message_len = stacks.max_message_len();
    let handoff = Arc::new(Handoff::new(stacks.clone()));
    let turn = handoff.clone();
    let extras = Extras {
        unreliable: Some(Box::new(Datagrams(conn.clone()))),
        sender_turn: Some(Box::new(move || turn.sender_turn())),
        // The strands' stacks take frames, a strand's run at a time.
        frames_only: true,
        ..Extras::default()
    };
    let shared = Shared::with_extras(
        peer,
        Some(max_message_len),
        config.link,
        Box::new(move || {
            wake.0.notify_one();
            wake.1.notify_waiters();
        }),
        extras,
    );
    // Set once, right here: the link's handles cannot send before.
    let _ = handoff.shared.set(Arc::downgrade(&shared));
    let link = Link::new(shared.clone()).with_identity(identity);
    let strands = Arc::new(Strands {
        shared: shared.clone(),
        room,
        driver: notify.clone(),
        max_message_len,
        stacks,
        active: AtomicU64::new(0),
        seen: Mutex::new(StrandsSeen::default()),
        partial: AtomicUsize::new(0),
        partial_max: reassembly_budget(max_frame),
        bulk: tokio::sync::Mutex::new(()),
        handoff: handoff.clone(),
    });
    let driver = Driver {
        conn,
        shared,
        strands,
        handoff,
        running: 0,
        opened: 0,
        deadline: None,
        run: VecDeque::new(),
        events: VecDeque::new(),
        writer_tasks: JoinSet::new(),
        readers: JoinSet::new(),
        accepted: 0,
        sending: Sending::Open,
        peer_done: false,
        inbound_ended: false,
        peer_read_all: false,
    };
    tokio::spawn(driver.drive(notify));
    link
}

/// The peer's end-entity certificate (verified by rustls against the CA
/// roots during the handshake). Without one (the handshake's verification
/// already excludes it) the connection is closed: a link without an
/// identity would let the peer claim to be anyone.
pub(crate) fn peer_identity(conn: &Connection) -> Result<PeerIdentity, String> {
    let identity = conn
        .peer_identity()
        .and_then(|i| i.downcast::<Vec<CertificateDer<'static>>>().ok())
        .and_then(|chain| chain.into_iter().next())
        .map(|certificate| PeerIdentity { certificate })
        .ok_or_else(|| "the peer presented no certificate".to_owned());
    if identity.is_err() {
        conn.close(VarInt::from_u32(code::PROTOCOL), b"no certified identity");
    }
    identity
}

struct Datagrams(Connection);

impl UnreliableSink for Datagrams {
    fn send(&self, peer: &Arc<str>, message: Bytes) -> Result<(), UnreliableError> {
        // The clone shares the buffer; it is handed back on error.
        match self.0.send_datagram(message.clone()) {
            Ok(()) => Ok(()),
            Err(SendDatagramError::UnsupportedByPeer | SendDatagramError::Disabled) => {
                Err(UnreliableError::UnsupportedByPeer {
                    peer: peer.clone(),
                    message,
                })
            }
            Err(SendDatagramError::TooLarge) => Err(UnreliableError::TooLarge {
                peer: peer.clone(),
                max: self.0.max_datagram_size().unwrap_or(0),
                message,
            }),
            Err(SendDatagramError::ConnectionLost(_)) => Err(UnreliableError::Closed {
                peer: peer.clone(),
                message,
            }),
        }
    }
}

/// Where the send direction is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    /// Messages are taken from the queue.
    Open,
    /// The application is done: strands other than 0 are finishing.
    Finishing,
    /// Strands other than 0 are acknowledged; strand 0 is finishing.
    FinishingStrandZero,
    /// Every stream is finished and acknowledged.
    Done,
}

/// Bytes of partly received messages one connection may hold, all strands
/// together: two messages of the maximum length (one finishing while the
/// next starts: our writers send one bulk message at a time) and a small
/// one on every strand. A peer that needs more is closed
/// ([`QuicError::TooMuchPartial`]).
pub(super) fn reassembly_budget(max_frame: usize) -> usize {
    2 * (max_frame + LEN) + Strand::COUNT * (BULK + READ_CHUNK)
}

/// What the strand readers and writers of one connection share.
struct Strands {
    shared: Arc<Shared>,
    /// Woken when the receiver makes room in the inbound queue.
    room: Arc<Notify>,
    /// Wakes the driver (a reader left it work: bytes for a writer not
    /// open yet, a timer, held messages to retry).
    driver: Arc<Notify>,
    max_message_len: usize,
    /// Each strand's stack.
    stacks: Arc<StrandStacks>,
    /// Strands whose stack has been used (bit per strand): the driver
    /// serves their timers.
    active: AtomicU64,
    /// Streams the peer opened.
    seen: Mutex<StrandsSeen>,
    /// Bytes of partly received messages, all readers together (counted
    /// at their announced length once the header is in).
    partial: AtomicUsize,
    partial_max: usize,
    /// Held by the writer sending a bulk message: one at a time, so the
    /// peer never needs to hold many partial large messages.
    bulk: tokio::sync::Mutex<()>,
    /// The senders' way to the strand writers.
    handoff: Arc<Handoff>,
}

struct Driver {
    conn: Connection,
    shared: Arc<Shared>,
    strands: Arc<Strands>,
    handoff: Arc<Handoff>,
    /// Strands whose writer task runs (bit per strand).
    running: u64,
    /// Strands whose writer was opened (bit per strand).
    opened: u64,
    /// The earliest timer of the strands' stacks.
    deadline: Option<Instant>,
    /// A run of one strand's messages, cut from the batch.
    run: VecDeque<Frame>,
    /// Events of the stacks for the application.
    events: VecDeque<Received>,
    /// Writer tasks: `Ok(strand)` once their stream is finished and
    /// acknowledged.
    writer_tasks: JoinSet<Result<u8, QuicError>>,
    /// Reader tasks: `Ok(strand)` at the end of their stream.
    readers: JoinSet<Result<u8, QuicError>>,
    accepted: usize,
    sending: Sending,
    /// The peer finished strand 0: no more strand streams will come.
    peer_done: bool,
    /// Every stream of the peer was read to its end.
    inbound_ended: bool,
    /// The peer read everything we sent (its read-all stream came).
    peer_read_all: bool,
}

/// The streams a peer opened so far.
#[derive(Default)]
struct StrandsSeen {
    strands: u64,
    read_all: bool,
}

impl Driver {
    async fn drive(mut self, notify: Arc<Notify>) {
        let reason = self.run(&notify).await;
        let (code, text) = match &reason {
            CloseReason::PeerClosed | CloseReason::Local => (code::DONE, "done".to_owned()),
            CloseReason::Quic(e) if e.is_protocol() => (code::PROTOCOL, e.to_string()),
            other => (code::LOCAL, other.to_string()),
        };
        if let CloseReason::Quic(error) = &reason {
            if error.is_protocol() {
                tracing::warn!(target: "plexus::transport", peer = %self.shared.peer, %error, "quic peer broke the strand protocol; connection closed");
            }
        }
        // Readers stop before the close is reported: nothing is queued
        // after the reason.
        self.readers.abort_all();
        self.writer_tasks.abort_all();
        for i in 0..Strand::COUNT {
            self.strands.stacks.lock(strand(i)).finish();
        }
        let text = &text.as_bytes()[..text.len().min(256)];
        self.conn.close(VarInt::from_u32(code), text);
        tracing::debug!(target: "plexus::transport", peer = %self.shared.peer, %reason, "link closed");
        self.shared.close(reason);
    }

    async fn run(&mut self, notify: &Notify) -> CloseReason {
        let conn = self.conn.clone();
        let closed = conn.closed();
        tokio::pin!(closed);
        let mut batch = OutQueue::with_capacity(256);
        let sleep = tokio::time::sleep_until(tokio::time::Instant::now());
        tokio::pin!(sleep);
        loop {
            if self.sending == Sending::Open {
                self.pump(&mut batch, notify);
            }
            if let Err(reason) = self.service() {
                return reason;
            }
            if let Some(deadline) = self.deadline {
                sleep.as_mut().reset(deadline.into());
            }
            // Both directions were sent and read: closing loses nothing.
            if self.inbound_ended && self.sending == Sending::Done && self.peer_read_all {
                return CloseReason::PeerClosed;
            }
            // Nobody will read what else comes, and the peer has read all
            // we sent.
            if self.sending == Sending::Done
                && self.peer_read_all
                && !lock(&self.shared.inb).receiver_alive
            {
                return CloseReason::Local;
            }
            let datagrams = !self.inbound_ended;
            let accepting = !self.peer_done || !self.peer_read_all;
            tokio::select! {
                () = notify.notified() => {}
                () = &mut sleep, if self.deadline.is_some() => {}
                e = &mut closed => return connection_reason(e),
                s = conn.accept_uni(), if accepting => match s {
                    Ok(stream) => {
                        if let Err(e) = self.on_stream(stream) {
                            return e;
                        }
                    }
                    Err(e) => return connection_reason(e),
                },
                d = conn.read_datagram(), if datagrams => match d {
                    Ok(d) => self.on_datagram(d),
                    Err(e) => return connection_reason(e),
                },
                Some(r) = self.readers.join_next() => match r {
                    Ok(Ok(strand)) => {
                        match strand {
                            0 => self.peer_done = true,
                            READ_ALL => self.peer_read_all = true,
                            _ => {}
                        }
                        if let Err(e) = self.check_inbound_end() {
                            return e;
                        }
                    }
                    Ok(Err(e)) => return quic_reason(e),
                    // Panics cannot happen in readers; aborts only here.
                    Err(_) => return CloseReason::Local,
                },
                Some(r) = self.writer_tasks.join_next() => match r {
                    Ok(Ok(strand)) => {
                        self.running &= !(1 << strand);
                        self.on_writer_done();
                    }
                    Ok(Err(e)) => return quic_reason(e),
                    Err(_) => return CloseReason::Local,
                },
            }
        }
    }

    /// Hands queued messages to their strands' stacks (whose bytes go to
    /// the strands' writers); starts the close once the application is
    /// done sending and no stack holds messages back.
    fn pump(&mut self, batch: &mut OutQueue, notify: &Notify) {
        let mut rounds = 0;
        let done = loop {
            {
                let mut out = lock(&self.shared.out);
                std::mem::swap(&mut out.queue, batch);
                if batch.is_empty() {
                    // The next push wakes us, or its sender hands its
                    // message to the strand's stack itself meanwhile.
                    out.driver_waiting = true;
                    let done = (out.senders == 0 || out.close_requested) && !self.holding();
                    let mut handoff = lock(&self.handoff.state);
                    if done {
                        // The writers' queues must close for the strands to
                        // finish: no sender may reach them any more.
                        handoff.open = false;
                    }
                    // Everything taken is with the stacks: the next
                    // message may enter its stack straight away.
                    handoff.window = handoff.open;
                    break done;
                }
            }
            let now = now();
            let strands = self.strands.clone();
            while let Some(strand) = front_strand(batch) {
                // The run of this strand's messages at the batch's front,
                // at most RUN_MAX: the stack's passes over it stay in the
                // cache (a batch may be thousands deep).
                while self.run.len() < RUN_MAX && front_strand(batch) == Some(strand) {
                    let Some((_, message)) = batch.pop_front() else {
                        break;
                    };
                    self.run.push_back(message);
                }
                let mut state = strands.stacks.lock(strand);
                if !state.has_writer() {
                    let writer = self.open_strand(strand);
                    state.set_writer(writer);
                }
                state.send_run(now, &mut self.run);
            }
            rounds += 1;
            if rounds == 16 {
                // A sender that never pauses: serve the other arms, and
                // come back (no push would wake us).
                notify.notify_one();
                return;
            }
        };
        if done {
            self.sending = Sending::Finishing;
            // Strand 0 goes last: its end tells the peer everything is in.
            for i in 1..Strand::COUNT {
                self.strands.stacks.lock(strand(i)).finish();
            }
            self.on_writer_done();
        }
    }

    /// Whether a strand's stack holds messages back for want of room.
    fn holding(&self) -> bool {
        let active = self.strands.active.load(Ordering::Acquire);
        (0..Strand::COUNT)
            .filter(|i| active & (1 << i) != 0)
            .any(|i| self.strands.stacks.lock(strand(i)).holds())
    }

    /// Serves the used strands' stacks: fires due timers, retries held
    /// messages, opens the writer of a strand with bytes for one, hands the
    /// stacks' events to the application; sets the next deadline.
    fn service(&mut self) -> Result<(), CloseReason> {
        let active = self.strands.active.load(Ordering::Acquire);
        if active == 0 {
            return Ok(());
        }
        let now = now();
        let mut deadline: Option<Instant> = None;
        let strands = self.strands.clone();
        for i in (0..Strand::COUNT).filter(|i| active & (1 << i) != 0) {
            let mut state = strands.stacks.lock(strand(i));
            state
                .service(now, &mut self.events)
                .map_err(|source| stack_reason(i, source))?;
            if state.waits_for_writer() && self.sending == Sending::Open {
                let writer = self.open_strand(strand(i));
                state.set_writer(writer);
            }
            if let Some(t) = state.poll_timeout() {
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
        }
        self.deadline = deadline;
        if !self.events.is_empty() {
            push(&self.strands, &mut self.events);
        }
        Ok(())
    }

    fn open_strand(&mut self, strand: Strand) -> mpsc::UnboundedSender<StrandWire> {
        let bit = 1 << strand.index();
        self.running |= bit;
        self.opened |= bit;
        self.strands.active.fetch_or(bit, Ordering::Release);
        let (tx, rx) = mpsc::unbounded_channel();
        self.writer_tasks.spawn(write_strand(
            self.conn.clone(),
            strand,
            rx,
            self.strands.clone(),
        ));
        tx
    }

    /// A writer finished: move the close along.
    fn on_writer_done(&mut self) {
        match self.sending {
            Sending::Finishing if self.running & !1 == 0 => {
                self.sending = Sending::FinishingStrandZero;
                let strands = self.strands.clone();
                let mut zero = strands.stacks.lock(Strand::ZERO);
                if self.opened & 1 == 0 {
                    // Opened just to be finished: its end tells the peer
                    // everything is in.
                    let writer = self.open_strand(Strand::ZERO);
                    zero.set_writer(writer);
                }
                zero.finish();
                drop(zero);
                if self.running == 0 {
                    self.sending = Sending::Done;
                }
            }
            Sending::FinishingStrandZero if self.running == 0 => {
                self.sending = Sending::Done;
            }
            _ => {}
        }
    }

    fn on_stream(&mut self, stream: RecvStream) -> Result<(), CloseReason> {
        self.accepted += 1;
        if self.accepted > MAX_STREAMS {
            return Err(quic_reason(QuicError::TooManyStreams {
                opened: self.accepted,
                max: MAX_STREAMS,
            }));
        }
        self.readers
            .spawn(read_strand(stream, self.strands.clone()));
        Ok(())
    }

    fn on_datagram(&mut self, datagram: Bytes) {
        if datagram.len() > self.strands.max_message_len {
            return;
        }
        if inbox_full(&self.shared) {
            tracing::trace!(target: "plexus::transport", peer = %self.shared.peer, "receive buffer full; datagram dropped");
            return;
        }
        push(
            &self.strands,
            &mut VecDeque::from([Received::Message(datagram)]),
        );
    }

    /// After the peer finished strand 0: once the streams it opened before
    /// (all acknowledged, so all here) are read to their end, the inbound
    /// direction is over.
    fn check_inbound_end(&mut self) -> Result<(), CloseReason> {
        if !self.peer_done || self.inbound_ended {
            return Ok(());
        }
        while let Some(r) = self.conn.accept_uni().now_or_never() {
            match r {
                Ok(stream) => self.on_stream(stream)?,
                Err(e) => return Err(connection_reason(e)),
            }
        }
        // The peer's read-all stream may be among the readers: it ends
        // right away.
        if self.readers.is_empty() {
            self.inbound_ended = true;
            self.shared.close_inbound(CloseReason::PeerClosed);
            // Tell the peer; it closes the connection only after this (or
            // we do, after its own).
            let conn = self.conn.clone();
            tokio::spawn(async move {
                if let Ok(mut stream) = conn.open_uni().await {
                    let _ = stream.write_all(&[READ_ALL]).await;
                    let _ = stream.finish();
                    let _ = stream.stopped().await;
                }
            });
        }
        Ok(())
    }
}

/// The strand of the batch's first message.
fn front_strand(batch: &OutQueue) -> Option<Strand> {
    batch.strands().next()
}

/// Strand `i` (below [`Strand::COUNT`]).
fn strand(i: usize) -> Strand {
    Strand::new(i as u8).expect("a strand index")
}

/// Why a strand's stack closed the link.
fn stack_reason(strand: usize, source: plexus_net::LinkError) -> CloseReason {
    quic_reason(QuicError::Stack {
        strand: strand as u8,
        source,
    })
}

fn quic_reason(e: QuicError) -> CloseReason {
    match e {
        QuicError::Connection(c) => connection_reason(c),
        QuicError::Read {
            source: quinn::ReadError::ConnectionLost(c),
            ..
        }
        | QuicError::Write {
            source: quinn::WriteError::ConnectionLost(c),
            ..
        } => connection_reason(c),
        e => CloseReason::Quic(Arc::new(e)),
    }
}

fn connection_reason(e: ConnectionError) -> CloseReason {
    match &e {
        ConnectionError::ApplicationClosed(c) if c.error_code == VarInt::from_u32(code::DONE) => {
            CloseReason::PeerClosed
        }
        ConnectionError::LocallyClosed => CloseReason::Local,
        _ => CloseReason::Quic(Arc::new(QuicError::Connection(e))),
    }
}

/// The senders' way to the strands' stacks: once the driver, with nothing
/// left to take, opens the window, the next sender whose message the
/// driver waits for runs its strand's stack itself
/// ([`sender_turn`](Handoff::sender_turn)), whose bytes go to the strand's
/// writer, instead of waking the driver to do that: one task wake-up less
/// per message of a request–response exchange. Everything queued before is
/// with the stacks already, so the strand keeps its order. One turn per
/// window: the messages after it wait for the driver and go to the stacks
/// together.
pub(crate) struct Handoff {
    /// The link's shared state (set once the link exists).
    shared: OnceLock<Weak<Shared>>,
    stacks: Arc<StrandStacks>,
    state: Mutex<HandoffState>,
}

struct HandoffState {
    /// Sending goes on: `false` once the strands are finishing.
    open: bool,
    /// Open: the next sender may take the driver's turn.
    window: bool,
}

impl Handoff {
    fn new(stacks: Arc<StrandStacks>) -> Self {
        Self {
            shared: OnceLock::new(),
            stacks,
            state: Mutex::new(HandoffState {
                open: true,
                window: false,
            }),
        }
    }

    /// A sender's turn (see [`Handoff`]): returns whether it left nothing
    /// for the driver.
    fn sender_turn(&self) -> bool {
        let Some(shared) = self.shared.get().and_then(Weak::upgrade) else {
            return false;
        };
        // The queue's lock first, then the window's, then a strand's: the
        // driver takes them in that order too.
        let mut out = lock(&shared.out);
        let mut state = lock(&self.state);
        if !std::mem::take(&mut state.window) || !state.open || out.close_requested {
            return false;
        }
        if !out
            .queue
            .strands()
            .all(|strand| self.stacks.lock(strand).has_writer())
        {
            // A strand to open: the driver's work.
            return false;
        }
        let now = crate::conn::now();
        let mut left = false;
        while let Some((strand, message)) = out.queue.pop_front() {
            let mut stack = self.stacks.lock(strand);
            stack.send(now, message);
            // A timer to arm or messages held back: the driver's work.
            left |= stack.poll_timeout().is_some() || stack.holds();
        }
        if left {
            return false;
        }
        // Nobody is on the way to the queue: the next push needs a turn.
        out.driver_waiting = true;
        true
    }

    /// Something arrived while the driver has nothing to hand the stacks:
    /// the reply to it may go to its stack straight away (as a
    /// byte-stream link's driver opens the window after a turn that
    /// received). A waiting driver left nothing queued.
    fn on_received(&self, shared: &Shared) {
        let waiting = {
            let out = lock(&shared.out);
            out.driver_waiting && !out.close_requested
        };
        if waiting {
            let mut state = lock(&self.state);
            state.window = state.open;
        }
    }
}

/// One strand's writer: opens the stream, writes the strand byte, then the
/// queued wire bytes in batches; returns permits to the link's send buffer
/// as quinn takes the bytes. Once the queue is closed and drained,
/// finishes the stream and waits until the peer acknowledged it.
async fn write_strand(
    conn: Connection,
    strand: Strand,
    mut rx: mpsc::UnboundedReceiver<StrandWire>,
    strands: Arc<Strands>,
) -> Result<u8, QuicError> {
    let shared = &strands.shared;
    let l = strand.index();
    let write_err = |source| QuicError::Write { strand: l, source };
    let mut stream = conn.open_uni().await.map_err(QuicError::Connection)?;
    let mut staging = BytesMut::with_capacity(16 << 10);
    staging.put_u8(l);
    let mut chunks: Vec<Bytes> = Vec::with_capacity(64);
    let mut batches = Vec::with_capacity(16);
    loop {
        if rx.recv_many(&mut batches, 16).await == 0 {
            break;
        }
        let mut released = 0;
        let mut bulk = false;
        for wire in batches.drain(..) {
            released += wire.permits;
            for chunk in wire.chunks {
                // A chunk this large is (mostly) one message's payload.
                bulk |= chunk.len() >= BULK;
                if chunk.len() <= COPY_MAX {
                    staging.put_slice(&chunk);
                } else {
                    if !staging.is_empty() {
                        chunks.push(staging.split().freeze());
                    }
                    chunks.push(chunk);
                }
            }
        }
        if !staging.is_empty() {
            chunks.push(staging.split().freeze());
        }
        if staging.capacity() < COPY_MAX * 2 {
            staging.reserve(16 << 10);
        }
        // Errors only for a stream already reset, which the write reports.
        let _ = stream.set_priority(if bulk { -1 } else { 0 });
        let turn = if bulk {
            Some(strands.bulk.lock().await)
        } else {
            None
        };
        let written = stream.write_all_chunks(&mut chunks).await;
        drop(turn);
        chunks.clear();
        shared.out_space.add_permits(released);
        written.map_err(write_err)?;
    }
    if !staging.is_empty() {
        // Only the strand byte: a strand opened just to be finished (strand 0 at
        // close).
        stream
            .write_all_chunks(&mut [staging.split().freeze()])
            .await
            .map_err(write_err)?;
    }
    // Finished only once; an error means it was reset, reported below.
    let _ = stream.finish();
    match stream.stopped().await {
        Ok(None) => Ok(l),
        Ok(Some(code)) => Err(write_err(quinn::WriteError::Stopped(code))),
        Err(quinn::StoppedError::ConnectionLost(e)) => Err(QuicError::Connection(e)),
        Err(quinn::StoppedError::ZeroRttRejected) => {
            Err(write_err(quinn::WriteError::ZeroRttRejected))
        }
    }
}

/// One stream's reader: the strand byte, then chunks for the strand's
/// stack until the stream ends. Stops reading while the link's receive
/// buffer is full.
async fn read_strand(mut stream: RecvStream, strands: Arc<Strands>) -> Result<u8, QuicError> {
    let mut strand = NO_STRAND;
    let mut staged = VecDeque::new();
    // This reader's share of `strands.partial`, returned when it ends.
    let mut held = Held {
        strands: &strands,
        bytes: 0,
    };
    loop {
        wait_room(&strands.shared, &strands.room).await;
        let chunk = stream
            .read_chunk(READ_CHUNK, true)
            .await
            .map_err(|source| QuicError::Read { strand, source })?;
        let Some(chunk) = chunk else {
            if strand == NO_STRAND || held.bytes > 0 {
                return Err(QuicError::Truncated { strand });
            }
            return Ok(strand);
        };
        let mut data = chunk.bytes;
        if strand == NO_STRAND && !data.is_empty() {
            strand = data[0];
            bytes::Buf::advance(&mut data, 1);
            claim_strand(&strands.seen, strand)?;
            if strand != READ_ALL {
                strands.active.fetch_or(1 << strand, Ordering::Release);
            }
        }
        if strand == READ_ALL {
            if !data.is_empty() {
                return Err(QuicError::BadStrand {
                    strand,
                    max: Strand::COUNT,
                });
            }
            continue;
        }
        if data.is_empty() {
            continue;
        }
        // Claimed above: a strand below Strand::COUNT.
        let Some(s) = Strand::new(strand) else {
            return Err(QuicError::BadStrand {
                strand,
                max: Strand::COUNT,
            });
        };
        while !data.is_empty() {
            // A piece at a time: the messages of a piece, handed up through
            // the stack and on to the receiver, stay in the cache.
            let piece = data.split_to(data.len().min(RECEIVE_PIECE));
            let (partial, wake) = {
                let mut state = strands.stacks.lock(s);
                state
                    .receive(crate::conn::now(), piece, &mut staged)
                    .map_err(|source| QuicError::Stack { strand, source })?;
                let wake =
                    state.waits_for_writer() || state.holds() || state.poll_timeout().is_some();
                (state.partial_len(), wake)
            };
            if wake {
                strands.driver.notify_one();
            }
            if !staged.is_empty() {
                push(&strands, &mut staged);
            }
            held.set(partial, strand)?;
        }
    }
}

/// A reader's share of the connection's partial-message bytes.
struct Held<'a> {
    strands: &'a Strands,
    bytes: usize,
}

impl Held<'_> {
    /// Sets the share to `bytes`; fails if the connection's total goes over
    /// its budget.
    fn set(&mut self, bytes: usize, strand: u8) -> Result<(), QuicError> {
        if bytes >= self.bytes {
            let total = self
                .strands
                .partial
                .fetch_add(bytes - self.bytes, Ordering::Relaxed)
                + (bytes - self.bytes);
            self.bytes = bytes;
            if total > self.strands.partial_max {
                return Err(QuicError::TooMuchPartial {
                    strand,
                    bytes: total,
                    max: self.strands.partial_max,
                });
            }
        } else {
            self.strands
                .partial
                .fetch_sub(self.bytes - bytes, Ordering::Relaxed);
            self.bytes = bytes;
        }
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.strands
            .partial
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Records that the peer opened `strand`.
fn claim_strand(strands_seen: &Mutex<StrandsSeen>, strand: u8) -> Result<(), QuicError> {
    let mut seen = lock(strands_seen);
    if strand == READ_ALL {
        if std::mem::replace(&mut seen.read_all, true) {
            return Err(QuicError::DuplicateStrand { strand });
        }
        return Ok(());
    }
    if usize::from(strand) >= Strand::COUNT {
        return Err(QuicError::BadStrand {
            strand,
            max: Strand::COUNT,
        });
    }
    let bit = 1u64 << strand;
    if seen.strands & bit != 0 {
        return Err(QuicError::DuplicateStrand { strand });
    }
    seen.strands |= bit;
    Ok(())
}

fn inbox_full(shared: &Shared) -> bool {
    let inb = lock(&shared.inb);
    inb.receiver_alive && inb.bytes >= shared.config.recv_buffer
}

/// Waits until the inbound queue is below its bound (or nobody receives:
/// then messages are discarded on push).
async fn wait_room(shared: &Shared, room: &Notify) {
    loop {
        let notified = room.notified();
        tokio::pin!(notified);
        // Registered before the check: a wake-up between the check and the
        // wait is not lost.
        notified.as_mut().enable();
        {
            let mut inb = lock(&shared.inb);
            if !inb.receiver_alive || inb.bytes < shared.config.recv_buffer {
                return;
            }
            inb.driver_waiting = true;
        }
        notified.await;
    }
}

/// Hands `staged` to the receiver ([`Shared::hand_over`]), opening the
/// senders' window first ([`Handoff::on_received`]). Strand readers wait for
/// room themselves, before they read ([`wait_room`]), so a full queue is
/// not marked here.
fn push(strands: &Strands, staged: &mut VecDeque<Received>) {
    strands.handoff.on_received(&strands.shared);
    strands.shared.hand_over(staged, false);
}
