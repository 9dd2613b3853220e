//! A tour of Plexus: first the local runtime (ask, supervision, monitors,
//! narrowed refs, dead letters), then three nodes in this process talking
//! over real TCP and UDP sockets on 127.0.0.1 (publish, resolve by URI,
//! tell, ask, a ref inside a message, forged refs, precise errors, and a
//! node failure seen by a monitor), and last two nodes over mutual TLS with
//! a development CA made on the spot (node ids bound to certificates), and
//! a cluster of three nodes that sees one killed and rejoin, and finally
//! virtual actors: a cart by id that keeps its count when its member
//! leaves.
//!
//! Run with `cargo run --release --example demo`.

use std::sync::Arc;
use std::time::Duration;

use plexus::cluster::{Cluster, ClusterConfig, ClusterEvent, ClusterUpdate, MemberState};
use plexus::data::crdt::{GCounter, ORSet};
use plexus::data::node::Replication;
use plexus::data::{Consistency, Key, ReplicatorConfig};
use plexus::prelude::*;
use plexus::{Backoff, DeadLetterReason};
use serde::{Deserialize, Serialize};

#[path = "demo/lanes.rs"]
mod lanes;
#[path = "demo/sharding.rs"]
mod sharding;
#[path = "demo/web.rs"]
mod web;

const TIMEOUT: Duration = Duration::from_secs(1);

/// A bank account; it fails (panics) on an overdraft, and its supervisor
/// restarts it from a fresh state.
#[derive(Default)]
struct Account {
    balance: i64,
}

enum Bank {
    Deposit(i64),
    Withdraw(i64),
    Balance(ReplyTo<(i64, u32)>),
}

impl Actor for Account {
    type Msg = Bank;

    async fn started(&mut self, ctx: &mut Context<Bank>) {
        println!(
            "  account {} started (restart #{})",
            ctx.id(),
            ctx.restarts()
        );
    }

    async fn handle(&mut self, msg: Bank, ctx: &mut Context<Bank>) {
        match msg {
            Bank::Deposit(n) => self.balance += n,
            Bank::Withdraw(n) if n > self.balance => {
                panic!("overdraft: {n} > {}", self.balance)
            }
            Bank::Withdraw(n) => self.balance -= n,
            Bank::Balance(reply) => reply.send((self.balance, ctx.restarts())),
        }
    }
}

/// Watches other actors and reports what it sees.
struct Watchdog;

enum Watch {
    Monitor(ActorRef<Bank>),
}

impl Actor for Watchdog {
    type Msg = Watch;
    async fn handle(&mut self, Watch::Monitor(target): Watch, ctx: &mut Context<Watch>) {
        ctx.monitor(&target);
    }
    async fn on_down(&mut self, down: Down, _ctx: &mut Context<Watch>) {
        println!("  watchdog: {} is down ({})", down.id, down.reason);
    }
}

/// An event several actor types subscribe to, through narrowed refs.
#[derive(Clone, Copy)]
struct PriceChanged(u32);

enum Trader {
    Price(PriceChanged),
    Sync(ReplyTo<()>),
}
impl From<PriceChanged> for Trader {
    fn from(p: PriceChanged) -> Self {
        Trader::Price(p)
    }
}

