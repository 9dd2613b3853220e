use bytes::Bytes;

use super::*;
use crate::sim::{LinkModel, Pair};
use crate::spec::StackSpec;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn frame(seq: u64) -> Frame {
    let mut f = Frame::from_payload(Bytes::copy_from_slice(&seq.to_be_bytes()));
    f.push_header(&OrderingHeader { seq }.emit());
    Frame::from_payload(f.to_bytes())
}

fn seq_of(b: &Bytes) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8-byte payloads"))
}

struct Rx {
    layer: Ordering,
    out: Output,
    got: Vec<u64>,
    events: Vec<LinkEvent>,
}

impl Rx {
    fn new(config: OrderingConfig) -> Self {
        Self {
            layer: Ordering::new(config),
            out: Output::new(),
            got: Vec::new(),
            events: Vec::new(),
        }
    }

    fn take(&mut self) {
        while let Some(f) = self.out.pop_up() {
            self.got.push(seq_of(&f.into_bytes()));
        }
        while let Some(e) = self.out.pop_event() {
            self.events.push(e);
        }
    }

    fn recv(&mut self, now: Instant, seq: u64) -> Result<(), ReceiveError> {
        let r = self.layer.handle_receive(now, frame(seq), &mut self.out);
        self.take();
        r
    }

    fn tick(&mut self, now: Instant) {
        self.layer.handle_timeout(now, &mut self.out);
        self.take();
    }
}

fn small(mode: OrderingConfig) -> OrderingConfig {
    OrderingConfig {
        max_pending: 4,
        ..mode
    }
}

#[test]
fn early_messages_wait_for_the_gap_and_are_released_in_order() {
    let now = Instant::now();
    let mut rx = Rx::new(OrderingConfig::strict());
    for seq in [1, 3, 2] {
        rx.recv(now, seq).expect("within bounds");
    }
    assert!(rx.got.is_empty());
    assert_eq!(rx.layer.pending(), 3);
    rx.recv(now, 0).expect("fills the gap");
    assert_eq!(rx.got, [0, 1, 2, 3]);
    assert_eq!(rx.layer.poll_timeout(), None);
}

#[test]
fn late_and_duplicate_messages_are_dropped() {
    let now = Instant::now();
    let mut rx = Rx::new(OrderingConfig::lossy());
    rx.recv(now, 0).expect("in order");
    rx.recv(now, 2).expect("buffered");
    assert!(matches!(
        rx.recv(now, 0),
        Err(ReceiveError::Ordering(OrderingError::Stale {
            seq: 0,
            expected: 1
        }))
    ));
    assert!(matches!(
        rx.recv(now, 2),
        Err(ReceiveError::Ordering(OrderingError::Stale { .. }))
    ));
    assert_eq!(rx.got, [0]);
}

#[test]
fn strict_overflow_is_a_fatal_typed_error() {
    let now = Instant::now();
    let mut rx = Rx::new(small(OrderingConfig::strict()));
    rx.recv(now, 3).expect("fits: 3 - 0 < 4");
    let err = rx.recv(now, 4).unwrap_err();
    assert_eq!(
        err,
        ReceiveError::Ordering(OrderingError::Overflow {
            seq: 4,
            expected: 0
        })
    );
    assert!(err.is_fatal());
}

#[test]
fn strict_gap_timeout_closes_the_link() {
    let now = Instant::now();
    let cfg = OrderingConfig {
        gap_timeout: ms(100),
        ..OrderingConfig::strict()
    };
    let mut rx = Rx::new(cfg);
    rx.recv(now, 1).expect("buffered");
    assert_eq!(rx.layer.poll_timeout(), Some(now + ms(100)));
    rx.tick(now + ms(100));
    assert_eq!(
        rx.out.close_reason(),
        Some(&LinkError::OrderingStalled {
            missing: 0,
            waited_ms: 100
        })
    );
    assert!(rx.got.is_empty());
}

#[test]
fn lossy_mode_skips_the_gap_when_the_buffer_fills() {
    let now = Instant::now();
    let mut rx = Rx::new(small(OrderingConfig::lossy()));
    for seq in [1, 2, 3] {
        rx.recv(now, seq).expect("buffered");
    }
    rx.recv(now, 5).expect("forces a skip");
    assert_eq!(rx.got, [1, 2, 3]);
    assert_eq!(rx.events, [LinkEvent::GapSkipped { missing: 1 }]);
    rx.recv(now, 4).expect("fills");
    assert_eq!(rx.got, [1, 2, 3, 4, 5]);
    assert!(rx.recv(now, 0).is_err(), "the skipped message is late now");
}

#[test]
fn lossy_mode_skips_the_gap_after_the_timeout() {
    let now = Instant::now();
    let mut rx = Rx::new(OrderingConfig::lossy());
    rx.recv(now, 2).expect("buffered");
    rx.recv(now + ms(50), 3).expect("buffered");
    assert_eq!(
        rx.layer.poll_timeout(),
        Some(now + ms(100)),
        "gap age counts from the first"
    );
    rx.tick(now + ms(99));
    assert!(rx.got.is_empty());
    rx.tick(now + ms(100));
    assert_eq!(rx.got, [2, 3]);
    assert_eq!(rx.events, [LinkEvent::GapSkipped { missing: 2 }]);
}

#[test]
fn lossy_far_ahead_message_skips_straight_to_it() {
    let now = Instant::now();
    let mut rx = Rx::new(small(OrderingConfig::lossy()));
    rx.recv(now, 100).expect("skips");
    assert_eq!(rx.got, [100]);
    assert_eq!(rx.layer.next_expected(), 101);
}

#[test]
fn pending_bytes_are_bounded() {
    let now = Instant::now();
    let cfg = OrderingConfig {
        max_pending_bytes: 20,
        ..OrderingConfig::strict()
    };
    let mut rx = Rx::new(cfg);
    rx.recv(now, 1).expect("8 bytes");
    rx.recv(now, 2).expect("16 bytes");
    assert!(matches!(
        rx.recv(now, 3),
        Err(ReceiveError::Ordering(OrderingError::Overflow { .. }))
    ));
}

#[test]
fn strict_ordering_over_delivery_is_fifo_on_a_reordering_link() {
    let spec: StackSpec = "mem / delivery / ordering".parse().expect("valid");
    let link = LinkModel {
        loss: 0.1,
        reorder: 0.3,
        duplicate: 0.1,
        jitter: ms(10),
        ..LinkModel::default()
    };
    let mut sim = Pair::new(&spec, link, 11, Instant::now());
    for i in 0..300u64 {
        sim.send_a(Bytes::copy_from_slice(&i.to_be_bytes()))
            .expect("room");
        sim.run_for(ms(1));
    }
    assert!(sim.run_until_quiet(Duration::from_secs(11), Duration::from_secs(60)));
    let got: Vec<u64> = sim.b.received.iter().map(seq_of).collect();
    assert_eq!(got, (0..300).collect::<Vec<_>>());
}

#[test]
fn reserved_sequence_number_is_rejected() {
    // Found by the fuzzer: u64::MAX would overflow `next` in lossy mode.
    let now = Instant::now();
    let mut rx = Rx::new(OrderingConfig::lossy());
    assert_eq!(
        rx.recv(now, u64::MAX),
        Err(ReceiveError::Ordering(OrderingError::Reserved))
    );
    rx.recv(now, u64::MAX - 1).expect("skips to it");
    assert_eq!(rx.got, [u64::MAX - 1]);
}
