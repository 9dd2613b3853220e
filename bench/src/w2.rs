//! W2 stream: N source node processes send `Value(u64)` messages, one value
//! each, to one sink actor under credit flow control in user code (100,000
//! at start, 50,000 more per 50,000 received from that source). Reports the
//! median of the 1-second windows of values received. The baseline is the
//! same protocol with plain tokio: length-prefixed frames over TCP through
//! a buffered writer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};

use crate::nodes::{self, ChildNode};
use crate::report::{median, ResultLine};

const INITIAL_CREDIT: u64 = 100_000;
const CREDIT_STEP: u64 = 50_000;

pub use crate::nodes::RemoteArgs as Args;

/// A source introduces itself with its index and where to send credit.
#[derive(Serialize, Deserialize)]
pub struct Hello(pub u64, pub ActorRef<Credit>);
remote_message!(Hello = "bench.Hello");

/// Permission to send this many more values.
#[derive(Serialize, Deserialize)]
pub struct Credit(pub u64);
remote_message!(Credit = "bench.Credit");

/// One value; the source index is in the top 16 bits.
#[derive(Serialize, Deserialize)]
pub struct Value(pub u64);
remote_message!(Value = "bench.Value");

enum SinkMsg {
    Hello(Hello),
    Value(Value),
}
impl From<Hello> for SinkMsg {
    fn from(h: Hello) -> Self {
        SinkMsg::Hello(h)
    }
}
impl From<Value> for SinkMsg {
    fn from(v: Value) -> Self {
        SinkMsg::Value(v)
    }
}

/// Role of a source node process.
pub async fn source_node(sink: String, index: u64, transport: String) {
    let (cfg, _) = nodes::transport(&transport);
    let system = nodes::system(&cfg);
    let node = Node::start(&system, cfg).expect("start the source node");
    let _metrics = crate::metrics_on::publish(&system, &node);
    let values: ActorRef<Value> = node
        .resolve(&sink)
        .await
        .expect("resolve the sink (values)");
    let hello: ActorRef<Hello> = node.resolve(&sink).await.expect("resolve the sink (hello)");
    let mut seq = 0u64;
    let source = system.spawn_fn(move |Credit(k), _ctx| {
        for _ in 0..k {
            values.tell(Value(index << 48 | seq));
            seq += 1;
        }
    });
    hello.tell(Hello(index, source));
    println!("READY source {index}");
    std::future::pending::<()>().await;
}

/// Role of a baseline source process.
pub async fn source_baseline(sink: String, index: u64) {
    let s = tokio::net::TcpStream::connect(&sink)
        .await
        .expect("connect the sink");
    s.set_nodelay(true).expect("nodelay");
    let (mut rd, wr) = s.into_split();
    let credit = Arc::new(AtomicU64::new(0));
    let more = Arc::new(tokio::sync::Notify::new());
    {
        let (credit, more) = (credit.clone(), more.clone());
        tokio::spawn(async move {
            let mut frame = [0u8; 12];
            while rd.read_exact(&mut frame).await.is_ok() {
                let k = u64::from_le_bytes(frame[4..].try_into().expect("8 bytes"));
                credit.fetch_add(k, Ordering::AcqRel);
                more.notify_one();
            }
        });
    }
    let mut w = BufWriter::with_capacity(64 << 10, wr);
    w.write_all(&frame(index)).await.expect("hello");
    w.flush().await.expect("flush");
    println!("READY source {index}");
    let mut seq = 0u64;
    loop {
        let available = credit.swap(0, Ordering::AcqRel);
        if available == 0 {
            w.flush().await.expect("flush");
            more.notified().await;
            continue;
        }
        for _ in 0..available {
            w.write_all(&frame(index << 48 | seq))
                .await
                .expect("write value");
            seq += 1;
        }
    }
}

fn frame(v: u64) -> [u8; 12] {
    let mut f = [0u8; 12];
    f[..4].copy_from_slice(&8u32.to_le_bytes());
    f[4..].copy_from_slice(&v.to_le_bytes());
    f
}

pub fn run(args: &Args) {
    args.apply_threads();
    let _certs = nodes::prepare(&args.transport);
    let rt = nodes::runtime();
    let warmup = Duration::from_secs_f64(args.warmup);
    let duration = Duration::from_secs_f64(args.duration);
    let n = args.n;
    let mut rounds = Vec::new();
    for round in 1..=args.rounds.max(1) {
        let base = rt
            .block_on(async move { tokio::spawn(sink_baseline(n, warmup, duration)).await })
            .expect("baseline sink");
        if args.baseline {
            report(args, "baseline", base, None);
            return;
        }
        let transport = args.transport.clone();
        let (ours, phases) = rt
            .block_on(
                async move { tokio::spawn(sink_plexus(n, transport, warmup, duration)).await },
            )
            .expect("plexus sink");
        if let Some(p) = phases {
            // `--metrics-alternate`: the run's own on / off, besides the
            // usual figures.
            p.fields(ResultLine::new("w2", "plexus-alternating"), "values_per_s")
                .field("n", args.n)
                .field("transport", args.transport.replace(' ', ""))
                .print();
        }
        let ratio = ours / base;
        if args.rounds > 1 {
            println!(
                "ROUND workload=w2 round={round} values_per_s={ours:.0} baseline_values_per_s={base:.0} vs_baseline={ratio:.3}"
            );
        }
        rounds.push((base, ours, ratio));
    }
    let (base, ours) = nodes::median_round(rounds);
    report(args, "baseline", base, None);
    report(args, "plexus", ours, Some(base));
}

