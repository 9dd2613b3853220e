//! Section 23 of the demo: virtual actors. A cart by id, asked from two
//! members; the member hosting it leaves, and the cart starts again on its
//! new member with its count intact (remembered, saved in replicated data
//! when it stopped, read back when it started again). A cluster singleton
//! runs on the oldest member; a topic carries prices between members.

use std::time::Duration;

use plexus::cluster::{Cluster, ClusterConfig, ClusterUpdate, MemberState};
use plexus::data::crdt::GCounter;
use plexus::data::node::Replication;
use plexus::data::{Consistency, Key, ReplicatorConfig};
use plexus::prelude::*;
use plexus::sharding::node::{Entity, EntityContext, EntitySettings, Sharding};
use plexus::sharding::topics::Topics;
use plexus::sharding::ShardingConfig;
use serde::{Deserialize, Serialize};

const WAIT: Duration = Duration::from_secs(10);

#[derive(Serialize, Deserialize)]
enum CartMsg {
    Add(u64),
    Count(ReplyTo<u64>),
}
remote_message!(CartMsg = "demo.CartMsg");

/// A cart: its count lives in a replicated counter `cart/<id>`, read when
/// it starts and increased by what it took when it stops. Its type
/// remembers its entities: moved or crashed, it starts again on its new
/// member without waiting for a message.
struct Cart {
    data: Replication,
    /// Its member, and where it tells that it started.
    member: String,
    starts: tokio::sync::mpsc::UnboundedSender<(String, u64)>,
    /// What the counter held when the cart started.
    loaded: u64,
    items: u64,
}

impl Cart {
    fn key(ctx: &EntityContext<'_>) -> Key<GCounter> {
        Key::new(format!("cart/{}", ctx.id()))
    }
}

impl Entity for Cart {
    type Msg = CartMsg;

    async fn started(&mut self, ctx: &mut EntityContext<'_>) {
        let saved = self
            .data
            .get(&Self::key(ctx), Consistency::Majority, WAIT)
            .await;
        self.loaded = saved.ok().flatten().map_or(0, |c| c.value() as u64);
        self.items = self.loaded;
        let _ = self.starts.send((self.member.clone(), self.items));
    }

    async fn handle(&mut self, msg: CartMsg, _ctx: &mut EntityContext<'_>) {
        match msg {
            CartMsg::Add(n) => self.items += n,
            CartMsg::Count(reply) => reply.send(self.items),
        }
    }

    async fn stopping(&mut self, ctx: &mut EntityContext<'_>) {
        let added = self.items - self.loaded;
        let saved = self
            .data
            .update(
                &Self::key(ctx),
                Consistency::Majority,
                WAIT,
                move |c, me| c.increment(me, added),
            )
            .await;
        println!(
            "  cart {} stops on its member and saves its count ({}): {}",
            ctx.id(),
            self.items,
            if saved.is_ok() {
                "saved at majority"
            } else {
                "NOT saved"
            }
        );
    }
}

#[derive(Serialize, Deserialize)]
enum ClerkMsg {
    /// The member it runs on.
    Where(ReplyTo<String>),
}
remote_message!(ClerkMsg = "demo.ClerkMsg");

/// The cluster singleton: one clerk, on the oldest member.
struct Clerk {
    member: String,
}

impl Entity for Clerk {
    type Msg = ClerkMsg;

    async fn handle(&mut self, msg: ClerkMsg, _ctx: &mut EntityContext<'_>) {
        match msg {
            ClerkMsg::Where(reply) => reply.send(self.member.clone()),
        }
    }
}

#[derive(Clone, Serialize, Deserialize)]
struct Price {
    cents: u32,
}
remote_message!(Price = "demo.Price");

struct Member {
    _system: ActorSystem,
    _node: Node,
    cluster: Cluster,
    _data: Replication,
    topics: Topics,
    sharding: Sharding,
    uri: String,
}

async fn member(
    seeds: Vec<String>,
    cluster: &ClusterConfig,
    starts: &tokio::sync::mpsc::UnboundedSender<(String, u64)>,
) -> Result<Member, Box<dyn std::error::Error>> {
    let system = ActorSystem::new();
    let node = Node::start(&system, NodeConfig::default().cookie("demo-cookie"))?;
    let uri = node.listen("tcp://127.0.0.1:0").await?;
    let config = cluster.clone().seeds(seeds);
    let cluster = Cluster::start(&node, &system, config)?;
    let data = ReplicatorConfig {
        cluster: "demo-sharding".into(),
        ..ReplicatorConfig::default()
    };
    let data = Replication::start(&node, &system, &cluster, data, None)?;
    let sharding = Sharding::start(
        &node,
        &system,
        &cluster,
        ShardingConfig {
            lease: Duration::from_secs(2),
            margin: Duration::from_millis(500),
            rebalance_every: Duration::from_millis(500),
            ..ShardingConfig::default()
        },
    )?;
    let (replicas, member, starts) = (data.clone(), uri.clone(), starts.clone());
    sharding.register_with(
        "cart",
        EntitySettings::default().remember(&data),
        move |_id| Cart {
            data: replicas.clone(),
            member: member.clone(),
            starts: starts.clone(),
            loaded: 0,
            items: 0,
        },
    )?;
    let member = uri.clone();
    sharding.singleton("clerk", move || Clerk {
        member: member.clone(),
    })?;
    let topics = Topics::start(&node, &system, &cluster, &data);
    Ok(Member {
        _system: system,
        _node: node,
        cluster,
        _data: data,
        topics,
        sharding,
        uri,
    })
}

