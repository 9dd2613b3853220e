//! Sharding on three nodes in one process, over real TCP sockets beside
//! their cluster members: carts by id from every member, a member's
//! graceful leave handing its carts over with their state, and bad input
//! refused with typed errors.

mod common;

use common::GUARD;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::DebugValue;
use plexus_cluster::{Cluster, ClusterUpdate};
use plexus_core::{ActorSystem, ReplyTo};
use plexus_remote::{Node, NodeConfig};
use plexus_sharding::node::{
    Entity, EntityAskError, EntityContext, EntityRefError, EntitySendError, EntityTypeError,
    Sharding,
};
use plexus_sharding::{EntityError, EntityIdError, ShardingConfig};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const ASK: Duration = Duration::from_secs(20);

#[derive(Serialize, Deserialize)]
enum CartMsg {
    Add(u32),
    Count(ReplyTo<u32>),
}
plexus_core::remote_message!(CartMsg = "test.CartMsg");

#[derive(Serialize, Deserialize)]
struct Other;
plexus_core::remote_message!(Other = "test.Other");

/// What carts save when they stop: a stand-in for a database.
type Saved = Arc<Mutex<HashMap<String, u32>>>;

struct Cart {
    items: u32,
    saved: Saved,
}

impl Entity for Cart {
    type Msg = CartMsg;

    async fn handle(&mut self, msg: CartMsg, _ctx: &mut EntityContext<'_>) {
        match msg {
            CartMsg::Add(n) => self.items += n,
            CartMsg::Count(reply) => reply.send(self.items),
        }
    }

    async fn stopping(&mut self, ctx: &mut EntityContext<'_>) {
        let mut saved = self.saved.lock().unwrap();
        saved.insert(ctx.id().to_string(), self.items);
    }
}

fn sharding_config() -> ShardingConfig {
    ShardingConfig {
        shards: 32,
        lease: Duration::from_secs(1),
        margin: Duration::from_millis(300),
        rebalance_every: Duration::from_millis(300),
        ..ShardingConfig::default()
    }
}

struct Member {
    _node: Node,
    cluster: Cluster,
    sharding: Sharding,
    uri: String,
    ups: mpsc::UnboundedReceiver<ClusterUpdate>,
}

