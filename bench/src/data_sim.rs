//! `data-sim`: the replicator's figures in the deterministic simulator
//! (`plexus_data::sim::DataSim`, virtual time, default replicator
//! settings: deltas every 100 ms, anti-entropy every 1 s).
//!
//! ```text
//! cargo run --release -p plexus-bench -- data-sim --scenario churn
//! cargo run --release -p plexus-bench -- data-sim --scenario faults --seeds 20
//! ```
//!
//! - `churn`: an `ORSet<u32>` of `--elements` elements, filled by
//!   `--writers` concurrent writers among `--members` replicas and
//!   converged; then for `--seconds` of virtual time the writers make
//!   `--churn` element changes per second in all (each a remove of a
//!   present element or an add of an absent one, keeping the size near
//!   `--elements`), each on its own view. The bytes every replica put on
//!   the network over that window (the simulator's count of packets
//!   handed to links, before loss) are set against two full-state
//!   baselines, both with the encoded size S of the converged set:
//!   *gossip* — every member sends the whole state to one peer per
//!   anti-entropy interval (a state-based replicator without deltas, as
//!   long as the key keeps changing): members × S per second; *push* —
//!   every change sends the whole state to every other member:
//!   changes × (members − 1) × S per second. Then the writers stop and the
//!   time until every replica holds the same set is measured.
//! - `faults`: five replicas update a `GCounter` and an `ORSet<u32>` (200
//!   updates at random replicas, 0-20 ms apart) under each fault scenario;
//!   the time from the end of the fault (the last update, the heal, the
//!   restart) until every live replica holds the same states of both keys,
//!   in virtual time and in anti-entropy intervals, and the bytes sent from
//!   the first update until then, over `--seeds` seeds.
//! - `joiner`: replica 0 holds `--keys` `GCounter` keys; replica 1 joins
//!   empty over links of each `--latency-ms` (one way); the virtual time
//!   until it holds every key, the anti-entropy rounds both started, and
//!   the bytes replica 0 sent meanwhile against the encoded size of the
//!   keys and states (key name + state bytes, summed).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use plexus::data::crdt::{GCounter, ORSet};
use plexus::data::sim::DataSim;
use plexus::data::{Consistency, Crdt, Key, ReplicatorConfig, ReplicatorStats};
use plexus::sim::{LinkModel, Sim};
use rand::Rng;

use plexus::data::sim::SimReplica;

/// Arguments of `data-sim`.
#[derive(clap::Args)]
pub struct Args {
    /// churn, faults or all.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Replicas of the churn scenario.
    #[arg(long, default_value_t = 5)]
    members: usize,
    /// Concurrent writers of the churn scenario.
    #[arg(long, default_value_t = 3)]
    writers: usize,
    /// Elements of the churned set.
    #[arg(long, default_value_t = 10_000)]
    elements: u32,
    /// Element changes per second, all writers together.
    #[arg(long, default_value_t = 100)]
    churn: u32,
    /// Seconds of virtual time of the churn window.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Seeds per fault scenario.
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keys of the joiner scenario.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// One-way link latencies of the joiner scenario, comma-separated.
    #[arg(long, default_value = "1,100,400", value_delimiter = ',')]
    latency_ms: Vec<u64>,
}

/// Runs `data-sim`.
pub fn run(args: &Args) {
    let wall = Instant::now();
    match args.scenario.as_str() {
        "churn" => churn(args),
        "faults" => faults(args),
        "joiner" => joiner(args),
        "all" => {
            churn(args);
            faults(args);
            joiner(args);
        }
        other => {
            eprintln!("data-sim: --scenario {other}: expected churn, faults, joiner or all");
            std::process::exit(2);
        }
    }
    eprintln!(
        "data-sim: {:.1} s of wall time",
        wall.elapsed().as_secs_f64()
    );
}

fn lan() -> LinkModel {
    LinkModel {
        latency: Duration::from_millis(1),
        ..LinkModel::default()
    }
}

