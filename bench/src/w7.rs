//! W7 local: `spawn`, `pingpong` and `fanin` on one machine, no network,
//! each run in the same invocation on Plexus, on a plain-tokio baseline of
//! the same pattern (tasks and `tokio::sync::mpsc`) and on actix (see
//! [`actix_peer`]), alternating run by run.
//!
//! `spawn` runs each system's run in a child process of its own: the
//! bytes per actor come from the peak RSS, which is per process and would
//! otherwise keep the first run's peak.

use std::process::Command;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use plexus::{Actor, ActorRef, ActorSystem, Context};
use tokio::sync::{mpsc, oneshot};

use crate::report::{median, peak_rss_bytes, rss_bytes, ResultLine};

mod actix_peer;

#[derive(clap::Args)]
pub struct Args {
    /// Which W7 sub-workload.
    #[arg(value_enum)]
    kind: Kind,
    /// Run only the plain-tokio baseline (as `--systems baseline`).
    #[arg(long)]
    baseline: bool,
    /// The systems to run, comma-separated (default: all three).
    #[arg(long, value_enum, value_delimiter = ',')]
    systems: Vec<System>,
    /// Actors to spawn (`spawn`) or messages in all (`pingpong`, `fanin`);
    /// defaults to the workload's 1,000,000 / 10,000,000.
    #[arg(long)]
    n: Option<u64>,
    /// Measured runs of each system; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Worker threads of the tokio runtime (default: one per core); actix
    /// takes as many arbiters for `fanin`'s senders.
    #[arg(long)]
    threads: Option<usize>,
    /// Internal: one `spawn` run of this system in this process.
    #[arg(long, hide = true)]
    one: Option<System>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Spawn,
    Pingpong,
    Fanin,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum System {
    Plexus,
    /// The plain-tokio baseline.
    Baseline,
    Actix,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            Self::Plexus => "plexus",
            Self::Baseline => "baseline",
            Self::Actix => "actix",
        }
    }
}

impl Args {
    /// The systems to run; Plexus last, so its line (with the ratios)
    /// is the last `RESULT`.
    fn systems(&self) -> Vec<System> {
        if self.baseline {
            return vec![System::Baseline];
        }
        let all = [System::Baseline, System::Actix, System::Plexus];
        all.into_iter()
            .filter(|s| self.systems.is_empty() || self.systems.contains(s))
            .collect()
    }
}

pub fn run(args: &Args) {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(t) = args.threads {
        rt.worker_threads(t);
    }
    let rt = rt.build().expect("cannot start the tokio runtime");
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = args.threads.unwrap_or(cores);
    match args.kind {
        Kind::Spawn => match args.one {
            Some(system) => spawn_one(&rt, args, system),
            None => spawn(args),
        },
        Kind::Pingpong => throughput(args, "w7-pingpong", |system, n| match system {
            System::Plexus => on_worker(&rt, pingpong_plexus(n)),
            System::Baseline => on_worker(&rt, pingpong_tokio(n)),
            System::Actix => actix_peer::pingpong(n),
        }),
        Kind::Fanin => {
            let senders = 2 * cores as u64;
            throughput(args, "w7-fanin", |system, n| match system {
                System::Plexus => on_worker(&rt, fanin_plexus(n, senders)),
                System::Baseline => on_worker(&rt, fanin_tokio(n, senders)),
                System::Actix => actix_peer::fanin(n, senders, threads),
            })
        }
    }
}

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

/// Runs the systems alternately `runs` times each and reports each one's
/// median messages per second; Plexus' line adds its ratio to the others
/// (above 1: Plexus is faster).
fn throughput(args: &Args, workload: &str, measure: impl Fn(System, u64) -> Duration) {
    let n = args.n.unwrap_or(10_000_000);
    let systems = args.systems();
    // One unmeasured round warms allocator and scheduler for all.
    let warm = (n / 10).max(1);
    for &s in &systems {
        measure(s, warm);
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); systems.len()];
    for run in 0..args.runs {
        for (i, &s) in systems.iter().enumerate() {
            let rate = n as f64 / measure(s, n).as_secs_f64();
            rates[i].push(rate);
            eprintln!("run {run}: {:<8} {rate:>12.0} msgs/s", s.name());
        }
    }
    let medians: Vec<(System, f64)> = systems
        .iter()
        .zip(&mut rates)
        .map(|(&s, r)| (s, median(r)))
        .collect();
    let of = |sys| medians.iter().find(|(s, _)| *s == sys).map(|&(_, m)| m);
    for &(s, m) in &medians {
        let mut line = ResultLine::new(workload, s.name())
            .field("msgs_per_s", format!("{m:.0}"))
            .field("n", n);
        if s == System::Plexus {
            if let Some(b) = of(System::Baseline) {
                line = line
                    .field("baseline_msgs_per_s", format!("{b:.0}"))
                    .field("vs_baseline", format!("{:.2}", m / b));
            }
            if let Some(a) = of(System::Actix) {
                line = line
                    .field("actix_msgs_per_s", format!("{a:.0}"))
                    .field("vs_actix", format!("{:.2}", m / a));
            }
        }
        line.print();
    }
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

