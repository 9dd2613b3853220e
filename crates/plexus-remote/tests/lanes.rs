//! Lanes across transports: which link carries which lane, per-lane FIFO,
//! an adaptive lane split over two links and put back in order, message
//! properties refused when their lane cannot honour them, receipts that
//! say "sent" on a lossy lane, and lane configurations refused at start.

use std::time::Duration;

use plexus_core::{
    ActorRef, ActorSystem, CapacityProfile, Lane, MessageProperties, Receipt, Requirements,
};
use plexus_remote::{LaneConfigError, Node, NodeConfig, NodeError};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// A numbered message; `stream` tells the sender's streams apart.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
struct Numbered {
    stream: u8,
    n: u64,
}
plexus_core::remote_message!(Numbered = "test.lanes.Numbered");

/// The same on the bulk lane by default.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
struct Chunk {
    n: u64,
    data: Vec<u8>,
}
plexus_core::remote_message!(Chunk = "test.lanes.Chunk", lane = Bulk);

const T: Duration = Duration::from_secs(10);

/// Both nodes' configuration: `ctl` and `bulk` are TCP schemes of their
/// own, so each lane gets its own connection; `lossy` is UDP without
/// delivery; `bulk2` a second TCP scheme for the adaptive lane.
fn config() -> NodeConfig {
    NodeConfig::default()
        .cookie("lanes")
        .scheme("ctl", "tcp / framing")
        .scheme("bulk", "tcp / framing")
        .scheme("bulk2", "tcp / framing")
        .scheme("rudp", "udp / slicing / faults(drop=0.05, duplicate=0.05, seed=9) / delivery(min_rto=5ms, initial_rto=20ms, max_retries=40) / ordering")
        .scheme("lossy", "udp / slicing")
        .scheme("lossy2", "udp / slicing")
}

struct Pair {
    _a: ActorSystem,
    b: ActorSystem,
    na: Node,
    nb: Node,
    uri_b: String,
}

/// Node b listens on tcp and on every scheme `lanes` uses; a dials it.
async fn pair(lanes: &[(Lane, &str)]) -> Pair {
    let mut cfg = config();
    for (lane, schemes) in lanes {
        cfg = cfg.lane(*lane, *schemes);
    }
    let a = ActorSystem::new();
    let b = ActorSystem::new();
    let na = Node::start(&a, cfg.clone()).unwrap();
    let nb = Node::start(&b, cfg).unwrap();
    let uri_b = nb.listen("tcp://127.0.0.1:0").await.unwrap();
    let mut listened = vec!["tcp".to_owned()];
    for (_, schemes) in lanes {
        for scheme in schemes.split('|').map(str::trim) {
            if !listened.iter().any(|s| s == scheme) {
                nb.listen(&format!("{scheme}://127.0.0.1:0")).await.unwrap();
                listened.push(scheme.to_owned());
            }
        }
    }
    Pair {
        _a: a,
        b,
        na,
        nb,
        uri_b,
    }
}

/// Publishes a recorder of `M` on b as `name`; returns a's ref to it and
/// what it receives.
async fn recorder<M>(p: &Pair, name: &str) -> (ActorRef<M>, mpsc::UnboundedReceiver<M>)
where
    M: plexus_core::remote::RemoteMessage + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = p.b.spawn_fn(move |m: M, _ctx| {
        let _ = tx.send(m);
    });
    p.nb.publish(&actor, name).unwrap();
    let remote =
        p.na.resolve::<M>(&format!("{}/{name}", p.uri_b))
            .await
            .unwrap();
    (remote, rx)
}

