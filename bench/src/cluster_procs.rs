//! `cluster-procs`: the cluster as real processes on this machine
//! (`docs/CLUSTER.md`, "Run it as processes").
//!
//! For each size N it starts N `plexus member` processes on
//! 127.0.0.1 with the default timings (probes 1 s, gossip 200 ms), all
//! joining through the first, and measures from their stdout lines:
//!
//! - the time until every member sees N members up;
//! - membership bytes (and packets) sent per member per second over a
//!   steady window (`STATS` lines, the member's own counters; node framing
//!   and TCP/IP headers not included, as in `cluster-sim`), after 10 s of
//!   settling;
//! - after `kill -9` of one member, the time until every other member
//!   suspects it and until every other member downs it, against the bound
//!   the timings give ([`detection_bound`]);
//! - the time until the member, restarted on the same port, is up again
//!   under a new incarnation in every other member's view.
//!
//! The binary is not built by `cargo run -p plexus-bench`; build it first:
//!
//! ```text
//! cargo build --release -p plexus-bench -p plexus
//! cargo run --release -p plexus-bench -- cluster-procs --members 5,32
//! ```
//!
//! It is looked for beside the benchmark binary (the same target
//! directory), or given with `--node-bin PATH`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use plexus::cluster::ClusterConfig;

/// Arguments of `cluster-procs`.
#[derive(clap::Args)]
pub struct Args {
    /// Cluster sizes, comma-separated.
    #[arg(long, default_value = "5,32", value_delimiter = ',')]
    members: Vec<usize>,
    /// Seconds of the steady window the traffic is measured over.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// The `plexus` command (default: beside this binary).
    #[arg(long)]
    plexus: Option<PathBuf>,
}

/// Gives up on a phase after this long (a hang is reported, not waited
/// out).
const GUARD: Duration = Duration::from_secs(300);
/// Between `STATS` lines of every member.
const STATS_EVERY_MS: u64 = 1000;
/// After convergence, before the steady window: one push-pull interval.
const SETTLE: Duration = Duration::from_secs(10);

/// Runs `cluster-procs`.
pub fn run(args: &Args) {
    let bin = crate::plexus_cmd::binary("cluster-procs", args.plexus.as_deref());
    for &n in &args.members {
        if n < 3 {
            eprintln!("cluster-procs: --members {n}: at least 3 (one is killed, a majority stays)");
            std::process::exit(2);
        }
        if let Err(e) = one(&bin, n, Duration::from_secs(args.seconds)) {
            eprintln!("cluster-procs: {n} members: {e}");
            std::process::exit(1);
        }
    }
}

/// The time from a crash until every other member has downed it, at the
/// latest, with `config`'s timings in a cluster of `n`:
///
/// - the crash can come just after an ack: one probe interval until the
///   next probe goes unanswered;
/// - the watcher's phi crosses `suspect_phi` (8, a normal tail of 1e-8,
///   about 5.6 deviations) at most `probe_interval + 6 × phi_min_std_dev`
///   after the last ack, and the indirect probes take `probe_timeout`;
/// - the suspicion matures after at most `suspicion_max_mult ×
///   suspicion_mult × max(1, log10 n) × probe_interval` (Lifeguard's
///   starting value, before confirmations shrink it);
/// - the split-brain resolver waits `stable_after`, then sweeps (pings
///   every member, once more halfway: `2 × probe_timeout`);
/// - the downing spreads by gossip, within 5 gossip intervals.
pub fn detection_bound(config: &ClusterConfig, n: usize) -> Duration {
    let probe = config.probe_interval.as_secs_f64();
    let detect = probe
        + probe
        + 6.0 * config.phi_min_std_dev.as_secs_f64()
        + config.probe_timeout.as_secs_f64();
    let suspicion =
        config.suspicion_max_mult * config.suspicion_mult * (n as f64).log10().max(1.0) * probe;
    let spread = 5.0 * config.gossip_interval.as_secs_f64();
    // The split-brain resolver's sweep: pings, one resend, 2 × probe_timeout.
    let sweep = 2.0 * config.probe_timeout.as_secs_f64();
    Duration::from_secs_f64(detect + suspicion + config.stable_after.as_secs_f64() + sweep + spread)
}

/// A line of member `from`, when it was read.
struct Line {
    from: usize,
    at: Instant,
    text: String,
}

/// A `STATS` line's counters.
#[derive(Clone, Copy)]
struct Stats {
    at: Instant,
    t_ms: u64,
    bytes: u64,
    packets: u64,
}

