//! End to end over real sockets (and channels for `mem`): 100,000 messages
//! of mixed sizes, each arriving exactly once, in order, byte-identical.

mod common;

use common::{exchange, MESSAGES};
use plexus_net::StackSpec;
use plexus_transport::udp::UdpEndpoint;
use plexus_transport::{mem, tcp, uds};

fn spec(s: &str) -> StackSpec {
    s.parse().expect("valid spec")
}

/// Two udp endpoints on 127.0.0.1 serving `stack`, with links of
/// `send_buffer` bytes of send buffer (and 1 MiB to receive).
async fn udp_pair(stack: &str, send_buffer: usize) -> (UdpEndpoint, UdpEndpoint) {
    use plexus_transport::udp::UdpConfig;
    use plexus_transport::LinkConfig;

    let spec = spec(stack);
    let config = UdpConfig {
        link: LinkConfig {
            send_buffer,
            recv_buffer: 1 << 20,
        },
        ..UdpConfig::default()
    };
    let bind = || UdpEndpoint::bind_with(&spec, "127.0.0.1:0".parse().unwrap(), config);
    (bind().await.expect("bind a"), bind().await.expect("bind b"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_framing_delivers_100k_mixed_messages_both_ways_in_order() {
    let spec = spec("tcp / framing");
    let listener = tcp::TcpListener::bind(&spec, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let client = tcp::connect(&spec, listener.local_addr())
        .await
        .expect("connect");
    let server = listener.accept().await.expect("accept");
    exchange(client, server, 1, 64 << 10, MESSAGES, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uds_framing_delivers_100k_mixed_messages_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("plexus.sock");
    let spec = spec("uds / framing");
    let listener = uds::UdsListener::bind(&spec, &path).expect("bind");
    let client = uds::connect(&spec, &path).await.expect("connect");
    let server = listener.accept().await.expect("accept");
    exchange(client, server, 2, 64 << 10, MESSAGES, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_ordering_delivers_100k_mixed_messages_both_ways_in_order() {
    let hub = mem::MemHub::new();
    let spec = spec("mem / ordering");
    let listener = hub.bind(&spec, "server").expect("bind");
    let client = hub.connect(&spec, "server").expect("connect");
    let server = listener.accept().await.expect("accept");
    exchange(client, server, 3, 64 << 10, MESSAGES, true).await;
}

/// `faults` sits below `delivery`, so delivery repairs the 5 % loss (in
/// both directions: data and acks are dropped). Delivery sits above
/// slicing, so its window counts messages and strict ordering (1024
/// pending >= window 1024) never overflows; a message that loses one fragment is
/// resent whole, so messages here go up to 16 KiB (14 fragments: about
/// half of the attempts of the largest get through) and `max_retries` is
/// raised to make a failure of the link vanishingly unlikely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_delivers_100k_mixed_messages_in_order_through_5_percent_loss() {
    let spec = spec(
        "udp / faults(drop=0.05, seed=11) / slicing / delivery(min_rto=5ms, initial_rto=20ms, max_retries=40) / ordering",
    );
    let a = UdpEndpoint::bind(&spec, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind a");
    let b = UdpEndpoint::bind(&spec, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind b");
    let to_b = a.connect(b.local_addr()).await.expect("connect");
    // b learns of a from a's first datagram; send one before accepting.
    let (to_b_tx, to_b_rx) = to_b.split();
    let first = common::Workload::new(4, 16 << 10).next_message();
    to_b_tx.send(first).await.expect("first send");
    let mut from_a = b.accept().await.expect("accept");
    let got = from_a.recv_message().await.expect("first message");
    assert_eq!(got, common::Workload::new(4, 16 << 10).next_message());
    // The rest of the workload, continuing the same seeded stream.
    let mut wa = common::Workload::new(4, 16 << 10);
    wa.next_message();
    let (_b_tx, b_rx) = from_a.split();
    let send = tokio::spawn(common::send_all(to_b_tx, wa.clone(), MESSAGES - 1));
    let recv = tokio::spawn(common::recv_all(b_rx, wa, MESSAGES - 1));
    tokio::time::timeout(std::time::Duration::from_secs(120), async {
        send.await.expect("sender");
        recv.await.expect("receiver");
    })
    .await
    .expect("finishes");
    // Asked while a handle of the link is alive: once all are dropped the
    // link closes and leaves the peer table on its own schedule.
    assert_eq!(a.stats().peers, 1);
    assert_eq!(b.stats().accepted, 1);
    drop(to_b_rx);
}

/// A `framing` stream link, driven by its driver and by senders taking its
/// turn: copied small messages, queued large ones and ones larger than the
/// whole send buffer must interleave in order, and every permit must come
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_framing_keeps_order_across_copied_and_queued_messages() {
    use bytes::Bytes;
    use plexus_transport::LinkConfig;

    let spec = spec("tcp / framing");
    let config = LinkConfig {
        send_buffer: 4 << 10,
        recv_buffer: 1 << 20,
    };
    let listener = tcp::TcpListener::bind_with(&spec, "127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind");
    let client = tcp::connect_with(&spec, listener.local_addr(), config)
        .await
        .expect("connect");
    let mut server = listener.accept().await.expect("accept");
    let message = |i: usize| -> Vec<u8> {
        // Small (copied), over the copy limit (queued), and larger than the
        // whole send buffer (charged the buffer), in turn.
        let len = [10, 2000, 9000, 0][i % 4];
        (0..len).map(|j| (i * 31 + j) as u8).collect()
    };
    const N: usize = 2000;
    let sender = tokio::spawn(async move {
        for i in 0..N {
            let m = message(i);
            if i % 2 == 0 {
                // try_send_copy only fails when the buffer is full: wait then.
                while client.try_send_copy(&m).is_err() {
                    tokio::task::yield_now().await;
                }
            } else {
                client.send(Bytes::from(m)).await.expect("send");
            }
        }
        client
    });
    for i in 0..N {
        let got = server.recv_message().await.expect("message");
        assert_eq!(got, message(i), "message {i}");
    }
    let client = sender.await.expect("sender");
    // Every permit is back: a message filling the whole buffer goes at once.
    common::assert_permits_returned(
        async |m| client.send(m).await.is_ok(),
        &mut server,
        (4 << 10) - 4,
    )
    .await;
}

/// A link whose stack ends in `batching`, driven by the socket task and by
/// senders taking its turn: batched small messages, messages too large to
/// share a batch and empty ones must interleave in order through loss, and
/// every permit must come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_batching_keeps_order_across_batched_and_lone_messages_through_loss() {
    use bytes::Bytes;

    let (a, b) = udp_pair(
        "udp / faults(drop=0.05, seed=5) / slicing / delivery(min_rto=5ms, initial_rto=20ms, max_retries=40) / ordering / batching",
        4 << 10,
    )
    .await;
    let client = a.connect(b.local_addr()).await.expect("connect");
    let message = |i: usize| -> Vec<u8> {
        // Batched, batched, too large for a batch (alone, sliced), empty
        // (alone), in turn.
        let len = [10, 300, 2000, 0][i % 4];
        (0..len).map(|j| (i * 31 + j) as u8).collect()
    };
    const N: usize = 4000;
    let sender = tokio::spawn(async move {
        for i in 0..N {
            let m = message(i);
            if i % 3 == 0 {
                client.send(Bytes::from(m)).await.expect("send");
            } else {
                // try_send_copy only fails when the buffer is full: wait then.
                while client.try_send_copy(&m).is_err() {
                    tokio::task::yield_now().await;
                }
            }
        }
        client
    });
    let mut server = b.accept().await.expect("accept");
    tokio::time::timeout(std::time::Duration::from_secs(120), async {
        for i in 0..N {
            let got = server.recv_message().await.expect("message");
            assert_eq!(got, message(i), "message {i}");
        }
    })
    .await
    .expect("all messages arrive");
    let client = sender.await.expect("sender");
    // Every permit is back: a message costing the whole buffer goes at once.
    common::assert_permits_returned(
        async |m| client.send(m).await.is_ok(),
        &mut server,
        (4 << 10) - 64,
    )
    .await;
}

/// After a link hands received messages over, the next reply leaves from
/// its sender's task, running the stack there (the send window), and the
/// rest of the burst through the socket task. Replies of every size (one
/// datagram, batched, sliced into several) must arrive in order through
/// loss in both directions, and every permit must come back: the
/// retransmission timers the senders' sends start are the socket task's
/// to fire. The last message (16 KiB, 12 datagrams) gets through about one
/// attempt in four: `max_rto` keeps its backoff from outgrowing the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_replies_sent_from_their_senders_arrive_in_order_through_loss() {
    use bytes::Bytes;

    let (a, b) = udp_pair(
        "udp / faults(drop=0.1, seed=7) / slicing / delivery(min_rto=5ms, initial_rto=20ms, max_rto=40ms, max_retries=400) / ordering / batching",
        16 << 10,
    )
    .await;
    let mut client = a.connect(b.local_addr()).await.expect("connect");
    const ROUNDS: usize = 400;
    // Reply j of request i: sizes from an empty message to several
    // datagrams, 1 to 5 replies per request.
    let reply = |i: usize, j: usize| -> Vec<u8> {
        let len = [0, 40, 900, 3000][(i + j) % 4];
        (0..len).map(|k| (i * 7 + j * 13 + k) as u8).collect()
    };
    let burst = |i: usize| 1 + i % 5;
    client
        .send(Bytes::from(vec![0u8; 8]))
        .await
        .expect("request");
    let mut server = b.accept().await.expect("accept");
    let responder = tokio::spawn(async move {
        for i in 0..ROUNDS {
            let request = server.recv_message().await.expect("request");
            assert_eq!(request, (i as u64).to_le_bytes().as_slice(), "request {i}");
            for j in 0..burst(i) {
                server.send(Bytes::from(reply(i, j))).await.expect("reply");
            }
        }
        server
    });
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        for i in 0..ROUNDS {
            for j in 0..burst(i) {
                let got = client.recv_message().await.expect("reply");
                assert_eq!(got, reply(i, j), "reply {j} to request {i}");
            }
            if i + 1 < ROUNDS {
                let next = ((i + 1) as u64).to_le_bytes().to_vec();
                client.send(Bytes::from(next)).await.expect("request");
            }
        }
    })
    .await
    .expect("every reply arrives");
    let server = responder.await.expect("responder");
    let (server_tx, _server_rx) = server.split();
    common::assert_permits_returned(
        async |m| server_tx.send(m).await.is_ok(),
        &mut client,
        (16 << 10) - 64,
    )
    .await;
}

/// A link counts the messages and bytes it carries each way (issue 31's
/// metrics read them): 10 messages of 100 bytes, counted on both ends by
/// the time the last arrives.
#[tokio::test]
async fn link_stats_count_messages_and_bytes_each_way() {
    let hub = mem::MemHub::new();
    let spec = spec("mem / ordering");
    let listener = hub.bind(&spec, "server").expect("bind");
    let mut client = hub.connect(&spec, "server").expect("connect");
    let mut server = listener.accept().await.expect("accept");
    for i in 0..10u8 {
        client
            .send(bytes::Bytes::from(vec![i; 100]))
            .await
            .expect("send");
    }
    for _ in 0..10 {
        server.recv_message().await.expect("message");
    }
    server
        .send(bytes::Bytes::from_static(b"ok"))
        .await
        .expect("reply");
    client.recv_message().await.expect("reply");
    let (c, s) = (client.stats(), server.stats());
    assert_eq!((c.messages_sent, c.bytes_sent), (10, 1000));
    assert_eq!((s.messages_received, s.bytes_received), (10, 1000));
    assert_eq!((s.messages_sent, s.bytes_sent), (1, 2));
    assert_eq!((c.messages_received, c.bytes_received), (1, 2));
    assert_eq!(c.dropped, 0);
}

/// A message sent as the link's last goes out after what was queued before
/// it; every later send is refused with its message handed back (to be
/// sent elsewhere), while the link still receives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_message_seals_the_link_for_sending_not_receiving() {
    use bytes::Bytes;
    use plexus_transport::{LinkSendError, LinkTrySendError, Strand};
    let (a, mut b) = mem::pair(&"mem / ordering".parse().expect("spec"));
    a.try_send(Bytes::from_static(b"one")).expect("queued");
    a.try_send_last_on(Strand::ZERO, Bytes::from_static(b"last"))
        .expect("queued as the last");
    match a.try_send(Bytes::from_static(b"late")) {
        Err(LinkTrySendError::Send(LinkSendError::Closed { message, .. })) => {
            assert_eq!(&message[..], b"late", "handed back")
        }
        other => panic!("a send after the last: {other:?}"),
    }
    assert!(
        a.try_send_last_on(Strand::ZERO, Bytes::from_static(b"again"))
            .is_err(),
        "one last message"
    );
    assert_eq!(&b.recv_message().await.expect("one")[..], b"one");
    assert_eq!(&b.recv_message().await.expect("last")[..], b"last");
    // The other way still works.
    let (a_tx, mut a_rx) = a.split();
    b.try_send(Bytes::from_static(b"reply")).expect("queued");
    assert_eq!(&a_rx.recv_message().await.expect("reply")[..], b"reply");
    drop(a_tx);
}
