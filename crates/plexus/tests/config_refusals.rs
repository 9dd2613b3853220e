//! A configuration that cannot work is refused before anything starts:
//! `plexus member` exits 2, says on stderr which file or variable, which
//! key and why (the line and column of a syntax error, the nearest known
//! key of an unknown one, the allowed range), and prints nothing on
//! stdout (no `LISTENING`: no socket was opened).

mod common;

use std::process::Output;

fn refused(out: &Output, wanted: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "started: {out:?}");
    for w in wanted {
        assert!(stderr.contains(w), "`{w}` not in: {stderr}");
    }
}

fn member_with(file: &str, toml: &str) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(file);
    std::fs::write(&path, toml).expect("write");
    common::plexus("member")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("runs")
}

#[test]
fn files_that_cannot_work_are_refused_with_their_cause() {
    refused(
        &member_with("syntax.toml", "[cluster]\nname = \"a\n"),
        &["syntax.toml", "line 2, column 10"],
    );
    refused(
        &member_with("typo.toml", "[cluster]\nprobe_intervall = \"1s\"\n"),
        &[
            "typo.toml",
            "unknown key `cluster.probe_intervall`",
            "did you mean `cluster.probe_interval`?",
        ],
    );
    refused(
        &member_with("type.toml", "[cluster]\nprobe_interval = 200\n"),
        &["`cluster.probe_interval`", "a duration with a unit"],
    );
    refused(
        &member_with("range.toml", "[data]\nbuckets = 0\n"),
        &["`data.buckets`", "1 to 1,048,576"],
    );
    refused(
        &member_with("strategy.toml", "[cluster]\nsplit_brain = \"majority\"\n"),
        &["`cluster.split_brain`", "static-quorum=N"],
    );
}

#[test]
fn secrets_and_the_default_cookie_are_checked_before_anything_starts() {
    refused(
        &common::plexus("member")
            .args(["--listen", "tcp://0.0.0.0:0"])
            .env_remove(common::COOKIE_VAR)
            .output()
            .expect("runs"),
        &["`node.cookie`", "tcp://0.0.0.0:0", "PLEXUS_NODE__COOKIE"],
    );
    refused(
        &common::plexus("member")
            .env("PLEXUS_NODE__COOKIE_FILE", "/nonexistent/plexus-cookie")
            .output()
            .expect("runs"),
        &["`node.cookie_file`", "/nonexistent/plexus-cookie"],
    );
    refused(
        &common::plexus("member")
            .env("PLEXUS_CLUSTER__NAMEE", "x")
            .output()
            .expect("runs"),
        &[
            "environment variable PLEXUS_CLUSTER__NAMEE",
            "did you mean `cluster.name`?",
        ],
    );
    refused(
        &common::plexus("member")
            .args(["--config", "/nonexistent/plexus.toml"])
            .output()
            .expect("runs"),
        &["/nonexistent/plexus.toml"],
    );
}

#[test]
fn the_reference_configuration_is_printed_and_a_file_is_checked() {
    let out = common::plexus("config")
        .arg("defaults")
        .output()
        .expect("runs");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        plexus::config::REFERENCE
    );
    let out = common::plexus("config")
        .args(["check", "--config"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/quick-start/b.toml"
        ))
        .env("PLEXUS_NODE__COOKIE", "a-secret")
        .output()
        .expect("runs");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(shown.contains("name = \"quick-start\""), "{shown}");
    assert!(!shown.contains("a-secret"), "the cookie is masked: {shown}");
}
