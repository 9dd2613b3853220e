//! Five `plexus member` processes at the default timings. One member
//! at a time is killed with SIGKILL and restarted at its address 0.1 s,
//! 1 s and 12 s after the kill (the last once every other member has
//! downed it). Every other member must report the same events about it:
//! its old life downed and removed, its new one joined and up. Nobody may
//! suspect the new life (nor anyone else), and the new life may not have
//! had to refute a suspicion. The members' warnings about the killed one
//! are rate-limited.
//!
//! The restart delays are the scenario; everything else waits for the
//! members' lines. Suspicions are looked for in what the members printed
//! until the new life has run for [`WATCH_MS`] (its own `STATS` line says
//! when): at the default timings a member that cannot be reached is
//! suspected within about 3 s.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::procs::{member_command, port, Event, Proc};

/// How long after its start a new life is watched for suspicions.
const WATCH_MS: u64 = 8_000;

/// A member at the default timings, printing `STATS` twice a second.
fn member(name: &str, listen: &str, seed: Option<&str>) -> Proc {
    let mut cmd = member_command();
    cmd.args(["--cluster-name", "restarts"])
        .env(common::COOKIE_VAR, "restarts-test")
        .args(["--stats-every-ms", "500", "--listen", listen]);
    if let Some(s) = seed {
        cmd.args(["--seed", s]);
    }
    Proc::start(name, cmd)
}

/// The `t_ms` of a `STATS` line.
fn stats_t_ms(line: &str) -> Option<u64> {
    line.strip_prefix("STATS t_ms=")?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// The events that change who is in the cluster, about `address`'s life
/// `old` ending and its life `new`: kind and incarnation. (The old life's
/// `member-up` may be printed after the kill: an update's member list is
/// the one after its whole batch of events, so `MEMBERS up=5` can come
/// before the last `member-up` of the batch.)
fn lifecycle(events: &[Event], address: &str, old: u64, new: u64) -> Vec<(String, u64)> {
    events
        .iter()
        .filter(|e| e.address == address)
        .filter(|e| match e.kind.as_str() {
            "member-leaving" | "member-downed" | "member-removed" => {
                e.incarnation == old || e.incarnation >= new
            }
            "member-joined" | "member-up" => e.incarnation >= new,
            _ => false,
        })
        .map(|e| (e.kind.clone(), e.incarnation))
        .collect()
}

#[test]
fn a_member_restarted_at_its_address_replaces_its_old_life_everywhere() {
    let mut members = vec![member("m0", "tcp://127.0.0.1:0", None)];
    let seed = members[0].address.clone();
    for i in 1..5 {
        members.push(member(&format!("m{i}"), "tcp://127.0.0.1:0", Some(&seed)));
    }
    for m in &mut members {
        m.expect_line("five members up", |l| l == "MEMBERS up=5");
    }
    for (victim, delay) in [
        (1, Duration::from_millis(100)),
        (2, Duration::from_secs(1)),
        (3, Duration::from_secs(12)),
    ] {
        kill_and_restart(&mut members, victim, delay, &seed);
    }
}

fn kill_and_restart(members: &mut [Proc], victim: usize, delay: Duration, seed: &str) {
    let address = members[victim].address.clone();
    let old = members[victim].incarnation;
    let case = format!("restarted {delay:?} after its kill, {address}");
    let killed_at = Instant::now();
    members[victim].kill();
    let after_downing = delay >= Duration::from_secs(10);
    if after_downing {
        for (i, m) in members.iter_mut().enumerate() {
            if i != victim {
                m.expect_event("the downing of the killed member", |e| {
                    e.kind == "member-downed" && e.address == address && e.incarnation == old
                });
            }
        }
        println!(
            "{case}: downed by all {:.2} s after the kill",
            killed_at.elapsed().as_secs_f64()
        );
    }
    if let Some(left) = delay.checked_sub(killed_at.elapsed()) {
        sleep(left);
    }
    let name = format!("{}'", members[victim].name);
    let listen = format!("tcp://127.0.0.1:{}", port(&address));
    members[victim] = member(&name, &listen, Some(seed));
    assert_eq!(members[victim].address, address);
    let new = members[victim].incarnation;
    assert!(new > old, "{case}: incarnation {new} after {old}");
    for m in members.iter_mut() {
        m.expect_event("the new life up", |e| {
            e.kind == "member-up" && e.address == address && e.incarnation >= new
        });
    }
    members[victim].expect_line("five members up", |l| l == "MEMBERS up=5");
    members[victim].expect_line("its STATS after the watch", |l| {
        stats_t_ms(l).is_some_and(|t| t >= WATCH_MS)
    });
    let watched = Instant::now();

    let expected = vec![
        ("member-downed".to_owned(), old),
        ("member-removed".to_owned(), old),
        ("member-joined".to_owned(), new),
        ("member-up".to_owned(), new),
    ];
    for (i, m) in members.iter_mut().enumerate() {
        if i == victim {
            continue;
        }
        let (from, to) = (m.mark(killed_at), m.mark(watched));
        let events: Vec<Event> = m.seen[from..to]
            .iter()
            .filter_map(|l| Event::parse(l))
            .collect();
        let seen = lifecycle(&events, &address, old, new);
        assert_eq!(seen, expected, "{case}: what {} reported", m.name);
        if !after_downing {
            let downed = events
                .iter()
                .find(|e| e.kind == "member-downed")
                .and_then(|e| e.reason.clone());
            assert_eq!(
                downed,
                Some(format!("restarted:{new}")),
                "{case}: {}",
                m.name
            );
        }
        // Only the killed life may be suspected.
        let suspicions: Vec<&Event> = events
            .iter()
            .filter(|e| {
                matches!(
                    e.kind.as_str(),
                    "member-suspected" | "member-unreachable" | "member-reachable"
                ) && !(e.address == address && e.incarnation == old)
            })
            .collect();
        assert!(suspicions.is_empty(), "{case}: {}: {suspicions:?}", m.name);
        // The warnings about the killed member are few (rate-limited),
        // and in words.
        let log = m.stderr_lines();
        let about = log
            .iter()
            .filter(|l| l.contains(&format!("cannot reach member {address}")))
            .count();
        assert!(
            about <= 2,
            "{case}: {} warned {about} times:\n{}",
            m.name,
            log.join("\n")
        );
        assert!(!log.iter().any(|l| l.contains("forged ref failed")));
    }
    let own: Vec<Event> = members[victim].events();
    let troubled: Vec<&Event> = own
        .iter()
        .filter(|e| {
            matches!(
                e.kind.as_str(),
                "refuted" | "self-downed" | "member-suspected" | "member-unreachable"
            )
        })
        .collect();
    assert!(troubled.is_empty(), "{case}: the new life: {troubled:?}");
}
