//! W5 devices (`bench/WORKLOADS.md`): S `plexus device-server` processes
//! forming a cluster, D `plexus device` processes hosting the devices, on
//! 127.0.0.1.
//!
//! Each server requests a report from each device it is responsible for;
//! the device answers with the values 1..=1000; the server adds them to
//! the device's total and at once requests the next; a request unanswered
//! for 3 ms is sent again. `reports_per_s` is the whole cluster's reports
//! per second, the median of 1-second windows (each server's `STATS` lines,
//! one a second) over `--seconds`.
//!
//! - `--drop P`: the device processes' stacks drop P % of the frames they
//!   send and receive (a `faults` layer), so P % of messages between
//!   devices and servers are lost each way.
//! - `--device-mttf M` / `--server-mttf M`: each device process / each
//!   server is killed with SIGKILL after an exponentially distributed time
//!   of mean M seconds (seeded) and restarted at once (a server on its
//!   port, joining through a live one; a device process with new sessions
//!   for its ids).
//! - `--mttr`: kills one server (the one holding most devices) with
//!   SIGKILL and measures the time until each of its devices reports again
//!   at another server (the first report request after its new `attached`
//!   line), against the devices' failure-detection bound + 1 s; `--runs`
//!   times.
//!
//! The binaries are not built by `cargo run -p plexus-bench`:
//!
//! ```text
//! cargo build --release -p plexus-bench -p plexus
//! cargo run --release -p plexus-bench -- w5 --servers 1 --devices 32 --seconds 10
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::report::{median, ResultLine};

/// Arguments of `w5`.
#[derive(clap::Args)]
pub struct Args {
    /// Server processes in the cluster.
    #[arg(long, default_value_t = 1)]
    servers: usize,
    /// Devices in all.
    #[arg(long, default_value_t = 32)]
    devices: u64,
    /// Device processes the devices are spread over.
    #[arg(long, default_value_t = 2)]
    device_procs: u64,
    /// Percent of frames dropped by the devices' stacks, each way.
    #[arg(long, default_value_t = 0.0)]
    drop: f64,
    /// Mean seconds between kills of each device process (0: none).
    #[arg(long, default_value_t = 0.0)]
    device_mttf: f64,
    /// Mean seconds between kills of each server (0: none).
    #[arg(long, default_value_t = 0.0)]
    server_mttf: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Scheme (`udp`, `tcp`) or a stack spec for servers and devices.
    #[arg(long, default_value = "udp")]
    transport: String,
    /// Measure MTTR (kill -9 of a server) instead of throughput.
    #[arg(long)]
    mttr: bool,
    /// MTTR runs.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Seed of the fault schedule and the drop layers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Tokio worker threads of each server and device process.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The `plexus` command (default: beside this binary).
    #[arg(long)]
    plexus: Option<PathBuf>,
}

/// Gives up waiting after this long.
const GUARD: Duration = Duration::from_secs(120);
/// Cluster timings of the servers: probes every 200 ms, so a killed
/// server leaves the ring in a few seconds.
const CLUSTER: &[&str] = &[
    "--probe-interval-ms",
    "200",
    "--probe-timeout-ms",
    "100",
    "--gossip-interval-ms",
    "50",
    "--stable-after-ms",
    "1000",
    "--join-retry-ms",
    "200",
    "--stats-every-ms",
    "1000",
];

/// Runs `w5`.
pub fn run(args: &Args) {
    let bin = crate::plexus_cmd::binary("w5", args.plexus.as_deref());
    if args.servers == 0 || args.devices == 0 || args.device_procs == 0 {
        fail("--servers, --devices and --device-procs must be at least 1");
    }
    if args.mttr && args.servers < 2 {
        fail("--mttr needs at least 2 servers (the devices move to another)");
    }
    let mut w = World::new(&bin, args);
    let r = if args.mttr {
        w.mttr(args)
    } else {
        w.throughput(args)
    };
    if let Err(e) = r {
        fail(&e);
    }
}

fn fail(why: &str) -> ! {
    eprintln!("w5: {why}");
    std::process::exit(1);
}

/// A line of process `from`.
struct Line {
    from: usize,
    at: Instant,
    text: String,
}

struct Proc {
    child: Child,
    address: String,
    /// Per server: the last reports counter and its delta attributed.
    last_reports: u64,
}

struct World {
    /// The `plexus` command.
    bin: PathBuf,
    scheme: String,
    server_spec: Option<String>,
    device_spec: Option<String>,
    lines: mpsc::Receiver<Line>,
    tx: mpsc::Sender<Line>,
    /// Servers are 0..S, device processes S..S+D.
    procs: Vec<Option<Proc>>,
    servers: usize,
    per_proc: u64,
    restarts: u64,
    seed: u64,
    threads: usize,
    /// The server each device last attached to (`EVENT attached` lines).
    at: HashMap<String, String>,
    /// Lines `expect` read past, for whoever reads next.
    backlog: std::collections::VecDeque<Line>,
}

