//! W8 entities (issue 33, virtual actors): counter entities by id on a
//! cluster of member processes, asked by client processes; then a member
//! joins and another leaves gracefully while the asks go on.
//!
//! ```text
//! cargo run --release -p plexus-bench -- w8 [--entities 100000] [--seconds 24]
//!     [--clients 1] [--in-flight 64] [--no-churn] [--peer pekko | --no-peer]
//! ```
//!
//! Every process is this binary re-run in a hidden role (`w8-member`,
//! `w8-client`), or, for the Pekko peer, `java -jar` of
//! `bench/peers/pekko-sharding` in the same roles. Both speak the same line
//! protocol on stdin and stdout, so one orchestrator ([`run_system`])
//! drives either:
//!
//! - member, stdout: `READY <address>`, then `STATS shards=N active=N
//!   held=N handled=N` every 200 ms; on `LEAVE` (stdin) it hands its shards
//!   over and leaves the cluster, prints `LEFT leave_ms=N handled=N` and
//!   exits; on `FINAL` it prints `FINAL handled=N`.
//! - client, stdout: `READY` once it sees the members up; on `WARM` it
//!   asks `Get` of its share of the ids once (activating every entity)
//!   and prints `WARMED ms=N failed=N`; on `GO` it asks `Add` of uniformly
//!   random ids with `in_flight` asks outstanding and prints `TICK n=N`
//!   (answers so far) every second; on `STOP` it lets the outstanding asks
//!   finish and prints `DONE sent=N answered=N failed=N` and
//!   `HIST v:c,v:c,...` (latency in µs).
//!
//! `handled` is the count of `Add`s the member's entities handled; at the
//! end the members' sum (the leaver's from its `LEFT` line) must equal the
//! answers the clients counted: a lost message leaves an ask unanswered
//! (a failure), a message handled twice makes the sum larger.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use plexus::cluster::{Cluster, ClusterConfig, MemberState};
use plexus::prelude::*;
use plexus::sharding::node::{Entity, EntityContext, Sharding};
use plexus::sharding::ShardingConfig;
use serde::{Deserialize, Serialize};

use crate::report::ResultLine;

/// Arguments of `w8`.
#[derive(clap::Args)]
pub struct Args {
    /// Counter entities (ids 0 .. N).
    #[arg(long, default_value_t = 100_000)]
    entities: u64,
    /// Seconds of asking in steady state: a third before the join, a
    /// third between the join's rebalance and the leave, a third after
    /// the leave's (all of it with `--no-churn`).
    #[arg(long, default_value_t = 24)]
    seconds: u64,
    /// Client processes.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Asks outstanding per client process.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// No join and no leave: steady asking only.
    #[arg(long)]
    no_churn: bool,
    /// Member processes at the start (a fourth joins with churn).
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Shards of the entity type (both systems).
    #[arg(long, default_value_t = 1000)]
    shards: u32,
    /// How often the coordinator rebalances, in ms (both systems; 5,000
    /// is Plexus' default, Pekko's is 10,000).
    #[arg(long, default_value_t = 5000)]
    rebalance_ms: u64,
    /// An ask unanswered this long counts as failed.
    #[arg(long, default_value_t = 30)]
    ask_timeout_s: u64,
    /// Run the peer too (`pekko`); by default it runs when `java` and the
    /// built jar are there.
    #[arg(long, value_enum)]
    peer: Option<Peer>,
    /// Do not run the peer.
    #[arg(long, conflicts_with = "peer")]
    no_peer: bool,
    /// Run the peer only (with `--peer`).
    #[arg(long, requires = "peer")]
    peer_only: bool,
    /// Plexus' shard lease, in ms (its default 10,000; a new cluster's
    /// coordinator waits 2 leases and a margin before it places its
    /// first shard).
    #[arg(long, default_value_t = 10_000)]
    lease_ms: u64,
    /// The Pekko peer's jar (default:
    /// bench/peers/pekko-sharding/target/pekko-sharding.jar).
    #[arg(long)]
    pekko_jar: Option<PathBuf>,
    /// JVM options of every Pekko process, space-separated.
    #[arg(long, default_value = "-Xms256m -Xmx1g -XX:+UseParallelGC")]
    jvm_opts: String,
    /// Gives up on a phase (start, warm-up, a rebalance) after this many
    /// seconds.
    #[arg(long, default_value_t = 180)]
    guard_s: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum Peer {
    Pekko,
}

/// `w8-member`: one member process.
#[derive(clap::Args, Clone)]
pub struct MemberArgs {
    /// The first member's address (none: this one forms the cluster).
    #[arg(long)]
    seed: Option<String>,
    #[arg(long, default_value_t = 1000)]
    shards: u32,
    #[arg(long, default_value_t = 5000)]
    rebalance_ms: u64,
    #[arg(long, default_value_t = 10_000)]
    lease_ms: u64,
}

/// `w8-client`: one client process.
#[derive(clap::Args, Clone)]
pub struct ClientArgs {
    #[arg(long)]
    seed: String,
    #[arg(long)]
    index: u64,
    #[arg(long)]
    clients: u64,
    #[arg(long)]
    entities: u64,
    #[arg(long)]
    in_flight: usize,
    /// Members (besides this client) that must be up before `READY`.
    #[arg(long)]
    members: usize,
    #[arg(long, default_value_t = 30)]
    ask_timeout_s: u64,
    #[arg(long, default_value_t = 10_000)]
    lease_ms: u64,
}

const TYPE: &str = "counter";
const STATS_EVERY: Duration = Duration::from_millis(200);

// ---------------------------------------------------------------- roles

#[derive(Serialize, Deserialize)]
pub enum CounterMsg {
    /// Count one more; answered with the new count.
    Add(ReplyTo<u64>),
    /// The count.
    Get(ReplyTo<u64>),
}
remote_message!(CounterMsg = "bench.w8.CounterMsg");

struct Counter {
    count: u64,
    handled: Arc<AtomicU64>,
}

impl Entity for Counter {
    type Msg = CounterMsg;

