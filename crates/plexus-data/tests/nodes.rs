//! Replicators on three nodes in one process, over real TCP sockets beside
//! their cluster members: updates at each consistency level, a
//! subscription, and a durable key recovered by a restarted node.

use std::time::Duration;

use plexus_cluster::{Cluster, ClusterConfig, ClusterUpdate, MemberState};
use plexus_core::ActorSystem;
use plexus_data::crdt::{GCounter, ORSet};
use plexus_data::node::{Replication, StartError};
use plexus_data::store::{DurableStore, OpenMode};
use plexus_data::Changed;
use plexus_data::{Consistency, Key, ReplicatorConfig};
use plexus_remote::{Node, NodeConfig};
use tokio::sync::mpsc;

/// Guards turn a hang into a failure; the assertions wait for events.
const GUARD: Duration = Duration::from_secs(60);
const TIMEOUT: Duration = Duration::from_secs(10);

fn quick(seeds: Vec<String>) -> ClusterConfig {
    let mut c = ClusterConfig::default().name("data-test").seeds(seeds);
    c.probe_interval = Duration::from_millis(200);
    c.probe_timeout = Duration::from_millis(100);
    c.gossip_interval = Duration::from_millis(50);
    c.join_retry = Duration::from_millis(200);
    c
}

fn data_config(durable: &[&str]) -> ReplicatorConfig {
    ReplicatorConfig {
        cluster: "data-test".into(),
        gossip_interval: Duration::from_millis(200),
        durable: durable.iter().map(|s| s.to_string()).collect(),
        ..ReplicatorConfig::default()
    }
}

struct Member {
    _node: Node,
    cluster: Cluster,
    data: Replication,
    uri: String,
    ups: mpsc::UnboundedReceiver<ClusterUpdate>,
}

async fn member(
    system: &ActorSystem,
    seeds: Vec<String>,
    store: Option<DurableStore>,
    durable: &[&str],
) -> Member {
    let node = Node::start(system, NodeConfig::default().cookie("data-test")).expect("node starts");
    let uri = node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster = Cluster::start(&node, system, quick(seeds)).expect("cluster starts");
    let (tx, ups) = mpsc::unbounded_channel();
    cluster.subscribe(system.spawn_fn(move |u: ClusterUpdate, _ctx| {
        let _ = tx.send(u);
    }));
    let data = Replication::start(&node, system, &cluster, data_config(durable), store)
        .expect("replicator starts");
    data.register::<ORSet<String>>();
    Member {
        _node: node,
        cluster,
        data,
        uri,
        ups,
    }
}

