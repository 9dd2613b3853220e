//! `/ready` is true only once a member is Up, and a rolling restart
//! (SIGTERM, start again at the same address, wait for `/ready`) of each of
//! three members in turn keeps every member in the cluster: the others see
//! each restarted member leave and come back up in a new life, and nobody
//! is ever downed.

mod common;

use common::http_get;
use common::procs::{member_command, port, Proc, QUICK};

fn member(name: &str, listen: &str, seed: Option<&str>) -> Proc {
    let mut cmd = member_command();
    cmd.args(QUICK).args(["--listen", listen]);
    if let Some(s) = seed {
        cmd.args(["--seed", s]);
    }
    Proc::start(name, cmd)
}

#[test]
fn ready_is_false_until_the_member_is_up() {
    // Its only seed answers nothing: it stays joining.
    let mut joining = member("joining", "tcp://127.0.0.1:0", Some("tcp://127.0.0.1:9"));
    let (status, body) = http_get(&format!("{}/ready", joining.management()));
    assert_eq!((status, body.trim()), (503, "not ready: joining"));
    assert_eq!(http_get(&format!("{}/alive", joining.management())).0, 200);
    joining.kill();
    let mut alone = member("alone", "tcp://127.0.0.1:0", None);
    alone.expect_line("up", |l| l == "MEMBERS up=1");
    let (status, body) = http_get(&format!("{}/ready", alone.management()));
    assert_eq!((status, body.trim()), (200, "ready: up"));
}

#[test]
fn a_rolling_restart_keeps_every_member_in_the_cluster() {
    let mut members = vec![member("m0", "tcp://127.0.0.1:0", None)];
    let first = members[0].address.clone();
    for i in 1..3 {
        members.push(member(&format!("m{i}"), "tcp://127.0.0.1:0", Some(&first)));
    }
    for m in &mut members {
        m.expect_line("three up", |l| l == "MEMBERS up=3");
    }
    for victim in [1, 2, 0] {
        let address = members[victim].address.clone();
        let old = members[victim].incarnation;
        let status = members[victim].terminate();
        assert!(status.success(), "{address}: {status:?}");
        // Through a member that stays up.
        let seed = members[(victim + 1) % 3].address.clone();
        let listen = format!("tcp://127.0.0.1:{}", port(&address));
        let name = format!("{}'", members[victim].name);
        let mut back = member(&name, &listen, Some(&seed));
        assert!(back.incarnation > old);
        back.expect_line("three up again", |l| l == "MEMBERS up=3");
        let (status, _) = http_get(&format!("{}/ready", back.management()));
        assert_eq!(status, 200, "{name} is up: /ready says so");
        for (i, m) in members.iter_mut().enumerate() {
            if i == victim {
                continue;
            }
            m.expect_event("the restarted member up in its new life", |e| {
                e.kind == "member-up" && e.address == address && e.incarnation == back.incarnation
            });
        }
        members[victim] = back;
    }
    for m in &members {
        let downed: Vec<_> = m
            .events()
            .into_iter()
            .filter(|e| e.kind == "member-downed" || e.kind == "self-downed")
            .collect();
        assert!(downed.is_empty(), "{}: {downed:?}", m.name);
    }
}
