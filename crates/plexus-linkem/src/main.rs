//! `plexus-linkem`: runs programs behind an emulated lossy, slow link.
//!
//! See the crate README for the commands. Exit codes: 0 success; 2 bad
//! settings or usage; 1 the link could not be set up or a selftest was off;
//! otherwise the exit code of a failing command run inside a side (128 + N
//! if it was killed by signal N).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use plexus_linkem::config::parse_pair;
use plexus_linkem::probe::{self, ProbePlan, IP_UDP_HEADERS};
use plexus_linkem::{netns, ConfigError, Link, LinkConfig, SetupError, Side};
use tokio::signal::unix::{signal, Signal, SignalKind};

#[derive(Parser)]
#[command(
    name = "plexus-linkem",
    version,
    about = "Two network namespaces joined by an emulated link (loss, delay, jitter, rate cap, reordering, duplication), forwarded in user space through TUN devices. Side a is 198.51.100.1, side b is 198.51.100.2."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Set up the link and keep it until Ctrl-C / SIGTERM; or, with
    /// `-- CMD_A ... [::: CMD_B ...]`, run CMD_A in side a and CMD_B in side b,
    /// wait for both, remove the link and return the first failure.
    Run {
        #[command(flatten)]
        link: LinkArgs,
        /// Commands: `CMD_A ARGS... ::: CMD_B ARGS...` (either may be empty).
        #[arg(last = true)]
        commands: Vec<String>,
    },
    /// Run a command inside a side of a link started with `run`.
    Exec {
        /// `a` (198.51.100.1) or `b` (198.51.100.2).
        side: Side,
        /// Prefix of the running link.
        #[arg(long, default_value = "plx")]
        prefix: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Set up a link, probe it from a to b with UDP, print measured against
    /// set values (a→b settings), and fail if any is off by more than its
    /// tolerance.
    Selftest {
        #[command(flatten)]
        link: LinkArgs,
        /// Probe packets for loss and delay (one per millisecond).
        #[arg(long, default_value_t = 2000)]
        count: u32,
    },
    /// Remove leftovers (namespaces, pid files) of links whose process is
    /// gone, e.g. after `kill -9`. Only prefixes plexus-linkem made are touched.
    Cleanup {
        /// Only this prefix (default: every leftover).
        #[arg(long)]
        prefix: Option<String>,
    },
    #[command(hide = true)]
    ProbeSend {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        count: u32,
        #[arg(long)]
        interval_us: u64,
        #[arg(long)]
        payload: usize,
    },
    #[command(hide = true)]
    ProbeRecv {
        #[arg(long)]
        bind: SocketAddr,
        #[arg(long)]
        expect: u32,
        #[arg(long)]
        idle_ms: u64,
        #[arg(long)]
        deadline_ms: u64,
    },
}

/// Link settings. Each takes one value for both directions (`5`) or
/// `A_TO_B/B_TO_A` (`5/0`).
#[derive(Args)]
struct LinkArgs {
    /// Packet loss in percent.
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    loss: String,
    /// Fixed one-way delay in milliseconds.
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    delay_ms: String,
    /// Jitter in milliseconds (delay drawn from delay ± jitter; order kept).
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    jitter_ms: String,
    /// Bandwidth cap in Mbit/s of IP bytes (default: unlimited).
    #[arg(long, allow_hyphen_values = true)]
    rate_mbit: Option<String>,
    /// Queue bound in front of the rate cap, in packets (tail drop).
    #[arg(long, default_value = "1000", allow_hyphen_values = true)]
    queue_packets: String,
    /// Probability in percent that a packet is held back by the reorder gap.
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    reorder: String,
    /// How long a reordered packet is held back, in milliseconds.
    #[arg(long, default_value = "5", allow_hyphen_values = true)]
    reorder_gap_ms: String,
    /// Probability in percent that a packet is duplicated.
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    duplicate: String,
    /// Seed of the link's RNGs (one seed replays both directions).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Namespaces are `<prefix>-a` and `<prefix>-b`.
    #[arg(long, default_value = "plx")]
    prefix: String,
}

