//! `plexus-node` stops cleanly on SIGTERM (exit code 0) and logs at INFO
//! to stderr by default.
#![cfg(all(feature = "tls", feature = "process"))]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Turns a hang into a failure; not a bound on how fast it stops.
const GUARD: Duration = Duration::from_secs(60);

#[test]
fn plexus_node_exits_0_on_sigterm_and_logs_at_info() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plexus-node"))
        .args(["--listen", "tcp://127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start plexus-node");
    // Piped above.
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let read_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let up = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("NODE "));
    assert!(up, "plexus-node exited before serving");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let (tx, rx) = mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let Ok(status) = rx.recv_timeout(GUARD) else {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!("plexus-node did not exit on SIGTERM");
    };
    let status = status.expect("wait for plexus-node");
    let log = read_err.join().expect("the stderr reader");
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.lines().all(|l| !l.contains('\u{1b}')),
        "colour in a pipe: {log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains(" INFO plexus::remote") && l.contains("shutting down")),
        "{log}"
    );
}

#[test]
fn plexus_node_help_exits_0() {
    let out = Command::new(env!("CARGO_BIN_EXE_plexus-node"))
        .arg("--help")
        .output()
        .expect("run plexus-node --help");
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--log FILTER") && help.contains("--log-format"),
        "{help}"
    );
}
