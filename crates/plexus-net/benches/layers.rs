//! Micro-benchmarks in the style of the configurable-transport paper (Hiesgen
//! et al., figs. 3-5):
//!
//! * `send/<stack>/<bytes>`: cost to prepare one message for sending
//!   (`handle_send` and draining `poll_transmit`),
//! * `receive/<stack>/<bytes>`: cost to process one received datagram or
//!   chunk up to the whole message (`handle_receive` and `poll_receive`),
//! * `ordering_sequence/<case>`: the ordering layer handling a sequence of
//!   ten messages in order (`in_order`), with message 2 late
//!   (`late_2_after_6`), or with message 2 dropped (`dropped_2`); lossy mode,
//!   five pending slots as in the paper. Time per sequence, throughput in
//!   messages.
//!
//! Every `send`/`receive` figure is per message (throughput: one element per
//! iteration), so `receive/mem/...` is the baseline to subtract for a
//! layer's own cost.
//!
//! Stacks of one layer over `mem` measure that layer (compare with `mem`
//! alone, the baseline); `tcp / framing` and `udp / slicing / delivery /
//! ordering` are the common stacks. Work that is not measured (carrying
//! frames to the peer, returning acks) runs outside the timed sections.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use plexus_net::layers::ordering::{Ordering, OrderingConfig, OrderingHeader};
use plexus_net::{Frame, Layer, Output, Stack, StackSpec};

const STACKS: [&str; 12] = [
    "mem",
    "tcp / framing",
    "mem / slicing",
    "mem / delivery",
    "mem / ordering",
    "mem / compression",
    "mem / heartbeat",
    "tcp / framing / ordering",
    "udp / slicing / delivery / ordering",
    // A lone message per drain: what `batching` costs when there is
    // nothing to batch (the default udp scheme ends in it).
    "mem / batching",
    "udp / slicing / delivery / ordering / batching",
    // Named `mem/encryption` in the results (options are left out of ids).
    "mem / encryption(psk=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f)",
];

/// The benchmark id of a spec: without spaces and layer options.
fn label(spec: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in spec.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ' ' => {}
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

const SIZES: [usize; 3] = [128, 1024, 8192];

/// Messages per batch: below the delivery window, so sends never block.
const BATCH: u64 = 32;

struct Bench {
    a: Stack,
    b: Stack,
    now: Instant,
    payload: Bytes,
    /// Frames A transmitted (kept as frames: the timed send does not copy).
    sent: Vec<Frame>,
    wire: Vec<Bytes>,
}

impl Bench {
    fn new(spec: &str, size: usize) -> Self {
        let spec: StackSpec = spec.parse().expect("valid spec");
        let now = Instant::now();
        // Compressible but not trivially so: a repeating 64-byte pattern.
        let payload: Vec<u8> = (0..size).map(|i| (i % 64) as u8).collect();
        let mut bench = Self {
            a: spec.build(now),
            b: spec.build(now),
            now,
            payload: Bytes::from(payload),
            sent: Vec::with_capacity(1024),
            wire: Vec::with_capacity(1024),
        };
        if spec.layer_names().any(|l| l == "encryption") {
            // Run the handshake first: measure the session, not its setup.
            bench.send();
            bench.put_on_wire();
            bench.receive_all();
            bench.settle();
        }
        bench
    }

    /// Sends one message from A and collects what A transmits.
    fn send(&mut self) {
        self.a
            .handle_send(self.now, self.payload.clone())
            .expect("window has room");
        while let Some(f) = self.a.poll_transmit() {
            self.sent.push(f);
        }
    }

    /// Turns what A sent into datagrams, as a driver's write and the peer's
    /// read would (not timed).
    fn put_on_wire(&mut self) {
        let wire = &mut self.wire;
        wire.extend(self.sent.drain(..).map(|f| f.to_bytes()));
    }

    /// Delivers `wire` to B (timed by the caller or not).
    fn receive_all(&mut self) -> usize {
        let mut n = 0;
        for d in self.wire.drain(..) {
            self.b.handle_receive(self.now, d).expect("link stays up");
            while let Some(m) = self.b.poll_receive() {
                n += black_box(m).len();
            }
        }
        n
    }

    /// Returns B's acks (and any other frames) to A and fires due timers,
    /// until nothing moves: with large messages the congestion window lets
    /// a batch out over several round trips, and what stayed queued would
    /// pile up across batches until the window refuses sends.
    fn settle(&mut self) {
        self.now += Duration::from_millis(20);
        for _ in 0..1000 {
            for s in [&mut self.a, &mut self.b] {
                let _ = s.handle_timeout(self.now);
            }
            let mut moved = false;
            while let Some(f) = self.b.poll_transmit() {
                moved = true;
                self.a
                    .handle_receive(self.now, f.to_bytes())
                    .expect("link stays up");
            }
            while let Some(f) = self.a.poll_transmit() {
                moved = true;
                self.b
                    .handle_receive(self.now, f.to_bytes())
                    .expect("link stays up");
            }
            if !moved {
                break;
            }
        }
        while self.b.poll_receive().is_some() {}
        while self.a.poll_event().is_some() || self.b.poll_event().is_some() {}
    }
}

fn send_receive(c: &mut Criterion) {
    for direction in ["send", "receive"] {
        let mut group = c.benchmark_group(direction);
        group
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(900))
            .sample_size(20);
        for spec in STACKS {
            for size in SIZES {
                group.throughput(Throughput::Elements(1));
                let id = BenchmarkId::new(label(spec), size);
                group.bench_function(id, |bench| {
                    let mut b = Bench::new(spec, size);
                    bench.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        let mut done = 0;
                        while done < iters {
                            let batch = BATCH.min(iters - done);
                            if direction == "send" {
                                let t = Instant::now();
                                for _ in 0..batch {
                                    b.send();
                                }
                                total += t.elapsed();
                                b.sent.clear();
                            } else {
                                for _ in 0..batch {
                                    b.send();
                                }
                                b.put_on_wire();
                                let t = Instant::now();
                                black_box(b.receive_all());
                                total += t.elapsed();
                            }
                            b.settle();
                            done += batch;
                        }
                        total
                    });
                });
            }
        }
        group.finish();
    }
}

