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
    assert!(matches!(err, SendError::TooLarge { max: 1_000, .. }));
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
