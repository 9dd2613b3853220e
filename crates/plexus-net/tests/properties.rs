//! Property tests: the guarantees of whole stacks over a hostile simulated
//! link, and codec round trips.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use plexus_net::layers::compression;
use plexus_net::layers::delivery::{Ack, DeliveryHeader, SackRange, MAX_HEADER_LEN};
use plexus_net::layers::framing;
use plexus_net::layers::ordering::OrderingHeader;
use plexus_net::layers::slicing::FragmentHeader;
use plexus_net::sim::{LinkModel, Pair};
use plexus_net::{LinkEvent, StackSendError, StackSpec};
use proptest::prelude::*;

/// A message whose content identifies it: index, then a pattern.
fn message(index: u32, len: usize) -> Bytes {
    let mut m = BytesMut::with_capacity(len.max(4));
    m.extend_from_slice(&index.to_be_bytes());
    m.extend((4..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(index) as u8));
    m.truncate(len.max(4));
    m.freeze()
}

fn index_of(m: &Bytes) -> u32 {
    u32::from_be_bytes(m[..4].try_into().expect("messages are at least 4 bytes"))
}

fn link() -> impl Strategy<Value = LinkModel> {
    (0.0..0.05f64, 0.0..0.1f64, 0.0..0.2f64, 0u64..20).prop_map(
        |(loss, duplicate, reorder, jitter)| LinkModel {
            loss,
            duplicate,
            reorder,
            latency: Duration::from_millis(5),
            jitter: Duration::from_millis(jitter),
        },
    )
}

/// Sends every message from A (waiting for `SendReady` on back-pressure) and
/// runs until the link is quiet; returns what B handed up.
fn transfer(spec: &str, link: LinkModel, seed: u64, sizes: &[usize]) -> Vec<Bytes> {
    let spec: StackSpec = spec.parse().expect("valid spec");
    let mut sim = Pair::new(&spec, link, seed, Instant::now());
    for (i, len) in sizes.iter().enumerate() {
        let mut msg = message(i as u32, *len);
        loop {
            match sim.send_a(msg) {
                Ok(()) => break,
                Err(StackSendError::WouldBlock(frame)) => {
                    msg = frame.into_bytes();
                    let seen = sim.a.events.len();
                    while !sim.a.events[seen..].contains(&LinkEvent::SendReady) {
                        assert!(sim.step(), "stalled while blocked");
                    }
                }
                Err(e) => panic!("unexpected send error {e}"),
            }
        }
        sim.run_for(Duration::from_micros(500));
    }
    assert!(
        sim.run_until_quiet(Duration::from_secs(6), Duration::from_secs(900)),
        "did not settle"
    );
    assert_eq!(sim.a.closed, None);
    assert_eq!(sim.b.closed, None);
    sim.b.received
}

/// Whole messages are retransmitted when a fragment is lost, so with 5 % loss
/// a 30 KiB message needs several attempts: retry fast and often, and let
/// strict ordering wait long enough.
const STRICT: &str =
    "udp / slicing(mtu=1200) / delivery(max_retries=200, max_rto=1s) / ordering(gap_timeout=600s)";

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn strict_stack_delivers_every_message_exactly_once_in_order(
        link in link(),
        seed in any::<u64>(),
        sizes in prop::collection::vec(prop_oneof![9 => 1usize..2048, 1 => 2048usize..32_768], 1..60),
    ) {
        let got = transfer(STRICT, link, seed, &sizes);
        prop_assert_eq!(got.len(), sizes.len());
        for (i, m) in got.iter().enumerate() {
            prop_assert_eq!(m, &message(i as u32, sizes[i]));
        }
    }
}

