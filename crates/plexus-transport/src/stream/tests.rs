//! Direct writes on plain stream links: a sender writes to an idle socket
//! itself, whatever it cannot write goes to the driver behind it in order,
//! and the second descriptor never keeps a closed link's socket open.

use std::time::Duration;

use bytes::Bytes;
use plexus_net::StackSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::link::{lock, Link};
use crate::{tcp, LinkConfig};

fn spec() -> StackSpec {
    "tcp / framing".parse().expect("valid spec")
}

pub(crate) async fn pair(config: LinkConfig) -> (Link, Link) {
    let listener = tcp::TcpListener::bind_with(&spec(), "127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind");
    let client = tcp::connect_with(&spec(), listener.local_addr(), config)
        .await
        .expect("connect");
    let server = listener.accept().await.expect("accept");
    (client, server)
}

/// Waits until `link`'s driver has opened the window for direct writes.
async fn until_idle(link: &Link) {
    for _ in 0..1000 {
        if lock(&link.shared().out).write_idle {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the driver never found the link idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_writes_to_an_idle_socket_itself_and_queues_what_follows() {
    let (mut client, mut server) = pair(LinkConfig::default()).await;
    // Only a turn that received opens the window: the reply goes direct.
    assert!(!lock(&client.shared().out).write_idle);
    server.try_send_copy(b"request").expect("send");
    assert_eq!(client.recv_message().await.unwrap(), &b"request"[..]);
    until_idle(&client).await;
    client.try_send_copy(b"first").expect("send");
    {
        let out = lock(&client.shared().out);
        assert_eq!(out.direct_messages, 1, "written by the sender");
        assert!(out.queue.is_empty() && out.staging.is_empty());
        // One message per driver turn: the next one is queued.
        assert!(!out.write_idle);
    }
    client.try_send_copy(b"second").expect("send");
    assert_eq!(server.recv_message().await.unwrap(), &b"first"[..]);
    assert_eq!(server.recv_message().await.unwrap(), &b"second"[..]);
    // Every permit is back, the directly written message's at once.
    let shared = client.shared().clone();
    for _ in 0..1000 {
        if shared.out_space.available_permits() == shared.config.send_buffer {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        shared.out_space.available_permits(),
        shared.config.send_buffer
    );
    // A turn that only sent does not open it again; the next one that
    // receives does, and the driver has counted both messages as sent.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!lock(&client.shared().out).write_idle);
    server.try_send_copy(b"again").expect("send");
    assert_eq!(client.recv_message().await.unwrap(), &b"again"[..]);
    until_idle(&client).await;
    assert_eq!(lock(&client.shared().out).direct_messages, 0);
}

/// A message larger than the socket buffers is written in part by the
/// sender; the rest, and everything sent after it, leaves through the
/// driver in order, and every permit comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_written_message_leaves_its_rest_to_the_driver_in_order() {
    let config = LinkConfig {
        send_buffer: 64 << 10,
        recv_buffer: 32 << 20,
    };
    let (mut client, mut server) = pair(config).await;
    server.try_send_copy(b"go").expect("send");
    client.recv_message().await.expect("go");
    until_idle(&client).await;
    let big: Vec<u8> = (0..(12 << 20)).map(|i: u32| (i % 251) as u8).collect();
    client.send(Bytes::from(big.clone())).await.expect("send");
    {
        let out = lock(&client.shared().out);
        assert_eq!(out.direct_messages, 0, "the socket cannot take it all");
        assert!(!out.write_idle);
    }
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
    let shared = client.shared().clone();
    for _ in 0..1000 {
        if shared.out_space.available_permits() == config.send_buffer {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(shared.out_space.available_permits(), config.send_buffer);
}

/// A link closed for a protocol error closes its socket: the descriptor
/// kept for direct writes goes with the driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_closed_on_bad_input_closes_its_socket() {
    let listener = tcp::TcpListener::bind(&spec(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let mut raw = tokio::net::TcpStream::connect(listener.local_addr())
        .await
        .expect("connect");
    let mut link = listener.accept().await.expect("accept");
    assert!(lock(&link.shared().out).direct.is_some());
    // A frame header announcing 4 GiB: over any limit.
    raw.write_all(&[0xff; 8]).await.expect("write");
    assert!(link.recv().await.is_err(), "the link closes");
    assert!(lock(&link.shared().out).direct.is_none());
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut buf))
        .await
        .expect("the peer sees the socket close");
    assert!(matches!(read, Ok(0) | Err(_)), "end of stream or reset");
    // The link handles are still alive: only the driver's end is gone.
    drop(link);
}