impl Drop for World {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().flatten() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

impl World {
    fn new(bin: &Path, args: &Args) -> World {
        // A plain scheme runs bare (`udp`: the device protocol resends
        // itself) or with its framing (`tcp / framing`); a spec as given.
        let base = match args.transport.as_str() {
            "tcp" => "tcp / framing".to_owned(),
            other => other.to_owned(),
        };
        let scheme = base.split('/').next().unwrap_or("udp").trim().to_owned();
        // Drops right above the transport, as a lossy network would.
        let device_spec = if args.drop > 0.0 {
            let rest = base.split_once('/').map_or("", |(_, r)| r.trim());
            let faults = format!(
                "faults(drop={},seed={},direction=both)",
                args.drop / 100.0,
                args.seed
            );
            if rest.is_empty() {
                format!("{scheme} / {faults}")
            } else {
                format!("{scheme} / {faults} / {rest}")
            }
        } else {
            base.clone()
        };
        let base = Some(base);
        let device_spec = Some(device_spec);
        let (tx, lines) = mpsc::channel();
        World {
            bin: bin.to_owned(),
            server_spec: base,
            device_spec,
            scheme,
            lines,
            tx,
            procs: Vec::new(),
            servers: args.servers,
            per_proc: args.devices.div_ceil(args.device_procs),
            restarts: 0,
            seed: args.seed,
            threads: args.threads,
            at: HashMap::new(),
            backlog: std::collections::VecDeque::new(),
        }
    }

    fn spawn(&mut self, i: usize, mut cmd: Command) -> Result<(), String> {
        cmd.args(["--threads", &self.threads.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("starting: {e}"))?;
        let stdout = child.stdout.take().ok_or("stdout not piped")?;
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines().map_while(Result::ok) {
                let at = Instant::now();
                if tx.send(Line { from: i, at, text }).is_err() {
                    return;
                }
            }
        });
        let p = Proc {
            child,
            address: String::new(),
            last_reports: 0,
        };
        if i == self.procs.len() {
            self.procs.push(Some(p));
        } else {
            self.procs[i] = Some(p);
        }
        let l = self.expect(&format!("LISTENING of process {i}"), |l| {
            l.from == i && l.text.starts_with("LISTENING ")
        })?;
        if let Some(p) = self.procs[i].as_mut() {
            p.address = l.text["LISTENING ".len()..].to_owned();
        }
        Ok(())
    }

    /// The next line (one `expect` read past first), within `wait`.
    fn next_line(&mut self, wait: Duration) -> Option<Line> {
        if let Some(l) = self.backlog.pop_front() {
            return Some(l);
        }
        let l = self.lines.recv_timeout(wait).ok()?;
        if let Some((d, s)) = attached(&l.text) {
            self.at.insert(d, s);
        }
        Some(l)
    }