/// Sends each batch of messages from A with one drain, so small messages
/// share datagrams (bundling), waiting for `SendReady` on back-pressure;
/// returns what B handed up and the datagrams A sent.
fn transfer_batches(
    spec: &str,
    link: LinkModel,
    seed: u64,
    batches: &[Vec<usize>],
) -> (Vec<Bytes>, u64) {
    let spec: StackSpec = spec.parse().expect("valid spec");
    let mut sim = Pair::new(&spec, link, seed, Instant::now());
    let mut index = 0u32;
    for batch in batches {
        for len in batch {
            let mut msg = message(index, *len);
            index += 1;
            loop {
                match sim.a.stack.handle_send(sim.now, msg) {
                    Ok(()) => break,
                    Err(StackSendError::WouldBlock(frame)) => {
                        msg = frame.into_bytes();
                        sim.pump();
                        let seen = sim.a.events.len();
                        while !sim.a.events[seen..].contains(&LinkEvent::SendReady) {
                            assert!(sim.step(), "stalled while blocked");
                        }
                    }
                    Err(e) => panic!("unexpected send error {e}"),
                }
            }
        }
        sim.pump();
        sim.run_for(Duration::from_micros(500));
    }
    assert!(
        sim.run_until_quiet(Duration::from_secs(6), Duration::from_secs(900)),
        "did not settle"
    );
    assert_eq!(sim.a.closed, None);
    assert_eq!(sim.b.closed, None);
    (sim.b.received, sim.a.transmitted)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Bundles of small messages, mixed with fragmented ones, over a lossy,
    /// duplicating, reordering link: every message once, in order.
    #[test]
    fn bundled_batches_are_delivered_exactly_once_in_order(
        link in link(),
        seed in any::<u64>(),
        batches in prop::collection::vec(
            prop::collection::vec(prop_oneof![8 => 4usize..120, 1 => 120usize..700, 1 => 700usize..4000], 1..80),
            1..8,
        ),
    ) {
        let spec = "udp / slicing(mtu=600) / delivery(max_retries=200, max_rto=1s) / ordering(gap_timeout=600s)";
        let (got, _) = transfer_batches(spec, link, seed, &batches);
        let sizes: Vec<usize> = batches.concat();
        prop_assert_eq!(got.len(), sizes.len());
        for (i, m) in got.iter().enumerate() {
            prop_assert_eq!(m, &message(i as u32, sizes[i]));
        }
    }
}

