//! `plexus loadgen`: an HTTP/1.1 load generator that reports the delivered
//! rate (requests/s, Gbit/s) and latency percentiles from an HDR
//! histogram, in closed loop or open loop at a fixed rate without
//! coordinated omission ([`schedule`]), over keep-alive connections or a
//! new connection per request. A progress line goes to stderr each second;
//! the summary is a readable block and one `RESULT key=value ...` line for
//! scripts.
//!
//! A connection that fails waits before it tries again (bounded exponential
//! [`backoff`]): refused and failed connects are counted and reported, and
//! a run in which nothing succeeded says so
//! ([`Report::ensure_responses`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::decoder::Limits;
use crate::response_decoder::ResponseDecoder;

pub mod backoff;
pub mod schedule;

use backoff::Backoff;
use schedule::Schedule;

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadgenConfig {
    /// The server.
    pub addr: SocketAddr,
    /// The `Host` field.
    pub host: String,
    /// Paths to request, chosen at random (seeded) for each request.
    pub paths: Vec<String>,
    /// Concurrent connections.
    pub connections: usize,
    /// How long to measure.
    pub duration: Duration,
    /// Requests per second in all, open loop; `None`: closed loop.
    pub rate: Option<f64>,
    /// Keep connections open (`false`: a new connection per request).
    pub keep_alive: bool,
    /// Seed of the path choice.
    pub seed: u64,
    /// Print a progress line this often (to stderr).
    pub progress: Option<Duration>,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Closed or open loop (with its rate).
    pub rate: Option<f64>,
    /// Connections.
    pub connections: usize,
    /// Responses received.
    pub requests: u64,
    /// Responses whose status was not 2xx or 3xx.
    pub non_success: u64,
    /// Connection or protocol errors, failed connects included.
    pub errors: u64,
    /// Connects the server refused (nothing listens on the port).
    pub connects_refused: u64,
    /// Connects that failed otherwise (unreachable, timed out, out of
    /// ports).
    pub connects_failed: u64,
    /// Bytes received (heads and bodies).
    pub bytes: u64,
    /// Time measured.
    pub elapsed: Duration,
    /// Latencies in microseconds (open loop: from when each request was
    /// due).
    pub latency: Histogram<u64>,
    /// CPU time of this process over the run (user + system), if known.
    pub cpu: Option<Duration>,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadgenError {
    /// No paths, no connections, or a rate that is not positive.
    #[error("loadgen: {0}")]
    Config(&'static str),
    /// The histogram could not be made.
    #[error("loadgen: histogram: {0}")]
    Histogram(String),
    /// The run got no response at all.
    #[error(
        "loadgen: no request succeeded ({refused} connects refused, {failed} connects failed, {errors} errors in all)"
    )]
    NoResponses {
        /// Connects refused.
        refused: u64,
        /// Connects failed otherwise.
        failed: u64,
        /// Errors of every kind.
        errors: u64,
    },
}

