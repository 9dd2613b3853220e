//! `/metrics` of a three-member cluster is Prometheus text a Prometheus
//! parser reads, and its counters move as traffic flows: members by state,
//! membership gossip, replicated data, links between the nodes, actors.

mod common;

use common::http_get;
use common::procs::{member_command, Proc, QUICK};
use prometheus_parse::{Sample, Scrape, Value};

fn member(name: &str, seed: Option<&str>) -> Proc {
    let mut cmd = member_command();
    cmd.args(QUICK).args(["--listen", "tcp://127.0.0.1:0"]);
    if let Some(s) = seed {
        cmd.args(["--seed", s]);
    }
    Proc::start(name, cmd)
}

fn scrape(m: &Proc) -> Scrape {
    let (status, body) = http_get(&format!("{}/metrics", m.management()));
    assert_eq!(status, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("Prometheus text")
}

/// The value of the sample `name` whose labels include `labels`.
fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples
        .iter()
        .filter(|x: &&Sample| x.metric == name)
        .find(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

/// The sum of every sample `name` (all label sets).
fn total(s: &Scrape, name: &str) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name)
        .map(|x| match x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

#[test]
fn a_three_member_cluster_exports_counters_that_move_with_traffic() {
    let mut a = member("a", None);
    let seed = a.address.clone();
    let mut b = member("b", Some(&seed));
    let mut c = member("c", Some(&seed));
    for m in [&mut a, &mut b, &mut c] {
        m.expect_line("three up", |l| l == "MEMBERS up=3");
    }
    let first = scrape(&a);
    assert_eq!(
        value(&first, "plexus_cluster_members", &[("state", "up")]),
        Some(3.0)
    );
    assert!(value(&first, "plexus_actors_alive", &[]).is_some_and(|n| n >= 1.0));
    assert!(first
        .docs
        .contains_key("plexus_cluster_gossip_sent_bytes_total"));
    let gossip = total(&first, "plexus_cluster_gossip_sent_bytes_total");
    let link_out = total(&first, "plexus_link_sent_messages_total");
    assert!(gossip > 0.0 && link_out > 0.0);

    // Traffic: a read at majority asks the other members; a member's
    // failure detector keeps probing.
    let (status, _) = http_get(&format!("{}/data/visits", a.management()));
    assert_eq!(status, 200);
    b.kill();
    a.expect_event("b suspected or down", |e| {
        e.address == b.address && (e.kind == "member-suspected" || e.kind == "member-downed")
    });
    let second = scrape(&a);
    assert!(total(&second, "plexus_cluster_gossip_sent_bytes_total") > gossip);
    assert!(total(&second, "plexus_link_sent_messages_total") > link_out);
    assert!(total(&second, "plexus_data_sent_packets_total") > 0.0);
}