impl LinkArgs {
    fn config(&self) -> Result<LinkConfig, ConfigError> {
        let mut c = LinkConfig {
            seed: self.seed,
            ..LinkConfig::default()
        };
        let (ab, ba) = (&mut c.a_to_b, &mut c.b_to_a);
        let (x, y) = parse_pair("--loss", &self.loss)?;
        ab.set_loss_percent(x)?;
        ba.set_loss_percent(y)?;
        let (x, y) = parse_pair("--delay-ms", &self.delay_ms)?;
        ab.set_delay_ms(x)?;
        ba.set_delay_ms(y)?;
        let (x, y) = parse_pair("--jitter-ms", &self.jitter_ms)?;
        ab.set_jitter_ms(x)?;
        ba.set_jitter_ms(y)?;
        if let Some(rate) = &self.rate_mbit {
            let (x, y) = parse_pair("--rate-mbit", rate)?;
            ab.set_rate_mbit(Some(x))?;
            ba.set_rate_mbit(Some(y))?;
        }
        let (x, y) = parse_pair("--queue-packets", &self.queue_packets)?;
        let count = |v: f64| {
            if v.fract() == 0.0 && (0.0..1e9).contains(&v) {
                Ok(v as usize)
            } else {
                Err(ConfigError::Malformed {
                    setting: "--queue-packets",
                    value: self.queue_packets.clone(),
                })
            }
        };
        ab.set_queue_packets(count(x)?)?;
        ba.set_queue_packets(count(y)?)?;
        let (x, y) = parse_pair("--reorder", &self.reorder)?;
        ab.set_reorder_percent(x)?;
        ba.set_reorder_percent(y)?;
        let (x, y) = parse_pair("--reorder-gap-ms", &self.reorder_gap_ms)?;
        ab.set_reorder_gap_ms(x)?;
        ba.set_reorder_gap_ms(y)?;
        let (x, y) = parse_pair("--duplicate", &self.duplicate)?;
        ab.set_duplicate_percent(x)?;
        ba.set_duplicate_percent(y)?;
        Ok(c)
    }
}

/// How the tool ends.
enum Outcome {
    Ok,
    /// A message and an exit code.
    Fail(String, u8),
}

impl From<SetupError> for Outcome {
    fn from(e: SetupError) -> Self {
        Outcome::Fail(e.to_string(), 1)
    }
}

impl From<ConfigError> for Outcome {
    fn from(e: ConfigError) -> Self {
        Outcome::Fail(format!("{e}; nothing was created"), 2)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Cmd::ProbeSend {
            to,
            count,
            interval_us,
            payload,
        } => match probe::send(to, count, Duration::from_micros(interval_us), payload) {
            Ok(()) => Outcome::Ok,
            Err(e) => Outcome::Fail(format!("probe sender: {e}"), 1),
        },
        Cmd::ProbeRecv {
            bind,
            expect,
            idle_ms,
            deadline_ms,
        } => {
            match probe::receive(
                bind,
                expect,
                Duration::from_millis(idle_ms),
                Duration::from_millis(deadline_ms),
            ) {
                Ok(line) => {
                    println!("{line}");
                    Outcome::Ok
                }
                Err(e) => Outcome::Fail(format!("probe receiver on {bind}: {e}"), 1),
            }
        }
        Cmd::Exec {
            side,
            prefix,
            command,
        } => exec(side, &prefix, &command),
        Cmd::Cleanup { prefix } => match netns::cleanup(prefix.as_deref()) {
            Ok(removed) if removed.is_empty() => {
                println!("plexus-linkem: nothing to remove");
                Outcome::Ok
            }
            Ok(removed) => {
                println!("plexus-linkem: removed {}", removed.join(", "));
                Outcome::Ok
            }
            Err(e) => e.into(),
        },
        cmd => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match rt {
                Ok(rt) => rt.block_on(async_main(cmd)),
                Err(e) => Outcome::Fail(format!("starting the runtime: {e}"), 1),
            }
        }
    };
    match outcome {
        Outcome::Ok => ExitCode::SUCCESS,
        Outcome::Fail(msg, code) => {
            eprintln!("plexus-linkem: {msg}");
            ExitCode::from(code)
        }
    }
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(1, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(1, 255) as u8,
        _ => 1,
    }
}