fn ordering_frame(seq: u64, payload: &Bytes) -> Frame {
    let mut f = Frame::from_payload(payload.clone());
    f.push_header(&OrderingHeader { seq }.emit());
    Frame::from_payload(f.to_bytes())
}

/// Fig. 5: the ordering layer (lossy, five pending slots as in the paper)
/// handling one sequence of ten messages `0..10`. Criterion reports the time
/// per sequence, and with it messages per second (throughput = messages
/// handed to the layer per sequence):
///
/// * `in_order`: `0 1 2 3 4 5 6 7 8 9`, each handed up at once;
/// * `late_2_after_6`: `0 1 3 4 5 6 2 7 8 9`, 3..=6 wait in the buffer
///   until 2 arrives, then go up with it;
/// * `dropped_2`: `0 1 3 4 5 6 7 8 9` (nine messages), 3..=6 wait until 7
///   finds the five slots full: the layer skips 2 (`GapSkipped`) and hands
///   3..=7 up.
///
/// Only the layer's `handle_receive` and the draining of what it hands up
/// are timed: frames are built before, and their buffer freed after.
fn ordering_sequence(c: &mut Criterion) {
    let mut group = c.benchmark_group("ordering_sequence");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(900))
        .sample_size(20);
    let payload = Bytes::from_static(&[1; 1024]);
    let cases: [(&str, Vec<u64>); 3] = [
        ("in_order", (0..10).collect()),
        ("late_2_after_6", vec![0, 1, 3, 4, 5, 6, 2, 7, 8, 9]),
        ("dropped_2", vec![0, 1, 3, 4, 5, 6, 7, 8, 9]),
    ];
    /// Sequences per timed batch.
    const SEQUENCES: u64 = 100;
    for (name, order) in cases {
        group.throughput(Throughput::Elements(order.len() as u64));
        group.bench_function(name, |bench| {
            let config = OrderingConfig {
                max_pending: 5,
                ..OrderingConfig::lossy()
            };
            let mut layer = Ordering::new(config);
            let mut out = Output::new();
            let now = Instant::now();
            let mut base = 0u64;
            let mut frames: Vec<Frame> = Vec::with_capacity(SEQUENCES as usize * order.len());
            bench.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut done = 0;
                while done < iters {
                    let batch = SEQUENCES.min(iters - done);
                    frames.extend(
                        (0..batch)
                            .flat_map(|i| {
                                let b = base + i * 10;
                                order.iter().map(move |s| b + s)
                            })
                            .map(|seq| ordering_frame(seq, &payload)),
                    );
                    let t = Instant::now();
                    for f in frames.drain(..) {
                        let _ = layer.handle_receive(now, f, &mut out);
                        while let Some(up) = out.pop_up() {
                            black_box(up);
                        }
                    }
                    total += t.elapsed();
                    while out.pop_event().is_some() {}
                    // A dropped message is skipped by the next batch's first.
                    base += batch * 10;
                    done += batch;
                }
                total
            });
        });
    }
    group.finish();
}

/// `round_trip/<stack>/<bytes>`: one request and its reply through two
/// stacks, the way a driver runs them for W1 (`pingpong`): send, drain the
/// transmit queue, read the stack's deadline; receive, drain the received
/// messages, read the deadline; and back. Acks ride on the replies and
/// the requests, as on a real link; the clock moves 20 µs per round trip,
/// so no timer fires. Time per round trip (both directions, both stacks).
fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_trip");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(900))
        .sample_size(20);
    let stacks = [
        "tcp / framing",
        "udp / slicing / delivery / ordering",
        "udp / heartbeat / slicing / delivery / ordering / batching",
    ];
    /// One leg: `from` sends `payload`, `to` receives it.
    fn leg(from: &mut Stack, to: &mut Stack, now: Instant, payload: &Bytes) -> usize {
        from.handle_send(now, payload.clone())
            .expect("window has room");
        black_box(from.poll_timeout());
        let mut n = 0;
        while let Some(frame) = from.poll_transmit() {
            to.handle_receive(now, frame.to_bytes())
                .expect("link stays up");
        }
        while let Some(m) = to.poll_receive() {
            n += black_box(m).len();
        }
        black_box(to.poll_timeout());
        n
    }
    for spec in stacks {
        let size = 16;
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new(label(spec), size), |bench| {
            let spec: StackSpec = spec.parse().expect("valid spec");
            let mut now = Instant::now();
            let (mut a, mut b) = (spec.build(now), spec.build(now));
            let payload = Bytes::from(vec![7u8; size]);
            bench.iter(|| {
                now += Duration::from_micros(20);
                leg(&mut a, &mut b, now, &payload) + leg(&mut b, &mut a, now, &payload)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, send_receive, ordering_sequence, round_trip);
criterion_main!(benches);
