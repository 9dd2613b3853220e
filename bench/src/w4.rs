//! W4 bulk: bulk data and control messages between two node processes
//! over an emulated link (issue 17), one cell of the matrix per run.
//!
//! ```text
//!  netns w4p<pid>-a (198.51.100.1)              netns w4p<pid>-b (198.51.100.2)
//!  plexus-bench w4-side-a                       plexus-bench w4-side-b
//!    Bulk(64 KiB) × N  ── bulk lane ──────────▶ `sink` counts bytes
//!                      ◀── Ack(bytes) ───────── every 1 MiB (default lane)
//!    CtlPing every 100 ms ── control lane ────▶ `ctl` answers CtlPong
//!                      ◀── CtlPong ──────────── (control lane)
//!             └──── plexus-linkem forwarder (this process) ──┘
//!                   200 Mbit/s, delay r/2 each way, loss both ways
//! ```
//!
//! This process sets up the link with `plexus_linkem::Link` (a prefix made
//! from its pid), starts one side process per namespace by re-executing
//! itself with a hidden role, reads their `READY` / `WINDOW` / `DONE`
//! lines, and prints one `RESULT` line. With `--loopback` there is no
//! emulated link: both sides run on 127.0.0.1 (issue 17's "control p99 <
//! 1 ms while a 1 GiB bulk transfer saturates the link").
//!
//! **Flow control.** Side a keeps at most `--window-mib` (16 MiB) of bulk
//! payload unacknowledged: side b's `sink` sends `Ack(total bytes)` back
//! every 1 MiB (and at the end), and a sends the next 64 KiB only while
//! `sent - acked < window`. So the 64 MiB send buffer of a link never
//! overflows (a remote `tell` beyond it is a dead letter), and at 300 ms
//! RTT the window (16 MiB) is still twice the path's bandwidth-delay
//! product (200 Mbit/s × 300 ms = 7.5 MB). The same window holds for every
//! policy, so what a control ping waits behind on one lane is at most the
//! window plus what the kernel buffers.
//!
//! **Control.** Before the transfer side a sends 20 pings 50 ms apart on an
//! idle link (`idle_ctl_ms`, the median); during it, one `CtlPing` every
//! 100 ms (a `Control`-lane type; b answers with a `CtlPong`, also on the
//! control lane). Round trips go into an hdrhistogram (µs, 3 significant
//! digits): `ctl_p50_ms`, `ctl_p99_ms`, `ctl_max_ms`. Pings not answered
//! when the transfer ends count as `ctl_unanswered`.
//!
//! **Throughput.** `mbytes_per_s` is payload bytes acknowledged by b
//! divided by the time from a's first bulk send to the last `Ack`
//! (10^6 bytes/s). A transfer still running after `--max-seconds` stops
//! there: the figure is then over the bytes acked so far
//! (`complete=false`). Each second a prints `WINDOW <s> <bytes>` (payload
//! acked in that second), passed through to this process's stdout.
//!
//! **Policies** (`--policy`):
//!
//! | policy | control lane | bulk lane |
//! | --- | --- | --- |
//! | `one-lane` | `tcp` (the session's link) | the same link |
//! | `split` | `ctl` = `tcp / framing` | `bulk` = `tcp / framing` |
//! | `bulk-quic` | `ctl` | `quic` (dev CA made for the run) |
//! | `bulk-rudp` | `ctl` | `rudp` = `udp / delivery / slicing / ordering` |
//! | `bulk-bbr` | `ctl` | `bbr` = `udp / delivery(cc=bbr) / slicing / ordering` |
//! | `adaptive` | `ctl` | `bulk \| bbr`: TCP and BBR-over-UDP |
//!
//! The adaptive pair is TCP and the BBR stack because they win on opposite
//! ends of the matrix: kernel TCP on short clean paths (no user-space
//! slicing or acks), BBR on long lossy ones where TCP's window collapses;
//! QUIC (CUBIC in quinn) and newreno `delivery` both back off on random
//! loss like TCP does, so they add little beside TCP.
//!
//! **Path change** (`--change-at S` with `--change-rtt-ms` and/or
//! `--change-loss`): the link's settings change `S` seconds after the
//! transfer starts (`Link::set_config` while it runs); the `WINDOW` lines
//! show the goodput per second before and after.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use plexus::prelude::*;
use plexus::remote::{Bulk, Bytes};
use plexus_linkem::{DirectionConfig, Link, LinkConfig, Side};
use serde::{Deserialize, Serialize};

