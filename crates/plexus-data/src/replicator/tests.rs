//! Hostile and broken input: each is refused with its typed error, counted,
//! and changes nothing else.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::wire::{Body, Packet, WireEntry};
use super::*;
use crate::crdt::{GCounter, ORSet};

fn pair(config: ReplicatorConfig) -> (Replicator, Replicator, Instant) {
    let now = Instant::now();
    let mut a = Replicator::new(config.clone(), "sim:0", 1, now);
    let mut b = Replicator::new(config, "sim:1", 1, now);
    let members: Vec<Arc<str>> = vec!["sim:0".into(), "sim:1".into()];
    a.set_members(now, &members);
    b.set_members(now, &members);
    (a, b, now)
}

/// Moves every packet `from` has for `to`; returns how many and their
/// largest size.
fn deliver(from: &mut Replicator, to: &mut Replicator, now: Instant) -> (usize, usize) {
    let (mut n, mut max) = (0, 0);
    while let Some(t) = from.poll_transmit() {
        if t.to == *to.address() {
            n += 1;
            max = max.max(t.packet.len());
            let _ = to.handle_packet(now, &t.packet);
        }
    }
    (n, max)
}

fn entry<T: Crdt>(key: &str, state: &T) -> WireEntry {
    WireEntry {
        key: key.into(),
        tag: type_tag::<T>(),
        data: postcard::to_stdvec(state).unwrap().into(),
        pruning: PruningMarkers::new(),
    }
}

fn delta_from(a: &Replicator, entries: Vec<WireEntry>) -> Vec<u8> {
    Packet {
        cluster: wire::cluster_hash(&a.config().cluster),
        from: a.replica(),
        from_address: a.address().to_string(),
        body: Body::Delta { to_seq: 1, entries },
    }
    .encode()
}

#[test]
fn packets_of_another_cluster_or_a_stranger_are_refused() {
    let (a, mut b, now) = pair(ReplicatorConfig::default());
    let mut counter = GCounter::default();
    counter.increment(a.replica(), 3);
    let mut foreign = Packet::decode(&delta_from(&a, vec![entry("c", &counter)])).unwrap();
    foreign.cluster = wire::cluster_hash("elsewhere");
    assert_eq!(
        b.handle_packet(now, &foreign.encode()),
        Err(PacketError::OtherCluster)
    );
    let mut stranger = foreign.clone();
    stranger.cluster = wire::cluster_hash("plexus");
    stranger.from_address = "sim:9".into();
    assert_eq!(
        b.handle_packet(now, &stranger.encode()),
        Err(PacketError::NotAMember {
            address: "sim:9".into(),
            replica: a.replica()
        })
    );
    assert_eq!(
        b.handle_packet(now, b"\x01garbage"),
        Err(PacketError::Wire(wire::WireError::Malformed))
    );
    assert_eq!(b.stats().packets_refused, 3);
    assert_eq!(b.stats().keys, 0);
}

#[test]
fn bad_entries_are_refused_one_by_one() {
    let config = ReplicatorConfig {
        max_keys: 3,
        // No room to hold states of unregistered types: refused.
        max_unregistered: 0,
        ..ReplicatorConfig::default()
    };
    let (a, mut b, now) = pair(config);
    b.register::<ORSet<String>>();
    let counter_key = Key::<GCounter>::new("counter");
    b.update(now, &counter_key, Consistency::Local, Duration::ZERO, |c| {
        c.increment(b_replica(), 1)
    })
    .unwrap();
    let mut good = GCounter::default();
    good.increment(a.replica(), 2);
    let mut future = GCounter::default();
    future.increment(b.replica(), 100);
    let mut set = ORSet::<String>::default();
    set.add(a.replica(), "x".into());
    let unknown = WireEntry {
        tag: 12345,
        ..entry("unknown", &good)
    };
    let malformed = WireEntry {
        data: Bytes::from_static(&[0xff, 0xff, 0xff]),
        ..entry("malformed", &good)
    };
    let entries = vec![
        entry("counter", &set),    // another type than the key holds
        entry("counter", &future), // more of b's mutations than b made
        unknown,
        malformed,
        entry("good", &good),
        entry("one-too-many", &good),
        entry("two-too-many", &good),
    ];
    b.handle_packet(now, &delta_from(&a, entries)).unwrap();
    let stats = b.stats();
    assert_eq!(stats.entries_refused, 5, "{stats:?}");
    assert_eq!(stats.keys, 3);
    assert_eq!(
        b.value(&Key::<GCounter>::new("good"))
            .unwrap()
            .unwrap()
            .value(),
        2
    );
    assert_eq!(b.value(&counter_key).unwrap().unwrap().value(), 1);
}

