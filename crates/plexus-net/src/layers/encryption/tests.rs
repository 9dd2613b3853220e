use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::sim::{LinkModel, Pair};
use crate::spec::StackSpec;
use crate::{LayerRegistry, SpecError, Stack};

const PSK: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const OTHER_PSK: &str = "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn config(psk: &str) -> EncryptionConfig {
    let mut c = EncryptionConfig::with_psk(parse_psk(psk).expect("valid test key"));
    c.danger_seed = Some(11);
    c
}

fn layer(psk: &str, link_id: u64, now: Instant) -> Encryption {
    Encryption::new(config(psk), &LinkContext { now, link_id })
}

/// What one call produced.
#[derive(Debug)]
struct Io {
    up: Vec<Bytes>,
    down: Vec<Bytes>,
    result: Result<(), ReceiveError>,
    close: Option<LinkError>,
}

fn drain(out: &mut Output, result: Result<(), ReceiveError>) -> Io {
    Io {
        up: std::iter::from_fn(|| out.pop_up().map(Frame::into_bytes)).collect(),
        down: std::iter::from_fn(|| out.pop_down().map(|f| f.to_bytes())).collect(),
        result,
        close: out.close_reason().cloned(),
    }
}

fn send(l: &mut Encryption, now: Instant, msg: &[u8]) -> Io {
    let mut out = Output::new();
    l.handle_send(
        now,
        Frame::from_payload(Bytes::copy_from_slice(msg)),
        &mut out,
    )
    .expect("send accepted");
    drain(&mut out, Ok(()))
}

fn recv(l: &mut Encryption, now: Instant, datagram: &Bytes) -> Io {
    let mut out = Output::new();
    let r = l.handle_receive(now, Frame::from_payload(datagram.clone()), &mut out);
    drain(&mut out, r)
}

fn timeout(l: &mut Encryption, now: Instant) -> Io {
    let mut out = Output::new();
    l.handle_timeout(now, &mut out);
    drain(&mut out, Ok(()))
}

fn refused(io: &Io) -> EncryptionError {
    match &io.result {
        Err(ReceiveError::Encryption(e)) => e.clone(),
        other => panic!("expected an encryption error, got {other:?}"),
    }
}

/// Two layers with an established session; returns A's first data datagram
/// (carrying `b"first"`), already delivered to B.
fn established(now: Instant) -> (Encryption, Encryption, Bytes) {
    let mut a = layer(PSK, 0, now);
    let mut b = layer(PSK, 1, now);
    let init = send(&mut a, now, b"first");
    assert_eq!(init.down.len(), 1, "only the handshake goes out first");
    let answer = recv(&mut b, now, &init.down[0]);
    assert!(b.is_established());
    let data = recv(&mut a, now, &answer.down[0]);
    assert!(a.is_established());
    assert_eq!(
        data.down.len(),
        1,
        "the queued message follows the handshake"
    );
    let got = recv(&mut b, now, &data.down[0]);
    assert_eq!(got.up, [Bytes::from_static(b"first")]);
    (a, b, data.down[0].clone())
}

#[test]
fn messages_sent_before_the_handshake_are_sealed_once_it_completes() {
    let now = Instant::now();
    let (mut a, mut b, _) = established(now);
    let d = send(&mut a, now, b"second");
    assert_eq!(d.down[0].len(), b"second".len() + OVERHEAD);
    assert_eq!(d.down[0][0], KIND_DATA);
    assert_eq!(
        recv(&mut b, now, &d.down[0]).up,
        [Bytes::from_static(b"second")]
    );
    // And the other way, under the other key.
    let back = send(&mut b, now, b"reply");
    assert_eq!(
        recv(&mut a, now, &back.down[0]).up,
        [Bytes::from_static(b"reply")]
    );
    assert_eq!(a.stats().opened, 1);
    assert_eq!(b.stats().opened, 2);
}

