//! Stream links driven by the driver and by senders taking its turn:
//! replies and streams of messages keep their order whoever writes them,
//! a message the socket cannot take at once leaves its rest to the driver
//! in order, and every permit of the send buffer comes back.

use bytes::Bytes;
use plexus_net::StackSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::link::Link;
use crate::{tcp, LinkConfig};

fn spec() -> StackSpec {
    "tcp / framing".parse().expect("valid spec")
}

pub(crate) async fn pair_with(spec: &StackSpec, config: LinkConfig) -> (Link, Link) {
    let listener = tcp::TcpListener::bind_with(spec, "127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind");
    let client = tcp::connect_with(spec, listener.local_addr(), config)
        .await
        .expect("connect");
    let server = listener.accept().await.expect("accept");
    (client, server)
}

pub(crate) async fn pair(config: LinkConfig) -> (Link, Link) {
    pair_with(&spec(), config).await
}

/// Every permit of `link`'s send buffer is back. Permits return when a
/// message enters the stack, before its bytes are written: once the peer
/// has read a link's last message, they are all back.
fn all_permits_back(link: &Link) -> bool {
    let shared = link.shared();
    shared.out_space.available_permits() == shared.config.send_buffer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_and_the_messages_after_them_arrive_in_order() {
    for spec in ["tcp / framing", "tcp / framing / compression"] {
        let spec: StackSpec = spec.parse().expect("valid spec");
        let (mut client, mut server) = pair_with(&spec, LinkConfig::default()).await;
        for i in 0..200u32 {
            server.try_send_copy(&i.to_le_bytes()).expect("send");
            let request = client.recv_message().await.expect("request");
            assert_eq!(request, &i.to_le_bytes()[..]);
            // The first may be written by this sender (after a turn that
            // received), the others queue behind it for the driver.
            for k in 0..3u8 {
                client
                    .try_send(Bytes::from(vec![k; 1 + i as usize]))
                    .expect("send");
            }
            for k in 0..3u8 {
                let reply = server.recv_message().await.expect("reply");
                assert_eq!(reply, vec![k; 1 + i as usize], "reply {k} to {i}");
            }
        }
        assert!(all_permits_back(&client));
    }
}

/// A message larger than the socket buffers is written in part; the rest,
/// and everything sent after it, leaves through the driver in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_written_message_leaves_its_rest_to_the_driver_in_order() {
    let config = LinkConfig {
        send_buffer: 64 << 10,
        recv_buffer: 32 << 20,
    };
    let (mut client, mut server) = pair(config).await;
    server.try_send_copy(b"go").expect("send");
    client.recv_message().await.expect("go");
    let big: Vec<u8> = (0..(12 << 20)).map(|i: u32| (i % 251) as u8).collect();
    client.send(Bytes::from(big.clone())).await.expect("send");
    let small = |i: u32| i.to_le_bytes().repeat(1 + i as usize % 300);
    for i in 0..500 {
        client.send(Bytes::from(small(i))).await.expect("send");
    }
    let got = server.recv_message().await.expect("big message");
    assert!(got == big, "the big message arrives whole");
    for i in 0..500 {
        assert_eq!(
            server.recv_message().await.unwrap(),
            small(i),
            "message {i}"
        );
    }
    assert!(all_permits_back(&client));
}

