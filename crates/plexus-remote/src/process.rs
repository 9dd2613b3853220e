//! What the node binaries share (`plexus-cluster-node`, `plexus-data-node`,
//! `plexus-device`, `plexus-device-server`): a runtime with logging to
//! stderr, one flushed line per event on stdout (a parent reads them as they
//! come), SIGTERM as a future, and an optional ticker.
//!
//! Feature `process`.

use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Runs `run` on a multi-thread runtime of `threads` workers (at least 1),
/// logging to stderr as `RUST_LOG` says, or `default_filter` if it is unset
/// (`None`: no logging); prints `name: error` and fails if `run` does.
pub fn main<Fut, E>(name: &str, threads: usize, default_filter: Option<&str>, run: Fut) -> ExitCode
where
    Fut: Future<Output = Result<(), E>>,
    E: fmt::Display,
{
    let filter = match std::env::var_os("RUST_LOG") {
        Some(_) => Some(tracing_subscriber::EnvFilter::from_default_env()),
        None => default_filter.map(tracing_subscriber::EnvFilter::new),
    };
    if let Some(filter) = filter {
        // Colour only on a terminal: a log file or a collector gets plain
        // text, not escape codes.
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM (never where there is no such signal).
pub async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut s) = signal(SignalKind::terminate()) {
            s.recv().await;
            return;
        }
    }
    std::future::pending().await
}

/// The next tick of `interval`, or never without one.
pub async fn tick(interval: Option<&mut tokio::time::Interval>) {
    match interval {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Stdout, one flushed line at a time; clones share it. Once a write fails
/// (the reader is gone) [`Lines::closed`] says so, and the binary exits.
#[derive(Debug, Clone, Default)]
pub struct Lines {
    closed: Arc<AtomicBool>,
}

impl Lines {
    /// Writes `text` and a newline, flushed.
    pub fn line(&self, text: fmt::Arguments<'_>) {
        let mut stdout = std::io::stdout().lock();
        if writeln!(stdout, "{text}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            self.closed.store(true, Ordering::Relaxed);
        }
    }

    /// Whether stdout is gone.
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}
