//! Lossy stream (issue 17): `--count` small messages (64 bytes of payload
//! each) from one node to another over real UDP on 127.0.0.1, through
//!
//! ```text
//! udp / slicing / faults(drop=D, duplicate=U, reorder=R, seed=7) / delivery(cc=C) / ordering / batching
//! ```
//!
//! on both nodes (so data one way and acks the other way meet the faults).
//! Both nodes live in this process, each with its own actor system; the
//! sender pushes the messages with `send` (which waits for room on the
//! link) as fast as the link takes them, the sink actor checks that they
//! arrive exactly once and in order, and the time is from the first send
//! to the last arrival. A message missing, repeated or out of order fails
//! the run (exit 1), as does a run that does not finish within `--timeout`.
//!
//! Unless `--no-reference`, the same stream runs first without faults (the
//! same controller), and the RESULT line gives the lossy rate as a
//! fraction of that lossless one (`vs_lossless`).

use std::time::{Duration, Instant};

use plexus::prelude::*;
use serde::{Deserialize, Serialize};

use crate::nodes;
use crate::report::{median, ResultLine};

#[derive(clap::Args)]
pub struct Args {
    /// Messages in the stream.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Probability that `faults` drops a frame, in percent.
    #[arg(long, default_value_t = 0.0)]
    drop: f64,
    /// Probability that `faults` duplicates a frame, in percent.
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// Probability that `faults` reorders a frame, in percent.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Congestion controller of `delivery`: `newreno` or `bbr`.
    #[arg(long, default_value = "newreno")]
    cc: String,
    /// Extra `delivery` options, e.g. `min_rto=5ms` (comma-separated).
    #[arg(long, default_value = "")]
    delivery: String,
    /// Runs of each stream; the median time is reported.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Skip the lossless reference run.
    #[arg(long)]
    no_reference: bool,
    /// Give up (exit 1) after this many seconds per run.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
}

/// Payload bytes beside the sequence number: 8 + 56 = 64.
const PAD: usize = 56;

/// One message of the stream: its sequence number and padding.
#[derive(Serialize, Deserialize)]
pub struct Chunk(pub u64, pub Vec<u8>);
remote_message!(Chunk = "bench.LossyChunk");

/// The stack spec of one run.
fn spec(args: &Args, faults: bool) -> String {
    let mut delivery = format!("cc={}", args.cc);
    if !args.delivery.is_empty() {
        delivery.push_str(", ");
        delivery.push_str(&args.delivery);
    }
    let faults = if faults {
        format!(
            "faults(drop={}, duplicate={}, reorder={}, seed=7) / ",
            args.drop / 100.0,
            args.duplicate / 100.0,
            args.reorder / 100.0
        )
    } else {
        String::new()
    };
    format!("udp / slicing / {faults}delivery({delivery}) / ordering / batching")
}

/// Runs the workload and prints its RESULT line; exits 1 on failure.
pub fn run(args: &Args) {
    let rt = nodes::runtime();
    let timeout = Duration::from_secs_f64(args.timeout);
    let lossy = spec(args, true);
    let measure = |spec: &str| -> f64 {
        let mut times = Vec::new();
        for _ in 0..args.runs.max(1) {
            match rt.block_on(stream(spec.to_owned(), args.count, timeout)) {
                Ok(s) => {
                    println!("RUN spec=\"{spec}\" seconds={s:.3}");
                    times.push(s);
                }
                Err(why) => {
                    eprintln!("lossy-stream: {why} (spec `{spec}`)");
                    std::process::exit(1);
                }
            }
        }
        median(&mut times)
    };
    let reference = (!args.no_reference).then(|| measure(&spec(args, false)));
    let seconds = measure(&lossy);
    let mut line = ResultLine::new("lossy-stream", "plexus")
        .field("cc", &args.cc)
        .field("drop", args.drop)
        .field("duplicate", args.duplicate)
        .field("reorder", args.reorder)
        .field("count", args.count)
        .field("seconds", format!("{seconds:.3}"))
        .field(
            "msgs_per_s",
            format!("{:.0}", args.count as f64 / seconds.max(1e-9)),
        )
        .field("exactly_once_in_order", true);
    if let Some(r) = reference {
        line = line
            .field("lossless_seconds", format!("{r:.3}"))
            .field("vs_lossless", format!("{:.3}", r / seconds.max(1e-9)));
    }
    line.print();
}

/// One stream of `count` messages over `spec`; the seconds from the first
/// send to the last arrival.
async fn stream(spec: String, count: u64, timeout: Duration) -> Result<f64, String> {
    let (cfg_b, listen) = nodes::transport(&spec);
    let system_b = nodes::system(&cfg_b);
    let node_b = Node::start(&system_b, cfg_b).map_err(|e| format!("start the sink node: {e}"))?;
    let uri = node_b
        .listen(&listen)
        .await
        .map_err(|e| format!("listen: {e}"))?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Result<Instant, String>>();
    let mut done = Some(done_tx);
    let mut expected = 0u64;
    let sink = system_b.spawn_fn(move |Chunk(seq, _pad), _ctx| {
        let verdict = if seq != expected {
            // Lower: a repeat; higher: a gap.
            Some(Err(format!("expected message {expected}, got {seq}")))
        } else {
            expected += 1;
            (expected == count).then(|| Ok(Instant::now()))
        };
        if let Some(v) = verdict {
            if let Some(tx) = done.take() {
                // The receiver waits until the stream ends or fails.
                let _ = tx.send(v);
            }
        }
    });
    node_b
        .publish(&sink, "sink")
        .map_err(|e| format!("publish: {e}"))?;

    let (cfg_a, _) = nodes::transport(&spec);
    let system_a = nodes::system(&cfg_a);
    let node_a =
        Node::start(&system_a, cfg_a).map_err(|e| format!("start the source node: {e}"))?;
    let to: ActorRef<Chunk> = node_a
        .resolve(&format!("{uri}/sink"))
        .await
        .map_err(|e| format!("resolve the sink: {e}"))?;
    let start = Instant::now();
    let sender = tokio::spawn(async move {
        for seq in 0..count {
            if to.send(Chunk(seq, vec![0x5a; PAD])).await.is_err() {
                return Err(format!("send {seq} refused: the link is gone"));
            }
        }
        Ok(())
    });
    let outcome = tokio::time::timeout(timeout, done_rx).await;
    let result = match outcome {
        Err(_) => Err(format!(
            "the stream did not finish within {} s",
            timeout.as_secs_f64()
        )),
        Ok(Err(_)) => Err("the sink stopped before the stream ended".to_owned()),
        Ok(Ok(Err(v))) => Err(format!("not exactly once in order: {v}")),
        Ok(Ok(Ok(end))) => Ok(end.duration_since(start).as_secs_f64()),
    };
    match sender.await {
        Ok(Ok(())) => {}
        Ok(Err(why)) => return Err(why),
        Err(e) => return Err(format!("sender task: {e}")),
    }
    node_a.shutdown().await;
    node_b.shutdown().await;
    system_a.shutdown().await;
    system_b.shutdown().await;
    result
}
