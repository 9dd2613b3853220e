//! Five `plexus member` processes on 127.0.0.1 form a cluster; one is
//! killed with SIGKILL and every other one downs it; restarted on the same
//! port it rejoins under a higher incarnation; one leaves on SIGTERM and
//! the others see it leave, not fail.
//!
//! The assertions follow the processes' event lines in order; the time
//! from the kill to the last downing is printed, not bounded (its bound is
//! measured by `plexus-bench cluster-procs`).

mod common;

use std::time::Instant;

use common::procs::{member_command, port, Proc, QUICK};

fn member(name: &str, listen: &str, seeds: &[&str]) -> Proc {
    let mut cmd = member_command();
    cmd.args(QUICK).args(["--listen", listen]);
    for s in seeds {
        cmd.args(["--seed", s]);
    }
    Proc::start(name, cmd)
}

#[test]
fn five_processes_see_a_kill_a_rejoin_and_a_leave() {
    let mut members = vec![member("m0", "tcp://127.0.0.1:0", &[])];
    let seed = members[0].address.clone();
    for i in 1..5 {
        members.push(member(&format!("m{i}"), "tcp://127.0.0.1:0", &[&seed]));
    }
    for m in &mut members {
        m.expect_line("five members up", |l| l == "MEMBERS up=5");
    }

    // kill -9 a member that is not the seed: every other one downs it.
    let victim = members[2].address.clone();
    let old_incarnation = members[2].incarnation;
    let killed_at = Instant::now();
    members[2].kill();
    for (i, m) in members.iter_mut().enumerate() {
        if i == 2 {
            continue;
        }
        let down = m.expect_event("downing of the killed member", |e| {
            e.kind == "member-downed" && e.address == victim
        });
        assert_eq!(down.incarnation, old_incarnation);
        assert!(
            down.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("split-brain:keep-majority:4/5")
                    || r.starts_with("reported-by:")),
            "{down:?}"
        );
    }
    println!(
        "kill -9 to the last downing: {:.2} s",
        killed_at.elapsed().as_secs_f64()
    );

    // Restarted on the same port, it comes back under a new incarnation.
    members[2] = member(
        "m2'",
        &format!("tcp://127.0.0.1:{}", port(&victim)),
        &[&seed],
    );
    assert_eq!(members[2].address, victim);
    let new_incarnation = members[2].incarnation;
    assert!(new_incarnation > old_incarnation);
    for m in &mut members {
        let up = m.expect_event("the restarted member up", |e| {
            e.kind == "member-up" && e.address == victim && e.incarnation > old_incarnation
        });
        // At least its new life's incarnation: a suspicion it refuted
        // while joining raises it further.
        assert!(up.incarnation >= new_incarnation, "{up:?}");
    }
    members[2].expect_line("five members up", |l| l == "MEMBERS up=5");

    // SIGTERM: a graceful leave, seen as one by the others.
    let leaver = members[4].address.clone();
    let status = members[4].terminate();
    assert!(status.success(), "{status}");
    members[4].expect_line("its leave", |l| l.starts_with("EVENT left "));
    for m in &mut members[..4] {
        m.expect_event("the leaver removed", |e| {
            e.kind == "member-removed" && e.address == leaver
        });
        assert!(
            !m.events()
                .iter()
                .any(|e| e.kind == "member-downed" && e.address == leaver),
            "{}: a leaving member was downed",
            m.name
        );
    }
}

#[test]
fn bad_flags_are_refused_with_a_message() {
    let out = member_command()
        .args(["--split-brain", "majority"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("static-quorum=N"));
    let out = member_command()
        .args(["--tls-cert", "n1.pem"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-key"));
    let out = member_command()
        .args(["--listen", "nope://x"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
}