/// Waits until `m`'s cluster lists `n` members up and no other but the
/// removed.
async fn until_up(m: &Member, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    m.cluster
        .subscribe(m._system.spawn_fn(move |u: ClusterUpdate, _ctx| {
            let _ = tx.send(u);
        }));
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(u) = updates.recv().await {
            let up = u
                .members
                .iter()
                .filter(|x| x.state == MemberState::Up)
                .count();
            let settled = u
                .members
                .iter()
                .all(|x| matches!(x.state, MemberState::Up | MemberState::Removed));
            if up == n && settled {
                return;
            }
        }
    })
    .await
    .map_err(|_| "gave up waiting for the cluster")?;
    Ok(())
}

pub async fn tour(cluster: ClusterConfig) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "\n23. virtual actors: a cart by id from two members; its member leaves; it starts again on its new member; a cluster singleton; a topic"
    );
    let cluster = cluster.name("demo-sharding");
    let (starts, mut started) = tokio::sync::mpsc::unbounded_channel();
    let a = member(Vec::new(), &cluster, &starts).await?;
    let b = member(vec![a.uri.clone()], &cluster, &starts).await?;
    let c = member(vec![a.uri.clone()], &cluster, &starts).await?;
    let members = [a, b, c];
    for m in &members {
        until_up(m, 3).await?;
    }
    let clerk = members[2]
        .sharding
        .singleton_ref::<ClerkMsg>("clerk")?
        .ask(ClerkMsg::Where, WAIT)
        .await?;
    println!(
        "  the singleton clerk runs on the oldest member, {clerk} (asked from {})",
        members[2].uri
    );
    let cart = |m: &Member| m.sharding.entity::<CartMsg>("cart", "42");
    cart(&members[0])?
        .tell_with_receipt(CartMsg::Add(2))
        .await?;
    cart(&members[1])?
        .tell_with_receipt(CartMsg::Add(3))
        .await?;
    let count = cart(&members[1])?.ask(CartMsg::Count, WAIT).await?;
    let mut home = 0;
    for (i, m) in members.iter().enumerate() {
        if m.sharding.stats().await.regions.active.get("cart").copied() == Some(1) {
            home = i;
        }
    }
    println!(
        "  cart 42 took 2 items from member {} and 3 from member {}: count {count}, active on member {}",
        members[0].uri, members[1].uri, members[home].uri
    );

    let [a, b, c] = members;
    let (leaver, stay) = match home {
        0 => (a, [b, c]),
        1 => (b, [a, c]),
        _ => (c, [a, b]),
    };
    println!(
        "  its member {} hands its shards over, then leaves the cluster",
        leaver.uri
    );
    while started.try_recv().is_ok() {}
    leaver.sharding.leave(Duration::from_secs(30)).await?;
    leaver.cluster.leave().await;
    let (at, count) = tokio::time::timeout(Duration::from_secs(30), started.recv())
        .await
        .map_err(|_| "the remembered cart did not start again")?
        .ok_or("closed")?;
    println!(
        "  remembered, cart 42 starts again on member {at} before any message is sent to it, with count {count} (read from replicated data)"
    );
    for m in &stay {
        until_up(m, 2).await?;
    }
    let count = cart(&stay[0])?.ask(CartMsg::Count, WAIT).await?;
    let mut now_at = "";
    for m in &stay {
        if m.sharding.stats().await.regions.active.get("cart").copied() == Some(1) {
            now_at = &m.uri;
        }
    }
    println!(
        "  asked again from {}: count {count}, now active on member {now_at}",
        stay[0].uri
    );
    let clerk = stay[1]
        .sharding
        .singleton_ref::<ClerkMsg>("clerk")?
        .ask(ClerkMsg::Where, WAIT)
        .await?;
    println!("  the clerk now runs on {clerk}, the oldest member left");
    // A topic: a subscriber on one member, a publisher on the other.
    let (tx, mut prices) = tokio::sync::mpsc::unbounded_channel();
    let subscriber = stay[1]._system.spawn_fn(move |p: Price, _ctx| {
        let _ = tx.send(p);
    });
    stay[1]
        .topics
        .topic::<Price>("prices")?
        .subscribe(subscriber)
        .await?;
    let publisher = stay[0].topics.topic::<Price>("prices")?;
    let mut members = publisher.members();
    tokio::time::timeout(WAIT, members.wait_for(|m| !m.is_empty()))
        .await
        .map_err(|_| "the subscription did not reach the publisher")??;
    for cents in [1999, 2005, 2010] {
        publisher.publish(Price { cents });
    }
    let mut got = Vec::new();
    while got.len() < 3 {
        let p = tokio::time::timeout(WAIT, prices.recv())
            .await
            .map_err(|_| "a price did not arrive")?
            .ok_or("closed")?;
        got.push(p.cents);
    }
    println!(
        "  topic prices: published on {}, received on {} once each, in order: {got:?}",
        stay[0].uri, stay[1].uri
    );
    let wrong = stay[0].sharding.entity::<CartMsg>("cart", &"x".repeat(300));
    println!(
        "  an id over 256 bytes is refused: {}",
        wrong.err().map(|e| e.to_string()).unwrap_or_default()
    );
    Ok(())
}