impl Report {
    /// Responses per second.
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Gigabits per second received.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / 1e9 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The latency at quantile `q` (0..=1), in milliseconds.
    pub fn latency_ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1e3
    }

    /// `Ok` if the run got at least one response (whatever its status).
    ///
    /// # Errors
    ///
    /// [`LoadgenError::NoResponses`] with the failures counted, for a run
    /// in which nothing succeeded (`plexus loadgen` then exits non-zero).
    pub fn ensure_responses(&self) -> Result<(), LoadgenError> {
        if self.requests > 0 {
            return Ok(());
        }
        Err(LoadgenError::NoResponses {
            refused: self.connects_refused,
            failed: self.connects_failed,
            errors: self.errors,
        })
    }

    /// CPU microseconds per response, if the CPU time is known.
    pub fn cpu_us_per_request(&self) -> Option<f64> {
        self.cpu
            .map(|c| c.as_secs_f64() * 1e6 / (self.requests.max(1)) as f64)
    }

    /// `open` or `closed`.
    fn mode(&self) -> &'static str {
        if self.rate.is_some() {
            "open"
        } else {
            "closed"
        }
    }

    /// p50, p90, p99, p99.9 and the maximum, in milliseconds.
    fn latencies_ms(&self) -> [f64; 5] {
        [
            self.latency_ms(0.5),
            self.latency_ms(0.9),
            self.latency_ms(0.99),
            self.latency_ms(0.999),
            self.latency.max() as f64 / 1e3,
        ]
    }

    /// The `RESULT` line.
    pub fn result_line(&self) -> String {
        let [p50, p90, p99, p999, max] = self.latencies_ms();
        format!(
            "RESULT workload=loadgen mode={} rate={} connections={} requests={} rps={:.0} gbps={:.3} p50_ms={p50:.3} p90_ms={p90:.3} p99_ms={p99:.3} p999_ms={p999:.3} max_ms={max:.3} non_2xx={} errors={} refused={} connect_failed={} cpu_us_per_req={}",
            self.mode(),
            self.rate.map_or("-".to_owned(), |r| format!("{r:.0}")),
            self.connections,
            self.requests,
            self.rps(),
            self.gbps(),
            self.non_success,
            self.errors,
            self.connects_refused,
            self.connects_failed,
            self.cpu_us_per_request()
                .map_or("-".to_owned(), |c| format!("{c:.2}")),
        )
    }

    /// The summary a person reads.
    pub fn summary(&self) -> String {
        let [p50, p90, p99, p999, max] = self.latencies_ms();
        format!(
            "{} loop{}, {} connections, {:.1} s\n  {} responses ({} not 2xx/3xx, {} errors, of which {} connects refused and {} failed): {:.0} requests/s, {:.3} Gbit/s\n  latency p50 {p50:.3} ms, p90 {p90:.3} ms, p99 {p99:.3} ms, p99.9 {p999:.3} ms, max {max:.3} ms{}\n  loadgen CPU {}",
            self.mode(),
            self.rate
                .map_or(String::new(), |r| format!(" at {r:.0} requests/s")),
            self.connections,
            self.elapsed.as_secs_f64(),
            self.requests,
            self.non_success,
            self.errors,
            self.connects_refused,
            self.connects_failed,
            self.rps(),
            self.gbps(),
            if self.rate.is_some() {
                " (from when each request was due)"
            } else {
                ""
            },
            match (self.cpu, self.cpu_us_per_request()) {
                (Some(c), Some(per)) => format!("{:.2} s, {per:.2} us per request", c.as_secs_f64()),
                _ => "unknown".to_owned(),
            }
        )
    }
}

/// Counters shared by the connections.
#[derive(Default)]
struct Totals {
    requests: AtomicU64,
    non_success: AtomicU64,
    errors: AtomicU64,
    connects_refused: AtomicU64,
    connects_failed: AtomicU64,
    bytes: AtomicU64,
}

/// Runs the load and reports.
///
/// # Errors
///
/// [`LoadgenError`] for a configuration that cannot run.
pub async fn run(config: LoadgenConfig) -> Result<Report, LoadgenError> {
    if config.paths.is_empty() {
        return Err(LoadgenError::Config("no paths to request"));
    }
    if config.connections == 0 {
        return Err(LoadgenError::Config("no connections"));
    }
    if config.rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        return Err(LoadgenError::Config("the rate must be positive"));
    }
    let histogram = || {
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
            .map_err(|e| LoadgenError::Histogram(e.to_string()))
    };
    let totals = Arc::new(Totals::default());
    let cpu_before = cpu_time();
    let start = Instant::now();
    let end = start + config.duration;
    let config = Arc::new(config);
    let mut tasks = Vec::new();
    for c in 0..config.connections {
        let mut hist = histogram()?;
        let config = config.clone();
        let totals = totals.clone();
        tasks.push(tokio::spawn(async move {
            connection(c, &config, start, end, &totals, &mut hist).await;
            hist
        }));
    }
    let progress = config.progress.map(|every| {
        let totals = totals.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at((start + every).into(), every);
            let mut last = 0;
            loop {
                tick.tick().await;
                let now = totals.requests.load(Ordering::Relaxed);
                eprintln!(
                    "  {:>6.1} s: {:.0} requests/s",
                    start.elapsed().as_secs_f64(),
                    (now - last) as f64 / every.as_secs_f64()
                );
                last = now;
            }
        })
    });
    let mut latency = histogram()?;
    for t in tasks {
        if let Ok(h) = t.await {
            let _ = latency.add(h);
        }
    }
    let elapsed = start
        .elapsed()
        .min(config.duration.max(Duration::from_millis(1)));
    if let Some(p) = progress {
        p.abort();
    }
    let cpu = match (cpu_before, cpu_time()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    Ok(Report {
        rate: config.rate,
        connections: config.connections,
        requests: totals.requests.load(Ordering::Relaxed),
        non_success: totals.non_success.load(Ordering::Relaxed),
        errors: totals.errors.load(Ordering::Relaxed),
        connects_refused: totals.connects_refused.load(Ordering::Relaxed),
        connects_failed: totals.connects_failed.load(Ordering::Relaxed),
        bytes: totals.bytes.load(Ordering::Relaxed),
        elapsed,
        latency,
        cpu,
    })
}

