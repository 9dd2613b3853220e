//! The real link: namespaces, TUN devices and the forwarder. These tests
//! need root (CAP_NET_ADMIN, CAP_SYS_ADMIN), `ip` and /dev/net/tun, so they
//! are `#[ignore = "needs root"]`: `cargo test -- --ignored` runs them
//! (`.ci/run` does, as root), and there a missing privilege fails them
//! instead of letting them pass without running.
//!
//! Every test uses its own prefix (`lt<pid><letter>`) and checks that
//! nothing with that prefix is left afterwards.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use plexus_linkem::probe::{self, ProbePlan};
use plexus_linkem::{netns, Link, LinkConfig};

const EXE: &str = env!("CARGO_BIN_EXE_plexus-linkem");

/// Fails the test unless it can do what it needs (it runs only when asked
/// for with `--ignored`).
fn require_privileges() {
    if let Err(e) = netns::check_privileges() {
        panic!("needs root: {e}");
    }
    assert!(Path::new("/dev/net/tun").exists(), "needs /dev/net/tun");
    assert!(
        Command::new("ip")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success()),
        "needs the `ip` command (iproute2)"
    );
}

fn prefix(tag: char) -> String {
    format!("lt{}{tag}", std::process::id() % 1_000_000)
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes a namespace the test made itself, even if the test fails.
struct OwnNamespace(String);

impl Drop for OwnNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Runs `plexus-linkem cleanup --prefix` if a test fails half way.
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = Command::new(EXE)
            .args(["cleanup", "--prefix", &self.0])
            .output();
    }
}

/// Kills the link process if the test fails before it ends it.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn assert_nothing_left(prefix: &str) {
    let ns = ip(&["netns", "list"]);
    assert!(!ns.contains(&format!("{prefix}-")), "namespaces left: {ns}");
    let links = ip(&["-o", "link"]);
    assert!(
        !links.contains(&format!("{prefix}-")),
        "interfaces left: {links}"
    );
    assert!(
        !Path::new(netns::STATE_DIR)
            .join(format!("{prefix}.pid"))
            .exists(),
        "pid file left"
    );
}

fn config(loss: f64) -> LinkConfig {
    let mut c = LinkConfig::default();
    c.a_to_b.set_loss_percent(loss).expect("valid");
    c.b_to_a.set_loss_percent(loss).expect("valid");
    c
}

fn plan(count: u32) -> ProbePlan {
    ProbePlan {
        count,
        interval: Duration::from_millis(1),
        payload: 64,
        idle: Duration::from_millis(300),
    }
}

#[test]
#[ignore = "needs root"]
fn link_delivers_every_probe_at_zero_loss_and_is_gone_after_shutdown() {
    require_privileges();
    let p = prefix('d');
    let _leftovers = Leftovers(p.clone());
    let link = Link::up(&p, config(0.0)).expect("link up");
    assert!(ip(&["netns", "list"]).contains(&format!("{p}-a")));
    let report = probe::run(&link, Path::new(EXE), &plan(200)).expect("probe runs");
    assert_eq!(report.distinct, 200, "{report:?}");
    let [ab, _ba] = link.shutdown().expect("clean teardown");
    assert!(ab.delivered >= 200, "{ab:?}");
    assert_nothing_left(&p);
}

#[test]
#[ignore = "needs root"]
fn link_at_full_loss_delivers_nothing() {
    require_privileges();
    let p = prefix('l');
    let _leftovers = Leftovers(p.clone());
    let link = Link::up(&p, config(100.0)).expect("link up");
    let report = probe::run(&link, Path::new(EXE), &plan(100)).expect("probe runs");
    assert_eq!(report.received, 0, "{report:?}");
    let [ab, _] = link.shutdown().expect("clean teardown");
    assert_eq!(ab.delivered, 0);
    assert!(ab.lost >= 100, "{ab:?}");
    assert_nothing_left(&p);
}

#[test]
#[ignore = "needs root"]
fn a_running_link_is_cut_and_healed_by_new_settings() {
    require_privileges();
    let p = prefix('r');
    let _leftovers = Leftovers(p.clone());
    let link = Link::up(&p, config(0.0)).expect("link up");
    let report = probe::run(&link, Path::new(EXE), &plan(100)).expect("probe runs");
    assert_eq!(report.distinct, 100, "before the cut: {report:?}");
    link.set_config(config(100.0)).expect("the forwarder runs");
    let report = probe::run(&link, Path::new(EXE), &plan(100)).expect("probe runs");
    assert_eq!(report.received, 0, "cut: {report:?}");
    link.set_config(config(0.0)).expect("the forwarder runs");
    let report = probe::run(&link, Path::new(EXE), &plan(100)).expect("probe runs");
    assert_eq!(report.distinct, 100, "healed: {report:?}");
    let [ab, _] = link.shutdown().expect("clean teardown");
    assert!(ab.lost >= 100, "{ab:?}");
    assert_nothing_left(&p);
}

