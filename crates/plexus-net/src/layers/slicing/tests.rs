use super::*;

fn config() -> SlicingConfig {
    SlicingConfig {
        mtu: 256,
        ..SlicingConfig::default()
    }
}

fn fragments(layer: &mut Slicing, now: Instant, msg: &[u8]) -> Vec<Bytes> {
    let mut out = Output::new();
    layer
        .handle_send(
            now,
            Frame::from_payload(Bytes::copy_from_slice(msg)),
            &mut out,
        )
        .expect("within limit");
    // A lone small message waits in the open bundle until the flush.
    layer.handle_flush(now, &mut out);
    std::iter::from_fn(|| out.pop_down().map(|f| f.to_bytes())).collect()
}

fn feed(layer: &mut Slicing, now: Instant, frags: &[Bytes]) -> (Vec<Bytes>, Vec<ReceiveError>) {
    let mut out = Output::new();
    let mut errors = Vec::new();
    for f in frags {
        if let Err(e) = layer.handle_receive(now, Frame::from_payload(f.clone()), &mut out) {
            errors.push(e);
        }
    }
    let msgs = std::iter::from_fn(|| out.pop_up().map(Frame::into_bytes)).collect();
    (msgs, errors)
}

fn message(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn large_message_is_split_into_mtu_sized_fragments_and_reassembled() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    let msg = message(10_000);
    let frags = fragments(&mut tx, now, &msg);
    assert_eq!(frags.len(), 10_000usize.div_ceil(256 - 12));
    assert!(frags.iter().all(|f| f.len() <= 256));
    let (msgs, errors) = feed(&mut rx, now, &frags);
    assert!(errors.is_empty());
    assert_eq!(msgs, [Bytes::from(msg)]);
    assert_eq!((rx.partials(), rx.held_bytes()), (0, 0));
}

#[test]
fn fragments_in_any_order_reassemble() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    let msg = message(2_000);
    let mut frags = fragments(&mut tx, now, &msg);
    frags.reverse();
    frags.swap(1, 4);
    let (msgs, _) = feed(&mut rx, now, &frags);
    assert_eq!(msgs, [Bytes::from(msg)]);
}

#[test]
fn duplicate_fragment_is_ignored_and_message_delivered_once() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    let frags = fragments(&mut tx, now, &message(600));
    let doubled = [
        frags[0].clone(),
        frags[0].clone(),
        frags[1].clone(),
        frags[2].clone(),
    ];
    let (msgs, errors) = feed(&mut rx, now, &doubled);
    assert_eq!(msgs.len(), 1);
    assert!(matches!(
        errors[..],
        [ReceiveError::Slicing(SlicingError::Duplicate { .. })]
    ));
    let (again, _) = feed(&mut rx, now, &frags[..1]);
    assert!(
        again.is_empty(),
        "a late copy starts a partial, never a second delivery"
    );
}

#[test]
fn single_fragment_message_is_handed_up_without_copy() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    let frags = fragments(&mut tx, now, b"small");
    let (msgs, _) = feed(&mut rx, now, &frags);
    assert_eq!(msgs[0].as_ptr(), frags[0][FragmentHeader::LEN..].as_ptr());
}

#[test]
fn impossible_indices_and_truncated_headers_are_rejected() {
    let now = Instant::now();
    let mut rx = Slicing::new(config());
    let bad = |id: u32, index: u32, count: u32| {
        Bytes::copy_from_slice(&FragmentHeader { id, index, count }.emit())
    };
    let (msgs, errors) = feed(
        &mut rx,
        now,
        &[
            bad(1, 3, 3),
            bad(1, 0, 0),
            bad(1, 0, u32::MAX),
            Bytes::from_static(&[1, 2, 3]),
        ],
    );
    assert!(msgs.is_empty());
    assert_eq!(errors.len(), 4);
    assert_eq!(rx.partials(), 0, "no memory held for rejected fragments");
}

#[test]
fn inconsistent_count_is_rejected() {
    let now = Instant::now();
    let mut rx = Slicing::new(config());
    let mk = |index: u32, count: u32| {
        let mut b = FragmentHeader {
            id: 9,
            index,
            count,
        }
        .emit()
        .to_vec();
        b.push(0);
        Bytes::from(b)
    };
    let (_, errors) = feed(&mut rx, now, &[mk(0, 3), mk(1, 4)]);
    assert!(matches!(
        errors[..],
        [ReceiveError::Slicing(SlicingError::InconsistentCount {
            count: 4,
            expected: 3
        })]
    ));
}

