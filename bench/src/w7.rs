//! W7 local: `spawn`, `pingpong` and `fanin` on one machine, no network,
//! each with a plain-tokio baseline of the same pattern (tasks and
//! `tokio::sync::mpsc`).

use std::time::{Duration, Instant};

use clap::ValueEnum;
use plexus::{Actor, ActorRef, ActorSystem, Context};
use tokio::sync::{mpsc, oneshot};

use crate::report::{median, peak_rss_bytes, rss_bytes, ResultLine};

#[derive(clap::Args)]
pub struct Args {
    /// Which W7 sub-workload.
    #[arg(value_enum)]
    kind: Kind,
    /// Run only the plain-tokio baseline.
    #[arg(long)]
    baseline: bool,
    /// Actors to spawn (`spawn`) or messages in all (`pingpong`, `fanin`);
    /// defaults to the workload's 1,000,000 / 10,000,000.
    #[arg(long)]
    n: Option<u64>,
    /// Measured runs of each system; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Worker threads of the tokio runtime (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Spawn,
    Pingpong,
    Fanin,
}

pub fn run(args: &Args) {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(t) = args.threads {
        rt.worker_threads(t);
    }
    let rt = rt.build().expect("cannot start the tokio runtime");
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    match args.kind {
        Kind::Spawn => spawn(&rt, args),
        Kind::Pingpong => throughput(&rt, args, "w7-pingpong", 10_000_000, |n| {
            (Box::pin(pingpong_plexus(n)), Box::pin(pingpong_tokio(n)))
        }),
        Kind::Fanin => throughput(&rt, args, "w7-fanin", 10_000_000, move |n| {
            let senders = 2 * cores as u64;
            (
                Box::pin(fanin_plexus(n, senders)),
                Box::pin(fanin_tokio(n, senders)),
            )
        }),
    }
}

type Timed = std::pin::Pin<Box<dyn std::future::Future<Output = Duration> + Send>>;

/// Runs `work` as a task on a worker thread of the runtime, as an actor
/// program's code would run, rather than on the thread that calls
/// `block_on` (from there every spawn and wake-up would go through the
/// runtime's global queue and wake a sleeping worker).
fn on_worker<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    rt.block_on(async { tokio::spawn(work).await.expect("benchmark task panicked") })
}

/// Runs Plexus and baseline alternately `runs` times each and reports the
/// median messages per second.
fn throughput(
    rt: &tokio::runtime::Runtime,
    args: &Args,
    workload: &str,
    default_n: u64,
    make: impl Fn(u64) -> (Timed, Timed),
) {
    let n = args.n.unwrap_or(default_n);
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    // One unmeasured round warms allocator and scheduler for both.
    let warm = (n / 10).max(1);
    let (p, b) = make(warm);
    on_worker(rt, p);
    on_worker(rt, b);
    for run in 0..args.runs {
        let (p, b) = make(n);
        if !args.baseline {
            let t = on_worker(rt, p);
            ours.push(n as f64 / t.as_secs_f64());
            eprintln!("run {run}: plexus   {:>12.0} msgs/s", ours[run]);
        }
        let t = on_worker(rt, b);
        base.push(n as f64 / t.as_secs_f64());
        eprintln!("run {run}: baseline {:>12.0} msgs/s", base[run]);
    }
    let base = median(&mut base);
    if args.baseline {
        ResultLine::new(workload, "baseline")
            .field("msgs_per_s", format!("{base:.0}"))
            .field("n", n)
            .print();
        return;
    }
    let ours = median(&mut ours);
    ResultLine::new(workload, "plexus")
        .field("msgs_per_s", format!("{ours:.0}"))
        .field("n", n)
        .field("baseline_msgs_per_s", format!("{base:.0}"))
        .field("vs_baseline", format!("{:.2}", ours / base))
        .print();
}

// ---------------------------------------------------------------- spawn

/// Answers one message by telling the collector, then idles.
struct Answerer;

impl Actor for Answerer {
    type Msg = ActorRef<()>;
    async fn handle(&mut self, collector: ActorRef<()>, _ctx: &mut Context<ActorRef<()>>) {
        collector.tell(());
    }
}

