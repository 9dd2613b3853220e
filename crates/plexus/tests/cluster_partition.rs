//! Five `plexus member` processes across an emulated link
//! (`plexus-linkem`: two network namespaces joined through TUN devices,
//! addresses 198.51.100.1 and .2): three on side a, two on side b. Cutting
//! the link (100 % loss both ways) is resolved by keep-majority: side a
//! downs the two, side b downs itself saying why; after the link heals the
//! two rejoin under new incarnations.
//!
//! Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), `ip` and /dev/net/tun, so it
//! is `#[ignore = "needs root"]`: `cargo test -- --ignored` runs it (`.ci/run`
//! does, as root), and there a missing privilege fails it.

mod common;

use common::procs::{Event, Proc, EXE, QUICK};
use plexus_linkem::{netns, Link, LinkConfig, Side};

fn member(link: &Link, name: &str, side: Side, seed: Option<&str>) -> Proc {
    let mut args: Vec<String> = vec!["member".to_owned()];
    args.extend(QUICK.iter().map(|s| (*s).to_owned()));
    args.extend(["--listen".to_owned(), format!("tcp://{}:0", side.address())]);
    if let Some(seed) = seed {
        args.extend(["--seed".to_owned(), seed.to_owned()]);
    }
    let mut cmd = link.command(side, EXE, &args);
    cmd.env(common::COOKIE_VAR, "cluster-test")
        .env("PLEXUS_MANAGEMENT__BIND", "127.0.0.1:0");
    Proc::start(name, cmd)
}

fn cut() -> LinkConfig {
    let mut c = LinkConfig::default();
    c.a_to_b.set_loss_percent(100.0).expect("a valid loss");
    c.b_to_a.set_loss_percent(100.0).expect("a valid loss");
    c
}

/// The counts of a `split-brain:keep-majority:<reachable>/<members>`
/// reason. They depend on what a member had heard when it decided: one
/// that learnt of a downing first counts one member less.
fn keep_majority_counts(e: &Event) -> Option<(usize, usize)> {
    let counts = e
        .reason
        .as_deref()?
        .strip_prefix("split-brain:keep-majority:")?;
    let (reachable, members) = counts.split_once('/')?;
    Some((reachable.parse().ok()?, members.parse().ok()?))
}

#[test]
#[ignore = "needs root"]
fn keep_majority_resolves_a_partition_made_with_the_link_emulator() {
    if let Err(e) = netns::check_privileges() {
        panic!("needs root: {e}");
    }
    let prefix = format!("pc{}", std::process::id() % 1_000_000);
    // Declared before the processes, so dropped after them.
    let link = Link::up(&prefix, LinkConfig::default()).expect("link up");
    let mut members = vec![member(&link, "a0", Side::A, None)];
    let seed = members[0].address.clone();
    members.push(member(&link, "a1", Side::A, Some(&seed)));
    members.push(member(&link, "a2", Side::A, Some(&seed)));
    members.push(member(&link, "b3", Side::B, Some(&seed)));
    members.push(member(&link, "b4", Side::B, Some(&seed)));
    for m in &mut members {
        m.expect_line("five members up", |l| l == "MEMBERS up=5");
    }
    let (majority, minority) = members.split_at_mut(3);
    let a_side: Vec<String> = majority.iter().map(|m| m.address.clone()).collect();
    let b_side: Vec<String> = minority.iter().map(|m| m.address.clone()).collect();
    let old: Vec<u64> = minority.iter().map(|m| m.incarnation).collect();

    link.set_config(cut()).expect("the link runs");
    for m in majority.iter_mut() {
        let downs = m.expect_each("member-downed", &b_side, |_| true);
        for d in downs {
            let by_a_member = d
                .reason
                .as_deref()
                .and_then(|r| r.strip_prefix("reported-by:"))
                .is_some_and(|by| a_side.iter().any(|a| a == by));
            let majority_decided = keep_majority_counts(&d).is_some_and(|(r, n)| r * 2 > n);
            assert!(majority_decided || by_a_member, "{}: {d:?}", m.name);
        }
    }
    for m in minority.iter_mut() {
        let down = m.expect_event("its own downing", |e| e.kind == "self-downed");
        let minority = keep_majority_counts(&down).is_some_and(|(r, n)| r * 2 < n);
        assert!(minority, "{}: {down:?}", m.name);
    }
    for m in majority.iter() {
        assert!(
            !m.events().iter().any(|e| e.kind == "self-downed"),
            "{}: the majority downed itself",
            m.name
        );
    }

    link.set_config(LinkConfig::default())
        .expect("the link runs");
    for m in majority.iter_mut() {
        let ups = m.expect_each("member-up", &b_side, |e| {
            let i = b_side.iter().position(|a| *a == e.address);
            i.is_some_and(|i| e.incarnation > old[i])
        });
        assert_eq!(ups.len(), 2);
    }
    for (i, m) in minority.iter_mut().enumerate() {
        let address = m.address.clone();
        m.expect_event("itself up again", |e| {
            e.kind == "member-up" && e.address == address && e.incarnation > old[i]
        });
    }
}