enum Logger {
    Price(PriceChanged),
    Sync(ReplyTo<()>),
}
impl From<PriceChanged> for Logger {
    fn from(p: PriceChanged) -> Self {
        Logger::Price(p)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Panics are part of the tour; print them on one line.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        println!("  (a handler panicked: {msg})");
    }));
    let system = ActorSystem::new();
    println!("node {}", system.node_id());

    println!("\n1. ask: typed request and reply");
    let account = system
        .build(Account::default)
        .supervise(
            Supervision::on_failure()
                .backoff(Backoff::exponential(
                    Duration::from_millis(10),
                    Duration::from_millis(100),
                ))
                .limit(2, Duration::from_secs(5)),
        )
        .name("account")
        .spawn()?;
    account.tell(Bank::Deposit(100));
    account.tell(Bank::Withdraw(30));
    let (balance, _) = account.ask(Bank::Balance, TIMEOUT).await?;
    println!("  balance after +100 -30: {balance}");

    println!("\n2. supervision: a failure restarts the actor from fresh state, same ref");
    let watchdog = system.spawn(Watchdog);
    watchdog.tell(Watch::Monitor(account.clone()));
    account.tell(Bank::Withdraw(1_000));
    let (balance, restarts) = account.ask(Bank::Balance, TIMEOUT).await?;
    println!(
        "  after the overdraft: balance {balance}, restarts {restarts}, same id {}",
        account.id()
    );
    let looked_up = system.lookup::<Bank>("account")?;
    println!("  registry still finds it: {}", looked_up == account);

    println!("\n3. restart limit: two more failures within 5 s and the supervisor gives up");
    account.tell(Bank::Withdraw(1));
    account.tell(Bank::Withdraw(1));
    let down = account.monitor().await;
    println!("  account down: {}", down.reason);
    match account.ask(Bank::Balance, TIMEOUT).await {
        Err(e) => println!("  ask now fails at once: {e}"),
        Ok(_) => println!("  unexpected reply"),
    }
    tokio::task::yield_now().await; // let the watchdog print its Down

    println!("\n4. narrowed refs: one list of subscribers of different actor types");
    let mut seen = 0;
    let trader = system.spawn_fn(move |msg: Trader, _ctx| match msg {
        Trader::Price(PriceChanged(p)) => {
            seen += 1;
            println!("  trader sees price {p} (event #{seen})");
        }
        Trader::Sync(done) => done.send(()),
    });
    let logger = system.spawn_fn(|msg: Logger, _ctx| match msg {
        Logger::Price(PriceChanged(p)) => println!("  logger: price {p}"),
        Logger::Sync(done) => done.send(()),
    });
    let subscribers: Vec<ActorRef<PriceChanged>> = vec![trader.narrow(), logger.narrow()];
    for s in &subscribers {
        s.tell(PriceChanged(42));
    }
    trader.ask(Trader::Sync, TIMEOUT).await?;
    logger.ask(Logger::Sync, TIMEOUT).await?;

    println!("\n5. dead letters: a message to a stopped actor is counted, never lost silently");
    let mut letters = system.dead_letters().subscribe();
    trader.stop();
    trader.monitor().await;
    trader.tell(Trader::Price(PriceChanged(7)));
    let dl = letters.recv().await?;
    assert_eq!(dl.reason, DeadLetterReason::Stopped);
    println!(
        "  dead letter for {}: {} ({:?}); {} so far",
        dl.target,
        dl.message_type,
        dl.reason,
        system.dead_letters().count()
    );

    println!("\n6. shutdown: stop every actor gracefully");
    println!("  live actors before: {}", system.live_actors());
    system.shutdown().await;
    println!("  live actors after: {}", system.live_actors());

    remote_tour().await?;
    devices_tour().await?;
    lanes::tour().await?;
    web::tour().await?;
    sharding::tour(demo_cluster(Vec::new())).await
}

// ------------------------------------------------------------------ remote

/// Messages to a chat room; they cross nodes, so they have wire names.
#[derive(Serialize, Deserialize)]
enum Room {
    /// Post a line, signed by the sender's ref (a ref inside a message).
    Post(String, ActorRef<Line>),
    /// How many lines so far.
    Count(ReplyTo<usize>),
}
remote_message!(Room = "demo.Room");

/// A line the room sends back to the poster.
#[derive(Serialize, Deserialize)]
struct Line(String);
remote_message!(Line = "demo.Line");

#[derive(Default)]
struct ChatRoom {
    lines: usize,
}

impl Actor for ChatRoom {
    type Msg = Room;
    async fn handle(&mut self, msg: Room, ctx: &mut Context<Room>) {
        match msg {
            Room::Post(text, from) => {
                self.lines += 1;
                println!("  room on node {} got: {text:?}", ctx.system().node_id());
                from.tell(Line(format!("ack #{} for {text:?}", self.lines)));
            }
            Room::Count(reply) => reply.send(self.lines),
        }
    }
}

