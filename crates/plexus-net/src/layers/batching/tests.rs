use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::error::LinkError;
use crate::sim::{LinkModel, Pair};
use crate::spec::StackSpec;

fn layer(max_batch: usize) -> Batching {
    Batching::new(BatchingConfig { max_batch })
}

fn msg(i: usize, len: usize) -> Bytes {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// Sends `messages` as one batch of input, flushes, and returns the frames
/// pushed down.
fn send_all(layer: &mut Batching, messages: &[Bytes]) -> Vec<Bytes> {
    let now = Instant::now();
    let mut out = Output::new();
    for m in messages {
        layer
            .handle_send(now, Frame::from_payload(m.clone()), &mut out)
            .expect("batching refuses nothing");
    }
    layer.handle_flush(now, &mut out);
    std::iter::from_fn(|| out.pop_down().map(|f| f.to_bytes())).collect()
}

fn receive_all(layer: &mut Batching, frames: &[Bytes]) -> Vec<Bytes> {
    let now = Instant::now();
    let mut out = Output::new();
    for f in frames {
        layer
            .handle_receive(now, Frame::from_payload(f.clone()), &mut out)
            .expect("valid frame");
    }
    std::iter::from_fn(|| out.pop_up().map(Frame::into_bytes)).collect()
}

#[test]
fn small_messages_of_one_batch_share_one_frame_and_arrive_in_order() {
    let messages: Vec<Bytes> = (0..20).map(|i| msg(i, 30)).collect();
    let frames = send_all(&mut layer(1024), &messages);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0][0], BATCH);
    assert_eq!(frames[0].len(), 1 + 20 * 31);
    assert_eq!(receive_all(&mut layer(1024), &frames), messages);
}

#[test]
fn a_lone_message_travels_alone_without_a_copy() {
    let m = msg(1, 100);
    let mut out = Output::new();
    let mut l = layer(1024);
    let now = Instant::now();
    l.handle_send(now, Frame::from_payload(m.clone()), &mut out)
        .expect("accepted");
    assert!(out.pop_down().is_none(), "held until the flush");
    l.handle_flush(now, &mut out);
    let frame = out.pop_down().expect("one frame");
    assert_eq!(frame.header_len(), 1, "a kind byte in the headroom");
    assert_eq!(frame.first_chunk(), &[SINGLE][..]);
    assert_eq!(l.batches_sent(), (0, 0));
    let wire = frame.to_bytes();
    assert_eq!(&wire[1..], &m[..]);
    assert_eq!(receive_all(&mut layer(1024), &[wire]), vec![m]);
}

#[test]
fn batches_never_exceed_max_batch_and_large_messages_keep_their_place() {
    let mut messages: Vec<Bytes> = (0..50).map(|i| msg(i, 100)).collect();
    messages.insert(7, msg(99, 5000));
    messages.insert(30, Bytes::new());
    let frames = send_all(&mut layer(1024), &messages);
    for f in &frames {
        assert!(f[0] == SINGLE || f.len() <= 1024, "{} bytes", f.len());
    }
    // 49 small messages of 101 wire bytes, 10 per batch; the large and the
    // empty one alone.
    assert!(frames.len() <= 2 + 49 / 10 + 3, "{} frames", frames.len());
    assert_eq!(receive_all(&mut layer(1024), &frames), messages);
}

#[test]
fn messages_sent_after_a_flush_start_a_new_batch() {
    let mut l = layer(1024);
    let a: Vec<Bytes> = (0..3).map(|i| msg(i, 10)).collect();
    let b: Vec<Bytes> = (3..6).map(|i| msg(i, 10)).collect();
    let mut frames = send_all(&mut l, &a);
    frames.extend(send_all(&mut l, &b));
    assert_eq!(frames.len(), 2);
    assert_eq!(l.batches_sent(), (2, 6));
    let all: Vec<Bytes> = a.into_iter().chain(b).collect();
    assert_eq!(receive_all(&mut layer(1024), &frames), all);
}

#[test]
fn length_prefixes_take_one_to_three_bytes() {
    for len in [1usize, 127, 128, 16_383, 16_384, (1 << 20) - 1] {
        let mut buf = BytesMut::new();
        put_len(&mut buf, len);
        assert_eq!(buf.len(), len_of_len(len));
        assert_eq!(read_len(&buf, 0), Ok((len, buf.len())));
    }
}

#[test]
fn malformed_frames_are_rejected_with_the_reason_and_hand_up_nothing() {
    let cases: Vec<(Vec<u8>, BatchingError)> = vec![
        (vec![], BatchingError::Empty),
        (vec![7, 1, 2], BatchingError::UnknownKind(7)),
        (vec![BATCH], BatchingError::EmptyBatch),
        (
            vec![BATCH, 1, b'a', 0],
            BatchingError::EmptyRecord { offset: 3 },
        ),
        (vec![BATCH, 0x80], BatchingError::BadLength { offset: 1 }),
        (
            vec![BATCH, 0xff, 0xff, 0xff, 0x01],
            BatchingError::BadLength { offset: 1 },
        ),
        (
            vec![BATCH, 1, b'a', 5, b'b'],
            BatchingError::Truncated {
                offset: 3,
                len: 5,
                frame: 5,
            },
        ),
    ];
    for (wire, expected) in cases {
        let mut out = Output::new();
        let r = layer(1024).handle_receive(
            Instant::now(),
            Frame::from_payload(Bytes::from(wire.clone())),
            &mut out,
        );
        assert_eq!(r, Err(ReceiveError::Batching(expected.clone())), "{wire:?}");
        assert!(r.expect_err("rejected").is_fatal());
        assert!(out.pop_up().is_none(), "{wire:?} handed something up");
    }
}

