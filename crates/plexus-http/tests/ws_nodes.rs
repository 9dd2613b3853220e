//! Remote actors over `ws://`: two nodes whose links are WebSocket
//! connections through an HTTP port, with permessage-deflate or without; a
//! plain HTTP client on that port is refused with a status and the
//! listener goes on.

use std::time::Duration;

use plexus_core::{ActorRef, ActorSystem, ReplyTo};
use plexus_http::websocket::{DeflateConfig, WsConfig};
use plexus_http::ws_transport::WsTransport;
use plexus_remote::{Node, NodeConfig};
use plexus_transport::TransportRegistry;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Serialize, Deserialize)]
enum Counter {
    Add(u64),
    Get(ReplyTo<u64>),
}
plexus_core::remote_message!(Counter = "test.ws.Counter");

fn config() -> NodeConfig {
    let mut transports = TransportRegistry::default();
    transports.register(WsTransport::new()).unwrap();
    NodeConfig::default().cookie("ws").transports(transports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_talk_over_websocket_and_plain_http_is_refused() {
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let na = Node::start(&a, config()).unwrap();
    let nb = Node::start(&b, config()).unwrap();
    let uri = nb.listen("ws://127.0.0.1:0").await.unwrap();
    assert!(uri.starts_with("ws://127.0.0.1:"), "{uri}");
    let mut total = 0u64;
    let counter = b.spawn_fn(move |m: Counter, _ctx| match m {
        Counter::Add(n) => total += n,
        Counter::Get(r) => r.send(total),
    });
    nb.publish(&counter, "counter").unwrap();

    // A browser-like client that asks for a page, not an upgrade.
    let addr = uri.strip_prefix("ws://").unwrap().to_owned();
    let mut plain = tokio::net::TcpStream::connect(&addr).await.unwrap();
    plain
        .write_all(b"GET /plexus HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    plain.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 400 Bad Request\r\n"),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    let remote: ActorRef<Counter> = na.resolve(&format!("{uri}/counter")).await.unwrap();
    for i in 1..=1000 {
        remote.tell(Counter::Add(i));
    }
    assert_eq!(
        remote.ask(Counter::Get, Duration::from_secs(10)).await,
        Ok(500_500)
    );
    assert_eq!(na.connected_nodes(), vec![b.node_id()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmasked_client_frame_is_closed_with_1002_and_counted() {
    let transport = WsTransport::new();
    let totals = transport.totals();
    let mut transports = TransportRegistry::default();
    transports.register(transport).unwrap();
    let b = ActorSystem::new();
    let nb = Node::start(
        &b,
        NodeConfig::default().cookie("ws").transports(transports),
    )
    .unwrap();
    let uri = nb.listen("ws://127.0.0.1:0").await.unwrap();
    let mut raw = tokio::net::TcpStream::connect(uri.strip_prefix("ws://").unwrap())
        .await
        .unwrap();
    raw.write_all(
        b"GET /plexus HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    // The 101, then whatever the server sends until it closes.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        raw.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101 "),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // A binary frame without a mask, as only servers may send.
    raw.write_all(&[0x82, 0x01, b'x']).await.unwrap();
    let mut rest = Vec::new();
    let _ = raw.read_to_end(&mut rest).await;
    // A close frame with 1002 (0x03ea) and its reason ends what the server
    // sent.
    let close = rest
        .windows(4)
        .position(|w| w[0] == 0x88 && w[2..4] == [0x03, 0xea])
        .expect("a close frame with 1002");
    let reason = &rest[close + 4..close + 2 + usize::from(rest[close + 1])];
    assert_eq!(reason, b"a client frame must be masked");
    assert_eq!(close + 2 + usize::from(rest[close + 1]), rest.len());
    assert_eq!(totals.snapshot().protocol_errors, 1);
}

/// The 101's head a raw upgrade request to `addr` gets, offering
/// permessage-deflate.
async fn raw_upgrade_offering_deflate(addr: &str) -> String {
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    raw.write_all(
        b"GET /plexus HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
          Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        raw.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap().to_ascii_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_talk_over_permessage_deflate_when_configured_and_not_by_default() {
    let deflate = || {
        WsTransport::new().config(WsConfig {
            deflate: Some(DeflateConfig::default()),
            ..WsConfig::default()
        })
    };
    let node_config = |transport: WsTransport| {
        let mut transports = TransportRegistry::default();
        transports.register(transport).unwrap();
        NodeConfig::default().cookie("ws").transports(transports)
    };
    let (a, b, c) = (ActorSystem::new(), ActorSystem::new(), ActorSystem::new());
    let server = deflate();
    let totals = server.totals();
    let na = Node::start(&a, node_config(deflate())).unwrap();
    let nb = Node::start(&b, node_config(server)).unwrap();
    let nc = Node::start(&c, config()).unwrap();
    let uri = nb.listen("ws://127.0.0.1:0").await.unwrap();
    let plain_uri = nc.listen("ws://127.0.0.1:0").await.unwrap();

    // Accepted where configured, declined by default.
    let head = raw_upgrade_offering_deflate(uri.strip_prefix("ws://").unwrap()).await;
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    assert!(
        head.contains("\r\nsec-websocket-extensions: permessage-deflate\r\n"),
        "{head}"
    );
    let head = raw_upgrade_offering_deflate(plain_uri.strip_prefix("ws://").unwrap()).await;
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    assert!(!head.contains("sec-websocket-extensions"), "{head}");

    let mut total = 0u64;
    let counter = b.spawn_fn(move |m: Counter, _ctx| match m {
        Counter::Add(n) => total += n,
        Counter::Get(r) => r.send(total),
    });
    nb.publish(&counter, "counter").unwrap();
    let remote: ActorRef<Counter> = na.resolve(&format!("{uri}/counter")).await.unwrap();
    for i in 1..=1000 {
        remote.tell(Counter::Add(i));
    }
    assert_eq!(
        remote.ask(Counter::Get, Duration::from_secs(10)).await,
        Ok(500_500)
    );
    let seen = totals.snapshot();
    assert!(seen.messages > 0, "{seen:?}");
    assert_eq!(
        (seen.protocol_errors, seen.invalid_payloads, seen.too_big),
        (0, 0, 0)
    );
}
