//! `plexus-bench w6-attacks`: a well-behaved client's latency against the
//! Plexus web server (per-core, its own process), first alone, then while
//! hostile clients run: slowloris connections (a head that never ends),
//! oversized header blocks, malformed request lines, smuggling attempts
//! (`Content-Length` with `Transfer-Encoding`), invalid chunk sizes and
//! oversized bodies, each over a new connection in a loop. Reports both
//! p50/p99 and their ratio (target: p99 within 2x).

use std::path::Path;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::servers::Server;

/// `w6-attacks`' options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds measured in each phase.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Slowloris connections held open during the attack phase.
    #[arg(long, default_value_t = 200)]
    slowloris: usize,
    /// Attackers looping over the other hostile requests.
    #[arg(long, default_value_t = 4)]
    attackers: usize,
    /// Hostile requests per second in all (paced: on 2 cores an unpaced
    /// flood measures the CPU the machine lacks, not the server).
    #[arg(long, default_value_t = 1000.0)]
    attack_rate: f64,
}

/// The hostile requests (each on a new connection) and the status each
/// must get.
const HOSTILE: [(&str, &[u8], u16); 5] = [
    ("malformed", b"GET\x01/ HTTP/1.1\r\n\r\n", 400),
    (
        "smuggling",
        b"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "bad-chunk",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        400,
    ),
    (
        "huge-body",
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
        413,
    ),
    ("huge-head", b"", 431),
];

async fn status_of(addr: std::net::SocketAddr, request: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(request).await.ok()?;
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).await.ok()?;
    std::str::from_utf8(&buf[9..12]).ok()?.parse().ok()
}

/// [`well_behaved`] on a thread and runtime of its own, away from the
/// attackers' tasks.
fn well_behaved_alone(addr: std::net::SocketAddr, duration: Duration) -> Histogram<u64> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(well_behaved(addr, duration))
    })
    .join()
    .expect("the well-behaved client")
}

/// Sequential keep-alive requests for `duration`: their latencies.
async fn well_behaved(addr: std::net::SocketAddr, duration: Duration) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let _ = s.set_nodelay(true);
    let request = b"GET /page.html HTTP/1.1\r\nHost: w6\r\n\r\n";
    let mut buf = vec![0u8; 4096];
    let end = Instant::now() + duration;
    while Instant::now() < end {
        let start = Instant::now();
        s.write_all(request).await.expect("write");
        // The small page's whole response arrives in one read or a few.
        let mut got = Vec::new();
        loop {
            let n = s.read(&mut buf).await.expect("read");
            assert!(n > 0, "the server closed a well-behaved connection");
            got.extend_from_slice(&buf[..n]);
            if let Some(head_end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..head_end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if got.len() >= head_end + 4 + len {
                    break;
                }
            }
        }
        let _ = hist.record(start.elapsed().as_micros() as u64);
    }
    hist
}

/// Runs the two phases; see the [module docs](self).
pub fn run(args: &Args) {
    let dir = std::env::temp_dir().join(format!("plexus-w6-attacks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the run directory");
    std::fs::write(dir.join("page.html"), "<!doctype html><p>hello</p>\n").expect("write the page");
    let server = Server::own("plexus", "w6-serve", Path::new(&dir), 2);
    let addr = server.addr;
    let duration = Duration::from_secs_f64(args.duration);
    let runtime = crate::nodes::runtime();
    runtime.block_on(async {
        let calm = well_behaved_alone(addr, duration);
        // Slowloris: heads that never end, held for the whole phase.
        let mut held = Vec::new();
        for _ in 0..args.slowloris {
            if let Ok(mut s) = TcpStream::connect(addr).await {
                let _ = s.write_all(b"GET / HTTP/1.1\r\nX-Slow: a").await;
                held.push(s);
            }
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut attackers = Vec::new();
        for a in 0..args.attackers {
            let stop = stop.clone();
            let period = Duration::from_secs_f64(args.attackers as f64 / args.attack_rate);
            attackers.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                let mut huge_head = b"GET / HTTP/1.1\r\nX: ".to_vec();
                huge_head.extend(std::iter::repeat_n(b'a', 64 << 10));
                huge_head.extend_from_slice(b"\r\n\r\n");
                let (mut sent, mut wrong) = (0u64, 0u64);
                let mut i = a;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    tick.tick().await;
                    let (_, request, want) = HOSTILE[i % HOSTILE.len()];
                    let request = if request.is_empty() { &huge_head[..] } else { request };
                    if status_of(addr, request).await != Some(want) {
                        wrong += 1;
                    }
                    sent += 1;
                    i += 1;
                }
                (sent, wrong)
            }));
        }
        let attacked = tokio::task::spawn_blocking(move || well_behaved_alone(addr, duration))
            .await
            .expect("the well-behaved client");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (mut sent, mut wrong) = (0, 0);
        for a in attackers {
            let (s, w) = a.await.expect("attacker");
            sent += s;
            wrong += w;
        }
        drop(held);
        let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "RESULT workload=w6-attacks calm_requests={} calm_p50_ms={:.3} calm_p99_ms={:.3} attacked_requests={} attacked_p50_ms={:.3} attacked_p99_ms={:.3} hostile_requests={sent} hostile_wrong_status={wrong} slowloris={} attack_rate={}",
            calm.len(),
            ms(&calm, 0.5),
            ms(&calm, 0.99),
            attacked.len(),
            ms(&attacked, 0.5),
            ms(&attacked, 0.99),
            args.slowloris,
            args.attack_rate,
        );
        println!(
            "RATIO w6-attacks well-behaved p99 attacked/calm: {:.2} (target <= 2)",
            ms(&attacked, 0.99) / ms(&calm, 0.99)
        );
    });
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