#[test]
fn a_malformed_batch_closes_the_link_as_corrupt() {
    let spec: StackSpec = "udp / batching".parse().expect("valid");
    let mut stack = spec.build(Instant::now());
    let garbage = Bytes::from_static(&[BATCH, 9, b'x']);
    let r = stack.handle_receive(Instant::now(), garbage);
    assert!(
        matches!(
            r,
            Err(LinkError::Corrupt(ReceiveError::Batching(
                BatchingError::Truncated { .. }
            )))
        ),
        "{r:?}"
    );
    assert!(stack.poll_receive().is_none());
}

#[test]
fn options_parse_and_are_bounded() {
    let spec: StackSpec = "udp / batching(max_batch=4KiB)".parse().expect("valid");
    assert!(spec.to_string().contains("max_batch=4KiB"), "{spec}");
    assert!("udp / batching(max=1)".parse::<StackSpec>().is_err());
    let options: LayerOptions = {
        let mut o = LayerOptions::new();
        o.push("max_batch", "1");
        o
    };
    assert_eq!(
        BatchingConfig::from_options(&options).map(|c| c.max_batch),
        Ok(MIN_BATCH)
    );
}

/// Sends `bursts` of messages through a full UDP stack over a lossy,
/// reordering, duplicating link; returns what B received and the datagrams
/// A transmitted.
fn transfer(spec: &str, link: LinkModel, seed: u64, bursts: &[Vec<usize>]) -> (Vec<Bytes>, u64) {
    let spec: StackSpec = spec.parse().expect("valid spec");
    let mut sim = Pair::new(&spec, link, seed, Instant::now());
    let mut i = 0;
    for burst in bursts {
        for &len in burst {
            sim.a
                .stack
                .handle_send(sim.now, msg(i, len))
                .expect("window large enough for a burst");
            i += 1;
        }
        sim.pump();
        sim.run_for(Duration::from_millis(1));
    }
    // Quiet means no timer within the longest RTO (`max_rto`, 5 s): a
    // retransmission after backoff is still to come before that.
    assert!(
        sim.run_until_quiet(Duration::from_secs(6), Duration::from_secs(600)),
        "did not settle"
    );
    assert_eq!(sim.a.closed, None);
    assert_eq!(sim.b.closed, None);
    (sim.b.received, sim.a.transmitted)
}

const STACK: &str = "udp / slicing / delivery(max_retries=100) / ordering / batching";

#[test]
fn batches_cross_a_lossy_link_exactly_once_in_order_in_few_datagrams() {
    let link = LinkModel {
        loss: 0.1,
        duplicate: 0.05,
        reorder: 0.1,
        jitter: Duration::from_millis(2),
        ..LinkModel::default()
    };
    let bursts = vec![vec![24usize; 500]; 4];
    let (got, datagrams) = transfer(STACK, link, 3, &bursts);
    let expected: Vec<Bytes> = (0..2000).map(|i| msg(i, 24)).collect();
    assert_eq!(got, expected);
    // 40 messages of 25 wire bytes per 1 KiB batch: 50 batches, plus
    // retransmissions of a tenth.
    assert!(datagrams < 120, "{datagrams} datagrams for 2000 messages");
}

#[test]
fn a_batch_flushed_into_a_full_delivery_window_is_kept_not_dropped() {
    let spec: StackSpec = "mem / delivery(send_window=2, send_queue=2) / batching(max_batch=64)"
        .parse()
        .expect("valid");
    let mut sim = Pair::new(&spec, LinkModel::default(), 5, Instant::now());
    let mut expected = Vec::new();
    let mut blocked = 0;
    for i in 0..300 {
        let m = msg(i, 20);
        while let Err(e) = sim.a.stack.handle_send(sim.now, m.clone()) {
            assert!(matches!(e, StackSendError::WouldBlock(_)), "{e}");
            blocked += 1;
            sim.pump();
            assert!(sim.step(), "stalled");
        }
        expected.push(m);
    }
    sim.pump();
    assert!(sim.run_until_quiet(Duration::from_secs(6), Duration::from_secs(60)));
    assert!(
        blocked > 0,
        "the window never filled: the test shows nothing"
    );
    assert_eq!(sim.a.stack.stats().send_failures, 0);
    assert_eq!(sim.b.received, expected);
}

