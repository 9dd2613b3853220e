//! Multi-process tests of the secure transports, a `plexus node` child per
//! remote node: `tls` (mutual TLS; node ids bound to certificates) and
//! encrypted UDP (`udp / slicing / encryption / delivery / ordering`).
#![cfg(feature = "tls")]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::node_process::NodeProcess;
use common::service::{Counter, Total};
use plexus_core::{ActorRef, ActorSystem, NodeId};
use plexus_remote::dev_certs::{DevCa, NodeCert};
use plexus_remote::handshake::HandshakeError;
use plexus_remote::identity::certifies;
use plexus_remote::wire::RejectCode;
use plexus_remote::{LinkError, Node, NodeConfig, ResolveError};
use tokio::net::UdpSocket;

const T: Duration = Duration::from_secs(10);
const COOKIE: &str = "secure-proc";

/// A temporary directory of PEM files, removed when dropped.
struct CertDir(PathBuf);

impl CertDir {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("plexus-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the certificate directory");
        Self(dir)
    }

    fn write(&self, file: &str, pem: &str) -> String {
        let path = self.0.join(file);
        std::fs::write(&path, pem).expect("write PEM");
        path.display().to_string()
    }

    /// `plexus node` arguments presenting `cert` and trusting `trust`.
    fn tls_args(&self, name: &str, cert: &NodeCert, trust: &DevCa) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.write(&format!("{name}.pem"), &cert.cert_pem),
            "--tls-key".into(),
            self.write(&format!("{name}.key"), &cert.key_pem),
            "--tls-ca".into(),
            self.write(&format!("{name}-ca.pem"), &trust.cert_pem()),
        ]
    }
}

impl Drop for CertDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Our node: presents `cert`, trusts `ca`, on a system with the certified
/// id (or `claim`, to play the forger).
fn tls_node(ca: &DevCa, cert: &NodeCert, claim: Option<NodeId>) -> (ActorSystem, Node) {
    let tls = cert.tls_config(ca).expect("TLS config");
    let mut config = NodeConfig::default().cookie(COOKIE).tls(tls);
    let id = match claim {
        Some(id) => {
            config = config.danger_unchecked_identity_for_tests();
            id
        }
        None => config.certified_node_id().expect("certified id"),
    };
    let system = ActorSystem::builder().node_id(id).build().expect("system");
    let node = Node::start(&system, config).expect("start our node");
    (system, node)
}

fn tls_child(dir: &CertDir, cert: &NodeCert, trust: &DevCa, extra: &[&str]) -> NodeProcess {
    let mut a = args(&["--listen", "tls://127.0.0.1:0", "--cookie", COOKIE]);
    a.extend(dir.tls_args("child", cert, trust));
    a.extend(args(extra));
    NodeProcess::start(&a)
}

