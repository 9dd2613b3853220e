//! `data-procs`: the replicator as real processes on this machine
//! (`plexus data`, over TCP on 127.0.0.1, default cluster and
//! replicator settings).
//!
//! - `latency`: 5 members; member 0 runs `--latency-n` updates of a
//!   `GCounter` at each consistency level (local, majority, all, count 2),
//!   one at a time, then as many gets at each level; p50 / p99 / max of
//!   each series, measured in the member around the awaited call.
//! - `catchup`: for each N of `--keys`, one member fills N `GCounter`
//!   keys (local updates), then a second member is started and joins; the
//!   time from its replicator counting the first member until it holds all
//!   N keys, and the bytes its replicator received until then.
//! - `durable`: 3 members with stores, every key `d/*` durable, each
//!   writing majority updates of 8 counters one at a time; after
//!   `--durable-acks` acknowledged updates all three are killed with
//!   SIGKILL at once and restarted on their ports with their stores; each
//!   reads every counter at `All`: every acknowledged update must be in
//!   it (value >= acknowledged increments, <= attempted ones).
//!
//! The binary is not built by `cargo build -p plexus-bench` alone (a
//! dependency's binaries never are); build both in one command (one feature
//! set, so nothing is built twice):
//!
//! ```text
//! cargo build --release -p plexus-bench -p plexus
//! target/release/plexus-bench data-procs --scenario all
//! ```
//!
//! It is looked for beside the benchmark binary (the same target
//! directory), or given with `--plexus PATH`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Arguments of `data-procs`.
#[derive(clap::Args)]
pub struct Args {
    /// latency, catchup, durable or all.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Updates (and gets) per level of the latency series.
    #[arg(long, default_value_t = 1000)]
    latency_n: usize,
    /// Key counts of the catch-up runs, comma-separated.
    #[arg(long, default_value = "100000,1000000", value_delimiter = ',')]
    keys: Vec<u64>,
    /// Acknowledged durable updates (all writers) before the kill.
    #[arg(long, default_value_t = 300)]
    durable_acks: usize,
    /// Gives up on a phase after this many seconds.
    #[arg(long, default_value_t = 300)]
    guard_s: u64,
    /// The `plexus` command (default: beside this binary).
    #[arg(long)]
    plexus: Option<PathBuf>,
}

/// Runs `data-procs`.
pub fn run(args: &Args) {
    let bin = crate::plexus_cmd::binary("data-procs", args.plexus.as_deref());
    let guard = Duration::from_secs(args.guard_s);
    let all = args.scenario == "all";
    let mut failed = false;
    let mut attempt = |name: &str, r: Result<(), String>| {
        if let Err(e) = r {
            eprintln!("data-procs: {name}: {e}");
            failed = true;
        }
    };
    if all || args.scenario == "latency" {
        attempt("latency", latency(&bin, args.latency_n, guard));
    }
    if all || args.scenario == "catchup" {
        for &n in &args.keys {
            attempt(&format!("catchup {n}"), catchup(&bin, n, guard));
        }
    }
    if all || args.scenario == "durable" {
        attempt("durable", durable(&bin, args.durable_acks, guard));
    }
    if failed {
        std::process::exit(1);
    }
}

/// A line of process `from`, when it was read; `None` text: its stdout
/// ended.
struct Line {
    from: usize,
    at: Instant,
    text: Option<String>,
}

/// The member processes and what they said.
struct Procs {
    bin: PathBuf,
    children: Vec<Option<Child>>,
    address: Vec<String>,
    lines: mpsc::Receiver<Line>,
    tx: mpsc::Sender<Line>,
    /// Lines of other processes read while one was starting.
    stash: std::collections::VecDeque<Line>,
    guard: Duration,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Procs {
    fn new(bin: &Path, guard: Duration) -> Self {
        let (tx, lines) = mpsc::channel();
        Self {
            bin: bin.to_owned(),
            children: Vec::new(),
            address: Vec::new(),
            lines,
            tx,
            stash: std::collections::VecDeque::new(),
            guard,
        }
    }

    /// Starts process `i` (a new one if `i` is the next index) with
    /// `args`; returns its address once it said it.
    fn start(&mut self, i: usize, args: &[String]) -> Result<String, String> {
        let mut child = crate::plexus_cmd::role(&self.bin, "data", "data-bench")
            .args(args)
            .args(["--cluster-name", "data-bench"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.bin.display()))?;
        let stdout = child.stdout.take().ok_or("stdout not piped")?;
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines().map_while(Result::ok) {
                let line = Line {
                    from: i,
                    at: Instant::now(),
                    text: Some(text),
                };
                if tx.send(line).is_err() {
                    return;
                }
            }
            let _ = tx.send(Line {
                from: i,
                at: Instant::now(),
                text: None,
            });
        });
        if i == self.children.len() {
            self.children.push(Some(child));
            self.address.push(String::new());
        } else {
            self.children[i] = Some(child);
        }
        let deadline = Instant::now() + self.guard;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).map_err(|_| {
                format!(
                    "gave up waiting for process {i} to listen after {:?}",
                    self.guard
                )
            })?;
            if line.from == i {
                match line.text.as_deref().map(|t| t.strip_prefix("LISTENING ")) {
                    Some(Some(a)) => {
                        self.address[i] = a.to_owned();
                        return Ok(a.to_owned());
                    }
                    None => return Err(format!("process {i} ended before listening")),
                    Some(None) => {}
                }
            }
            self.stash.push_back(line);
        }
    }

    /// SIGKILL.
    fn kill(&mut self, i: usize) {
        if let Some(c) = self.children[i].as_mut() {
            let _ = c.kill();
        }
    }

    fn reap(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Reads lines until `done` holds for one; returns that line's time.
    fn wait_for(
        &mut self,
        what: &str,
        mut done: impl FnMut(&Line) -> bool,
    ) -> Result<Instant, String> {
        while let Some(line) = self.stash.pop_front() {
            if done(&line) {
                return Ok(line.at);
            }
        }
        let deadline = Instant::now() + self.guard;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|_| format!("gave up waiting for {what} after {:?}", self.guard))?;
            if done(&line) {
                return Ok(line.at);
            }
        }
    }
}