#[test]
fn a_batch_of_small_messages_crosses_in_few_datagrams() {
    let batches = vec![vec![20usize; 1000]];
    let (got, datagrams) = transfer_batches(
        "udp / slicing / delivery / ordering",
        LinkModel::default(),
        1,
        &batches,
    );
    assert_eq!(got.len(), 1000);
    // Records of 14 + 20 + 8 (ordering) + 9 (delivery) bytes: 23 fit in
    // 1200; the congestion window lets the batch out in a few rounds.
    assert!(datagrams < 1000 / 15, "{datagrams} datagrams");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3, ..ProptestConfig::default() })]

    /// Messages up to 1 MiB (about 880 fragments each). Whole messages are
    /// retransmitted, so loss is kept low; duplication and reordering are not.
    #[test]
    fn strict_stack_delivers_messages_up_to_one_mebibyte(
        seed in any::<u64>(),
        sizes in prop::collection::vec(1usize..=(1 << 20), 1..4),
    ) {
        let link = LinkModel {
            loss: 0.0003,
            duplicate: 0.05,
            reorder: 0.1,
            jitter: Duration::from_millis(3),
            ..LinkModel::default()
        };
        let mut sizes = sizes;
        sizes.push(1 << 20);
        let got = transfer(STRICT, link, seed, &sizes);
        prop_assert_eq!(got.len(), sizes.len());
        for (i, m) in got.iter().enumerate() {
            prop_assert_eq!(m, &message(i as u32, sizes[i]));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn lossy_ordering_never_delivers_twice_and_only_in_increasing_order(
        loss in 0.0..0.3f64,
        duplicate in 0.0..0.5f64,
        reorder in 0.0..0.5f64,
        seed in any::<u64>(),
        count in 1u32..300,
    ) {
        let spec: StackSpec = "mem / ordering(mode=lossy, max_pending=8, gap_timeout=20ms)"
            .parse()
            .expect("valid");
        let link = LinkModel { loss, duplicate, reorder, jitter: Duration::from_millis(10), ..LinkModel::default() };
        let mut sim = Pair::new(&spec, link, seed, Instant::now());
        for i in 0..count {
            sim.send_a(message(i, 8)).expect("ordering never blocks");
            sim.run_for(Duration::from_millis(1));
        }
        sim.run_for(Duration::from_secs(1));
        let got: Vec<u32> = sim.b.received.iter().map(index_of).collect();
        prop_assert!(got.windows(2).all(|w| w[0] < w[1]), "not increasing: {:?}", got);
        if loss == 0.0 {
            prop_assert_eq!(got.len() as u32, count);
        }
    }

    #[test]
    fn framing_round_trips_over_any_chunking(
        msgs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..20),
        cuts in prop::collection::vec(1usize..64, 1..50),
    ) {
        let spec: StackSpec = "tcp / framing".parse().expect("valid");
        let now = Instant::now();
        let (mut a, mut b) = (spec.build(now), spec.build(now));
        let mut wire = BytesMut::new();
        for m in &msgs {
            a.handle_send(now, Bytes::copy_from_slice(m)).expect("small");
        }
        while let Some(f) = a.poll_transmit() {
            f.extend_into(&mut wire);
        }
        let mut wire = wire.freeze();
        for cut in cuts.iter().cycle() {
            if wire.is_empty() {
                break;
            }
            let chunk = wire.split_to((*cut).min(wire.len()));
            b.handle_receive(now, chunk).expect("valid stream");
        }
        let got: Vec<Bytes> = std::iter::from_fn(|| b.poll_receive()).collect();
        prop_assert_eq!(got.len(), msgs.len());
        for (g, m) in got.iter().zip(&msgs) {
            prop_assert_eq!(&g[..], &m[..]);
        }
    }

    #[test]
    fn delivery_header_round_trips(
        seq in prop::option::of(any::<u64>()),
        cum in 0u64..(u64::MAX / 2),
        gaps in prop::collection::vec((1u32..1000, 1u32..1000), 0..=4),
        with_ack in any::<bool>(),
    ) {
        let ack = with_ack.then(|| {
            let mut ack = Ack::new(cum);
            let mut at = cum;
            for (gap, len) in &gaps {
                let start = at + u64::from(*gap);
                let end = start + u64::from(*len);
                assert!(ack.push_range(SackRange { start, end }));
                at = end;
            }
            ack
        });
        prop_assume!(seq.is_some() || ack.is_some());
        let h = DeliveryHeader { seq, ack };
        let mut buf = [0; MAX_HEADER_LEN];
        let n = h.emit(&mut buf);
        prop_assert_eq!(n, h.buffer_len());
        prop_assert_eq!(DeliveryHeader::parse(&buf[..n]), Ok((h, n)));
    }

    #[test]
    fn small_headers_round_trip(id in any::<u32>(), count in 1u32..1000, index in any::<u32>(), seq in 0..u64::MAX) {
        let f = FragmentHeader { id, index: index % count, count };
        prop_assert_eq!(FragmentHeader::parse(&f.emit(), 1000), Ok(f));
        let o = OrderingHeader { seq };
        prop_assert_eq!(OrderingHeader::parse(&o.emit()), Ok(o));
    }

    #[test]
    fn compression_round_trips(data in prop::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..5000)) {
        let spec: StackSpec = "mem / compression(threshold=16)".parse().expect("valid");
        let now = Instant::now();
        let (mut a, mut b) = (spec.build(now), spec.build(now));
        a.handle_send(now, Bytes::from(data.clone())).expect("small");
        let wire = a.poll_transmit().expect("one frame").to_bytes();
        prop_assert!(wire.len() <= data.len() + 1);
        b.handle_receive(now, wire).expect("valid");
        prop_assert_eq!(&b.poll_receive().expect("one message")[..], &data[..]);
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = DeliveryHeader::parse(&data);
        let _ = FragmentHeader::parse(&data, u32::MAX);
        let _ = OrderingHeader::parse(&data);
        let _ = compression::decode(&data, 1 << 16);
        let _ = framing::decode(&mut BytesMut::from(&data[..]), 1 << 16);
        let spec: StackSpec = "udp / slicing / delivery / ordering".parse().expect("valid");
        let mut stack = spec.build(Instant::now());
        let _ = stack.handle_receive(Instant::now(), Bytes::from(data));
    }
}
