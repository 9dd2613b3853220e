//! Bad input to the `plexus-linkem` binary that is refused before anything
//! is created (no privileges needed).

use std::process::{Command, Output};

fn linkem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plexus-linkem"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn refused_with(args: &[&str], code: i32, message: &str) {
    let out = linkem(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(
        stderr.contains(message),
        "{args:?}: {stderr:?} lacks {message:?}"
    );
    let ns = Command::new("ip").args(["netns", "list"]).output();
    if let Ok(ns) = ns {
        assert!(
            !String::from_utf8_lossy(&ns.stdout).contains("lcli-"),
            "a namespace was created"
        );
    }
}

#[test]
fn loss_above_100_percent_is_refused() {
    refused_with(
        &["run", "--prefix", "lcli", "--loss", "120", "--", "true"],
        2,
        "--loss 120: a probability must be between 0 and 100 %; nothing was created",
    );
}

#[test]
fn loss_per_direction_is_checked_for_each_direction() {
    refused_with(
        &["selftest", "--prefix", "lcli", "--loss", "5/101"],
        2,
        "--loss 101: a probability",
    );
}

#[test]
fn negative_delay_is_refused() {
    refused_with(
        &["run", "--prefix", "lcli", "--delay-ms", "-5"],
        2,
        "--delay-ms -5: a duration must be",
    );
}

#[test]
fn zero_rate_is_refused() {
    refused_with(
        &["run", "--prefix", "lcli", "--rate-mbit", "0"],
        2,
        "--rate-mbit 0: a rate must be more than 0",
    );
}

#[test]
fn zero_queue_and_malformed_numbers_are_refused() {
    refused_with(
        &[
            "run",
            "--prefix",
            "lcli",
            "--rate-mbit",
            "1",
            "--queue-packets",
            "0",
        ],
        2,
        "at least 1 packet",
    );
    refused_with(
        &["run", "--prefix", "lcli", "--jitter-ms", "lots"],
        2,
        "expected a number",
    );
}

#[test]
fn exec_without_a_running_link_says_how_to_start_one() {
    refused_with(
        &["exec", "a", "--prefix", "lcli", "--", "true"],
        1,
        "no link with prefix `lcli` is running",
    );
}

#[test]
fn a_prefix_that_cannot_name_interfaces_is_refused() {
    refused_with(
        &["exec", "a", "--prefix", "Bad-Prefix", "--", "true"],
        1,
        "prefix \"Bad-Prefix\"",
    );
}
