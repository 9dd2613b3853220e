//! W1 pingpong: 1 ping node, N pong node processes, one message in flight
//! per pong; round trips per second and latency percentiles. The baseline
//! is the same pattern with plain tokio: length-prefixed frames over TCP,
//! no actors.

use std::time::{Duration, Instant, SystemTime};

use plexus::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::nodes::{self, ChildNode};
use crate::report::ResultLine;

pub use crate::nodes::RemoteArgs as Args;

/// A ping with the ref to answer to.
#[derive(Serialize, Deserialize)]
pub struct Ping(pub u64, pub ActorRef<Pong>);
remote_message!(Ping = "bench.Ping");

/// The answer.
#[derive(Serialize, Deserialize)]
pub struct Pong(pub u64);
remote_message!(Pong = "bench.Pong");

/// Role of a pong node process: serve `pong` until killed.
pub async fn pong_node(transport: String) {
    let (cfg, listen) = nodes::transport(&transport);
    let system = nodes::system(&cfg);
    let node = Node::start(&system, cfg).expect("start the pong node");
    let _metrics = crate::metrics_on::publish(&system, &node);
    let uri = node.listen(&listen).await.expect("listen");
    let pong = system.spawn_fn(|Ping(n, to), _ctx| to.tell(Pong(n)));
    node.publish(&pong, "pong").expect("publish pong");
    println!("READY {uri}/pong");
    std::future::pending::<()>().await;
}