fn lossy() -> LinkModel {
    LinkModel {
        loss: 0.2,
        duplicate: 0.1,
        reorder: 0.1,
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(5),
    }
}

/// Whether every live replica holds the same state of `key` (and some).
fn same<T: Crdt>(sim: &Sim<SimReplica>, key: &Key<T>) -> bool {
    let mut states = sim.live().map(|i| {
        sim.process(i)
            .and_then(|p| p.replicator.value(key).ok().flatten())
    });
    match states.next() {
        None => true,
        Some(first) => first.is_some() && states.all(|s| s == first),
    }
}

fn sum_stats(sim: &DataSim, n: usize) -> ReplicatorStats {
    let mut t = ReplicatorStats::default();
    for i in 0..n {
        let s = sim.stats(i);
        t.bytes_sent += s.bytes_sent;
        t.delta_bytes_sent += s.delta_bytes_sent;
        t.anti_entropy_bytes_sent += s.anti_entropy_bytes_sent;
        t.request_bytes_sent += s.request_bytes_sent;
        t.packets_sent += s.packets_sent;
        t.anti_entropy_rounds += s.anti_entropy_rounds;
    }
    t
}

fn churn(args: &Args) {
    let n = args.members;
    let writers = args.writers.clamp(1, n);
    let config = ReplicatorConfig::default();
    let gossip = config.gossip_interval;
    let mut sim = DataSim::new(n, config, args.seed, lan());
    sim.register::<ORSet<u32>>();
    let key = Key::<ORSet<u32>>::new("set");

    // Fill: each writer adds its share, concurrently, 100 elements per
    // update.
    let fill_started = sim.sim.elapsed();
    let per = args.elements.div_ceil(writers as u32);
    for w in 0..writers {
        let from = w as u32 * per;
        let to = (from + per).min(args.elements);
        let mut e = from;
        while e < to {
            let end = (e + 100).min(to);
            sim.update(w, &key, Consistency::Local, |s, me| {
                let mut delta = ORSet::default();
                for x in e..end {
                    delta.merge(&s.add(me, x));
                }
                delta
            })
            .expect("a local update starts");
            e = end;
        }
    }
    let key2 = key.clone();
    let filled = sim
        .sim
        .run_until(Duration::from_secs(120), |s| same(s, &key2));
    let fill_s = (sim.sim.elapsed() - fill_started).as_secs_f64();
    if !filled {
        eprintln!("data-sim churn: the filled set did not converge within 120 s");
        std::process::exit(1);
    }
    let state = sim.value(0, &key).expect("converged");
    let state_bytes = postcard::to_allocvec(&state).expect("a set encodes").len() as u64;
    eprintln!(
        "data-sim churn: {} elements from {writers} writers converged at {n} replicas in {fill_s:.2} s \
         (virtual), state {state_bytes} bytes",
        state.len()
    );
    // Let the last anti-entropy rounds of the fill end.
    sim.run_for(gossip * 3);

    let before = sum_stats(&sim, n);
    let wire_before = sim.bytes_sent();
    let tick = Duration::from_secs(1) / args.churn.max(1);
    let changes = args.churn as u64 * args.seconds;
    let mut next_new = args.elements;
    let mut removes = 0u64;
    let mut adds = 0u64;
    for c in 0..changes {
        let w = (c as usize) % writers;
        let view: ORSet<u32> = sim.value(w, &key).unwrap_or_default();
        let remove = view.len() as u32 >= args.elements;
        if remove {
            let pick = sim.sim.rng().gen_range(0..view.len());
            let victim = *view.iter().nth(pick).expect("in range");
            sim.update(w, &key, Consistency::Local, |s, _| s.remove(&victim))
                .expect("a local update starts");
            removes += 1;
        } else {
            let x = next_new;
            next_new += 1;
            sim.update(w, &key, Consistency::Local, |s, me| s.add(me, x))
                .expect("a local update starts");
            adds += 1;
        }
        sim.run_for(tick);
    }
    let after = sum_stats(&sim, n);
    let wire = sim.bytes_sent() - wire_before;
    let window = args.seconds as f64;
    let stop = sim.sim.elapsed();
    let key2 = key.clone();
    let converged = sim
        .sim
        .run_until(Duration::from_secs(120), |s| same(s, &key2));
    let settle_s = (sim.sim.elapsed() - stop).as_secs_f64();
    let final_len = sim.value(0, &key).map_or(0, |s| s.len());

    let gossip_s = gossip.as_secs_f64();
    let baseline_gossip = n as f64 * state_bytes as f64 / gossip_s * window;
    let baseline_push = changes as f64 * (n - 1) as f64 * state_bytes as f64;
    println!(
        "RESULT workload=data-sim scenario=churn members={n} writers={writers} elements={} \
         changes_per_s={} window_s={} removes={removes} adds={adds} state_bytes={state_bytes} \
         bytes={wire} bytes_per_s={:.0} delta_bytes={} anti_entropy_bytes={} request_bytes={} \
         anti_entropy_rounds={} baseline_gossip_bytes={baseline_gossip:.0} \
         vs_gossip={:.4} baseline_push_bytes={baseline_push:.0} vs_push={:.6} \
         converged_after_stop_s={settle_s:.2} converged={converged} final_elements={final_len}",
        args.elements,
        args.churn,
        args.seconds,
        wire as f64 / window,
        after.delta_bytes_sent - before.delta_bytes_sent,
        after.anti_entropy_bytes_sent - before.anti_entropy_bytes_sent,
        after.request_bytes_sent - before.request_bytes_sent,
        after.anti_entropy_rounds - before.anti_entropy_rounds,
        wire as f64 / baseline_gossip,
        wire as f64 / baseline_push,
    );
}