    async fn handle(&mut self, msg: CounterMsg, _ctx: &mut EntityContext<'_>) {
        match msg {
            CounterMsg::Add(reply) => {
                self.count += 1;
                self.handled.fetch_add(1, Ordering::Relaxed);
                reply.send(self.count);
            }
            CounterMsg::Get(reply) => reply.send(self.count),
        }
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("w8: {what}: {e}");
    std::process::exit(1);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Lines of stdin, on a thread of their own.
fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_owned()).is_err() {
                break;
            }
        }
    });
    rx
}

/// The default timings (probes 1 s, gossip 200 ms), as the `plexus`
/// command's members run.
fn cluster_config(seed: Option<&str>) -> ClusterConfig {
    ClusterConfig::default()
        .name("w8")
        .seeds(seed.map(str::to_owned))
}

struct Started {
    _system: ActorSystem,
    _node: Node,
    cluster: Cluster,
    sharding: Sharding,
    uri: String,
}

async fn start(seed: Option<&str>, config: ShardingConfig) -> Started {
    let system = ActorSystem::new();
    let node = Node::start(&system, NodeConfig::default().cookie("w8"))
        .unwrap_or_else(|e| fail("node", e));
    let uri = node
        .listen("tcp://127.0.0.1:0")
        .await
        .unwrap_or_else(|e| fail("listen", e));
    let cluster =
        Cluster::start(&node, &system, cluster_config(seed)).unwrap_or_else(|e| fail("cluster", e));
    let sharding =
        Sharding::start(&node, &system, &cluster, config).unwrap_or_else(|e| fail("sharding", e));
    Started {
        _system: system,
        _node: node,
        cluster,
        sharding,
        uri,
    }
}

fn sharding_config(shards: u32, rebalance_ms: u64, lease_ms: u64) -> ShardingConfig {
    let mut config = ShardingConfig {
        shards,
        rebalance_every: Duration::from_millis(rebalance_ms),
        ..ShardingConfig::default()
    };
    if lease_ms != 10_000 {
        config.lease = Duration::from_millis(lease_ms);
        // The default margin is a fifth of the default lease.
        config.margin = Duration::from_millis(lease_ms / 5);
    }
    config.rebalance = plexus::sharding::Rebalance::for_shards(shards);
    config
}

