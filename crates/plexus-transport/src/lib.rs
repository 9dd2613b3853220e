//! Plexus transport drivers: the I/O under the sans-IO stacks of
//! `plexus-net`, on tokio.
//!
//! ```text
//!  remote (node, wire protocol, strands)  ── Link::send(Bytes) / Link::recv() ──
//!  ───────────────────────────────────────────────────│────────────▲──────────
//!  this crate      Link handles ⇄ bounded queues ⇄ one driver per link (TCP,
//!                  UDS, mem, QUIC) or per socket (UDP: one socket, many peers)
//!                                   │ handle_send / poll_receive ▲
//!  plexus-net      Stack (framing | slicing / delivery / ordering ...)
//!                                   │ poll_transmit / handle_receive ▲
//!  ───────────────────────────────────────────────────▼────────────│──────────
//!  OS / tokio      TcpStream · UdpSocket · UnixStream · mpsc channels (mem)
//! ```
//!
//! A [`StackSpec`](plexus_net::StackSpec) chooses the layers; its first word
//! names the transport, a [`Transport`] found in a [`TransportRegistry`]
//! (the built-in ones are in [`builtin`]; one of your own registers the
//! same way and gets the same driver: [`Link::over_stream`] for a byte
//! stream). The modules below it:
//!
//! | spec | module | listening | connecting |
//! | --- | --- | --- | --- |
//! | `tcp / framing` | [`tcp`] | [`tcp::TcpListener::bind`] | [`tcp::connect`] |
//! | `tls / framing` | [`tls`] | [`tls::TlsListener::bind`] | [`tls::connect`] |
//! | `uds / framing` | [`uds`] | [`uds::UdsListener::bind`] | [`uds::connect`] |
//! | `udp / slicing / delivery / ordering` | [`udp`] | [`udp::UdpEndpoint::bind`] + `accept` | [`udp::UdpEndpoint::connect`] |
//! | `mem / ordering` | [`mem`] | [`mem::MemHub::bind`] | [`mem::MemHub::connect`], [`mem::pair`] |
//! | `quic` | [`quic`] | [`quic::QuicEndpoint::bind`] + `accept` | [`quic::QuicEndpoint::connect`] |
//!
//! `quic` has no `plexus-net` stack: QUIC itself delimits, orders and
//! retransmits. It carries each [`Strand`] on its own stream; every other
//! transport carries all strands of a link on its one ordered stream or stack,
//! in queue order (a strand never reorders there).
//!
//! Every connection is a [`Link`]: send whole messages ([`bytes::Bytes`]),
//! receive whole messages and [`LinkEvent`](plexus_net::LinkEvent)s
//! ([`Received`]).
//!
//! **Drivers are thin.** A driver moves bytes between a socket and a
//! [`Stack`](plexus_net::Stack) in the order the stack documents: input
//! (`handle_*`), then drain `poll_transmit` (one vectored write per batch of
//! frames on streams, one `send_to` per frame on UDP), `poll_receive`,
//! `poll_event`, then sleep until `poll_timeout` or the next input. The
//! driver owns the timers.
//!
//! **One path.** Every message of every stack enters it through
//! `Stack::handle_send` and leaves through `poll_transmit`: no transport
//! recognises a stack or writes a layer's wire format itself, so a layer
//! of one's own gets the same treatment as the built-in ones. What keeps a
//! request–response exchange fast is who drives: a sender whose message
//! the driver waits for runs the stack (and, after a turn that received,
//! writes to the socket) on its own task. A byte stream of one's own runs
//! on the same driver: [`Link::over_stream`].
//!
//! **Bounded memory, hostile peers.** Each link has a bounded send buffer
//! ([`LinkConfig::send_buffer`]: `send` waits, `try_send` fails with the
//! message handed back) and a bounded receive buffer (the driver stops
//! reading). A peer that never reads makes our sends wait, never grows
//! memory. A link error (corrupt input, delivery failure, socket error)
//! closes that link only, with a [`LinkClosed`] naming peer and cause. On
//! UDP, each peer has its own stack; garbage from one source never reaches
//! another's, the peer table is bounded and idle peers are dropped.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod alarm;
pub mod builtin;
mod conn;
pub mod error;
pub mod handshakes;
mod link;
pub mod mem;
#[cfg(feature = "quic")]
pub mod quic;
pub mod registry;
mod stats;
mod strand;
mod stream;
pub mod tcp;
#[cfg(feature = "tls")]
pub mod tls;
pub mod udp;
pub mod uds;

pub use error::{
    AcceptError, BindError, CloseReason, ConnectError, LinkClosed, LinkSendError, LinkTrySendError,
    UnreliableError,
};
pub use link::{
    DriverReceive, Link, LinkConfig, LinkReceiver, LinkSender, PeerIdentity, Received, Strand,
};
pub use registry::{BoxFuture, Dialer, Listener, RegisterError, Transport, TransportRegistry};
pub use stats::LinkStats;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_handles_are_send_and_sync() {
        assert_send_sync::<Link>();
        assert_send_sync::<LinkSender>();
        assert_send_sync::<LinkReceiver>();
        assert_send_sync::<tcp::TcpListener>();
        assert_send_sync::<uds::UdsListener>();
        #[cfg(feature = "tls")]
        assert_send_sync::<tls::TlsListener>();
        #[cfg(feature = "tls")]
        assert_send_sync::<tls::TlsConfig>();
        assert_send_sync::<udp::UdpEndpoint>();
        #[cfg(feature = "quic")]
        assert_send_sync::<quic::QuicEndpoint>();
        assert_send_sync::<Strand>();
        assert_send_sync::<mem::MemHub>();
        assert_send_sync::<mem::MemListener>();
        assert_send_sync::<LinkClosed>();
    }
}