use crate::nodes;
use crate::report::ResultLine;
use crate::side_proc::{Certs, SideProc};

/// How lanes map to stacks in a cell.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Everything on the session's one TCP link.
    OneLane,
    /// Control and bulk each on a TCP link of its own.
    Split,
    /// Bulk on QUIC, control on TCP.
    BulkQuic,
    /// Bulk on `udp / delivery / slicing / ordering` (newreno).
    BulkRudp,
    /// Bulk on `udp / delivery(cc=bbr) / slicing / ordering`.
    BulkBbr,
    /// Bulk on an adaptive lane over TCP and the BBR stack.
    Adaptive,
}

impl Policy {
    /// Every policy, in the report's order.
    pub const ALL: [Policy; 6] = [
        Policy::OneLane,
        Policy::Split,
        Policy::BulkQuic,
        Policy::BulkRudp,
        Policy::BulkBbr,
        Policy::Adaptive,
    ];

    /// The name on the command line and in `transport=`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::OneLane => "one-lane",
            Policy::Split => "split",
            Policy::BulkQuic => "bulk-quic",
            Policy::BulkRudp => "bulk-rudp",
            Policy::BulkBbr => "bulk-bbr",
            Policy::Adaptive => "adaptive",
        }
    }

    fn needs_certs(self) -> bool {
        self == Policy::BulkQuic
    }

    /// The node configuration of a side at `host`, and the schemes side b
    /// listens on besides `tcp`. With `heartbeat`, the TCP links of the
    /// session and of the control lane carry [`HEARTBEAT`].
    fn config(self, host: &str, heartbeat: bool) -> (NodeConfig, Vec<&'static str>) {
        let (mut base, _) = nodes::transport("tcp");
        if self.needs_certs() {
            base = crate::side_proc::certified(base, host);
        }
        let ctl = if heartbeat {
            base = base.scheme("tcp", format!("tcp / framing / {HEARTBEAT}"));
            format!("tcp / framing / {HEARTBEAT}")
        } else {
            "tcp / framing".to_owned()
        };
        let base = base
            .scheme("ctl", ctl)
            .scheme("bulk", "tcp / framing")
            // `delivery` below `slicing`: a lost datagram costs one
            // datagram, not the 64 KiB message it was a slice of (in the
            // simulator, 300 such messages at 1 % loss: 0.77 s against
            // 72.9 s with slicing below).
            // With `delivery` below it, `slicing` reassembles every
            // message in flight at once (delivery does not order): its
            // bounds must hold the 16 MiB window (by default 32 partial
            // messages, 8 MiB; a slice dropped beyond them was acked
            // already, and `ordering` waits for its message forever).
            // For the same reason a partial message must not time out
            // while delivery is still bringing its slices (the default
            // 2 s is less than a 64 KiB message takes in a 300 ms path's
            // slow start): 60 s, beyond the ~36 s after which delivery
            // gives a dead link up.
            .scheme(
                "rudp",
                "udp / delivery / slicing(max_partials=1024, max_partial_bytes=64MiB, reassembly_timeout=60s) / ordering",
            )
            .scheme(
                "bbr",
                "udp / delivery(cc=bbr) / slicing(max_partials=1024, max_partial_bytes=64MiB, reassembly_timeout=60s) / ordering",
            );
        let (bulk, listen): (&str, Vec<&str>) = match self {
            Policy::OneLane => return (base, Vec::new()),
            Policy::Split => ("bulk", vec!["ctl", "bulk"]),
            Policy::BulkQuic => ("quic", vec!["ctl", "quic"]),
            Policy::BulkRudp => ("rudp", vec!["ctl", "rudp"]),
            Policy::BulkBbr => ("bbr", vec!["ctl", "bbr"]),
            Policy::Adaptive => ("bulk | bbr", vec!["ctl", "bulk", "bbr"]),
        };
        (
            base.lane(Lane::Control, "ctl").lane(Lane::Bulk, bulk),
            listen,
        )
    }
}

