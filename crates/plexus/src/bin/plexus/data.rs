//! `plexus data`: a cluster member with its replicator as its own OS
//! process, for the `plexus-bench data-procs` benchmark and for trying the
//! replicator from a shell.
//!
//! ```text
//! plexus data --listen tcp://127.0.0.1:0 [--seed URI ...]
//!                  [--cluster-name NAME] [--cookie SECRET]
//!                  [--store PATH [--create-store]] [--durable PATTERN ...]
//!                  [--fill N] [--expect-keys N] [--await-members M]
//!                  [--latency N] [--write-durable K] [--check-keys K]
//!                  [--stats-every-ms MS]
//! ```
//!
//! It starts a node listening on `--listen`, a cluster member on it and
//! the replicator ([`Replication`]) beside it, and prints one line per
//! happening to stdout, flushed at once:
//!
//! ```text
//! LISTENING tcp://127.0.0.1:4000
//! MEMBERS up=2 t_ms=130
//! REPLICAS members=2 t_ms=131
//! FILLED keys=100000 t_ms=2400
//! HOLDS keys=100000 t_ms=5120 bytes_received=2300000 packets_received=40
//! RESULT op=update level=majority n=1000 p50_us=310 p99_us=900 max_us=2100 mean_us=350 errors=0
//! ATTEMPT d/3
//! ACKED d/3
//! RECOVERED d/3 value=17
//! VALUE d/3 value=42
//! STATS t_ms=1000 keys=10 members=3 bytes_sent=... bytes_received=...
//! ```
//!
//! What it does besides running:
//!
//! - `--fill N`: increments the GCounters `k/0` .. `k/<N-1>` here (local
//!   updates), then prints `FILLED`.
//! - `--expect-keys N`: prints `HOLDS` (with the bytes and packets its
//!   replicator received so far) once it holds at least N keys.
//! - `--await-members M`: the series below start once the replicator
//!   counts M members (this one included); `REPLICAS` says when.
//! - `--latency N`: N updates of a GCounter at each level (local,
//!   majority, all, count=2), one at a time, then N gets at each level;
//!   a `RESULT` line per series (latencies in microseconds, measured
//!   around the awaited call), then `LATENCY-DONE`.
//! - `--write-durable K`: majority updates (+1) of the GCounters `d/0` ..
//!   `d/<K-1>` in turn, one at a time, until stopped: `ATTEMPT <key>`
//!   before each, `ACKED <key>` once it completed (with `--durable 'd/*'`
//!   and `--store`, after the stores of a majority hold it).
//! - `--check-keys K`: at start (after the store was recovered) prints
//!   `RECOVERED <key> value=<v>` of `d/0` .. `d/<K-1>` as read here, and
//!   once `--await-members` are counted `VALUE <key> value=<v>` as read at
//!   `All` (a read that failed is said as `READ-ERROR <key> <why>` and
//!   tried again, up to 3 times), then `CHECK-DONE`.
//!
//! The store (`--store`) is opened and verified before anything else
//! starts: it must exist unless `--create-store` is given (then a missing
//! or empty file becomes a new, empty store), so a member whose file was
//! lost does not come up with none of its durable keys. A store that is
//! missing, empty, damaged, not a store, of a newer format or in use by
//! another process is refused: one line on stderr naming the file and what
//! is wrong, exit code 2.
//!
//! SIGTERM or Ctrl-C stops the replicator (closing the store) and leaves
//! the cluster; the process exits 0. If stdout is closed (the parent died),
//! the process exits. Any other failure to start exits 1. `RUST_LOG` turns
//! on diagnostics on stderr.

use plexus_remote::process::{self, tick, Lines};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus::config::Config;
use plexus::management::Management;
use plexus_cluster::MemberState;
use plexus_data::crdt::GCounter;
use plexus_data::node::{Replication, StartError};
use plexus_data::store::{DurableStore, OpenError, OpenMode};
use plexus_data::{Consistency, Key, ReplicatorStats};

