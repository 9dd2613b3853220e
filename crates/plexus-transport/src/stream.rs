//! The driver of one byte-stream link (TCP, Unix socket): one task, one
//! loop that moves bytes between the socket and the link's [`Conn`].
//!
//! Each turn: move queued messages into the stack (as many as the write
//! budget allows), write every pending frame with vectored writes (up to
//! [`MAX_IOV`] slices per call, partial writes resumed with
//! [`Frame::advance`]), hand received messages up, then wait for the first
//! of: socket readable (read up to 64 KiB+ in one call), socket writable,
//! a wake-up from the link handles, the stack's next deadline.
//!
//! On a TCP, TLS or Unix socket link with framing alone the first message
//! sent after a turn that received, with nothing queued, is written to the
//! socket by its sender ([`DirectSocket`]): a request–response exchange then
//! costs the driver one turn per message received and none per reply.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice, Write};
use std::os::fd::AsFd;
use std::sync::Arc;

use bytes::BytesMut;
use plexus_net::frame::INLINE_SEGMENTS;
use plexus_net::{Frame, Stack};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::Notify;

use crate::conn::{now, Conn, SendState};
use crate::error::CloseReason;
use crate::link::{lock, Inline, Link, LinkConfig, Shared};
use crate::tls::DirectTls;

/// Bytes read per system call (at least).
pub(crate) const READ_BUF: usize = 128 << 10;
/// Slices per vectored write (Linux `IOV_MAX` is 1024).
pub(crate) const MAX_IOV: usize = 512;
/// Bytes of messages moved into the stack between two drains of its
/// transmit queue.
const PUMP_STEP: usize = 8 << 10;
/// How long a link that is shut down, with nobody reading, waits for the
/// peer's end before it closes the socket anyway.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
/// Bytes of frames the driver holds for the socket before it stops taking
/// messages from the application (the rest wait in the link's send buffer).
pub(crate) const WRITE_BUDGET: usize = 256 << 10;

/// A connected byte-stream socket the driver can use without splitting it.
pub(crate) trait StreamSocket: Send + 'static {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send;
    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send;
    fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize>;
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    fn shutdown_write(&mut self) -> impl Future<Output = io::Result<()>> + Send;
    /// Bytes the socket holds below the application (TLS records) and
    /// still has to write; the driver then waits for writability even with
    /// an empty queue.
    fn pending_write(&self) -> bool {
        false
    }
    /// Writes what [`pending_write`](StreamSocket::pending_write) reports,
    /// until done or the socket would block.
    fn flush_pending(&self) -> io::Result<()> {
        Ok(())
    }
    /// A second handle for senders to write through (see [`DirectSocket`]);
    /// `None` where the bytes must pass through the driver.
    fn direct(&self) -> Option<DirectSocket> {
        None
    }
}

/// A duplicate of a plain stream socket's file descriptor, through which a
/// sender writes its framed message itself while the driver has nothing
/// queued (the link's `write_idle`), holding the
/// link's send lock so that bytes stay in order. The socket is non-blocking
/// (the flag belongs to the socket, not the descriptor): a write that would
/// block writes what fits, and the rest goes to the driver's queue.
///
/// Costs one descriptor per link; dropped when the driver stops, so the
/// socket closes with the link.
pub(crate) enum DirectSocket {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
    Tls(DirectTls),
}

impl DirectSocket {
    /// Writes what the socket takes of `bufs` without blocking. Returns
    /// the bytes taken, and whether all of them reached the socket (TLS
    /// may seal more than it can write; the driver must write the rest).
    pub(crate) fn write(&self, bufs: &[IoSlice<'_>]) -> io::Result<(usize, bool)> {
        match self {
            DirectSocket::Tcp(s) => (&*s).write_vectored(bufs).map(|n| (n, true)),
            DirectSocket::Unix(s) => (&*s).write_vectored(bufs).map(|n| (n, true)),
            DirectSocket::Tls(s) => s.write(bufs),
        }
    }
}

macro_rules! stream_socket {
    ($t:ty, $direct:ident, $std:ty) => {
        impl StreamSocket for $t {
            fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
                <$t>::readable(self)
            }
            fn writable(&self) -> impl Future<Output = io::Result<()>> + Send {
                <$t>::writable(self)
            }
            fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
                <$t>::try_read_buf(self, buf)
            }
            fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                <$t>::try_write_vectored(self, bufs)
            }
            fn shutdown_write(&mut self) -> impl Future<Output = io::Result<()>> + Send {
                AsyncWriteExt::shutdown(self)
            }
            fn direct(&self) -> Option<DirectSocket> {
                match self.as_fd().try_clone_to_owned() {
                    Ok(fd) => Some(DirectSocket::$direct(<$std>::from(fd))),
                    Err(error) => {
                        // Out of descriptors: every message goes through
                        // the driver, which works, a little slower.
                        tracing::debug!(%error, "no second descriptor for direct writes");
                        None
                    }
                }
            }
        }
    };
}

