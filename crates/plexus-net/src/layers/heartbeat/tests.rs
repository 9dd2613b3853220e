use bytes::Bytes;

use super::*;
use crate::sim::{LinkModel, Pair};
use crate::spec::StackSpec;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn idle_link_sends_heartbeats_every_interval() {
    let now = Instant::now();
    let mut hb = Heartbeat::new(HeartbeatConfig::default(), now);
    let mut out = Output::new();
    assert_eq!(hb.poll_timeout(), Some(now + ms(1000)));
    hb.handle_timeout(now + ms(1000), &mut out);
    let beat = out.pop_down().expect("a heartbeat");
    assert_eq!(beat.to_bytes(), [HEARTBEAT][..]);
    hb.handle_send(
        now + ms(1500),
        Frame::from_payload(Bytes::from_static(b"d")),
        &mut out,
    )
    .expect("never fails");
    out.pop_down();
    assert_eq!(
        hb.poll_timeout(),
        Some(now + ms(2500)),
        "data postpones heartbeats"
    );
}

#[test]
fn heartbeats_are_consumed_and_data_passes_up() {
    let now = Instant::now();
    let mut hb = Heartbeat::new(HeartbeatConfig::default(), now);
    let mut out = Output::new();
    hb.handle_receive(
        now,
        Frame::from_payload(Bytes::from_static(&[HEARTBEAT])),
        &mut out,
    )
    .expect("valid");
    assert!(out.pop_up().is_none());
    hb.handle_receive(
        now,
        Frame::from_payload(Bytes::from_static(&[DATA, 7])),
        &mut out,
    )
    .expect("valid");
    assert_eq!(out.pop_up().expect("data").into_bytes(), [7][..]);
    assert!(hb
        .handle_receive(now, Frame::from_payload(Bytes::from_static(&[9])), &mut out)
        .is_err());
    assert!(hb.handle_receive(now, Frame::new(), &mut out).is_err());
}

#[test]
fn silent_peer_becomes_suspect_then_unreachable_then_reachable_again() {
    let spec: StackSpec = "mem / heartbeat(interval=100ms, acceptable_pause=0ms, min_std_dev=20ms)"
        .parse()
        .expect("valid");
    let mut sim = Pair::new(&spec, LinkModel::default(), 5, Instant::now());
    sim.run_for(Duration::from_secs(5));
    assert!(sim.a.events.is_empty(), "regular heartbeats: no suspicion");
    sim.link.loss = 1.0;
    sim.run_for(Duration::from_secs(5));
    let kinds: Vec<_> = sim.a.events.iter().map(std::mem::discriminant).collect();
    assert_eq!(
        kinds,
        [
            std::mem::discriminant(&LinkEvent::Suspect { phi: 0.0 }),
            std::mem::discriminant(&LinkEvent::Unreachable { phi: 0.0 }),
        ]
    );
    let LinkEvent::Suspect { phi } = sim.a.events[0] else {
        unreachable!("checked above")
    };
    assert!(phi >= 8.0, "suspect at phi {phi}");
    sim.link.loss = 0.0;
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.a.events.last(), Some(&LinkEvent::Reachable));
    assert_eq!(sim.b.events.last(), Some(&LinkEvent::Reachable));
}

#[test]
fn suspicion_is_raised_at_the_threshold_crossing() {
    let now = Instant::now();
    let cfg = HeartbeatConfig {
        interval: Duration::from_secs(3600),
        ..HeartbeatConfig::default()
    };
    let mut hb = Heartbeat::new(cfg, now);
    let mut out = Output::new();
    for i in 1..=20 {
        hb.handle_receive(
            now + ms(100 * i),
            Frame::from_payload(Bytes::from_static(&[HEARTBEAT])),
            &mut out,
        )
        .expect("valid");
    }
    let last = now + ms(2000);
    let deadline = hb.poll_timeout().expect("armed");
    hb.handle_timeout(deadline - ms(1), &mut out);
    assert!(out.pop_event().is_none());
    hb.handle_timeout(deadline, &mut out);
    let Some(LinkEvent::Suspect { phi }) = out.pop_event() else {
        panic!("suspect expected at the deadline")
    };
    assert!((phi - 8.0).abs() < 0.01, "phi {phi}");
    assert!(deadline > last);
}
