//! `--metrics-alternate`: metrics and logs on in odd windows of the wall
//! clock, off in even ones, in every process of a run at once (they share
//! the clock); and what a workload did in each kind of window.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::report::ResultLine;

/// How long metrics stay on, then off, with `--metrics-alternate`.
pub const WINDOW: Duration = Duration::from_millis(1000);
/// The start of each window not counted: every process has switched by
/// then (the switch is a thread waking at the boundary).
pub const GUARD: Duration = Duration::from_millis(100);

/// Whether metrics are on now (always, unless alternating).
pub(super) static ON: AtomicBool = AtomicBool::new(true);

/// Switches this process's log filter (set by `main` when alternating).
static LOG_SWITCH: OnceLock<Box<dyn Fn(bool) + Send + Sync>> = OnceLock::new();

/// Hands the switch of the log filter to the alternation.
pub fn set_log_switch(switch: impl Fn(bool) + Send + Sync + 'static) {
    let _ = LOG_SWITCH.set(Box::new(switch));
}

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// The window `t` falls in, and whether metrics are on in it.
fn window_of(t: SystemTime) -> (u128, bool) {
    let k = since_epoch(t).as_nanos() / WINDOW.as_nanos();
    (k, k % 2 == 1)
}

/// Whether metrics are on at `t`; `None` in a window's [`GUARD`].
pub fn phase_at(t: SystemTime) -> Option<bool> {
    let (k, on) = window_of(t);
    let into = since_epoch(t).as_nanos() - k * WINDOW.as_nanos();
    (into >= GUARD.as_nanos()).then_some(on)
}

/// Seconds counted with metrics off and on between `from` and `to`
/// (each window less its [`GUARD`]).
pub fn phase_seconds(from: SystemTime, to: SystemTime) -> [f64; 2] {
    let mut seconds = [0.0; 2];
    let (mut t, end) = (since_epoch(from).as_nanos(), since_epoch(to).as_nanos());
    let (window, guard) = (WINDOW.as_nanos(), GUARD.as_nanos());
    while t < end {
        let k = t / window;
        let counted_from = t.max(k * window + guard);
        let window_end = ((k + 1) * window).min(end);
        if window_end > counted_from {
            seconds[usize::from(k % 2 == 1)] += (window_end - counted_from) as f64 / 1e9;
        }
        t = (k + 1) * window;
    }
    seconds
}

/// What a workload did with metrics off (`[0]`) and on (`[1]`), per
/// second counted, and their ratio: the cost of leaving metrics on.
pub struct Phases {
    /// Per second, off and on.
    pub rates: [f64; 2],
}

impl Phases {
    /// From counts in each kind of window between `from` and `to`.
    pub fn new(counts: [u64; 2], from: SystemTime, to: SystemTime) -> Phases {
        Phases::counted(counts, phase_seconds(from, to))
    }

    /// From counts over the seconds counted in each kind of window.
    pub fn counted(counts: [u64; 2], seconds: [f64; 2]) -> Phases {
        Phases {
            rates: [0, 1].map(|i| counts[i] as f64 / seconds[i].max(1e-9)),
        }
    }

    /// Counts `total` (read at each window's end and guard's end) over
    /// whole windows, from `warmup` on for `duration`.
    pub async fn sample(
        total: &std::sync::atomic::AtomicU64,
        warmup: Duration,
        duration: Duration,
    ) -> Phases {
        tokio::time::sleep(warmup).await;
        let until = since_epoch(SystemTime::now()) + duration;
        let (mut counts, mut seconds) = ([0; 2], [0.0; 2]);
        let window = WINDOW.as_nanos();
        let mut k = since_epoch(SystemTime::now()).as_nanos() / window + 1;
        loop {
            let start = Duration::from_nanos(u64::try_from(k * window).unwrap_or(u64::MAX));
            if start + WINDOW > until {
                break;
            }
            sleep_wall(start + GUARD).await;
            let from = total.load(Ordering::Acquire);
            sleep_wall(start + WINDOW).await;
            let on = usize::from(k % 2 == 1);
            counts[on] += total.load(Ordering::Acquire) - from;
            seconds[on] += (WINDOW - GUARD).as_secs_f64();
            k += 1;
        }
        Phases::counted(counts, seconds)
    }

    /// On / off.
    pub fn ratio(&self) -> f64 {
        self.rates[1] / self.rates[0].max(1e-9)
    }

    /// `line` with the rates (`<rate>_off`, `<rate>_on`) and `on_vs_off`.
    pub fn fields(&self, line: ResultLine, rate: &str) -> ResultLine {
        line.field(&format!("{rate}_off"), format!("{:.0}", self.rates[0]))
            .field(&format!("{rate}_on"), format!("{:.0}", self.rates[1]))
            .field("on_vs_off", format!("{:.3}", self.ratio()))
    }
}

/// Waits until the wall clock reads `t` (at once if it has).
async fn sleep_wall(t: Duration) {
    let now = since_epoch(SystemTime::now());
    if t > now {
        tokio::time::sleep(t - now).await;
    }
}

/// Sleeps until the wall clock reads `t` (at once if it has).
fn sleep_until_wall(t: Duration) {
    let now = since_epoch(SystemTime::now());
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// Switches metrics and logs on and off at every window's start, for as
/// long as the process runs.
pub(super) fn start() {
    std::thread::spawn(|| loop {
        let (k, on) = window_of(SystemTime::now());
        ON.store(on, Ordering::Relaxed);
        if let Some(switch) = LOG_SWITCH.get() {
            switch(on);
        }
        sleep_until_wall(Duration::from_nanos(
            u64::try_from((k + 1) * WINDOW.as_nanos()).unwrap_or(u64::MAX),
        ));
    });
}

/// How long until the middle of the next window with metrics on: a scrape
/// a second while they are on.
pub(super) fn until_next_scrape() -> Duration {
    let now = since_epoch(SystemTime::now()).as_nanos();
    let (w, k) = (WINDOW.as_nanos(), now / WINDOW.as_nanos());
    let on_window = if k % 2 == 1 { k } else { k + 1 };
    let mut at = on_window * w + w / 2;
    if at <= now {
        at += 2 * w;
    }
    Duration::from_nanos(u64::try_from(at - now).unwrap_or(u64::MAX))
}