    /// Lines until one satisfies `wanted`; the others stay for
    /// [`World::next_line`].
    fn expect(&mut self, what: &str, wanted: impl Fn(&Line) -> bool) -> Result<Line, String> {
        let deadline = Instant::now() + GUARD;
        let mut skipped = Vec::new();
        let found = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_line(left) {
                Some(l) if wanted(&l) => break Ok(l),
                Some(l) => skipped.push(l),
                None => break Err(format!("no {what} within {GUARD:?}")),
            }
        };
        for l in skipped.into_iter().rev() {
            self.backlog.push_front(l);
        }
        found
    }

    fn start_server(&mut self, i: usize, listen: &str, seed: Option<&str>) -> Result<(), String> {
        let mut cmd = crate::plexus_cmd::role(&self.bin, "device-server", "w5");
        cmd.args(CLUSTER).args(["--listen", listen]);
        if let Some(s) = &self.server_spec {
            cmd.args(["--spec", s]);
        }
        if let Some(s) = seed {
            cmd.args(["--seed", s]);
        }
        self.spawn(i, cmd)
    }

    fn start_devices(&mut self, k: usize) -> Result<(), String> {
        let i = self.servers + k;
        let mut cmd = crate::plexus_cmd::role(&self.bin, "device", "w5");
        cmd.args(["--stats-every-ms", "1000"])
            .args(["--devices", &self.per_proc.to_string()])
            .args(["--first-id", &(k as u64 * self.per_proc).to_string()]);
        if let Some(s) = &self.device_spec {
            // A fresh drop seed per process life: the same schedule replays.
            self.restarts += 1;
            let s = s.replace(
                &format!("seed={}", self.seed),
                &format!("seed={}", self.seed * 1000 + self.restarts),
            );
            cmd.args(["--spec", &s]);
        }
        for s in 0..self.servers {
            if let Some(p) = &self.procs[s] {
                cmd.args(["--seed", &p.address]);
            }
        }
        self.spawn(i, cmd)
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.procs[i].take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    /// Starts the servers and device processes; returns once every device
    /// reported.
    fn start(&mut self, args: &Args) -> Result<(), String> {
        let listen = format!("{}://127.0.0.1:0", self.scheme);
        self.start_server(0, &listen, None)?;
        let seed = self.procs[0].as_ref().map(|p| p.address.clone());
        for i in 1..self.servers {
            self.start_server(i, &listen, seed.as_deref())?;
        }
        let want = format!("MEMBERS up={}", self.servers);
        let mut up = vec![false; self.servers];
        while !up.iter().all(|u| *u) {
            let l = self.expect("all servers up", |l| l.text == want)?;
            up[l.from] = true;
        }
        let procs = args.device_procs.min(args.devices) as usize;
        for k in 0..procs {
            self.start_devices(k)?;
        }
        let mut reporting = 0;
        let total = self.per_proc * procs as u64;
        while reporting < total {
            self.expect("every device reporting", |l| {
                l.text.starts_with("EVENT reporting ")
            })?;
            reporting += 1;
        }
        Ok(())
    }

    fn throughput(&mut self, args: &Args) -> Result<(), String> {
        self.start(args)?;
        let procs = self.procs.len() - self.servers;
        let mut rng = SmallRng::seed_from_u64(args.seed);
        let exp = |rng: &mut SmallRng, mean: f64| {
            Duration::from_secs_f64(-mean * (1.0 - rng.gen::<f64>()).ln())
        };
        let t0 = Instant::now();
        // Next kill of each device process and each server.
        let mut device_kills: Vec<Option<Instant>> = (0..procs)
            .map(|_| (args.device_mttf > 0.0).then(|| t0 + exp(&mut rng, args.device_mttf)))
            .collect();
        let mut server_kills: Vec<Option<Instant>> = (0..self.servers)
            .map(|_| (args.server_mttf > 0.0).then(|| t0 + exp(&mut rng, args.server_mttf)))
            .collect();
        let windows = args.seconds as usize;
        let mut per_window = vec![0u64; windows];
        let (mut device_kills_done, mut server_kills_done) = (0, 0);
        // What the servers counted before the window starts.
        while let Some(l) = self.backlog.pop_front() {
            if let (Some(r), Some(Some(p))) = (
                field(&l.text, "STATS ", "reports"),
                self.procs.get_mut(l.from),
            ) {
                p.last_reports = r;
            }
        }
        let end = t0 + Duration::from_secs(args.seconds);
        while Instant::now() < end {
            let now = Instant::now();
            #[allow(clippy::needless_range_loop)] // self is borrowed mutably inside
            for k in 0..procs {
                if device_kills[k].is_some_and(|t| now >= t) {
                    self.kill(self.servers + k);
                    self.start_devices(k)?;
                    device_kills_done += 1;
                    device_kills[k] = Some(Instant::now() + exp(&mut rng, args.device_mttf));
                }
            }
            #[allow(clippy::needless_range_loop)] // self is borrowed mutably inside
            for s in 0..self.servers {
                if server_kills[s].is_some_and(|t| now >= t) {
                    let address = self.procs[s].as_ref().map(|p| p.address.clone());
                    self.kill(s);
                    let seed = (0..self.servers)
                        .filter(|o| *o != s)
                        .find_map(|o| self.procs[o].as_ref().map(|p| p.address.clone()));
                    if let Some(a) = address {
                        // Alone, it comes back where the devices look
                        // for it; in a cluster, as a new member (a UDP
                        // peer of the dead one's address lingers a while
                        // at the others).
                        let listen = if self.servers == 1 {
                            a
                        } else {
                            format!("{}://127.0.0.1:0", self.scheme)
                        };
                        self.start_server(s, &listen, seed.as_deref())?;
                    }
                    server_kills_done += 1;
                    server_kills[s] = Some(Instant::now() + exp(&mut rng, args.server_mttf));
                }
            }
            let next = device_kills
                .iter()
                .chain(&server_kills)
                .flatten()
                .copied()
                .chain([end])
                .min()
                .unwrap_or(end);
            let wait = next.saturating_duration_since(Instant::now());
            let Some(l) = self.next_line(wait) else {
                continue;
            };
            if l.from >= self.servers {
                continue;
            }
            let Some(reports) = field(&l.text, "STATS ", "reports") else {
                continue;
            };
            let Some(p) = self.procs[l.from].as_mut() else {
                continue;
            };
            // A restarted server counts from 0 again.
            let delta = reports.checked_sub(p.last_reports).unwrap_or(reports);
            p.last_reports = reports;
            let w = l.at.saturating_duration_since(t0).as_secs() as usize;
            if w < windows {
                per_window[w] += delta;
            }
        }
        let mut rates: Vec<f64> = per_window.iter().map(|r| *r as f64).collect();
        let reports_per_s = median(&mut rates);
        println!("windows: {per_window:?}");
        ResultLine::new("w5", "plexus")
            .field(
                "transport",
                self.server_spec
                    .as_deref()
                    .unwrap_or(&self.scheme)
                    .replace(' ', ""),
            )
            .field("s", args.seconds)
            .field("servers", self.servers)
            .field("devices", self.per_proc * procs as u64)
            .field("device_procs", procs)
            .field("drop", args.drop)
            .field("mttf_s", args.device_mttf)
            .field("server_mttf_s", args.server_mttf)
            .field("device_kills", device_kills_done)
            .field("server_kills", server_kills_done)
            .field("reports_per_s", format!("{reports_per_s:.0}"))
            .print();
        Ok(())
    }

    fn mttr(&mut self, args: &Args) -> Result<(), String> {
        self.start(args)?;
        let bound = plexus_devices::Liveness::default().detection_bound() + Duration::from_secs(1);
        let mut all = Vec::new();
        let mut worst_runs = Vec::new();
        for run in 0..args.runs {
            // Drain what came so far, learning attachments.
            self.backlog.clear();
            while self.next_line(Duration::ZERO).is_some() {}
            let at = self.at.clone();
            let mut count: HashMap<&str, usize> = HashMap::new();
            for s in at.values() {
                *count.entry(s.as_str()).or_default() += 1;
            }
            let victim = (0..self.servers)
                .filter_map(|i| self.procs[i].as_ref().map(|p| (i, p.address.clone())))
                .max_by_key(|(_, a)| count.get(a.as_str()).copied().unwrap_or(0))
                .ok_or("no server")?;
            let mut moving: Vec<String> = at
                .iter()
                .filter(|(_, s)| **s == victim.1)
                .map(|(d, _)| d.clone())
                .collect();
            moving.sort();
            let killed = Instant::now();
            self.kill(victim.0);
            let mut reattached: HashMap<String, bool> = HashMap::new();
            let mut times = Vec::new();
            while times.len() < moving.len() {
                let l = self.expect("devices reporting again", |_| true)?;
                if let Some((d, s)) = attached(&l.text) {
                    if s != victim.1 && moving.contains(&d) {
                        reattached.insert(d, true);
                    }
                } else if let Some(d) = l.text.strip_prefix("EVENT reporting ") {
                    if reattached.remove(d).is_some() {
                        times.push(l.at.duration_since(killed).as_secs_f64());
                    }
                }
            }
            let worst = times.iter().copied().fold(0.0, f64::max);
            println!(
                "run {run}: killed {} holding {} devices; all report again after {worst:.3} s (bound {:.3} s)",
                victim.1,
                moving.len(),
                bound.as_secs_f64()
            );
            worst_runs.push(worst);
            all.extend(times);
            // A new server takes its place for the next run (a new member:
            // devices the ring gives it move to it).
            let seed = (0..self.servers)
                .filter(|o| *o != victim.0)
                .find_map(|o| self.procs[o].as_ref().map(|p| p.address.clone()));
            let listen = format!("{}://127.0.0.1:0", self.scheme);
            self.start_server(victim.0, &listen, seed.as_deref())?;
            self.expect("the new server up", |l| {
                l.from == victim.0 && l.text.starts_with("MEMBERS up=") && l.text != "MEMBERS up=1"
            })?;
            // Let the ring settle (the dead member downed, devices moved).
            std::thread::sleep(Duration::from_secs(12));
        }
        let p50 = median(&mut all.clone());
        let max = all.iter().copied().fold(0.0, f64::max);
        ResultLine::new("w5-mttr", "plexus")
            .field(
                "transport",
                self.server_spec
                    .as_deref()
                    .unwrap_or(&self.scheme)
                    .replace(' ', ""),
            )
            .field("servers", self.servers)
            .field(
                "devices",
                self.per_proc * (self.procs.len() - self.servers) as u64,
            )
            .field("runs", args.runs)
            .field("mttr_p50_s", format!("{p50:.3}"))
            .field("mttr_max_s", format!("{max:.3}"))
            .field("bound_s", format!("{:.3}", bound.as_secs_f64()))
            .field("within_bound", max < bound.as_secs_f64())
            .print();
        Ok(())
    }
}

/// `key=<u64>` of a line starting with `prefix`.
fn field(line: &str, prefix: &str, key: &str) -> Option<u64> {
    line.strip_prefix(prefix)?
        .split(' ')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// `EVENT attached <device> <server>` as (device, server).
fn attached(line: &str) -> Option<(String, String)> {
    let mut w = line.strip_prefix("EVENT attached ")?.split(' ');
    Some((w.next()?.to_owned(), w.next()?.to_owned()))
}
