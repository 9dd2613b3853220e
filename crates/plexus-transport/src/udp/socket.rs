//! The endpoint's UDP socket as the reactor sees it: registered for
//! reading only.
//!
//! Linux reports a UDP socket writable again each time the receiver of
//! one of its datagrams consumes it (the send buffer space comes back).
//! Registered for both directions, the socket would turn every datagram
//! the peer reads into a readiness event: an extra `epoll_wait` return,
//! or a wake-up of a sleeping process, per message of a request–response
//! exchange. Sends are tried straight away instead; only when one would
//! block is a second descriptor registered for writability, until the
//! socket takes the queued datagrams again.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Registers `fd` with the reactor for `interest`.
///
/// `AsyncFd::with_interest` is deprecated because a type that does not own
/// its descriptor could close it while registered; tokio's replacement is
/// `unsafe`. The types registered here own theirs (a `UdpSocket`, an
/// `OwnedFd`, the alarm's timerfd): the descriptor stays open, and the
/// same, until the `AsyncFd` is dropped, which deregisters it first. Safe
/// tokio offers no other way to register for one direction only.
#[allow(deprecated)]
pub(crate) fn register<T: std::os::fd::AsRawFd>(
    fd: T,
    interest: Interest,
) -> io::Result<AsyncFd<T>> {
    AsyncFd::with_interest(fd, interest)
}

/// A second descriptor of `socket`, registered for writability only: for
/// a socket registered for reading, while a send would block.
pub(crate) fn watch_writable(socket: &UdpSocket) -> io::Result<AsyncFd<OwnedFd>> {
    register(socket.as_fd().try_clone_to_owned()?, Interest::WRITABLE)
}