use crate::settings::{self, ClusterFlags, ConfigFlags};

/// Every flag of the binary.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// Operator calls against a running member's management endpoint
    /// (`plexus data get KEY`); without one, this runs a member.
    #[command(subcommand)]
    call: Option<crate::ops::DataCall>,
    #[command(flatten)]
    config: ConfigFlags,
    #[command(flatten)]
    cluster: ClusterFlags,
    /// The replicator's anti-entropy interval (`data.gossip_interval`).
    #[arg(long, value_name = "MS")]
    data_gossip_interval_ms: Option<u64>,
    /// The replicator's delta interval (`data.delta_interval`).
    #[arg(long, value_name = "MS")]
    delta_interval_ms: Option<u64>,
    /// The durable store's file (`store.path`); it must exist unless
    /// --create-store.
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
    /// Create the store file as a new, empty store if it is missing or
    /// empty (`store.create`; default: refuse, exit 2).
    #[arg(long)]
    create_store: bool,
    /// Durable keys: a name or a prefix ending in `*` (repeatable;
    /// `data.durable`).
    #[arg(long, value_name = "PATTERN")]
    durable: Vec<String>,
    /// Fill the GCounters `k/0` .. `k/<N-1>` here.
    #[arg(long, value_name = "N")]
    fill: Option<u64>,
    /// Print `HOLDS` once this many keys are held here.
    #[arg(long, value_name = "N")]
    expect_keys: Option<usize>,
    /// The series start once the replicator counts this many members.
    #[arg(long, value_name = "M", default_value_t = 1)]
    await_members: usize,
    /// Updates (and gets) per consistency level of the latency series.
    #[arg(long, value_name = "N")]
    latency: Option<usize>,
    /// Majority updates of `d/0` .. `d/<K-1>` in turn until stopped.
    #[arg(long, value_name = "K")]
    write_durable: Option<usize>,
    /// Print the values of `d/0` .. `d/<K-1>` recovered, then read at all.
    #[arg(long, value_name = "K")]
    check_keys: Option<usize>,
    /// How long an update or get of a series may take.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    timeout_ms: u64,
    /// Print a STATS line this often.
    #[arg(long, value_name = "MS")]
    stats_every_ms: Option<u64>,
}

/// Why the member could not start.
#[derive(Debug, thiserror::Error)]
enum Fail {
    #[error("{0}")]
    Start(#[from] settings::StartError),
    #[error("{0}")]
    Replication(#[from] StartError),
    #[error("{0}")]
    Management(#[from] plexus::management::ManagementError),
}

impl Args {
    /// Writes the flags given over `config`.
    fn apply(&self, config: &mut Config) {
        self.cluster.apply(config);
        if let Some(ms) = self.data_gossip_interval_ms {
            config.data.gossip_interval = Duration::from_millis(ms);
        }
        if let Some(ms) = self.delta_interval_ms {
            config.data.delta_interval = Duration::from_millis(ms);
        }
        if !self.durable.is_empty() {
            config.data.durable.clone_from(&self.durable);
        }
        if let Some(path) = &self.store {
            config.store.path = Some(path.clone());
        }
        if self.create_store {
            config.store.create = true;
        }
    }
}

/// The exit code of a store refused at start.
const EXIT_STORE: u8 = 2;

pub fn main(mut args: Args) -> ExitCode {
    if let Some(call) = args.call.take() {
        return crate::ops::data(call);
    }
    let config = match args.config.load(|c| args.apply(c)) {
        Ok(config) => config,
        Err(e) => return settings::refused("data", &e),
    };
    let store = match open_store(&config) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("plexus data: {e}");
            if matches!(e, OpenError::Missing { .. } | OpenError::Empty { .. }) {
                eprintln!(
                    "plexus data: pass --create-store (or set store.create) to start this member \
                     with a new, empty store"
                );
            }
            return ExitCode::from(EXIT_STORE);
        }
    };
    // A store that opened but whose records cannot be read is refused
    // with the same exit code.
    let unreadable = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&unreadable);
    let code = process::block_on("plexus data", 2, async move {
        let result = run(args, config, store).await;
        if let Err(Fail::Replication(StartError::Store(_))) = &result {
            flag.store(true, Ordering::Relaxed);
        }
        result
    });
    if unreadable.load(Ordering::Relaxed) {
        ExitCode::from(EXIT_STORE)
    } else {
        code
    }
}

