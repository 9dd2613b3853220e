//! The UDP probe behind `plexus-linkem selftest`: a sender in side a, a
//! receiver in side b, each a hidden subcommand of the same binary started
//! with `ip netns exec`, and [`evaluate`], which compares what the receiver
//! saw with the settings.
//!
//! Each probe packet carries its sequence number and its send time
//! (`SystemTime`, the machine's one real-time clock, which both processes
//! read), so the receiver measures one-way delay directly.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::DirectionConfig;
use crate::netns::{Link, Side};

/// IPv4 + UDP header bytes added to each probe payload on the link.
pub const IP_UDP_HEADERS: usize = 28;
/// Smallest payload: sequence number and send time.
pub const MIN_PAYLOAD: usize = 12;
/// UDP port the receiver listens on in side b.
pub const PORT: u16 = 47_000;

/// Why a probe run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// A probe process could not be started or read.
    #[error("probe {what}: {source}")]
    Io {
        /// Which step.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// A probe process ended badly.
    #[error("the probe {role} failed ({status}): {stderr}")]
    Failed {
        /// "sender" or "receiver".
        role: &'static str,
        /// Its exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
    /// The receiver printed something unexpected.
    #[error("the probe receiver printed {0:?}, not a report")]
    Malformed(String),
}

/// What to send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbePlan {
    /// Packets to send.
    pub count: u32,
    /// Time between sends (the sender keeps the average; it catches up in
    /// bursts if it falls behind).
    pub interval: Duration,
    /// UDP payload bytes (at least [`MIN_PAYLOAD`]).
    pub payload: usize,
    /// How long the receiver waits after the last packet seen.
    pub idle: Duration,
}

/// What the receiver saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProbeReport {
    /// Packets sent.
    pub sent: u32,
    /// Packets received, copies included.
    pub received: u32,
    /// Distinct sequence numbers received.
    pub distinct: u32,
    /// Copies of an already received sequence number.
    pub duplicates: u32,
    /// Packets that arrived after one with a higher sequence number.
    pub reordered: u32,
    /// Mean one-way delay (µs), over distinct packets.
    pub delay_mean_us: f64,
    /// Smallest one-way delay (µs).
    pub delay_min_us: f64,
    /// Largest one-way delay (µs).
    pub delay_max_us: f64,
    /// IP bytes received after the first packet.
    pub ip_bytes_after_first: u64,
    /// Time from the first to the last packet received (µs).
    pub span_us: f64,
}

impl ProbeReport {
    /// Fraction of sent packets never received.
    pub fn loss(&self) -> f64 {
        1.0 - f64::from(self.distinct) / f64::from(self.sent.max(1))
    }

    /// Received IP throughput in bit/s, if at least two packets arrived.
    pub fn throughput_bps(&self) -> Option<f64> {
        (self.span_us > 0.0).then(|| self.ip_bytes_after_first as f64 * 8.0 / (self.span_us / 1e6))
    }
}

