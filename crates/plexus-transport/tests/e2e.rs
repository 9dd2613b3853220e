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
    drop(to_b_rx);
    assert_eq!(a.stats().peers, 1);
    assert_eq!(b.stats().accepted, 1);
}