#[test]
#[ignore = "needs root"]
fn dropping_a_link_removes_it() {
    require_privileges();
    let p = prefix('x');
    let _leftovers = Leftovers(p.clone());
    drop(Link::up(&p, config(0.0)).expect("link up"));
    assert_nothing_left(&p);
}

#[test]
#[ignore = "needs root"]
fn existing_namespace_of_the_same_name_is_refused_and_left_alone() {
    require_privileges();
    let p = prefix('e');
    let _leftovers = Leftovers(p.clone());
    let theirs = OwnNamespace(format!("{p}-b"));
    ip(&["netns", "add", &theirs.0]);
    let out = Command::new(EXE)
        .args(["run", "--prefix", &p, "--", "true"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "network namespace `{p}-b` already exists; it is left untouched"
        )),
        "{stderr}"
    );
    let ns = ip(&["netns", "list"]);
    assert!(
        ns.contains(&theirs.0),
        "someone else's namespace was removed"
    );
    assert!(!ns.contains(&format!("{p}-a")), "side a was left behind");
    // `cleanup` does not touch it either: plexus-linkem did not make it.
    let out = Command::new(EXE)
        .args(["cleanup", "--prefix", &p])
        .output()
        .expect("runs");
    assert!(out.status.success());
    assert!(ip(&["netns", "list"]).contains(&theirs.0));
}

#[test]
#[ignore = "needs root"]
fn failing_command_in_a_side_propagates_its_exit_code_and_removes_the_link() {
    require_privileges();
    let p = prefix('f');
    let _leftovers = Leftovers(p.clone());
    let out = Command::new(EXE)
        .args([
            "run",
            "--prefix",
            &p,
            "--delay-ms",
            "5",
            "--",
            "sh",
            "-c",
            "exit 3",
            ":::",
            "sleep",
            "30",
        ])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("`sh -c exit 3` in side a failed (exit status: 3)"),
        "{stderr}"
    );
    assert_nothing_left(&p);
}

#[test]
#[ignore = "needs root"]
fn commands_run_in_their_own_side_with_their_own_address() {
    require_privileges();
    let p = prefix('c');
    let _leftovers = Leftovers(p.clone());
    let check = |addr: &str| format!("ip -o addr show | grep -q 'inet {addr}/24'");
    let out = Command::new(EXE)
        .args([
            "run",
            "--prefix",
            &p,
            "--",
            "sh",
            "-c",
            &check("198.51.100.1"),
            ":::",
            "sh",
            "-c",
            &check("198.51.100.2"),
        ])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_nothing_left(&p);
}

#[test]
#[ignore = "needs root"]
fn a_serving_link_runs_exec_commands_and_is_removed_on_sigterm() {
    require_privileges();
    let p = prefix('s');
    let _leftovers = Leftovers(p.clone());
    let mut server = Server(
        Command::new(EXE)
            .args(["run", "--prefix", &p, "--loss", "0"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs"),
    );
    // Piped above.
    let mut lines = BufReader::new(server.0.stderr.take().expect("piped")).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("Ctrl-C removes the link"));
    assert!(ready.is_some(), "the link never said it was up");
    let exec = |side: &str, cmd: &[&str]| {
        Command::new(EXE)
            .args(["exec", side, "--prefix", &p, "--"])
            .args(cmd)
            .status()
            .expect("runs")
    };
    assert!(exec("b", &["true"]).success());
    assert_eq!(exec("a", &["sh", "-c", "exit 4"]).code(), Some(4));
    let out = Command::new(EXE)
        .args(["cleanup", "--prefix", &p])
        .output()
        .expect("runs");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is running"),
        "cleanup must refuse a live link"
    );
    Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .expect("kill runs");
    let status = server.0.wait().expect("server exits");
    assert!(status.success(), "{status}");
    assert_nothing_left(&p);
}

#[test]
fn missing_privileges_are_refused_with_a_clear_message() {
    let p = prefix('p');
    let mut cmd = if netns::check_privileges().is_ok() {
        // Root: drop the two capabilities for the child with setpriv.
        if Command::new("setpriv").arg("--version").output().is_err() {
            println!("skipped: needs setpriv to drop privileges");
            return;
        }
        let mut c = Command::new("setpriv");
        c.args([
            "--bounding-set=-net_admin,-sys_admin",
            "--inh-caps=-net_admin,-sys_admin",
            "--",
            EXE,
        ]);
        c
    } else {
        Command::new(EXE)
    };
    let out = cmd
        .args(["run", "--prefix", &p, "--", "true"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("needs CAP_NET_ADMIN and CAP_SYS_ADMIN"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was created"), "{stderr}");
}