/// `b`'s replica id, as `pair` makes it.
fn b_replica() -> ReplicaId {
    ReplicaId::of_member("sim:1", 1)
}

#[test]
fn a_large_state_travels_in_chunks_no_packet_over_the_limit() {
    let (mut a, mut b, now) = pair(ReplicatorConfig::default());
    b.register::<ORSet<String>>();
    let key = Key::<ORSet<String>>::new("big");
    let me = a.replica();
    a.update(now, &key, Consistency::Local, Duration::ZERO, |s| {
        for i in 0..50_000 {
            s.add(me, format!("element number {i}"));
        }
        // The join of the 50,000 deltas is the state itself.
        s.clone()
    })
    .unwrap();
    let t = now + Duration::from_millis(100);
    a.handle_timeout(t);
    let (packets, largest) = deliver(&mut a, &mut b, t);
    assert!(packets > 10, "{packets}");
    assert!(largest <= a.config().max_packet, "{largest}");
    assert_eq!(b.value(&key).unwrap().unwrap().len(), 50_000);
}

#[test]
fn chunk_floods_are_bounded() {
    let config = ReplicatorConfig {
        max_transfer: 1_000,
        ..ReplicatorConfig::default()
    };
    let (a, mut b, now) = pair(config);
    let chunk = |transfer, index, count, len| {
        Packet {
            cluster: wire::cluster_hash("plexus"),
            from: a.replica(),
            from_address: a.address().to_string(),
            body: Body::Chunk {
                transfer,
                index,
                count,
                bytes: Bytes::from(vec![0; len]),
            },
        }
        .encode()
    };
    assert_eq!(
        b.handle_packet(now, &chunk(1, 0, u32::MAX, 10)),
        Err(PacketError::Chunk(ChunkError::TooLarge { limit: 1_000 }))
    );
    assert_eq!(b.handle_packet(now, &chunk(2, 0, 3, 600)), Ok(()));
    assert_eq!(
        b.handle_packet(now, &chunk(2, 1, 3, 600)),
        Err(PacketError::Chunk(ChunkError::TooLarge { limit: 1_000 }))
    );
    // The refused transfer is dropped whole; its deadline goes with it.
    assert_eq!(b.reassembly.next_deadline(), None);
}

#[test]
fn corrupt_and_newer_records_are_refused_and_the_rest_recovered() {
    let now = Instant::now();
    let mut r = Replicator::new(ReplicatorConfig::default(), "sim:0", 1, now);
    let mut c = GCounter::default();
    c.increment(ReplicaId(9), 4);
    let good = encode_record(&entry("good", &c));
    let mut newer = good.clone();
    newer[0] = RECORD_VERSION + 1;
    let errors = r.recover(vec![
        ("good".to_string(), good.clone()),
        ("newer".to_string(), newer),
        ("torn".to_string(), good[..good.len() - 1].to_vec()),
        ("moved".to_string(), good),
    ]);
    assert_eq!(
        errors,
        vec![
            RecordError::NewerVersion {
                key: "newer".into(),
                version: RECORD_VERSION + 1
            },
            RecordError::Corrupt { key: "torn".into() },
            RecordError::Corrupt {
                key: "moved".into()
            },
        ]
    );
    assert_eq!(
        r.value(&Key::<GCounter>::new("good"))
            .unwrap()
            .unwrap()
            .value(),
        4
    );
}

