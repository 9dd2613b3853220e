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
