//! Steady state of the framing, ordering and delivery paths does not touch
//! the heap: a counting global allocator sees zero allocations over 10 000
//! messages after warm-up (send, transmit, receive, ack, hand up).
//!
//! Runs without the libtest harness (`harness = false`): the allocator counts
//! every thread, and libtest's would allocate concurrently.

use std::alloc::System;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use plexus_net::{Stack, StackSpec};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A driver's loop: moves frames through a reusable buffer (as a socket
/// read would), fires due timers, consumes what is handed up.
struct Link {
    a: Stack,
    b: Stack,
    buf: BytesMut,
    now: Instant,
    received: u64,
}

impl Link {
    fn new(spec: &str) -> Self {
        let spec: StackSpec = spec.parse().expect("valid spec");
        let now = Instant::now();
        Self {
            a: spec.build(now),
            b: spec.build(now),
            buf: BytesMut::with_capacity(256 << 10),
            now,
            received: 0,
        }
    }

    fn carry(from: &mut Stack, to: &mut Stack, buf: &mut BytesMut, now: Instant) {
        while let Some(frame) = from.poll_transmit() {
            buf.reserve(frame.len());
            frame.extend_into(buf);
            let datagram = buf.split().freeze();
            to.handle_receive(now, datagram).expect("link stays up");
        }
    }

    fn message(&mut self, payload: &Bytes) {
        self.now += Duration::from_micros(20);
        self.a
            .handle_send(self.now, payload.clone())
            .expect("window has room");
        for _ in 0..2 {
            Self::carry(&mut self.a, &mut self.b, &mut self.buf, self.now);
            Self::carry(&mut self.b, &mut self.a, &mut self.buf, self.now);
            for s in [&mut self.a, &mut self.b] {
                if s.poll_timeout().is_some_and(|t| t <= self.now) {
                    s.handle_timeout(self.now).expect("link stays up");
                }
            }
        }
        while let Some(m) = self.b.poll_receive() {
            assert_eq!(m.len(), payload.len());
            self.received += 1;
        }
        while self.a.poll_event().is_some() || self.b.poll_event().is_some() {}
    }
}

fn main() {
    let name = "framing_ordering_and_delivery_paths_do_not_allocate_in_steady_state";
    println!("\nrunning 1 test");
    framing_ordering_and_delivery_paths_do_not_allocate_in_steady_state();
    println!("test {name} ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
}

fn framing_ordering_and_delivery_paths_do_not_allocate_in_steady_state() {
    let payload = Bytes::from_static(&[7; 1024]);
    for spec in [
        "tcp / framing",
        "mem / ordering",
        "mem / delivery",
        "udp / delivery / ordering",
        "tcp / framing / delivery / ordering",
    ] {
        let mut link = Link::new(spec);
        for _ in 0..1_000 {
            link.message(&payload);
        }
        let region = Region::new(GLOBAL);
        for _ in 0..10_000 {
            link.message(&payload);
        }
        let stats = region.change();
        assert_eq!(link.received, 11_000, "{spec}");
        assert_eq!(
            (stats.allocations, stats.reallocations),
            (0, 0),
            "{spec}: {stats:?}"
        );
    }

    // Control: compression allocates its output, so the counter must move.
    let mut link = Link::new("mem / compression");
    link.message(&payload);
    let region = Region::new(GLOBAL);
    link.message(&payload);
    assert!(region.change().allocations > 0, "the counter works");
}