fn stats_of(line: &str, at: Instant) -> Option<Stats> {
    let fields: HashMap<&str, u64> = line
        .strip_prefix("STATS ")?
        .split(' ')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k, v.parse().ok()?))
        })
        .collect();
    Some(Stats {
        at,
        t_ms: *fields.get("t_ms")?,
        bytes: *fields.get("bytes_sent")?,
        packets: *fields.get("packets_sent")?,
    })
}

/// `EVENT <kind> <address> <incarnation> ...` as (kind, address,
/// incarnation).
fn event_of(line: &str) -> Option<(&str, &str, u64)> {
    let mut w = line.strip_prefix("EVENT ")?.split(' ');
    Some((w.next()?, w.next()?, w.next()?.parse().ok()?))
}

/// The member processes and what they said.
struct Cluster {
    bin: PathBuf,
    children: Vec<Option<Child>>,
    lines: mpsc::Receiver<Line>,
    tx: mpsc::Sender<Line>,
    address: Vec<String>,
    incarnation: Vec<u64>,
    up: Vec<usize>,
    stats: Vec<Vec<Stats>>,
    /// Every event line read: (member, when, line).
    events: Vec<(usize, Instant, String)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Cluster {
    fn new(bin: &std::path::Path) -> Self {
        let (tx, lines) = mpsc::channel();
        Self {
            bin: bin.to_owned(),
            children: Vec::new(),
            lines,
            tx,
            address: Vec::new(),
            incarnation: Vec::new(),
            up: Vec::new(),
            stats: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Starts member `i` (a new one if `i` is the next index) listening on
    /// `listen`, joining through `seed`; returns once it said its address
    /// and incarnation.
    fn start(&mut self, i: usize, listen: &str, seed: Option<&str>) -> Result<(), String> {
        let mut cmd = crate::plexus_cmd::role(&self.bin, "member", "bench");
        cmd.args(["--cluster-name", "bench", "--listen", listen])
            .args(["--stats-every-ms", &STATS_EVERY_MS.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if let Some(s) = seed {
            cmd.args(["--seed", s]);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.bin.display()))?;
        let stdout = child.stdout.take().ok_or("stdout not piped")?;
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines().map_while(Result::ok) {
                let line = Line {
                    from: i,
                    at: Instant::now(),
                    text,
                };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        if i == self.children.len() {
            self.children.push(Some(child));
            self.address.push(String::new());
            self.incarnation.push(0);
            self.up.push(0);
            self.stats.push(Vec::new());
        } else {
            self.children[i] = Some(child);
            self.address[i].clear();
            self.up[i] = 0;
        }
        self.wait_for(&format!("member {i} to start"), |c, l| {
            l.from == i && l.text.starts_with("EVENT subscribed ") && !c.address[i].is_empty()
        })
        .map(|_| ())
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Reads lines (keeping the members' state) until `done` holds for one;
    /// returns when that line was read.
    fn wait_for(
        &mut self,
        what: &str,
        mut done: impl FnMut(&Self, &Line) -> bool,
    ) -> Result<Instant, String> {
        let deadline = Instant::now() + GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|_| format!("gave up waiting for {what} after {GUARD:?}"))?;
            self.take(&line);
            if done(self, &line) {
                return Ok(line.at);
            }
        }
    }

    fn take(&mut self, line: &Line) {
        let i = line.from;
        if let Some(uri) = line.text.strip_prefix("LISTENING ") {
            self.address[i] = uri.to_owned();
        } else if let Some(up) = line.text.strip_prefix("MEMBERS up=") {
            self.up[i] = up.parse().unwrap_or(0);
        } else if let Some(s) = stats_of(&line.text, line.at) {
            self.stats[i].push(s);
        } else if let Some((kind, _, inc)) = event_of(&line.text) {
            if kind == "subscribed" {
                self.incarnation[i] = inc;
            }
            self.events.push((i, line.at, line.text.clone()));
        }
    }

    /// Waits until every member in `who` said an event line since `since`
    /// for which `wanted` holds (lines already read count); the time each
    /// did.
    fn each(
        &mut self,
        what: &str,
        since: Instant,
        who: &[usize],
        wanted: impl Fn(&str) -> bool,
    ) -> Result<HashMap<usize, Instant>, String> {
        let mut seen = HashMap::new();
        for (from, at, text) in &self.events {
            if *at >= since && who.contains(from) && wanted(text) {
                seen.entry(*from).or_insert(*at);
            }
        }
        if seen.len() == who.len() {
            return Ok(seen);
        }
        self.wait_for(what, |_, l| {
            if who.contains(&l.from) && !seen.contains_key(&l.from) && wanted(&l.text) {
                seen.insert(l.from, l.at);
            }
            seen.len() == who.len()
        })?;
        Ok(seen)
    }
}

fn one(bin: &std::path::Path, n: usize, window: Duration) -> Result<(), String> {
    let config = ClusterConfig::default();
    let mut c = Cluster::new(bin);
    let t0 = Instant::now();
    c.start(0, "tcp://127.0.0.1:0", None)?;
    let seed = c.address[0].clone();
    for i in 1..n {
        c.start(i, "tcp://127.0.0.1:0", Some(&seed))?;
    }
    let started_s = t0.elapsed().as_secs_f64();
    let all: Vec<usize> = (0..n).collect();
    let converged = c.wait_for("every member to see all up", |c, _| {
        c.up.iter().all(|&u| u == n)
    })?;
    let converge_s = (converged - t0).as_secs_f64();
    eprintln!(
        "cluster-procs: {n} members up in {converge_s:.2} s (all started after {started_s:.2} s)"
    );

    // Steady window.
    let from = converged + SETTLE;
    let to = from + window;
    c.wait_for("the end of the steady window", |_, l| l.at >= to)?;
    let mut rates = Vec::new();
    let mut packet_rates = Vec::new();
    for s in &c.stats {
        let inside: Vec<&Stats> = s.iter().filter(|s| s.at >= from && s.at <= to).collect();
        if let (Some(a), Some(b)) = (inside.first(), inside.last()) {
            let dt = (b.t_ms.saturating_sub(a.t_ms)) as f64 / 1000.0;
            if dt > 0.0 {
                rates.push((b.bytes - a.bytes) as f64 / dt);
                packet_rates.push((b.packets - a.packets) as f64 / dt);
            }
        }
    }
    if rates.len() != n {
        return Err(format!(
            "STATS in the window from {} of {n} members",
            rates.len()
        ));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);

    // kill -9 one member (not the seed), then restart it on its port.
    let victim = n / 2;
    let victim_address = c.address[victim].clone();
    let old_incarnation = c.incarnation[victim];
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != victim).collect();
    let killed = Instant::now();
    c.kill(victim);
    // Suspicion and downing lines come in order per member, so one pass
    // collects both.
    let mut suspected: HashMap<usize, Instant> = HashMap::new();
    let mut downed: HashMap<usize, Instant> = HashMap::new();
    c.wait_for("every other member to down the killed one", |_, l| {
        match event_of(&l.text) {
            Some(("member-suspected", a, inc)) if a == victim_address && inc == old_incarnation => {
                suspected.entry(l.from).or_insert(l.at);
            }
            Some(("member-downed", a, inc)) if a == victim_address && inc == old_incarnation => {
                downed.entry(l.from).or_insert(l.at);
            }
            _ => {}
        }
        others.iter().all(|i| downed.contains_key(i))
    })?;
    let latest = |m: &HashMap<usize, Instant>| {
        m.values()
            .map(|t| (*t - killed).as_secs_f64())
            .fold(0.0, f64::max)
    };
    let suspected_by_all = (suspected.len() == others.len()).then(|| latest(&suspected));
    let downed_by_all = latest(&downed);
    let bound = detection_bound(&config, n).as_secs_f64();
    let port = victim_address.rsplit(':').next().unwrap_or("0").to_owned();
    let restarted = Instant::now();
    c.start(victim, &format!("tcp://127.0.0.1:{port}"), Some(&seed))?;
    let new_incarnation = c.incarnation[victim];
    let ups = c.each("every other member to see it back", restarted, &others, |text| {
        matches!(event_of(text), Some(("member-up", a, inc)) if a == victim_address && inc == new_incarnation)
    })?;
    let rejoin_s = ups
        .values()
        .map(|t| (*t - restarted).as_secs_f64())
        .fold(0.0, f64::max);

    println!(
        "RESULT workload=cluster-procs members={n} converge_s={converge_s:.2} \
         steady_window_s={} bytes_per_member_s_mean={:.0} bytes_per_member_s_max={:.0} \
         packets_per_member_s_mean={:.1} crash_suspected_by_all_s={} crash_downed_by_all_s={downed_by_all:.2} \
         detection_bound_s={bound:.1} within_bound={} rejoined_s={rejoin_s:.2} \
         new_incarnation_higher={}",
        window.as_secs(),
        mean(&rates),
        max(&rates),
        mean(&packet_rates),
        suspected_by_all.map_or("n/a".to_owned(), |s| format!("{s:.2}")),
        downed_by_all <= bound,
        new_incarnation > old_incarnation,
    );
    Ok(())
}
