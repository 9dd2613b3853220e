//! Servers (`plexus device-server`, a cluster of three) and device
//! processes (`plexus device`) on 127.0.0.1: a device reports to the
//! server the ring gives it; killed with SIGKILL, that server is replaced
//! by the ring's next owner and the device reports again; a second driver
//! of one device id stops the first.
//!
//! Assertions follow the processes' stdout lines in order; a guard turns
//! a hang into a failure. Times are printed, not bounded (their bound is
//! measured by `plexus-bench w5 --mttr`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use plexus_cluster::Ring;
use plexus_devices::DeviceId;

mod common;

/// `plexus device-server` (arguments follow).
fn server_command() -> Command {
    let mut cmd = common::plexus("device-server");
    cmd.env(common::COOKIE_VAR, "devices-test");
    cmd
}

/// `plexus device` (arguments follow).
fn device_command() -> Command {
    common::plexus("device")
}
const GUARD: Duration = Duration::from_secs(120);

/// Cluster timings quick enough for a test.
const QUICK: &[&str] = &[
    "--probe-interval-ms",
    "200",
    "--probe-timeout-ms",
    "100",
    "--gossip-interval-ms",
    "50",
    "--stable-after-ms",
    "600",
    "--join-retry-ms",
    "200",
];

struct Proc {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    address: String,
}

impl Proc {
    fn start(name: &str, mut command: Command) -> Proc {
        let mut child = command
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("the process starts");
        // Piped above.
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut p = Proc {
            name: name.to_owned(),
            child,
            lines,
            seen: Vec::new(),
            address: String::new(),
        };
        let l = p.expect("LISTENING", |l| l.starts_with("LISTENING "));
        p.address = l["LISTENING ".len()..].to_owned();
        p
    }

