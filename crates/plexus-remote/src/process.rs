//! What the roles of the `plexus` command share (`plexus node`, `plexus
//! member`, `plexus data`, `plexus device-server`, `plexus device`, `plexus
//! serve`), and what an application's own binary can use the same way:
//! logging to stderr ([`init_logging`], the
//! `--log` and `--log-format` flags of [`LogOptions`]), a runtime, one
//! flushed line per event on stdout (a parent reads them as they come),
//! SIGTERM as a future, and an optional ticker.
//!
//! Feature `process`.

use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How a binary logs: which events (`--log`, else `RUST_LOG`, else
/// `info`) and in which format (`--log-format`), always to stderr; colour
/// only when stderr is a terminal.
///
/// The command-line flags of the binaries; with the default (`info`, text)
/// an operator sees members coming up and going down, refused peers,
/// suspicions and downings without asking for them.
#[derive(Debug, Clone, Default, clap::Args)]
// The doc above is the type's, not a command's `about`.
#[command(about = None, long_about = None)]
pub struct LogOptions {
    /// Which events to log, as `RUST_LOG` takes them (`debug`,
    /// `plexus::cluster=debug,info`); overrides `RUST_LOG` [default:
    /// `RUST_LOG` if set, else `info`].
    #[arg(long = "log", value_name = "FILTER", global = true)]
    pub filter: Option<String>,
    /// The format of log lines on stderr: `text`, or `json` (one JSON
    /// object per line).
    #[arg(long, value_name = "FORMAT", default_value = "text", global = true)]
    pub log_format: LogFormat,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colour only on a terminal).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`
    /// (with `message`) and the enclosing `spans`.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("unknown log format `{other}` (text or json)")),
        }
    }
}

/// A log filter that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("log filter `{filter}`: {cause}")]
#[non_exhaustive]
pub struct LogError {
    /// The filter as given.
    pub filter: String,
    /// Why it does not parse.
    pub cause: String,
}

/// The filter used when neither `--log` nor `RUST_LOG` is given.
pub const DEFAULT_LOG_FILTER: &str = "info";

/// Installs the process's `tracing` subscriber as `options` say, writing
/// to stderr (stdout stays for the binaries' own lines). Nothing is
/// installed if a subscriber already is.
///
/// # Errors
///
/// [`LogError`] if the filter (from `--log` or `RUST_LOG`) does not parse;
/// nothing is installed then.
pub fn init_logging(options: &LogOptions) -> Result<(), LogError> {
    let filter = match &options.filter {
        Some(f) => f.clone(),
        None => std::env::var("RUST_LOG")
            .ok()
            .filter(|f| !f.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_LOG_FILTER.to_owned()),
    };
    let env_filter = tracing_subscriber::EnvFilter::builder()
        .parse(&filter)
        .map_err(|e| LogError {
            filter: filter.clone(),
            cause: e.to_string(),
        })?;
    // Colour only on a terminal: a log file or a collector gets plain
    // text, not escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
    // An error means a subscriber is installed already (a test harness, a
    // host application): that one stays.
    let _ = match options.log_format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    Ok(())
}

/// Runs `run` on a multi-thread runtime of `threads` workers (at least 1);
/// prints `name: error` and fails if `run` does. Logging is the caller's
/// ([`init_logging`], once per process).
pub fn block_on<Fut, E>(name: &str, threads: usize, run: Fut) -> ExitCode
where
    Fut: Future<Output = Result<(), E>>,
    E: fmt::Display,
{
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

/// Listens for SIGTERM and SIGINT (Ctrl-C) from now on, and resolves on
/// the first of them (never where there are no such signals). Call it
/// before saying the process is ready, so that a signal sent as soon as a
/// parent reads that line is not missed.
///
/// # Panics
///
/// Outside a tokio runtime with its I/O driver enabled.
pub fn stop_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            let recv = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = recv(term) => {}
                () = recv(int) => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// An interval firing every `every_ms` milliseconds (at least 1), the first
/// time one period from now; none without a period (a `--stats-every-ms`
/// left out). [`tick`] waits on it.
pub fn ticker(every_ms: Option<u64>) -> Option<tokio::time::Interval> {
    every_ms.map(|ms| {
        let every = std::time::Duration::from_millis(ms.max(1));
        tokio::time::interval_at(tokio::time::Instant::now() + every, every)
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_that_does_not_parse_is_refused_naming_it() {
        let options = LogOptions {
            filter: Some("plexus=[[nonsense".to_owned()),
            log_format: LogFormat::Json,
        };
        let e = init_logging(&options).expect_err("a malformed filter");
        assert_eq!(e.filter, "plexus=[[nonsense");
        assert!(e
            .to_string()
            .starts_with("log filter `plexus=[[nonsense`: "));
    }

    #[test]
    fn log_formats_parse_by_name() {
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("yaml".parse::<LogFormat>().is_err());
    }
}
