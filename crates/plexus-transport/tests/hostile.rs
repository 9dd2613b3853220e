//! Hostile and faulty peers: each loses its own link (or is refused) with a
//! typed error, and nobody else notices.

use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_net::layers::framing::FramingError;
use plexus_net::{LinkError, ReceiveError, StackSpec};
use plexus_transport::udp::{UdpConfig, UdpEndpoint};
use plexus_transport::{tcp, CloseReason, ConnectError, LinkConfig, LinkTrySendError, Received};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

fn spec(s: &str) -> StackSpec {
    s.parse().expect("valid spec")
}

const UDP_SPEC: &str = "udp / slicing / delivery / ordering";

/// A datagram a real peer would send first: message `text` through a fresh
/// stack of `UDP_SPEC`.
fn valid_first_datagram(text: &'static [u8]) -> Bytes {
    let now = Instant::now();
    let mut stack = spec(UDP_SPEC).build(now);
    stack
        .handle_send(now, Bytes::from_static(text))
        .expect("fresh stack accepts");
    stack.poll_transmit().expect("one datagram").to_bytes()
}

#[tokio::test]
async fn tcp_oversized_length_prefix_closes_only_that_link_and_listener_keeps_serving() {
    let spec = spec("tcp / framing(max_frame=1MiB)");
    let listener = tcp::TcpListener::bind(&spec, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let mut evil = TcpStream::connect(listener.local_addr())
        .await
        .expect("raw connect");
    let mut evil_link = listener.accept().await.expect("accept evil");
    evil.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3])
        .await
        .expect("write");

    let closed = evil_link.recv().await.expect_err("link closes");
    assert!(
        matches!(
            closed.reason,
            CloseReason::Protocol(LinkError::Corrupt(ReceiveError::Framing(
                FramingError::FrameTooLarge { .. }
            )))
        ),
        "{closed}"
    );
    assert!(closed.to_string().starts_with("link to tcp://127.0.0.1:"));
    // The driver closed the socket: the evil peer reads end of stream.
    let mut buf = [0u8; 16];
    let n = evil.read(&mut buf).await.unwrap_or(0);
    assert_eq!(n, 0);
    // Sends on the closed link fail and hand the message back.
    let err = evil_link
        .send(Bytes::from_static(b"x"))
        .await
        .expect_err("closed");
    assert_eq!(err.into_message(), "x");

    // A well-behaved client is served as if nothing happened.
    let mut good = tcp::connect(&spec, listener.local_addr())
        .await
        .expect("connect");
    let mut served = listener.accept().await.expect("accept good");
    good.send(Bytes::from_static(b"ping")).await.expect("send");
    assert_eq!(served.recv_message().await.expect("recv"), "ping");
    served
        .send(Bytes::from_static(b"pong"))
        .await
        .expect("send");
    assert_eq!(good.recv_message().await.expect("recv"), "pong");
}

#[tokio::test]
async fn tcp_connect_to_a_closed_port_names_the_address_and_os_error() {
    let spec = spec("tcp / framing");
    // Bind then drop, so the port is (almost certainly) closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("ephemeral port")
        .port();
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let err = tcp::connect(&spec, addr).await.expect_err("refused");
    assert!(matches!(err, ConnectError::Io { .. }));
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("connect tcp://127.0.0.1:{port}: ")),
        "{text}"
    );
    assert!(text.contains("os error"), "{text}");
}

#[tokio::test]
async fn tcp_peer_that_never_reads_makes_try_send_fail_instead_of_growing_memory() {
    let spec = spec("tcp / framing");
    let config = LinkConfig {
        send_buffer: 256 << 10,
        recv_buffer: 256 << 10,
    };
    let listener = tcp::TcpListener::bind_with(&spec, "127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind");
    let _sleepy = TcpStream::connect(listener.local_addr())
        .await
        .expect("raw connect");
    let link = listener.accept().await.expect("accept");
    let chunk = Bytes::from(vec![7u8; 64 << 10]);
    let mut accepted = 0usize;
    // On this single-threaded runtime a yield lets the driver run until the
    // socket blocks. Full twice in a row, with a yield between, means the
    // whole path is saturated: the peer never reads, and socket buffers,
    // the driver's write budget and the link's send buffer are all bounded.
    let mut full_in_a_row = 0;
    while full_in_a_row < 2 {
        match link.try_send(chunk.clone()) {
            Ok(()) => {
                accepted += chunk.len();
                full_in_a_row = 0;
            }
            Err(LinkTrySendError::Full { message, .. }) => {
                assert_eq!(message.len(), chunk.len(), "handed back");
                full_in_a_row += 1;
                tokio::task::yield_now().await;
            }
            Err(e) => panic!("unexpected: {e}"),
        }
        assert!(accepted < 64 << 20, "unbounded buffering: {accepted} bytes");
    }
    // The async send waits instead of failing.
    tokio::select! {
        biased;
        r = link.send(chunk) => panic!("send completed on a saturated link: {r:?}"),
        () = tokio::task::yield_now() => {}
    }
}