#[test]
fn tampered_datagram_is_dropped_and_counted_never_delivered() {
    let now = Instant::now();
    let (mut a, mut b, _) = established(now);
    let d = send(&mut a, now, b"do not touch").down.remove(0);
    // Flip one bit in every position: header (kind aside), ciphertext, tag.
    for i in 1..d.len() {
        let mut bad = d.to_vec();
        bad[i] ^= 0x04;
        let io = recv(&mut b, now, &Bytes::from(bad));
        assert!(io.up.is_empty(), "byte {i}: tampered datagram handed up");
        let e = refused(&io);
        assert!(
            matches!(e, EncryptionError::BadTag { .. }),
            "byte {i}: {e:?}"
        );
        assert!(!e.is_fatal());
    }
    assert_eq!(b.stats().bad_tag, d.len() as u64 - 1);
    // The genuine datagram still opens: forgeries did not move the window.
    assert_eq!(
        recv(&mut b, now, &d).up,
        [Bytes::from_static(b"do not touch")]
    );
}

#[test]
fn replayed_datagram_is_dropped_and_counted() {
    let now = Instant::now();
    let (mut a, mut b, first) = established(now);
    let io = recv(&mut b, now, &first);
    assert!(io.up.is_empty());
    assert_eq!(refused(&io), EncryptionError::Replayed { nonce: 0 });
    let d = send(&mut a, now, b"x").down.remove(0);
    assert_eq!(recv(&mut b, now, &d).up.len(), 1);
    assert!(recv(&mut b, now, &d).up.is_empty());
    assert_eq!(b.stats().replayed, 2);
    assert_eq!(b.stats().opened, 2);
}

#[test]
fn reordered_datagrams_inside_the_window_all_open() {
    let now = Instant::now();
    let (mut a, mut b, _) = established(now);
    let sent: Vec<Bytes> = (0..50u8)
        .map(|i| send(&mut a, now, &[i]).down.remove(0))
        .collect();
    let mut got = Vec::new();
    for d in sent.iter().rev() {
        got.extend(recv(&mut b, now, d).up);
    }
    let want: Vec<Bytes> = (0..50u8).rev().map(|i| Bytes::from(vec![i])).collect();
    assert_eq!(got, want);
}

#[test]
fn nonce_older_than_the_window_is_dropped_as_stale() {
    let now = Instant::now();
    let (mut a, mut b, _) = established(now);
    let old = send(&mut a, now, b"late").down.remove(0); // nonce 1
    let mut last = Bytes::new();
    for _ in 0..REPLAY_WINDOW + 1 {
        last = send(&mut a, now, b"n").down.remove(0);
    }
    assert_eq!(recv(&mut b, now, &last).up.len(), 1); // nonce 1 + 1025
    let io = recv(&mut b, now, &old);
    assert!(io.up.is_empty());
    assert_eq!(
        refused(&io),
        EncryptionError::Stale {
            nonce: 1,
            highest: REPLAY_WINDOW + 2
        }
    );
    assert_eq!(b.stats().stale, 1);
}

#[test]
fn wrong_psk_is_rejected_by_the_responder_and_times_out_the_initiator() {
    let t0 = Instant::now();
    let mut a = layer(PSK, 0, t0);
    let mut b = layer(OTHER_PSK, 1, t0);
    let mut wire = send(&mut a, t0, b"secret").down;
    let mut now = t0;
    let mut close = None;
    while close.is_none() {
        for d in wire.drain(..) {
            let io = recv(&mut b, now, &d);
            assert_eq!(refused(&io), EncryptionError::HandshakeRejected);
            assert!(
                io.down.is_empty(),
                "no answer to an unauthenticated initiator"
            );
            assert!(io.up.is_empty());
        }
        now = a.poll_timeout().expect("initiator retries");
        let io = timeout(&mut a, now);
        wire = io.down;
        close = io.close;
    }
    assert!(!b.is_established());
    let Some(LinkError::Encryption(EncryptionError::HandshakeTimeout {
        attempts,
        waited_ms,
        ..
    })) = close.clone()
    else {
        panic!("unexpected close {close:?}");
    };
    assert_eq!(waited_ms, 10_000);
    assert!(attempts >= 6, "{attempts}");
    let text = close.map(|c| c.to_string()).unwrap_or_default();
    assert!(text.contains("pre-shared key"), "{text}");
    assert!(b.stats().handshake_rejected >= 6);
    // Closed: no more timers, sends refused.
    assert_eq!(a.poll_timeout(), None);
    let mut out = Output::new();
    assert!(matches!(
        a.handle_send(now, Frame::new(), &mut out),
        Err(StackSendError::Closed(_))
    ));
}

