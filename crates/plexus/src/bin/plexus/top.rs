//! `plexus top`: a live terminal view of a cluster, from one member's
//! management endpoint (`--management URL`, as the other operator
//! commands).
//!
//! Every `--every-ms` (default 1 s) it asks `GET /cluster/members` (the
//! members, their states, incarnations and up-numbers: the whole cluster
//! as that member sees it) and `GET /view/snapshot` (ring shares, and that
//! node's live actors, dead letters, links and replicator keys; left out
//! if the member's endpoint has no live view) and draws one frame. On a
//! terminal each frame replaces the last (clear screen and home, plain
//! ANSI); otherwise frames follow each other, so the output can be piped
//! or logged. `--once` draws one frame and exits: 0, or as `plexus
//! members` if the endpoint refused (1) or could not be reached (2).
//! Without `--once` an unreachable endpoint is shown in the frame and
//! asked again at the next one (a member being restarted comes back).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

use crate::ops::{CallError, Endpoint};

/// `plexus top`.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// Draw one frame and exit.
    #[arg(long)]
    once: bool,
    /// Between frames.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    every_ms: u64,
    #[command(flatten)]
    endpoint: Endpoint,
}

/// Why a frame could not be drawn.
#[derive(Debug, thiserror::Error)]
enum FrameError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("refused ({status}): {body}")]
    Refused { status: u16, body: String },
    #[error("the answer is not the members' JSON")]
    NotMembers,
}

pub fn run(args: TopArgs) -> ExitCode {
    let terminal = std::io::stdout().is_terminal();
    let every = Duration::from_millis(args.every_ms.max(100));
    loop {
        let drawn = frame(&args.endpoint);
        let text = match &drawn {
            Ok(text) => text.clone(),
            Err(e) => format!("plexus top: {}: {e}\n", args.endpoint.url()),
        };
        if args.once {
            return match drawn {
                Ok(_) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(FrameError::Refused { .. }) => {
                    eprint!("{text}");
                    ExitCode::FAILURE
                }
                Err(_) => {
                    eprint!("{text}");
                    ExitCode::from(2)
                }
            };
        }
        let mut out = std::io::stdout().lock();
        // Clear and home: the frame replaces the last one on a terminal.
        let clear = if terminal { "\x1b[H\x1b[2J" } else { "" };
        if write!(out, "{clear}{text}")
            .and_then(|()| if terminal { Ok(()) } else { writeln!(out) })
            .and_then(|()| out.flush())
            .is_err()
        {
            // Nobody reads the frames any more.
            return ExitCode::SUCCESS;
        }
        drop(out);
        std::thread::sleep(every);
    }
}

/// One frame, from the endpoint's answers now.
fn frame(endpoint: &Endpoint) -> Result<String, FrameError> {
    let answer = endpoint.call("GET", "/cluster/members", "")?;
    if answer.status != 200 {
        return Err(FrameError::Refused {
            status: answer.status,
            body: answer.body,
        });
    }
    let members: Value = serde_json::from_str(&answer.body).map_err(|_| FrameError::NotMembers)?;
    if !members["members"].is_array() {
        return Err(FrameError::NotMembers);
    }
    // Older members have no live view; the frame does without.
    let snapshot = endpoint
        .call("GET", "/view/snapshot", "")
        .ok()
        .filter(|a| a.status == 200)
        .and_then(|a| serde_json::from_str::<Value>(&a.body).ok());
    Ok(draw(&members, snapshot.as_ref()))
}