/// Role of a baseline pong process: echo length-prefixed frames.
pub async fn pong_baseline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    println!("READY {}", listener.local_addr().expect("local addr"));
    loop {
        let (mut s, _) = listener.accept().await.expect("accept");
        s.set_nodelay(true).expect("nodelay");
        tokio::spawn(async move {
            let mut buf = [0u8; 12];
            while s.read_exact(&mut buf).await.is_ok() {
                if s.write_all(&buf).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// Per-pinger samples: round-trip times (µs) inside the measured window.
struct Pinger {
    pong: ActorRef<Ping>,
    me: Option<ActorRef<Pong>>,
    sent_at: Instant,
    measure_from: Instant,
    measure_to: Instant,
    samples: Vec<u32>,
    /// `--metrics-alternate`: round trips ended with metrics off and on.
    phases: Option<[u64; 2]>,
    done: Option<tokio::sync::oneshot::Sender<Samples>>,
}

/// What a pinger measured: round-trip times, and with
/// `--metrics-alternate` the round trips with metrics off and on.
type Samples = (Vec<u32>, Option<[u64; 2]>);

enum PingerMsg {
    Start(ActorRef<Pong>),
    Pong(Pong),
}

impl From<Pong> for PingerMsg {
    fn from(p: Pong) -> Self {
        PingerMsg::Pong(p)
    }
}

impl Actor for Pinger {
    type Msg = PingerMsg;
    async fn handle(&mut self, msg: PingerMsg, _ctx: &mut Context<PingerMsg>) {
        match msg {
            PingerMsg::Start(me) => {
                self.sent_at = Instant::now();
                self.pong.tell(Ping(0, me.clone()));
                self.me = Some(me);
            }
            PingerMsg::Pong(Pong(n)) => {
                let now = Instant::now();
                if now >= self.measure_from && now < self.measure_to {
                    let rtt = now.duration_since(self.sent_at).as_micros();
                    self.samples.push(rtt.min(u32::MAX.into()) as u32);
                    if let Some(phases) = &mut self.phases {
                        if let Some(on) = crate::metrics_on::phase_at(SystemTime::now()) {
                            phases[usize::from(on)] += 1;
                        }
                    }
                }
                if now >= self.measure_to {
                    if let Some(d) = self.done.take() {
                        let _ = d.send((std::mem::take(&mut self.samples), self.phases));
                    }
                    return;
                }
                self.sent_at = now;
                if let Some(me) = &self.me {
                    self.pong.tell(Ping(n + 1, me.clone()));
                }
            }
        }
    }
}

pub fn run(args: &Args) {
    args.apply_threads();
    let _certs = nodes::prepare(&args.transport);
    let rt = nodes::runtime();
    let warmup = Duration::from_secs_f64(args.warmup);
    let duration = Duration::from_secs_f64(args.duration);
    let mut rounds = Vec::new();
    for round in 1..=args.rounds.max(1) {
        let base = {
            let pongs: Vec<ChildNode> = (0..args.n)
                .map(|_| ChildNode::start(&["w1-pong-baseline".into()]))
                .collect();
            let addrs: Vec<String> = pongs.iter().map(|p| p.ready.clone()).collect();
            rt.block_on(async move { tokio::spawn(ping_baseline(addrs, warmup, duration)).await })
                .expect("baseline ping task")
        };
        if args.baseline {
            report(args, "baseline", &base, None);
            return;
        }
        let pongs: Vec<ChildNode> = (0..args.n)
            .map(|_| {
                ChildNode::start(&[
                    "w1-pong".into(),
                    "--transport".into(),
                    args.transport.clone(),
                ])
            })
            .collect();
        let uris: Vec<String> = pongs.iter().map(|p| p.ready.clone()).collect();
        let transport = args.transport.clone();
        let ours = rt
            .block_on(
                async move { tokio::spawn(ping_plexus(uris, transport, warmup, duration)).await },
            )
            .expect("plexus ping task");
        let ratio = ours.rate() / base.rate();
        if args.rounds > 1 {
            println!(
                "ROUND workload=w1 round={round} rtt_per_s={:.0} baseline_rtt_per_s={:.0} vs_baseline={ratio:.2}",
                ours.rate(),
                base.rate()
            );
        }
        rounds.push((base, ours, ratio));
    }
    let (base, ours) = nodes::median_round(rounds);
    report(args, "baseline", &base, None);
    report(args, "plexus", &ours, Some(&base));
}

/// All samples of a run and its measured window.
struct Run {
    samples: Vec<u32>,
    /// Round trips of the pong that got the fewest.
    slowest_pong: usize,
    seconds: f64,
    /// The machine's busy seconds in the window (every process: the pings,
    /// the pongs, the kernel's loopback work).
    busy_seconds: Option<f64>,
    /// `--metrics-alternate`: the rates with metrics off and on.
    phases: Option<crate::metrics_on::Phases>,
}

impl Run {
    /// A run from the samples of each pinger (one per pong).
    fn new(per_pong: Vec<Vec<u32>>, duration: Duration, busy_seconds: Option<f64>) -> Run {
        Run {
            slowest_pong: per_pong.iter().map(Vec::len).min().unwrap_or(0),
            samples: per_pong.concat(),
            seconds: duration.as_secs_f64(),
            busy_seconds,
            phases: None,
        }
    }

    /// The machine's CPU time per round trip, in microseconds.
    fn cpu_us_per_rtt(&self) -> Option<f64> {
        let n = self.samples.len();
        self.busy_seconds
            .filter(|_| n > 0)
            .map(|b| b * 1e6 / n as f64)
    }

    /// Round trips per second.
    fn rate(&self) -> f64 {
        self.samples.len() as f64 / self.seconds
    }

    /// Round trips per second of the pong that got the fewest: how evenly
    /// the pongs are served. Under contention (N = 16 on 2 cores) the
    /// plain program serves a few pongs several times as often as the
    /// rest; see docs/benchmarks.md.
    fn slowest_pong_rate(&self) -> f64 {
        self.slowest_pong as f64 / self.seconds
    }
}

async fn ping_plexus(
    uris: Vec<String>,
    transport: String,
    warmup: Duration,
    duration: Duration,
) -> Run {
    let (cfg, _) = nodes::transport(&transport);
    let system = nodes::system(&cfg);
    let node = Node::start(&system, cfg).expect("start the ping node");
    let metrics = crate::metrics_on::publish(&system, &node);
    let start = Instant::now();
    let (from, to) = (start + warmup, start + warmup + duration);
    let wall_from = SystemTime::now() + warmup;
    let busy = crate::report::busy_between(from, to);
    let alternate = crate::metrics_on::alternating();
    let mut waits = Vec::new();
    for uri in &uris {
        let pong: ActorRef<Ping> = node.resolve(uri).await.expect("resolve pong");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let pinger = system.spawn(Pinger {
            pong,
            me: None,
            sent_at: start,
            measure_from: from,
            measure_to: to,
            samples: Vec::new(),
            phases: alternate.then_some([0; 2]),
            done: Some(tx),
        });
        pinger.tell(PingerMsg::Start(pinger.narrow()));
        waits.push(rx);
    }
    let mut per_pong = Vec::new();
    let mut phases = alternate.then_some([0; 2]);
    for w in waits {
        let (samples, counted) = w.await.expect("pinger finished");
        per_pong.push(samples);
        if let (Some(total), Some(counted)) = (&mut phases, counted) {
            total[0] += counted[0];
            total[1] += counted[1];
        }
    }
    drop(metrics);
    node.shutdown().await;
    system.shutdown().await;
    let mut run = Run::new(per_pong, duration, busy.join().ok().flatten());
    run.phases = phases
        .map(|counts| crate::metrics_on::Phases::new(counts, wall_from, wall_from + duration));
    run
}

async fn ping_baseline(addrs: Vec<String>, warmup: Duration, duration: Duration) -> Run {
    let start = Instant::now();
    let (from, to) = (start + warmup, start + warmup + duration);
    let busy = crate::report::busy_between(from, to);
    let mut tasks = Vec::new();
    for a in addrs {
        tasks.push(tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(&a)
                .await
                .expect("connect pong");
            s.set_nodelay(true).expect("nodelay");
            let mut samples = Vec::new();
            let mut n = 0u64;
            let mut frame = [0u8; 12];
            loop {
                let sent = Instant::now();
                frame[..4].copy_from_slice(&8u32.to_le_bytes());
                frame[4..].copy_from_slice(&n.to_le_bytes());
                s.write_all(&frame).await.expect("write ping");
                s.read_exact(&mut frame).await.expect("read pong");
                let now = Instant::now();
                if now >= from && now < to {
                    samples.push(now.duration_since(sent).as_micros().min(u32::MAX.into()) as u32);
                }
                if now >= to {
                    break samples;
                }
                n += 1;
            }
        }));
    }
    let mut per_pong = Vec::new();
    for t in tasks {
        per_pong.push(t.await.expect("baseline pinger"));
    }
    Run::new(per_pong, duration, busy.join().ok().flatten())
}

fn report(args: &Args, system: &str, run: &Run, base: Option<&Run>) {
    let mut s = run.samples.clone();
    s.sort_unstable();
    let pct = |p: f64| {
        s.get(((s.len() as f64 * p) as usize).min(s.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let rate = run.rate();
    let mut line = ResultLine::new("w1", system)
        .field("rtt_per_s", format!("{rate:.0}"))
        .field("p50_us", pct(0.50))
        .field("p99_us", pct(0.99))
        .field(
            "slowest_pong_rtt_per_s",
            format!("{:.0}", run.slowest_pong_rate()),
        )
        .field("n", args.n)
        .field("transport", args.transport.replace(' ', ""));
    if let Some(cpu) = run.cpu_us_per_rtt() {
        line = line.field("cpu_us_per_rtt", format!("{cpu:.2}"));
    }
    if let Some(b) = base {
        line = line.field("vs_baseline", format!("{:.2}", rate / b.rate()));
    }
    if let Some(p) = &run.phases {
        line = p.fields(line, "rtt_per_s");
    }
    if args.rounds > 1 {
        line = line.field("rounds", args.rounds);
    }
    line.print();
}
