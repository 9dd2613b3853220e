//! A node outside the cluster reaches entities through a member (a
//! proxy): tell with receipt and ask keep their meaning; a proxy pointed
//! at a node that runs no sharding, an entity type the member does not
//! host, and a message type other than the type's here, are typed errors; when the member goes away,
//! senders hear it and later messages are refused, never left hanging.

mod common;

use common::GUARD;
use std::time::Duration;

use plexus_cluster::{Cluster, ClusterUpdate};
use plexus_core::{ActorSystem, ReplyTo};
use plexus_remote::{Node, NodeConfig};
use plexus_sharding::node::{
    Entity, EntityContext, EntitySendError, ProxyEntityError, ProxyError, Sharding, ShardingProxy,
};
use plexus_sharding::{EntityError, ShardingConfig};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const ASK: Duration = Duration::from_secs(20);
const COOKIE: &str = "proxy-test";

#[derive(Serialize, Deserialize)]
enum CartMsg {
    Add(u32),
    Count(ReplyTo<u32>),
}
plexus_core::remote_message!(CartMsg = "test.ProxyCartMsg");

#[derive(Serialize, Deserialize)]
struct Other;
plexus_core::remote_message!(Other = "test.ProxyOther");

#[derive(Default)]
struct Cart {
    items: u32,
}

impl Entity for Cart {
    type Msg = CartMsg;

    async fn handle(&mut self, msg: CartMsg, _ctx: &mut EntityContext<'_>) {
        match msg {
            CartMsg::Add(n) => self.items += n,
            CartMsg::Count(reply) => reply.send(self.items),
        }
    }
}

struct Member {
    node: Node,
    _cluster: Cluster,
    _sharding: Sharding,
    uri: String,
    ups: mpsc::UnboundedReceiver<ClusterUpdate>,
}

async fn member(system: &ActorSystem, seeds: Vec<String>) -> Member {
    let node = Node::start(system, NodeConfig::default().cookie(COOKIE)).expect("node starts");
    let uri = node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster =
        Cluster::start(&node, system, common::quick("proxy-test", seeds)).expect("cluster starts");
    let ups = common::updates(system, &cluster);
    let config = ShardingConfig {
        shards: 16,
        lease: Duration::from_secs(1),
        margin: Duration::from_millis(300),
        ..ShardingConfig::default()
    };
    let sharding = Sharding::start(&node, system, &cluster, config).expect("sharding starts");
    sharding
        .register("cart", |_id| Cart::default())
        .expect("registers");
    Member {
        node,
        _cluster: cluster,
        _sharding: sharding,
        uri,
        ups,
    }
}

async fn until_up(m: &mut Member, n: usize) {
    common::until_up(&mut m.ups, n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_outside_the_cluster_reaches_entities_through_a_member() {
    let systems = [ActorSystem::new(), ActorSystem::new(), ActorSystem::new()];
    let mut a = member(&systems[0], Vec::new()).await;
    let mut b = member(&systems[1], vec![a.uri.clone()]).await;
    for m in [&mut a, &mut b] {
        until_up(m, 2).await;
    }
    let outside = Node::start(&systems[2], NodeConfig::default().cookie(COOKIE)).unwrap();
    let me = outside.listen("tcp://127.0.0.1:0").await.unwrap();

    // Pointed at a node that runs no sharding: refused.
    let plain = Node::start(&systems[2], NodeConfig::default().cookie(COOKIE)).unwrap();
    let plain_uri = plain.listen("tcp://127.0.0.1:0").await.unwrap();
    let refused = ShardingProxy::start(&outside, &systems[2], &me, &plain_uri).await;
    assert!(
        matches!(refused, Err(ProxyError::NotAMember { .. })),
        "{refused:?}"
    );

    let proxy = ShardingProxy::start(&outside, &systems[2], &me, &a.uri)
        .await
        .expect("a is a member");
    for id in 0..20 {
        let cart = proxy
            .entity::<CartMsg>("cart", &id.to_string())
            .await
            .unwrap();
        cart.tell_with_receipt(CartMsg::Add(id + 1))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for id in 0..20 {
        let cart = proxy
            .entity::<CartMsg>("cart", &id.to_string())
            .await
            .unwrap();
        assert_eq!(cart.ask(CartMsg::Count, ASK).await.unwrap(), id + 1);
    }

    // A type the member does not host, or another message type: refused.
    let nope = proxy.entity::<CartMsg>("nope", "1").await;
    assert!(
        matches!(nope, Err(ProxyEntityError::NotHosted { .. })),
        "{nope:?}"
    );
    let other = proxy.entity::<Other>("cart", "1").await;
    assert!(matches!(other, Err(ProxyEntityError::Ref(_))), "{other:?}");
    let fresh = ShardingProxy::start(&outside, &systems[2], &me, &b.uri).await;
    // One sharding actor per node: the first proxy holds it.
    assert!(matches!(fresh, Err(ProxyError::Start(_))), "{fresh:?}");
    // The member goes away: its proxy's senders are told, not left waiting.
    let cart = proxy.entity::<CartMsg>("cart", "1").await.unwrap();
    a.node.shutdown().await;
    let after = tokio::time::timeout(GUARD, async {
        loop {
            match cart.tell_with_receipt(CartMsg::Add(1)).await {
                Ok(()) => continue,
                Err(e) => return e,
            }
        }
    })
    .await
    .expect("refused, not left hanging");
    assert!(
        matches!(
            after,
            EntitySendError::Refused {
                error: EntityError::Lost,
                ..
            }
        ),
        "{after}"
    );
}
