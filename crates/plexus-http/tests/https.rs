//! HTTPS for browsers (`WebServer::listen_https`): an actor's page, a
//! large file and keep-alive over TLS 1.3 and 1.2; plain HTTP, garbage and
//! a client without a common protocol refused and counted while the port
//! serves on; stalled handshakes that do not hold the listener; the
//! handshake timeout; per-core mode; certificate errors a user can act on.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{fresh_dir, read_response};
use plexus_core::ActorSystem;
use plexus_http::server::{HttpRequest, HttpsConfig, HttpsStats, WebServer};
use plexus_http::{Method, Response};
use plexus_remote::dev_certs::DevCa;
use rustls::{ClientConfig, ProtocolVersion, RootCertStore, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

const TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
const TLS12: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12];

/// Above the 16 KiB sendfile threshold: a file region, read into memory by
/// the TLS connection's sender.
fn big_file() -> Vec<u8> {
    (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect()
}

/// `/hello/:name` answered by an actor, `/files/big.bin` from disk.
fn site(system: &ActorSystem) -> WebServer {
    let hello = system.spawn_fn(|req: HttpRequest, _ctx| {
        let name = req.param("name").unwrap_or("?").to_owned();
        req.reply.send(Response::new(200, format!("hello, {name}")));
    });
    let dir = fresh_dir("https");
    std::fs::write(dir.join("big.bin"), big_file()).unwrap();
    WebServer::new()
        .route(Method::Get, "/hello/:name", hello)
        .unwrap()
        .static_dir("/files", &dir, 1 << 20)
        .unwrap()
}

/// A certificate for `localhost` and `127.0.0.1`, signed by `ca`.
fn https_config(ca: &DevCa) -> HttpsConfig {
    let cert = ca.node("localhost", 1).unwrap();
    HttpsConfig::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).unwrap()
}

