//! Arbitrary bytes as replicator packets: `Packet::decode` never panics,
//! and a `Replicator` that knows two other members (holding a counter, a
//! set, a durable key, an update and a get waiting for answers) is fed a
//! sequence of them through `handle_packet`, with time passing, local
//! updates and member changes between, draining `poll_transmit`,
//! `poll_event` and `poll_store` after each step: it must never panic, and
//! every packet it sends must decode and fit `max_packet`.
//!
//! The input is a list of steps `[op, len_lo, len_hi, bytes...]`:
//! - op % 6 == 0: `bytes` as a packet, as they are;
//! - 1, 2: `bytes` decoded as a packet and, if that works, re-addressed
//!   from member `b` (1) or `c` (2) of this cluster, so the fuzzer reaches
//!   past the cluster check; the patched packet is fed;
//! - 3: time passes (`bytes[0]` × 20 ms) and `handle_timeout` runs;
//! - 4: a local update (counter, set add or remove, durable key);
//! - 5: the member list changes (`c` leaves, or comes back).
#![no_main]

use std::sync::Arc;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use plexus_data::replicator::wire::Packet;
use plexus_data::{Consistency, GCounter, Key, ORSet, Replicator, ReplicatorConfig};

fn config() -> ReplicatorConfig {
    ReplicatorConfig {
        cluster: "fuzz".into(),
        // Small, so states get chunked and the limits are reached.
        max_packet: 512,
        max_transfer: 64 << 10,
        max_round_bytes: 4 << 10,
        max_delta_bytes: 2 << 10,
        buckets: 16,
        max_keys: 256,
        max_requests: 64,
        durable: vec!["d*".into()],
        ..ReplicatorConfig::default()
    }
}

/// Drains every output; checks the packets sent.
fn drain(r: &mut Replicator, now: Instant) {
    let max = r.config().max_packet;
    while let Some(t) = r.poll_transmit() {
        assert!(t.packet.len() <= max, "{} > {max}", t.packet.len());
        Packet::decode(&t.packet).expect("a packet sent decodes");
    }
    while r.poll_event().is_some() {}
    while let Some(batch) = r.poll_store() {
        r.handle_stored(now, batch.id);
    }
}

fn members(with_c: bool) -> Vec<Arc<str>> {
    let mut m: Vec<Arc<str>> = vec!["a".into(), "b".into()];
    if with_c {
        m.push("c".into());
    }
    m
}

fuzz_target!(|data: &[u8]| {
    let start = Instant::now();
    let mut now = start;
    let mut r = Replicator::new(config(), "a", 1, now);
    r.set_members(now, &members(true));
    let counter = Key::<GCounter>::new("g");
    let set = Key::<ORSet<u32>>::new("s");
    let durable = Key::<GCounter>::new("d1");
    let me = r.replica();
    let t = Duration::from_secs(2);
    let _ = r.update(now, &counter, Consistency::Local, t, |c| c.increment(me, 3));
    let _ = r.update(now, &set, Consistency::Local, t, |s| s.add(me, 7));
    let _ = r.update(now, &durable, Consistency::Majority, t, |c| {
        c.increment(me, 1)
    });
    let _ = r.get(now, &counter, Consistency::All, t);
    // The cluster's hash, from a packet it sends.
    let mut cluster = None;
    while let Some(t) = r.poll_transmit() {
        if let Ok(p) = Packet::decode(&t.packet) {
            cluster = Some(p.cluster);
        }
    }
    // The majority update sent a write to each peer.
    let cluster = cluster.expect("the replicator sent writes");
    drain(&mut r, now);

    let mut with_c = true;
    let mut rest = data;
    while let [op, lo, hi, tail @ ..] = rest {
        let len = (usize::from(*lo) | usize::from(*hi) << 8).min(tail.len());
        let (bytes, next) = tail.split_at(len);
        rest = next;
        match op % 6 {
            0 => {
                let _ = r.handle_packet(now, bytes);
            }
            1 | 2 => {
                if let Ok(mut p) = Packet::decode(bytes) {
                    p.cluster = cluster;
                    p.from_address = if op % 6 == 1 { "b" } else { "c" }.into();
                    let _ = r.handle_packet(now, &p.encode());
                }
            }
            3 => {
                let step = bytes.first().copied().unwrap_or(1);
                now += Duration::from_millis(u64::from(step) * 20);
                r.handle_timeout(now);
            }
            4 => {
                let pick = bytes.first().copied().unwrap_or(0);
                let level = match pick % 4 {
                    0 => Consistency::Local,
                    1 => Consistency::Majority,
                    2 => Consistency::All,
                    _ => Consistency::Count(2),
                };
                let x = u32::from(bytes.get(1).copied().unwrap_or(0));
                let _ = match pick / 4 % 4 {
                    0 => r.update(now, &counter, level, t, |c| c.increment(me, 1)),
                    1 => r.update(now, &set, level, t, |s| s.add(me, x)),
                    2 => r.update(now, &set, level, t, |s| s.remove(&x)),
                    _ => r.update(now, &durable, level, t, |c| c.increment(me, 1)),
                };
            }
            _ => {
                with_c = !with_c;
                r.set_members(now, &members(with_c));
            }
        }
        drain(&mut r, now);
    }
    // Every request ends, whatever came in.
    now += Duration::from_secs(30);
    r.handle_timeout(now);
    drain(&mut r, now);
});