/// Options of one W4 cell.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Which lanes carry what (see the module docs).
    #[arg(long, value_enum)]
    pub policy: Policy,
    /// Round-trip time of the link in ms (half of it each way).
    #[arg(long = "rtt-ms", default_value_t = 0.0)]
    pub rtt_ms: f64,
    /// Probability that the link drops a packet, in percent, both ways.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Rate cap of the link, 10^6 bit/s, both ways.
    #[arg(long = "rate-mbit", default_value_t = 200.0)]
    pub rate_mbit: f64,
    /// Packets queued in front of the rate cap (tail drop beyond).
    #[arg(long = "queue-packets", default_value_t = 1000)]
    pub queue_packets: usize,
    /// Bulk payload to send, MiB.
    #[arg(long = "size-mib", default_value_t = 256)]
    pub size_mib: u64,
    /// Size of one bulk message, KiB.
    #[arg(long = "message-kib", default_value_t = 64)]
    pub message_kib: u64,
    /// Unacknowledged bulk payload side a allows, MiB.
    #[arg(long = "window-mib", default_value_t = 16)]
    pub window_mib: u64,
    /// Stop the transfer after this many seconds and report what was
    /// acknowledged by then (`complete=false`).
    #[arg(long = "max-seconds", default_value_t = 120.0)]
    pub max_seconds: f64,
    /// No emulated link: both sides on 127.0.0.1, no rate cap or delay.
    #[arg(long)]
    pub loopback: bool,
    /// Milliseconds between control pings during the transfer.
    #[arg(long = "ping-ms", default_value_t = 100.0)]
    pub ping_ms: f64,
    /// Add a strict `heartbeat` layer to the TCP session and control links
    /// and count the links closed as unreachable (`link_downs`).
    #[arg(long)]
    pub heartbeat: bool,
    /// Change the link this many seconds into the transfer.
    #[arg(long = "change-at")]
    pub change_at: Option<f64>,
    /// RTT in ms after the change (default: unchanged).
    #[arg(long = "change-rtt-ms")]
    pub change_rtt_ms: Option<f64>,
    /// Loss in percent after the change (default: unchanged).
    #[arg(long = "change-loss")]
    pub change_loss: Option<f64>,
    /// Seed of the link's loss RNG.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The liveness layer of `--heartbeat`: a heartbeat every 100 ms on an
/// idle link, and a link closed as unreachable once phi reaches 16 with a
/// pause of 200 ms accepted, far stricter than the defaults (1 s, 1 s), so
/// that bulk traffic delaying a side's frames would show.
const HEARTBEAT: &str = "heartbeat(interval=100ms, acceptable_pause=200ms, min_std_dev=50ms)";

/// Payload acknowledged between b's `Ack`s.
const ACK_EVERY: u64 = 1 << 20;
/// Control pings on the idle link before the transfer.
const IDLE_PINGS: u64 = 20;

/// Side a's first message to b: how much is coming and where to ack.
#[derive(Serialize, Deserialize)]
pub struct Hello {
    total: u64,
    ack_to: ActorRef<Ack>,
}
remote_message!(Hello = "bench.w4.Hello");

/// Payload bytes b has received so far.
#[derive(Serialize, Deserialize)]
pub struct Ack(u64);
remote_message!(Ack = "bench.w4.Ack");

/// A control ping: its number and where to answer.
#[derive(Serialize, Deserialize)]
pub struct CtlPing(u64, ActorRef<CtlPong>);
remote_message!(CtlPing = "bench.w4.CtlPing", lane = Control);

/// The answer to `CtlPing(n)`.
#[derive(Serialize, Deserialize)]
pub struct CtlPong(u64);
remote_message!(CtlPong = "bench.w4.CtlPong", lane = Control);

/// Runs one W4 cell and prints its `RESULT` line; exits 1 on failure.
pub fn run(args: &Args) {
    if let Err(why) = run_inner(args) {
        eprintln!("w4: {why}");
        std::process::exit(1);
    }
}