/// A client trusting `ca` only, offering `h2` and `http/1.1` as browsers
/// do.
fn client(ca: &DevCa, versions: &[&'static SupportedProtocolVersion]) -> TlsConnector {
    client_offering(ca, versions, &[b"h2", b"http/1.1"])
}

fn client_offering(
    ca: &DevCa,
    versions: &[&'static SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.cert_pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

async fn connect(addr: SocketAddr, client: &TlsConnector) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    client.connect(name, tcp).await.unwrap()
}

async fn get<S>(stream: &mut S, path: &str) -> common::Got
where
    S: AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    read_response(stream, &mut Vec::new()).await.unwrap()
}

/// Reads until the server closes (a reset counts as closed).
async fn until_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(1..) = stream.read(&mut buf).await {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_gets_an_actors_page_and_a_large_file_on_one_connection() {
    let system = ActorSystem::new();
    let ca = DevCa::generate().unwrap();
    let https = https_config(&ca);
    let handshakes = https.totals();
    let server = site(&system);
    let requests = server.totals();
    let addr = server.listen_https("127.0.0.1:0", https).await.unwrap();

    let mut tls = connect(addr, &client(&ca, TLS13)).await;
    let (_, session) = tls.get_ref();
    assert_eq!(session.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(session.protocol_version(), Some(ProtocolVersion::TLSv1_3));
    let page = get(&mut tls, "/hello/tls").await;
    assert_eq!(
        (page.status, page.body.as_slice()),
        (200, &b"hello, tls"[..])
    );
    // Keep-alive: the same connection, a file region read for TLS.
    let big = get(&mut tls, "/files/big.bin").await;
    assert_eq!(big.status, 200);
    assert_eq!(big.body.len(), 1 << 20);
    assert!(big.body == big_file(), "the large file arrives intact");

    assert_eq!(
        handshakes.snapshot(),
        HttpsStats {
            handshakes: 1,
            ..HttpsStats::default()
        }
    );
    assert_eq!(requests.snapshot().requests, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_clients_are_served() {
    let system = ActorSystem::new();
    let ca = DevCa::generate().unwrap();
    let addr = site(&system)
        .listen_https("127.0.0.1:0", https_config(&ca))
        .await
        .unwrap();
    let mut tls = connect(addr, &client(&ca, TLS12)).await;
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_2)
    );
    let page = get(&mut tls, "/hello/twelve").await;
    assert_eq!(
        (page.status, page.body.as_slice()),
        (200, &b"hello, twelve"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_and_failed_handshakes_are_refused_counted_and_the_port_serves_on() {
    let system = ActorSystem::new();
    let ca = DevCa::generate().unwrap();
    let https = https_config(&ca);
    let handshakes = https.totals();
    let addr = site(&system)
        .listen_https("127.0.0.1:0", https)
        .await
        .unwrap();

    // Plain HTTP: told to use https://, then closed.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    let refused = get(&mut plain, "/hello/plain").await;
    assert_eq!(refused.status, 400);
    assert!(
        String::from_utf8_lossy(&refused.body).contains("https://"),
        "{refused:?}"
    );
    until_closed(&mut plain).await;

    // Neither HTTP nor TLS: rustls refuses it.
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    garbage.write_all(&[0u8; 64]).await.unwrap();
    until_closed(&mut garbage).await;

    // A client offering no protocol the server speaks (ALPN h2 only).
    let h2_only = client_offering(&ca, TLS13, &[b"h2"]);
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let Err((error, mut tcp)) = h2_only.connect(name, tcp).into_fallible().await else {
        panic!("an h2-only client got a session");
    };
    assert!(
        error.to_string().contains("NoApplicationProtocol"),
        "{error}"
    );
    until_closed(&mut tcp).await;

    // Each was counted before its connection closed; the port serves on.
    assert_eq!(
        handshakes.snapshot(),
        HttpsStats {
            failed: 2,
            plain_http: 1,
            ..HttpsStats::default()
        }
    );
    let mut tls = connect(addr, &client(&ca, TLS13)).await;
    assert_eq!(get(&mut tls, "/hello/after").await.status, 200);
    assert_eq!(handshakes.snapshot().handshakes, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_do_not_hold_the_listener() {
    let system = ActorSystem::new();
    let ca = DevCa::generate().unwrap();
    // Long enough that a listener held by the stalled clients would never
    // get to the third; three slots, one for each.
    let https = https_config(&ca)
        .handshake_timeout(Duration::from_secs(600))
        .max_handshakes(3);
    let handshakes = https.totals();
    let addr = site(&system)
        .listen_https("127.0.0.1:0", https)
        .await
        .unwrap();

    // One says nothing; one starts a TLS record and stops.
    let _silent = TcpStream::connect(addr).await.unwrap();
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(&[22, 3, 1]).await.unwrap();

    let mut tls = connect(addr, &client(&ca, TLS13)).await;
    let page = get(&mut tls, "/hello/meanwhile").await;
    assert_eq!(
        (page.status, page.body.as_slice()),
        (200, &b"hello, meanwhile"[..])
    );
    assert_eq!(
        handshakes.snapshot(),
        HttpsStats {
            handshakes: 1,
            ..HttpsStats::default()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_past_the_timeout_are_dropped_and_counted() {
    let system = ActorSystem::new();
    let ca = DevCa::generate().unwrap();
    let https = https_config(&ca).handshake_timeout(Duration::from_millis(50));
    let handshakes = https.totals();
    let addr = site(&system)
        .listen_https("127.0.0.1:0", https)
        .await
        .unwrap();

    let mut silent = TcpStream::connect(addr).await.unwrap();
    until_closed(&mut silent).await;
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(&[22, 3, 1]).await.unwrap();
    until_closed(&mut partial).await;

    assert_eq!(
        handshakes.snapshot(),
        HttpsStats {
            timed_out: 2,
            ..HttpsStats::default()
        }
    );
}

#[test]
fn per_core_https_serves_from_every_thread_and_stops() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let system = runtime.block_on(async { ActorSystem::new() });
    let server = {
        let _entered = runtime.enter();
        site(&system)
    };
    let ca = DevCa::generate().unwrap();
    let https = https_config(&ca);
    let handshakes = https.totals();
    let server = server
        .listen_https_per_core("127.0.0.1:0", 2, https)
        .unwrap();
    assert_eq!(server.threads(), 2);
    let addr = server.local_addr();
    runtime.block_on(async {
        let client = client(&ca, TLS13);
        // Each connection lands on one of the two listeners; all answer.
        for _ in 0..16 {
            let mut tls = connect(addr, &client).await;
            assert_eq!(get(&mut tls, "/hello/core").await.status, 200);
        }
    });
    assert_eq!(handshakes.snapshot().handshakes, 16);
    server.stop();
    // Stopped: nobody listens on the port any more.
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[test]
fn certificate_errors_name_the_file_and_the_cause() {
    let ca = DevCa::generate().unwrap();
    let (one, other) = (
        ca.node("localhost", 1).unwrap(),
        ca.node("localhost", 1).unwrap(),
    );
    let dir = fresh_dir("https-certs");
    let (cert, key, other_key) = (
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("other.key"),
    );
    std::fs::write(&cert, &one.cert_pem).unwrap();
    std::fs::write(&key, &one.key_pem).unwrap();
    std::fs::write(&other_key, &other.key_pem).unwrap();
    assert!(HttpsConfig::from_pem_files(&cert, &key).is_ok());

    let missing = dir.join("missing.pem");
    let error = HttpsConfig::from_pem_files(&missing, &key).unwrap_err();
    let expected = format!("load HTTPS certificate from {}: ", missing.display());
    assert!(error.to_string().starts_with(&expected), "{error}");

    // The key given as the certificate.
    let error = HttpsConfig::from_pem_files(&key, &cert).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "load HTTPS certificate from {}: no PEM certificate found",
            key.display()
        )
    );

    let error = HttpsConfig::from_pem_files(&cert, &other_key).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "HTTPS certificate and private key ({}, {}) refused: \
             the private key is not the certificate's",
            cert.display(),
            other_key.display()
        )
    );

    let error = HttpsConfig::from_pem(one.cert_pem.as_bytes(), b"").unwrap_err();
    assert_eq!(
        error.to_string(),
        "load HTTPS private key: no PEM private key found"
    );
}