#[test]
fn incomplete_message_is_dropped_after_reassembly_timeout() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    let frags = fragments(&mut tx, now, &message(1_000));
    feed(&mut rx, now, &frags[1..]);
    assert_eq!(rx.partials(), 1);
    let deadline = rx.poll_timeout().expect("a partial is held");
    assert_eq!(deadline, now + config().reassembly_timeout);
    rx.handle_timeout(deadline - Duration::from_millis(1), &mut Output::new());
    assert_eq!(rx.partials(), 1);
    rx.handle_timeout(deadline, &mut Output::new());
    assert_eq!((rx.partials(), rx.held_bytes()), (0, 0));
    assert_eq!(rx.poll_timeout(), None);
}

#[test]
fn partial_count_is_bounded_by_evicting_the_oldest() {
    let start = Instant::now();
    let cfg = SlicingConfig {
        max_partials: 3,
        ..config()
    };
    let (mut tx, mut rx) = (Slicing::new(cfg.clone()), Slicing::new(cfg));
    let mut firsts = Vec::new();
    for i in 0..5u64 {
        let frags = fragments(&mut tx, start, &message(600));
        feed(&mut rx, start + Duration::from_millis(i), &frags[..1]);
        firsts.push(frags);
        assert!(rx.partials() <= 3);
    }
    // The oldest two were evicted: completing message 0 restarts it, 4 completes.
    let (msgs, _) = feed(&mut rx, start, &firsts[4][1..]);
    assert_eq!(msgs.len(), 1);
    let (msgs, _) = feed(&mut rx, start, &firsts[0][1..]);
    assert!(msgs.is_empty());
}

#[test]
fn partial_bytes_are_bounded() {
    let now = Instant::now();
    let cfg = SlicingConfig {
        max_partial_bytes: 4_000,
        ..config()
    };
    let (mut tx, mut rx) = (Slicing::new(cfg.clone()), Slicing::new(cfg));
    for _ in 0..10 {
        let frags = fragments(&mut tx, now, &message(3_000));
        feed(&mut rx, now, &frags[1..]);
        assert!(rx.held_bytes() <= 4_000, "held {}", rx.held_bytes());
    }
    let frags = fragments(&mut tx, now, &message(10_000));
    let (msgs, errors) = feed(&mut rx, now, &frags);
    assert!(
        msgs.is_empty(),
        "a message over the budget is never assembled"
    );
    assert!(errors
        .iter()
        .any(|e| matches!(e, ReceiveError::Slicing(SlicingError::OverBudget { .. }))));
    assert!(rx.held_bytes() <= 4_000);
}

#[test]
fn message_over_max_is_refused_on_send() {
    let mut tx = Slicing::new(SlicingConfig {
        max_message: 1_000,
        ..config()
    });
    let err = tx
        .handle_send(
            Instant::now(),
            Frame::from_payload(Bytes::from(vec![0; 1_001])),
            &mut Output::new(),
        )
        .unwrap_err();
    assert!(matches!(err, StackSendError::TooLarge { max: 1_000, .. }));
}

#[test]
fn empty_message_round_trips() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    let frags = fragments(&mut tx, now, b"");
    assert_eq!(frags.len(), 1);
    let (msgs, _) = feed(&mut rx, now, &frags);
    assert_eq!(msgs, [Bytes::new()]);
}

/// Sends every message of `msgs` in one batch and flushes once, as the
/// stack does when the driver drains after a batch.
fn batch(layer: &mut Slicing, now: Instant, msgs: &[Vec<u8>]) -> Vec<Bytes> {
    let mut out = Output::new();
    for m in msgs {
        layer
            .handle_send(now, Frame::from_payload(Bytes::from(m.clone())), &mut out)
            .expect("within limit");
    }
    layer.handle_flush(now, &mut out);
    std::iter::from_fn(|| out.pop_down().map(|f| f.to_bytes())).collect()
}

#[test]
fn small_messages_of_one_batch_share_datagrams_up_to_the_mtu() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    // 256-byte MTU: records of 14 + 50 bytes, so four to a datagram.
    let msgs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 50]).collect();
    let datagrams = batch(&mut tx, now, &msgs);
    assert_eq!(
        datagrams.iter().map(Bytes::len).collect::<Vec<_>>(),
        [256, 256, 128]
    );

    let (got, errors) = feed(&mut rx, now, &datagrams);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(got, msgs);
    // Records of 14 + 46: four fill 240 bytes; padded to 256 (16 <= 256/8)
    // as more datagrams follow, the last one is not.
    let msgs: Vec<Vec<u8>> = (0..9u8).map(|i| vec![i + 1; 46]).collect();
    let padded = batch(&mut tx, now, &msgs);
    assert_eq!(
        padded.iter().map(Bytes::len).collect::<Vec<_>>(),
        [256, 256, 58]
    );
    assert!(padded[0][240..].iter().all(|&b| b == 0));
    let (got, errors) = feed(&mut rx, now, &padded);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(got, msgs);
}

