//! Device states replicated through `plexus-data`: three cluster members
//! in one process, each a device server with a `ReplicatedDirectory`, and
//! a device on a node that is not a member. The record its server writes
//! is read on the other servers.

use std::sync::Arc;
use std::time::Duration;

use plexus_cluster::{Cluster, ClusterConfig, ClusterUpdate, MemberState};
use plexus_core::ActorSystem;
use plexus_data::node::Replication;
use plexus_data::ReplicatorConfig;
use plexus_devices::device::DeviceHost;
use plexus_devices::replicated::ReplicatedDirectory;
use plexus_devices::server::DeviceServer;
use plexus_devices::{
    DeviceDirectory, DeviceEvent, DeviceId, DeviceRecord, DeviceStatus, SessionConfig,
    TrackerConfig,
};
use plexus_remote::{Node, NodeConfig};
use tokio::sync::mpsc;

/// Turns a hang into a failure; the assertions wait for events.
const GUARD: Duration = Duration::from_secs(60);

fn quick(seeds: Vec<String>) -> ClusterConfig {
    let mut c = ClusterConfig::default().name("devices").seeds(seeds);
    c.probe_interval = Duration::from_millis(200);
    c.probe_timeout = Duration::from_millis(100);
    c.gossip_interval = Duration::from_millis(50);
    c.join_retry = Duration::from_millis(200);
    c
}

struct Server {
    _node: Node,
    _cluster: Cluster,
    _replication: Arc<Replication>,
    devices: DeviceServer<ReplicatedDirectory>,
    uri: String,
    ups: mpsc::UnboundedReceiver<ClusterUpdate>,
}

async fn server(system: &ActorSystem, seeds: Vec<String>) -> Server {
    let node = Node::start(system, NodeConfig::default().cookie("devices")).expect("node starts");
    let uri = node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster = Cluster::start(&node, system, quick(seeds)).expect("cluster starts");
    let (tx, ups) = mpsc::unbounded_channel();
    cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
        let _ = tx.send(u);
    }));
    let config = ReplicatorConfig {
        cluster: "devices".into(),
        gossip_interval: Duration::from_millis(200),
        ..ReplicatorConfig::default()
    };
    let replication = Arc::new(
        Replication::start(&node, system, &cluster, config, None).expect("replicator starts"),
    );
    let directory = ReplicatedDirectory::start(system, Arc::clone(&replication));
    let tracker = TrackerConfig {
        record_interval: Duration::from_millis(200),
        ..TrackerConfig::default()
    };
    let devices = DeviceServer::start_with(&node, system, &cluster, tracker, directory)
        .expect("device server starts");
    Server {
        _node: node,
        _cluster: cluster,
        _replication: replication,
        devices,
        uri,
        ups,
    }
}

/// Waits until `s`'s cluster lists `n` members up.
async fn until_up(s: &mut Server, n: usize) {
    loop {
        let u = s.ups.recv().await.expect("subscribed");
        let up = u.members.iter().filter(|m| m.state == MemberState::Up);
        if up.count() == n {
            return;
        }
    }
}

/// Waits until `s`'s directory holds a record of `device` that `wanted`
/// accepts, woken by each merged state.
async fn until_record(
    s: &Server,
    device: DeviceId,
    wanted: impl Fn(&DeviceRecord) -> bool,
) -> DeviceRecord {
    let mut merged = s.devices.directory().merged();
    loop {
        if let Some(r) = s.devices.directory().get(device).filter(|r| wanted(r)) {
            return r;
        }
        merged.changed().await.expect("the directory runs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_devices_state_written_by_its_server_is_read_on_the_others() {
    tokio::time::timeout(GUARD, run()).await.expect("no hang");
}

async fn run() {
    let systems = [ActorSystem::new(), ActorSystem::new(), ActorSystem::new()];
    let mut a = server(&systems[0], Vec::new()).await;
    let mut b = server(&systems[1], vec![a.uri.clone()]).await;
    let mut c = server(&systems[2], vec![a.uri.clone()]).await;
    for s in [&mut a, &mut b, &mut c] {
        until_up(s, 3).await;
    }
    let servers = [a, b, c];

    let device_system = ActorSystem::new();
    let node = Node::start(&device_system, NodeConfig::default().cookie("devices")).unwrap();
    node.listen("tcp://127.0.0.1:0").await.unwrap();
    let seeds = servers.iter().map(|s| s.uri.clone()).collect();
    let host = DeviceHost::start(&node, &device_system, SessionConfig::default(), seeds).unwrap();
    let mut events = host.subscribe();
    let id = DeviceId(42);
    host.add(id, |_seq, values: &mut Vec<i64>| values.extend(1..=10))
        .unwrap();
    let owner = loop {
        if let Some((_, DeviceEvent::Attached { server })) = events.recv().await {
            break server;
        }
    };
    let o = servers
        .iter()
        .position(|s| **s.devices.address() == *owner)
        .expect("attached to one of the servers");

    // Every other server reads the owner's record: up, held by the owner,
    // with reports counted (written every record_interval).
    for (i, s) in servers.iter().enumerate() {
        let r = until_record(s, id, |r| r.status == DeviceStatus::Up && r.reports > 0).await;
        assert_eq!(r.server, owner, "server {i} reads the owner's record");
        assert_eq!(r.total, 55 * r.reports as i64, "server {i}");
        if i != o {
            assert!(
                s.devices.stats().devices == 0,
                "server {i} does not hold the device itself"
            );
        }
    }

    // The owner's metrics (issue 31): the device tracked, its reports
    // counted; through a debugging recorder installed around the call.
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || servers[o].devices.record_metrics());
    let recorded: Vec<(String, metrics_util::debugging::DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(k, _, _, v)| (k.key().name().to_owned(), v))
        .collect();
    let value = |name: &str| {
        recorded
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("{name} not recorded"))
    };
    use metrics_util::debugging::DebugValue;
    assert_eq!(
        value("plexus_devices_tracked"),
        &DebugValue::Gauge(1.0.into())
    );
    assert!(matches!(value("plexus_devices_reports_total"), DebugValue::Counter(n) if *n >= 1));
}