/// A fault scenario.
#[derive(Clone, Copy)]
enum Fault {
    /// 20 % loss, 10 % duplication, 10 % reordering on every link.
    Lossy,
    /// Replicas {0, 1} cut from {2, 3, 4} during the updates, healed after.
    Partition,
    /// Replica 4 crashed during the updates, restarted (a new life, no
    /// disk: its keys are not durable) after.
    Crash,
    /// Lossy links, a partition and a crash together.
    All,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Lossy => "loss20-dup10-reorder10",
            Fault::Partition => "partition-2/3-healed",
            Fault::Crash => "crash-restart",
            Fault::All => "lossy+partition+crash",
        }
    }
}

/// One run: whether it converged, the time from the end of the fault
/// until it did, and the bytes sent from the first update until then.
fn fault_run(fault: Fault, seed: u64) -> (bool, Duration, u64) {
    let n = 5;
    let model = match fault {
        Fault::Lossy | Fault::All => lossy(),
        Fault::Partition | Fault::Crash => lan(),
    };
    let mut sim = DataSim::new(n, ReplicatorConfig::default(), seed, model);
    sim.register::<ORSet<u32>>();
    let counter = Key::<GCounter>::new("hits");
    let set = Key::<ORSet<u32>>::new("seen");
    let partitioned = matches!(fault, Fault::Partition | Fault::All);
    let crashing = matches!(fault, Fault::Crash | Fault::All);
    if partitioned {
        sim.sim.partition(&[0, 1], &[2, 3, 4]);
    }
    let bytes_before = sim.bytes_sent();
    for u in 0..200u32 {
        if crashing && u == 50 {
            sim.crash(4);
        }
        let live: Vec<usize> = sim.sim.live().collect();
        let i = live[sim.sim.rng().gen_range(0..live.len())];
        if u % 2 == 0 {
            let k = sim.sim.rng().gen_range(1..10u64);
            sim.update(i, &counter, Consistency::Local, |c, me| c.increment(me, k))
                .expect("a local update starts");
        } else {
            let x = sim.sim.rng().gen_range(0..50u32);
            let add = sim.sim.rng().gen_bool(0.7);
            sim.update(i, &set, Consistency::Local, |s, me| {
                if add {
                    s.add(me, x)
                } else {
                    s.remove(&x)
                }
            })
            .expect("a local update starts");
        }
        let pause = Duration::from_millis(sim.sim.rng().gen_range(0..20));
        sim.run_for(pause);
    }
    if partitioned {
        sim.sim.heal();
    }
    if crashing {
        sim.restart(4);
    }
    let start = sim.sim.elapsed();
    let ok = sim.sim.run_until(Duration::from_secs(120), |s| {
        same(s, &counter) && same(s, &set)
    });
    let took = sim.sim.elapsed() - start;
    (ok, took, sim.bytes_sent() - bytes_before)
}