/// Runs one probe across `link` from side a to side b, using the probe
/// subcommands of the binary `exe` (`plexus-linkem`).
///
/// # Errors
/// [`ProbeError`] if a probe process cannot be run or fails.
pub fn run(link: &Link, exe: &Path, plan: &ProbePlan) -> Result<ProbeReport, ProbeError> {
    let exe = exe.to_string_lossy();
    let interval_time = plan.interval * plan.count;
    let deadline = interval_time + plan.idle + Duration::from_secs(2);
    let recv_args: Vec<String> = vec![
        "probe-recv".into(),
        format!("--bind={}:{PORT}", Side::B.address()),
        format!("--expect={}", plan.count),
        format!("--idle-ms={}", plan.idle.as_millis()),
        format!("--deadline-ms={}", deadline.as_millis()),
    ];
    let mut receiver = link
        .command(Side::B, &exe, &recv_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ProbeError::Io {
            what: "starting the receiver",
            source,
        })?;
    // Piped above.
    let mut lines = BufReader::new(receiver.stdout.take().expect("piped stdout")).lines();
    let ready = lines.next().transpose().map_err(|source| ProbeError::Io {
        what: "reading the receiver",
        source,
    })?;
    if ready.as_deref() != Some("ready") {
        let out = receiver
            .wait_with_output()
            .map_err(|source| ProbeError::Io {
                what: "waiting for the receiver",
                source,
            })?;
        return Err(ProbeError::Failed {
            role: "receiver",
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    let send_args: Vec<String> = vec![
        "probe-send".into(),
        format!("--to={}:{PORT}", Side::B.address()),
        format!("--count={}", plan.count),
        format!("--interval-us={}", plan.interval.as_micros()),
        format!("--payload={}", plan.payload),
    ];
    let sender = link
        .command(Side::A, &exe, &send_args)
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| ProbeError::Io {
            what: "running the sender",
            source,
        })?;
    if !sender.status.success() {
        let _ = receiver.kill();
        let _ = receiver.wait();
        return Err(ProbeError::Failed {
            role: "sender",
            status: sender.status.to_string(),
            stderr: String::from_utf8_lossy(&sender.stderr).trim().to_owned(),
        });
    }
    let report = lines.next().transpose().map_err(|source| ProbeError::Io {
        what: "reading the receiver",
        source,
    })?;
    let out = receiver
        .wait_with_output()
        .map_err(|source| ProbeError::Io {
            what: "waiting for the receiver",
            source,
        })?;
    let report = report.unwrap_or_default();
    let mut r = parse_report(&report).ok_or_else(|| {
        if out.status.success() {
            ProbeError::Malformed(report.clone())
        } else {
            ProbeError::Failed {
                role: "receiver",
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            }
        }
    })?;
    r.sent = plan.count;
    Ok(r)
}

fn parse_report(line: &str) -> Option<ProbeReport> {
    let mut r = ProbeReport::default();
    let mut fields = line.strip_prefix("probe ")?.split_whitespace();
    let mut next = |key: &str| -> Option<f64> {
        let (k, v) = fields.next()?.split_once('=')?;
        (k == key).then_some(())?;
        v.parse().ok()
    };
    r.received = next("received")? as u32;
    r.distinct = next("distinct")? as u32;
    r.duplicates = next("duplicates")? as u32;
    r.reordered = next("reordered")? as u32;
    r.delay_mean_us = next("delay_mean_us")?;
    r.delay_min_us = next("delay_min_us")?;
    r.delay_max_us = next("delay_max_us")?;
    r.ip_bytes_after_first = next("ip_bytes_after_first")? as u64;
    r.span_us = next("span_us")?;
    Some(r)
}

fn unix_ns() -> u64 {
    // The clock is after 1970 on any machine this runs on.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The sender (`plexus-linkem probe-send`): `count` packets of `payload`
/// bytes to `to`, one every `interval` on average.
///
/// # Errors
/// If the socket cannot be made.
pub fn send(to: SocketAddr, count: u32, interval: Duration, payload: usize) -> std::io::Result<()> {
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    let mut buf = vec![0u8; payload.max(MIN_PAYLOAD)];
    let start = Instant::now();
    for seq in 0..count {
        let due = start + interval * seq;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        buf[..4].copy_from_slice(&seq.to_be_bytes());
        buf[4..12].copy_from_slice(&unix_ns().to_be_bytes());
        // A send can fail while the kernel queue is full; that is loss.
        let _ = socket.send_to(&buf, to);
    }
    Ok(())
}

/// The receiver (`plexus-linkem probe-recv`): prints `ready` once bound,
/// then one `probe ...` report line when no packet came for `idle` (after
/// the first one) or at `deadline`.
///
/// # Errors
/// If the socket cannot be made.
pub fn receive(
    bind: SocketAddr,
    expect: u32,
    idle: Duration,
    deadline: Duration,
) -> std::io::Result<String> {
    let socket = UdpSocket::bind(bind)?;
    println!("ready");
    let start = Instant::now();
    let mut seen = vec![false; expect as usize];
    let mut r = ProbeReport::default();
    let (mut max_seq, mut delay_sum) = (None::<u32>, 0.0);
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    r.delay_min_us = f64::INFINITY;
    let mut buf = vec![0u8; 65_536];
    loop {
        let now = Instant::now();
        let until_deadline = deadline.saturating_sub(now - start);
        let wait = last.map_or(until_deadline, |l| {
            idle.saturating_sub(now - l).min(until_deadline)
        });
        if wait.is_zero() {
            break;
        }
        socket.set_read_timeout(Some(wait))?;
        let n = match socket.recv(&mut buf) {
            Ok(n) if n >= MIN_PAYLOAD => n,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        let at = Instant::now();
        // Both slices are in range: n >= MIN_PAYLOAD (12) was checked above.
        let delay_us = unix_ns()
            .saturating_sub(u64::from_be_bytes(buf[4..12].try_into().expect("8 bytes")))
            as f64
            / 1e3;
        let seq = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes"));
        r.received += 1;
        if first.is_some() {
            r.ip_bytes_after_first += (n + IP_UDP_HEADERS) as u64;
        }
        first.get_or_insert(at);
        last = Some(at);
        match seen.get_mut(seq as usize) {
            Some(true) => r.duplicates += 1,
            Some(s) => {
                *s = true;
                r.distinct += 1;
                delay_sum += delay_us;
                r.delay_min_us = r.delay_min_us.min(delay_us);
                r.delay_max_us = r.delay_max_us.max(delay_us);
                if max_seq.is_some_and(|m| seq < m) {
                    r.reordered += 1;
                }
                max_seq = max_seq.max(Some(seq));
            }
            None => {}
        }
    }
    if r.distinct > 0 {
        r.delay_mean_us = delay_sum / f64::from(r.distinct);
    } else {
        r.delay_min_us = 0.0;
    }
    r.span_us = match (first, last) {
        (Some(f), Some(l)) => (l - f).as_secs_f64() * 1e6,
        _ => 0.0,
    };
    Ok(format!(
        "probe received={} distinct={} duplicates={} reordered={} delay_mean_us={:.1} delay_min_us={:.1} delay_max_us={:.1} ip_bytes_after_first={} span_us={:.1}",
        r.received, r.distinct, r.duplicates, r.reordered, r.delay_mean_us, r.delay_min_us, r.delay_max_us, r.ip_bytes_after_first, r.span_us
    ))
}

/// One comparison of a measured value with its setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// What was measured, e.g. "loss".
    pub name: &'static str,
    /// Its unit, e.g. "%".
    pub unit: &'static str,
    /// The setting.
    pub set: f64,
    /// The measurement.
    pub measured: f64,
    /// Largest accepted |measured − set|.
    pub tolerance: f64,
}

impl Check {
    /// Whether the measurement is within the tolerance.
    pub fn ok(&self) -> bool {
        (self.measured - self.set).abs() <= self.tolerance
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<10} set {:>9.3} {:<7} measured {:>9.3} {:<7} (tolerance ±{:.3}) {}",
            self.name,
            self.set,
            self.unit,
            self.measured,
            self.unit,
            self.tolerance,
            if self.ok() { "ok" } else { "OFF" }
        )
    }
}

/// Tolerance of a measured probability of `n` trials: 1 percentage point
/// plus 3 standard deviations, in percent.
fn probability_tolerance(p: f64, n: f64) -> f64 {
    100.0 * (0.01 + 3.0 * (p * (1.0 - p) / n.max(1.0)).sqrt())
}

/// Compares the delay/loss probe (`timing`) and, with a rate cap, the rate
/// probe with the settings of the a→b direction.
pub fn evaluate(
    config: &DirectionConfig,
    timing: &ProbeReport,
    rate: Option<&ProbeReport>,
) -> Vec<Check> {
    let n = f64::from(timing.sent);
    let loss = config.loss();
    let mut checks = vec![Check {
        name: "loss",
        unit: "%",
        set: loss * 100.0,
        measured: timing.loss() * 100.0,
        tolerance: probability_tolerance(loss, n),
    }];
    if timing.distinct > 0 {
        checks.push(Check {
            name: "delay",
            unit: "ms",
            set: config.delay().as_secs_f64() * 1e3,
            measured: timing.delay_mean_us / 1e3,
            tolerance: 1.0 + config.jitter().as_secs_f64() * 1e3 / 2.0,
        });
    }
    let delivered = f64::from(timing.distinct);
    if config.duplicate() > 0.0 {
        checks.push(Check {
            name: "duplicate",
            unit: "%",
            set: config.duplicate() * 100.0,
            measured: 100.0 * f64::from(timing.duplicates) / delivered.max(1.0),
            tolerance: probability_tolerance(config.duplicate(), delivered),
        });
    }
    if config.reorder() > 0.0 {
        checks.push(Check {
            name: "reorder",
            unit: "%",
            set: config.reorder() * 100.0,
            measured: 100.0 * f64::from(timing.reordered) / delivered.max(1.0),
            tolerance: probability_tolerance(config.reorder(), delivered),
        });
    }
    if let (Some(bps), Some(r)) = (config.rate_bps(), rate) {
        let set = bps as f64 / 1e6;
        checks.push(Check {
            name: "rate",
            unit: "Mbit/s",
            set,
            measured: r.throughput_bps().unwrap_or(0.0) / 1e6,
            tolerance: set * 0.05,
        });
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_line_round_trips_through_the_parser() {
        let line = "probe received=10 distinct=9 duplicates=1 reordered=2 delay_mean_us=10012.5 delay_min_us=10001.0 delay_max_us=10100.0 ip_bytes_after_first=9000 span_us=1000.0";
        let r = parse_report(line).expect("a valid line");
        assert_eq!(
            (r.received, r.distinct, r.duplicates, r.reordered),
            (10, 9, 1, 2)
        );
        assert_eq!(r.throughput_bps(), Some(72e6));
        assert!(parse_report("probe received=x").is_none());
    }

    #[test]
    fn evaluation_flags_a_loss_far_from_the_setting() {
        let mut c = DirectionConfig::default();
        c.set_loss_percent(5.0).expect("valid");
        let near = ProbeReport {
            sent: 2000,
            distinct: 1900,
            ..Default::default()
        };
        let far = ProbeReport {
            sent: 2000,
            distinct: 1700,
            ..Default::default()
        };
        assert!(evaluate(&c, &near, None).iter().all(Check::ok));
        assert!(!evaluate(&c, &far, None)[0].ok());
    }
}
