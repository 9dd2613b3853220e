//! The `tls` transport over real sockets, with certificates made in-process
//! by rcgen and loaded from PEM files: ordered exchange, and refusal of
//! peers without a certificate, with a certificate from another CA, with an
//! expired certificate, and of plain TCP bytes; each end learns the node id
//! the other's certificate certifies.
#![cfg(feature = "tls")]

mod certs;
mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use certs::{assert_refused_after_handshake, new_ca, node_pem, Ca};
use common::exchange;
use plexus_net::StackSpec;
use plexus_transport::tls::{self, TlsConfig, TlsListener};
use plexus_transport::{AcceptError, BindError, Link, LinkConfig};
use tokio::io::AsyncWriteExt;

fn spec() -> StackSpec {
    "tls / framing".parse().expect("valid spec")
}

/// Writes `name.pem`, `name.key` (signed by `ca`) and `ca.pem` into `dir`,
/// and loads them; `expired` puts the validity in the past.
fn node(dir: &Path, name: &str, ca: &Ca, trusted: &Ca, expired: bool) -> TlsConfig {
    let (cert, key) = node_pem(name, ca, expired);
    let cert_path = dir.join(format!("{name}.pem"));
    let key_path = dir.join(format!("{name}.key"));
    let ca_path = dir.join(format!("{name}-ca.pem"));
    std::fs::write(&cert_path, cert).expect("write cert");
    std::fs::write(&key_path, key).expect("write key");
    std::fs::write(&ca_path, trusted.cert.pem()).expect("write ca");
    TlsConfig::from_pem_files(&cert_path, &key_path, &ca_path)
        .expect("load TLS config")
        .handshake_timeout(Duration::from_secs(5))
}

async fn listener(tls: &TlsConfig) -> TlsListener {
    TlsListener::bind(
        &spec(),
        "127.0.0.1:0".parse().expect("addr"),
        tls,
        LinkConfig::default(),
    )
    .await
    .expect("bind")
}

async fn connect(addr: SocketAddr, tls: &TlsConfig) -> Result<Link, String> {
    tls::connect(&spec(), addr, "localhost", tls, LinkConfig::default())
        .await
        .map_err(|e| e.to_string())
}

fn handshake_error(r: Result<Link, AcceptError>) -> String {
    match r {
        Err(e @ AcceptError::Handshake { .. }) => e.to_string(),
        Err(e) => panic!("expected a handshake error, got {e}"),
        Ok(_) => panic!("expected a handshake error, got a link"),
    }
}

