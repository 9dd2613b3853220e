//! `plexus node` and `plexus serve` stop cleanly on SIGTERM: exit code 0,
//! and a last log line saying so; `plexus serve --access-log` logs each
//! request.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Turns a hang into a failure; not a bound on how fast it stops.
const GUARD: Duration = Duration::from_secs(60);

/// Starts `plexus args`, waits for the stdout line starting with `ready`,
/// hands it to `then`, sends SIGTERM, and returns its exit status and
/// stderr.
fn terminate(
    args: &[&str],
    ready: &str,
    then: impl FnOnce(&str),
) -> (std::process::ExitStatus, String) {
    let mut child: Child = Command::new(env!("CARGO_BIN_EXE_plexus"))
        .args(args)
        .env_remove("RUST_LOG")
        // Tests run in parallel: the default 8558 would be taken.
        .env("PLEXUS_MANAGEMENT__BIND", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start plexus");
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
        .find(|l| l.starts_with(ready));
    let Some(up) = up else {
        panic!("plexus {args:?} exited before `{ready}`");
    };
    then(&up);
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("a pid fits i32"));
    kill(pid, Signal::SIGTERM).expect("send SIGTERM");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(GUARD) {
        Ok(status) => status.expect("wait for plexus"),
        Err(_) => {
            let _ = kill(pid, Signal::SIGKILL);
            panic!("plexus {args:?} did not exit on SIGTERM");
        }
    };
    (status, read_err.join().expect("the stderr reader"))
}

#[test]
fn plexus_node_exits_0_on_sigterm() {
    let (status, log) = terminate(&["node", "--listen", "tcp://127.0.0.1:0"], "NODE ", |_| {});
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("shutting down"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn plexus_serve_exits_0_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("plexus-sigterm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    std::fs::write(dir.join("index.html"), "hello\n").expect("write a file");
    let dir_arg = dir.to_string_lossy().into_owned();
    let (status, log) = terminate(
        &[
            "serve",
            &dir_arg,
            "--addr",
            "127.0.0.1:0",
            "--threads",
            "1",
            "--access-log",
        ],
        "serving ",
        |line| {
            // `serving DIR on http://ADDR (1 threads)`
            let addr = line
                .split("http://")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .expect("the address in the serving line");
            let mut conn = std::net::TcpStream::connect(addr).expect("connect");
            conn.write_all(b"GET /missing HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .expect("send a request");
            let mut answer = String::new();
            let _ = conn.read_to_string(&mut answer);
            assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("shutting down"), "{log}");
    let access: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("plexus::http::access"))
        .collect();
    assert_eq!(access.len(), 1, "{log}");
    assert!(
        access[0].contains("path=\"/missing\"") && access[0].contains("status=404"),
        "{log}"
    );
}
