//! A peer's link state, shared by the socket task and the link's senders,
//! and the senders' turn at driving it.
//!
//! The socket task serves every peer. A message a sender queues while the
//! task is on its way waits for it. A sender whose message the task waits
//! for takes the task's turn itself when the peer's lock is free
//! ([`sender_turn`]): it runs the peer's stack, exactly as the task would,
//! holding the peer's lock (which keeps the stack in one thread's hands at
//! a time and its datagrams in order). What the stack produces goes to
//! [`PeerState::spill`], which the task sends before any newer datagram of
//! the peer, unless the send window is open: after a turn that handed
//! received messages to the application, the task opens it, and the next
//! sender's turn sends straight to the socket, while the task has no
//! datagrams queued (none are overtaken). A request–response exchange then
//! costs no second turn of the task for the reply. One send per window: a
//! stream of messages still gathers and leaves in full datagrams on the
//! task's turn.
//!
//! A sender's turn leaves to the task (wakes it, once until its next
//! service of the peer) whatever needs more than the turn: datagrams in
//! the spill, a stack deadline earlier than the task's timer for the peer,
//! a stack that closed or has messages or events for the application, and
//! messages beyond one turn's budget.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use bytes::BytesMut;
use plexus_net::Frame;

use super::EpShared;
use crate::conn::{now, Conn};
use crate::error::CloseReason;
use crate::link::lock;

/// Bytes of queued messages one sender's turn moves into the stack at most;
/// beyond, the task takes over. Small: the task waits for the peer's lock
/// meanwhile (a reply is usually one message).
const SENDER_BUDGET: usize = 16 << 10;

/// Datagrams a peer's [`PeerState::spill`] holds before senders stop
/// running its stack and leave their messages queued for the task (where
/// the send buffer bounds them).
const SPILL_MAX: usize = 256;

/// The part of a peer the link's senders share with the socket task.
pub(super) type PeerCell = Mutex<PeerState>;

pub(super) struct PeerState {
    pub(super) conn: Conn,
    /// The deadline of the peer's entry in the task's timer set. It is
    /// never later than the stack's deadline (the idle and linger
    /// deadlines are the task's own).
    pub(super) timer: Option<Instant>,
    /// Open: the next sender may run the stack and send (see the module
    /// documentation).
    pub(super) send_window: bool,
    /// Datagrams a sender produced that the socket would not take; the task
    /// sends them before any newer ones of this peer.
    pub(super) spill: VecDeque<Frame>,
    /// The task dropped the peer and closed its link.
    pub(super) removed: bool,
    /// A sender's turn left work for the task and woke it; cleared by the
    /// task's next service of the peer.
    pub(super) task_woken: bool,
    /// A frame of several chunks, copied into one datagram.
    scratch: BytesMut,
}

impl PeerState {
    pub(super) fn new(conn: Conn) -> Self {
        Self {
            conn,
            timer: None,
            send_window: false,
            spill: VecDeque::new(),
            removed: false,
            task_woken: false,
            scratch: BytesMut::new(),
        }
    }

    /// The task dropped the peer: closes its link with `reason`, and no
    /// sender runs its stack any more.
    pub(super) fn close(&mut self, reason: CloseReason) {
        self.removed = true;
        self.conn.close(reason);
    }
}

/// `frame` as one contiguous datagram: its only chunk, or a copy of its
/// chunks in `scratch`.
pub(super) fn contiguous<'a>(frame: &'a Frame, scratch: &'a mut BytesMut) -> &'a [u8] {
    if frame.chunks().nth(1).is_none() {
        frame.first_chunk()
    } else {
        scratch.clear();
        frame.extend_into(scratch);
        scratch
    }
}

/// A sender's message waits for the driver: runs the peer's stack on the
/// sender's task and, if the send window is open, sends the datagrams to
/// `addr` itself (see the module documentation); otherwise they wait in
/// [`PeerState::spill`] for the task. Returns whether that left nothing
/// for the task that it does not already know of; `false` wakes it.
pub(super) fn sender_turn(ep: &EpShared, cell: &PeerCell, addr: SocketAddr) -> bool {
    // Held elsewhere: the task is at work on the peer (or this thread is,
    // its driver-side receive handler sending): it serves the queue anyway.
    let Ok(mut guard) = cell.try_lock() else {
        return false;
    };
    let st = &mut *guard;
    if st.removed {
        return false;
    }
    let window = std::mem::take(&mut st.send_window) && ep.tx_idle.load(Acquire);
    // Bounded: what waits in `spill` was released from the send buffer.
    let more = st.spill.len() >= SPILL_MAX || st.conn.pump(now(), SENDER_BUDGET);
    while let Some(frame) = st.conn.stack.poll_transmit() {
        if !window || !st.spill.is_empty() {
            st.spill.push_back(frame);
            continue;
        }
        match ep.socket.send_to(contiguous(&frame, &mut st.scratch), addr) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => st.spill.push_back(frame),
            Err(error) => {
                ep.counters.send_errors.fetch_add(1, Relaxed);
                tracing::debug!(target: "plexus::transport", %addr, %error, "udp send failed; datagram dropped");
            }
        }
    }
    let stack = &st.conn.stack;
    let timer_holds = match stack.poll_timeout() {
        None => true,
        Some(deadline) => st.timer.is_some_and(|armed| armed <= deadline),
    };
    let left =
        more || !st.spill.is_empty() || !timer_holds || stack.is_closed() || stack.has_received();
    if !left {
        return true;
    }
    // The task is on its way (woken now, or already): the messages pushed
    // until it serves the peer wait for it without a turn of their
    // senders.
    lock(&st.conn.shared.out).driver_waiting = false;
    // Woken once until its next service of this peer.
    std::mem::replace(&mut st.task_woken, true)
}