/// One connection's loop until `end`.
async fn connection(
    index: usize,
    config: &LoadgenConfig,
    start: Instant,
    end: Instant,
    totals: &Totals,
    hist: &mut Histogram<u64>,
) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(config.seed ^ (index as u64) << 32);
    let requests: Vec<Vec<u8>> = config
        .paths
        .iter()
        .map(|p| {
            format!(
                "GET {p} HTTP/1.1\r\nHost: {}\r\n{}\r\n",
                config.host,
                if config.keep_alive {
                    ""
                } else {
                    "Connection: close\r\n"
                }
            )
            .into_bytes()
        })
        .collect();
    let mut schedule = match config.rate {
        None => Schedule::closed(start),
        Some(rate) => {
            let per_connection = rate / config.connections as f64;
            let interval = Duration::from_secs_f64(1.0 / per_connection);
            // Connections start spread over one interval.
            let offset = interval.mul_f64(index as f64 / config.connections as f64);
            Schedule::open(start + offset, interval)
        }
    };
    let mut stream: Option<TcpStream> = None;
    let mut decoder = ResponseDecoder::new(Limits {
        max_body: 64 << 20,
        ..Limits::default()
    });
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut backoff = Backoff::new();
    // After a failure: not before this.
    let mut retry_at: Option<Instant> = None;
    loop {
        if let Some(at) = retry_at.take() {
            // The run lasts its duration, failing or not.
            tokio::time::sleep_until(at.min(end).into()).await;
            if at >= end {
                return;
            }
        }
        let due = schedule.next(Instant::now());
        if due >= end {
            return;
        }
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        let mut failed = |kind: Option<&AtomicU64>| {
            totals.errors.fetch_add(1, Ordering::Relaxed);
            if let Some(counter) = kind {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            retry_at = Some(Instant::now() + backoff.on_failure());
        };
        let request = &requests[rng.gen_range(0..requests.len())];
        let s = match stream.take() {
            Some(s) => s,
            None => match TcpStream::connect(config.addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    decoder = ResponseDecoder::new(Limits {
                        max_body: 64 << 20,
                        ..Limits::default()
                    });
                    buf.clear();
                    s
                }
                Err(e) => {
                    failed(Some(if e.kind() == std::io::ErrorKind::ConnectionRefused {
                        &totals.connects_refused
                    } else {
                        &totals.connects_failed
                    }));
                    continue;
                }
            },
        };
        let mut s = s;
        if s.write_all(request).await.is_err() {
            failed(None);
            continue;
        }
        let answered = loop {
            match decoder.decode(&mut buf, false) {
                Ok(Some(summary)) => break Some(summary),
                Ok(None) => {}
                Err(_) => break None,
            }
            match s.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break decoder.closed(),
                Ok(_) => {}
            }
        };
        let done = Instant::now();
        match answered {
            Some(summary) => {
                backoff.on_success();
                let _ = hist.record((done - due).as_micros().max(1) as u64);
                totals.requests.fetch_add(1, Ordering::Relaxed);
                totals.bytes.fetch_add(
                    (summary.head_len + summary.body_len) as u64,
                    Ordering::Relaxed,
                );
                if !(200..400).contains(&summary.status) {
                    totals.non_success.fetch_add(1, Ordering::Relaxed);
                }
                if summary.keep_alive && config.keep_alive {
                    stream = Some(s);
                }
            }
            None => failed(None),
        }
    }
}

/// This process's CPU time (user + system) from `/proc/self/stat`, in
/// USER_HZ ticks of 10 ms (Linux's value on every architecture it runs
/// the project on).
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}
