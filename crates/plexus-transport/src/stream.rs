//! The driver of one byte-stream link (TCP, Unix socket, TLS, or any
//! [`AsyncRead`] + [`AsyncWrite`] a transport of one's own provides): one
//! task, one loop that moves bytes between the socket and the link's
//! [`Conn`].
//!
//! Each turn: move queued messages into the stack (as many as the write
//! budget allows), write every pending frame with vectored writes (up to
//! [`MAX_IOV`] slices per call, partial writes resumed with
//! [`Frame::advance`]), hand received messages up, then wait for the first
//! of: socket readable (read up to 16 KiB in one call, 128 KiB once a read
//! filled the buffer), socket writable, a wake-up from the link handles,
//! the stack's next deadline.
//!
//! **File regions.** A frame ending in a [`FileRegion`] (a static file's
//! body behind an HTTP head) is written as its bytes, then the region with
//! `sendfile`: the file's pages go from the page cache to the socket
//! without passing through user space. TCP and Unix sockets do this; for
//! any other socket the link's senders read regions into memory before
//! the stack sees them.
//!
//! **One path, whoever drives it.** The link's [`Conn`] and its write queue
//! live behind one lock, [`StreamCore`], shared by the driver and the
//! link's senders. A sender whose message the driver waits for takes the
//! driver's turn itself when the lock is free ([`sender_turn`]): it runs
//! the stack (`handle_send`, `poll_transmit`) exactly as the driver would
//! and queues the frames for the socket. After a turn that received, with
//! nothing left to write, the driver also leaves the socket to the next
//! such sender (the write window): a request–response exchange then costs
//! the driver one turn per message received and none per reply, whatever
//! the stack's layers. One write per window: a sender in a tight loop gets
//! its messages batched into the driver's vectored writes instead of a
//! system call each.
//!
//! A sender in a long loop (a handler telling thousands of messages, with
//! the driver on the same thread, so it runs only after the loop) takes a
//! turn every [`TURN_DEPTH`](crate::link::TURN_DEPTH) messages as well: the
//! stack takes them while they are in the cache, the link's queue stays
//! short, and once [`TURN_WRITE`] bytes wait for the socket the turn writes
//! them, so the peer gets the first of them before the loop ends.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::BytesMut;
use plexus_net::frame::INLINE_SEGMENTS;
use plexus_net::{FileRegion, Frame, Stack};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::Notify;

use crate::conn::{self, now, Conn, SendState};
use crate::error::CloseReason;
use crate::link::{lock, Extras, Link, LinkConfig, Received, Shared};

/// Bytes read per system call (at least), once a read has filled the
/// buffer: a link that streams.
pub(crate) const READ_BUF: usize = 128 << 10;
/// Bytes read per system call until then: most connections of a web
/// server carry one small request, and a fresh 128 KiB buffer each costs
/// the allocator (and the kernel, zeroing its pages) more than the request.
const FIRST_READ_BUF: usize = 16 << 10;
/// Slices per vectored write (Linux `IOV_MAX` is 1024).
pub(crate) const MAX_IOV: usize = 512;
/// Bytes waiting for the socket at which a sender's turn writes them
/// whether or not the write window is open.
const TURN_WRITE: usize = 64 << 10;
/// Bytes of messages moved into the stack between two drains of its
/// transmit queue.
const PUMP_STEP: usize = 8 << 10;
/// Bytes of queued messages one sender's turn moves into the stack at
/// most; beyond, the driver takes over. Small: others wait for the lock
/// meanwhile (a reply is usually one message).
const SENDER_BUDGET: usize = 16 << 10;
/// How long a link that is shut down, with nobody reading, waits for the
/// peer's end before it closes the socket anyway.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
/// Bytes of frames the driver holds for the socket before it stops taking
/// messages from the application (the rest wait in the link's send buffer).
pub(crate) const WRITE_BUDGET: usize = 256 << 10;