/// A client and a server link between two nodes of one CA (client, server,
/// and their configurations).
async fn trusted_pair(dir: &Path) -> (Link, Link, TlsConfig, TlsConfig) {
    let ca = new_ca("test CA");
    let server_tls = node(dir, "n1", &ca, &ca, false);
    let client_tls = node(dir, "n2", &ca, &ca, false);
    let listener = listener(&server_tls).await;
    let client = connect(listener.local_addr(), &client_tls)
        .await
        .expect("connect");
    let server = listener.accept().await.expect("accept");
    (client, server, client_tls, server_tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_links_exchange_10k_mixed_messages_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (client, server, client_tls, server_tls) = trusted_pair(dir.path()).await;
    // Each end has the certificate the other presented.
    let presented = |l: &Link| l.peer_identity().map(|i| i.certificate.clone());
    assert_eq!(presented(&client).as_ref(), Some(server_tls.certificate()));
    assert_eq!(presented(&server).as_ref(), Some(client_tls.certificate()));
    assert_ne!(server_tls.certificate(), client_tls.certificate());
    assert!(client.peer_certificate().is_some());
    exchange(client, server, 7, 64 << 10, 10_000, true).await;
}

/// Request and reply, one at a time: each reply is sealed and written by
/// the replying task itself (the link's driver is idle), large ones only
/// in part, the rest by the driver. Every reply arrives whole, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_replies_of_any_size_arrive_whole_and_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut client, mut server, _, _) = trusted_pair(dir.path()).await;
    let reply = |i: u32| -> Vec<u8> {
        let len = [3usize, 900, 70_000, 3 << 20][i as usize % 4];
        (0..len).map(|j| (j as u32 ^ i) as u8).collect()
    };
    let echo = tokio::spawn(async move {
        while let Ok(request) = server.recv_message().await {
            let i = u32::from_le_bytes(request[..4].try_into().expect("4 bytes"));
            server.send(reply(i).into()).await.expect("reply");
        }
    });
    for i in 0..200u32 {
        client.try_send_copy(&i.to_le_bytes()).expect("request");
        let got = client.recv_message().await.expect("reply");
        assert!(got == reply(i), "reply {i} arrives whole");
    }
    drop(client);
    echo.await.expect("echo task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_certificate_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = new_ca("test CA");
    let server_tls = node(dir.path(), "n1", &ca, &ca, false);
    let listener = listener(&server_tls).await;

    // A rustls client that trusts the CA but has no certificate.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.der().clone()).expect("add root");
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .expect("TLS 1.3")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(listener.local_addr())
        .await
        .expect("tcp connect");
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    let client = connector.connect(name, tcp).await;
    let error = handshake_error(listener.accept().await);
    assert!(error.contains("no certificate"), "{error}");
    assert!(error.starts_with("accept tls://127.0.0.1:"), "{error}");
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_with_certificate_from_another_ca_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = new_ca("test CA");
    let rogue = new_ca("rogue CA");
    let server_tls = node(dir.path(), "n1", &ca, &ca, false);
    // Trusts the right CA, but its own certificate is from the rogue one.
    let client_tls = node(dir.path(), "n2", &rogue, &ca, false);
    let listener = listener(&server_tls).await;
    match connect(listener.local_addr(), &client_tls).await {
        Ok(link) => assert_refused_after_handshake(link, Duration::from_secs(5)).await,
        Err(e) => panic!("the client's side of the handshake should pass: {e}"),
    }
    let error = handshake_error(listener.accept().await);
    assert!(error.contains("UnknownIssuer"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_certificate_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = new_ca("test CA");
    let server_tls = node(dir.path(), "n1", &ca, &ca, true);
    let client_tls = node(dir.path(), "n2", &ca, &ca, false);
    let listener = listener(&server_tls).await;
    let error = connect(listener.local_addr(), &client_tls)
        .await
        .expect_err("an expired server certificate is refused");
    assert!(error.contains("TLS handshake failed"), "{error}");
    assert!(error.to_lowercase().contains("expired"), "{error}");
    // The server saw the client's alert.
    handshake_error(listener.accept().await);

    // And an expired client certificate is refused by the server.
    let server_tls = node(dir.path(), "n3", &ca, &ca, false);
    let client_tls = node(dir.path(), "n4", &ca, &ca, true);
    let listener = self::listener(&server_tls).await;
    if let Ok(link) = connect(listener.local_addr(), &client_tls).await {
        assert_refused_after_handshake(link, Duration::from_secs(5)).await;
    }
    let error = handshake_error(listener.accept().await);
    assert!(error.to_lowercase().contains("expired"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_name_mismatch_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = new_ca("test CA");
    let server_tls = node(dir.path(), "n1", &ca, &ca, false);
    let client_tls = node(dir.path(), "n2", &ca, &ca, false);
    let listener = listener(&server_tls).await;
    let error = tls::connect(
        &spec(),
        listener.local_addr(),
        "n9",
        &client_tls,
        LinkConfig::default(),
    )
    .await
    .expect_err("wrong name refused")
    .to_string();
    assert!(error.contains("not valid for name"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_tcp_bytes_are_refused_and_the_listener_keeps_serving() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = new_ca("test CA");
    let server_tls = node(dir.path(), "n1", &ca, &ca, false);
    let client_tls = node(dir.path(), "n2", &ca, &ca, false);
    let listener = listener(&server_tls).await;

    let mut plain = tokio::net::TcpStream::connect(listener.local_addr())
        .await
        .expect("tcp connect");
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff garbage")
        .await
        .expect("write garbage");
    let error = handshake_error(listener.accept().await);
    assert!(error.contains("handshake with 127.0.0.1:"), "{error}");

    let mut client = connect(listener.local_addr(), &client_tls)
        .await
        .expect("connect after garbage");
    let mut server = listener.accept().await.expect("accept after garbage");
    client
        .send(Bytes::from_static(b"still here"))
        .await
        .expect("send");
    assert_eq!(server.recv_message().await.expect("recv"), "still here");
    server.send(Bytes::from_static(b"yes")).await.expect("send");
    assert_eq!(client.recv_message().await.expect("recv"), "yes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_spec_is_required() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = new_ca("test CA");
    let tls = node(dir.path(), "n1", &ca, &ca, false);
    let tcp_spec: StackSpec = "tcp / framing".parse().expect("spec");
    let error = TlsListener::bind(
        &tcp_spec,
        "127.0.0.1:0".parse().expect("addr"),
        &tls,
        LinkConfig::default(),
    )
    .await
    .expect_err("wrong spec refused");
    assert!(
        matches!(&error, BindError::Spec { source, .. }
            if matches!(**source, plexus_net::SpecError::WrongTransport { .. })),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("is for transport `tcp`, not `tls`"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peer_times_out_without_holding_up_others() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = new_ca("test CA");
    let server_tls =
        node(dir.path(), "n1", &ca, &ca, false).handshake_timeout(Duration::from_millis(300));
    let client_tls = node(dir.path(), "n2", &ca, &ca, false);
    let listener = listener(&server_tls).await;

    // Connects and never says anything.
    let _silent = tokio::net::TcpStream::connect(listener.local_addr())
        .await
        .expect("tcp connect");
    // A good client is served while the silent one still holds its slot.
    let client = connect(listener.local_addr(), &client_tls)
        .await
        .expect("connect next to a silent peer");
    let mut server = listener.accept().await.expect("good client first");
    client.send(Bytes::from_static(b"ok")).await.expect("send");
    assert_eq!(server.recv_message().await.expect("recv"), "ok");

    let error = handshake_error(listener.accept().await);
    assert!(error.contains("no TLS handshake within"), "{error}");
}