async fn remote_tour() -> Result<(), Box<dyn std::error::Error>> {
    println!("\n7. nodes: three actor systems in this process, linked by real sockets");
    let cfg = NodeConfig::default().cookie("demo-cookie");
    let (alpha_sys, beta_sys) = (ActorSystem::new(), ActorSystem::new());
    let alpha = Node::start(&alpha_sys, cfg.clone())?;
    let beta = Node::start(&beta_sys, cfg.clone())?;
    let beta_tcp = beta.listen("tcp://127.0.0.1:0").await?;
    let beta_udp = beta.listen("udp://127.0.0.1:0").await?;
    println!("  beta {} listens on {beta_tcp} and {beta_udp}", beta.id());
    let room = beta_sys.spawn(ChatRoom::default());
    beta.publish(&room, "room")?;

    println!("\n8. resolve by URI, then tell and ask across nodes (TCP, then UDP with reliability layers)");
    let (acks_tx, mut acks) = tokio::sync::mpsc::unbounded_channel();
    let me = alpha_sys.spawn_fn(move |Line(l), _ctx| {
        let _ = acks_tx.send(l);
    });
    for uri in [format!("{beta_tcp}/room"), format!("{beta_udp}/room")] {
        let remote_room: ActorRef<Room> = alpha.resolve(&uri).await?;
        println!("  resolved {uri} -> actor {}", remote_room.id());
        remote_room.tell(Room::Post(format!("hello over {}", &uri[..3]), me.clone()));
        println!(
            "  alpha got back: {}",
            acks.recv().await.unwrap_or_default()
        );
        println!(
            "  ask: the room has {} lines",
            remote_room.ask(Room::Count, TIMEOUT).await?
        );
    }

    println!("\n9. a forged ref: no round trip until first use");
    let forged: ActorRef<Room> = alpha.forge(&format!("{beta_tcp}/room"))?;
    forged.tell(Room::Post("sent through a forged ref".into(), me.clone()));
    println!(
        "  alpha got back: {}",
        acks.recv().await.unwrap_or_default()
    );

    println!("\n10. errors say what went wrong");
    if let Err(e) = alpha.resolve::<Room>(&format!("{beta_tcp}/lobby")).await {
        println!("  {e}");
    }
    if let Err(e) = alpha.resolve::<Line>(&format!("{beta_tcp}/room")).await {
        println!("  {e}");
    }
    let outsider_sys = ActorSystem::new();
    let outsider = Node::start(&outsider_sys, NodeConfig::default().cookie("wrong"))?;
    if let Err(e) = outsider.resolve::<Room>(&format!("{beta_tcp}/room")).await {
        println!("  {e}");
    }

    println!("\n11. node failure: beta shuts down, alpha's monitor sees it");
    let remote_room: ActorRef<Room> = alpha.resolve(&format!("{beta_tcp}/room")).await?;
    let down = remote_room.monitor();
    beta.shutdown().await;
    let down = tokio::time::timeout(Duration::from_secs(5), down).await?;
    println!("  Down from {}: {}", down.id, down.reason);
    tls_tour().await
}