/// A connected byte-stream socket, used through a shared reference by the
/// driver (reads, writes, waits) and by senders taking its turn (writes
/// that never wait).
pub(crate) trait StreamSocket: Send + Sync + 'static {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send;
    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send;
    fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize>;
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    fn shutdown_write(&self) -> impl Future<Output = io::Result<()>> + Send;
    /// Whether [`try_send_file`](StreamSocket::try_send_file) works: the
    /// socket is a kernel socket the bytes go to as they are (no TLS or
    /// adapter above it).
    const SENDS_FILES: bool = false;
    /// Writes a prefix of `region` from the file to the socket in the
    /// kernel (`sendfile`), without waiting.
    fn try_send_file(&self, region: &FileRegion) -> io::Result<usize> {
        let _ = region;
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Bytes the socket holds below the application (TLS records, a
    /// buffering adapter) and still has to write; the driver then waits for
    /// writability even with an empty queue.
    fn pending_write(&self) -> bool {
        false
    }
    /// Writes what [`pending_write`](StreamSocket::pending_write) reports,
    /// until done or the socket would block.
    fn flush_pending(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A TCP or Unix stream as the driver sees it, split so that reads go
/// through tokio's `poll_read`: a read that comes back short marks the
/// socket drained (epoll's edge-triggered readiness allows it), so the wait
/// after it does not begin with a read that only returns `WouldBlock`. One
/// `recv` per arrival instead of two, on every link of these transports.
/// Writes, readiness and shutdown take the stream through the write half.
macro_rules! split_socket {
    ($(#[$doc:meta])* $name:ident, $stream:ty, $read:ty, $write:ty) => {
        $(#[$doc])*
        pub(crate) struct $name {
            /// Read by the driver alone: the lock is never contended.
            read: Mutex<$read>,
            /// `Some` until dropped (then forgotten: dropping the write
            /// half would shut the stream down first).
            write: Option<$write>,
        }

        impl $name {
            pub(crate) fn new(stream: $stream) -> Self {
                let (read, write) = stream.into_split();
                Self {
                    read: Mutex::new(read),
                    write: Some(write),
                }
            }

            fn stream(&self) -> &$stream {
                match &self.write {
                    Some(write) => write.as_ref(),
                    None => unreachable!("the write half lives until the socket is dropped"),
                }
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                if let Some(write) = self.write.take() {
                    write.forget();
                }
            }
        }

        impl StreamSocket for $name {
            fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
                self.stream().readable()
            }
            fn writable(&self) -> impl Future<Output = io::Result<()>> + Send {
                self.stream().writable()
            }
            fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
                let mut read = lock(&self.read);
                // Not ready: `Pending`, after registering a waker that
                // nobody waits on (the driver waits through `readable`).
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                match tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut *read), &mut cx, buf) {
                    std::task::Poll::Ready(r) => r,
                    std::task::Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
                }
            }
            fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                self.stream().try_write_vectored(bufs)
            }
            fn shutdown_write(&self) -> impl Future<Output = io::Result<()>> + Send {
                let r = socket2::SockRef::from(self.stream()).shutdown(std::net::Shutdown::Write);
                std::future::ready(r)
            }
            const SENDS_FILES: bool = true;
            fn try_send_file(&self, region: &FileRegion) -> io::Result<usize> {
                let stream = self.stream();
                // Through `try_io`: a `WouldBlock` clears the write
                // readiness the driver then waits on.
                stream.try_io(tokio::io::Interest::WRITABLE, || {
                    let mut offset = i64::try_from(region.offset())
                        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
                    nix::sys::sendfile::sendfile64(stream, region.file(), Some(&mut offset), region.len())
                        .map_err(io::Error::from)
                })
            }
        }
    };
}

split_socket!(
    /// A TCP connection under a stream link; see `split_socket!`.
    TcpSocket,
    TcpStream,
    tokio::net::tcp::OwnedReadHalf,
    tokio::net::tcp::OwnedWriteHalf
);
split_socket!(
    /// A Unix stream connection under a stream link; see `split_socket!`.
    UnixSocket,
    UnixStream,
    tokio::net::unix::OwnedReadHalf,
    tokio::net::unix::OwnedWriteHalf
);