fn collector(system: &ActorSystem, expected: u64) -> (ActorRef<()>, oneshot::Receiver<()>) {
    let (done_tx, done_rx) = oneshot::channel();
    let mut done = Some(done_tx);
    let mut seen = 0u64;
    let r = system.spawn_fn(move |(), _ctx| {
        seen += 1;
        if seen == expected {
            if let Some(d) = done.take() {
                let _ = d.send(());
            }
        }
    });
    (r, done_rx)
}

fn spawn(rt: &tokio::runtime::Runtime, args: &Args) {
    let n = args.n.unwrap_or(1_000_000);
    let rss_before = rss_bytes().unwrap_or(0);
    // Each run reports the peak RSS when all answers are in, before the
    // (untimed) teardown.
    let ((secs, peak), system) = if args.baseline {
        (on_worker(rt, spawn_tokio(n)), "baseline")
    } else {
        (on_worker(rt, spawn_plexus(n)), "plexus")
    };
    let per_actor = peak.saturating_sub(rss_before) as f64 / n as f64;
    ResultLine::new("w7-spawn", system)
        .field("seconds", format!("{secs:.3}"))
        .field("peak_rss_mb", format!("{:.1}", peak as f64 / 1e6))
        .field("bytes_per_actor", format!("{per_actor:.0}"))
        .field("n", n)
        .print();
}

async fn spawn_plexus(n: u64) -> (f64, u64) {
    let system = ActorSystem::new();
    let (collector, done) = collector(&system, n);
    let start = Instant::now();
    let mut refs = Vec::with_capacity(n as usize);
    for _ in 0..n {
        refs.push(system.spawn(Answerer));
    }
    let spawned = start.elapsed();
    let rss_spawned = rss_bytes().unwrap_or(0);
    for r in &refs {
        r.tell(collector.clone());
    }
    let told = start.elapsed();
    let rss_told = rss_bytes().unwrap_or(0);
    done.await.expect("collector stopped early");
    let rss_done = rss_bytes().unwrap_or(0);
    eprintln!(
        "phases: spawn {spawned:?}, tell done at {told:?}; rss MB after spawn {}, after tell {}, answered {}",
        rss_spawned / 1_000_000,
        rss_told / 1_000_000,
        rss_done / 1_000_000
    );
    let secs = start.elapsed().as_secs_f64();
    let peak = peak_rss_bytes().unwrap_or(0);
    eprintln!("spawned and answered {n} actors in {secs:.3} s");
    drop(refs);
    let t = Instant::now();
    system.shutdown().await;
    eprintln!("shutdown of {} actors took {:?}", n + 1, t.elapsed());
    (secs, peak)
}

async fn spawn_tokio(n: u64) -> (f64, u64) {
    let (answers_tx, mut answers) = mpsc::unbounded_channel::<()>();
    let start = Instant::now();
    let mut inboxes = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (tx, mut rx) = mpsc::unbounded_channel::<mpsc::UnboundedSender<()>>();
        tokio::spawn(async move {
            while let Some(reply) = rx.recv().await {
                let _ = reply.send(());
            }
        });
        inboxes.push(tx);
    }
    for tx in &inboxes {
        let _ = tx.send(answers_tx.clone());
    }
    for _ in 0..n {
        answers.recv().await.expect("answers channel closed early");
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = peak_rss_bytes().unwrap_or(0);
    drop(inboxes);
    (secs, peak)
}

// ------------------------------------------------------------- pingpong

enum Ball {
    Peer(ActorRef<Ball>, oneshot::Sender<()>),
    Hit(u64),
}

/// Returns the ball until `limit` hits have been made in all.
struct Player {
    peer: Option<ActorRef<Ball>>,
    done: Option<oneshot::Sender<()>>,
    limit: u64,
}