/// The store (`store.path`), opened and verified.
fn open_store(config: &Config) -> Result<Option<DurableStore>, OpenError> {
    let mode = if config.store.create {
        OpenMode::CreateIfMissing
    } else {
        OpenMode::Existing
    };
    config
        .store
        .path
        .as_ref()
        .map(|path| DurableStore::open(path, mode))
        .transpose()
}

async fn run(args: Args, config: Config, store: Option<DurableStore>) -> Result<(), Fail> {
    let out = Out::new();
    let node_started = settings::start_node(&config).await?;
    // SIGTERM or Ctrl-C: listened for before the line a parent waits for,
    // so that one sent as soon as it is read is not missed.
    let stop = process::stop_signal();
    for b in &node_started.bound {
        out.line(format_args!("LISTENING {b}"));
    }
    let (cluster, mut updates) = settings::start_cluster(&node_started, &config)?;
    let settings::Started { system, node, .. } = node_started;
    let data = Arc::new(Replication::start(
        &node,
        &system,
        &cluster,
        config.data.clone(),
        store,
    )?);
    data.register::<GCounter>();
    if config.management.enabled {
        let at = Management::new(&config.management)
            .node(&node)
            .cluster(Arc::clone(&cluster))
            .data(&data)
            .metrics(crate::metrics::render())
            .start(&system)
            .await?;
        out.line(format_args!("MANAGEMENT http://{at}"));
    }

    let timeout = Duration::from_millis(args.timeout_ms);
    if let Some(k) = args.check_keys {
        for j in 0..k {
            let key = durable_key(j);
            let value = data.get(&key, Consistency::Local, timeout).await;
            out.line(format_args!(
                "RECOVERED {} value={}",
                key.name(),
                shown(&value)
            ));
        }
    }
    if let Some(n) = args.fill {
        fill(&data, n).await;
        out.line(format_args!("FILLED keys={n} t_ms={}", out.t_ms()));
    }
    let work = tokio::spawn(series(Arc::clone(&data), out.clone(), args_series(&args)));

    let mut stats = process::ticker(args.stats_every_ms);
    tokio::pin!(stop);
    let mut up = 0;
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(u) = updates.recv() => {
                let now_up = u.members.iter().filter(|m| m.state == MemberState::Up).count();
                if now_up != up {
                    up = now_up;
                    out.line(format_args!("MEMBERS up={up} t_ms={}", out.t_ms()));
                }
            }
            _ = tick(stats.as_mut()) => out.stats(&data.stats().await),
        }
        if out.closed() {
            // Nobody reads our lines any more: stop like a crash.
            return Ok(());
        }
    }
    work.abort();
    let _ = work.await;
    match Arc::try_unwrap(data) {
        Ok(data) => data.stop().await,
        Err(_) => {
            tracing::warn!(target: "plexus::data", "the replicator is still in use; not stopped cleanly")
        }
    }
    cluster.leave().await;
    node.shutdown().await;
    Ok(())
}

/// What [`series`] does, from the flags.
struct Series {
    await_members: usize,
    expect_keys: Option<usize>,
    latency: Option<usize>,
    write_durable: Option<usize>,
    check_keys: Option<usize>,
    timeout: Duration,
}