/// `key=value` fields of a line.
fn fields(text: &str) -> HashMap<&str, &str> {
    text.split(' ')
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn latency(bin: &Path, n: usize, guard: Duration) -> Result<(), String> {
    const MEMBERS: usize = 5;
    let mut p = Procs::new(bin, guard);
    let seed = p.start(
        0,
        &[
            "--latency".into(),
            n.to_string(),
            "--await-members".into(),
            MEMBERS.to_string(),
        ],
    )?;
    for i in 1..MEMBERS {
        p.start(i, &["--seed".into(), seed.clone()])?;
    }
    let mut results = Vec::new();
    p.wait_for("the latency series", |l| match l.text.as_deref() {
        Some(t) if l.from == 0 && t.starts_with("RESULT ") => {
            results.push(t.to_owned());
            false
        }
        Some("LATENCY-DONE") => true,
        None if l.from == 0 => true,
        _ => false,
    })?;
    if results.len() != 8 {
        return Err(format!("{} series of 8 reported", results.len()));
    }
    for r in results {
        let rest = r.strip_prefix("RESULT ").unwrap_or(&r);
        println!("RESULT workload=data-procs scenario=latency members={MEMBERS} {rest}");
    }
    Ok(())
}

fn catchup(bin: &Path, n: u64, guard: Duration) -> Result<(), String> {
    let mut p = Procs::new(bin, guard);
    let started = Instant::now();
    let holder = p.start(
        0,
        &[
            "--fill".into(),
            n.to_string(),
            "--stats-every-ms".into(),
            "1000".into(),
        ],
    )?;
    let filled = p.wait_for("the fill", |l| {
        l.from == 0 && l.text.as_deref().is_some_and(|t| t.starts_with("FILLED "))
    })?;
    eprintln!(
        "data-procs: catchup {n}: filled in {:.2} s",
        (filled - started).as_secs_f64()
    );
    let spawned = Instant::now();
    p.start(
        1,
        &[
            "--seed".into(),
            holder,
            "--expect-keys".into(),
            n.to_string(),
            "--await-members".into(),
            "2".into(),
            "--stats-every-ms".into(),
            "1000".into(),
        ],
    )?;
    let mut knew = None;
    let mut holds = None;
    let mut last_keys = String::from("0");
    let result = p.wait_for("the joiner to hold every key", |l| {
        if l.from != 1 {
            return false;
        }
        let Some(t) = l.text.as_deref() else {
            return true;
        };
        if t.starts_with("REPLICAS ") {
            knew = Some(l.at);
        } else if t.starts_with("STATS ") {
            if let Some(k) = fields(t).get("keys") {
                last_keys = (*k).to_owned();
            }
        } else if t.starts_with("HOLDS ") {
            holds = Some((l.at, t.to_owned()));
            return true;
        }
        false
    });
    let Some((done, line)) = holds else {
        return Err(format!(
            "the joiner holds {last_keys} of {n} keys ({})",
            result.err().unwrap_or_else(|| "its process ended".into())
        ));
    };
    let knew = knew.unwrap_or(spawned);
    let f = fields(&line);
    println!(
        "RESULT workload=data-procs scenario=catchup keys={n} catch_up_s={:.2} \
         from_spawn_s={:.2} bytes_received={} packets_received={} entries_merged={} fill_s={:.2}",
        (done - knew).as_secs_f64(),
        (done - spawned).as_secs_f64(),
        f.get("bytes_received").unwrap_or(&"?"),
        f.get("packets_received").unwrap_or(&"?"),
        f.get("entries_merged").unwrap_or(&"?"),
        (filled - started).as_secs_f64(),
    );
    Ok(())
}

fn durable(bin: &Path, acks: usize, guard: Duration) -> Result<(), String> {
    const MEMBERS: usize = 3;
    const KEYS: usize = 8;
    let dir = std::env::temp_dir().join(format!("plexus-data-procs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let store = |i: usize| dir.join(format!("m{i}.redb")).display().to_string();
    let common = |i: usize| -> Vec<String> {
        vec![
            "--store".into(),
            store(i),
            "--durable".into(),
            "d/*".into(),
            "--await-members".into(),
            MEMBERS.to_string(),
        ]
    };
    let mut p = Procs::new(bin, guard);
    // The first start creates the stores; the restart below must find them.
    let mut first = common(0);
    first.extend([
        "--create-store".into(),
        "--write-durable".into(),
        KEYS.to_string(),
    ]);
    let seed = p.start(0, &first)?;
    for i in 1..MEMBERS {
        let mut a = common(i);
        a.extend([
            "--create-store".into(),
            "--write-durable".into(),
            KEYS.to_string(),
            "--seed".into(),
            seed.clone(),
        ]);
        p.start(i, &a)?;
    }
    // Per key: acknowledged and attempted updates, all writers together.
    let mut acked: HashMap<String, u64> = HashMap::new();
    let mut attempted: HashMap<String, u64> = HashMap::new();
    let mut failed = 0u64;
    let mut count = |t: &str| {
        if let Some(k) = t.strip_prefix("ACKED ") {
            *acked.entry(k.to_owned()).or_default() += 1;
        } else if let Some(k) = t.strip_prefix("ATTEMPT ") {
            *attempted.entry(k.to_owned()).or_default() += 1;
        } else if t.starts_with("FAILED ") {
            failed += 1;
        }
    };
    let mut total = 0;
    let writing = Instant::now();
    p.wait_for("the acknowledged updates", |l| {
        if let Some(t) = l.text.as_deref() {
            count(t);
            total += usize::from(t.starts_with("ACKED "));
        }
        total >= acks
    })?;
    let write_s = writing.elapsed().as_secs_f64();
    for i in 0..MEMBERS {
        p.kill(i);
    }
    // Everything they printed before dying counts.
    let mut ended = 0;
    p.wait_for("the killed processes' last lines", |l| {
        match l.text.as_deref() {
            Some(t) => {
                count(t);
                false
            }
            None => {
                ended += 1;
                ended == MEMBERS
            }
        }
    })?;
    for i in 0..MEMBERS {
        p.reap(i);
    }
    let acked_total: u64 = acked.values().sum();
    let attempted_total: u64 = attempted.values().sum();

    let restarted = Instant::now();
    let addresses = p.address.clone();
    for (i, address) in addresses.iter().enumerate() {
        let mut a = common(i);
        a.extend([
            "--listen".into(),
            address.clone(),
            "--check-keys".into(),
            KEYS.to_string(),
        ]);
        if i > 0 {
            a.extend(["--seed".into(), addresses[0].clone()]);
        }
        p.start(i, &a)?;
    }
    let mut values: Vec<HashMap<String, u64>> = vec![HashMap::new(); MEMBERS];
    let mut recovered: Vec<HashMap<String, u64>> = vec![HashMap::new(); MEMBERS];
    let mut done = 0;
    let mut read_errors = 0u64;
    p.wait_for("the restarted members' checks", |l| {
        let Some(t) = l.text.as_deref() else {
            return false;
        };
        // A read that failed three times has no number: not counted.
        let parse = |rest: &str| -> Option<(String, u64)> {
            let (k, v) = rest.split_once(" value=")?;
            Some((k.to_owned(), v.parse().ok()?))
        };
        if t.starts_with("READ-ERROR ") {
            read_errors += 1;
        } else if let Some((k, v)) = t.strip_prefix("VALUE ").and_then(parse) {
            values[l.from].insert(k, v);
        } else if let Some((k, v)) = t.strip_prefix("RECOVERED ").and_then(parse) {
            recovered[l.from].insert(k, v);
        } else if t == "CHECK-DONE" {
            done += 1;
        }
        done == MEMBERS
    })?;
    let check_s = restarted.elapsed().as_secs_f64();
    let mut lost = 0u64;
    let mut beyond = 0u64;
    let mut unread = 0u64;
    for vals in &values {
        for j in 0..KEYS {
            let k = format!("d/{j}");
            let Some(v) = vals.get(&k).copied() else {
                unread += 1;
                continue;
            };
            let a = acked.get(&k).copied().unwrap_or(0);
            let t = attempted.get(&k).copied().unwrap_or(0);
            lost += a.saturating_sub(v);
            beyond += v.saturating_sub(t);
        }
    }
    // What the members recovered from their own stores alone, before
    // hearing from anyone: the sum over keys, per member.
    let own: Vec<u64> = recovered.iter().map(|r| r.values().sum()).collect();
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "RESULT workload=data-procs scenario=durable members={MEMBERS} keys={KEYS} \
         acked={acked_total} attempted={attempted_total} failed={failed} write_s={write_s:.2} \
         lost_acked={lost} beyond_attempted={beyond} recovered_own_sums={own:?} \
         all_read_after_restart_s={check_s:.2} read_errors={read_errors} unread={unread} ok={}",
        lost == 0 && beyond == 0 && unread == 0
    );
    if lost > 0 {
        return Err(format!(
            "{lost} acknowledged updates missing after the restart"
        ));
    }
    Ok(())
}
