//! The README's quick start, command by command: three members from the
//! three TOML files of `examples/quick-start`, `plexus members` lists three
//! up, `plexus data incr visits` on one and `plexus data get visits` on
//! another agree, `plexus down` of one is seen by the others, and the
//! calls without the token, for an unknown member or for a key of another
//! type are refused with their reason.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::procs::Proc;

const COOKIE: &str = "quick-start-cookie";
const TOKEN: &str = "quick-start-token-1234";

fn example(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/quick-start")
        .join(file)
}

/// `plexus member --config examples/quick-start/<file>`, with the
/// README's exported variables.
fn member(name: &str, file: &str) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plexus"));
    cmd.args(["member", "--config"])
        .arg(example(file))
        .env("PLEXUS_NODE__COOKIE", COOKIE)
        .env("PLEXUS_MANAGEMENT__TOKEN", TOKEN);
    Proc::start(name, cmd)
}

/// An operator command, with the README's exported token.
fn plexus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plexus"))
        .args(args)
        .env("PLEXUS_MANAGEMENT__TOKEN", TOKEN)
        .env_remove("PLEXUS_MANAGEMENT_URL")
        .output()
        .expect("plexus runs")
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn three_members_from_toml_agree_on_members_and_data_and_see_a_downing() {
    let mut a = member("a", "a.toml");
    let mut b = member("b", "b.toml");
    let mut c = member("c", "c.toml");
    for m in [&mut a, &mut b, &mut c] {
        m.expect_line("three members up", |l| l == "MEMBERS up=3");
    }

    // `plexus members` (a's endpoint, the default one): three up.
    let listed = stdout(&plexus(&["members", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&listed).expect("JSON");
    assert_eq!(v["cluster"], "quick-start");
    let states: Vec<&str> = v["members"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|m| m["state"].as_str().expect("a state"))
        .collect();
    assert_eq!(states, ["up", "up", "up"], "{listed}");
    let table = stdout(&plexus(&["members"]));
    assert_eq!(
        table.lines().filter(|l| l.contains(" up ")).count(),
        3,
        "{table}"
    );

    // Written on a at majority, read on b at majority: they agree.
    let on_b = ["--management", "http://127.0.0.1:8559"];
    stdout(&plexus(&["data", "incr", "visits"]));
    let got = stdout(&plexus(&[&["data", "get", "visits"][..], &on_b].concat()));
    assert_eq!(got.trim(), "1");
    stdout(&plexus(&["data", "add", "visits", "2"]));
    let got = stdout(&plexus(&[&["data", "get", "visits"][..], &on_b].concat()));
    assert_eq!(got.trim(), "3");

    // Refused, with the reason.
    let no_token = Command::new(env!("CARGO_BIN_EXE_plexus"))
        .args(["data", "incr", "visits"])
        .env_remove("PLEXUS_MANAGEMENT__TOKEN")
        .output()
        .expect("runs");
    assert_eq!(no_token.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&no_token.stderr).contains("Authorization"),
        "{no_token:?}"
    );
    let other_type = plexus(&["data", "get", "visits", "--type", "pncounter"]);
    assert_eq!(other_type.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&other_type.stderr).contains("holds a"),
        "{other_type:?}"
    );
    let unknown = plexus(&["down", "tcp://127.0.0.1:4999"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no member has the address"),
        "{unknown:?}"
    );

    // c downed through a: b hears of it.
    stdout(&plexus(&["down", "tcp://127.0.0.1:4103"]));
    let downed = b.expect_event("c downed", |e| {
        e.kind == "member-downed" && e.address == "tcp://127.0.0.1:4103"
    });
    // Heard from a, or from c itself once it was told: whichever came first.
    let by = downed.reason.as_deref().unwrap_or_default();
    assert!(
        by == "reported-by:tcp://127.0.0.1:4101" || by == "reported-by:tcp://127.0.0.1:4103",
        "{downed:?}"
    );
    // c is told, too.
    c.expect_event("c hears it is down", |e| e.kind == "self-downed");
}