async fn resolve_error(node: &Node, child: &NodeProcess) -> ResolveError {
    node.resolve::<Counter>(&format!("{}/counter", child.uris[0]))
        .await
        .map(|_| ())
        .expect_err("the peer must be refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_resolve_tell_ask_across_processes_with_certified_ids() {
    let dir = CertDir::new("tls-ok");
    let ca = DevCa::generate().expect("CA");
    let child_cert = ca.node("child", 1).expect("child cert");
    let child = tls_child(&dir, &child_cert, &ca, &[]);
    let certified = child_cert.node_id().expect("child id");
    let child_id = u64::from_str_radix(&child.node, 16).expect("hex node id");
    assert!(
        certifies(certified, child_id),
        "the child runs as its certificate's id: {} for {certified:016x}",
        child.node
    );

    let (system, node) = tls_node(&ca, &ca.node("us", 1).expect("our cert"), None);
    let counter: ActorRef<Counter> = node
        .resolve(&format!("{}/counter", child.uris[0]))
        .await
        .expect("resolve over tls");
    assert_eq!(counter.id().node(), NodeId::from_u64(child_id));
    for i in 1..=10 {
        counter.tell(Counter::Add(i));
    }
    assert_eq!(counter.ask(Counter::Get, T).await, Ok(55));
    assert_eq!(counter.ask(Counter::Whoami, T).await, Ok(child_id));
    // A ref to our actor, used by the child over the same link.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = system.spawn_fn(move |t: Total, _ctx| {
        let _ = tx.send(t);
    });
    counter.tell(Counter::Report(sink));
    assert_eq!(
        tokio::time::timeout(T, rx.recv()).await,
        Ok(Some(Total(55)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_peers_with_untrusted_or_expired_certificates_are_refused_with_the_reason() {
    let dir = CertDir::new("tls-refused");
    let ca = DevCa::generate().expect("CA");
    let rogue = DevCa::generate().expect("another CA");
    let (_system, node) = tls_node(&ca, &ca.node("us", 1).expect("our cert"), None);

    // The child's certificate is from another CA: we refuse it.
    let untrusted = tls_child(&dir, &rogue.node("child", 1).expect("cert"), &ca, &[]);
    let e = resolve_error(&node, &untrusted).await.to_string();
    assert!(e.contains("invalid peer certificate: UnknownIssuer"), "{e}");
    drop(untrusted);

    // The child's certificate expired yesterday: we refuse it.
    let day = Duration::from_secs(86_400);
    let now = SystemTime::now();
    let expired = ca
        .node_valid("child", now - 2 * day, now - day)
        .expect("expired cert");
    let expired = tls_child(&dir, &expired, &ca, &[]);
    let e = resolve_error(&node, &expired).await.to_string();
    assert!(
        e.contains("invalid peer certificate: certificate expired"),
        "{e}"
    );
    drop(expired);

    // Our certificate is untrusted by the child (it trusts only the other
    // CA): it refuses us, and its TLS alert names the reason.
    let picky = tls_child(&dir, &ca.node("child", 1).expect("cert"), &rogue, &[]);
    let e = resolve_error(&node, &picky).await.to_string();
    assert!(e.contains("UnknownCA"), "{e}");
    drop(picky);

    // Our certificate expired: the child refuses it, saying so.
    let (_old, stale) = tls_node(
        &ca,
        &ca.node_valid("us", now - 2 * day, now - day).expect("cert"),
        None,
    );
    let healthy = tls_child(&dir, &ca.node("child", 1).expect("cert"), &ca, &[]);
    let e = resolve_error(&stale, &healthy).await.to_string();
    assert!(e.contains("CertificateExpired"), "{e}");
    // ... and keeps serving trusted nodes.
    let ok: ActorRef<Counter> = node
        .resolve(&format!("{}/counter", healthy.uris[0]))
        .await
        .expect("a trusted node is still served");
    assert_eq!(ok.ask(Counter::Get, T).await, Ok(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_forged_node_ids_are_refused_on_both_sides() {
    let dir = CertDir::new("tls-forged");
    let ca = DevCa::generate().expect("CA");
    let (_system, node) = tls_node(&ca, &ca.node("us", 1).expect("our cert"), None);

    // The child claims a node id its certificate does not certify.
    let child_cert = ca.node("child", 1).expect("cert");
    let forger = tls_child(
        &dir,
        &child_cert,
        &ca,
        &["--danger-claim-node-id", "00000000000000aa"],
    );
    assert_eq!(forger.node, "00000000000000aa");
    match resolve_error(&node, &forger).await {
        ResolveError::Link {
            source: LinkError::Handshake(HandshakeError::IdentityMismatch { claimed, certified }),
            ..
        } => {
            assert_eq!(claimed, NodeId::from_u64(0xaa));
            assert_eq!(
                certified,
                NodeId::from_u64(child_cert.node_id().expect("id"))
            );
        }
        e => panic!("expected an identity mismatch, got {e}"),
    }
    assert!(node.connected_nodes().is_empty());
    drop(forger);

    // We claim a forged id: the honest child refuses it and tells us why.
    let honest = tls_child(&dir, &child_cert, &ca, &[]);
    let us = ca.node("us", 1).expect("cert");
    let (_forged, forging) = tls_node(&ca, &us, Some(NodeId::from_u64(0xbb)));
    match resolve_error(&forging, &honest).await {
        ResolveError::Link {
            source: LinkError::Handshake(HandshakeError::Rejected { code, detail }),
            ..
        } => {
            assert_eq!(code, RejectCode::Identity);
            let certified = format!("{:016x}", us.node_id().expect("id"));
            assert!(detail.contains("node identity mismatch"), "{detail}");
            assert!(
                detail.contains("00000000000000bb") && detail.contains(&certified),
                "{detail}"
            );
        }
        e => panic!("expected a rejection for our identity, got {e}"),
    }
}

/// A UDP relay between our node and a child that records and alters what
/// passes: datagrams it captures can be replayed later, and while
/// `tamper` is set every datagram is first forwarded with its last byte
/// (in the AEAD tag) flipped.
struct Relay {
    socket: Arc<UdpSocket>,
    state: Arc<Mutex<RelayState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct RelayState {
    /// Our node's address (the relay's client).
    client: Option<SocketAddr>,
    capture: bool,
    tamper: bool,
    tampered: u64,
    /// Captured datagrams: (towards the child?, bytes).
    captured: Vec<(bool, Vec<u8>)>,
}

impl Relay {
    async fn start(server: SocketAddr) -> Self {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind relay"));
        let state = Arc::new(Mutex::new(RelayState::default()));
        let (s, st) = (socket.clone(), state.clone());
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            loop {
                let Ok((n, src)) = s.recv_from(&mut buf).await else {
                    return;
                };
                let datagram = buf[..n].to_vec();
                let (to, tampered) = {
                    let mut st = st.lock().expect("relay state");
                    let to_child = src != server;
                    if to_child {
                        st.client = Some(src);
                    }
                    let Some(to) = (if to_child { Some(server) } else { st.client }) else {
                        continue;
                    };
                    if st.capture {
                        st.captured.push((to_child, datagram.clone()));
                    }
                    let tampered = st.tamper.then(|| {
                        st.tampered += 1;
                        let mut t = datagram.clone();
                        *t.last_mut().expect("a datagram has bytes") ^= 0x01;
                        t
                    });
                    (to, tampered)
                };
                if let Some(t) = tampered {
                    let _ = s.send_to(&t, to).await;
                }
                let _ = s.send_to(&datagram, to).await;
            }
        });
        Self {
            socket,
            state,
            task,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.socket.local_addr().expect("relay address")
    }

    fn set(&self, capture: bool, tamper: bool) {
        let mut st = self.state.lock().expect("relay state");
        st.capture = capture;
        st.tamper = tamper;
    }

    /// Sends every captured datagram again, from the relay (so each
    /// arrives on the link it was captured from).
    async fn replay(&self, server: SocketAddr) -> usize {
        let (client, captured) = {
            let st = self.state.lock().expect("relay state");
            (st.client.expect("a client"), st.captured.clone())
        };
        for (to_child, d) in &captured {
            let to = if *to_child { server } else { client };
            self.socket.send_to(d, to).await.expect("replay");
        }
        captured.len()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn encrypted_spec() -> String {
    let psk = "5a".repeat(32);
    format!("udp / slicing / encryption(psk={psk}) / delivery / ordering")
}

fn peer_addr(uri: &str) -> SocketAddr {
    uri.split_once("://")
        .map_or(uri, |(_, a)| a)
        .parse()
        .expect("an IP address and port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_udp_across_processes_drops_and_counts_tampered_and_replayed_datagrams() {
    let spec = encrypted_spec();
    let child = NodeProcess::start(&args(&[
        "--listen",
        "eudp://127.0.0.1:0",
        "--cookie",
        COOKIE,
        "--scheme",
        &format!("eudp={spec}"),
    ]));
    let server = peer_addr(&child.uris[0]);
    let relay = Relay::start(server).await;
    let system = ActorSystem::new();
    let node = Node::start(
        &system,
        NodeConfig::default().cookie(COOKIE).scheme("eudp", spec),
    )
    .expect("start our node");

    // Resolve, tell, ask across processes (through the relay).
    let counter: ActorRef<Counter> = node
        .resolve(&format!("eudp://{}/counter", relay.addr()))
        .await
        .expect("resolve over encrypted udp");
    for i in 1..=10 {
        counter.tell(Counter::Add(i));
    }
    assert_eq!(counter.ask(Counter::Get, T).await, Ok(55));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = system.spawn_fn(move |t: Total, _ctx| {
        let _ = tx.send(t);
    });
    // Refreshed on drops only: none yet on a clean link.
    let before = node.link_stats()[0].stats.encryption.unwrap_or_default();

    // Tampered in flight: each datagram arrives first with a flipped byte,
    // then intact. Captured both ways for the replays below.
    relay.set(true, true);
    counter.tell(Counter::Add(1000));
    counter.tell(Counter::Report(sink));
    assert_eq!(
        tokio::time::timeout(T, rx.recv()).await,
        Ok(Some(Total(1055)))
    );
    assert_eq!(counter.ask(Counter::Get, T).await, Ok(1055));
    relay.set(false, false);

    // Replayed: every captured datagram again, both ways; then a round trip
    // that queues behind them on both sockets.
    let replayed = relay.replay(server).await;
    assert!(replayed > 0);
    assert_eq!(
        counter.ask(Counter::Get, T).await,
        Ok(1055),
        "a replayed tell counted twice"
    );
    assert!(rx.try_recv().is_err(), "a replayed Total was delivered");

    let stats = node.link_stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    let link = &stats[0];
    assert_eq!(link.scheme, "eudp");
    assert_eq!(link.peer, format!("udp://{}", relay.addr()));
    let enc = link.stats.encryption.expect("an encryption layer");
    let tampered_to_us = enc.bad_tag - before.bad_tag;
    let replayed_to_us = enc.replayed - before.replayed;
    let (tampered, captured_to_us) = {
        let st = relay.state.lock().expect("relay state");
        let to_us = st.captured.iter().filter(|(to_child, _)| !to_child).count();
        (st.tampered, to_us as u64)
    };
    assert!(tampered_to_us > 0 && tampered_to_us < tampered, "{enc:?}");
    assert_eq!(replayed_to_us, captured_to_us, "{enc:?}");
    assert!(
        link.stats.dropped >= tampered_to_us + replayed_to_us,
        "{link:?}"
    );
    assert_eq!(system.dead_letters().count(), 0);
}