/// What the driver and the link's senders share under one lock: the
/// link's stack with its queues, and the frames waiting for the socket.
pub(crate) struct StreamCore {
    conn: Conn,
    out: WriteQueue,
    /// Open: the next sender taking the driver's turn may write to the
    /// socket too (see the module documentation). Set by the driver after
    /// a turn that received with nothing left to write; taken by that
    /// sender.
    write_window: bool,
    /// The stack deadline the driver's timer is armed for; a sender whose
    /// send moves the stack's deadline earlier leaves the rest to the
    /// driver, which re-arms.
    armed: Option<Instant>,
    /// The driver stopped: senders leave everything to the close.
    stopped: bool,
    /// The driver will run its pump and write before it waits again: it
    /// is in a turn (set at the start of one, cleared at the end), or a
    /// sender's turn left it work and woke it. A sender's turn that leaves
    /// work then needs no wake-up.
    driver_woken: bool,
}

/// A stream link's socket and core, shared by its driver and its senders.
struct StreamLink<S> {
    socket: S,
    core: Mutex<StreamCore>,
}

/// Starts the driver task of a stream link over `socket` and returns its
/// handle.
pub(crate) fn spawn<S: StreamSocket>(
    socket: S,
    mut stack: Stack,
    peer: Arc<str>,
    config: LinkConfig,
) -> Link {
    let notify = Arc::new(Notify::new());
    let waker = notify.clone();
    let max_message_len = stack.max_message_len();
    let writes_file_regions = S::SENDS_FILES && stack.accept_file_regions();
    let mut link = None;
    let stream = Arc::new_cyclic(|weak: &std::sync::Weak<StreamLink<S>>| {
        let weak = weak.clone();
        let extras = Extras {
            sender_turn: Some(Box::new(move || {
                // Gone: so is the driver, and the close handles the rest.
                weak.upgrade().is_some_and(|s| sender_turn(&s))
            })),
            writes_file_regions,
            turn_when_deep: true,
            ..Extras::default()
        };
        let shared = Shared::with_extras(
            peer,
            max_message_len,
            config,
            Box::new(move || waker.notify_one()),
            extras,
        );
        link = Some(Link::new(shared.clone()));
        StreamLink {
            socket,
            core: Mutex::new(StreamCore {
                conn: Conn::new(stack, shared),
                out: WriteQueue::default(),
                write_window: false,
                armed: None,
                stopped: false,
                driver_woken: false,
            }),
        }
    });
    tokio::spawn(drive(stream, notify));
    // Set by the constructor just above.
    link.expect("new_cyclic ran the constructor")
}

/// A sender's turn (see the module documentation): runs the stack on the
/// sender's task, writes to the socket if the window is open, and returns
/// whether that left nothing for the driver.
fn sender_turn<S: StreamSocket>(link: &StreamLink<S>) -> bool {
    // Held elsewhere: the driver is at work (or this thread is, its driver-side
    // receive handler sending): it serves the queue anyway.
    let Ok(mut guard) = link.core.try_lock() else {
        return false;
    };
    let core = &mut *guard;
    if core.stopped {
        return false;
    }
    let budget = WRITE_BUDGET
        .saturating_sub(core.out.bytes)
        .min(SENDER_BUDGET);
    let more = budget == 0 || core.conn.pump(now(), budget);
    let out = &mut core.out;
    core.conn.stack.drain_transmit(|frame| out.push(frame));
    // A sender in a long loop keeps the driver away (on this thread) until
    // the loop ends: once a write's worth waits, it writes them itself, or
    // the loop would stop at the write budget.
    let write = std::mem::take(&mut core.write_window) || out.bytes >= TURN_WRITE;
    if write && out.write_to(&link.socket).is_err() {
        // The driver meets the error on its next write and closes.
        return false;
    }
    let stack = &core.conn.stack;
    let timer_holds = match stack.poll_timeout() {
        None => true,
        Some(deadline) => core.armed.is_some_and(|armed| armed <= deadline),
    };
    let left = more
        || !core.out.is_empty()
        || link.socket.pending_write()
        || !timer_holds
        || stack.is_closed()
        || stack.has_received();
    if !left {
        return true;
    }
    // The driver is on its way (woken now, or already): the messages
    // pushed until its turn wait for it without a turn of their senders,
    // and leave with it in one write.
    lock(&core.conn.shared.out).driver_waiting = false;
    // Woken once until its next turn.
    std::mem::replace(&mut core.driver_woken, true)
}