    /// The next line satisfying `wanted` (others are kept in `seen`).
    fn expect(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "{} ({}): no {what} ({e:?}); its lines:\n{}",
                    self.name,
                    self.address,
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn server(name: &str, scheme: &str, seeds: &[&str]) -> Proc {
    let mut cmd = server_command();
    cmd.args(QUICK)
        .args(["--listen", &format!("{scheme}://127.0.0.1:0")]);
    for s in seeds {
        cmd.args(["--seed", s]);
    }
    Proc::start(name, cmd)
}

fn device(name: &str, id: u64, seeds: &[&str]) -> Proc {
    let mut cmd = device_command();
    cmd.env(common::COOKIE_VAR, "devices-test")
        .args(["--first-id", &id.to_string()]);
    for s in seeds {
        cmd.args(["--seed", s]);
    }
    Proc::start(name, cmd)
}

/// The second word after `prefix` of a line `prefix <device> <server>`.
fn server_of(line: &str) -> String {
    line.split(' ').nth(3).expect("a server").to_owned()
}

#[test]
fn a_device_reports_to_its_owner_and_moves_to_the_next_owner_on_kill_9() {
    let mut servers = vec![server("s0", "tcp", &[])];
    let seed = servers[0].address.clone();
    for i in 1..3 {
        servers.push(server(&format!("s{i}"), "tcp", &[&seed]));
    }
    for s in &mut servers {
        s.expect("three members up", |l| l == "MEMBERS up=3");
    }
    let addresses: Vec<Arc<str>> = servers.iter().map(|s| s.address.as_str().into()).collect();
    let ring = Ring::new(addresses.iter().map(|a| (a, 1)), 128, 5);
    let id = 7;
    let owners: Vec<String> = ring
        .owners(&DeviceId(id).key(), 3)
        .into_iter()
        .map(|a| a.to_string())
        .collect();
    let seeds: Vec<&str> = addresses.iter().map(|a| &**a).collect();
    let mut d = device("d7", id, &seeds);
    let attached = d.expect("attached", |l| l.starts_with("EVENT attached d7 "));
    assert_eq!(server_of(&attached), owners[0]);
    d.expect("a report", |l| l == "EVENT reporting d7");
    let o = servers
        .iter()
        .position(|s| s.address == owners[0])
        .expect("the owner is a server");
    servers[o].expect("the registration", |l| {
        l.starts_with("DEVICE registered d7 ")
    });

    let killed = Instant::now();
    servers[o].kill();
    let lost = d.expect("the owner lost", |l| l.starts_with("EVENT lost d7 "));
    assert_eq!(server_of(&lost), owners[0]);
    let attached = d.expect("attached again", |l| l.starts_with("EVENT attached d7 "));
    assert_eq!(server_of(&attached), owners[1], "the ring's next owner");
    d.expect("a report again", |l| l == "EVENT reporting d7");
    println!(
        "kill -9 to the first report at the next owner: {:.2} s",
        killed.elapsed().as_secs_f64()
    );
}

#[test]
fn a_second_driver_of_one_device_stops_the_first() {
    let mut s = server("s0", "udp", &[]);
    s.expect("formed", |l| l == "MEMBERS up=1");
    let seed = s.address.clone();
    let mut first = device("first", 5, &[&seed]);
    first.expect("a report", |l| l == "EVENT reporting d5");
    let mut second = device("second", 5, &[&seed]);
    first.expect("told to stop", |l| l == "EVENT stopped d5 Duplicate");
    second.expect("attached", |l| l.starts_with("EVENT attached d5 "));
    second.expect("a report", |l| l == "EVENT reporting d5");
    s.expect("the duplicate logged", |l| {
        l.starts_with("DEVICE duplicate-stopped d5 ")
    });
}

/// A member's log written to a pipe (a file, a collector) is plain text:
/// colour codes only on a terminal.
#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let mut child = server_command()
        .args(["--listen", "tcp://127.0.0.1:0"])
        .args(QUICK)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .expect("the process starts");
    // Piped above.
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
    // The first log line comes as the member starts; the process keeps
    // running until killed.
    let first = lines.next().expect("a log line");
    child.kill().expect("kill the server");
    let _ = child.wait();
    let all: Vec<String> = std::iter::once(first).chain(lines).collect();
    assert!(
        all.iter()
            .any(|l| l.contains("DEBUG") || l.contains("INFO")),
        "{all:?}"
    );
    for line in &all {
        assert!(!line.contains('\u{1b}'), "escape code in {line:?}");
    }
}

/// The lines a server writes to stderr, started with `log_args` and no
/// `RUST_LOG`, up to the first that satisfies `until`; and its first
/// stdout line (its address: stdout carries only the lines a parent
/// reads, logs go to stderr).
fn log_lines(log_args: &[&str], until: impl Fn(&str) -> bool) -> (Vec<String>, String) {
    let mut child = server_command()
        .args(["--listen", "tcp://127.0.0.1:0"])
        .args(QUICK)
        .args(log_args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .expect("the process starts");
    // Both piped above.
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let first_out = BufReader::new(stdout).lines().next();
    // The member logs as it starts listening and forms its cluster; it
    // runs until killed.
    let mut lines = Vec::new();
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        let done = until(&line);
        lines.push(line);
        if done {
            break;
        }
    }
    child.kill().expect("kill the server");
    let _ = child.wait();
    let first_out = first_out.expect("a stdout line").expect("utf-8");
    (lines, first_out)
}

#[test]
fn a_member_logs_at_info_by_default_to_stderr() {
    let (lines, out) = log_lines(&[], |_| true);
    let log = &lines[0];
    assert!(log.contains(" INFO "), "{log}");
    assert!(log.contains("plexus::"), "a plexus::<area> target: {log}");
    assert!(out.starts_with("LISTENING "), "{out}");
}

#[test]
fn log_format_json_writes_one_json_object_per_line() {
    // Up to the first cluster line: the cluster's events are logged in a
    // span naming the node and the member.
    let (lines, out) = log_lines(&["--log-format", "json"], |l| {
        l.contains("\"target\":\"plexus::cluster\"")
    });
    for log in &lines {
        let v: serde_json::Value = serde_json::from_str(log).expect("a JSON log line");
        assert_eq!(v["level"], "INFO", "{log}");
        let target = v["target"].as_str().unwrap_or_default();
        assert!(target.starts_with("plexus::"), "{log}");
        assert!(v["fields"]["message"].is_string(), "{log}");
    }
    // The loop stopped at the cluster line, or the process ended first.
    let last = lines.last().expect("a log line");
    let cluster: serde_json::Value = serde_json::from_str(last).expect("a JSON log line");
    assert_eq!(cluster["target"], "plexus::cluster", "{lines:?}");
    assert_eq!(cluster["span"]["name"], "cluster", "{lines:?}");
    assert!(cluster["span"]["node"].is_string(), "{lines:?}");
    assert_eq!(
        cluster["span"]["member"].as_str(),
        out.strip_prefix("LISTENING "),
        "{lines:?}"
    );
}

#[test]
fn a_log_filter_that_does_not_parse_exits_2() {
    let out = server_command()
        .args([
            "--listen",
            "tcp://127.0.0.1:0",
            "--log",
            "plexus=[[nonsense",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("the process runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "it started: {out:?}");
}