/// Runs a member until it leaves or is killed.
pub async fn member(args: MemberArgs) {
    let m = start(
        args.seed.as_deref(),
        sharding_config(args.shards, args.rebalance_ms, args.lease_ms),
    )
    .await;
    let handled = Arc::new(AtomicU64::new(0));
    let counted = handled.clone();
    m.sharding
        .register(TYPE, move |_id| Counter {
            count: 0,
            handled: counted.clone(),
        })
        .unwrap_or_else(|e| fail("register", e));
    tracing::info!(uri = %m.uri, seed = ?args.seed, "w8 member started");
    say(&format!("READY {}", m.uri));
    let mut commands = stdin_lines();
    let mut tick = tokio::time::interval(STATS_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let s = m.sharding.stats().await;
                say(&format!(
                    "STATS shards={} active={} held={} handled={} handoffs={} coordinator={} dropped={} lost={}",
                    s.regions.shards.get(TYPE).copied().unwrap_or(0),
                    s.regions.active.get(TYPE).copied().unwrap_or(0),
                    s.regions.held,
                    handled.load(Ordering::Relaxed),
                    s.regions.handoffs,
                    u8::from(s.regions.coordinator),
                    s.dropped,
                    s.lost,
                ));
            }
            command = commands.recv() => match command.as_deref() {
                Some("LEAVE") => {
                    let t = Instant::now();
                    tracing::info!("w8 member: handing its shards over");
                    let left = m.sharding.leave(Duration::from_secs(120)).await;
                    let leave_ms = t.elapsed().as_millis();
                    if let Err(e) = &left {
                        tracing::warn!(%e, "w8 member: leave");
                    }
                    let s = m.sharding.stats().await;
                    m.cluster.leave().await;
                    let cluster_leave_ms = t.elapsed().as_millis();
                    // Diagnosis: stay this long after the leave (the
                    // process exits at once by default, as a leaving
                    // process would).
                    if let Some(ms) = std::env::var("W8_LINGER_MS").ok().and_then(|v| v.parse().ok()) {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    let after = m.sharding.stats().await;
                    tracing::info!(
                        leave_ms,
                        cluster_leave_ms,
                        held_at_leave = s.regions.held,
                        held_at_exit = after.regions.held,
                        active_at_exit = after.regions.active.get(TYPE).copied().unwrap_or(0),
                        "w8 member: left the cluster"
                    );
                    say(&format!(
                        "LEFT leave_ms={leave_ms} cluster_leave_ms={cluster_leave_ms} ok={} shards={} held={} handled={}",
                        left.is_ok(),
                        s.regions.shards.get(TYPE).copied().unwrap_or(0),
                        after.regions.held,
                        handled.load(Ordering::Relaxed),
                    ));
                    std::process::exit(0);
                }
                Some("FINAL") => {
                    let s = m.sharding.stats().await;
                    say(&format!(
                        "FINAL handled={} dropped={} lost={} refusals={}",
                        handled.load(Ordering::Relaxed),
                        s.dropped,
                        s.lost,
                        s.regions.refusals
                    ));
                }
                Some("EXIT") | None => std::process::exit(0),
                Some(other) => tracing::warn!(other, "w8 member: unknown command"),
            }
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// Runs a client until it is told to exit.
pub async fn client(args: ClientArgs) {
    // Clients host nothing: their region only routes.
    let c = start(Some(&args.seed), sharding_config(1000, 5000, args.lease_ms)).await;
    let guard = Instant::now() + Duration::from_secs(120);
    loop {
        let up = c
            .cluster
            .members()
            .iter()
            .filter(|m| m.state == MemberState::Up && *m.address != *c.uri)
            .count();
        if up >= args.members {
            break;
        }
        if Instant::now() > guard {
            fail("client", "the members were not up within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tracing::info!(uri = %c.uri, "w8 client up");
    say("READY");
    let timeout = Duration::from_secs(args.ask_timeout_s);
    let sharding = c.sharding.clone();
    let mut commands = stdin_lines();
    let answered = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut askers = Vec::new();
    let mut ticker = None;
    while let Some(command) = commands.recv().await {
        match command.as_str() {
            "WARM" => {
                let t = Instant::now();
                let next = Arc::new(AtomicU64::new(0));
                let warm_failed = Arc::new(AtomicU64::new(0));
                let mut tasks = Vec::new();
                for _ in 0..args.in_flight {
                    let (next, warm_failed, sharding) =
                        (next.clone(), warm_failed.clone(), sharding.clone());
                    let (index, clients, entities) = (args.index, args.clients, args.entities);
                    tasks.push(tokio::spawn(async move {
                        loop {
                            let k = next.fetch_add(1, Ordering::Relaxed);
                            let id = index + k * clients;
                            if id >= entities {
                                return;
                            }
                            let e = sharding
                                .entity::<CounterMsg>(TYPE, &id.to_string())
                                .expect("a good id");
                            if let Err(e) = e.ask(CounterMsg::Get, timeout).await {
                                if warm_failed.fetch_add(1, Ordering::Relaxed) < 5 {
                                    tracing::warn!(%e, "w8 client: warm-up ask");
                                }
                            }
                        }
                    }));
                }
                for t in tasks {
                    let _ = t.await;
                }
                say(&format!(
                    "WARMED ms={} failed={}",
                    t.elapsed().as_millis(),
                    warm_failed.load(Ordering::Relaxed)
                ));
            }
            "GO" => {
                let seed = rand::random::<u64>();
                for k in 0..args.in_flight {
                    let (answered, sent, failed, stop, sharding) = (
                        answered.clone(),
                        sent.clone(),
                        failed.clone(),
                        stop.clone(),
                        sharding.clone(),
                    );
                    let entities = args.entities;
                    askers.push(tokio::spawn(async move {
                        use rand::{Rng as _, SeedableRng as _};
                        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ k as u64);
                        let mut hist = new_histogram();
                        while !stop.load(Ordering::Relaxed) {
                            let id = rng.gen_range(0..entities);
                            let e = sharding
                                .entity::<CounterMsg>(TYPE, &id.to_string())
                                .expect("a good id");
                            sent.fetch_add(1, Ordering::Relaxed);
                            let t = Instant::now();
                            match e.ask(CounterMsg::Add, timeout).await {
                                Ok(_) => {
                                    hist.saturating_record(t.elapsed().as_micros() as u64);
                                    answered.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    if failed.fetch_add(1, Ordering::Relaxed) < 20 {
                                        tracing::warn!(%e, "w8 client: ask failed");
                                    }
                                }
                            }
                        }
                        hist
                    }));
                }
                let answered = answered.clone();
                ticker = Some(tokio::spawn(async move {
                    let start = tokio::time::Instant::now();
                    let mut k = 1u32;
                    loop {
                        tokio::time::sleep_until(start + Duration::from_secs(k.into())).await;
                        say(&format!("TICK n={}", answered.load(Ordering::Relaxed)));
                        k += 1;
                    }
                }));
            }
            "STOP" => {
                stop.store(true, Ordering::Relaxed);
                if let Some(t) = ticker.take() {
                    t.abort();
                }
                let mut hist = new_histogram();
                for a in askers.drain(..) {
                    if let Ok(h) = a.await {
                        hist.add(&h).expect("same bounds");
                    }
                }
                say(&format!(
                    "DONE sent={} answered={} failed={}",
                    sent.load(Ordering::Relaxed),
                    answered.load(Ordering::Relaxed),
                    failed.load(Ordering::Relaxed)
                ));
                say(&format!("HIST {}", hist_line(&hist)));
            }
            "EXIT" => std::process::exit(0),
            other => tracing::warn!(other, "w8 client: unknown command"),
        }
    }
    std::process::exit(0);
}

fn hist_line(h: &Histogram<u64>) -> String {
    let parts: Vec<String> = h
        .iter_recorded()
        .map(|v| format!("{}:{}", v.value_iterated_to(), v.count_at_value()))
        .collect();
    parts.join(",")
}

// --------------------------------------------------------- orchestrator

/// How the processes of one system are started.
trait Launcher {
    fn name(&self) -> &'static str;
    fn member(&self, seed: Option<&str>, args: &Args) -> Command;
    fn client(&self, seed: &str, index: usize, args: &Args) -> Command;
}

struct PlexusLauncher;

impl Launcher for PlexusLauncher {
    fn name(&self) -> &'static str {
        "plexus"
    }
    fn member(&self, seed: Option<&str>, args: &Args) -> Command {
        let mut cmd = Command::new(std::env::current_exe().expect("the bench binary's path"));
        cmd.args(["w8-member", "--shards", &args.shards.to_string()])
            .args(["--rebalance-ms", &args.rebalance_ms.to_string()])
            .args(["--lease-ms", &args.lease_ms.to_string()]);
        if let Some(s) = seed {
            cmd.args(["--seed", s]);
        }
        cmd
    }
    fn client(&self, seed: &str, index: usize, args: &Args) -> Command {
        let mut cmd = Command::new(std::env::current_exe().expect("the bench binary's path"));
        cmd.args(["w8-client", "--seed", seed])
            .args(["--index", &index.to_string()])
            .args(["--clients", &args.clients.to_string()])
            .args(["--entities", &args.entities.to_string()])
            .args(["--in-flight", &args.in_flight.to_string()])
            .args(["--members", &args.members.to_string()])
            .args(["--ask-timeout-s", &args.ask_timeout_s.to_string()])
            .args(["--lease-ms", &args.lease_ms.to_string()]);
        cmd
    }
}

struct PekkoLauncher {
    jar: PathBuf,
}

impl PekkoLauncher {
    fn java(&self, args: &Args, role: &str) -> Command {
        let mut cmd = Command::new("java");
        cmd.args(args.jvm_opts.split_whitespace())
            .arg("-jar")
            .arg(&self.jar)
            .arg(role)
            .args(["--shards", &args.shards.to_string()])
            .args(["--rebalance-ms", &args.rebalance_ms.to_string()]);
        cmd
    }
}

impl Launcher for PekkoLauncher {
    fn name(&self) -> &'static str {
        "pekko"
    }
    fn member(&self, seed: Option<&str>, args: &Args) -> Command {
        let mut cmd = self.java(args, "member");
        if let Some(s) = seed {
            cmd.args(["--seed", s]);
        }
        cmd
    }
    fn client(&self, seed: &str, index: usize, args: &Args) -> Command {
        let mut cmd = self.java(args, "client");
        cmd.args(["--seed", seed])
            .args(["--index", &index.to_string()])
            .args(["--clients", &args.clients.to_string()])
            .args(["--entities", &args.entities.to_string()])
            .args(["--in-flight", &args.in_flight.to_string()])
            .args(["--members", &args.members.to_string()])
            .args(["--ask-timeout-s", &args.ask_timeout_s.to_string()]);
        cmd
    }
}

/// A process of the run: member `M(i)` or client `C(i)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
enum Who {
    M(usize),
    C(usize),
}

struct Line {
    who: Who,
    at: Instant,
    text: String,
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    at: Option<Instant>,
    shards: u64,
    held: u64,
}

fn fields(s: &str) -> HashMap<&str, &str> {
    s.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn num(f: &HashMap<&str, &str>, key: &str) -> u64 {
    f.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// One system's processes and what they said.
struct Run {
    procs: HashMap<Who, Proc>,
    lines: mpsc::Receiver<Line>,
    tx: mpsc::Sender<Line>,
    stats: BTreeMap<usize, Stats>,
    /// (when, cumulative answers) per client.
    ticks: BTreeMap<usize, Vec<(Instant, u64)>>,
    /// Lines other than stats and ticks, until a wait takes them.
    backlog: Vec<Line>,
    guard: Duration,
}

impl Drop for Run {
    fn drop(&mut self) {
        for p in self.procs.values_mut() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

impl Run {
    fn spawn(&mut self, who: Who, mut cmd: Command) -> Result<(), String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting {who:?}: {e}"))?;
        let stdout = child.stdout.take().ok_or("stdout not piped")?;
        let stdin = child.stdin.take();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines().map_while(Result::ok) {
                let line = Line {
                    who,
                    at: Instant::now(),
                    text,
                };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        self.procs.insert(who, Proc { child, stdin });
        Ok(())
    }

    fn tell(&mut self, who: Who, command: &str) -> Result<(), String> {
        let p = self.procs.get_mut(&who).ok_or(format!("no {who:?}"))?;
        let stdin = p.stdin.as_mut().ok_or(format!("{who:?} has no stdin"))?;
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("telling {who:?} {command}: {e}"))
    }

    /// Reads lines (keeping the stats and ticks) until `done` holds for
    /// one, or `until`; `Ok(None)` at `until`.
    fn read_until(
        &mut self,
        what: &str,
        until: Option<Instant>,
        mut done: impl FnMut(&Self, &Line) -> bool,
    ) -> Result<Option<Line>, String> {
        let deadline = Instant::now() + self.guard;
        loop {
            let stop = until.map_or(deadline, |u| u.min(deadline));
            let left = stop.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.take(&line);
                    if done(self, &line) {
                        return Ok(Some(line));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if until.is_some_and(|u| u <= deadline) {
                        return Ok(None);
                    }
                    return Err(format!("gave up waiting for {what} after {:?}", self.guard));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "every process closed its output, waiting for {what}"
                    ))
                }
            }
        }
    }

    /// The first line of `who` starting with `prefix` not taken yet
    /// (read before, or waited for now).
    fn wait_line(&mut self, who: Who, prefix: &str) -> Result<Line, String> {
        let matching = |l: &Line| l.who == who && l.text.starts_with(prefix);
        if let Some(k) = self.backlog.iter().position(matching) {
            return Ok(self.backlog.remove(k));
        }
        let what = format!("{who:?}'s `{prefix}`");
        let line = self
            .read_until(&what, None, |_, l| matching(l))?
            .expect("no until");
        if let Some(k) = self.backlog.iter().position(matching) {
            self.backlog.remove(k);
        }
        Ok(line)
    }

    fn take(&mut self, line: &Line) {
        let (stats, tick) = (
            line.text.starts_with("STATS "),
            line.text.starts_with("TICK "),
        );
        if !stats && !tick {
            self.backlog.push(Line {
                who: line.who,
                at: line.at,
                text: line.text.clone(),
            });
        }
        match line.who {
            Who::M(i) => {
                if let Some(rest) = line.text.strip_prefix("STATS ") {
                    let f = fields(rest);
                    self.stats.insert(
                        i,
                        Stats {
                            at: Some(line.at),
                            shards: num(&f, "shards"),
                            held: num(&f, "held"),
                        },
                    );
                }
            }
            Who::C(i) => {
                if let Some(rest) = line.text.strip_prefix("TICK ") {
                    let n = num(&fields(rest), "n");
                    self.ticks.entry(i).or_default().push((line.at, n));
                }
            }
        }
    }

    /// Whether the members in `set` all reported since `since`, host
    /// `total` shards between them, none more than one apart, and hold
    /// no message.
    fn balanced(&self, set: &[usize], since: Instant, total: u64) -> bool {
        let mut counts = Vec::new();
        for i in set {
            let Some(s) = self.stats.get(i) else {
                return false;
            };
            if s.at.is_none_or(|a| a < since) || s.held > 0 {
                return false;
            }
            counts.push(s.shards);
        }
        let (min, max) = (
            counts.iter().copied().min().unwrap_or(0),
            counts.iter().copied().max().unwrap_or(0),
        );
        counts.iter().sum::<u64>() == total && max - min <= 1
    }

    /// Waits until [`Self::balanced`]; the time it became so, and whether
    /// it did (otherwise: the time the shard counts last changed, after
    /// they stayed put for `stable`).
    fn until_balanced(
        &mut self,
        what: &str,
        set: &[usize],
        since: Instant,
        total: u64,
        stable: Duration,
    ) -> Result<(Instant, bool), String> {
        let mut last: Vec<u64> = Vec::new();
        let mut last_change = since;
        let line = self.read_until(what, None, |run, l| {
            if run.balanced(set, since, total) {
                return true;
            }
            let now: Vec<u64> = set
                .iter()
                .map(|i| run.stats.get(i).map_or(0, |s| s.shards))
                .collect();
            if now != last {
                tracing::info!(shards = ?now, "w8: shards per member");
                last = now;
                last_change = l.at;
            }
            let sum: u64 = last.iter().sum();
            sum == total && l.at.duration_since(last_change) >= stable
        })?;
        let line = line.expect("no until");
        if self.balanced(set, since, total) {
            Ok((line.at, true))
        } else {
            Ok((last_change, false))
        }
    }

    /// Answers per second, summed over the clients, second by second
    /// from `GO`: (end of the second, answers in it).
    fn series(&self) -> Vec<(Instant, u64)> {
        let len = self.ticks.values().map(Vec::len).min().unwrap_or(0);
        let mut out = Vec::with_capacity(len);
        let mut before = 0;
        for k in 0..len {
            let total: u64 = self.ticks.values().map(|t| t[k].1).sum();
            let at = self.ticks.values().map(|t| t[k].0).max().expect("a client");
            out.push((at, total - before));
            before = total;
        }
        out
    }
}

/// What one system's run measured.
struct Outcome {
    system: &'static str,
    warm_s: f64,
    warm_failed: u64,
    asks_per_s: f64,
    p50_us: u64,
    p99_us: u64,
    sent: u64,
    answered: u64,
    failed: u64,
    handled: u64,
    /// Seconds from GO: (join, join rebalanced, leave, leave rebalanced).
    churn: Option<Churn>,
    series: Vec<u64>,
}

struct Churn {
    join_at: f64,
    join_rebalance_s: f64,
    join_balanced: bool,
    leave_at: f64,
    leave_s: f64,
    leave_rebalance_s: f64,
    leave_balanced: bool,
    dip_min_per_s: u64,
    churn_mean_per_s: f64,
}

fn median(v: &[u64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2] as f64
}

fn run_system(launcher: &dyn Launcher, args: &Args) -> Result<Outcome, String> {
    let system = launcher.name();
    let (tx, lines) = mpsc::channel();
    let mut run = Run {
        procs: HashMap::new(),
        lines,
        tx,
        stats: BTreeMap::new(),
        ticks: BTreeMap::new(),
        backlog: Vec::new(),
        guard: Duration::from_secs(args.guard_s),
    };
    let t_start = Instant::now();
    run.spawn(Who::M(0), launcher.member(None, args))?;
    let seed = run
        .wait_line(Who::M(0), "READY ")?
        .text
        .trim_start_matches("READY ")
        .to_owned();
    for i in 1..args.members {
        run.spawn(Who::M(i), launcher.member(Some(&seed), args))?;
    }
    for i in 1..args.members {
        run.wait_line(Who::M(i), "READY")?;
    }
    for c in 0..args.clients {
        run.spawn(Who::C(c), launcher.client(&seed, c, args))?;
    }
    for c in 0..args.clients {
        run.wait_line(Who::C(c), "READY")?;
    }
    tracing::info!(
        system,
        s = t_start.elapsed().as_secs_f64(),
        "w8: members and clients up"
    );
    // Warm-up: every entity activated once.
    let t_warm = Instant::now();
    let mut warm_failed = 0;
    for c in 0..args.clients {
        run.tell(Who::C(c), "WARM")?;
    }
    for c in 0..args.clients {
        let l = run.wait_line(Who::C(c), "WARMED")?;
        warm_failed += num(&fields(&l.text), "failed");
    }
    let warm_s = t_warm.elapsed().as_secs_f64();
    tracing::info!(system, warm_s, warm_failed, "w8: every entity activated");
    // The shards allocated: the members' counts once two rounds of stats
    // agree.
    let members: Vec<usize> = (0..args.members).collect();
    let mut total = 0;
    let mut agree = 0;
    let settle_from = Instant::now();
    run.read_until("the shard counts to settle", None, |run, l| {
        if !matches!(l.who, Who::M(_)) || !l.text.starts_with("STATS") {
            return false;
        }
        let fresh = members.iter().all(|i| {
            run.stats
                .get(i)
                .is_some_and(|s| s.at.is_some_and(|a| a > settle_from) && s.held == 0)
        });
        if !fresh {
            return false;
        }
        let sum: u64 = members.iter().map(|i| run.stats[i].shards).sum();
        if sum == total {
            agree += 1;
        } else {
            total = sum;
            agree = 0;
        }
        agree >= 2 * members.len()
    })?;
    tracing::info!(system, shards = total, "w8: shards allocated");

    let go = Instant::now();
    for c in 0..args.clients {
        run.tell(Who::C(c), "GO")?;
    }
    let phase =
        Duration::from_secs_f64(args.seconds as f64 / if args.no_churn { 1.0 } else { 3.0 });
    let since_go = |t: Instant| t.duration_since(go).as_secs_f64();
    run.read_until("", Some(go + phase), |_, _| false)?;
    let mut churn = None;
    let mut leaver_handled = 0;
    let mut alive = members.clone();
    if !args.no_churn {
        // A member joins.
        // From the moment the joiner is up (its process started, it is a
        // member, its region registered).
        let joiner = args.members;
        run.spawn(Who::M(joiner), launcher.member(Some(&seed), args))?;
        let join_at = run.wait_line(Who::M(joiner), "READY")?.at;
        alive.push(joiner);
        tracing::info!(system, "w8: a member joined");
        let stable = Duration::from_millis(3 * args.rebalance_ms + 3000);
        let (joined, join_balanced) =
            run.until_balanced("the join's rebalance", &alive, join_at, total, stable)?;
        tracing::info!(
            system,
            s = (joined - join_at).as_secs_f64(),
            "w8: rebalanced after the join"
        );
        run.read_until("", Some(joined + phase), |_, _| false)?;
        // A member (not the first, which runs the coordinators) leaves.
        let leaver = 1;
        let leave_at = Instant::now();
        run.tell(Who::M(leaver), "LEAVE")?;
        let left = run.wait_line(Who::M(leaver), "LEFT")?;
        let f = fields(&left.text);
        leaver_handled = num(&f, "handled");
        let leave_s = num(&f, "leave_ms") as f64 / 1000.0;
        alive.retain(|&i| i != leaver);
        tracing::info!(system, leave_s, "w8: a member left");
        let (rebalanced, leave_balanced) =
            run.until_balanced("the leave's rebalance", &alive, leave_at, total, stable)?;
        tracing::info!(
            system,
            s = (rebalanced - leave_at).as_secs_f64(),
            "w8: rebalanced after the leave"
        );
        run.read_until("", Some(rebalanced + phase), |_, _| false)?;
        churn = Some((
            join_at,
            joined,
            join_balanced,
            leave_at,
            leave_s,
            rebalanced,
            leave_balanced,
        ));
    }
    for c in 0..args.clients {
        run.tell(Who::C(c), "STOP")?;
    }
    let series = run.series();
    let mut hist = new_histogram();
    let (mut sent, mut answered, mut failed) = (0, 0, 0);
    for c in 0..args.clients {
        let done = run.wait_line(Who::C(c), "DONE")?;
        let f = fields(&done.text);
        sent += num(&f, "sent");
        answered += num(&f, "answered");
        failed += num(&f, "failed");
        let h = run.wait_line(Who::C(c), "HIST")?;
        for vc in h.text.trim_start_matches("HIST").trim().split(',') {
            if let Some((v, c)) = vc.split_once(':') {
                if let (Ok(v), Ok(c)) = (v.parse::<u64>(), c.parse::<u64>()) {
                    hist.saturating_record_n(v, c);
                }
            }
        }
    }
    let mut handled = leaver_handled;
    for &i in &alive {
        run.tell(Who::M(i), "FINAL")?;
        let l = run.wait_line(Who::M(i), "FINAL")?;
        handled += num(&fields(&l.text), "handled");
    }
    for who in run.procs.keys().copied().collect::<Vec<_>>() {
        let _ = run.tell(who, "EXIT");
    }
    std::thread::sleep(Duration::from_millis(200));

    let per_s: Vec<u64> = series.iter().map(|s| s.1).collect();
    let steady_end = churn.as_ref().map_or(go + phase * 2, |c| c.0);
    // The first second is not counted (the asks start up in it).
    let steady: Vec<u64> = series
        .iter()
        .enumerate()
        .filter(|(k, (at, _))| *k > 0 && *at <= steady_end)
        .map(|(_, s)| s.1)
        .collect();
    let steady = if steady.is_empty() {
        per_s.iter().take(1).copied().collect()
    } else {
        steady
    };
    let churn = churn.map(
        |(join_at, joined, join_balanced, leave_at, leave_s, rebalanced, leave_balanced)| {
            // The seconds from the join to one second after the leave's
            // rebalance.
            let during: Vec<u64> = series
                .iter()
                .filter(|(at, _)| *at > join_at && *at <= rebalanced + Duration::from_secs(1))
                .map(|s| s.1)
                .collect();
            Churn {
                join_at: since_go(join_at),
                join_rebalance_s: (joined - join_at).as_secs_f64(),
                join_balanced,
                leave_at: since_go(leave_at),
                leave_s,
                leave_rebalance_s: (rebalanced - leave_at).as_secs_f64(),
                leave_balanced,
                dip_min_per_s: during.iter().copied().min().unwrap_or(0),
                churn_mean_per_s: during.iter().sum::<u64>() as f64 / during.len().max(1) as f64,
            }
        },
    );
    Ok(Outcome {
        system,
        warm_s,
        warm_failed,
        asks_per_s: median(&steady),
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        sent,
        answered,
        failed,
        handled,
        churn,
        series: per_s,
    })
}

fn pekko_jar(args: &Args) -> PathBuf {
    args.pekko_jar.clone().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/pekko-sharding/target/pekko-sharding.jar")
    })
}