/// Sends `messages` through `a` in one batch of input and feeds every
/// frame to `b`; returns what `b` hands up.
fn stack_to_stack(spec: &str, messages: &[Bytes]) -> (Vec<Bytes>, u64) {
    let spec: StackSpec = spec.parse().expect("valid");
    let now = Instant::now();
    let (mut a, mut b) = (spec.build(now), spec.build(now));
    for m in messages {
        a.handle_send(now, m.clone()).expect("accepted");
    }
    while let Some(f) = a.poll_transmit() {
        b.handle_receive(now, f.to_bytes()).expect("valid");
    }
    let got = std::iter::from_fn(|| b.poll_receive()).collect();
    (got, a.stats().send_failures)
}

#[test]
fn batches_never_exceed_what_the_layer_below_accepts() {
    // Two messages that fit framing alone but not together.
    let spec = "tcp / framing(max_frame=64KiB) / batching(max_batch=1MiB)";
    let messages = vec![msg(1, 40_000), msg(2, 40_000)];
    assert_eq!(stack_to_stack(spec, &messages), (messages, 0));
    let built: StackSpec = spec.parse().expect("valid");
    let stack = built.build(Instant::now());
    let max_batch = stack.layer::<Batching>().expect("batching").max_batch();
    assert_eq!(max_batch, 64 << 10);
    // The largest messages the stack takes, too large to share a batch.
    let len = stack.max_message_len().expect("bounded") - 1;
    assert!(!batchable(len, max_batch));
    let messages = vec![msg(3, len), msg(4, len)];
    assert_eq!(stack_to_stack(spec, &messages), (messages, 0));
}

#[test]
fn a_reliable_link_survives_a_max_batch_larger_than_slicing_takes() {
    let spec: StackSpec =
        "udp / slicing(max_message=64KiB) / delivery / ordering / batching(max_batch=1MiB)"
            .parse()
            .expect("valid");
    let mut sim = Pair::new(&spec, LinkModel::default(), 1, Instant::now());
    let messages = vec![msg(1, 40_000), msg(2, 40_000)];
    for m in &messages {
        sim.a
            .stack
            .handle_send(sim.now, m.clone())
            .expect("accepted");
    }
    sim.pump();
    assert!(sim.run_until_quiet(Duration::from_secs(6), Duration::from_secs(3600)));
    assert_eq!(sim.a.closed, None);
    assert_eq!(sim.b.received, messages);
}

#[test]
fn a_batch_longer_than_max_batch_is_refused_before_it_fans_out() {
    let spec: StackSpec = "tcp / framing / batching".parse().expect("valid");
    let now = Instant::now();
    let mut b = spec.build(now);
    // 2 MiB of one-byte records: a million messages if accepted.
    let mut payload = vec![BATCH];
    for _ in 0..(1 << 20) {
        payload.extend_from_slice(&[1, b'x']);
    }
    let mut wire = (payload.len() as u32).to_be_bytes().to_vec();
    wire.extend_from_slice(&payload);
    let r = b.handle_receive(now, Bytes::from(wire));
    assert!(
        matches!(
            r,
            Err(LinkError::Corrupt(ReceiveError::Batching(
                BatchingError::TooLong { max: 1024, .. }
            )))
        ),
        "{r:?}"
    );
    assert!(b.poll_receive().is_none());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any messages, in any bursts, with any `max_batch`: the peer gets them
    /// all, byte-identical and in order, and no batch is over the limit.
    #[test]
    fn every_message_arrives_intact_in_order(
        max_batch in 16usize..4096,
        bursts in prop::collection::vec(
            prop::collection::vec(prop_oneof![0usize..40, 0usize..3000], 0..60),
            1..6,
        ),
    ) {
        let mut tx = layer(max_batch);
        let mut rx = layer(max_batch);
        let mut i = 0;
        let mut expected = Vec::new();
        let mut got = Vec::new();
        for burst in &bursts {
            let messages: Vec<Bytes> = burst.iter().map(|&len| { i += 1; msg(i, len) }).collect();
            let frames = send_all(&mut tx, &messages);
            for f in &frames {
                prop_assert!(f[0] == SINGLE || f.len() <= max_batch);
            }
            got.extend(receive_all(&mut rx, &frames));
            expected.extend(messages);
        }
        prop_assert_eq!(got, expected);
    }

    /// A lossy, reordering link under delivery and ordering: exactly once,
    /// in order.
    #[test]
    fn full_stack_delivers_batches_exactly_once_in_order(
        seed in any::<u64>(),
        loss in 0.0f64..0.2,
        bursts in prop::collection::vec(prop::collection::vec(1usize..200, 1..200), 1..5),
    ) {
        let link = LinkModel {
            loss,
            duplicate: 0.05,
            reorder: 0.1,
            jitter: Duration::from_millis(2),
            ..LinkModel::default()
        };
        let (got, _) = transfer(STACK, link, seed, &bursts);
        let mut i = 0;
        let expected: Vec<Bytes> = bursts.concat().into_iter().map(|len| { let m = msg(i, len); i += 1; m }).collect();
        prop_assert_eq!(got, expected);
    }
}
