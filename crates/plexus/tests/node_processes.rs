//! Multi-process tests: a `plexus node` child process per remote node, on
//! 127.0.0.1 (and a Unix socket), for each scheme; over `quic` with
//! certificates from PEM files, and a child whose certificate is from
//! another CA refused with the reason.
#![cfg(feature = "tls")]

mod common;
#[path = "../../plexus-remote/tests/common/udp_idle.rs"]
mod udp_idle;

use std::path::PathBuf;
use std::time::Duration;

use common::certified::certified_node;
use common::node_process::NodeProcess;
use common::service::{Counter, Total};
use plexus_core::{ActorRef, ActorSystem, AskError, ExitReason};
use plexus_remote::dev_certs::DevCa;
use plexus_remote::{Node, NodeConfig, ResolveError};
use plexus_transport::quic::QuicConfig;
use plexus_transport::tls::TlsConfig;
use udp_idle::transports_with_udp_idle;

const T: Duration = Duration::from_secs(10);

/// Starts a `plexus node` child listening on `listen` with `cookie`.
fn start_node(listen: &[&str], cookie: &str) -> NodeProcess {
    start_node_with(listen, cookie, &[])
}

/// As [`start_node`], with more arguments (`--tls-cert ...`).
fn start_node_with(listen: &[&str], cookie: &str, extra: &[&str]) -> NodeProcess {
    let mut args: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
    for l in listen {
        args.extend(["--listen".to_owned(), (*l).to_owned()]);
    }
    args.extend(["--cookie".to_owned(), cookie.to_owned()]);
    let node = NodeProcess::start(&args);
    assert_eq!(node.uris.len(), listen.len(), "plexus node did not start");
    node
}

fn local_config(cookie: &str) -> NodeConfig {
    // Short heartbeats (UDP) and idle timeout (QUIC) so a killed peer is
    // noticed within the test.
    NodeConfig::default()
        .cookie(cookie)
        .scheme(
            "udp",
            "udp / heartbeat(interval=100ms, acceptable_pause=100ms, min_std_dev=50ms) / slicing / delivery / ordering / batching",
        )
        .quic(QuicConfig {
            idle_timeout: Duration::from_millis(1_000),
            keep_alive: Duration::from_millis(200),
            ..QuicConfig::default()
        })
}

fn local_node(system: &ActorSystem, cookie: &str) -> Node {
    Node::start(system, local_config(cookie)).unwrap()
}

async fn full_cycle(scheme_listen: &str) {
    let system = ActorSystem::new();
    let node = local_node(&system, "proc-test");
    full_cycle_with(&system, &node, scheme_listen, &[]).await;
}

