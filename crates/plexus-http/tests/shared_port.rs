//! One port for the web and the nodes (`WsTransport::web`), `wss://`
//! between certified nodes, a silent client that does not hold the
//! listener, and the web server in per-core mode.

mod common;

use std::time::Duration;

use common::{ask, fresh_dir, read_response};
use plexus_core::{ActorRef, ActorSystem, ReplyTo};
use plexus_http::server::{HttpRequest, ServeError, WebServer};
use plexus_http::ws_transport::WsTransport;
use plexus_http::{Method, Response};
use plexus_remote::dev_certs::DevCa;
use plexus_remote::{Node, NodeConfig};
use plexus_transport::TransportRegistry;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);

#[derive(Serialize, Deserialize)]
struct Twice(u64, ReplyTo<u64>);
plexus_core::remote_message!(Twice = "test.shared.Twice");

fn twice(system: &ActorSystem) -> ActorRef<Twice> {
    system.spawn_fn(|Twice(n, reply): Twice, _ctx| reply.send(2 * n))
}

fn node_config(transport: WsTransport) -> NodeConfig {
    let mut transports = TransportRegistry::default();
    transports.register(transport).unwrap();
    NodeConfig::default()
        .cookie("shared")
        .transports(transports)
}

fn hello_server(system: &ActorSystem) -> WebServer {
    let hello = system.spawn_fn(|req: HttpRequest, _ctx| {
        let body = format!(
            "{} {} ({} bytes)",
            req.request.method.as_str(),
            req.param("name").unwrap_or("?"),
            req.request.body.len()
        );
        req.reply.send(Response::new(200, body));
    });
    let dir = fresh_dir("shared-port");
    std::fs::write(dir.join("big.bin"), big_file()).unwrap();
    WebServer::new()
        .route(Method::Get, "/hello/:name", hello.clone())
        .unwrap()
        .route(Method::Post, "/hello/:name", hello)
        .unwrap()
        .static_dir("/files", &dir, 1 << 20)
        .unwrap()
}