fn direction(rtt_ms: f64, loss: f64, args: &Args) -> Result<DirectionConfig, String> {
    let mut dir = DirectionConfig::default();
    dir.set_loss_percent(loss)
        .and_then(|d| d.set_delay_ms(rtt_ms / 2.0))
        .and_then(|d| d.set_rate_mbit(Some(args.rate_mbit)))
        .and_then(|d| d.set_queue_packets(args.queue_packets))
        .map_err(|e| format!("bad link settings: {e}"))?;
    Ok(dir.clone())
}

fn link_config(rtt_ms: f64, loss: f64, args: &Args) -> Result<LinkConfig, String> {
    let dir = direction(rtt_ms, loss, args)?;
    Ok(LinkConfig {
        a_to_b: dir.clone(),
        b_to_a: dir,
        seed: args.seed,
    })
}

fn run_inner(args: &Args) -> Result<(), String> {
    let _certs = if args.policy.needs_certs() {
        Some(Certs::make("w4")?)
    } else {
        None
    };
    let exe = std::env::current_exe().map_err(|e| format!("path of this binary: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let link = if args.loopback {
        None
    } else {
        let prefix = format!("w4p{}", std::process::id());
        Some(
            Link::up(&prefix, link_config(args.rtt_ms, args.loss, args)?).map_err(|e| {
                format!(
                    "cannot set up the emulated link (W4 needs root, i.e. CAP_NET_ADMIN and \
                     CAP_SYS_ADMIN, plus `ip` and /dev/net/tun): {e}"
                )
            })?,
        )
    };
    let host = |side: Side| match link {
        Some(_) => side.address().to_string(),
        None => "127.0.0.1".to_owned(),
    };
    let hard = Duration::from_secs_f64(args.max_seconds + 60.0 + args.rtt_ms / 10.0);
    let deadline = Instant::now() + hard;
    let policy = args.policy.name().to_owned();
    let mut b_args = vec![
        "w4-side-b".into(),
        "--policy".into(),
        policy.clone(),
        "--host".into(),
        host(Side::B),
    ];
    if args.heartbeat {
        b_args.push("--heartbeat".into());
    }
    let mut b = SideProc::start(link.as_ref(), Side::B, &exe, &b_args)?;
    let uri = b.expect("READY ", deadline)?;
    let mut a_args: Vec<String> = vec![
        "w4-side-a".into(),
        "--policy".into(),
        policy.clone(),
        "--host".into(),
        host(Side::A),
        "--peer".into(),
        uri,
        "--bytes".into(),
        (args.size_mib << 20).to_string(),
        "--message-bytes".into(),
        (args.message_kib << 10).to_string(),
        "--window-bytes".into(),
        (args.window_mib << 20).to_string(),
        "--max-seconds".into(),
        args.max_seconds.to_string(),
        "--ping-ms".into(),
        args.ping_ms.to_string(),
    ];
    if args.heartbeat {
        a_args.push("--heartbeat".into());
    }
    let mut a = SideProc::start(link.as_ref(), Side::A, &exe, &a_args)?;
    a.expect("STARTED", deadline)?;
    let started = Instant::now();
    let mut changed = args.change_at.is_none();
    let done = loop {
        // Side a's WINDOW lines pass through; the path changes on time.
        let wait = match (changed, args.change_at) {
            (false, Some(at)) => {
                let at = started + Duration::from_secs_f64(at);
                at.min(deadline)
            }
            _ => deadline,
        };
        match a.next_line(wait)? {
            Some(line) => {
                if let Some(rest) = line.strip_prefix("DONE ") {
                    break rest.to_owned();
                }
                if line.starts_with("WINDOW ") || line.starts_with("LANES ") {
                    println!("{line}");
                }
            }
            None if !changed => {
                changed = true;
                let l = link.as_ref().ok_or("--change-at needs the emulated link")?;
                let rtt = args.change_rtt_ms.unwrap_or(args.rtt_ms);
                let loss = args.change_loss.unwrap_or(args.loss);
                l.set_config(link_config(rtt, loss, args)?)
                    .map_err(|e| format!("changing the link: {e}"))?;
                println!(
                    "CHANGED at={:.3} rtt_ms={rtt} loss={loss}",
                    started.elapsed().as_secs_f64()
                );
            }
            None => {
                return Err(format!(
                    "side a printed no DONE line within {:.0} s",
                    hard.as_secs_f64()
                ))
            }
        }
    };
    drop(a);
    drop(b);
    let stats = match link {
        Some(l) => Some(
            l.shutdown()
                .map_err(|e| format!("removing the link: {e}"))?,
        ),
        None => None,
    };
    let mut line = ResultLine::new("w4", "plexus")
        .field("transport", &policy)
        .field("r_ms", args.rtt_ms)
        .field("loss", args.loss)
        .field(
            "rate_mbit",
            if args.loopback { 0.0 } else { args.rate_mbit },
        )
        .field("size_mib", args.size_mib)
        .field("loopback", args.loopback)
        .field("heartbeat", args.heartbeat);
    for kv in done.split_whitespace() {
        if let Some((k, v)) = kv.split_once('=') {
            line = line.field(k, v);
        }
    }
    if let Some(stats) = stats {
        line = line
            .field("lost_packets", stats[0].lost + stats[1].lost)
            .field(
                "queue_drops",
                stats[0].queue_dropped + stats[1].queue_dropped,
            );
    }
    // The machine is shared: its load while the cell ran, for the reader.
    if let Some(load) = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
    {
        line = line.field("load1", load);
    }
    line.print();
    Ok(())
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("w4: {what}: {e}");
    std::process::exit(1);
}

/// Where b's sink acks to, and the payload a announced.
type AckTarget = (ActorRef<Ack>, u64);

/// Role of side b: listen on `tcp` and the policy's schemes, publish
/// `hello`, `sink` and `ctl`, print `READY <tcp uri>`, serve until killed.
pub async fn side_b(policy: Policy, host: String, heartbeat: bool) {
    let (cfg, schemes) = policy.config(&host, heartbeat);
    let system = nodes::system(&cfg);
    let node = Node::start(&system, cfg).unwrap_or_else(|e| fail("starting node b", e));
    let uri = node
        .listen(&format!("tcp://{host}:0"))
        .await
        .unwrap_or_else(|e| fail("listening on tcp", e));
    for scheme in schemes {
        node.listen(&format!("{scheme}://{host}:0"))
            .await
            .unwrap_or_else(|e| fail(&format!("listening on {scheme}"), e));
    }
    // The sink learns where to ack from `hello`, which a sends (and waits
    // for the answer to) before any bulk message.
    let ack_to: Arc<Mutex<Option<AckTarget>>> = Arc::default();
    let at = ack_to.clone();
    let hello = system.spawn_fn(move |Hello { total, ack_to }, _ctx| {
        ack_to.tell(Ack(0));
        *at.lock().expect("not poisoned: no code panics holding it") = Some((ack_to, total));
    });
    let mut got = 0u64;
    let mut next_ack = ACK_EVERY;
    let sink = system.spawn_fn(move |Bulk(bytes): Bulk, _ctx| {
        got += bytes.len() as u64;
        let guard = ack_to
            .lock()
            .expect("not poisoned: no code panics holding it");
        if let Some((to, total)) = guard.as_ref() {
            if got >= next_ack || got >= *total {
                to.tell(Ack(got));
                next_ack = (got / ACK_EVERY + 1) * ACK_EVERY;
            }
        }
    });
    let ctl = system.spawn_fn(|CtlPing(n, to), _ctx| to.tell(CtlPong(n)));
    for (name, r) in [
        ("hello", node.publish(&hello, "hello")),
        ("sink", node.publish(&sink, "sink")),
        ("ctl", node.publish(&ctl, "ctl")),
    ] {
        r.unwrap_or_else(|e| fail(&format!("publishing {name}"), e));
    }
    println!("READY {uri}");
    std::future::pending::<()>().await;
}

/// What side a's pong actor fills in.
#[derive(Default)]
struct Pings {
    /// Send time of each unanswered ping, by number.
    sent: std::collections::HashMap<u64, Instant>,
    idle: Vec<Duration>,
    busy: Option<Histogram<u64>>,
}

/// Options of side a.
#[derive(clap::Args)]
pub struct SideAArgs {
    #[arg(long, value_enum)]
    policy: Policy,
    #[arg(long)]
    host: String,
    #[arg(long)]
    peer: String,
    #[arg(long)]
    bytes: u64,
    #[arg(long = "message-bytes")]
    message_bytes: u64,
    #[arg(long = "window-bytes")]
    window_bytes: u64,
    #[arg(long = "max-seconds")]
    max_seconds: f64,
    #[arg(long = "ping-ms")]
    ping_ms: f64,
    #[arg(long)]
    heartbeat: bool,
}

/// Role of side a: resolve b's actors, measure idle control round trips,
/// then send the bulk payload under the ack window while pinging every
/// 100 ms; print `STARTED`, a `WINDOW` line per second and `DONE k=v ...`.
pub async fn side_a(args: SideAArgs) {
    let (cfg, _) = args.policy.config(&args.host, args.heartbeat);
    let system = nodes::system(&cfg);
    let node = Node::start(&system, cfg).unwrap_or_else(|e| fail("starting node a", e));
    let hello: ActorRef<Hello> = node
        .resolve(&format!("{}/hello", args.peer))
        .await
        .unwrap_or_else(|e| fail("resolving hello", e));
    let sink: ActorRef<Bulk> = node
        .resolve(&format!("{}/sink", args.peer))
        .await
        .unwrap_or_else(|e| fail("resolving sink", e));
    let ctl: ActorRef<CtlPing> = node
        .resolve(&format!("{}/ctl", args.peer))
        .await
        .unwrap_or_else(|e| fail("resolving ctl", e));

    // Acks: the highest count b reported, and a wake-up for the sender.
    let acked = Arc::new(AtomicU64::new(0));
    let (ack_tx, mut ack_rx) = tokio::sync::watch::channel(0u64);
    let acked2 = acked.clone();
    let last_ack_at: Arc<Mutex<Instant>> = Arc::new(Mutex::new(Instant::now()));
    let last2 = last_ack_at.clone();
    let acks: ActorRef<Ack> = system.spawn_fn(move |Ack(n), _ctx| {
        // Ack(0), the answer to Hello, wakes the sender too.
        if n >= acked2.fetch_max(n, Ordering::AcqRel) {
            *last2.lock().expect("not poisoned") = Instant::now();
            let _ = ack_tx.send(n);
        }
    });

    let pings: Arc<Mutex<Pings>> = Arc::default();
    let p2 = pings.clone();
    let pongs: ActorRef<CtlPong> = system.spawn_fn(move |CtlPong(n), _ctx| {
        let now = Instant::now();
        let mut p = p2.lock().expect("not poisoned");
        let Some(at) = p.sent.remove(&n) else { return };
        let rtt = now.duration_since(at);
        match p.busy.as_mut() {
            Some(h) => h.saturating_record(rtt.as_micros().max(1) as u64),
            None => p.idle.push(rtt),
        }
    });
    let ping = {
        let pings = pings.clone();
        let ctl = ctl.clone();
        let pongs = pongs.clone();
        move |n: u64| {
            pings
                .lock()
                .expect("not poisoned")
                .sent
                .insert(n, Instant::now());
            ctl.tell(CtlPing(n, pongs.clone()));
        }
    };

    // Hello first (and its Ack(0)), so b knows where to ack.
    hello.tell(Hello {
        total: args.bytes,
        ack_to: acks.clone(),
    });
    if tokio::time::timeout(Duration::from_secs(30), ack_rx.changed())
        .await
        .is_err()
    {
        fail("waiting for b's answer to hello", "none within 30 s");
    }
    // Idle control round trips.
    let mut n = 0u64;
    for _ in 0..IDLE_PINGS {
        ping(n);
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = {
        let mut p = pings.lock().expect("not poisoned");
        p.sent.clear();
        p.busy = Some(
            Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid bounds: 1 µs to an hour, 3 digits"),
        );
        let mut v = std::mem::take(&mut p.idle);
        v.sort();
        v.get(v.len() / 2).copied()
    };

    // Link downs: drops in the number of working links.
    let links = Arc::new(AtomicU64::new(0));
    let downs = Arc::new(AtomicU64::new(0));
    {
        let node = node.clone();
        let links = links.clone();
        let downs = downs.clone();
        tokio::spawn(async move {
            let mut last = node.link_count();
            links.store(last as u64, Ordering::Relaxed);
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let now = node.link_count();
                if now < last {
                    downs.fetch_add((last - now) as u64, Ordering::Relaxed);
                }
                last = now;
            }
        });
    }

    println!("STARTED");
    let start = Instant::now();
    let cap = start + Duration::from_secs_f64(args.max_seconds);
    // Pings every `ping_ms` (100 ms) while the transfer runs.
    let pinger = {
        let ping = ping.clone();
        let every = Duration::from_secs_f64(args.ping_ms / 1000.0);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                ping(n);
                n += 1;
            }
        })
    };
    // One line per second: payload acked in that second.
    let windows = {
        let acked = acked.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(
                tokio::time::Instant::from_std(start) + Duration::from_secs(1),
                Duration::from_secs(1),
            );
            let mut last = 0;
            for s in 1.. {
                tick.tick().await;
                let now = acked.load(Ordering::Acquire);
                println!("WINDOW {s} {}", now - last);
                last = now;
            }
        })
    };

    let chunk = Bytes::from(vec![0xA5u8; args.message_bytes as usize]);
    let mut sent = 0u64;
    let mut complete = true;
    while sent < args.bytes {
        if Instant::now() >= cap {
            complete = false;
            break;
        }
        if sent - acked.load(Ordering::Acquire) >= args.window_bytes {
            let _ = tokio::time::timeout_at(cap.into(), ack_rx.changed()).await;
            continue;
        }
        let len = (args.bytes - sent).min(args.message_bytes) as usize;
        sink.tell(Bulk(chunk.slice(..len)));
        sent += len as u64;
    }
    // The last acks (or the cap).
    while complete && acked.load(Ordering::Acquire) < args.bytes {
        if tokio::time::timeout_at(cap.into(), ack_rx.changed())
            .await
            .is_err()
        {
            complete = false;
        }
    }
    let end = if complete {
        *last_ack_at.lock().expect("not poisoned")
    } else {
        Instant::now()
    };
    pinger.abort();
    windows.abort();
    let seconds = end.duration_since(start).as_secs_f64();
    let got = acked.load(Ordering::Acquire);
    let lanes = lane_summary(&node);
    if !lanes.is_empty() {
        println!("LANES {lanes}");
    }
    let (h, unanswered) = {
        let mut p = pings.lock().expect("not poisoned");
        let h = p.busy.take().expect("set before the transfer");
        (h, p.sent.len())
    };
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "DONE mbytes_per_s={:.2} ctl_p50_ms={:.2} ctl_p99_ms={:.2} ctl_max_ms={:.2} ctl_n={} \
         ctl_unanswered={} idle_ctl_ms={:.3} seconds={:.2} acked_mib={:.1} complete={} \
         link_downs={} links={}",
        got as f64 / seconds / 1e6,
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99)),
        ms(h.max()),
        h.len(),
        unanswered,
        idle.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
        seconds,
        got as f64 / (1u64 << 20) as f64,
        complete,
        downs.load(Ordering::Relaxed),
        links.load(Ordering::Relaxed),
    );
    node.shutdown().await;
}

/// The bulk lane's carriers: scheme, share and frames (adaptive lanes).
fn lane_summary(node: &Node) -> String {
    node.lane_stats()
        .into_iter()
        .filter(|s| s.lane == Lane::Bulk)
        .flat_map(|s| s.carriers)
        .map(|c| {
            format!(
                "{}:share={:.2}:frames={}:goodput_mb={:.1}",
                c.scheme,
                c.share,
                c.frames.map_or(-1, |f| f as i64),
                c.goodput_bytes_per_s.unwrap_or(0.0) / 1e6
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}
