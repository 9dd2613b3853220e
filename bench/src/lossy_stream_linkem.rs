//! Lossy stream through the link emulator (issue 17): the stream of
//! `lossy-stream` (`--count` messages of 64 bytes, checked exactly once
//! and in order) between two node processes in network namespaces joined
//! by `plexus_linkem`, once per transport, over the same emulated link:
//!
//! ```text
//!  netns lsp<pid>-a (198.51.100.1)          netns lsp<pid>-b (198.51.100.2)
//!  plexus-bench lossy-stream-side --role a  plexus-bench lossy-stream-side --role b
//!    Hello(count, done_to)              ──▶ sink: checks order, counts
//!    Chunk(0..count) as fast as the link takes them
//!    waits for Finished                 ◀── Finished(ok) after the last one
//!             └──────── plexus-linkem forwarder (this process) ───┘
//! ```
//!
//! The transports compared are `udp / slicing / delivery(cc=bbr) /
//! ordering / batching` and `quic` (quinn, with a dev CA made for the run
//! and certificates naming the namespaces' addresses). The time runs from
//! side a's first send to `Finished` arriving back, so it includes one
//! one-way delay beyond the transfer; goodput is payload bytes
//! (`count * 64`) over that time. As `w3`, it needs root and
//! `/dev/net/tun`, uses a prefix made from its pid, and removes the link
//! when it returns.

use std::time::{Duration, Instant};

use plexus::prelude::*;
use plexus_linkem::{DirectionConfig, Link, LinkConfig, Side};
use serde::{Deserialize, Serialize};

use crate::lossy_stream::Chunk;
use crate::nodes;
use crate::report::{median, ResultLine};
use crate::side_proc::{Certs, SideProc};

/// The plexus stack compared against quic.
pub const PLEXUS_SPEC: &str = "udp / slicing / delivery(cc=bbr) / ordering / batching";

#[derive(clap::Args)]
pub struct Args {
    /// Messages in the stream.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Loss of the emulated link in percent, both directions.
    #[arg(long = "loss-percent", default_value_t = 1.0)]
    loss_percent: f64,
    /// Round-trip time of the emulated link in milliseconds.
    #[arg(long = "rtt-ms", default_value_t = 20.0)]
    rtt_ms: f64,
    /// Rate cap of the link in Mbit/s, both directions (none by default).
    #[arg(long = "rate-mbit")]
    rate_mbit: Option<f64>,
    /// Transports to compare: `plexus` (the stack above), `quic`, or a
    /// whole stack spec; comma-separated.
    #[arg(long, default_value = "plexus,quic")]
    transports: String,
    /// Runs per transport (alternating); the median time is reported.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Seed of the link's loss RNG.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Give up (exit 1) after this many seconds per run.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
}

/// Options of a side process.
#[derive(clap::Args)]
pub struct SideArgs {
    /// `a` (sends) or `b` (receives).
    #[arg(long)]
    role: String,
    /// Scheme or stack spec.
    #[arg(long)]
    transport: String,
    /// This side's address.
    #[arg(long)]
    host: String,
    /// Side a: the sink's node URI.
    #[arg(long, default_value = "")]
    peer: String,
    /// Side a: messages to send.
    #[arg(long, default_value_t = 0)]
    count: u64,
}

/// Opens the stream: how many messages follow and where to report.
#[derive(Serialize, Deserialize)]
pub struct Hello(pub u64, pub ActorRef<Finished>);
remote_message!(Hello = "bench.LossyHello");

/// The sink's verdict: `0` before the stream (ready), then `count` on
/// success, or `u64::MAX` when a message was missing, repeated or out of
/// order.
#[derive(Serialize, Deserialize)]
pub struct Finished(pub u64);
remote_message!(Finished = "bench.LossyFinished");

/// Runs the comparison and prints a `RESULT` line per transport; exits 1
/// on failure.
pub fn run(args: &Args) {
    if let Err(why) = run_inner(args) {
        eprintln!("lossy-stream-linkem: {why}");
        std::process::exit(1);
    }
}

