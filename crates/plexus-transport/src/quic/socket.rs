//! The QUIC endpoint's UDP socket as quinn sees it
//! ([`quinn::AsyncUdpSocket`]), registered with the reactor the way the
//! `udp` transport registers its own (`udp/socket.rs`):
//!
//! * **For reading only.** Registered for writability too (as quinn's
//!   tokio socket is), the socket turns every datagram the peer consumes
//!   into a readiness event: the process returns from `epoll_wait` once
//!   more per message of a request–response exchange. Writability is
//!   watched on a second descriptor only while a send would block.
//! * **Drained without a read that would block.** quinn reads until the
//!   socket has nothing left. A read that fills fewer receive buffers than
//!   it offered has found the socket drained: its readiness is cleared
//!   then, so quinn's next read waits instead of making a system call that
//!   returns nothing.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use quinn::udp::{RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::Sleep;

use crate::udp::socket::{register, try_recv_until_drained, watch_writable};

pub(super) struct QuicSocket {
    socket: AsyncFd<UdpSocket>,
    state: UdpSocketState,
    /// The last send would have blocked: writability is worth watching.
    /// (quinn asks whether the socket is writable before every send.)
    blocked: AtomicBool,
}

impl fmt::Debug for QuicSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuicSocket")
            .field("local", &self.socket.get_ref().local_addr().ok())
            .finish_non_exhaustive()
    }
}

impl QuicSocket {
    /// Takes `socket` (with its options set), non-blocking, registered for
    /// reading. Must run inside a tokio runtime.
    pub(super) fn new(socket: UdpSocket) -> io::Result<Self> {
        socket.set_nonblocking(true)?;
        let state = UdpSocketState::new((&socket).into())?;
        Ok(Self {
            socket: register(socket, Interest::READABLE)?,
            state,
            blocked: AtomicBool::new(false),
        })
    }
}

impl AsyncUdpSocket for QuicSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(WritablePoller {
            socket: self,
            watch: None,
            retry: None,
        })
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let sent = self.state.send(self.socket.get_ref().into(), transmit);
        let blocked = matches!(&sent, Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        self.blocked.store(blocked, Relaxed);
        sent
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let offered = bufs.len().min(meta.len());
        loop {
            // The read below clears the readiness when it finds the
            // socket drained.
            ready!(self.socket.poll_read_ready(cx))?.retain_ready();
            let read = try_recv_until_drained(&self.socket, |socket| {
                let n = self.state.recv(socket.into(), bufs, meta)?;
                Ok((n, n < offered))
            });
            match read {
                // Readiness cleared: wait for the next event.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                read => return Poll::Ready(read),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.get_ref().local_addr()
    }

    fn may_fragment(&self) -> bool {
        self.state.may_fragment()
    }

    fn max_transmit_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.state.gro_segments()
    }
}

/// Ready at once while sends go through. After a send that would have
/// blocked, waits for the socket to take datagrams again: on a second
/// descriptor registered for writability, dropped once it reports the
/// socket writable, so that no writability events arrive while sends go
/// through.
struct WritablePoller {
    socket: Arc<QuicSocket>,
    watch: Option<AsyncFd<OwnedFd>>,
    /// Writability could not be watched (out of descriptors): try sending
    /// again after a pause instead.
    retry: Option<Pin<Box<Sleep>>>,
}

/// Pause before retrying a blocked send when writability cannot be watched.
const RETRY: Duration = Duration::from_millis(1);

impl fmt::Debug for WritablePoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WritablePoller")
            .field("watching", &self.watch.is_some())
            .finish()
    }
}

impl UdpPoller for WritablePoller {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.socket.blocked.load(Relaxed) {
            // Sends go through: try the next one.
            this.watch = None;
            return Poll::Ready(Ok(()));
        }
        if let Some(retry) = &mut this.retry {
            ready!(retry.as_mut().poll(cx));
            this.retry = None;
            return Poll::Ready(Ok(()));
        }
        let watch = match &mut this.watch {
            Some(watch) => watch,
            None => {
                // A new registration reports the current state: writable
                // already, if the socket took datagrams meanwhile.
                match watch_writable(this.socket.socket.get_ref()) {
                    Ok(watch) => this.watch.insert(watch),
                    Err(error) => {
                        // An error here would end quinn's connection
                        // driver: poll again shortly instead.
                        tracing::debug!(target: "plexus::transport", %error, "quic: cannot watch writability; polling");
                        this.retry = Some(Box::pin(tokio::time::sleep(RETRY)));
                        return Pin::new(this).poll_writable(cx);
                    }
                }
            }
        };
        // The registration goes with the descriptor: nothing to clear.
        ready!(watch.poll_write_ready(cx))?.retain_ready();
        this.watch = None;
        Poll::Ready(Ok(()))
    }
}