stream_socket!(TcpStream, Tcp, std::net::TcpStream);
stream_socket!(UnixStream, Unix, std::os::unix::net::UnixStream);

/// Starts the driver task of a stream link and returns its handle.
pub(crate) fn spawn<S: StreamSocket>(
    socket: S,
    stack: Stack,
    peer: Arc<str>,
    config: LinkConfig,
) -> Link {
    let notify = Arc::new(Notify::new());
    let waker = notify.clone();
    let shared = Shared::new(
        peer,
        stack.max_message_len(),
        Inline::of(&stack),
        config,
        Box::new(move || waker.notify_one()),
    );
    if shared.inline == Inline::Framing {
        lock(&shared.out).direct = socket.direct();
    }
    let link = Link::new(shared.clone());
    tokio::spawn(drive(socket, Conn::new(stack, shared), notify));
    link
}

async fn drive<S: StreamSocket>(mut socket: S, mut conn: Conn, notify: Arc<Notify>) {
    // Also when the task is cancelled (runtime shut down) rather than
    // closing: the second descriptor must not keep the socket open.
    let _direct = DirectGuard(conn.shared.clone());
    let reason = run(&mut socket, &mut conn, &notify).await;
    conn.close(reason);
}

async fn run<S: StreamSocket>(socket: &mut S, conn: &mut Conn, notify: &Notify) -> CloseReason {
    let mut rbuf = BytesMut::with_capacity(READ_BUF);
    let mut out = WriteQueue::default();
    let mut shut = false;
    let sleep = tokio::time::sleep(std::time::Duration::ZERO);
    tokio::pin!(sleep);
    let mut spins = 0u32;
    // This turn read bytes from the socket.
    let mut received = false;
    // Shut down, nobody reading: when to stop waiting for the peer's end.
    let mut linger: Option<std::time::Instant> = None;
    loop {
        // In steps, each drained right away: the stack's transmit queue
        // stays a few KiB (hot in cache) instead of a whole budget of frames.
        let more = if conn.shared.inline == Inline::Framing {
            let budget = WRITE_BUDGET.saturating_sub(out.bytes);
            conn.pump_inline(budget, |chunk| out.push_wire(chunk))
        } else {
            let at = now();
            loop {
                let budget = WRITE_BUDGET.saturating_sub(out.bytes);
                let more = conn.pump(at, budget.min(PUMP_STEP));
                conn.stack.drain_transmit(|frame| out.push(frame));
                if !more || budget <= PUMP_STEP {
                    break more;
                }
            }
        };
        conn.deliver();
        if let Some(reason) = conn.stack.close_reason() {
            // Best effort: a final ack or close notice may still get out.
            let _ = out.write_to(socket);
            return reason.clone().into();
        }
        if let Err(e) = out.write_to(socket) {
            return e.into();
        }
        // With nothing left for the socket after a turn that received,
        // senders may write to it themselves (framing alone): the
        // reply to what came in leaves without another turn of this loop.
        // Not after turns that only sent: a sender in a tight loop would
        // then pay a system call and a packet for one message per turn.
        let direct = conn.shared.inline == Inline::Framing && std::mem::take(&mut received);
        if !shut && out.is_empty() && conn.send_state(direct) == SendState::Done {
            if let Err(e) = socket.shutdown_write().await {
                return e.into();
            }
            shut = true;
        }
        if shut && conn.inbound_ended() {
            return CloseReason::PeerClosed;
        }
        if shut && !conn.receiver_alive() {
            // Nobody reads what still comes. But a socket closed with
            // unread input makes the kernel reset the connection, and the
            // peer then loses what it has not read yet of ours: read (and
            // drop) until the peer closes too, for at most LINGER.
            let until = *linger.get_or_insert_with(|| now() + LINGER);
            if now() >= until {
                return CloseReason::Local;
            }
        }
        if more && out.bytes < WRITE_BUDGET {
            // The socket took everything: go on with the queued messages
            // (nothing else would wake us for them), yielding now and then.
            spins += 1;
            if spins % 16 == 0 {
                tokio::task::yield_now().await;
            }
            continue;
        }
        let deadline = match (conn.stack.poll_timeout(), linger) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(d) = deadline {
            sleep.as_mut().reset(d.into());
        }
        let can_read = !conn.inbound_ended() && !conn.inbox_full;
        tokio::select! {
            r = socket.readable(), if can_read => {
                if let Err(e) = r {
                    return e.into();
                }
                if rbuf.capacity() < READ_BUF / 2 {
                    rbuf.reserve(READ_BUF);
                }
                match socket.try_read_buf(&mut rbuf) {
                    Ok(0) => conn.end_inbound(CloseReason::PeerClosed),
                    Ok(_) => {
                        received = true;
                        // An error closes the stack; close_reason() above
                        // picks it up.
                        let _ = conn.stack.handle_receive(now(), rbuf.split().freeze());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return e.into(),
                }
            }
            r = socket.writable(), if !out.is_empty() || socket.pending_write() => {
                if let Err(e) = r {
                    return e.into();
                }
            }
            () = notify.notified() => conn.refresh_inbox(),
            () = &mut sleep, if deadline.is_some() => {
                let _ = conn.stack.handle_timeout(now());
            }
        }
    }
}

/// Drops a link's [`DirectSocket`] when its driver ends, however it ends.
struct DirectGuard(Arc<Shared>);

impl Drop for DirectGuard {
    fn drop(&mut self) {
        let mut out = lock(&self.0.out);
        out.write_idle = false;
        out.direct = None;
    }
}

/// Frames up to this length are copied into the write buffer instead of
/// taking their own slices: for small frames one copy is cheaper than the
/// kernel's per-slice work (and than moving the frame struct around).
const COPY_MAX: usize = 1024;

/// What waits for the socket: runs of small frames coalesced into one
/// buffer, and large frames kept as chains (their payload is not copied).
enum Item {
    Copied(bytes::Bytes),
    /// Boxed: only frames over `COPY_MAX` get here, so the allocation is
    /// small next to the payload, and the queue's slots stay small.
    Chain(Box<Frame>),
}

impl Item {
    fn len(&self) -> usize {
        match self {
            Item::Copied(b) => b.len(),
            Item::Chain(f) => f.len(),
        }
    }
}

/// Frames waiting for the socket, written with vectored writes.
#[derive(Default)]
pub(crate) struct WriteQueue {
    items: VecDeque<Item>,
    /// Small frames not yet sealed into an item.
    staging: BytesMut,
    pub(crate) bytes: usize,
}

impl WriteQueue {
    /// Queues `frame`, read in place: small frames are copied, large ones
    /// taken (leaving an empty frame behind).
    pub(crate) fn push(&mut self, frame: &mut Frame) {
        let len = frame.len();
        self.bytes += len;
        if len <= COPY_MAX {
            if self.staging.capacity() - self.staging.len() < len {
                self.seal();
                self.staging.reserve(64 << 10);
            }
            frame.extend_into(&mut self.staging);
        } else {
            self.seal();
            self.items
                .push_back(Item::Chain(Box::new(std::mem::take(frame))));
        }
    }

    /// Queues bytes that are already on-the-wire form (framed by the link's
    /// senders), without a copy.
    pub(crate) fn push_wire(&mut self, chunk: bytes::Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.seal();
        self.bytes += chunk.len();
        self.items.push_back(Item::Copied(chunk));
    }

    fn seal(&mut self) {
        if !self.staging.is_empty() {
            self.items
                .push_back(Item::Copied(self.staging.split().freeze()));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Writes until the queue is empty or the socket would block.
    pub(crate) fn write_to<S: StreamSocket>(&mut self, socket: &S) -> io::Result<()> {
        self.seal();
        socket.flush_pending()?;
        while !self.items.is_empty() {
            let (written, offered) = {
                let mut slices = [IoSlice::new(&[]); MAX_IOV];
                let mut n = 0;
                let mut offered = 0;
                for item in &self.items {
                    if n + 1 + INLINE_SEGMENTS > MAX_IOV {
                        break;
                    }
                    match item {
                        Item::Copied(b) => {
                            slices[n] = IoSlice::new(b);
                            n += 1;
                        }
                        Item::Chain(f) => n += f.io_slices(&mut slices[n..]),
                    }
                    offered += item.len();
                }
                match socket.try_write_vectored(&slices[..n]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(written) => (written, offered),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) => return Err(e),
                }
            };
            self.consume(written);
            if written < offered {
                // The socket buffer is full; wait for writability.
                return Ok(());
            }
        }
        Ok(())
    }

    fn consume(&mut self, mut n: usize) {
        self.bytes -= n;
        while n > 0 {
            // n never exceeds the bytes offered, which the queue holds.
            let Some(front) = self.items.front_mut() else {
                break;
            };
            if n < front.len() {
                match front {
                    Item::Copied(b) => bytes::Buf::advance(b, n),
                    Item::Chain(f) => f.advance(n),
                }
                return;
            }
            n -= front.len();
            self.items.pop_front();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