#[tokio::test]
async fn udp_garbage_from_one_source_does_not_disturb_another_peers_link() {
    let spec = spec(UDP_SPEC);
    let server = UdpEndpoint::bind(&spec, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind server");
    let client = UdpEndpoint::bind(&spec, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind client");
    let mut good = client.connect(server.local_addr()).await.expect("connect");
    good.send(Bytes::from_static(b"hello")).await.expect("send");
    let mut served = server.accept().await.expect("accept");
    assert_eq!(served.recv_message().await.expect("recv"), "hello");

    // Garbage from a new source: rejected, no peer state created.
    let evil = UdpSocket::bind("127.0.0.1:0").await.expect("raw bind");
    for i in 0..100u8 {
        evil.send_to(&[i; 37], server.local_addr())
            .await
            .expect("send garbage");
    }
    // Garbage from a known source: a real first datagram, then junk.
    let known = UdpSocket::bind("127.0.0.1:0").await.expect("raw bind");
    known
        .send_to(&valid_first_datagram(b"hi"), server.local_addr())
        .await
        .expect("send");
    for i in 0..100u8 {
        known
            .send_to(&[i; 1300], server.local_addr())
            .await
            .expect("send garbage");
    }
    let mut known_link = server.accept().await.expect("accept known");
    assert_eq!(known_link.recv_message().await.expect("recv"), "hi");

    // The good link still works both ways; its message was sent after the
    // garbage, so by the time it arrives all garbage was processed.
    good.send(Bytes::from_static(b"still here"))
        .await
        .expect("send");
    assert_eq!(served.recv_message().await.expect("recv"), "still here");
    served
        .send(Bytes::from_static(b"and you"))
        .await
        .expect("send");
    assert_eq!(good.recv_message().await.expect("recv"), "and you");

    let stats = server.stats();
    assert_eq!(stats.rejected_datagrams, 100);
    assert_eq!(stats.peers, 2);
    assert_eq!(stats.accepted, 2);
}

#[tokio::test]
async fn udp_peer_table_bound_refuses_and_counts_new_peers() {
    let spec = spec(UDP_SPEC);
    let config = UdpConfig {
        max_peers: 2,
        ..UdpConfig::default()
    };
    let server = UdpEndpoint::bind_with(&spec, "127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind");
    let mut peers = Vec::new();
    for _ in 0..2 {
        let s = UdpSocket::bind("127.0.0.1:0").await.expect("raw bind");
        s.send_to(&valid_first_datagram(b"in"), server.local_addr())
            .await
            .expect("send");
        let mut link = server.accept().await.expect("accept");
        assert_eq!(link.recv_message().await.expect("recv"), "in");
        peers.push((s, link));
    }
    let third = UdpSocket::bind("127.0.0.1:0").await.expect("raw bind");
    for _ in 0..3 {
        third
            .send_to(&valid_first_datagram(b"let me in"), server.local_addr())
            .await
            .expect("send");
    }
    // A marker from an admitted peer, sent after the refused ones: once it
    // arrives, the refusals have been counted.
    let (first_socket, first_link) = &mut peers[0];
    let mut marker_stack = spec.build(Instant::now());
    let now = Instant::now();
    marker_stack
        .handle_send(now, Bytes::from_static(b"in"))
        .expect("accepts");
    // Drained in between: sent in one batch, the two would share a datagram.
    while marker_stack.poll_transmit().is_some() {}
    marker_stack
        .handle_send(now, Bytes::from_static(b"marker"))
        .expect("accepts");
    let datagrams: Vec<_> = std::iter::from_fn(|| marker_stack.poll_transmit()).collect();
    first_socket
        .send_to(&datagrams[0].to_bytes(), server.local_addr())
        .await
        .expect("send marker");
    assert_eq!(
        first_link.recv().await.expect("recv"),
        Received::Message(Bytes::from_static(b"marker"))
    );

    let stats = server.stats();
    assert_eq!(stats.peers, 2);
    assert_eq!(stats.refused_peers, 3);
    let err = server
        .connect("127.0.0.1:9".parse().unwrap())
        .await
        .expect_err("table full");
    assert!(matches!(err, ConnectError::PeerTableFull { max: 2, .. }));
}

#[tokio::test]
async fn udp_silent_peer_is_dropped_after_idle_timeout() {
    let spec = spec(UDP_SPEC);
    let config = UdpConfig {
        idle_timeout: Duration::from_millis(100),
        ..UdpConfig::default()
    };
    let server = UdpEndpoint::bind_with(&spec, "127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind");
    let s = UdpSocket::bind("127.0.0.1:0").await.expect("raw bind");
    s.send_to(&valid_first_datagram(b"bye"), server.local_addr())
        .await
        .expect("send");
    let mut link = server.accept().await.expect("accept");
    assert_eq!(link.recv_message().await.expect("recv"), "bye");
    let closed = link.recv().await.expect_err("idle link closes");
    assert!(
        matches!(closed.reason, CloseReason::IdleTimeout(_)),
        "{closed}"
    );
    assert_eq!(server.stats().idle_timeouts, 1);
    assert_eq!(server.stats().peers, 0);
}
