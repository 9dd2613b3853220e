//! A cluster singleton on three nodes over real TCP sockets: it starts on
//! the oldest member with no message, answers from every member, and when
//! that member leaves it starts on the next oldest, still one instance.

mod common;

use common::GUARD;
use std::time::Duration;

use plexus_cluster::{Cluster, ClusterUpdate};
use plexus_core::{ActorSystem, ReplyTo};
use plexus_remote::{Node, NodeConfig};
use plexus_sharding::node::{Entity, EntityContext, Sharding};
use plexus_sharding::ShardingConfig;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const ASK: Duration = Duration::from_secs(20);

#[derive(Serialize, Deserialize)]
enum BossMsg {
    /// Which member it runs on.
    Where(ReplyTo<usize>),
}
plexus_core::remote_message!(BossMsg = "test.BossMsg");

/// Says where it started and where it stopped.
struct Boss {
    member: usize,
    events: mpsc::UnboundedSender<(&'static str, usize)>,
}

impl Entity for Boss {
    type Msg = BossMsg;

    async fn started(&mut self, _ctx: &mut EntityContext<'_>) {
        let _ = self.events.send(("started", self.member));
    }

    async fn handle(&mut self, msg: BossMsg, _ctx: &mut EntityContext<'_>) {
        match msg {
            BossMsg::Where(reply) => reply.send(self.member),
        }
    }

    async fn stopping(&mut self, _ctx: &mut EntityContext<'_>) {
        let _ = self.events.send(("stopped", self.member));
    }
}

struct Member {
    _node: Node,
    cluster: Cluster,
    sharding: Sharding,
    uri: String,
    ups: mpsc::UnboundedReceiver<ClusterUpdate>,
}

async fn member(
    system: &ActorSystem,
    index: usize,
    seeds: Vec<String>,
    events: &mpsc::UnboundedSender<(&'static str, usize)>,
) -> Member {
    let node =
        Node::start(system, NodeConfig::default().cookie("singleton-test")).expect("node starts");
    let uri = node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster = Cluster::start(&node, system, common::quick("singleton-test", seeds))
        .expect("cluster starts");
    let ups = common::updates(system, &cluster);
    let config = ShardingConfig {
        lease: Duration::from_secs(1),
        margin: Duration::from_millis(300),
        rebalance_every: Duration::from_millis(300),
        ..ShardingConfig::default()
    };
    let sharding = Sharding::start(&node, system, &cluster, config).expect("sharding starts");
    let events = events.clone();
    sharding
        .singleton("boss", move || Boss {
            member: index,
            events: events.clone(),
        })
        .expect("registers");
    Member {
        _node: node,
        cluster,
        sharding,
        uri,
        ups,
    }
}

async fn until_up(m: &mut Member, n: usize) {
    common::until_up(&mut m.ups, n).await;
}

async fn next(
    events: &mut mpsc::UnboundedReceiver<(&'static str, usize)>,
) -> (&'static str, usize) {
    tokio::time::timeout(GUARD, events.recv())
        .await
        .expect("the singleton moves")
        .expect("open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_singleton_runs_on_the_oldest_member_and_moves_when_it_leaves() {
    let (tx, mut events) = mpsc::unbounded_channel();
    let systems = [ActorSystem::new(), ActorSystem::new(), ActorSystem::new()];
    let mut a = member(&systems[0], 0, Vec::new(), &tx).await;
    let mut b = member(&systems[1], 1, vec![a.uri.clone()], &tx).await;
    let mut c = member(&systems[2], 2, vec![a.uri.clone()], &tx).await;
    for m in [&mut a, &mut b, &mut c] {
        until_up(m, 3).await;
    }
    // It starts with no message, on a, the oldest.
    assert_eq!(next(&mut events).await, ("started", 0));
    for m in [&a, &b, &c] {
        let boss = m.sharding.singleton_ref::<BossMsg>("boss").unwrap();
        assert_eq!(boss.ask(BossMsg::Where, ASK).await.unwrap(), 0);
    }
    tokio::time::timeout(GUARD, a.sharding.leave(GUARD))
        .await
        .expect("guard")
        .expect("its shards were handed over");
    a.cluster.leave().await;
    // The next oldest of b and c in their view (the lower up-number; b
    // and c may have gone up in one round, then the lower address).
    let age = |m: &Member| {
        let me = m.cluster.local();
        (me.up_number, me.address)
    };
    let next_oldest = if age(&b) < age(&c) { 1 } else { 2 };
    // Stopped on a before it starts there.
    assert_eq!(next(&mut events).await, ("stopped", 0));
    assert_eq!(next(&mut events).await, ("started", next_oldest));
    for m in [&mut b, &mut c] {
        until_up(m, 2).await;
    }
    let boss = c.sharding.singleton_ref::<BossMsg>("boss").unwrap();
    assert_eq!(boss.ask(BossMsg::Where, ASK).await.unwrap(), next_oldest);
    assert!(events.try_recv().is_err(), "no other start or stop");
}