impl Actor for Player {
    type Msg = Ball;
    async fn handle(&mut self, msg: Ball, _ctx: &mut Context<Ball>) {
        match msg {
            Ball::Peer(p, done) => {
                p.tell(Ball::Hit(1));
                self.peer = Some(p);
                self.done = Some(done);
            }
            Ball::Hit(n) if n >= self.limit => match self.done.take() {
                Some(d) => {
                    let _ = d.send(());
                }
                // The other player holds the completion signal.
                None => {
                    if let Some(p) = &self.peer {
                        p.tell(Ball::Hit(n));
                    }
                }
            },
            Ball::Hit(n) => {
                if let Some(p) = &self.peer {
                    p.tell(Ball::Hit(n + 1));
                }
            }
        }
    }
}

async fn pingpong_plexus(n: u64) -> Duration {
    let system = ActorSystem::new();
    let a = system.spawn(Player {
        peer: None,
        done: None,
        limit: n,
    });
    let b = system.spawn(Player {
        peer: Some(a.clone()),
        done: None,
        limit: n,
    });
    let (done_tx, done) = oneshot::channel();
    let start = Instant::now();
    a.tell(Ball::Peer(b, done_tx));
    done.await.expect("players stopped early");
    let t = start.elapsed();
    system.shutdown().await;
    t
}

async fn pingpong_tokio(n: u64) -> Duration {
    let (a_tx, mut a_rx) = mpsc::unbounded_channel::<u64>();
    let (b_tx, mut b_rx) = mpsc::unbounded_channel::<u64>();
    let (done_tx, done) = oneshot::channel();
    let start = Instant::now();
    let a = tokio::spawn(async move {
        b_tx.send(1).expect("peer gone");
        while let Some(hit) = a_rx.recv().await {
            if hit >= n {
                break;
            }
            b_tx.send(hit + 1).expect("peer gone");
        }
        let _ = done_tx.send(());
    });
    let b = tokio::spawn(async move {
        while let Some(hit) = b_rx.recv().await {
            if a_tx.send(hit + 1).is_err() || hit + 1 >= n {
                break;
            }
        }
    });
    done.await.expect("players stopped early");
    let t = start.elapsed();
    let _ = a.await;
    let _ = b.await;
    t
}

// ---------------------------------------------------------------- fanin

/// One value from a source; the sink folds them into a checksum so the
/// payload is really read.
struct Value(u64);

async fn fanin_plexus(n: u64, senders: u64) -> Duration {
    let system = ActorSystem::new();
    let (done_tx, done) = oneshot::channel();
    let mut done_tx = Some(done_tx);
    let mut received = 0u64;
    let mut checksum = 0u64;
    let sink = system.spawn_fn(move |Value(v), _ctx| {
        checksum = checksum.wrapping_add(v);
        received += 1;
        if received == n {
            if let Some(d) = done_tx.take() {
                let _ = d.send(());
            }
            std::hint::black_box(checksum);
        }
    });
    let per_sender = n / senders;
    let sources: Vec<ActorRef<u64>> = (0..senders)
        .map(|i| {
            let sink = sink.clone();
            system.spawn_fn(move |count: u64, _ctx| {
                for v in 0..count {
                    sink.tell(Value(i << 40 | v));
                }
            })
        })
        .collect();
    let start = Instant::now();
    for (i, s) in sources.iter().enumerate() {
        let extra = if (i as u64) < n % senders { 1 } else { 0 };
        s.tell(per_sender + extra);
    }
    done.await.expect("sink stopped early");
    let t = start.elapsed();
    system.shutdown().await;
    t
}

async fn fanin_tokio(n: u64, senders: u64) -> Duration {
    let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
    let per_sender = n / senders;
    let start = Instant::now();
    for i in 0..senders {
        let tx = tx.clone();
        let count = per_sender + if i < n % senders { 1 } else { 0 };
        tokio::spawn(async move {
            for v in 0..count {
                let _ = tx.send(i << 40 | v);
            }
        });
    }
    drop(tx);
    let mut received = 0u64;
    let mut checksum = 0u64;
    while let Some(v) = rx.recv().await {
        checksum = checksum.wrapping_add(v);
        received += 1;
        if received == n {
            break;
        }
    }
    std::hint::black_box(checksum);
    start.elapsed()
}