#[test]
fn lost_handshake_messages_are_retransmitted_and_answered_with_the_same_keys() {
    let t0 = Instant::now();
    let mut a = layer(PSK, 0, t0);
    let mut b = layer(PSK, 1, t0);
    let first = send(&mut a, t0, b"m").down.remove(0); // lost
    let retry_at = a.poll_timeout().expect("retry armed");
    assert_eq!(retry_at, t0 + ms(200));
    let again = timeout(&mut a, retry_at).down.remove(0);
    assert_eq!(
        again, first,
        "a retransmission repeats the message byte for byte"
    );
    assert_eq!(a.poll_timeout(), Some(retry_at + ms(400)));
    let answer = recv(&mut b, retry_at, &again).down.remove(0); // lost
                                                                // The next retransmission gets the same answer again.
    let third = timeout(&mut a, retry_at + ms(400)).down.remove(0);
    let answer2 = recv(&mut b, retry_at + ms(400), &third).down.remove(0);
    assert_eq!(answer2, answer);
    let data = recv(&mut a, retry_at + ms(400), &answer2).down.remove(0);
    assert_eq!(
        recv(&mut b, retry_at + ms(400), &data).up,
        [Bytes::from_static(b"m")]
    );
    // A late copy of the first answer is ignored quietly.
    let late = recv(&mut a, retry_at + ms(500), &answer);
    assert!(late.result.is_ok() && late.down.is_empty());
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn simultaneous_initiation_lower_ephemeral_key_wins() {
    let now = Instant::now();
    let mut a = layer(PSK, 0, now);
    let mut b = layer(PSK, 1, now);
    let from_a = send(&mut a, now, b"from a").down.remove(0);
    let from_b = send(&mut b, now, b"from b").down.remove(0);
    let a_wins = from_a[1..33] < from_b[1..33];
    let (mut low, mut high, low_msg, high_msg) = if a_wins {
        (a, b, from_a, from_b)
    } else {
        (b, a, from_b, from_a)
    };
    // The winner ignores the loser's initiation...
    let ignored = recv(&mut low, now, &high_msg);
    assert!(ignored.result.is_ok() && ignored.down.is_empty());
    assert!(!low.is_established());
    // ...the loser answers the winner's and sends its queued message.
    let io = recv(&mut high, now, &low_msg);
    assert!(high.is_established());
    assert_eq!(io.down.len(), 2);
    let io2 = recv(&mut low, now, &io.down[0]);
    assert!(low.is_established());
    let got = recv(&mut low, now, &io.down[1]).up;
    let from_high = recv(&mut high, now, &io2.down[0]).up;
    let (want_low, want_high): (&[u8], &[u8]) = if a_wins {
        (b"from b", b"from a")
    } else {
        (b"from a", b"from b")
    };
    assert_eq!(got, [Bytes::copy_from_slice(want_low)]);
    assert_eq!(from_high, [Bytes::copy_from_slice(want_high)]);
}

#[test]
fn replayed_old_handshake_cannot_reset_an_established_session() {
    let now = Instant::now();
    // An initiation from an earlier session with the same key.
    let mut old = layer(PSK, 7, now);
    let stale_init = send(&mut old, now, b"old").down.remove(0);
    let (mut a, mut b, _) = established(now);
    let io = recv(&mut b, now, &stale_init);
    assert_eq!(refused(&io), EncryptionError::UnexpectedHandshake);
    assert!(io.down.is_empty());
    let d = send(&mut a, now, b"still up").down.remove(0);
    assert_eq!(recv(&mut b, now, &d).up, [Bytes::from_static(b"still up")]);
}

#[test]
fn data_before_the_session_is_dropped_as_not_established() {
    let now = Instant::now();
    let (mut a, _, _) = established(now);
    let mut c = layer(PSK, 2, now);
    let d = send(&mut a, now, b"x").down.remove(0);
    assert_eq!(
        refused(&recv(&mut c, now, &d)),
        EncryptionError::NotEstablished
    );
    assert_eq!(c.stats().not_established, 1);
}

#[test]
fn garbage_datagrams_are_dropped_without_changing_state() {
    let now = Instant::now();
    let (mut a, mut b, _) = established(now);
    let cases: [(&[u8], EncryptionError); 4] = [
        (b"", EncryptionError::Malformed { len: 0 }),
        (&[KIND_DATA; 10], EncryptionError::Malformed { len: 10 }),
        (&[KIND_INIT; 20], EncryptionError::Malformed { len: 20 }),
        (&[0x7f; 40], EncryptionError::UnknownKind { kind: 0x7f }),
    ];
    for (bytes, want) in cases {
        let io = recv(&mut b, now, &Bytes::copy_from_slice(bytes));
        assert_eq!(refused(&io), want);
        assert!(io.up.is_empty() && io.down.is_empty());
    }
    let d = send(&mut a, now, b"fine").down.remove(0);
    assert_eq!(recv(&mut b, now, &d).up.len(), 1);
    assert_eq!(b.stats().malformed, 4);
}

#[test]
fn pending_queue_is_bounded_and_pushes_back_with_would_block() {
    let now = Instant::now();
    let mut cfg = config(PSK);
    cfg.pending = 3;
    let mut a = Encryption::new(cfg, &LinkContext { now, link_id: 0 });
    let mut out = Output::new();
    for _ in 0..3 {
        assert!(a.can_send());
        a.handle_send(now, Frame::from_payload(Bytes::from_static(b"q")), &mut out)
            .expect("room in the queue");
    }
    assert!(!a.can_send());
    let refused = a.handle_send(now, Frame::from_payload(Bytes::from_static(b"r")), &mut out);
    assert!(matches!(refused, Err(StackSendError::WouldBlock(f)) if f.len() == 1));
    assert_eq!(a.pending(), 3);
}

#[test]
fn last_nonce_closes_the_link_with_nonce_exhausted() {
    let now = Instant::now();
    let (mut a, mut b, _) = established(now);
    if let State::Established(s) = &mut a.state {
        s.next_nonce = MAX_NONCE;
    }
    let io = send(&mut a, now, b"last");
    assert_eq!(io.down.len(), 1, "the last nonce is still used");
    assert_eq!(
        io.close,
        Some(LinkError::Encryption(EncryptionError::NonceExhausted))
    );
    assert_eq!(
        recv(&mut b, now, &io.down[0]).up,
        [Bytes::from_static(b"last")]
    );
    assert!(!a.can_send());
    // A datagram claiming the reserved nonce 2^64 - 1 never opens.
    let mut forged = io.down[0].to_vec();
    forged[1..9].copy_from_slice(&u64::MAX.to_be_bytes());
    let e = refused(&recv(&mut b, now, &Bytes::from(forged)));
    assert_eq!(e, EncryptionError::BadTag { nonce: u64::MAX });
}

#[test]
fn spec_without_a_key_is_a_configuration_error() {
    let registry = LayerRegistry::default();
    for spec in [
        "udp / encryption",
        "udp / encryption(psk=abcd)",
        "udp / encryption(psk_env=PLEXUS_TEST_UNSET_VARIABLE)",
    ] {
        let err = StackSpec::parse(spec, &registry).expect_err(spec);
        let SpecError::Option { source, .. } = &err else {
            panic!("{spec}: {err:?}");
        };
        assert!(
            matches!(source, OptionError::Invalid { .. }),
            "{spec}: {err}"
        );
        assert!(!err.to_string().contains("abcd"), "key echoed: {err}");
    }
    let zero = format!("udp / encryption(psk={})", "0".repeat(64));
    assert!(StackSpec::parse(&zero, &registry).is_err());
    let ok = format!("udp / slicing / encryption(psk={PSK}) / delivery / ordering");
    let spec = StackSpec::parse(&ok, &registry).expect("valid spec");
    assert_eq!(
        spec.layer_names().collect::<Vec<_>>(),
        ["slicing", "encryption", "delivery", "ordering"]
    );
}

#[test]
fn config_debug_never_shows_the_key() {
    let text = format!("{:?}", config(PSK));
    assert!(
        text.contains("redacted") && !text.contains("0, 1, 2"),
        "{text}"
    );
}

// Whole stacks on the seeded simulated link.

fn spec(layers: &str) -> StackSpec {
    let text = layers.replace(
        "encryption",
        &format!("encryption(psk={PSK}, danger_seed=5)"),
    );
    text.parse().expect("valid spec")
}

fn msg(i: u32) -> Bytes {
    let mut m = i.to_be_bytes().to_vec();
    m.extend((0..(i % 300)).map(|j| j as u8));
    Bytes::from(m)
}

#[test]
fn mem_stack_exchanges_messages_both_ways() {
    let mut pair = Pair::new(
        &spec("mem / encryption"),
        LinkModel::default(),
        1,
        Instant::now(),
    );
    for i in 0..20 {
        pair.send_a(msg(i)).expect("accepted");
        pair.send_b(msg(100 + i)).expect("accepted");
    }
    pair.run_for(Duration::from_secs(1));
    assert_eq!(pair.b.received, (0..20).map(msg).collect::<Vec<_>>());
    let mut got_a = pair.a.received.clone();
    got_a.sort();
    let mut want: Vec<_> = (100..120).map(msg).collect();
    want.sort();
    assert_eq!(got_a, want);
    assert!(pair.a.closed.is_none() && pair.b.closed.is_none());
}

#[test]
fn mem_stack_over_duplicating_reordering_link_hands_each_message_up_once() {
    let link = LinkModel {
        duplicate: 0.3,
        reorder: 0.3,
        jitter: ms(10),
        ..LinkModel::default()
    };
    let mut pair = Pair::new(&spec("mem / encryption"), link, 9, Instant::now());
    for i in 0..200 {
        pair.send_a(msg(i)).expect("accepted");
    }
    pair.run_for(Duration::from_secs(2));
    let mut got = pair.b.received.clone();
    got.sort();
    let mut want: Vec<_> = (0..200).map(msg).collect();
    want.sort();
    assert_eq!(got, want, "every message exactly once");
    assert!(pair.b.stack.stats().dropped > 0, "duplicates were refused");
}

#[test]
fn reliable_stack_over_hostile_link_delivers_everything_once_in_order() {
    let stack = spec("udp / slicing / encryption / delivery / ordering");
    // Loss rates per message size: a sliced 9000-byte message is lost when
    // any of its eight fragments is.
    for (seed, loss, sizes) in (0..12).map(|seed| {
        if seed % 2 == 0 {
            (seed, 0.05, [10usize, 3000, 200, 9000])
        } else {
            (seed, 0.3, [10, 100, 200, 1000])
        }
    }) {
        let link = LinkModel {
            loss,
            duplicate: 0.1,
            reorder: 0.2,
            jitter: ms(10),
            ..LinkModel::default()
        };
        let mut pair = Pair::new(&stack, link, seed, Instant::now());
        let want: Vec<Bytes> = (0..100u32)
            .map(|i| {
                let mut m = msg(i).to_vec();
                m.resize(sizes[i as usize % 4], i as u8);
                Bytes::from(m)
            })
            .collect();
        for m in &want {
            pair.send_a(m.clone()).expect("accepted");
        }
        pair.run_for(Duration::from_secs(60));
        assert!(
            pair.b.received == want,
            "seed {seed}: {} of {} received, closed {:?} {:?}, stats {:?}",
            pair.b.received.len(),
            want.len(),
            pair.a.closed,
            pair.b.closed,
            pair.b.stack.stats()
        );
        assert!(
            pair.a.closed.is_none() && pair.b.closed.is_none(),
            "seed {seed}"
        );
    }
}

#[test]
fn handshake_survives_a_partition_at_the_start() {
    let stack = spec("udp / slicing / encryption / delivery / ordering");
    let link = LinkModel {
        loss: 1.0,
        ..LinkModel::default()
    };
    let mut pair = Pair::new(&stack, link, 3, Instant::now());
    for i in 0..10 {
        pair.send_a(msg(i)).expect("accepted");
    }
    pair.run_for(Duration::from_secs(2)); // every handshake message lost
    assert!(pair.b.received.is_empty());
    pair.link.loss = 0.0;
    pair.run_for(Duration::from_secs(10));
    assert_eq!(pair.b.received, (0..10).map(msg).collect::<Vec<_>>());
    assert!(pair.a.stack.stats().transmitted >= 5);
}

#[test]
fn wrong_psk_closes_the_stack_with_a_handshake_timeout() {
    let a_spec = spec("udp / encryption / delivery");
    let b_spec: StackSpec = format!("udp / encryption(psk={OTHER_PSK}) / delivery")
        .parse()
        .expect("valid spec");
    let now = Instant::now();
    let mut a = a_spec.build(now);
    let mut b = b_spec.build_link(LinkContext { now, link_id: 1 });
    a.handle_send(now, Bytes::from_static(b"hello"))
        .expect("queued");
    let mut t = now;
    while !a.is_closed() {
        while let Some(f) = a.poll_transmit() {
            b.handle_receive(t, f.to_bytes())
                .expect("dropped, not fatal");
        }
        t = a.poll_timeout().expect("handshake retries");
        let _ = a.handle_timeout(t);
    }
    assert!(matches!(
        a.close_reason(),
        Some(LinkError::Encryption(
            EncryptionError::HandshakeTimeout { .. }
        ))
    ));
    assert!(b.stats().dropped >= 6);
    assert_eq!(b.poll_receive(), None);
    assert!(
        !b.is_closed(),
        "a forged or wrong-key handshake never closes the responder"
    );
}

#[test]
fn tampered_and_replayed_datagrams_never_reach_the_application() {
    let stack = spec("udp / encryption");
    let now = Instant::now();
    let mut a = stack.build(now);
    let mut b = stack.build_link(LinkContext { now, link_id: 1 });
    let shuttle = |from: &mut Stack, to: &mut Stack| {
        let mut seen = Vec::new();
        while let Some(f) = from.poll_transmit() {
            let d = f.to_bytes();
            to.handle_receive(now, d.clone()).expect("not fatal");
            seen.push(d);
        }
        seen
    };
    a.handle_send(now, Bytes::from_static(b"one"))
        .expect("queued");
    shuttle(&mut a, &mut b);
    shuttle(&mut b, &mut a);
    let data = shuttle(&mut a, &mut b);
    assert_eq!(b.poll_receive(), Some(Bytes::from_static(b"one")));
    let dropped = b.stats().dropped;
    // Replay the data datagram, then a tampered copy.
    b.handle_receive(now, data[0].clone()).expect("not fatal");
    let mut bad = data[0].to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    b.handle_receive(now, Bytes::from(bad)).expect("not fatal");
    assert_eq!(b.poll_receive(), None);
    assert_eq!(b.stats().dropped, dropped + 2);
    assert_eq!(b.stats().received, 1);
}
