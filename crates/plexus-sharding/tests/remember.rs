//! Remembered entities on three nodes over real TCP sockets: entities
//! activated by a message on a member that leaves start again on their
//! new homes with no message sent to them, their ids kept in replicated
//! data.

mod common;

use common::GUARD;
use std::time::Duration;

use plexus_cluster::{Cluster, ClusterUpdate};
use plexus_core::{ActorSystem, ReplyTo};
use plexus_data::node::Replication;
use plexus_data::ReplicatorConfig;
use plexus_remote::{Node, NodeConfig};
use plexus_sharding::node::{Entity, EntityContext, EntitySettings, Sharding};
use plexus_sharding::ShardingConfig;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const ASK: Duration = Duration::from_secs(20);
const TICKERS: u32 = 24;

#[derive(Serialize, Deserialize)]
enum TickerMsg {
    Ping(ReplyTo<u32>),
}
plexus_core::remote_message!(TickerMsg = "test.TickerMsg");

/// Says where it started, as it starts.
struct Ticker {
    started: mpsc::UnboundedSender<(usize, String)>,
    member: usize,
    announced: bool,
}

impl Entity for Ticker {
    type Msg = TickerMsg;

    async fn started(&mut self, ctx: &mut EntityContext<'_>) {
        self.announced = true;
        let _ = self.started.send((self.member, ctx.id().to_string()));
    }

    async fn handle(&mut self, msg: TickerMsg, _ctx: &mut EntityContext<'_>) {
        match msg {
            TickerMsg::Ping(reply) => reply.send(u32::from(self.announced)),
        }
    }
}

struct Member {
    _node: Node,
    _data: Replication,
    cluster: Cluster,
    sharding: Sharding,
    uri: String,
    ups: mpsc::UnboundedReceiver<ClusterUpdate>,
}

async fn member(
    system: &ActorSystem,
    index: usize,
    seeds: Vec<String>,
    started: &mpsc::UnboundedSender<(usize, String)>,
) -> Member {
    let node =
        Node::start(system, NodeConfig::default().cookie("remember-test")).expect("node starts");
    let uri = node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster = Cluster::start(&node, system, common::quick("remember-test", seeds))
        .expect("cluster starts");
    let ups = common::updates(system, &cluster);
    let data = Replication::start(&node, system, &cluster, ReplicatorConfig::default(), None)
        .expect("replication starts");
    let config = ShardingConfig {
        shards: 16,
        lease: Duration::from_secs(1),
        margin: Duration::from_millis(300),
        rebalance_every: Duration::from_millis(300),
        ..ShardingConfig::default()
    };
    let sharding = Sharding::start(&node, system, &cluster, config).expect("sharding starts");
    let started = started.clone();
    sharding
        .register_with(
            "ticker",
            EntitySettings::default().remember(&data),
            move |_id| Ticker {
                started: started.clone(),
                member: index,
                announced: false,
            },
        )
        .expect("registers");
    Member {
        _node: node,
        _data: data,
        cluster,
        sharding,
        uri,
        ups,
    }
}

async fn until_up(m: &mut Member, n: usize) {
    common::until_up(&mut m.ups, n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_entities_start_again_on_their_new_home_after_a_leave() {
    let (started, mut starts) = mpsc::unbounded_channel();
    let systems = [ActorSystem::new(), ActorSystem::new(), ActorSystem::new()];
    let mut a = member(&systems[0], 0, Vec::new(), &started).await;
    let mut b = member(&systems[1], 1, vec![a.uri.clone()], &started).await;
    let mut c = member(&systems[2], 2, vec![a.uri.clone()], &started).await;
    for m in [&mut a, &mut b, &mut c] {
        until_up(m, 3).await;
    }
    // One message each: they start (their `started` hook runs first).
    for id in 0..TICKERS {
        let ticker = a
            .sharding
            .entity::<TickerMsg>("ticker", &id.to_string())
            .unwrap();
        let answer = ticker.ask(TickerMsg::Ping, ASK).await;
        assert_eq!(answer.unwrap_or_else(|e| panic!("{e}")), 1);
    }
    let mut on_c = Vec::new();
    for _ in 0..TICKERS {
        let (member, id) = starts.try_recv().expect("each started once");
        if member == 2 {
            on_c.push(id);
        }
    }
    assert!(!on_c.is_empty(), "c hosts some tickers");
    // Its leave waits for their ids to be written, then hands over.
    tokio::time::timeout(GUARD, c.sharding.leave(GUARD))
        .await
        .expect("guard")
        .expect("its shards were handed over");
    c.cluster.leave().await;
    // No message is sent: c's tickers start on a or b, each once.
    let mut again = Vec::new();
    while again.len() < on_c.len() {
        let (member, id) = tokio::time::timeout(GUARD, starts.recv())
            .await
            .expect("c's tickers start again without a message")
            .expect("open");
        assert_ne!(member, 2, "{id} started on the leaver");
        assert!(on_c.contains(&id), "{id} was not on c");
        assert!(!again.contains(&id), "{id} started twice");
        again.push(id);
    }
    for m in [&mut a, &mut b] {
        until_up(m, 2).await;
    }
    let stats = a.sharding.stats().await.regions.active["ticker"]
        + b.sharding.stats().await.regions.active["ticker"];
    assert_eq!(stats, TICKERS as usize, "every ticker runs");
}
