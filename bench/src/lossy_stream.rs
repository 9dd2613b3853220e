//! Lossy stream (issue 17): `--count` small messages (64 bytes of payload
//! each) from one node to another over real UDP on 127.0.0.1, through
//!
//! ```text
//! udp / slicing / faults(drop=D, duplicate=U, reorder=R, seed=7) / delivery(cc=C) / ordering / batching
//! ```
//!
//! on both nodes (so data one way and acks the other way meet the faults).
//! Both nodes live in this process, each with its own actor system.
//!
//! With `--mode send` (the default) the sender pushes the messages with
//! `send`, which waits for room in the link's send buffer, as fast as the
//! link takes them; the sink actor checks that they arrive exactly once and
//! in order, and the time is from the first send to the last arrival. A
//! message missing, repeated or out of order fails the run (exit 1).
//!
//! With `--mode tell` the sender tells them, yielding every 1,000, as a
//! producer that does not wait would: what does not fit the send buffer is
//! a dead letter (`SendBufferFull`, logged at WARN). The run checks that
//! every message is accounted for (delivered, once and in order, plus
//! counted dead letters equals sent) and reports both counts.
//!
//! Either way a run that does not finish within `--timeout` fails. With
//! `--idle S`, after each run the link sits unused for S seconds (long
//! enough for a UDP peer's idle timeout, 60 s, to close it) and then an
//! `ask` on a ref resolved before the stream must be answered.
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
    /// How the sender sends: `send` (waits for room) or `tell` (never
    /// waits; what does not fit is a counted dead letter).
    #[arg(long, value_enum, default_value_t = Mode::Send)]
    mode: Mode,
    /// After each run, leave the link idle this many seconds, then ask an
    /// actor through a ref resolved before the stream.
    #[arg(long, default_value_t = 0.0)]
    idle: f64,
}

/// How the sender sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// `ActorRef::send`: waits for room in the send buffer.
    Send,
    /// `ActorRef::tell`, yielding every 1,000: never waits.
    Tell,
}

/// Payload bytes beside the sequence number: 8 + 56 = 64.
const PAD: usize = 56;

/// One message of the stream: its sequence number and padding.
#[derive(Serialize, Deserialize)]
pub struct Chunk(pub u64, pub Vec<u8>);
remote_message!(Chunk = "bench.LossyChunk");

/// The question asked after an idle link.
#[derive(Serialize, Deserialize)]
pub struct Probe(pub ReplyTo<u64>);
remote_message!(Probe = "bench.LossyProbe");

/// What one run measured.
struct Outcome {
    seconds: f64,
    delivered: u64,
    dead: u64,
}

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
    let mut dead_total = 0u64;
    let mut measure = |spec: &str, mode: Mode| -> f64 {
        let mut times = Vec::new();
        for _ in 0..args.runs.max(1) {
            let run = Run {
                spec: spec.to_owned(),
                count: args.count,
                timeout,
                mode,
                idle: Duration::from_secs_f64(args.idle),
            };
            match rt.block_on(stream(run)) {
                Ok(o) => {
                    println!(
                        "RUN spec=\"{spec}\" mode={mode:?} seconds={:.3} delivered={} dead_letters={}",
                        o.seconds, o.delivered, o.dead
                    );
                    dead_total += o.dead;
                    times.push(o.seconds);
                }
                Err(why) => {
                    eprintln!("lossy-stream: {why} (spec `{spec}`)");
                    std::process::exit(1);
                }
            }
        }
        median(&mut times)
    };
    let reference = (!args.no_reference).then(|| measure(&spec(args, false), Mode::Send));
    let seconds = measure(&lossy, args.mode);
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
        .field("mode", format!("{:?}", args.mode).to_lowercase())
        .field("runs", args.runs.max(1))
        .field("dead_letters", dead_total)
        .field(
            match args.mode {
                Mode::Send => "exactly_once_in_order",
                Mode::Tell => "every_message_accounted",
            },
            true,
        );
    if let Some(r) = reference {
        line = line
            .field("lossless_seconds", format!("{r:.3}"))
            .field("vs_lossless", format!("{:.3}", r / seconds.max(1e-9)));
    }
    line.print();
}

/// One run's settings.
struct Run {
    spec: String,
    count: u64,
    timeout: Duration,
    mode: Mode,
    idle: Duration,
}

/// What the sink checks: in order, each once; with `tell`, gaps (dead
/// letters) are allowed.
struct Sink {
    mode: Mode,
    next: u64,
    delivered: u64,
    /// Told once `delivered` reaches the target (set by the sender side
    /// once it knows how many were refused), or on a violation.
    target: Option<u64>,
    done: Option<tokio::sync::oneshot::Sender<Result<Instant, String>>>,
}

impl Sink {
    fn on_chunk(&mut self, seq: u64) {
        let verdict = match self.mode {
            Mode::Send if seq != self.next => {
                // Lower: a repeat; higher: a gap.
                Some(Err(format!("expected message {}, got {seq}", self.next)))
            }
            Mode::Tell if seq < self.next => Some(Err(format!(
                "message {seq} after {}: repeated or out of order",
                self.next - 1
            ))),
            _ => {
                self.next = seq + 1;
                self.delivered += 1;
                None
            }
        };
        self.finish(verdict);
    }