/// Waits until `m`'s cluster lists `n` members up.
async fn until_up(m: &mut Member, n: usize) {
    tokio::time::timeout(GUARD, async {
        loop {
            let u = m.ups.recv().await.expect("subscribed");
            if u.members
                .iter()
                .filter(|x| x.state == MemberState::Up)
                .count()
                == n
            {
                return;
            }
        }
    })
    .await
    .expect("the cluster formed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_at_every_level_and_a_durable_key_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("plexus-data-nodes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store_path = dir.join("a.redb");

    let systems = [ActorSystem::new(), ActorSystem::new(), ActorSystem::new()];
    let store = DurableStore::open(&store_path, OpenMode::CreateIfMissing).unwrap();
    let mut a = member(&systems[0], Vec::new(), Some(store), &["visits"]).await;
    let mut b = member(&systems[1], vec![a.uri.clone()], None, &[]).await;
    let mut c = member(&systems[2], vec![a.uri.clone()], None, &[]).await;
    for m in [&mut a, &mut b, &mut c] {
        until_up(m, 3).await;
    }

    // A subscriber on c sees the set fill from the other two.
    let tags = Key::<ORSet<String>>::new("tags");
    let (tx, mut changes) = mpsc::unbounded_channel();
    c.data.subscribe(
        &tags,
        systems[2].spawn_fn(move |ch: Changed<ORSet<String>>, _ctx| {
            let _ = tx.send(ch.value);
        }),
    );

    let visits = Key::<GCounter>::new("visits");
    for (m, level) in [
        (&a, Consistency::Majority),
        (&b, Consistency::All),
        (&c, Consistency::Count(2)),
    ] {
        m.data
            .update(&visits, level, TIMEOUT, |v, me| v.increment(me, 1))
            .await
            .unwrap_or_else(|e| panic!("{level:?}: {e}"));
    }
    a.data
        .update(&tags, Consistency::Local, TIMEOUT, |s, me| {
            s.add(me, "red".into())
        })
        .await
        .unwrap();
    b.data
        .update(&tags, Consistency::Majority, TIMEOUT, |s, me| {
            s.add(me, "blue".into())
        })
        .await
        .unwrap();

    let read = b
        .data
        .get(&visits, Consistency::All, TIMEOUT)
        .await
        .unwrap()
        .expect("the key exists");
    assert_eq!(read.value(), 3);

    tokio::time::timeout(GUARD, async {
        loop {
            let set = changes.recv().await.expect("subscribed");
            if set.len() == 2 {
                assert!(set.contains(&"red".to_string()) && set.contains(&"blue".to_string()));
                return;
            }
        }
    })
    .await
    .expect("c's subscriber saw both tags");

    // a stops; its durable key is on disk. A new node with a's store
    // recovers it before hearing from anyone.
    let stats = a.data.stats().await;
    assert_eq!(stats.members, 3);
    // Its metrics (issue 31), through a debugging recorder installed
    // around the (synchronous) publishing of those counters.
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        plexus_data::telemetry::record_replicator_stats(&stats)
    });
    let recorded: std::collections::HashMap<String, metrics_util::debugging::DebugValue> =
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, _, _, v)| {
                let labels: Vec<String> = k
                    .key()
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                (format!("{}{{{}}}", k.key().name(), labels.join(",")), v)
            })
            .collect();
    use metrics_util::debugging::DebugValue;
    assert_eq!(
        recorded.get("plexus_data_keys{}"),
        Some(&DebugValue::Gauge((stats.keys as f64).into()))
    );
    assert!(stats.keys >= 1);
    assert!(matches!(
        recorded.get("plexus_data_sent_bytes_total{traffic=delta}"),
        Some(DebugValue::Counter(n)) if *n > 0
    ));
    a.data.stop().await;
    drop(a.cluster);
    let store = DurableStore::open(&store_path, OpenMode::Existing).unwrap();
    let system = ActorSystem::new();
    let again = member(&system, Vec::new(), Some(store), &["visits"]).await;
    let recovered = again
        .data
        .get(&visits, Consistency::Local, TIMEOUT)
        .await
        .unwrap()
        .expect("recovered from the store");
    assert_eq!(recovered.value(), 3);
    let _ = again.cluster;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The replicator belongs to its member's cluster: settings naming another
/// cluster are refused before anything starts; left at the default, they
/// take the cluster's name, and the replicator starts.
#[tokio::test]
async fn a_replicator_naming_another_cluster_is_refused() {
    let system = ActorSystem::new();
    let node =
        Node::start(&system, NodeConfig::default().cookie("data-test")).expect("node starts");
    node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster = Cluster::start(&node, &system, quick(Vec::new())).expect("cluster starts");
    assert_eq!(cluster.name(), "data-test");

    let other = ReplicatorConfig {
        cluster: "shop".into(),
        ..ReplicatorConfig::default()
    };
    let e = Replication::start(&node, &system, &cluster, other, None).expect_err("refused");
    assert!(
        matches!(&e, StartError::OtherCluster { replicator, cluster }
            if replicator == "shop" && cluster == "data-test"),
        "{e}"
    );
    // Nothing was published: a replicator with the default settings starts.
    let data = Replication::start(&node, &system, &cluster, ReplicatorConfig::default(), None)
        .expect("the default takes the cluster's name");
    let key = Key::<GCounter>::new("visits");
    data.update(&key, Consistency::Local, TIMEOUT, |v, me| {
        v.increment(me, 1)
    })
    .await
    .expect("local update");
}