async fn member(system: &ActorSystem, seeds: Vec<String>, saved: &Saved) -> Member {
    let node =
        Node::start(system, NodeConfig::default().cookie("sharding-test")).expect("node starts");
    let uri = node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster = Cluster::start(&node, system, common::quick("sharding-test", seeds))
        .expect("cluster starts");
    let ups = common::updates(system, &cluster);
    let sharding =
        Sharding::start(&node, system, &cluster, sharding_config()).expect("sharding starts");
    let saved = saved.clone();
    sharding
        .register("cart", move |id| Cart {
            items: saved.lock().unwrap().get(id.as_str()).copied().unwrap_or(0),
            saved: saved.clone(),
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

async fn count(m: &Member, id: u32) -> u32 {
    let cart = m
        .sharding
        .entity::<CartMsg>("cart", &id.to_string())
        .unwrap();
    cart.ask(CartMsg::Count, ASK)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn add(m: &Member, id: u32) {
    let cart = m
        .sharding
        .entity::<CartMsg>("cart", &id.to_string())
        .unwrap();
    cart.tell_with_receipt(CartMsg::Add(1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carts_answer_from_every_member_and_keep_their_count_when_a_member_leaves() {
    let saved = Saved::default();
    let systems = [ActorSystem::new(), ActorSystem::new(), ActorSystem::new()];
    let mut a = member(&systems[0], Vec::new(), &saved).await;
    let mut b = member(&systems[1], vec![a.uri.clone()], &saved).await;
    let mut c = member(&systems[2], vec![a.uri.clone()], &saved).await;
    for m in [&mut a, &mut b, &mut c] {
        until_up(m, 3).await;
    }
    const CARTS: u32 = 40;
    // Each member adds one item to every cart: the first message activates
    // it on its shard's home, wherever the sender is.
    for m in [&a, &b, &c] {
        for id in 0..CARTS {
            add(m, id).await;
        }
    }
    for m in [&a, &b, &c] {
        for id in 0..CARTS {
            assert_eq!(count(m, id).await, 3, "cart {id}");
        }
    }
    let hosting = [&a, &b, &c];
    let mut homes = 0;
    for m in hosting {
        let stats = m.sharding.stats().await;
        if stats.regions.active.get("cart").copied().unwrap_or(0) > 0 {
            homes += 1;
        }
    }
    assert!(homes >= 2, "carts spread over the members ({homes})");

    // c hands its shards over, then leaves the cluster.
    tokio::time::timeout(GUARD, c.sharding.leave(GUARD))
        .await
        .expect("guard")
        .expect("its shards were handed over");
    let left = c.sharding.stats().await;
    assert_eq!(left.regions.shards.get("cart").copied(), Some(0));
    assert_eq!(left.regions.active.get("cart").copied(), Some(0));
    c.cluster.leave().await;
    for m in [&mut a, &mut b] {
        until_up(m, 2).await;
    }
    // Every cart kept its count (saved when it stopped, loaded where it
    // started again), and takes more.
    for id in 0..CARTS {
        assert_eq!(count(&a, id).await, 3, "cart {id} after the leave");
        add(&b, id).await;
        assert_eq!(count(&a, id).await, 4, "cart {id}");
    }
    let stats = a.sharding.stats().await;
    assert_eq!(stats.dropped + stats.lost, 0);
    // Its metrics, through a debugging recorder installed around the
    // (synchronous) publishing of those counters.
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        plexus_sharding::telemetry::record_sharding_stats(&stats)
    });
    let recorded: HashMap<String, DebugValue> = snapshotter
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
    let active = stats.regions.active["cart"];
    assert!(active > 0);
    assert_eq!(
        recorded.get("plexus_sharding_entities{type=cart}"),
        Some(&DebugValue::Gauge((active as f64).into()))
    );
    assert!(matches!(
        recorded.get("plexus_sharding_activations_total{}"),
        Some(DebugValue::Counter(n)) if *n > 0
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_ids_and_message_types_are_refused() {
    let saved = Saved::default();
    let system = ActorSystem::new();
    let a = member(&system, Vec::new(), &saved).await;
    let long = "x".repeat(300);
    assert!(matches!(
        a.sharding.entity::<CartMsg>("cart", &long),
        Err(EntityRefError::Id(EntityIdError::TooLong { .. }))
    ));
    assert!(matches!(
        a.sharding.entity::<CartMsg>("no/slash", "1"),
        Err(EntityRefError::Type(EntityTypeError::BadName(_)))
    ));
    assert!(matches!(
        a.sharding.entity::<Other>("cart", "1"),
        Err(EntityRefError::Type(EntityTypeError::MessageType { .. }))
    ));
    let again = a.sharding.register("cart", |_| Cart {
        items: 0,
        saved: Saved::default(),
    });
    assert!(again.is_err(), "registered twice");
    // A type no member registered: refused with a reason, not held for
    // ever (the coordinator waits a lease for regions to report).
    let nowhere = a.sharding.entity::<CartMsg>("nope", "1").unwrap();
    let refused = nowhere.ask(CartMsg::Count, ASK).await;
    assert!(
        matches!(
            refused,
            Err(EntityAskError::Refused {
                error: EntityError::NoRegion,
                ..
            })
        ),
        "{refused:?}"
    );
    let told = nowhere.tell_with_receipt(CartMsg::Add(1)).await;
    assert!(
        matches!(
            told,
            Err(EntitySendError::Refused {
                error: EntityError::NoRegion,
                ..
            })
        ),
        "{told:?}"
    );
}

/// Asks the cart it is given to add one, then answers its count.
#[derive(Serialize, Deserialize)]
struct AddTo {
    cart: plexus_sharding::node::EntityRef<CartMsg>,
    reply: ReplyTo<u32>,
}
plexus_core::remote_message!(AddTo = "test.AddTo");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_ref_travels_inside_a_message_and_works_where_it_lands() {
    let saved = Saved::default();
    let systems = [ActorSystem::new(), ActorSystem::new()];
    let mut a = member(&systems[0], Vec::new(), &saved).await;
    let mut b = member(&systems[1], vec![a.uri.clone()], &saved).await;
    for m in [&mut a, &mut b] {
        until_up(m, 2).await;
    }
    // An actor on b that takes a ref to a cart from anywhere.
    let adder = systems[1].spawn_fn(|msg: AddTo, _ctx| {
        tokio::spawn(async move {
            msg.cart
                .tell_with_receipt(CartMsg::Add(1))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let count = msg.cart.ask(CartMsg::Count, ASK).await;
            msg.reply.send(count.unwrap_or_else(|e| panic!("{e}")));
        });
    });
    b._node.publish(&adder, "adder").unwrap();
    let remote_adder = a
        ._node
        .resolve::<AddTo>(&format!("{}/adder", b.uri))
        .await
        .unwrap();
    let cart = a.sharding.entity::<CartMsg>("cart", "7").unwrap();
    add(&a, 7).await;
    let answered = remote_adder
        .ask(|reply| AddTo { cart, reply }, ASK)
        .await
        .unwrap();
    assert_eq!(answered, 2, "the ref decoded on b reached the same cart");
    assert_eq!(count(&a, 7).await, 2);
}