fn args_series(args: &Args) -> Series {
    Series {
        await_members: args.await_members,
        expect_keys: args.expect_keys,
        latency: args.latency,
        write_durable: args.write_durable,
        check_keys: args.check_keys,
        timeout: Duration::from_millis(args.timeout_ms),
    }
}

/// The durable key `d/<j>`.
fn durable_key(j: usize) -> Key<GCounter> {
    Key::new(format!("d/{j}"))
}

fn shown<E: std::fmt::Display>(value: &Result<Option<GCounter>, E>) -> String {
    match value {
        Ok(Some(c)) => c.value().to_string(),
        Ok(None) => "none".to_owned(),
        Err(e) => format!("error:{}", e.to_string().replace(' ', "_")),
    }
}

/// Increments `k/0` .. `k/<n-1>` here, many updates at once.
async fn fill(data: &Arc<Replication>, n: u64) {
    const AT_ONCE: u64 = 1024;
    let mut from = 0;
    while from < n {
        let to = (from + AT_ONCE).min(n);
        let mut set = tokio::task::JoinSet::new();
        for i in from..to {
            let data = Arc::clone(data);
            set.spawn(async move {
                let key = Key::<GCounter>::new(format!("k/{i}"));
                data.update(
                    &key,
                    Consistency::Local,
                    Duration::from_secs(60),
                    |c, me| c.increment(me, 1),
                )
                .await
            });
        }
        while let Some(r) = set.join_next().await {
            if let Ok(Err(e)) = r {
                tracing::warn!(target: "plexus::data", error = %e, "fill update failed");
            }
        }
        from = to;
    }
}

/// Waits for the members and keys asked for, then runs the series.
async fn series(data: Arc<Replication>, out: Out, s: Series) {
    let every = Duration::from_millis(10);
    if s.await_members > 1 {
        loop {
            let members = data.stats().await.members;
            if members >= s.await_members {
                out.line(format_args!(
                    "REPLICAS members={members} t_ms={}",
                    out.t_ms()
                ));
                break;
            }
            tokio::time::sleep(every).await;
        }
    }
    if let Some(n) = s.expect_keys {
        loop {
            let st = data.stats().await;
            if st.keys >= n {
                out.line(format_args!(
                    "HOLDS keys={} t_ms={} bytes_received={} packets_received={} entries_merged={}",
                    st.keys,
                    out.t_ms(),
                    st.bytes_received,
                    st.packets_received,
                    st.entries_merged
                ));
                break;
            }
            tokio::time::sleep(every).await;
        }
    }
    if let Some(n) = s.latency {
        latency(&data, &out, n, s.timeout).await;
    }
    if let Some(k) = s.check_keys {
        for j in 0..k {
            let key = durable_key(j);
            // A read that timed out is said and tried again (up to 3
            // times): the check is about the data, not the read.
            let mut value = data.get(&key, Consistency::All, s.timeout).await;
            for _ in 0..2 {
                if value.is_ok() {
                    break;
                }
                out.line(format_args!("READ-ERROR {} {}", key.name(), shown(&value)));
                value = data.get(&key, Consistency::All, s.timeout).await;
            }
            out.line(format_args!("VALUE {} value={}", key.name(), shown(&value)));
        }
        out.line(format_args!("CHECK-DONE"));
    }
    if let Some(k) = s.write_durable {
        let mut j = 0;
        loop {
            let key = durable_key(j % k.max(1));
            out.line(format_args!("ATTEMPT {}", key.name()));
            match data
                .update(&key, Consistency::Majority, s.timeout, |c, me| {
                    c.increment(me, 1)
                })
                .await
            {
                Ok(()) => out.line(format_args!("ACKED {}", key.name())),
                Err(e) => out.line(format_args!(
                    "FAILED {} {}",
                    key.name(),
                    e.to_string().replace(' ', "_")
                )),
            }
            j += 1;
        }
    }
}