fn exec(side: Side, prefix: &str, command: &[String]) -> Outcome {
    let mut cmd = match netns::side_command(prefix, side, &command[0], &command[1..]) {
        Ok(cmd) => cmd,
        Err(e) => return e.into(),
    };
    match cmd.status() {
        Ok(s) if s.success() => Outcome::Ok,
        Ok(s) => Outcome::Fail(
            format!(
                "`{}` in side {} failed ({s})",
                command.join(" "),
                side.letter()
            ),
            exit_code(s),
        ),
        Err(e) => Outcome::Fail(format!("running `ip netns exec`: {e}"), 1),
    }
}

/// SIGINT, SIGTERM and SIGHUP, listened to before anything is created so
/// that none of them can kill the process past its cleanup.
struct Signals(Signal, Signal, Signal);

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals(
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
            signal(SignalKind::hangup())?,
        ))
    }

    /// # Cancel safety
    /// Cancel safe.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.0.recv() => "SIGINT",
            _ = self.1.recv() => "SIGTERM",
            _ = self.2.recv() => "SIGHUP",
        }
    }
}

async fn async_main(cmd: Cmd) -> Outcome {
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => return Outcome::Fail(format!("listening for signals: {e}"), 1),
    };
    let (args, commands, count) = match cmd {
        Cmd::Run { link, commands } => (link, Some(commands), 0),
        Cmd::Selftest { link, count } => (link, None, count),
        _ => unreachable!("handled in main"),
    };
    let config = match args.config() {
        Ok(c) => c,
        Err(e) => return e.into(),
    };
    let prefix = args.prefix.clone();
    let up = tokio::task::spawn_blocking({
        let config = config.clone();
        move || Link::up(&prefix, config)
    });
    let mut link = match up.await {
        Ok(Ok(link)) => link,
        Ok(Err(e)) => return e.into(),
        Err(e) => return Outcome::Fail(format!("setup panicked: {e}"), 1),
    };
    eprintln!(
        "plexus-linkem: link `{p}` up: side a = 198.51.100.1 in netns {p}-a, side b = 198.51.100.2 in netns {p}-b, seed {}\n  a→b: {}\n  b→a: {}",
        config.seed,
        config.a_to_b,
        config.b_to_a,
        p = args.prefix,
    );
    let outcome = match commands {
        Some(commands) if commands.is_empty() => serve(&mut link, &mut signals).await,
        Some(commands) => run_commands(&mut link, &mut signals, &commands).await,
        None => selftest(link, &mut signals, &config, count).await,
    };
    // `link` (if still here) is dropped on return, which removes it.
    outcome
}

async fn serve(link: &mut Link, signals: &mut Signals) -> Outcome {
    eprintln!(
        "plexus-linkem: run programs with `plexus-linkem exec a --prefix {p} -- CMD` (or b); Ctrl-C removes the link",
        p = link.prefix()
    );
    tokio::select! {
        sig = signals.recv() => {
            eprintln!("plexus-linkem: {sig}: removing the link");
            Outcome::Ok
        }
        reason = link.failed() => Outcome::Fail(reason, 1),
    }
}

async fn run_commands(link: &mut Link, signals: &mut Signals, commands: &[String]) -> Outcome {
    let mut parts = commands.split(|a| a == ":::");
    let (cmd_a, cmd_b) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if parts.next().is_some() || (cmd_a.is_empty() && cmd_b.is_empty()) {
        return Outcome::Fail(
            "expected `-- CMD_A ARGS... ::: CMD_B ARGS...` (one `:::` at most)".into(),
            2,
        );
    }
    let spawn = |side: Side, cmd: &[String]| -> Option<std::io::Result<tokio::process::Child>> {
        let (program, args) = cmd.split_first()?;
        let mut c = tokio::process::Command::from(link.command(side, program, args));
        Some(c.kill_on_drop(true).spawn())
    };
    let mut children = Vec::new();
    for (side, cmd) in [(Side::A, cmd_a), (Side::B, cmd_b)] {
        match spawn(side, cmd) {
            Some(Ok(child)) => children.push((side, cmd.join(" "), child)),
            Some(Err(e)) => {
                return Outcome::Fail(
                    format!(
                        "starting `{}` in side {}: {e}",
                        cmd.join(" "),
                        side.letter()
                    ),
                    1,
                )
            }
            None => {}
        }
    }
    while !children.is_empty() {
        let waits = futures_wait_any(&mut children);
        tokio::select! {
            (i, status) = waits => {
                let (side, cmd, _) = children.remove(i);
                match status {
                    Ok(s) if s.success() => {}
                    Ok(s) => {
                        let others = if children.is_empty() { "" } else { "; the other side's command was stopped" };
                        return Outcome::Fail(format!("`{cmd}` in side {} failed ({s}){others}; the link was removed", side.letter()), exit_code(s));
                    }
                    Err(e) => return Outcome::Fail(format!("waiting for `{cmd}`: {e}"), 1),
                }
            }
            sig = signals.recv() => return Outcome::Fail(format!("{sig}: stopped the commands and removed the link"), 130),
            reason = link.failed() => return Outcome::Fail(reason, 1),
        }
    }
    Outcome::Ok
}