/// Above the sendfile threshold: sent from the file on a connection of
/// the server's own, read into memory on one handed over by the `ws`
/// listener (a byte stream with the first request in front).
fn big_file() -> Vec<u8> {
    (0..(1 << 20)).map(|i: u32| (i % 239) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_and_its_web_server_share_one_port() {
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let na = Node::start(&a, node_config(WsTransport::new())).unwrap();
    // Long enough that a listener held by the silent client below would
    // fail the resolve.
    let served = WsTransport::new()
        .handshake_timeout(Duration::from_secs(600))
        .web(hello_server(&b));
    let nb = Node::start(&b, node_config(served)).unwrap();
    let uri = nb.listen("ws://127.0.0.1:0").await.unwrap();
    let addr: std::net::SocketAddr = uri.strip_prefix("ws://").unwrap().parse().unwrap();

    // A client that connects and says nothing holds one handshake slot,
    // not the listener.
    let _silent = TcpStream::connect(addr).await.unwrap();

    // Pages, keep-alive, and a body, on the node's port.
    let mut web = TcpStream::connect(addr).await.unwrap();
    web.write_all(b"GET /hello/web HTTP/1.1\r\nHost: x\r\n\r\nPOST /hello/form HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let first = read_response(&mut web, &mut buf).await.unwrap();
    assert_eq!(
        (first.status, first.body.as_slice()),
        (200, &b"GET web (0 bytes)"[..])
    );
    let second = read_response(&mut web, &mut buf).await.unwrap();
    assert_eq!(
        (second.status, second.body.as_slice()),
        (200, &b"POST form (5 bytes)"[..])
    );
    let big = ask(addr, b"GET /files/big.bin HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        big.status == 200 && big.body == big_file(),
        "a large file, read for this port"
    );
    let missing = ask(addr, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(missing.status, 404);
    // The upgrade path without an upgrade is the endpoint's refusal.
    let refused = ask(addr, b"GET /plexus HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(refused.status, 400);

    // And a node through the same port.
    nb.publish(&twice(&b), "twice").unwrap();
    let remote: ActorRef<Twice> = na.resolve(&format!("{uri}/twice")).await.unwrap();
    assert_eq!(remote.ask(|r| Twice(21, r), T).await, Ok(42));
    assert_eq!(na.connected_nodes(), vec![b.node_id()]);
}

fn certified(ca: &DevCa, name: &str) -> (ActorSystem, Node) {
    let tls = ca.node(name, 1).unwrap().tls_config(ca).unwrap();
    let config = node_config(WsTransport::secure(tls.clone())).tls(tls);
    let id = config.certified_node_id().unwrap();
    let system = ActorSystem::builder().node_id(id).build().unwrap();
    let node = Node::start(&system, config).unwrap();
    (system, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certified_nodes_talk_over_wss_and_a_stranger_is_refused() {
    let ca = DevCa::generate().unwrap();
    let (_a, na) = certified(&ca, "a");
    let (b, nb) = certified(&ca, "b");
    let uri = nb.listen("wss://127.0.0.1:0").await.unwrap();
    assert!(uri.starts_with("wss://127.0.0.1:"), "{uri}");
    nb.publish(&twice(&b), "twice").unwrap();
    let remote: ActorRef<Twice> = na.resolve(&format!("{uri}/twice")).await.unwrap();
    assert_eq!(remote.ask(|r| Twice(50, r), T).await, Ok(100));
    // The id the certificate certifies, checked by the node handshake.
    assert_eq!(remote.id().node(), nb.id());

    // A node whose certificate another CA signed does not get in.
    let (_c, nc) = certified(&DevCa::generate().unwrap(), "c");
    let error = nc
        .resolve::<Twice>(&format!("{uri}/twice"))
        .await
        .expect_err("another CA");
    assert!(!error.to_string().is_empty());
    // The listener serves on.
    let again: ActorRef<Twice> = na.resolve(&format!("{uri}/twice")).await.unwrap();
    assert_eq!(again.ask(|r| Twice(1, r), T).await, Ok(2));
}

#[test]
fn per_core_mode_serves_from_every_thread_and_stops() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let system = runtime.block_on(async { ActorSystem::new() });
    let page = {
        let _entered = runtime.enter();
        system.spawn_fn(|req: HttpRequest, _ctx| {
            req.reply.send(Response::new(200, "per core"));
        })
    };
    let server = WebServer::new()
        .route(Method::Get, "/", page)
        .unwrap()
        .listen_per_core("127.0.0.1:0", 2)
        .unwrap();
    assert_eq!(server.threads(), 2);
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);
    runtime.block_on(async {
        // Each connection lands on one of the two listeners; all answer.
        for _ in 0..64 {
            let got = ask(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert_eq!((got.status, got.body.as_slice()), (200, &b"per core"[..]));
        }
    });
    server.stop();
    // Stopped: nobody listens on the port any more.
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// A port another server already serves is refused with
/// `ServeError::AddrInUse` naming it, whether that server is another
/// per-core one (`SO_REUSEPORT`, which would otherwise let the second one
/// start and take half the connections) or a plain listener; the first
/// serves on, and once it stops the port can be served again.
#[test]
fn a_per_core_server_refuses_a_port_already_served() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let system = runtime.block_on(async { ActorSystem::new() });
    let page = {
        let _entered = runtime.enter();
        system.spawn_fn(|req: HttpRequest, _ctx| {
            req.reply.send(Response::new(200, "first"));
        })
    };
    let site = WebServer::new().route(Method::Get, "/", page).unwrap();
    let first = site.clone().listen_per_core("127.0.0.1:0", 2).unwrap();
    let addr = first.local_addr();

    let second = WebServer::new().listen_per_core(&addr.to_string(), 2);
    match second {
        Err(ServeError::AddrInUse { addr: named }) => assert_eq!(named, addr),
        other => panic!("a second server on {addr}: {other:?}"),
    }
    let error = WebServer::new()
        .listen_per_core(&addr.to_string(), 1)
        .unwrap_err();
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
    // The first one has every connection.
    runtime.block_on(async {
        for _ in 0..32 {
            let got = ask(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert_eq!((got.status, got.body.as_slice()), (200, &b"first"[..]));
        }
    });

    // A plain listener (no SO_REUSEPORT) holds another port: refused too,
    // and so is a plain listen() on the per-core server's port.
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_addr = plain.local_addr().unwrap();
    assert!(matches!(
        WebServer::new().listen_per_core(&plain_addr.to_string(), 2),
        Err(ServeError::AddrInUse { addr: named }) if named == plain_addr
    ));
    let listened = runtime.block_on(WebServer::new().listen(&addr.to_string()));
    assert!(matches!(listened, Err(ServeError::AddrInUse { addr: named }) if named == addr));

    first.stop();
    let again = site.listen_per_core(&addr.to_string(), 2).unwrap();
    assert_eq!(again.local_addr(), addr);
    again.stop();
}