fn carrier_schemes(node: &Node, lane: Lane) -> Vec<String> {
    node.lane_stats()
        .into_iter()
        .find(|s| s.lane == lane)
        .map(|s| s.carriers.into_iter().map(|c| c.scheme).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapped_lanes_ride_their_own_links_and_keep_their_order() {
    let p = pair(&[(Lane::Control, "ctl"), (Lane::Bulk, "bulk")]).await;
    let (numbers, mut got) = recorder::<Numbered>(&p, "numbers").await;

    // The dialler's view, and the acceptor's: the same links.
    for node in [&p.na, &p.nb] {
        assert_eq!(carrier_schemes(node, Lane::Control), ["ctl"]);
        assert_eq!(carrier_schemes(node, Lane::Bulk), ["bulk"]);
        assert_eq!(carrier_schemes(node, Lane::Default), ["tcp"]);
        assert_eq!(carrier_schemes(node, Lane::Unreliable), ["tcp"]);
    }

    // Three streams on three lanes, interleaved: each stays in order.
    let lanes = [Lane::Default, Lane::Bulk, Lane::Control];
    const N: u64 = 2_000;
    for n in 0..N {
        for (stream, lane) in lanes.iter().enumerate() {
            numbers.via(*lane).tell(Numbered {
                stream: stream as u8,
                n,
            });
        }
    }
    let mut next = [0u64; 3];
    for _ in 0..N * 3 {
        let m = tokio::time::timeout(T, got.recv()).await.unwrap().unwrap();
        assert_eq!(
            m.n, next[m.stream as usize],
            "FIFO within lane {}",
            lanes[m.stream as usize]
        );
        next[m.stream as usize] += 1;
    }
    let frames = |lane| {
        p.na.lane_stats()
            .into_iter()
            .find(|s| s.lane == lane)
            .unwrap()
            .frames
    };
    assert!(
        frames(Lane::Bulk) >= N,
        "bulk frames {}",
        frames(Lane::Bulk)
    );
    // The resolve and the messages sent on the control lane.
    assert!(frames(Lane::Control) > N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_takes_its_own_lane_and_an_ask_still_answers() {
    let p = pair(&[(Lane::Bulk, "bulk")]).await;
    let (chunks, mut got) = recorder::<Chunk>(&p, "chunks").await;
    for n in 0..100 {
        chunks.tell(Chunk {
            n,
            data: vec![n as u8; 70_000],
        });
    }
    for n in 0..100 {
        let c = tokio::time::timeout(T, got.recv()).await.unwrap().unwrap();
        assert_eq!((c.n, c.data.len()), (n, 70_000));
    }
    let bulk =
        p.na.lane_stats()
            .into_iter()
            .find(|s| s.lane == Lane::Bulk)
            .unwrap();
    assert_eq!(bulk.carriers[0].scheme, "bulk");
    assert!(bulk.frames >= 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_lane_splits_over_its_candidates_and_restores_order() {
    // One candidate loses and duplicates datagrams under its delivery
    // layer: frames reach the receiver late and out of step with the
    // other's.
    let p = pair(&[(Lane::Bulk, "bulk | rudp")]).await;
    let (numbers, mut got) = recorder::<Numbered>(&p, "numbers").await;
    assert_eq!(carrier_schemes(&p.na, Lane::Bulk), ["bulk", "rudp"]);
    const N: u64 = 5_000;
    for n in 0..N {
        numbers.via(Lane::Bulk).tell(Numbered { stream: 0, n });
    }
    for n in 0..N {
        let m = tokio::time::timeout(T, got.recv()).await.unwrap().unwrap();
        assert_eq!(m.n, n, "the receiver restores the sender's order");
    }
    let bulk =
        p.na.lane_stats()
            .into_iter()
            .find(|s| s.lane == Lane::Bulk)
            .unwrap();
    let frames: Vec<u64> = bulk.carriers.iter().map(|c| c.frames.unwrap()).collect();
    assert_eq!(frames.iter().sum::<u64>(), N);
    assert!(
        frames.iter().all(|&f| f > 0),
        "both candidates carry part of the lane: {frames:?}"
    );
    let shares: f64 = bulk.carriers.iter().map(|c| c.share).sum();
    assert!((shares - 1.0).abs() < 1e-6, "shares sum to 1: {shares}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_pick_a_lane_or_are_refused_when_it_cannot_honour_them() {
    let p = pair(&[(Lane::Bulk, "lossy"), (Lane::Unreliable, "lossy2")]).await;
    let (numbers, _got) = recorder::<Numbered>(&p, "numbers").await;

    let lossy_ok = MessageProperties {
        reliable: false,
        ordered: false,
        ..MessageProperties::default()
    };
    assert_eq!(
        numbers.with_properties(lossy_ok).unwrap().lane(),
        Lane::Unreliable
    );

    let reliable_bulk = MessageProperties {
        capacity: CapacityProfile::CapacitySeeking,
        ..MessageProperties::default()
    };
    let refused = numbers.with_properties(reliable_bulk).err().unwrap();
    assert_eq!(refused.lane, Lane::Bulk);
    assert_eq!(
        refused.missing,
        Requirements {
            reliable: true,
            ordered: true
        }
    );
    let text = refused.to_string();
    assert!(
        text.contains("bulk lane") && text.contains("udp / slicing"),
        "{text}"
    );

    // Urgent messages take the control lane, which is reliable here.
    let urgent = MessageProperties {
        urgent: true,
        ..MessageProperties::default()
    };
    assert_eq!(
        numbers.with_properties(urgent).unwrap().lane(),
        Lane::Control
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_say_sent_on_a_lossy_lane_and_delivered_elsewhere() {
    let p = pair(&[(Lane::Unreliable, "lossy")]).await;
    let (numbers, _got) = recorder::<Numbered>(&p, "numbers").await;
    let m = Numbered { stream: 0, n: 1 };
    assert_eq!(
        numbers.via(Lane::Unreliable).tell_with_receipt(m).await,
        Ok(Receipt::Sent)
    );
    assert_eq!(
        numbers.via(Lane::Default).tell_with_receipt(m).await,
        Ok(Receipt::Delivered)
    );
    assert_eq!(numbers.tell_with_receipt(m).await, Ok(Receipt::Delivered));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lane_configurations_that_cannot_work_are_refused_at_start() {
    let system = ActorSystem::new();
    let start = |cfg: NodeConfig| match Node::start(&system, cfg) {
        Err(NodeError::Lane(e)) => e,
        Err(e) => panic!("expected a lane error, got {e}"),
        Ok(_) => panic!("expected a lane error, the node started"),
    };

    let e = start(config().lane(Lane::Control, "lossy"));
    assert!(
        matches!(&e, LaneConfigError::MissingGuarantee { lane: Lane::Control, scheme, missing, .. }
            if scheme == "lossy" && missing.reliable && missing.ordered),
        "{e:?}"
    );
    assert!(e.to_string().contains("control lane"), "{e}");

    let e = start(config().lane_named("fast", "tcp"));
    assert!(matches!(e, LaneConfigError::UnknownLane(_)), "{e:?}");
    assert!(e.to_string().contains("\"fast\""), "{e}");

    let e = start(config().lane(Lane::Bulk, "nope"));
    assert!(matches!(e, LaneConfigError::UnknownScheme { .. }), "{e:?}");

    let e = start(config().lane(Lane::Bulk, "bulk | lossy"));
    assert!(
        matches!(&e, LaneConfigError::MissingGuarantee { lane: Lane::Bulk, scheme, .. } if scheme == "lossy"),
        "an adaptive lane's candidates must be reliable: {e:?}"
    );

    let e = start(config().lane(Lane::Bulk, "tcp").lane(Lane::Bulk, "ctl"));
    assert!(
        matches!(e, LaneConfigError::Duplicate { lane: Lane::Bulk }),
        "{e:?}"
    );

    let e = start(config().lane(Lane::Bulk, " | "));
    assert!(matches!(e, LaneConfigError::NoCandidates { .. }), "{e:?}");

    let e = start(
        config()
            .lane(Lane::Bulk, "bulk")
            .lane(Lane::Control, "bulk"),
    );
    assert!(
        matches!(&e, LaneConfigError::SharedScheme { scheme, .. } if scheme == "bulk"),
        "{e:?}"
    );
}