fn java_present() -> bool {
    Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `w8`.
pub fn run(args: &Args) {
    if args.members < 2 {
        fail("--members", "at least 2 (one leaves)");
    }
    let jar = pekko_jar(args);
    let peer = if args.no_peer {
        false
    } else if args.peer == Some(Peer::Pekko) {
        if !jar.exists() {
            fail(
                "--peer pekko",
                format!(
                    "{} is not built (cd bench/peers/pekko-sharding && mvn -q package)",
                    jar.display()
                ),
            );
        }
        true
    } else {
        let there = jar.exists() && java_present();
        if !there {
            tracing::info!(jar = %jar.display(), "w8: the Pekko peer is not built or java is missing; Plexus only");
        }
        there
    };
    let mut outcomes = Vec::new();
    if !args.peer_only {
        match run_system(&PlexusLauncher, args) {
            Ok(o) => outcomes.push(o),
            Err(e) => fail("plexus", e),
        }
    }
    if peer {
        match run_system(&PekkoLauncher { jar }, args) {
            Ok(o) => outcomes.push(o),
            Err(e) => fail("pekko", e),
        }
    }
    print_table(args, &outcomes);
    let mut bad = false;
    for o in &outcomes {
        let mut line = ResultLine::new("w8", o.system)
            .field("entities", args.entities)
            .field("members", args.members)
            .field("clients", args.clients)
            .field("in_flight", args.in_flight)
            .field("asks_per_s", format!("{:.0}", o.asks_per_s))
            .field("p50_us", o.p50_us)
            .field("p99_us", o.p99_us)
            .field("warm_s", format!("{:.2}", o.warm_s));
        if let Some(c) = &o.churn {
            line = line
                .field("dip_min_per_s", c.dip_min_per_s)
                .field("churn_mean_per_s", format!("{:.0}", c.churn_mean_per_s))
                .field("join_rebalance_s", format!("{:.2}", c.join_rebalance_s))
                .field("leave_s", format!("{:.2}", c.leave_s))
                .field("leave_rebalance_s", format!("{:.2}", c.leave_rebalance_s))
                .field("balanced", c.join_balanced && c.leave_balanced);
        }
        let ok = o.failed == 0 && o.handled == o.answered && o.warm_failed == 0;
        // Plexus' own promise fails the run; the peer's figures are
        // reported as they are.
        bad |= !ok && o.system == "plexus";
        line = line
            .field("sent", o.sent)
            .field("answered", o.answered)
            .field("failed", o.failed)
            .field("handled", o.handled)
            .field("lost", o.sent.saturating_sub(o.answered))
            .field("handled_twice", o.handled.saturating_sub(o.answered))
            .field("exact", ok);
        if outcomes.len() == 2 && o.system == "plexus" && outcomes[1].asks_per_s > 0.0 {
            line = line.field(
                "vs_pekko",
                format!("{:.2}", o.asks_per_s / outcomes[1].asks_per_s),
            );
        }
        line.print();
    }
    if bad {
        eprintln!("w8: Plexus lost or handled twice a message (see `exact=false`)");
        std::process::exit(1);
    }
}

fn print_table(args: &Args, outcomes: &[Outcome]) {
    let row = |name: &str, f: &dyn Fn(&Outcome) -> String| {
        let mut s = format!("{name:<34}");
        for o in outcomes {
            s.push_str(&format!(" {:>16}", f(o)));
        }
        println!("{s}");
    };
    println!(
        "\nW8 entities: {} members, {} entities, {} client(s) x {} in flight{}",
        args.members,
        args.entities,
        args.clients,
        args.in_flight,
        if args.no_churn {
            ", no churn"
        } else {
            ", a join and a leave"
        }
    );
    row("", &|o| o.system.to_owned());
    row("warm-up (every entity once), s", &|o| {
        format!("{:.2}", o.warm_s)
    });
    row("asks/s (steady, median of 1 s)", &|o| {
        format!("{:.0}", o.asks_per_s)
    });
    row("p50 / p99 latency, us", &|o| {
        format!("{} / {}", o.p50_us, o.p99_us)
    });
    if outcomes.iter().any(|o| o.churn.is_some()) {
        let c = |o: &Outcome, f: &dyn Fn(&Churn) -> String| o.churn.as_ref().map_or("-".into(), f);
        row("join at, s after GO", &|o| {
            c(o, &|c| format!("{:.1}", c.join_at))
        });
        row("join rebalanced in, s", &|o| {
            c(o, &|c| {
                format!(
                    "{:.2}{}",
                    c.join_rebalance_s,
                    if c.join_balanced { "" } else { "*" }
                )
            })
        });
        row("leave at, s after GO", &|o| {
            c(o, &|c| format!("{:.1}", c.leave_at))
        });
        row("leave (hand-off) took, s", &|o| {
            c(o, &|c| format!("{:.2}", c.leave_s))
        });
        row("leave rebalanced in, s", &|o| {
            c(o, &|c| {
                format!(
                    "{:.2}{}",
                    c.leave_rebalance_s,
                    if c.leave_balanced { "" } else { "*" }
                )
            })
        });
        row("asks/s during churn: min 1 s", &|o| {
            c(o, &|c| c.dip_min_per_s.to_string())
        });
        row("asks/s during churn: mean", &|o| {
            c(o, &|c| format!("{:.0}", c.churn_mean_per_s))
        });
    }
    row("asks sent / answered", &|o| {
        format!("{} / {}", o.sent, o.answered)
    });
    row("asks failed", &|o| o.failed.to_string());
    row("Adds handled (members' sum)", &|o| o.handled.to_string());
    row("handled - answered", &|o| {
        format!("{}", o.handled as i64 - o.answered as i64)
    });
    for o in outcomes {
        let s: Vec<String> = o.series.iter().map(u64::to_string).collect();
        println!("SERIES system={} per_s={}", o.system, s.join(","));
    }
    if outcomes.iter().any(|o| {
        o.churn
            .as_ref()
            .is_some_and(|c| !(c.join_balanced && c.leave_balanced))
    }) {
        println!("* not balanced within one shard: the time the shard counts last changed");
    }
}