#[test]
fn a_delta_already_merged_changes_nothing_and_is_not_reported() {
    let (mut a, mut b, now) = pair(ReplicatorConfig::default());
    let key = Key::<GCounter>::new("c");
    let me = a.replica();
    a.update(now, &key, Consistency::Local, Duration::ZERO, |c| {
        c.increment(me, 1)
    })
    .unwrap();
    let t = now + Duration::from_millis(100);
    a.handle_timeout(t);
    let packets: Vec<Transmit> = std::iter::from_fn(|| a.poll_transmit()).collect();
    for p in packets.iter().chain(&packets) {
        b.handle_packet(t, &p.packet).unwrap();
    }
    assert_eq!(b.stats().entries_merged, 1);
    let changes: Vec<Event> = std::iter::from_fn(|| b.poll_event()).collect();
    assert_eq!(changes, vec![Event::Changed { key: "c".into() }]);
}

#[test]
fn states_of_an_unregistered_type_are_held_then_merged_and_writes_of_it_refused() {
    let (mut a, mut b, now) = pair(ReplicatorConfig::default());
    let key = Key::<ORSet<String>>::new("tags");
    let me = a.replica();
    let request = a
        .update(now, &key, Consistency::All, Duration::from_secs(1), |s| {
            s.add(me, "x".into())
        })
        .unwrap();
    deliver(&mut a, &mut b, now);
    // b cannot merge it, says so, and holds it.
    assert_eq!(b.value(&key).unwrap(), None);
    deliver(&mut b, &mut a, now);
    let later = now + Duration::from_secs(1);
    a.handle_timeout(later);
    let ended: Vec<Event> = std::iter::from_fn(|| a.poll_event())
        .filter(|e| matches!(e, Event::UpdateDone { .. }))
        .collect();
    let [Event::UpdateDone {
        request: r,
        result: Err(e),
        ..
    }] = ended.as_slice()
    else {
        panic!("{ended:?}")
    };
    assert_eq!(*r, request);
    assert!(
        matches!(
            e,
            UpdateError::Timeout {
                acked: 1,
                refused: 1,
                needed: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("is its type registered on every member?"),
        "{e}"
    );
    b.register::<ORSet<String>>();
    assert!(b.value(&key).unwrap().unwrap().contains(&"x".to_string()));
}

#[test]
fn nothing_of_a_durable_key_is_acknowledged_before_the_store_wrote_it() {
    let config = ReplicatorConfig {
        durable: vec!["d/*".into()],
        ..ReplicatorConfig::default()
    };
    let (mut a, mut b, now) = pair(config);
    let key = Key::<GCounter>::new("d/orders");
    let me = a.replica();
    let request = a
        .update(now, &key, Consistency::All, Duration::from_secs(5), |c| {
            c.increment(me, 1)
        })
        .unwrap();
    // b merges the write but holds its ack until its store wrote it.
    deliver(&mut a, &mut b, now);
    assert!(b.poll_transmit().is_none());
    let batch = b.poll_store().expect("b has a batch to write");
    assert_eq!(batch.records.len(), 1);
    b.handle_stored(now, batch.id);
    deliver(&mut b, &mut a, now);
    // a has the ack, but not its own store's word: not done yet.
    let done = |a: &mut Replicator| {
        std::iter::from_fn(|| a.poll_event()).any(
            |e| matches!(e, Event::UpdateDone { request: r, result: Ok(()), .. } if r == request),
        )
    };
    assert!(!done(&mut a));
    let batch = a.poll_store().expect("a has a batch to write");
    let record = decode_record("d/orders", &batch.records[0].1).unwrap();
    assert_eq!(record.key, "d/orders");
    a.handle_stored(now, batch.id);
    assert!(done(&mut a));
}