async fn drive<S: StreamSocket>(link: Arc<StreamLink<S>>, notify: Arc<Notify>) {
    let reason = run(&link, &notify).await;
    let mut core = lock(&link.core);
    core.stopped = true;
    core.conn.close(reason);
}

async fn run<S: StreamSocket>(link: &StreamLink<S>, notify: &Notify) -> CloseReason {
    let socket = &link.socket;
    let shared = lock(&link.core).conn.shared.clone();
    let mut read_size = FIRST_READ_BUF;
    let mut rbuf = BytesMut::new();
    let mut staged: VecDeque<Received> = VecDeque::new();
    let mut shut = false;
    let sleep = tokio::time::sleep(std::time::Duration::ZERO);
    tokio::pin!(sleep);
    let mut spins = 0u32;
    // This turn read bytes from the socket.
    let mut received = false;
    // Shut down, nobody reading: when to stop waiting for the peer's end.
    let mut linger: Option<Instant> = None;
    loop {
        // Received messages go up without the lock: the receiver's driver-side
        // handler may send on this link, and its sends take a turn.
        {
            let mut core = lock(&link.core);
            core.driver_woken = true;
            core.conn.collect(&mut staged);
        }
        if !staged.is_empty() {
            let handed = conn::hand_over(&shared, &mut staged);
            lock(&link.core).conn.on_handed(handed);
        }
        let (more, done, can_read, inbound_ended, receiver_alive, must_write, stack_deadline) = {
            let mut guard = lock(&link.core);
            let core = &mut *guard;
            // In steps, each drained right away: the stack's transmit queue
            // stays a few KiB (hot in cache) instead of a whole budget of frames.
            let at = now();
            let more = loop {
                let budget = WRITE_BUDGET.saturating_sub(core.out.bytes);
                let more = core.conn.pump(at, budget.min(PUMP_STEP));
                let out = &mut core.out;
                core.conn.stack.drain_transmit(|frame| out.push(frame));
                if !more || budget <= PUMP_STEP {
                    break more;
                }
            };
            if core.conn.stack.has_received() {
                // Sent in this turn by the driver-side handler and answered at once
                // by a layer (an ack): go round again to hand it up.
                continue;
            }
            if let Some(reason) = core.conn.stack.close_reason() {
                // Best effort: a final ack or close notice may still get out.
                let _ = core.out.write_to(socket);
                return reason.clone().into();
            }
            if let Err(e) = core.out.write_to(socket) {
                return e.into();
            }
            let state = core.conn.send_state();
            // With nothing left for the socket after a turn that received,
            // the next sender may write to it itself: the reply to what came
            // in leaves without another turn of this loop. Not after turns
            // that only sent: a sender in a tight loop would then pay a
            // system call and a packet for one message per turn.
            core.write_window = std::mem::take(&mut received)
                && state == SendState::Idle
                && core.out.is_empty()
                && !socket.pending_write();
            let done = !shut && core.out.is_empty() && state == SendState::Done;
            let can_read = !core.conn.inbound_ended() && !core.conn.inbox_full;
            let inbound_ended = core.conn.inbound_ended();
            let receiver_alive = core.conn.receiver_alive();
            let must_write = !core.out.is_empty();
            let stack_deadline = core.conn.stack.poll_timeout();
            core.armed = stack_deadline;
            // From here on, a sender's turn that leaves work wakes the driver.
            core.driver_woken = false;
            (
                more,
                done,
                can_read,
                inbound_ended,
                receiver_alive,
                must_write,
                stack_deadline,
            )
        };
        if done {
            if let Err(e) = socket.shutdown_write().await {
                return e.into();
            }
            shut = true;
        }
        if shut && inbound_ended {
            return CloseReason::PeerClosed;
        }
        if shut && !receiver_alive {
            // Nobody reads what still comes. But a socket closed with
            // unread input makes the kernel reset the connection, and the
            // peer then loses what it has not read yet of ours: read (and
            // drop) until the peer closes too, for at most LINGER.
            let until = *linger.get_or_insert_with(|| now() + LINGER);
            if now() >= until {
                return CloseReason::Local;
            }
        }
        if more && !must_write {
            // The socket took everything: go on with the queued messages
            // (nothing else would wake us for them), yielding now and then.
            spins += 1;
            if spins % 16 == 0 {
                tokio::task::yield_now().await;
            }
            continue;
        }
        let deadline = match (stack_deadline, linger) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(d) = deadline {
            sleep.as_mut().reset(d.into());
        }
        tokio::select! {
            r = socket.readable(), if can_read => {
                if let Err(e) = r {
                    return e.into();
                }
                if rbuf.capacity() < read_size / 2 {
                    rbuf.reserve(read_size);
                }
                let room = rbuf.capacity() - rbuf.len();
                match socket.try_read_buf(&mut rbuf) {
                    Ok(0) => lock(&link.core).conn.end_inbound(CloseReason::PeerClosed),
                    Ok(n) => {
                        if n == room {
                            // More was waiting: read in large steps from now on.
                            read_size = READ_BUF;
                        }
                        received = true;
                        // An error closes the stack; close_reason() above
                        // picks it up.
                        let mut core = lock(&link.core);
                        let _ = core.conn.stack.handle_receive(now(), rbuf.split().freeze());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return e.into(),
                }
            }
            r = socket.writable(), if must_write || socket.pending_write() => {
                if let Err(e) = r {
                    return e.into();
                }
            }
            () = notify.notified() => lock(&link.core).conn.refresh_inbox(),
            () = &mut sleep, if deadline.is_some() => {
                let _ = lock(&link.core).conn.stack.handle_timeout(now());
            }
        }
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

    /// The file region, once every byte in front of it is written.
    fn region_alone(&self) -> Option<&FileRegion> {
        match self {
            Item::Chain(f) if f.bytes_len() == 0 => f.file_region(),
            _ => None,
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
    /// and those ending in a file region taken (leaving an empty frame
    /// behind).
    pub(crate) fn push(&mut self, frame: &mut Frame) {
        let len = frame.len();
        self.bytes += len;
        if len <= COPY_MAX && !frame.has_file_region() {
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

    fn seal(&mut self) {
        if !self.staging.is_empty() {
            self.items
                .push_back(Item::Copied(self.staging.split().freeze()));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Writes until the queue is empty or the socket would block: the
    /// bytes of as many items as fit in one vectored write, up to and
    /// including the bytes in front of a file region; then the region.
    pub(crate) fn write_to<S: StreamSocket>(&mut self, socket: &S) -> io::Result<()> {
        self.seal();
        socket.flush_pending()?;
        while let Some(front) = self.items.front() {
            if let Some(region) = front.region_alone() {
                let len = region.len();
                match socket.try_send_file(region) {
                    // The file ended before the region did: it shrank
                    // since the response was made.
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(written) => {
                        self.consume(written);
                        if written < len {
                            return Ok(());
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
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
                            offered += b.len();
                        }
                        Item::Chain(f) => {
                            n += f.io_slices(&mut slices[n..]);
                            offered += f.bytes_len();
                            if f.has_file_region() {
                                // The region goes next, with sendfile.
                                break;
                            }
                        }
                    }
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

mod io_stream;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use io_stream::IoStream;
