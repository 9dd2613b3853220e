//! `plexus member` processes for tests: start one, follow its stdout
//! lines through a channel (each with the time it was read) and keep its
//! stderr (its warnings), kill it with SIGKILL. Every process is killed
//! when its [`Proc`] is dropped, so a failing test leaves none behind.

#![allow(dead_code)] // Each test file uses a part of it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test: `plexus`, run as `plexus member ...`.
pub const EXE: &str = env!("CARGO_BIN_EXE_plexus");

/// `plexus member` (arguments follow), with the tests' cookie.
pub fn member_command() -> std::process::Command {
    let mut cmd = super::plexus("member");
    cmd.env(super::COOKIE_VAR, "cluster-test");
    cmd
}

/// A guard that turns a hang into a failure; assertions wait for lines.
pub const GUARD: Duration = Duration::from_secs(120);

/// Timings quick enough for a test (every member of a test uses them).
pub const QUICK: &[&str] = &[
    "--cluster-name",
    "test",
    "--probe-interval-ms",
    "200",
    "--probe-timeout-ms",
    "100",
    "--gossip-interval-ms",
    "50",
    "--stable-after-ms",
    "600",
    "--suspicion-mult",
    "1",
    "--join-retry-ms",
    "200",
    "--rejoin-delay-ms",
    "200",
];

/// One parsed `EVENT <kind> <address> <incarnation> [<reason>]` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `member-up`, `member-downed`, `self-downed`, ...
    pub kind: String,
    /// The member it is about.
    pub address: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// The reason, if the event has one.
    pub reason: Option<String>,
}

impl Event {
    /// Parses an `EVENT` line.
    pub fn parse(line: &str) -> Option<Event> {
        let mut words = line.strip_prefix("EVENT ")?.split(' ');
        Some(Event {
            kind: words.next()?.to_owned(),
            address: words.next()?.to_owned(),
            incarnation: words.next()?.parse().ok()?,
            reason: words.next().map(str::to_owned),
        })
    }
}

/// A running member process.
pub struct Proc {
    /// A name for messages (`m2`).
    pub name: String,
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    /// Every line read so far.
    pub seen: Vec<String>,
    /// When each line of `seen` was read from the process.
    pub seen_at: Vec<Instant>,
    /// Its stderr lines so far (its log: warnings).
    stderr: Arc<Mutex<Vec<String>>>,
    /// Its address (from `LISTENING`).
    pub address: String,
    /// Its incarnation (from `EVENT subscribed`).
    pub incarnation: u64,
}

impl Proc {
    /// Starts `command` (the binary, maybe behind `ip netns exec`) and
    /// waits for its address and incarnation.
    pub fn start(name: &str, mut command: Command) -> Proc {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("the member process starts");
        // Piped above.
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        // Piped above.
        let stderr_pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                keep.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        let mut p = Proc {
            name: name.to_owned(),
            child,
            lines,
            seen: Vec::new(),
            seen_at: Vec::new(),
            stderr,
            address: String::new(),
            incarnation: 0,
        };
        let listening = p.expect_line("LISTENING", |l| l.starts_with("LISTENING "));
        p.address = listening["LISTENING ".len()..].to_owned();
        let me = p.expect_event("its subscription", |e| e.kind == "subscribed");
        assert_eq!(me.address, p.address);
        p.incarnation = me.incarnation;
        p
    }

    /// The next line that satisfies `wanted`, skipping the others (kept in
    /// `seen`). Fails if the process exits or the guard runs out first.
    pub fn expect_line(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) => {
                    self.seen.push(line.clone());
                    self.seen_at.push(at);
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "{} ({}): no {what} ({e:?}); its lines:\n{}\nits log:\n{}",
                    self.name,
                    self.address,
                    self.seen.join("\n"),
                    self.stderr_lines().join("\n")
                ),
            }
        }
    }

    /// Reads lines until one that was read at `moment` or later (a member
    /// printing `STATS` lines prints one soon); returns its index in
    /// `seen`: the lines before it were printed before `moment`.
    pub fn mark(&mut self, moment: Instant) -> usize {
        if let Some(i) = self.seen_at.iter().position(|at| *at >= moment) {
            return i;
        }
        let what = format!("a line read after {moment:?}");
        self.expect_line(&what, |_| true);
        loop {
            // A line was just read.
            if *self.seen_at.last().expect("a line was read") >= moment {
                return self.seen.len() - 1;
            }
            self.expect_line(&what, |_| true);
        }
    }

    /// Its stderr lines so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The next event that satisfies `wanted`.
    pub fn expect_event(&mut self, what: &str, wanted: impl Fn(&Event) -> bool) -> Event {
        let line = self.expect_line(what, |l| Event::parse(l).is_some_and(|e| wanted(&e)));
        // The line parsed as an event just above.
        Event::parse(&line).expect("an event line")
    }

    /// The next events of `kind` about each of `addresses` that satisfy
    /// `also`, in whatever order they come.
    pub fn expect_each(
        &mut self,
        kind: &str,
        addresses: &[String],
        also: impl Fn(&Event) -> bool,
    ) -> Vec<Event> {
        let mut left: Vec<&String> = addresses.iter().collect();
        let mut got = Vec::new();
        while !left.is_empty() {
            let what = format!("{kind} of {left:?}");
            let e = self.expect_event(&what, |e| {
                e.kind == kind && left.contains(&&e.address) && also(e)
            });
            left.retain(|a| **a != e.address);
            got.push(e);
        }
        got
    }

    /// Its management endpoint (from `MANAGEMENT http://...`).
    pub fn management(&self) -> String {
        self.seen
            .iter()
            .find_map(|l| l.strip_prefix("MANAGEMENT "))
            .expect("the member printed its management endpoint")
            .to_owned()
    }

    /// Every event read so far.
    pub fn events(&self) -> Vec<Event> {
        self.seen.iter().filter_map(|l| Event::parse(l)).collect()
    }

    /// Kills the process with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the process to exit; its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().expect("the member process exits")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The port of a `scheme://host:port` address.
pub fn port(address: &str) -> u16 {
    address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the address ends with a port")
}