async fn tls_tour() -> Result<(), Box<dyn std::error::Error>> {
    use plexus::dev_certs::DevCa;
    use plexus::transport::tls::TlsConfig;

    println!("\n12. tls: a dev CA and node certificates (what `plexus certs` writes)");
    let dir = std::env::temp_dir().join(format!("plexus-demo-certs-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ca = DevCa::generate()?;
    std::fs::write(dir.join("ca.pem"), ca.cert_pem())?;
    let mut configs = Vec::new();
    for name in ["gamma", "delta"] {
        let cert = ca.node(name, 1)?;
        std::fs::write(dir.join(format!("{name}.pem")), &cert.cert_pem)?;
        std::fs::write(dir.join(format!("{name}.key")), &cert.key_pem)?;
        let tls = TlsConfig::from_pem_files(
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
            dir.join("ca.pem"),
        )?;
        configs.push(NodeConfig::default().cookie("demo-cookie").tls(tls));
    }
    println!(
        "  wrote ca.pem, gamma.pem/.key, delta.pem/.key in {}",
        dir.display()
    );

    println!("\n13. the certificate fixes the node id; the system is created with it");
    let random = ActorSystem::new();
    if let Err(e) = Node::start(&random, configs[0].clone()) {
        println!("  on a random id: {e}");
    }
    let mut nodes = Vec::new();
    for cfg in configs {
        let id = cfg.certified_node_id().ok_or("a TLS config")?;
        let system = ActorSystem::builder().node_id(id).build()?;
        let node = Node::start(&system, cfg)?;
        nodes.push((system, node));
    }
    let (gamma_sys, gamma) = &nodes[0];
    let (delta_sys, delta) = &nodes[1];
    let delta_tls = delta.listen("tls://127.0.0.1:0").await?;
    println!(
        "  gamma is {}, delta is {} on {delta_tls}",
        gamma.id(),
        delta.id()
    );
    delta.publish(&delta_sys.spawn(ChatRoom::default()), "room")?;

    println!("\n14. resolve and ask over tls://: mutual TLS 1.3, identities checked");
    let room: ActorRef<Room> = gamma.resolve(&format!("{delta_tls}/room")).await?;
    println!("  resolved {delta_tls}/room -> actor {}", room.id());
    let (acks_tx, mut acks) = tokio::sync::mpsc::unbounded_channel();
    let me = gamma_sys.spawn_fn(move |Line(l), _ctx| {
        let _ = acks_tx.send(l);
    });
    room.tell(Room::Post("hello over tls".into(), me));
    println!(
        "  gamma got back: {}",
        acks.recv().await.unwrap_or_default()
    );
    println!(
        "  ask: the room has {} lines",
        room.ask(Room::Count, TIMEOUT).await?
    );

    println!("\n15. a node whose certificate another CA signed is refused");
    let rogue = DevCa::generate()?;
    let cfg = NodeConfig::default()
        .cookie("demo-cookie")
        .tls(rogue.node("mallory", 1)?.tls_config(&rogue)?);
    let mallory_sys = ActorSystem::builder()
        .node_id(cfg.certified_node_id().ok_or("a TLS config")?)
        .build()?;
    let mallory = Node::start(&mallory_sys, cfg)?;
    if let Err(e) = mallory.resolve::<Room>(&format!("{delta_tls}/room")).await {
        println!("  {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    cluster_tour().await
}

/// Settings for a demo on one machine: probes every 200 ms instead of 1 s,
/// so a failure is seen and resolved in a few seconds.
fn demo_cluster(seeds: Vec<String>) -> ClusterConfig {
    let mut c = ClusterConfig::default().name("demo").seeds(seeds);
    c.probe_interval = Duration::from_millis(200);
    c.probe_timeout = Duration::from_millis(100);
    c.gossip_interval = Duration::from_millis(50);
    c.stable_after = Duration::from_millis(800);
    c.suspicion_mult = 1.0;
    c.join_retry = Duration::from_millis(200);
    c
}

async fn cluster_member(
    port: u16,
    seeds: Vec<String>,
) -> Result<(ActorSystem, Node, Cluster, String), Box<dyn std::error::Error>> {
    let system = ActorSystem::new();
    let node = Node::start(&system, NodeConfig::default().cookie("demo-cookie"))?;
    let uri = node.listen(&format!("tcp://127.0.0.1:{port}")).await?;
    let cluster = Cluster::start(&node, &system, demo_cluster(seeds))?;
    Ok((system, node, cluster, uri))
}

async fn cluster_tour() -> Result<(), Box<dyn std::error::Error>> {
    println!("\n16. a cluster: three nodes join through a seed (gossip membership, phi accrual, SWIM + Lifeguard)");
    let (seed_sys, seed_node, seed, seed_uri) = cluster_member(0, Vec::new()).await?;
    // Shared with the management endpoint (17b).
    let seed = Arc::new(seed);
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    seed.subscribe(seed_sys.spawn_fn(move |u: ClusterUpdate, _ctx| {
        let _ = tx.send(u);
    }));
    let mut wait_for = async |what: &str, done: &dyn Fn(&ClusterUpdate) -> bool| {
        let found = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(u) = updates.recv().await {
                match &u.event {
                    ClusterEvent::MemberUp(m) => println!("  seed sees {m} up"),
                    ClusterEvent::MemberSuspected(m) => println!("  seed sees {m} suspected"),
                    ClusterEvent::MemberDowned { member, reason } => {
                        println!("  seed sees {member} down: {reason}")
                    }
                    _ => {}
                }
                if done(&u) {
                    return Some(u);
                }
            }
            None
        })
        .await;
        found
            .ok()
            .flatten()
            .ok_or_else(|| format!("gave up waiting for {what}"))
    };
    let (s2, n2, c2, _) = cluster_member(0, vec![seed_uri.clone()]).await?;
    let (s3, node3, c3, uri3) = cluster_member(0, vec![seed_uri.clone()]).await?;
    let up = wait_for("three members up", &|u| {
        u.members
            .iter()
            .filter(|m| m.state == MemberState::Up)
            .count()
            == 3
    })
    .await?;
    for key in ["alice", "bob"] {
        println!(
            "  the ring of {} members gives key {key:?} to {}",
            up.ring.members().len(),
            up.ring.owner(key.as_bytes()).map_or("nobody", |m| &**m)
        );
    }

    println!("\n17. replicated data: a counter and a set (delta-state CRDTs) on all three nodes");
    let data = ReplicatorConfig {
        cluster: "demo".into(),
        ..ReplicatorConfig::default()
    };
    let replicas = [
        Replication::start(&seed_node, &seed_sys, &seed, data.clone(), None)?,
        Replication::start(&n2, &s2, &c2, data.clone(), None)?,
        Replication::start(&node3, &s3, &c3, data, None)?,
    ];
    let visits = Key::<GCounter>::new("visits");
    let colours = Key::<ORSet<String>>::new("colours");
    for r in &replicas {
        // Every member registers the generic types it replicates, so it
        // can merge them before it uses a key of them itself.
        r.register::<ORSet<String>>();
    }
    for (r, colour) in replicas.iter().zip(["red", "green", "blue"]) {
        r.update(
            &visits,
            Consistency::Majority,
            Duration::from_secs(5),
            |v, me| v.increment(me, 1),
        )
        .await?;
        r.update(
            &colours,
            Consistency::Majority,
            Duration::from_secs(5),
            move |s, me| s.add(me, colour.to_string()),
        )
        .await?;
    }
    let read = Duration::from_secs(5);
    let total = replicas[1].get(&visits, Consistency::All, read).await?;
    let set = replicas[2].get(&colours, Consistency::All, read).await?;
    let mut set: Vec<String> = set.map(|s| s.iter().cloned().collect()).unwrap_or_default();
    set.sort();
    println!(
        "  each node added 1 and a colour at majority; read at all: visits = {}, colours = {set:?}",
        total.map_or(0, |t| t.value())
    );
    println!("\n17b. operate: the seed's management endpoint (what `plexus members`, probes and Prometheus use)");
    let settings =
        plexus::config::Config::from_toml("[management]\nbind = \"127.0.0.1:0\"\n")?.management;
    let at = plexus::management::Management::new(&settings)
        .node(&seed_node)
        .cluster(Arc::clone(&seed))
        .data(&replicas[0])
        .start(&seed_sys)
        .await?;
    for path in ["/ready", "/data/visits"] {
        let (status, body) = http_get(at, path).await?;
        println!("  GET {path}: {status} {}", body.trim());
    }
    let (_, members) = http_get(at, "/cluster/members").await?;
    println!(
        "  GET /cluster/members: {} members up",
        members.matches("\"state\":\"up\"").count()
    );
    drop(replicas);

    println!("\n18. one node is killed: the others suspect it, then down it (keep-majority)");
    drop(c3);
    node3.shutdown().await;
    wait_for("the killed member down", &|u| {
        matches!(&u.event, ClusterEvent::MemberDowned { member, .. } if *member.address == *uri3)
    })
    .await?;

    println!("\n19. it restarts on the same port and rejoins under a new incarnation");
    let port: u16 = uri3
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or("a port")?;
    let (_s4, _n4, _c4, _) = cluster_member(port, vec![seed_uri.clone()]).await?;
    wait_for(
        "the restarted member up",
        &|u| matches!(&u.event, ClusterEvent::MemberUp(m) if *m.address == *uri3),
    )
    .await?;
    Ok(())
}

// ----------------------------------------------------------------- devices

/// A process outside the cluster (a `DeviceHost` on a node that is not a
/// member) reports to the member the ring gives its device; that member
/// dies, and the device reports to the ring's next owner.
async fn devices_tour() -> Result<(), Box<dyn std::error::Error>> {
    use plexus_devices::device::DeviceHost;
    use plexus_devices::server::DeviceServer;
    use plexus_devices::{DeviceEvent, DeviceId, SessionConfig, TrackerConfig};

    println!("\n20. devices: a device outside the cluster reports to the member that owns it; that member dies");
    let mut members = Vec::new();
    let mut seeds: Vec<String> = Vec::new();
    let mut updates = None;
    for _ in 0..3 {
        let (system, node, cluster, uri) =
            cluster_member(0, seeds.first().cloned().into_iter().collect()).await?;
        if updates.is_none() {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
                let _ = tx.send(u);
            }));
            updates = Some(rx);
        }
        let server = DeviceServer::start(&node, &system, &cluster, TrackerConfig::default())?;
        seeds.push(uri);
        members.push(Some((system, node, cluster, server)));
    }
    let mut updates = updates.ok_or("subscribed")?;
    let ring = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(u) = updates.recv().await {
            if u.members
                .iter()
                .filter(|m| m.state == MemberState::Up)
                .count()
                == 3
            {
                return Some(u.ring);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .ok_or("gave up waiting for three members up")?;

    let device_system = ActorSystem::new();
    let device_node = Node::start(&device_system, NodeConfig::default().cookie("demo-cookie"))?;
    device_node.listen("tcp://127.0.0.1:0").await?;
    let host = DeviceHost::start(
        &device_node,
        &device_system,
        SessionConfig::default(),
        seeds.clone(),
    )?;
    let mut events = host.subscribe();
    let id = DeviceId(7);
    host.add(id, |_seq, values: &mut Vec<i64>| values.extend(1..=1000))?;
    let owners: Vec<String> = ring
        .owners(&id.key(), 3)
        .into_iter()
        .map(|m| m.to_string())
        .collect();
    // The server of each attach, once its first report request came.
    let mut reporting = async || -> Result<String, String> {
        let mut server = None;
        tokio::time::timeout(Duration::from_secs(30), async {
            while let Some((_, event)) = events.recv().await {
                match event {
                    DeviceEvent::Attached { server: s } => server = Some(s.to_string()),
                    DeviceEvent::ServerLost { .. } => {
                        println!("  {id}: its server is silent past the phi threshold; it registers again, naming it failed");
                    }
                    DeviceEvent::ReportRequested { .. } => return server.take(),
                    _ => {}
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .ok_or_else(|| format!("gave up waiting for {id} to report"))
    };
    let first = reporting().await?;
    println!(
        "  {id} registers through the seeds and reports to {} (first of its ring owners: {})",
        if seeds.contains(&first) {
            "a member"
        } else {
            "someone else"
        },
        if owners.first() == Some(&first) {
            "yes"
        } else {
            "no"
        }
    );

    let victim = seeds
        .iter()
        .position(|s| *s == first)
        .ok_or("the owner is a member")?;
    let killed = tokio::time::Instant::now();
    if let Some((_system, node, cluster, server)) = members[victim].take() {
        drop(server);
        drop(cluster);
        node.shutdown().await;
    }
    println!("  that member is killed");
    let second = reporting().await?;
    let bound = SessionConfig::default().liveness.detection_bound() + Duration::from_secs(1);
    println!(
        "  {id} reports to the ring's next owner (second of its ring owners: {}), within the detection bound + 1 s: {}",
        if owners.get(1) == Some(&second) { "yes" } else { "no" },
        if killed.elapsed() < bound { "yes" } else { "no" }
    );
    Ok(())
}

/// `GET path` from the management endpoint at `at`: status and body.
async fn http_get(
    at: std::net::SocketAddr,
    path: &str,
) -> Result<(u16, String), Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(at).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let (head, body) = raw.split_once("\r\n\r\n").ok_or("not HTTP")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    Ok((status, body.to_owned()))
}