/// Turns off the ancillary data quinn-udp asks for but Plexus does not
/// read: the destination address (`IP_PKTINFO`) and the ECN bits
/// (`IP_RECVTOS`), and their IPv6 twins. The kernel builds them into every
/// read otherwise (several hundred nanoseconds per datagram on a round
/// trip's critical path). GRO stays on. Best effort: a socket that keeps
/// them still works.
pub(crate) fn skip_unused_ancillary_data(socket: &UdpSocket) {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{setsockopt, sockopt};
        let v6 = socket.local_addr().is_ok_and(|a| a.is_ipv6());
        let mut results = vec![
            setsockopt(socket, sockopt::Ipv4PacketInfo, &false),
            setsockopt(socket, sockopt::IpRecvTos, &false),
        ];
        if v6 {
            results.push(setsockopt(socket, sockopt::Ipv6RecvPacketInfo, &false));
            results.push(setsockopt(socket, sockopt::Ipv6RecvTClass, &false));
        }
        for error in results.into_iter().filter_map(Result::err) {
            tracing::debug!(target: "plexus::transport", %error, "udp ancillary data left on");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = socket;
}

/// Runs `recv`, a read of `socket` that also says whether it found the
/// socket drained (it read fewer datagrams than it had room for): then
/// the socket's read readiness is cleared, as by a read that would block,
/// and the next wait for it waits instead of another read returning
/// nothing. A datagram that arrives after the read sets it again (the
/// reactor's next event for the socket is newer than the one cleared).
/// `WouldBlock` if the socket was not ready.
pub(crate) fn try_recv_until_drained<R>(
    socket: &AsyncFd<UdpSocket>,
    recv: impl FnOnce(&UdpSocket) -> io::Result<(R, bool)>,
) -> io::Result<R> {
    let mut read = None;
    let cleared = socket.try_io(Interest::READABLE, |socket| {
        let (r, drained) = recv(socket)?;
        read = Some(r);
        if drained {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(())
        }
    });
    // Without a result, the read failed (or the socket was not ready).
    read.ok_or_else(|| {
        cleared
            .err()
            .unwrap_or_else(|| io::ErrorKind::WouldBlock.into())
    })
}

pub(super) struct EndpointSocket {
    socket: AsyncFd<UdpSocket>,
    /// Registered for writability while a send would block.
    blocked: Option<AsyncFd<OwnedFd>>,
    /// A send would block and the writability registration failed (out of
    /// descriptors): retry after a short pause instead.
    retry: bool,
}

/// Pause before retrying a blocked send when writability cannot be watched.
const RETRY: std::time::Duration = std::time::Duration::from_millis(1);

impl EndpointSocket {
    /// Binds a non-blocking socket to `addr` and registers it for reading.
    pub(super) fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        Ok(Self {
            socket: register(socket, Interest::READABLE)?,
            blocked: None,
            retry: false,
        })
    }

    pub(super) fn get_ref(&self) -> &UdpSocket {
        self.socket.get_ref()
    }

    /// Ready once the socket may have datagrams to read. A poll, not a
    /// future: the task waits for this on every turn, and a poll stores
    /// its waker in the socket's registration instead of queueing a new
    /// waiter each time.
    pub(super) fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_read_ready(cx).map_ok(drop)
    }

    /// [`try_recv_until_drained`] on this socket.
    pub(super) fn try_recv_until_drained<R>(
        &self,
        recv: impl FnOnce(&UdpSocket) -> io::Result<(R, bool)>,
    ) -> io::Result<R> {
        try_recv_until_drained(&self.socket, recv)
    }

    /// Runs `send`, a write of the socket. If it would block, registers
    /// for writability ([`writable`](Self::writable) then waits for it);
    /// once a send goes through, the registration is dropped.
    pub(super) fn try_send<R>(
        &mut self,
        send: impl FnOnce(&UdpSocket) -> io::Result<R>,
    ) -> io::Result<R> {
        match send(self.socket.get_ref()) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if self.blocked.is_none() {
                    match watch_writable(self.socket.get_ref()) {
                        Ok(watch) => self.blocked = Some(watch),
                        Err(error) => {
                            tracing::debug!(target: "plexus::transport", %error, "udp: cannot watch writability; polling");
                            self.retry = true;
                        }
                    }
                }
                Err(e)
            }
            result => {
                if result.is_ok() {
                    self.blocked = None;
                    self.retry = false;
                }
                result
            }
        }
    }

    /// Resolves once a send that would block may go through; pending
    /// forever while no send is blocked.
    pub(super) async fn writable(&self) -> io::Result<()> {
        match &self.blocked {
            Some(fd) => {
                let mut ready = fd.writable().await?;
                // Edge-triggered: the next wait needs a new edge, which
                // the next send that would block is followed by.
                ready.clear_ready();
                Ok(())
            }
            None if self.retry => {
                tokio::time::sleep(RETRY).await;
                Ok(())
            }
            None => std::future::pending().await,
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use nix::sys::socket::{getsockopt, sockopt};
    use quinn_udp::UdpSocketState;

    use super::*;

    #[test]
    fn ancillary_data_quinn_udp_asks_for_is_turned_off() {
        let v4 = UdpSocket::bind("127.0.0.1:0").unwrap();
        UdpSocketState::new((&v4).into()).unwrap();
        // quinn-udp turned them on: the test would pass vacuously otherwise.
        assert!(getsockopt(&v4, sockopt::Ipv4PacketInfo).unwrap());
        assert!(getsockopt(&v4, sockopt::IpRecvTos).unwrap());
        skip_unused_ancillary_data(&v4);
        assert!(!getsockopt(&v4, sockopt::Ipv4PacketInfo).unwrap());
        assert!(!getsockopt(&v4, sockopt::IpRecvTos).unwrap());

        // IPv6 may be off on a test machine; then there is nothing to check.
        let Ok(v6) = UdpSocket::bind("[::1]:0") else {
            return;
        };
        UdpSocketState::new((&v6).into()).unwrap();
        assert!(getsockopt(&v6, sockopt::Ipv6RecvPacketInfo).unwrap());
        skip_unused_ancillary_data(&v6);
        assert!(!getsockopt(&v6, sockopt::Ipv6RecvPacketInfo).unwrap());
        assert!(!getsockopt(&v6, sockopt::Ipv6RecvTClass).unwrap());
    }
}