fn spec_of(name: &str) -> &str {
    match name {
        "plexus" => PLEXUS_SPEC,
        other => other,
    }
}

fn run_inner(args: &Args) -> Result<(), String> {
    let mut dir = DirectionConfig::default();
    dir.set_loss_percent(args.loss_percent)
        .and_then(|d| d.set_delay_ms(args.rtt_ms / 2.0))
        .and_then(|d| d.set_rate_mbit(args.rate_mbit))
        .map_err(|e| format!("bad link settings: {e}"))?;
    let config = LinkConfig {
        a_to_b: dir.clone(),
        b_to_a: dir,
        seed: args.seed,
    };
    let prefix = format!("lsp{}", std::process::id());
    let link = Link::up(&prefix, config).map_err(|e| {
        format!(
            "cannot set up the emulated link (needs root, i.e. CAP_NET_ADMIN and \
             CAP_SYS_ADMIN, plus `ip` and /dev/net/tun): {e}"
        )
    })?;
    let _certs = Certs::make("lsp")?;
    let exe = std::env::current_exe().map_err(|e| format!("path of this binary: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let names: Vec<&str> = args.transports.split(',').map(str::trim).collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..args.runs.max(1) {
        for (i, name) in names.iter().enumerate() {
            let s = one_run(&link, &exe, spec_of(name), args)?;
            println!("RUN transport=\"{name}\" seconds={s:.3}");
            times[i].push(s);
        }
    }
    let stats = link
        .shutdown()
        .map_err(|e| format!("removing the link: {e}"))?;
    let bytes = args.count * 64;
    for (name, mut t) in names.iter().zip(times) {
        let (lo, hi) = t
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let seconds = median(&mut t);
        ResultLine::new("lossy-stream-linkem", "plexus")
            .field("transport", name.replace(' ', ""))
            .field("loss_percent", args.loss_percent)
            .field("rtt_ms", args.rtt_ms)
            .field("rate_mbit", args.rate_mbit.unwrap_or(0.0))
            .field("count", args.count)
            .field("seconds", format!("{seconds:.3}"))
            .field("min_seconds", format!("{lo:.3}"))
            .field("max_seconds", format!("{hi:.3}"))
            .field(
                "goodput_mbit",
                format!("{:.2}", bytes as f64 * 8.0 / seconds / 1e6),
            )
            .field("exactly_once_in_order", true)
            .print();
    }
    println!(
        "LINK lost_packets={} packets={}",
        stats[0].lost + stats[1].lost,
        stats[0].received + stats[1].received
    );
    Ok(())
}

/// One stream over `spec`: the seconds side a reports.
fn one_run(link: &Link, exe: &str, spec: &str, args: &Args) -> Result<f64, String> {
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout);
    let side = |role: &str, host: Side, extra: &[String]| {
        let mut a = vec![
            "lossy-stream-side".to_owned(),
            "--role".into(),
            role.into(),
            "--transport".into(),
            spec.into(),
            "--host".into(),
            host.address().to_string(),
        ];
        a.extend_from_slice(extra);
        SideProc::start(Some(link), host, exe, &a)
    };
    let mut b = side("b", Side::B, &[])?;
    let uri = b.expect("READY ", deadline)?;
    let mut a = side(
        "a",
        Side::A,
        &[
            "--peer".into(),
            uri,
            "--count".into(),
            args.count.to_string(),
        ],
    )?;
    let done = a.expect("DONE ", deadline)?;
    let seconds: f64 = done
        .trim()
        .parse()
        .map_err(|_| format!("side a: {}", done.trim()))?;
    Ok(seconds)
}

/// The node configuration of a side on `host`: for quic, a certificate
/// naming `host` (QUIC checks the dialled address against it).
fn config(transport: &str, host: &str) -> (NodeConfig, String) {
    let (mut cfg, listen) = nodes::transport(transport);
    if transport.trim() == "quic" {
        cfg = crate::side_proc::certified(cfg, host);
    }
    (cfg, listen.replace("127.0.0.1", host))
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("lossy-stream-side: {what}: {e}");
    std::process::exit(1);
}