#[test]
fn a_record_that_exactly_fills_the_mtu_is_bundled_and_one_more_byte_is_not() {
    let now = Instant::now();
    let mut tx = Slicing::new(config());
    // Two records of 14 + 114 bytes fill 256 exactly.
    let exact = batch(&mut tx, now, &[vec![1; 114], vec![2; 114]]);
    assert_eq!(exact.iter().map(Bytes::len).collect::<Vec<_>>(), [256]);
    let over = batch(&mut tx, now, &[vec![1; 114], vec![2; 115]]);
    // The second no longer fits: the first leaves alone, in the plain format.
    assert_eq!(over.iter().map(Bytes::len).collect::<Vec<_>>(), [126, 127]);
    // A message too big for a record of its own is never bundled.
    let big = batch(&mut tx, now, &[vec![3; 10], vec![4; 243], vec![5; 10]]);
    assert_eq!(
        big.iter().map(Bytes::len).collect::<Vec<_>>(),
        [22, 255, 22]
    );
}

#[test]
fn a_lone_message_leaves_at_the_flush_in_the_plain_format_without_copy() {
    let now = Instant::now();
    let mut tx = Slicing::new(config());
    let payload = Bytes::from_static(b"alone");
    let mut out = Output::new();
    tx.handle_send(now, Frame::from_payload(payload.clone()), &mut out)
        .expect("small");
    assert!(out.pop_down().is_none(), "held until the flush");
    tx.handle_flush(now, &mut out);
    let frame = out.pop_down().expect("flushed");
    assert_eq!(frame.len(), FragmentHeader::LEN + 5);
    let last = frame.chunks().last().unwrap_or_default();
    assert_eq!(last.as_ptr(), payload.as_ptr());
    tx.handle_flush(now, &mut out);
    assert!(out.pop_down().is_none(), "nothing held twice");
}

#[test]
fn bundling_keeps_send_order_around_fragmented_messages() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    let msgs = vec![vec![1; 20], vec![2; 20], message(1_000), vec![3; 20]];
    let datagrams = batch(&mut tx, now, &msgs);
    let (got, errors) = feed(&mut rx, now, &datagrams);
    assert!(errors.is_empty());
    assert_eq!(got, msgs);
}

#[test]
fn unbundled_config_sends_one_datagram_per_message_at_once() {
    let now = Instant::now();
    let mut tx = Slicing::new(SlicingConfig {
        bundle: false,
        ..config()
    });
    let mut out = Output::new();
    tx.handle_send(now, Frame::from_payload(Bytes::from_static(b"x")), &mut out)
        .expect("small");
    assert!(out.pop_down().is_some());
}

#[test]
fn malformed_bundles_keep_the_records_before_the_damage() {
    let now = Instant::now();
    let (mut tx, mut rx) = (Slicing::new(config()), Slicing::new(config()));
    let datagram = batch(&mut tx, now, &[vec![1; 10], vec![2; 10]]).remove(0);
    // Cut inside the second record: the first is kept.
    let (got, errors) = feed(&mut rx, now, &[datagram.slice(..30)]);
    assert_eq!(got, [vec![1; 10]]);
    assert!(matches!(
        errors[..],
        [ReceiveError::Slicing(SlicingError::Truncated { .. })]
    ));
    // A length past the end, and a trailing half header.
    let mut bad = datagram.to_vec();
    bad[12..14].copy_from_slice(&u16::MAX.to_be_bytes());
    let (got, errors) = feed(&mut rx, now, &[Bytes::from(bad)]);
    assert!(got.is_empty() && errors.len() == 1);
    let mut tail = datagram.to_vec();
    tail.extend_from_slice(&[0, 0, 3]);
    let (got, errors) = feed(&mut rx, now, &[Bytes::from(tail)]);
    assert_eq!(got.len(), 2);
    assert_eq!(errors.len(), 1);
    // Zero padding after the records is not an error.
    let mut padded = datagram.to_vec();
    padded.extend_from_slice(&[0; 40]);
    let (got, errors) = feed(&mut rx, now, &[Bytes::from(padded)]);
    assert_eq!((got.len(), errors.len()), (2, 0));
}

#[test]
fn a_bundled_duplicate_fragment_does_not_hide_the_records_after_it() {
    let now = Instant::now();
    let mut rx = Slicing::new(config());
    let mut d = Vec::new();
    for (id, index, count, body) in [
        (7u32, 0u32, 2u32, b"ab"),
        (7, 0, 2, b"ab"),
        (8, 0, 1, b"ok"),
    ] {
        d.extend_from_slice(&FragmentHeader { id, index, count }.emit());
        let flags = d.len() - 4;
        d[flags] |= 0x80;
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(body);
    }
    let (got, errors) = feed(&mut rx, now, &[Bytes::from(d)]);
    assert_eq!(got, [Bytes::from_static(b"ok")]);
    assert!(matches!(
        errors[..],
        [ReceiveError::Slicing(SlicingError::Duplicate { .. })]
    ));
}
