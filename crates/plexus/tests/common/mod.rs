//! Shared by the multi-process tests of the `plexus` command: each test
//! file uses a part of it.
#![allow(dead_code)]

#[path = "../../../plexus-remote/tests/common/certified.rs"]
pub mod certified;
pub mod node_process;
pub mod procs;
#[path = "../../src/bin/plexus/counter.rs"]
pub mod service;

/// The variable a role reads its cookie from (secrets never go on argv).
pub const COOKIE_VAR: &str = "PLEXUS_NODE__COOKIE";

/// `plexus ROLE` (arguments follow), its management endpoint on a free
/// port: tests run in parallel, and the default 8558 would be taken.
pub fn plexus(role: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_plexus"));
    cmd.arg(role).env("PLEXUS_MANAGEMENT__BIND", "127.0.0.1:0");
    cmd
}

/// [`plexus`] with `args`, a `--cookie X` among them moved to the
/// environment, where a role reads its cookie from.
pub fn plexus_with<S: AsRef<str>>(role: &str, args: &[S]) -> std::process::Command {
    let mut cmd = plexus(role);
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        if a.as_ref() == "--cookie" {
            if let Some(cookie) = rest.next() {
                cmd.env(COOKIE_VAR, cookie.as_ref());
            }
        } else {
            cmd.arg(a.as_ref());
        }
    }
    cmd
}

/// `GET url` (`http://host:port/path`) on a connection of its own: the
/// status and the body.
pub fn http_get(url: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = std::net::TcpStream::connect(authority).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, body.to_owned())
}