/// Waits for the first of the children to exit: `(index, status)`.
///
/// # Cancel safety
/// Cancel safe (`Child::wait` is).
async fn futures_wait_any(
    children: &mut [(Side, String, tokio::process::Child)],
) -> (usize, std::io::Result<std::process::ExitStatus>) {
    let mut iter = children.iter_mut();
    match (iter.next(), iter.next()) {
        (Some(a), None) => (0, a.2.wait().await),
        (Some(a), Some(b)) => tokio::select! {
            s = a.2.wait() => (0, s),
            s = b.2.wait() => (1, s),
        },
        _ => std::future::pending().await,
    }
}

async fn selftest(link: Link, signals: &mut Signals, config: &LinkConfig, count: u32) -> Outcome {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(format!("finding this binary: {e}"), 1),
    };
    let cfg = config.a_to_b.clone();
    let task = tokio::task::spawn_blocking(move || {
        run_probes(&link, &exe, &cfg, count).map(|r| (r, link))
    });
    let abort = task.abort_handle();
    let (reports, link) = tokio::select! {
        r = task => match r {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Outcome::Fail(e.to_string(), 1),
            Err(e) => return Outcome::Fail(format!("selftest panicked: {e}"), 1),
        },
        sig = signals.recv() => {
            abort.abort();
            return Outcome::Fail(format!("{sig}: selftest stopped; the link is removed when its probe ends"), 130);
        }
    };
    let (timing, rate) = reports;
    let checks = probe::evaluate(&config.a_to_b, &timing, rate.as_ref());
    println!("selftest a→b: {}", config.a_to_b);
    println!(
        "probe: {} packets of {} bytes one per ms: received {} distinct {} duplicates {} reordered {}; delay min {:.3} max {:.3} ms",
        timing.sent,
        probe::MIN_PAYLOAD + IP_UDP_HEADERS,
        timing.received,
        timing.distinct,
        timing.duplicates,
        timing.reordered,
        timing.delay_min_us / 1e3,
        timing.delay_max_us / 1e3
    );
    for c in &checks {
        println!("  {c}");
    }
    if let Err(e) = link.shutdown() {
        return e.into();
    }
    if checks.iter().all(probe::Check::ok) {
        println!("selftest: passed");
        Outcome::Ok
    } else {
        Outcome::Fail("selftest: measured values are off (see above)".into(), 1)
    }
}

type Reports = (probe::ProbeReport, Option<probe::ProbeReport>);

fn run_probes(
    link: &Link,
    exe: &Path,
    cfg: &plexus_linkem::DirectionConfig,
    count: u32,
) -> Result<Reports, probe::ProbeError> {
    let slack = cfg.delay() + cfg.jitter() + cfg.reorder_gap();
    let idle = Duration::from_millis(300) + slack * 2;
    let timing = probe::run(
        link,
        exe,
        &ProbePlan {
            count,
            interval: Duration::from_millis(1),
            payload: probe::MIN_PAYLOAD,
            idle,
        },
    )?;
    let rate = match cfg.rate_bps() {
        None => None,
        Some(bps) => {
            // Offer 30 % more than the cap for about 1.5 s, so the queue
            // stays busy and the receiver sees the cap.
            let payload = 1200;
            let bits = ((payload + IP_UDP_HEADERS) * 8) as f64;
            let interval = Duration::from_secs_f64(bits / (bps as f64 * 1.3));
            let count = ((1.5 / interval.as_secs_f64()) as u32).clamp(50, 200_000);
            Some(probe::run(
                link,
                exe,
                &ProbePlan {
                    count,
                    interval,
                    payload,
                    idle,
                },
            )?)
        }
    };
    Ok((timing, rate))
}
