//! One path through the stack: a layer of the user's own, registered the
//! way any user registers one, sees every message both ways, on a stream
//! link and on a udp link, whichever task drives the link (its driver, or a
//! sender taking the driver's turn for a reply), and the stack's counters
//! agree with it.

mod common;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use common::tap::tapped;
use plexus_transport::udp::UdpEndpoint;
use plexus_transport::{tcp, Link};

const ROUNDS: u64 = 300;

/// `client` asks, `server` answers each request with three replies (the
/// first usually written by the replying sender itself, the others queued
/// behind it), and both check every message.
async fn request_reply(mut client: Link, mut server: Link) {
    for i in 0..ROUNDS {
        client.try_send_copy(&i.to_le_bytes()).expect("request");
        let request = server.recv_message().await.expect("request arrives");
        assert_eq!(request, &i.to_le_bytes()[..]);
        for k in 0..3u8 {
            server
                .try_send(Bytes::from(vec![k; 1 + (i as usize % 50)]))
                .expect("reply");
        }
        for k in 0..3u8 {
            let reply = client.recv_message().await.expect("reply arrives");
            assert_eq!(reply, vec![k; 1 + (i as usize % 50)], "reply {k} to {i}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_layer_sees_every_message_on_a_stream_link() {
    let (spec, taps) = tapped("tcp / framing / tap");
    let listener = tcp::TcpListener::bind(&spec, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let client = tcp::connect(&spec, listener.local_addr())
        .await
        .expect("connect");
    let server = listener.accept().await.expect("accept");
    request_reply(client, server).await;
    // Every message sent went down through the layer on its sender's side
    // and up through it on the other: 4 per round, both ways.
    assert_eq!(taps.sent.load(Ordering::Relaxed), 4 * ROUNDS);
    assert_eq!(taps.received.load(Ordering::Relaxed), 4 * ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_layer_sees_every_message_on_a_udp_link() {
    let (spec, taps) = tapped("udp / slicing / delivery / ordering / tap");
    let addr = "127.0.0.1:0".parse().unwrap();
    let a = UdpEndpoint::bind(&spec, addr).await.expect("bind a");
    let b = UdpEndpoint::bind(&spec, addr).await.expect("bind b");
    let client = a.connect(b.local_addr()).await.expect("connect");
    client.try_send_copy(b"hello").expect("first");
    let mut server = b.accept().await.expect("accept");
    assert_eq!(server.recv_message().await.unwrap(), &b"hello"[..]);
    request_reply(client, server).await;
    assert_eq!(taps.sent.load(Ordering::Relaxed), 4 * ROUNDS + 1);
    assert_eq!(taps.received.load(Ordering::Relaxed), 4 * ROUNDS + 1);
}