/// The text of a frame: the members (`GET /cluster/members`), then what
/// the snapshot adds, if there is one.
fn draw(members: &Value, snapshot: Option<&Value>) -> String {
    let mut out = String::new();
    let list = members["members"].as_array().map_or(&[][..], Vec::as_slice);
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for m in list {
        let state = m["state"].as_str().unwrap_or("?");
        match counts.iter_mut().find(|(s, _)| *s == state) {
            Some((_, n)) => *n += 1,
            None => counts.push((state, 1)),
        }
    }
    let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let _ = writeln!(
        out,
        "plexus top: cluster {} seen from {}: {}",
        members["cluster"].as_str().unwrap_or("?"),
        members["this"].as_str().unwrap_or("?"),
        summary.join(", ")
    );
    let share = |address: &str| -> String {
        snapshot
            .and_then(|s| s["ring"]["shares"].as_array())
            .and_then(|shares| shares.iter().find(|r| r["address"] == address))
            .and_then(|r| r["share"].as_f64())
            .map_or_else(|| "-".to_owned(), |x| format!("{:.1} %", 100.0 * x))
    };
    let _ = writeln!(
        out,
        "\n{:<40} {:<8} {:>20} {:>4} {:>8}",
        "ADDRESS", "STATE", "INCARNATION", "UP#", "RING"
    );
    for m in list {
        let address = m["address"].as_str().unwrap_or("?");
        let this = if m["address"] == members["this"] {
            " *"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<40} {:<8} {:>20} {:>4} {:>8}{this}",
            address,
            m["state"].as_str().unwrap_or("?"),
            // As text first: a JSON value's Display ignores widths.
            m["incarnation"].to_string(),
            m["up_number"].to_string(),
            share(address),
        );
    }
    let Some(s) = snapshot else {
        return out;
    };
    let count = |v: &Value| v.as_array().map_or(0, Vec::len);
    let _ = writeln!(
        out,
        "\nthis node ({}): {} live actors, {} dead letters, {} links, {} lanes",
        s["node"].as_str().unwrap_or("?"),
        s["actors"]["live"],
        s["dead_letters"],
        count(&s["links"]),
        count(&s["lanes"]),
    );
    match s["replicator"].as_object() {
        Some(r) => {
            let _ = writeln!(
                out,
                "replicator: {} keys, {} members, {} packets sent, {} received",
                r["keys"], r["members"], r["packets_sent"], r["packets_received"]
            );
        }
        None => {
            let _ = writeln!(out, "replicator: none");
        }
    }
    if let Some(links) = s["links"].as_array().filter(|l| !l.is_empty()) {
        let _ = writeln!(
            out,
            "\n{:<40} {:>10} {:>16}",
            "LINK", "DROPPED", "SEND BUF FULL"
        );
        for l in links {
            let _ = writeln!(
                out,
                "{:<40} {:>10} {:>16}",
                l["peer"].as_str().unwrap_or("?"),
                l["dropped"].to_string(),
                l["send_buffer_full"].to_string()
            );
        }
    }
    if let Some(deepest) = s["actors"]["deepest"].as_array().filter(|d| !d.is_empty()) {
        let _ = writeln!(out, "\n{:<40} {:>10}", "DEEPEST MAILBOX", "QUEUED");
        for d in deepest {
            let _ = writeln!(
                out,
                "{:<40} {:>10}",
                d["actor"].as_str().unwrap_or("?"),
                d["queued"].to_string()
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_lists_the_members_with_their_states_and_shares() {
        let members = serde_json::json!({
            "cluster": "test",
            "this": "tcp://a:1",
            "members": [
                {"address": "tcp://a:1", "state": "up", "incarnation": 7, "up_number": 1},
                {"address": "tcp://b:1", "state": "suspect", "incarnation": 9, "up_number": 2},
            ],
        });
        let snapshot = serde_json::json!({
            "node": "n1",
            "ring": {"shares": [{"address": "tcp://a:1", "share": 0.5}]},
            "actors": {"live": 12, "deepest": []},
            "dead_letters": 3,
            "links": [],
            "lanes": [],
            "replicator": null,
        });
        let text = draw(&members, Some(&snapshot));
        assert!(
            text.contains("cluster test seen from tcp://a:1: 1 up, 1 suspect"),
            "{text}"
        );
        let a = text
            .lines()
            .find(|l| l.starts_with("tcp://a:1"))
            .expect("a's row");
        assert!(
            a.contains(" up ") && a.contains("50.0 %") && a.ends_with(" *"),
            "{a}"
        );
        let b = text
            .lines()
            .find(|l| l.starts_with("tcp://b:1"))
            .expect("b's row");
        assert!(b.contains(" suspect ") && b.contains(" 9 "), "{b}");
        assert!(text.contains("12 live actors, 3 dead letters"), "{text}");
        assert!(!draw(&members, None).contains("this node"));
    }
}
