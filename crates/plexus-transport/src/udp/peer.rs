//! A peer's link state, shared by the socket task and the link's senders,
//! and the senders' direct path to the socket.
//!
//! The socket task serves every peer. A message a sender queues normally
//! waits for it: the task is woken, and runs the peer's stack on its next
//! turn. In a request–response exchange that is a second turn of the task
//! for every message, after the one that read the request. So after a
//! turn that handed received messages to the application, the task opens
//! the peer's send window: the next sender whose message the link's
//! driver waits for runs the stack itself and sends what it produces
//! straight to the socket ([`send_direct`]). It does so holding the
//! peer's lock, which keeps the stack in one thread's hands at a time and
//! its datagrams in order, and only while the task has no datagrams queued
//! for the socket, so none are overtaken. One send per window: a stream of
//! messages still gathers in the queue and leaves in full datagrams on the
//! task's turn.
//!
//! A sender leaves to the task (wakes it) whatever needs more than the
//! send: datagrams the socket would not take yet (kept in
//! [`PeerState::spill`], which the task sends before any newer ones of the
//! peer), a stack deadline earlier than the task's timer for the peer, a
//! stack that closed or has messages or events for the application, and
//! messages beyond one send's budget.

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

/// Bytes of queued messages one direct send moves into the stack at most;
/// beyond, the task takes over. Small: the task waits for the peer's lock
/// meanwhile (a reply is usually one message).
const DIRECT_BUDGET: usize = 16 << 10;

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
/// sender's task and sends the datagrams to `addr` if the send window is
/// open (see the module documentation). Returns whether that left nothing
/// for the task; `false` wakes it.
pub(super) fn send_direct(ep: &EpShared, cell: &PeerCell, addr: SocketAddr) -> bool {
    // Held elsewhere: the task is at work on the peer (or this thread is,
    // its inline receive handler sending): it serves the queue anyway.
    let Ok(mut guard) = cell.try_lock() else {
        return false;
    };
    let st = &mut *guard;
    if !std::mem::take(&mut st.send_window) || st.removed || !ep.tx_idle.load(Acquire) {
        return false;
    }
    let more = st.conn.pump(now(), DIRECT_BUDGET);
    while let Some(frame) = st.conn.stack.poll_transmit() {
        if !st.spill.is_empty() {
            st.spill.push_back(frame);
            continue;
        }
        match ep.socket.send_to(contiguous(&frame, &mut st.scratch), addr) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => st.spill.push_back(frame),
            Err(error) => {
                ep.counters.send_errors.fetch_add(1, Relaxed);
                tracing::debug!(%addr, %error, "udp send failed; datagram dropped");
            }
        }
    }
    let stack = &st.conn.stack;
    let timer_holds = match stack.poll_timeout() {
        None => true,
        Some(deadline) => st.timer.is_some_and(|armed| armed <= deadline),
    };
    !more && st.spill.is_empty() && timer_holds && !stack.is_closed() && !stack.has_received()
}