async fn full_cycle_with(system: &ActorSystem, node: &Node, scheme_listen: &str, extra: &[&str]) {
    let mut remote = start_node_with(&[scheme_listen], "proc-test", extra);
    let uri = format!("{}/counter", remote.uris[0]);

    // resolve, tell, ask
    let counter: ActorRef<Counter> = node.resolve(&uri).await.unwrap();
    for i in 1..=10 {
        counter.tell(Counter::Add(i));
    }
    assert_eq!(counter.ask(Counter::Get, T).await, Ok(55));

    // a ref inside a message: the remote actor tells our local actor
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = system.spawn_fn(move |t: Total, _ctx| {
        let _ = tx.send(t);
    });
    counter.tell(Counter::Report(sink));
    assert_eq!(
        tokio::time::timeout(T, rx.recv()).await.unwrap(),
        Some(Total(55))
    );

    // every resolve error
    match node
        .resolve::<Counter>(&format!("{}/nobody", remote.uris[0]))
        .await
    {
        Err(ResolveError::NoSuchName { .. }) => {}
        other => panic!("expected NoSuchName, got {other:?}"),
    }
    match node.resolve::<Total>(&uri).await {
        Err(ResolveError::WrongType {
            expected, actual, ..
        }) => {
            assert_eq!(expected, "plexus.cli.Total");
            assert_eq!(actual, "plexus.cli.Counter");
        }
        other => panic!("expected WrongType, got {other:?}"),
    }

    // kill -9: monitors see NodeDown, asks fail, the ref is dead
    let down = counter.monitor();
    let first_node = counter.ask(Counter::Whoami, T).await.unwrap();
    remote.kill9();
    let down = tokio::time::timeout(T, down)
        .await
        .expect("Down after kill -9");
    assert!(
        matches!(down.reason, ExitReason::NodeDown { .. }),
        "{:?}",
        down.reason
    );
    assert!(!counter.is_alive());
    assert!(counter.ask(Counter::Get, T).await.is_err());

    // restart on the same address: a new resolve reaches the new node
    let restarted = start_node_with(&[remote.uris[0].as_str()], "proc-test", extra);
    // It listens already (`start_node_with` returns once it printed its
    // URIs): the first resolve dials it, whatever the old link's state.
    let again: ActorRef<Counter> = node.resolve(&uri).await.expect("resolve after restart");
    assert_eq!(again.ask(Counter::Get, T).await, Ok(0));
    let second_node = again.ask(Counter::Whoami, T).await.unwrap();
    // With a certificate too: same certified part, new incarnation, so
    // refs to the old process's actors cannot reach the new ones.
    assert_ne!(first_node, second_node, "the restarted node has a new id");
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_resolve_tell_ask_refs_kill9_and_restart() {
    let port = free_port();
    full_cycle(&format!("tcp://127.0.0.1:{port}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uds_resolve_tell_ask_refs_kill9_and_restart() {
    let dir = std::env::temp_dir().join(format!("plexus-proc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("node.sock");
    let _ = std::fs::remove_file(&sock);
    full_cycle(&format!("uds://{}", sock.display())).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_resolve_tell_ask_refs_kill9_and_restart() {
    let port = free_port();
    full_cycle(&format!("udp://127.0.0.1:{port}")).await;
}

/// A dev CA and node certificates as PEM files in a fresh directory.
struct Certs {
    dir: PathBuf,
    ca: DevCa,
}

impl Certs {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("plexus-certs-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = DevCa::generate().unwrap();
        std::fs::write(dir.join("ca.pem"), ca.cert_pem()).unwrap();
        Self { dir, ca }
    }

    /// Writes `name.pem` and `name.key` signed by `signer` (this CA if
    /// `None`); returns the `plexus node` arguments to load them.
    fn node_args(&self, name: &str, signer: Option<&DevCa>) -> Vec<String> {
        let cert = signer.unwrap_or(&self.ca).node(name, 1).unwrap();
        let path = |ext: &str| self.dir.join(format!("{name}.{ext}"));
        std::fs::write(path("pem"), &cert.cert_pem).unwrap();
        std::fs::write(path("key"), &cert.key_pem).unwrap();
        let s = |p: PathBuf| p.display().to_string();
        vec![
            "--tls-cert".into(),
            s(path("pem")),
            "--tls-key".into(),
            s(path("key")),
            "--tls-ca".into(),
            s(self.dir.join("ca.pem")),
        ]
    }

    fn local_tls(&self, name: &str) -> TlsConfig {
        self.ca.node(name, 1).unwrap().tls_config(&self.ca).unwrap()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_resolve_tell_ask_refs_kill9_and_restart() {
    let certs = Certs::new("quic");
    let args = certs.node_args("child", None);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (system, node) = certified_node(local_config("proc-test").tls(certs.local_tls("local")));
    let port = free_udp_port();
    full_cycle_with(&system, &node, &format!("quic://127.0.0.1:{port}"), &args).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_node_with_a_certificate_from_another_ca_is_refused_with_the_reason() {
    let certs = Certs::new("rogue");
    let rogue = DevCa::generate().unwrap();
    let args = certs.node_args("child", Some(&rogue));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let remote = start_node_with(&["quic://127.0.0.1:0"], "proc-test", &args);
    let (_system, node) = certified_node(local_config("proc-test").tls(certs.local_tls("local")));
    let err = node
        .resolve::<Counter>(&format!("{}/counter", remote.uris[0]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("UnknownIssuer"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_mismatch_with_another_process_is_named() {
    let system = ActorSystem::new();
    let node = local_node(&system, "ours");
    let remote = start_node(&["tcp://127.0.0.1:0"], "theirs");
    let err = node
        .resolve::<Counter>(&format!("{}/counter", remote.uris[0]))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("handshake failed: cluster cookie mismatch"),
        "{text}"
    );
    assert!(
        text.starts_with(&format!("resolve {}", remote.uris[0])),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_of_a_dead_address_names_the_os_error() {
    let system = ActorSystem::new();
    let node = local_node(&system, "x");
    let port = free_port();
    let err = node
        .resolve::<Counter>(&format!("tcp://127.0.0.1:{port}/counter"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!(": connect tcp://127.0.0.1:{port}: ")),
        "{text}"
    );
    // Usually "Connection refused"; a parallel test may take the port for
    // a moment, and then it is a reset. Either way the OS error is named.
    assert!(text.contains("(os error "), "{text}");
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_held_for_a_node_restarted_behind_an_idle_link_reaches_no_new_actor() {
    // No heartbeat: the link closes as idle here after 2 s, the ref
    // stays alive, and the next send dials the address again.
    const SPEC: &str = "udp / slicing / delivery / ordering / batching";
    let system = ActorSystem::new();
    let node = Node::start(
        &system,
        NodeConfig::default()
            .cookie("proc-test")
            .scheme("udp", SPEC)
            .transports(transports_with_udp_idle(Duration::from_secs(2))),
    )
    .unwrap();
    let scheme = format!("udp={SPEC}");
    let listen = format!("udp://127.0.0.1:{}", free_udp_port());
    let mut remote = start_node_with(&[listen.as_str()], "proc-test", &["--scheme", &scheme]);
    let uri = format!("{}/counter", remote.uris[0]);
    let counter: ActorRef<Counter> = node.resolve(&uri).await.unwrap();
    let old_node = counter.ask(Counter::Whoami, T).await.unwrap();
    let down = counter.monitor();
    tokio::time::timeout(T, down).await.expect("closed as idle");
    assert!(counter.is_alive(), "an idle link leaves the ref alive");

    // The node restarts at the same address; its counter has the same
    // serial as the old one.
    remote.kill9();
    let restarted = start_node_with(&[listen.as_str()], "proc-test", &["--scheme", &scheme]);
    counter.tell(Counter::Add(5));
    match counter.ask(Counter::Whoami, T).await {
        Err(AskError::NodeUnreachable { node, .. }) => assert_eq!(node.as_u64(), old_node),
        other => panic!("expected NodeUnreachable, got {other:?}"),
    }
    assert!(!counter.is_alive(), "the old node is gone");
    // Nothing meant for the old counter reached the new one.
    let fresh: ActorRef<Counter> = node.resolve(&uri).await.unwrap();
    assert_eq!(fresh.ask(Counter::Get, T).await, Ok(0));
    assert_ne!(fresh.ask(Counter::Whoami, T).await.unwrap(), old_node);
    drop(restarted);
}