/// Samples `total` once a second; returns the median rate over the
/// measured windows.
async fn windows(total: &AtomicU64, warmup: Duration, duration: Duration) -> f64 {
    tokio::time::sleep(warmup).await;
    let mut rates = Vec::new();
    let mut last = total.load(Ordering::Acquire);
    let mut t = Instant::now();
    let windows = duration.as_secs_f64().round().max(1.0) as usize;
    for _ in 0..windows {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = total.load(Ordering::Acquire);
        let elapsed = t.elapsed().as_secs_f64();
        rates.push((now - last) as f64 / elapsed);
        last = now;
        t = Instant::now();
    }
    median(&mut rates)
}

/// The median rate, and with `--metrics-alternate` the rates with metrics
/// off and on (instead of the median's windows).
async fn sink_plexus(
    n: usize,
    transport: String,
    warmup: Duration,
    duration: Duration,
) -> (f64, Option<crate::metrics_on::Phases>) {
    let (cfg, listen) = nodes::transport(&transport);
    let system = nodes::system(&cfg);
    let node = Node::start(&system, cfg).expect("start the sink node");
    let _metrics = crate::metrics_on::publish(&system, &node);
    let uri = node.listen(&listen).await.expect("listen");
    let total = Arc::new(AtomicU64::new(0));
    let counted = total.clone();
    let mut received: Vec<u64> = Vec::new();
    let mut credit_to: Vec<Option<ActorRef<Credit>>> = Vec::new();
    let sink = system.spawn_fn(move |msg: SinkMsg, _ctx| match msg {
        SinkMsg::Hello(Hello(i, to)) => {
            let i = i as usize;
            if credit_to.len() <= i {
                credit_to.resize(i + 1, None);
                received.resize(i + 1, 0);
            }
            to.tell(Credit(INITIAL_CREDIT));
            credit_to[i] = Some(to);
        }
        SinkMsg::Value(Value(v)) => {
            let i = (v >> 48) as usize;
            counted.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = received.get_mut(i) {
                *r += 1;
                if *r % CREDIT_STEP == 0 {
                    if let Some(Some(to)) = credit_to.get(i) {
                        to.tell(Credit(CREDIT_STEP));
                    }
                }
            }
        }
    });
    node.publish(&sink.narrow::<Hello>(), "sink")
        .expect("publish");
    node.publish(&sink.narrow::<Value>(), "sink")
        .expect("publish");
    let sink_uri = format!("{uri}/sink");
    let mut _sources = Vec::with_capacity(n);
    for i in 0..n {
        _sources.push(
            ChildNode::start_async(vec![
                "w2-source".into(),
                "--sink".into(),
                sink_uri.clone(),
                "--index".into(),
                i.to_string(),
                "--transport".into(),
                transport.clone(),
            ])
            .await,
        );
    }
    let result = if crate::metrics_on::alternating() {
        let phases = crate::metrics_on::Phases::sample(&total, warmup, duration).await;
        ((phases.rates[0] + phases.rates[1]) / 2.0, Some(phases))
    } else {
        (windows(&total, warmup, duration).await, None)
    };
    node.shutdown().await;
    result
}

async fn sink_baseline(n: usize, warmup: Duration, duration: Duration) -> f64 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let total = Arc::new(AtomicU64::new(0));
    let counted = total.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.expect("accept");
            s.set_nodelay(true).expect("nodelay");
            let counted = counted.clone();
            tokio::spawn(async move {
                let (rd, mut wr) = s.into_split();
                let mut rd = BufReader::with_capacity(64 << 10, rd);
                let mut f = [0u8; 12];
                if rd.read_exact(&mut f).await.is_err() {
                    return;
                }
                wr.write_all(&frame(INITIAL_CREDIT)).await.expect("credit");
                let mut received = 0u64;
                while rd.read_exact(&mut f).await.is_ok() {
                    counted.fetch_add(1, Ordering::Relaxed);
                    received += 1;
                    if received % CREDIT_STEP == 0
                        && wr.write_all(&frame(CREDIT_STEP)).await.is_err()
                    {
                        break;
                    }
                }
            });
        }
    });
    let mut _sources = Vec::with_capacity(n);
    for i in 0..n {
        _sources.push(
            ChildNode::start_async(vec![
                "w2-source-baseline".into(),
                "--sink".into(),
                addr.clone(),
                "--index".into(),
                i.to_string(),
            ])
            .await,
        );
    }
    windows(&total, warmup, duration).await
}

fn report(args: &Args, system: &str, rate: f64, base: Option<f64>) {
    let mut line = ResultLine::new("w2", system)
        .field("values_per_s", format!("{rate:.0}"))
        .field("n", args.n)
        .field("transport", args.transport.replace(' ', ""));
    if let Some(b) = base {
        line = line.field("vs_baseline", format!("{:.3}", rate / b));
    }
    if args.rounds > 1 {
        line = line.field("rounds", args.rounds);
    }
    line.print();
}
