//! What a member logs when its driver cannot reach a join contact or a
//! member ([`Membership::handle_unreachable`]), and where its packets go
//! ([`Transmit::heard_life`]). Fake clock; the log is captured.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::wire::Packet;

/// Runs `f` with the `plexus::cluster` warnings it logs captured; returns
/// them, one line each.
fn warnings(f: impl FnOnce()) -> Vec<String> {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_env_filter("plexus::cluster=warn")
        .with_ansi(false)
        .without_time()
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buffer.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A member joining through the single seed `sim:5`.
fn joiner(start: Instant) -> Membership {
    let config = ClusterConfig {
        seeds: vec!["sim:5".into()],
        ..ClusterConfig::default()
    };
    Membership::new(config, "sim:0", 1, start).expect("valid settings")
}

/// Handles the deadlines due `secs` seconds after `start` (a join round
/// each second); the addressees of what it sent.
fn round(m: &mut Membership, start: Instant, secs: u64) -> (Instant, Vec<Arc<str>>) {
    let now = start + Duration::from_secs(secs);
    m.handle_timeout(now);
    let mut to = Vec::new();
    while let Some(t) = m.poll_transmit() {
        to.push(t.to);
    }
    (now, to)
}

#[test]
fn a_failed_join_attempt_is_a_warning_with_the_seed_and_the_cause_each_retry() {
    let start = Instant::now();
    let mut m = joiner(start);
    let lines = warnings(|| {
        // The first attempt: the driver cannot connect, and says so.
        let (now, to) = round(&mut m, start, 0);
        assert_eq!(to, [Arc::from("sim:5")]);
        m.handle_unreachable(now, "sim:5", &"connect sim:5: connection refused");
        // More attempts, whose failures the driver does not report (its
        // reconnect waits out a backoff): the cause it gave last.
        for secs in 1..=3 {
            round(&mut m, start, secs);
        }
    });
    assert_eq!(lines.len(), 3, "{lines:#?}");
    for line in &lines {
        assert!(line.contains("WARN"), "{line}");
        assert!(
            line.contains("join through sim:5 failed: connect sim:5: connection refused"),
            "{line}"
        );
    }
    assert_eq!(m.stats().join_attempts_failed, 3);
    assert_eq!(m.local().state, MemberState::Joining);
}

#[test]
fn a_silent_seed_is_a_warning_each_retry() {
    let start = Instant::now();
    let mut m = joiner(start);
    let lines = warnings(|| {
        for secs in 0..3 {
            round(&mut m, start, secs);
        }
    });
    assert_eq!(lines.len(), 2, "{lines:#?}");
    for line in &lines {
        assert!(
            line.contains("join through sim:5 failed: no answer within 1s"),
            "{line}"
        );
    }
}

/// A formed member that knows `sim:7` as up, at `now`.
fn with_member(now: Instant) -> Membership {
    let mut m = Membership::new(ClusterConfig::default(), "sim:0", 1, now).expect("valid");
    let hello = Packet {
        cluster: "plexus".into(),
        from: "sim:7".into(),
        from_incarnation: 3,
        from_life: 3,
        body: Body::Gossip,
        entries: vec![Member {
            state: MemberState::Up,
            up_number: 2,
            ..Member::joining("sim:7", 3, 1)
        }],
    };
    m.handle_packet(now, &hello.encode()).expect("well-formed");
    m
}

#[test]
fn an_unreachable_member_is_a_warning_at_most_every_ten_seconds() {
    let start = Instant::now();
    let mut m = with_member(start);
    let cause = "resolve sim:7/plexus.cluster: connect sim:7: connection refused";
    let lines = warnings(|| {
        for s in 0..12 {
            let now = start + Duration::from_secs(s);
            m.handle_unreachable(now, "sim:7", &cause);
        }
    });
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].contains(&format!("cannot reach member sim:7: {cause}")),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("(10 failures since the last such line)"));
    assert_eq!(m.stats().unreachable_reports, 12);
    // A member that is not live any more is not warned about.
    let gone = Packet {
        cluster: "plexus".into(),
        from: "sim:8".into(),
        from_incarnation: 1,
        from_life: 1,
        body: Body::Gossip,
        entries: vec![Member {
            state: MemberState::Down,
            ..Member::joining("sim:7", 3, 1)
        }],
    };
    let later = start + Duration::from_secs(30);
    m.handle_packet(later, &gone.encode()).expect("well-formed");
    let lines = warnings(|| m.handle_unreachable(later, "sim:7", &cause));
    assert_eq!(lines, Vec::<String>::new());
}

#[test]
fn packets_name_the_life_last_heard_from_at_their_address() {
    let now = Instant::now();
    let mut m = with_member(now);
    let to_member = |m: &mut Membership| {
        let mut lives = Vec::new();
        while let Some(t) = m.poll_transmit() {
            if *t.to == *"sim:7" {
                lives.push(t.heard_life);
            }
        }
        lives
    };
    let ping = |life: u64, seq: u32| Packet {
        cluster: "plexus".into(),
        from: "sim:7".into(),
        from_incarnation: life + 1,
        from_life: life,
        body: Body::Ping { seq },
        entries: Vec::new(),
    };
    m.handle_packet(now, &ping(3, 1).encode())
        .expect("well-formed");
    assert_eq!(
        to_member(&mut m),
        [Some(3)],
        "the ack goes to the life heard"
    );
    // A restarted process at the address speaks: a new route.
    m.handle_packet(now, &ping(900, 2).encode())
        .expect("well-formed");
    assert_eq!(to_member(&mut m), [Some(900)]);
    // A late packet of the old life does not route back to it.
    m.handle_packet(now, &ping(3, 3).encode())
        .expect("well-formed");
    assert_eq!(to_member(&mut m), [Some(900)]);
}