/// Role of a side process (`--role a` or `b`).
pub async fn side(args: SideArgs) {
    match args.role.as_str() {
        "b" => side_b(&args.transport, &args.host).await,
        "a" => side_a(&args).await,
        other => fail("--role", format!("`{other}` is neither a nor b")),
    }
}

/// What `hello` told the sink: the count and where to report.
type Expected = std::sync::Arc<std::sync::Mutex<Option<(u64, ActorRef<Finished>)>>>;

/// Side b: publish `hello` and `sink`, print `READY <uri>`, serve until
/// killed. The sink checks order and answers `Finished` after the last
/// message (or at the first wrong one).
async fn side_b(transport: &str, host: &str) {
    let (cfg, listen) = config(transport, host);
    let system = nodes::system(&cfg);
    let node = Node::start(&system, cfg).unwrap_or_else(|e| fail("starting node b", e));
    let uri = node
        .listen(&listen)
        .await
        .unwrap_or_else(|e| fail("listening", e));
    let expect: Expected = std::sync::Arc::default();
    let e2 = expect.clone();
    let hello = system.spawn_fn(move |Hello(count, to), _ctx| {
        to.tell(Finished(0));
        *e2.lock().expect("not poisoned: no code panics holding it") = Some((count, to));
    });
    let mut next = 0u64;
    let mut failed = false;
    let sink = system.spawn_fn(move |Chunk(seq, _pad), _ctx| {
        if failed {
            return;
        }
        let guard = expect
            .lock()
            .expect("not poisoned: no code panics holding it");
        let Some((count, to)) = guard.as_ref() else {
            return;
        };
        if seq != next {
            failed = true;
            eprintln!("lossy-stream-side b: expected message {next}, got {seq}");
            to.tell(Finished(u64::MAX));
            return;
        }
        next += 1;
        if next == *count {
            to.tell(Finished(next));
        }
    });
    for (name, r) in [
        ("hello", node.publish(&hello, "hello")),
        ("sink", node.publish(&sink, "sink")),
    ] {
        r.unwrap_or_else(|e| fail(&format!("publishing {name}"), e));
    }
    println!("READY {uri}");
    std::future::pending::<()>().await;
}

/// Side a: resolve b's actors, say hello (and wait for the answer, so the
/// path is up), then send the stream; print `DONE <seconds>` from the first
/// send to `Finished`, or `DONE failed: ...`.
async fn side_a(args: &SideArgs) {
    let (cfg, _) = config(&args.transport, &args.host);
    let system = nodes::system(&cfg);
    let node = Node::start(&system, cfg).unwrap_or_else(|e| fail("starting node a", e));
    let hello: ActorRef<Hello> = node
        .resolve(&format!("{}/hello", args.peer))
        .await
        .unwrap_or_else(|e| fail("resolving hello", e));
    let sink: ActorRef<Chunk> = node
        .resolve(&format!("{}/sink", args.peer))
        .await
        .unwrap_or_else(|e| fail("resolving sink", e));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let me: ActorRef<Finished> = system.spawn_fn(move |Finished(n), _ctx| {
        // The receiver lives until the verdict is in.
        let _ = tx.send(n);
    });
    hello.tell(Hello(args.count, me));
    match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
        Ok(Some(0)) => {}
        _ => fail("waiting for b's answer to hello", "none within 30 s"),
    }
    let start = Instant::now();
    for seq in 0..args.count {
        if sink.send(Chunk(seq, vec![0x5a; 56])).await.is_err() {
            fail(
                "sending",
                format!("message {seq} refused: the link is gone"),
            );
        }
    }
    match rx.recv().await {
        Some(n) if n == args.count => {
            println!("DONE {:.6}", start.elapsed().as_secs_f64());
        }
        other => println!("DONE failed: not exactly once in order ({other:?})"),
    }
    node.shutdown().await;
    system.shutdown().await;
}
