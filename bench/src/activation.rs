//! `activation`: how fast one member activates entities by their first
//! message, and what an idle entity costs (issue 33).
//!
//! One member (a cluster of one, on 127.0.0.1) registers a counter entity
//! type with room for all of them, waits for its coordinator to answer
//! (its start wait), then sends one message to each of `n` new ids from
//! the member itself and times until every entity has handled its message
//! (the shards are allocated on the way, as in real use). Memory per
//! entity is the peak RSS over the RSS before the sends, divided by `n`,
//! as W7's spawn counts it. Targets: 1,000,000 in under 2 s; at most
//! 1 KiB per idle entity.
//!
//! ```text
//! cargo run --release -p plexus-bench -- activation --n 1000000
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus::cluster::{Cluster, ClusterConfig};
use plexus::prelude::*;
use plexus::sharding::node::{Entity, EntityContext, Sharding};
use plexus::sharding::ShardingConfig;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::report::{peak_rss_bytes, rss_bytes, ResultLine};

/// Arguments of `activation`.
#[derive(clap::Args)]
pub struct Args {
    /// Entities to activate.
    #[arg(long, default_value_t = 1_000_000)]
    n: u64,
}

#[derive(Serialize, Deserialize)]
enum CounterMsg {
    Add(u64),
    Get(ReplyTo<u64>),
}
remote_message!(CounterMsg = "bench.activation.CounterMsg");

/// Counts what it is given; the first message of each tells the run.
struct Counter {
    count: u64,
    done: Arc<Done>,
}

struct Done {
    handled: AtomicU64,
    n: u64,
    all: Notify,
}

impl Entity for Counter {
    type Msg = CounterMsg;

    async fn handle(&mut self, msg: CounterMsg, _ctx: &mut EntityContext<'_>) {
        match msg {
            CounterMsg::Add(k) => {
                if self.count == 0
                    && self.done.handled.fetch_add(1, Ordering::Relaxed) + 1 == self.done.n
                {
                    self.done.all.notify_one();
                }
                self.count += k;
            }
            CounterMsg::Get(reply) => reply.send(self.count),
        }
    }
}

/// Runs `activation`.
pub fn run(args: &Args) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let n = args.n;
    let (secs, per_entity, peak) = rt.block_on(async move {
        tokio::spawn(measure(n))
            .await
            .expect("the benchmark task panicked")
    });
    ResultLine::new("activation", "plexus")
        .field("n", n)
        .field("seconds", format!("{secs:.3}"))
        .field("per_second", format!("{:.0}", n as f64 / secs))
        .field("bytes_per_entity", format!("{per_entity:.0}"))
        .field("peak_rss_mb", format!("{:.1}", peak as f64 / 1e6))
        .print();
}

async fn measure(n: u64) -> (f64, f64, u64) {
    let system = ActorSystem::new();
    let node = Node::start(&system, NodeConfig::default().cookie("activation")).expect("a node");
    node.listen("tcp://127.0.0.1:0").await.expect("listens");
    let cluster = Cluster::start(&node, &system, ClusterConfig::default().name("activation"))
        .expect("a cluster");
    let config = ShardingConfig {
        max_active: usize::try_from(n).unwrap_or(usize::MAX).max(1),
        passivate_after: Duration::from_secs(3_600),
        // Short, so the coordinator's start wait (a lease and its margin)
        // is short, yet renewed with two seconds to spare: a member
        // activating a million entities on a loaded machine answers its
        // renewal timer late, and a lapsed lease stops every entity.
        lease: Duration::from_secs(3),
        margin: Duration::from_millis(300),
        ..ShardingConfig::default()
    };
    let sharding = Sharding::start(&node, &system, &cluster, config).expect("sharding");
    let done = Arc::new(Done {
        handled: AtomicU64::new(0),
        n,
        all: Notify::new(),
    });
    let entities = Arc::clone(&done);
    sharding
        .register("counter", move |_id| Counter {
            count: 0,
            done: Arc::clone(&entities),
        })
        .expect("registers");
    // The coordinator answers once its start wait is over: one ask of a
    // warm-up type waits for it, out of the timed part.
    sharding
        .register("warm", |_id| Counter {
            count: 0,
            done: Arc::new(Done {
                handled: AtomicU64::new(0),
                n: 0,
                all: Notify::new(),
            }),
        })
        .expect("registers");
    sharding
        .entity::<CounterMsg>("warm", "0")
        .expect("a ref")
        .ask(CounterMsg::Get, Duration::from_secs(60))
        .await
        .expect("the coordinator answers");
    let refs: Vec<_> = (0..n)
        .map(|i| {
            sharding
                .entity::<CounterMsg>("counter", &i.to_string())
                .expect("a ref")
        })
        .collect();
    let rss_before = rss_bytes().unwrap_or(0);
    let all = done.all.notified();
    tokio::pin!(all);
    all.as_mut().enable();
    let start = Instant::now();
    for r in &refs {
        r.tell(CounterMsg::Add(1));
    }
    // A message refused (a tell has nobody to tell) would leave the wait
    // without an end: past a bound far over any run, the counters say why.
    if tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .is_err()
    {
        let stats = sharding.stats().await;
        eprintln!(
            "activation: {} of {n} entities handled their message in 120 s; leases lapsed {}, refused {}, dropped {}, held {}",
            done.handled.load(Ordering::Relaxed),
            stats.regions.lease_lapses,
            stats.regions.refusals,
            stats.dropped,
            stats.regions.held
        );
        std::process::exit(1);
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = peak_rss_bytes().unwrap_or(0);
    let per_entity = peak.saturating_sub(rss_before) as f64 / n as f64;
    let stats = sharding.stats().await;
    eprintln!(
        "activation: {n} entities in {secs:.3} s; active {:?}, activations {}",
        stats.regions.active.get("counter"),
        stats.regions.activations
    );
    (secs, per_entity, peak)
}