    fn finish(&mut self, verdict: Option<Result<Instant, String>>) {
        let verdict =
            verdict.or_else(|| (self.target == Some(self.delivered)).then(|| Ok(Instant::now())));
        if let Some(v) = verdict {
            if let Some(tx) = self.done.take() {
                // The receiver waits until the stream ends or fails.
                let _ = tx.send(v);
            }
        }
    }
}

/// One stream of `count` messages over `spec`: the seconds from the first
/// send to the last arrival, and what arrived.
async fn stream(run: Run) -> Result<Outcome, String> {
    let Run {
        spec,
        count,
        timeout,
        mode,
        idle,
    } = run;
    let (cfg_b, listen) = nodes::transport(&spec);
    let system_b = nodes::system(&cfg_b);
    let node_b = Node::start(&system_b, cfg_b).map_err(|e| format!("start the sink node: {e}"))?;
    let uri = node_b
        .listen(&listen)
        .await
        .map_err(|e| format!("listen: {e}"))?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Result<Instant, String>>();
    let state = std::sync::Arc::new(std::sync::Mutex::new(Sink {
        mode,
        next: 0,
        delivered: 0,
        target: (mode == Mode::Send).then_some(count),
        done: Some(done_tx),
    }));
    let at_sink = state.clone();
    let sink = system_b.spawn_fn(move |Chunk(seq, _pad), _ctx| {
        // Poisoned only if this actor panicked before: then it is gone.
        at_sink.lock().expect("sink state").on_chunk(seq);
    });
    node_b
        .publish(&sink, "sink")
        .map_err(|e| format!("publish: {e}"))?;
    let probe = system_b.spawn_fn(|Probe(reply), _ctx| reply.send(42));
    node_b
        .publish(&probe, "probe")
        .map_err(|e| format!("publish: {e}"))?;

    let (cfg_a, _) = nodes::transport(&spec);
    let system_a = nodes::system(&cfg_a);
    let node_a =
        Node::start(&system_a, cfg_a).map_err(|e| format!("start the source node: {e}"))?;
    let to: ActorRef<Chunk> = node_a
        .resolve(&format!("{uri}/sink"))
        .await
        .map_err(|e| format!("resolve the sink: {e}"))?;
    let probe: ActorRef<Probe> = node_a
        .resolve(&format!("{uri}/probe"))
        .await
        .map_err(|e| format!("resolve the probe: {e}"))?;
    let dead_before = system_a.dead_letters().count();
    let start = Instant::now();
    let sender = tokio::spawn(async move {
        for seq in 0..count {
            match mode {
                Mode::Send => {
                    if to.send(Chunk(seq, vec![0x5a; PAD])).await.is_err() {
                        return Err(format!("send {seq} refused: the link is gone"));
                    }
                }
                Mode::Tell => {
                    to.tell(Chunk(seq, vec![0x5a; PAD]));
                    if seq % 1_000 == 999 {
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
        Ok(())
    });
    // The timeout covers the sending too: a `send` that waits for room
    // forever is a failed run, not a hung benchmark.
    let deadline = tokio::time::Instant::now() + timeout;
    let sent = match tokio::time::timeout_at(deadline, sender).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(why))) => Err(why),
        Ok(Err(e)) => Err(format!("sender task: {e}")),
        Err(_) => Err(format!(
            "the sender did not finish within {} s ({} delivered, {:?})",
            timeout.as_secs_f64(),
            state.lock().expect("sink state").delivered,
            node_a.link_stats(),
        )),
    };
    // Every tell has returned: the dead letters are all counted.
    let dead = system_a.dead_letters().count() - dead_before;
    {
        let mut s = state.lock().expect("sink state");
        s.target = Some(count - dead);
        s.finish(None);
    }
    let outcome = tokio::time::timeout_at(deadline, done_rx).await;
    let mut result = sent.and(match outcome {
        Err(_) => Err(format!(
            "the stream did not finish within {} s",
            timeout.as_secs_f64()
        )),
        Ok(Err(_)) => Err("the sink stopped before the stream ended".to_owned()),
        Ok(Ok(Err(v))) => Err(format!("not exactly once in order: {v}")),
        Ok(Ok(Ok(end))) => Ok(Outcome {
            seconds: end.duration_since(start).as_secs_f64(),
            delivered: state.lock().expect("sink state").delivered,
            dead,
        }),
    });
    if let Ok(o) = &result {
        if o.delivered + o.dead != count {
            result = Err(format!(
                "{} delivered + {} dead letters != {count} sent",
                o.delivered, o.dead
            ));
        }
    }
    if result.is_ok() && !idle.is_zero() {
        tokio::time::sleep(idle).await;
        let asked = probe.ask(Probe, Duration::from_secs(30)).await;
        println!(
            "IDLE seconds={:.0} ask={asked:?} links={}",
            idle.as_secs_f64(),
            node_a.link_count()
        );
        if asked != Ok(42) {
            result = Err(format!(
                "after {} s idle the ask failed: {asked:?}",
                idle.as_secs_f64()
            ));
        }
    }
    node_a.shutdown().await;
    node_b.shutdown().await;
    system_a.shutdown().await;
    system_b.shutdown().await;
    result
}