/// The latency series: updates, then gets, at each level.
async fn latency(data: &Replication, out: &Out, n: usize, timeout: Duration) {
    let levels = [
        ("local", Consistency::Local),
        ("majority", Consistency::Majority),
        ("all", Consistency::All),
        ("count2", Consistency::Count(2)),
    ];
    for (name, level) in levels {
        let key = Key::<GCounter>::new(format!("lat/{name}"));
        let mut took = Vec::with_capacity(n);
        let mut errors = 0;
        for _ in 0..n {
            let t = Instant::now();
            let r = data
                .update(&key, level, timeout, |c, me| c.increment(me, 1))
                .await;
            took.push(t.elapsed());
            errors += usize::from(r.is_err());
        }
        out.result("update", name, &mut took, errors);
    }
    for (name, level) in levels {
        let key = Key::<GCounter>::new(format!("lat/{name}"));
        let mut took = Vec::with_capacity(n);
        let mut errors = 0;
        for _ in 0..n {
            let t = Instant::now();
            let r = data.get(&key, level, timeout).await;
            took.push(t.elapsed());
            errors += usize::from(!matches!(r, Ok(Some(_))));
        }
        out.result("get", name, &mut took, errors);
    }
    out.line(format_args!("LATENCY-DONE"));
}

/// Writes the lines, each flushed at once (shared by the tasks).
#[derive(Clone)]
struct Out {
    started: Instant,
    lines: Lines,
}

impl Out {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            lines: Lines::default(),
        }
    }

    fn t_ms(&self) -> u128 {
        self.started.elapsed().as_millis()
    }

    fn closed(&self) -> bool {
        self.lines.closed()
    }

    fn line(&self, text: std::fmt::Arguments<'_>) {
        self.lines.line(text);
    }

    fn result(&self, op: &str, level: &str, took: &mut [Duration], errors: usize) {
        took.sort_unstable();
        let at = |q: f64| {
            let i = ((took.len() as f64 * q).ceil() as usize).clamp(1, took.len().max(1)) - 1;
            took.get(i).map_or(0, Duration::as_micros)
        };
        let mean = if took.is_empty() {
            0
        } else {
            took.iter().map(Duration::as_micros).sum::<u128>() / took.len() as u128
        };
        self.line(format_args!(
            "RESULT op={op} level={level} n={} p50_us={} p99_us={} max_us={} mean_us={mean} errors={errors}",
            took.len(),
            at(0.5),
            at(0.99),
            took.last().map_or(0, Duration::as_micros),
        ));
    }

    fn stats(&self, s: &ReplicatorStats) {
        self.line(format_args!(
            "STATS t_ms={} keys={} members={} bytes_sent={} bytes_received={} packets_sent={} \
             packets_received={} delta_bytes_sent={} anti_entropy_bytes_sent={} \
             request_bytes_sent={} entries_merged={} anti_entropy_rounds={} packets_refused={} \
             entries_refused={}",
            self.t_ms(),
            s.keys,
            s.members,
            s.bytes_sent,
            s.bytes_received,
            s.packets_sent,
            s.packets_received,
            s.delta_bytes_sent,
            s.anti_entropy_bytes_sent,
            s.request_bytes_sent,
            s.entries_merged,
            s.anti_entropy_rounds,
            s.packets_refused,
            s.entries_refused,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_data::ReplicatorConfig;

    #[test]
    fn flags_win_over_the_defaults_and_the_replicator_takes_the_cluster_name() {
        let args: Args = settings::parse(&[
            "plexus data",
            "--cluster-name",
            "shop",
            "--data-gossip-interval-ms",
            "200",
            "--durable",
            "d/*",
        ]);
        let c = args.config.load(|c| args.apply(c)).expect("valid flags");
        assert_eq!(c.data.gossip_interval, Duration::from_millis(200));
        assert!(c.data.is_durable("d/3"));
        assert_eq!(c.data.cluster, "shop");
        assert_eq!(
            c.data.delta_interval,
            ReplicatorConfig::default().delta_interval
        );
    }
}
