//! Measuring helpers and the `RESULT` line.

use std::fmt::Write as _;

/// Median of a non-empty list (upper median for even lengths).
pub fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "median of no runs");
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Peak resident set size of this process so far, in bytes (Linux
/// `VmHWM`); `None` where `/proc` is not available.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_kib("VmHWM:").map(|k| k * 1024)
}

/// Current resident set size in bytes (Linux `VmRSS`).
pub fn rss_bytes() -> Option<u64> {
    proc_status_kib("VmRSS:").map(|k| k * 1024)
}

fn proc_status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A `RESULT workload=.. system=.. key=value ...` line.
pub struct ResultLine {
    text: String,
}

impl ResultLine {
    pub fn new(workload: &str, system: &str) -> Self {
        Self {
            text: format!("RESULT workload={workload} system={system}"),
        }
    }

    pub fn field(mut self, key: &str, value: impl std::fmt::Display) -> Self {
        // Writing to a String cannot fail.
        let _ = write!(self.text, " {key}={value}");
        self
    }

    pub fn print(self) {
        println!("{}", self.text);
    }
}

/// Busy time of the whole machine (every core, every process and the
/// kernel's own work: user, nice, system, irq, softirq; not idle, iowait
/// or steal) from `/proc/stat`, in seconds; `None` where it is not there.
pub fn machine_busy_seconds() -> Option<f64> {
    // USER_HZ: 100 on every Linux architecture we run on (the unit of
    // `/proc/stat`, fixed by the ABI whatever the kernel's HZ).
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)?;
    Some(busy as f64 / USER_HZ)
}

/// The machine's busy seconds between `from` and `to` (see
/// [`machine_busy_seconds`]), measured by a thread of its own that sleeps
/// in between: no timer in the measured runtime, whose parks a pending
/// timer would change. Join the handle after `to`.
pub fn busy_between(
    from: std::time::Instant,
    to: std::time::Instant,
) -> std::thread::JoinHandle<Option<f64>> {
    std::thread::spawn(move || {
        std::thread::sleep(from.saturating_duration_since(std::time::Instant::now()));
        let start = machine_busy_seconds()?;
        std::thread::sleep(to.saturating_duration_since(std::time::Instant::now()));
        Some(machine_busy_seconds()? - start)
    })
}
