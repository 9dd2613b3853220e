//! Multi-process tests: a `plexus-node` child process per remote node, on
//! 127.0.0.1 (and a Unix socket), for each scheme.

mod common;

use std::time::Duration;

use common::process::NodeProcess;
use common::service::{Counter, Total};
use plexus_core::{ActorRef, ActorSystem, ExitReason};
use plexus_remote::{Node, NodeConfig, ResolveError};

const T: Duration = Duration::from_secs(10);

/// Starts a `plexus-node` child listening on `listen` with `cookie`.
fn start_node(listen: &[&str], cookie: &str) -> NodeProcess {
    let mut args = Vec::new();
    for l in listen {
        args.extend(["--listen".to_owned(), (*l).to_owned()]);
    }
    args.extend(["--cookie".to_owned(), cookie.to_owned()]);
    let node = NodeProcess::start(&args);
    assert_eq!(node.uris.len(), listen.len(), "plexus-node did not start");
    node
}

fn local_node(system: &ActorSystem, cookie: &str) -> Node {
    // Short heartbeats so a killed UDP peer is noticed within the test.
    let cfg = NodeConfig::default().cookie(cookie).scheme(
        "udp",
        "udp / heartbeat(interval=100ms, acceptable_pause=100ms, min_std_dev=50ms) / slicing / delivery / ordering",
    );
    Node::start(system, cfg).unwrap()
}

async fn full_cycle(scheme_listen: &str) {
    let system = ActorSystem::new();
    let node = local_node(&system, "proc-test");
    let mut remote = start_node(&[scheme_listen], "proc-test");
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
            assert_eq!(expected, "plexus.test.Total");
            assert_eq!(actual, "plexus.test.Counter");
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
    let restarted = start_node(&[remote.uris[0].as_str()], "proc-test");
    let again: ActorRef<Counter> = tokio::time::timeout(T, async {
        loop {
            match node.resolve::<Counter>(&uri).await {
                Ok(r) => break r,
                Err(e) => {
                    eprintln!("resolve after restart: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
    .await
    .expect("resolve after restart");
    assert_eq!(again.ask(Counter::Get, T).await, Ok(0));
    let second_node = again.ask(Counter::Whoami, T).await.unwrap();
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
    assert!(text.contains("cannot connect"), "{text}");
    // Usually "Connection refused"; a parallel test may take the port for
    // a moment, and then it is a reset. Either way the OS error is named.
    assert!(text.contains("(os error "), "{text}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
