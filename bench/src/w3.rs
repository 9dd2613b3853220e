//! W3 lossy: two node processes bounce one message back and forth over an
//! emulated lossy, slow link until each side has sent and received it
//! `--count` times (2,000 by default: 4,000 messages in all, strictly one at
//! a time). The result is the total runtime.
//!
//! ```text
//!  netns w3<pid>-a (198.51.100.1)          netns w3<pid>-b (198.51.100.2)
//!  plexus-bench w3-side-a                  plexus-bench w3-side-b
//!    resolves b's `bounce`, sends Ping(n) ──▶ answers Pong(n)
//!    sends Ping(n+1) on Pong(n)         ◀── ...
//!             └──────── plexus-linkem forwarder (this process) ───┘
//! ```
//!
//! This process sets up the link with `plexus_linkem::Link` (a prefix made
//! from its pid, so parallel runs do not collide), starts one side process
//! in each namespace by re-executing itself with a hidden role, reads their
//! `READY` / `DONE` lines from their stdout, and removes the link when it
//! returns (also on error: `Link` is removed on drop). It needs root and
//! `/dev/net/tun`; without them it says so and exits with status 1.

use std::time::{Duration, Instant};

use plexus::prelude::*;
use plexus_linkem::{DirectionConfig, Link, LinkConfig, Side};

use crate::nodes;
use crate::report::ResultLine;
use crate::side_proc::SideProc;
use crate::w1::{Ping, Pong};

#[derive(clap::Args)]
pub struct Args {
    /// Probability that the link drops a packet, in percent, both directions.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// One-way delay of the link in milliseconds, both directions.
    #[arg(long = "delay-ms", default_value_t = 0.0)]
    delay_ms: f64,
    /// `tcp`, `udp` (the default stack `udp / heartbeat / slicing /
    /// delivery / ordering`) or a whole stack spec (`udp / slicing /
    /// delivery`).
    #[arg(long, default_value = "udp")]
    transport: String,
    /// Messages each side sends (and receives).
    #[arg(long, default_value_t = 2000)]
    count: u64,
    /// Seed of the link's loss RNG.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, default_value_t = 900.0)]
    timeout: f64,
}

/// Runs W3 and prints its `RESULT` line; exits 1 on failure.
pub fn run(args: &Args) {
    if let Err(why) = run_inner(args) {
        eprintln!("w3: {why}");
        std::process::exit(1);
    }
}

fn run_inner(args: &Args) -> Result<(), String> {
    let mut dir = DirectionConfig::default();
    dir.set_loss_percent(args.loss)
        .and_then(|d| d.set_delay_ms(args.delay_ms))
        .map_err(|e| format!("bad link settings: {e}"))?;
    let config = LinkConfig {
        a_to_b: dir.clone(),
        b_to_a: dir,
        seed: args.seed,
    };
    let prefix = format!("w3p{}", std::process::id());
    let link = Link::up(&prefix, config).map_err(|e| {
        format!(
            "cannot set up the emulated link (W3 needs root, i.e. CAP_NET_ADMIN and \
             CAP_SYS_ADMIN, plus `ip` and /dev/net/tun): {e}"
        )
    })?;
    let exe = std::env::current_exe().map_err(|e| format!("path of this binary: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout);

    let mut b = SideProc::start(
        Some(&link),
        Side::B,
        &exe,
        &[
            "w3-side-b".into(),
            "--transport".into(),
            args.transport.clone(),
        ],
    )?;
    let uri = b.expect("READY ", deadline)?;
    let mut a = SideProc::start(
        Some(&link),
        Side::A,
        &exe,
        &[
            "w3-side-a".into(),
            "--transport".into(),
            args.transport.clone(),
            "--peer".into(),
            uri,
            "--count".into(),
            args.count.to_string(),
        ],
    )?;
    let seconds: f64 = a
        .expect("DONE ", deadline)?
        .trim()
        .parse()
        .map_err(|e| format!("side a printed a bad DONE line: {e}"))?;
    drop(a);
    drop(b);
    let stats = link
        .shutdown()
        .map_err(|e| format!("removing the link: {e}"))?;
    ResultLine::new("w3", "plexus")
        .field("transport", args.transport.replace(' ', ""))
        .field("p", args.loss)
        .field("d_ms", args.delay_ms)
        .field("seconds", format!("{seconds:.3}"))
        .field("count", args.count)
        .field("lost_packets", stats[0].lost + stats[1].lost)
        .field("packets", stats[0].received + stats[1].received)
        .print();
    Ok(())
}

/// The listen URI of `transport` on this side's address.
fn listen_uri(transport: &str, host: &str) -> (NodeConfig, String) {
    let (cfg, listen) = nodes::transport(transport);
    (cfg, listen.replace("127.0.0.1", host))
}

/// Role of side b: publish `bounce`, which answers every `Ping(n)` with
/// `Pong(n)`, print `READY <uri>/bounce`, serve until killed.
pub async fn side_b(transport: String) {
    let system = ActorSystem::new();
    let (cfg, listen) = listen_uri(&transport, &Side::B.address().to_string());
    let node = Node::start(&system, cfg).expect("start node b");
    let uri = node.listen(&listen).await.expect("listen on side b");
    let bounce = system.spawn_fn(|Ping(n, to), _ctx| to.tell(Pong(n)));
    node.publish(&bounce, "bounce").expect("publish bounce");
    println!("READY {uri}/bounce");
    std::future::pending::<()>().await;
}

/// Role of side a: resolve `peer`, then send `Ping(n)` and wait for
/// `Pong(n)`, `count` times; print `DONE <seconds>` (first send to last
/// answer).
pub async fn side_a(transport: String, peer: String, count: u64) {
    let system = ActorSystem::new();
    let (cfg, _) = listen_uri(&transport, &Side::A.address().to_string());
    let node = Node::start(&system, cfg).expect("start node a");
    let bounce: ActorRef<Ping> = node.resolve(&peer).await.expect("resolve bounce");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let me: ActorRef<Pong> = system.spawn_fn(move |Pong(n), _ctx| {
        // The receiver lives until all answers are in.
        let _ = tx.send(n);
    });
    let start = Instant::now();
    for n in 0..count {
        bounce.tell(Ping(n, me.clone()));
        let got = rx.recv().await.expect("answers until the last one");
        assert_eq!(got, n, "answers come back one at a time, in order");
    }
    let seconds = start.elapsed().as_secs_f64();
    println!("DONE {seconds:.6}");
    node.shutdown().await;
    system.shutdown().await;
}