/// A link closed for a protocol error closes its socket, though its
/// handles are still alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_closed_on_bad_input_closes_its_socket() {
    let listener = tcp::TcpListener::bind(&spec(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let mut raw = tokio::net::TcpStream::connect(listener.local_addr())
        .await
        .expect("connect");
    let mut link = listener.accept().await.expect("accept");
    // A frame header announcing 4 GiB: over any limit.
    raw.write_all(&[0xff; 8]).await.expect("write");
    assert!(link.recv().await.is_err(), "the link closes");
    let mut buf = [0u8; 64];
    let read = raw.read(&mut buf).await;
    assert!(matches!(read, Ok(0) | Err(_)), "end of stream or reset");
    drop(link);
}

/// A byte stream of one's own (here a `tokio::io::duplex`) carries a link
/// like tcp: messages both ways, in order, large ones too, and the end.
#[tokio::test]
async fn a_link_over_a_duplex_stream_carries_messages_both_ways() {
    let (a, b) = tokio::io::duplex(4 << 10);
    let now = crate::conn::now();
    let mut left = Link::over_stream(a, spec().build(now), "duplex://b", LinkConfig::default());
    let mut right = Link::over_stream(b, spec().build(now), "duplex://a", LinkConfig::default());
    let big = Bytes::from((0..100_000u32).map(|i| i as u8).collect::<Vec<_>>());
    for i in 0..50u32 {
        left.try_send_copy(&i.to_le_bytes()).expect("send");
    }
    left.try_send(big.clone()).expect("send");
    for i in 0..50u32 {
        assert_eq!(right.recv_message().await.unwrap(), &i.to_le_bytes()[..]);
    }
    assert_eq!(right.recv_message().await.unwrap(), big);
    right.try_send_copy(b"back").expect("send");
    assert_eq!(left.recv_message().await.unwrap(), &b"back"[..]);
    drop(left);
    assert!(
        right.recv().await.is_err(),
        "the peer's end closes the link"
    );
}

/// A message ending in a file region arrives as the same bytes whichever
/// way it leaves: from the page cache with `sendfile` (`tcp / framing`,
/// every layer passes regions), or read into memory by the sender first (a
/// stack with `compression`, which reads the bytes; a byte stream of one's
/// own). Larger than the send buffer and the socket's, so `sendfile` is
/// resumed on writability, and followed by a message that must not overtake
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_region_arrives_whole_sent_from_the_file_or_read_first() {
    use std::io::Write;
    use std::sync::Arc;

    use plexus_net::{FileRegion, Frame};

    use crate::Strand;

    let content: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i % 253) as u8).collect();
    let mut file = tempfile::tempfile().expect("temporary file");
    file.write_all(&content).expect("write");
    let file = Arc::new(file);
    let message = || {
        let mut frame = Frame::from_file(FileRegion::new(file.clone(), 5, content.len() - 5));
        frame.push_header(b"head:");
        frame
    };
    let mut expected = b"head:".to_vec();
    expected.extend_from_slice(&content[5..]);
    let config = LinkConfig {
        send_buffer: 64 << 10,
        recv_buffer: 32 << 20,
    };
    for (spec, from_file) in [
        ("tcp / framing", true),
        ("tcp / framing / compression", false),
    ] {
        let spec: StackSpec = spec.parse().expect("valid spec");
        let (client, mut server) = pair_with(&spec, config).await;
        assert_eq!(client.writes_file_regions(), from_file, "{spec}");
        let (sender, _receiver) = client.split();
        for _ in 0..2 {
            sender
                .send_frame_on(Strand::ZERO, message())
                .await
                .expect("send");
            sender
                .send(Bytes::from_static(b"after"))
                .await
                .expect("send");
        }
        for _ in 0..2 {
            let got = server.recv_message().await.expect("the region");
            assert!(got == expected, "{spec}: the region arrives whole");
            assert_eq!(server.recv_message().await.expect("after"), &b"after"[..]);
        }
    }
    let (a, b) = tokio::io::duplex(4 << 10);
    let now = crate::conn::now();
    let left = Link::over_stream(a, spec().build(now), "duplex://b", config);
    let mut right = Link::over_stream(b, spec().build(now), "duplex://a", config);
    assert!(!left.writes_file_regions());
    let (sender, _receiver) = left.split();
    sender
        .send_frame_on(Strand::ZERO, message())
        .await
        .expect("send");
    assert!(right.recv_message().await.expect("the region") == expected);
}

/// A sender telling thousands of messages in one go, on the thread its
/// driver runs on (so the driver cannot run until it is done), takes the
/// driver's turn every `TURN_DEPTH` messages: the link's queue never holds
/// more, and every message arrives, in order.
#[tokio::test]
async fn a_long_send_loop_on_the_drivers_thread_keeps_the_queue_short() {
    let (client, mut server) = pair(LinkConfig::default()).await;
    let mut deepest = 0;
    for i in 0..5_000u32 {
        client
            .try_send_copy(&i.to_le_bytes())
            .expect("room to send");
        deepest = deepest.max(crate::link::lock(&client.shared().out).queue.len());
    }
    assert!(
        deepest <= crate::link::TURN_DEPTH,
        "{deepest} messages waited for the driver"
    );
    for i in 0..5_000u32 {
        let message = server.recv_message().await.expect("a message");
        assert_eq!(message, &i.to_le_bytes()[..], "message {i}");
    }
}