/// Runs each system's `spawn` `runs` times, alternating, each run in a
/// child process (`--one`), and reports each one's medians; Plexus' line
/// adds its speed ratio to the others (their seconds over its own: above
/// 1, Plexus is faster).
///
/// The children run back to back on purpose. On a VM whose kernel reports
/// free pages to the host (`/sys/module/page_reporting`), memory freed
/// some seconds ago has gone back to the host, and the kernel's zeroing
/// of it on first touch (`clear_page_erms`) then costs several times
/// more: issue 32 measured a 1 M `spawn` at 2.6-2.8 s (1.5-2.2 s of it
/// system time) after a 5 s pause against 0.48-0.64 s (0.11-0.19 s)
/// right after another run, the same on the tokio baseline. That is the
/// bimodal spawn time; a run's `seconds` includes it.
fn spawn(args: &Args) {
    let n = args.n.unwrap_or(1_000_000);
    let systems = args.systems();
    let exe = std::env::current_exe().expect("cannot find this program");
    // (seconds, bytes per actor, peak RSS in MB) of each run, per system.
    let mut runs: Vec<Vec<[f64; 3]>> = vec![Vec::new(); systems.len()];
    for run in 0..args.runs {
        for (i, &s) in systems.iter().enumerate() {
            let mut cmd = Command::new(&exe);
            cmd.args(["w7", "spawn", "--n", &n.to_string(), "--one", s.name()]);
            if let Some(t) = args.threads {
                cmd.args(["--threads", &t.to_string()]);
            }
            let out = cmd
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("cannot run a spawn child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let field = |key: &str| -> f64 {
                stdout
                    .lines()
                    .filter(|l| l.starts_with("RESULT "))
                    .flat_map(str::split_whitespace)
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| {
                        panic!("spawn child of {} gave no {key}: {stdout}", s.name())
                    })
            };
            let r = [
                field("seconds"),
                field("bytes_per_actor"),
                field("peak_rss_mb"),
            ];
            eprintln!(
                "run {run}: {:<8} {:.3} s, {:.0} B/actor, peak RSS {:.1} MB",
                s.name(),
                r[0],
                r[1],
                r[2]
            );
            runs[i].push(r);
        }
    }
    let medians: Vec<(System, [f64; 3])> = systems
        .iter()
        .zip(&runs)
        .map(|(&s, r)| {
            let mut m = [0.0; 3];
            for (k, m) in m.iter_mut().enumerate() {
                *m = median(&mut r.iter().map(|x| x[k]).collect::<Vec<_>>());
            }
            (s, m)
        })
        .collect();
    let of = |sys| medians.iter().find(|(s, _)| *s == sys).map(|&(_, m)| m[0]);
    for (s, [secs, per_actor, peak]) in &medians {
        let i = systems.iter().position(|x| x == s).unwrap_or(0);
        let each: Vec<String> = runs[i].iter().map(|r| format!("{:.3}", r[0])).collect();
        let mut line = ResultLine::new("w7-spawn", s.name())
            .field("seconds", format!("{secs:.3}"))
            .field("peak_rss_mb", format!("{peak:.1}"))
            .field("bytes_per_actor", format!("{per_actor:.0}"))
            .field("n", n)
            .field("runs", each.join(","));
        if *s == System::Plexus {
            if let Some(b) = of(System::Baseline) {
                line = line
                    .field("baseline_seconds", format!("{b:.3}"))
                    .field("vs_baseline", format!("{:.2}", b / secs));
            }
            if let Some(a) = of(System::Actix) {
                line = line
                    .field("actix_seconds", format!("{a:.3}"))
                    .field("vs_actix", format!("{:.2}", a / secs));
            }
        }
        line.print();
    }
}

/// One `spawn` run of `system` in this process (a child of [`spawn`]).
fn spawn_one(rt: &tokio::runtime::Runtime, args: &Args, system: System) {
    let n = args.n.unwrap_or(1_000_000);
    let rss_before = rss_bytes().unwrap_or(0);
    // Each run reports the peak RSS when all answers are in, before the
    // (untimed) teardown.
    let (secs, peak) = match system {
        System::Plexus => on_worker(rt, spawn_plexus(n)),
        System::Baseline => on_worker(rt, spawn_tokio(n)),
        System::Actix => actix_peer::spawn(n),
    };
    let per_actor = peak.saturating_sub(rss_before) as f64 / n as f64;
    ResultLine::new("w7-spawn", system.name())
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