fn faults(args: &Args) {
    let gossip = ReplicatorConfig::default().gossip_interval.as_secs_f64();
    for fault in [Fault::Lossy, Fault::Partition, Fault::Crash, Fault::All] {
        let mut times = Vec::new();
        let mut bytes = Vec::new();
        let mut failed = BTreeSet::new();
        for seed in args.seed..args.seed + args.seeds {
            let (ok, took, b) = fault_run(fault, seed);
            if !ok {
                failed.insert(seed);
            }
            times.push(took.as_secs_f64());
            bytes.push(b);
        }
        times.sort_by(f64::total_cmp);
        bytes.sort_unstable();
        let mid = times.len() / 2;
        let p50 = times[mid];
        let max = times[times.len() - 1];
        println!(
            "RESULT workload=data-sim scenario=faults fault={} replicas=5 updates=200 seeds={} \
             converged={}/{} converge_p50_s={p50:.2} converge_max_s={max:.2} rounds_p50={:.1} \
             rounds_max={:.1} bytes_p50={} bytes_max={} failed_seeds={:?}",
            fault.name(),
            args.seeds,
            args.seeds as usize - failed.len(),
            args.seeds,
            p50 / gossip,
            max / gossip,
            bytes[mid],
            bytes[bytes.len() - 1],
            failed,
        );
    }
}

fn joiner(args: &Args) {
    for &ms in &args.latency_ms {
        let model = LinkModel {
            latency: Duration::from_millis(ms),
            ..LinkModel::default()
        };
        let mut sim = DataSim::new(2, ReplicatorConfig::default(), args.seed, model);
        sim.register::<GCounter>();
        sim.crash(1);
        let keys: Vec<Key<GCounter>> = (0..args.keys).map(|k| Key::new(format!("k/{k}"))).collect();
        let mut minimal = 0u64;
        for key in &keys {
            sim.update(0, key, Consistency::Local, |c, me| c.increment(me, 1))
                .expect("a local update starts");
            let state = sim
                .sim
                .process(0)
                .and_then(|p| p.replicator.value(key).ok().flatten());
            let bytes = state.map_or(0, |s| postcard::to_allocvec(s).map_or(0, |v| v.len()));
            minimal += (key.name().len() + bytes) as u64;
        }
        // Let the deltas to the crashed replica give up (they are lost).
        sim.run_for(Duration::from_secs(2));
        let sent_before = sim.sim.traffic(0).bytes;
        let rounds_before = sim.stats(0).anti_entropy_rounds;
        let start = sim.sim.elapsed();
        sim.restart(1);
        let n = keys.len();
        let done = sim.sim.run_until(Duration::from_secs(600), |s| {
            s.process(1).is_some_and(|p| p.replicator.stats().keys >= n)
        });
        let took = (sim.sim.elapsed() - start).as_secs_f64();
        let sent = sim.sim.traffic(0).bytes - sent_before;
        println!(
            "RESULT workload=data-sim scenario=joiner keys={n} latency_ms={ms} caught_up={done} \
             catch_up_s={took:.2} bytes_from_holder={sent} keys_and_states_bytes={minimal} \
             ratio={:.2} rounds_holder={} rounds_joiner={}",
            sent as f64 / minimal as f64,
            sim.stats(0).anti_entropy_rounds - rounds_before,
            sim.stats(1).anti_entropy_rounds,
        );
    }
}
