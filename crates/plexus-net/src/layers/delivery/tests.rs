use std::collections::HashSet;

use bytes::Bytes;

use super::*;
use crate::sim::{LinkModel, Pair};
use crate::spec::StackSpec;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

struct Io {
    up: Vec<Bytes>,
    down: Vec<Frame>,
    events: Vec<LinkEvent>,
    result: Result<(), ReceiveError>,
}

fn drain(out: &mut Output, result: Result<(), ReceiveError>) -> Io {
    Io {
        up: std::iter::from_fn(|| out.pop_up().map(Frame::into_bytes)).collect(),
        down: std::iter::from_fn(|| out.pop_down()).collect(),
        events: std::iter::from_fn(|| out.pop_event()).collect(),
        result,
    }
}

fn send(d: &mut Delivery, now: Instant, msg: &'static [u8]) -> Vec<Frame> {
    let mut out = Output::new();
    d.handle_send(now, Frame::from_payload(Bytes::from_static(msg)), &mut out)
        .expect("window has room");
    drain(&mut out, Ok(())).down
}

fn recv(d: &mut Delivery, now: Instant, frame: &Frame) -> Io {
    let mut out = Output::new();
    let r = d.handle_receive(now, Frame::from_payload(frame.to_bytes()), &mut out);
    // As the stack does when the driver drains: acks leave at the flush.
    d.handle_flush(now, &mut out);
    drain(&mut out, r)
}

fn timeout(d: &mut Delivery, now: Instant) -> Io {
    let mut out = Output::new();
    d.handle_timeout(now, &mut out);
    drain(&mut out, Ok(()))
}

fn header(frame: &Frame) -> DeliveryHeader {
    DeliveryHeader::parse(&frame.to_bytes())
        .expect("we emit valid headers")
        .0
}

fn pair() -> (Delivery, Delivery, Instant) {
    let now = Instant::now();
    let d = || Delivery::new(DeliveryConfig::default(), now);
    (d(), d(), now)
}

#[test]
fn messages_arrive_exactly_once_over_a_lossy_duplicating_link() {
    let spec: StackSpec = "mem / delivery".parse().expect("valid");
    let link = LinkModel {
        loss: 0.2,
        duplicate: 0.2,
        reorder: 0.2,
        jitter: ms(5),
        ..LinkModel::default()
    };
    let mut sim = Pair::new(&spec, link, 1, Instant::now());
    for i in 0..500u32 {
        sim.send_a(Bytes::copy_from_slice(&i.to_be_bytes()))
            .expect("room");
        sim.send_b(Bytes::copy_from_slice(&i.to_be_bytes()))
            .expect("room");
        sim.run_for(ms(1));
    }
    assert!(sim.run_until_quiet(Duration::from_secs(11), Duration::from_secs(120)));
    for ep in [&sim.a, &sim.b] {
        assert_eq!(ep.received.len(), 500);
        let distinct: HashSet<_> = ep.received.iter().collect();
        assert_eq!(distinct.len(), 500);
        assert!(ep.closed.is_none());
    }
    assert_eq!(sim.a.stack.stats().sent, 500);
}

#[test]
fn lost_data_is_retransmitted_after_rto() {
    let (mut a, mut b, now) = pair();
    let first = send(&mut a, now, b"m");
    assert_eq!(a.poll_timeout(), Some(now + ms(200)), "initial RTO");
    assert!(timeout(&mut a, now + ms(199)).down.is_empty());
    let again = timeout(&mut a, now + ms(200)).down;
    assert_eq!(again.len(), 1);
    assert_eq!(header(&again[0]).seq, header(&first[0]).seq);
    let io = recv(&mut b, now + ms(205), &again[0]);
    assert_eq!(io.up, [Bytes::from_static(b"m")]);
}

#[test]
fn lost_ack_triggers_retransmit_after_rto_and_duplicate_is_suppressed() {
    let (mut a, mut b, now) = pair();
    let data = send(&mut a, now, b"m");
    assert_eq!(recv(&mut b, now, &data[0]).up.len(), 1);
    let ack = timeout(&mut b, now + ms(10)).down;
    assert_eq!(ack.len(), 1, "delayed ack fires");
    // The ack is lost; A retransmits at its RTO.
    let again = timeout(&mut a, now + ms(200)).down;
    let io = recv(&mut b, now + ms(200), &again[0]);
    assert!(io.up.is_empty(), "duplicate not handed up");
    assert_eq!(
        io.result,
        Err(ReceiveError::Delivery(DeliveryError::Duplicate { seq: 0 }))
    );
    assert_eq!(io.down.len(), 1, "duplicate is acked at once");
    recv(&mut a, now + ms(201), &io.down[0]);
    assert_eq!(a.in_flight(), 0);
    assert_eq!(a.poll_timeout(), None, "timer stopped when all acked");
}

#[test]
fn rto_backs_off_exponentially_until_failure() {
    let (mut a, _, now) = pair();
    let cfg = DeliveryConfig {
        max_retries: 3,
        ..DeliveryConfig::default()
    };
    a.config = cfg;
    send(&mut a, now, b"m");
    let mut t = now;
    let mut gaps = Vec::new();
    for _ in 0..3 {
        let next = a.poll_timeout().expect("armed");
        gaps.push(next - t);
        t = next;
        assert_eq!(timeout(&mut a, t).down.len(), 1);
    }
    assert_eq!(gaps, [ms(200), ms(400), ms(800)]);
    let last = a.poll_timeout().expect("armed");
    let io = timeout(&mut a, last);
    assert_eq!(
        io.events,
        [LinkEvent::DeliveryFailed {
            seq: 0,
            attempts: 4,
            lost: 1
        }]
    );
    assert!(!a.can_send());
}

#[test]
fn failure_closes_the_stack_with_a_typed_error() {
    let spec: StackSpec = "mem / delivery(max_retries=2)".parse().expect("valid");
    let link = LinkModel {
        loss: 1.0,
        ..LinkModel::default()
    };
    let mut sim = Pair::new(&spec, link, 3, Instant::now());
    sim.send_a(Bytes::from_static(b"into the void"))
        .expect("room");
    sim.run_for(Duration::from_secs(60));
    assert_eq!(
        sim.a.closed,
        Some(LinkError::DeliveryFailed {
            seq: 0,
            attempts: 3
        })
    );
    assert!(matches!(
        sim.a.events[..],
        [LinkEvent::DeliveryFailed { .. }]
    ));
    assert!(sim.a.stack.is_closed());
}

#[test]
fn retransmitted_message_gives_no_rtt_sample() {
    let (mut a, mut b, now) = pair();
    send(&mut a, now, b"m");
    let again = timeout(&mut a, now + ms(200)).down;
    let io = recv(&mut b, now + ms(210), &again[0]);
    let ack = timeout(&mut b, now + ms(220)).down;
    assert!(io.down.is_empty());
    recv(&mut a, now + ms(230), &ack[0]);
    assert_eq!(a.rtt().srtt(), None, "Karn's rule");
}

#[test]
fn fresh_ack_gives_an_rtt_sample() {
    let (mut a, mut b, now) = pair();
    let data = send(&mut a, now, b"m");
    recv(&mut b, now + ms(20), &data[0]);
    let ack = timeout(&mut b, now + ms(30)).down;
    recv(&mut a, now + ms(40), &ack[0]);
    assert_eq!(a.rtt().srtt(), Some(ms(40)));
    assert_eq!(a.rto(), ms(120));
}

#[test]
fn three_sacked_messages_above_a_hole_trigger_fast_retransmit() {
    let (mut a, mut b, now) = pair();
    let frames: Vec<Frame> = (0..5).flat_map(|_| send(&mut a, now, b"x")).collect();
    let mut acks = Vec::new();
    for f in &frames[1..] {
        acks.extend(recv(&mut b, now + ms(5), f).down);
    }
    let sacks: Vec<_> = acks.iter().map(|f| header(f).ack.expect("ack")).collect();
    assert_eq!(
        sacks.last().map(|a| (a.cumulative, a.ranges().to_vec())),
        Some((0, vec![SackRange { start: 1, end: 5 }]))
    );
    let mut retransmitted = Vec::new();
    for ack in &acks {
        retransmitted.extend(recv(&mut a, now + ms(10), ack).down);
    }
    assert_eq!(retransmitted.len(), 1, "exactly one fast retransmit");
    assert_eq!(header(&retransmitted[0]).seq, Some(0));
    assert!(now + ms(10) < now + a.rto(), "before the RTO");
    let io = recv(&mut b, now + ms(15), &retransmitted[0]);
    assert_eq!(io.up.len(), 1);
    recv(&mut a, now + ms(20), &io.down[0]);
    assert_eq!(a.in_flight(), 0);
}

#[test]
fn in_order_data_is_acked_after_ack_delay_or_every_second_message() {
    let (mut a, mut b, now) = pair();
    let f1 = send(&mut a, now, b"1");
    let io = recv(&mut b, now, &f1[0]);
    assert!(io.down.is_empty(), "first in-order message: ack delayed");
    assert_eq!(b.poll_timeout(), Some(now + ms(10)));
    let f2 = send(&mut a, now, b"2");
    let io = recv(&mut b, now + ms(1), &f2[0]);
    assert_eq!(io.down.len(), 1, "second message: ack at once");
    assert_eq!(header(&io.down[0]).ack.map(|a| a.cumulative), Some(2));
    assert_eq!(b.poll_timeout(), None);
}

#[test]
fn acks_piggyback_on_data_going_the_other_way() {
    let (mut a, mut b, now) = pair();
    let f = send(&mut a, now, b"ping");
    recv(&mut b, now, &f[0]);
    let reply = send(&mut b, now + ms(1), b"pong");
    assert_eq!(reply.len(), 1, "no separate ack");
    let h = header(&reply[0]);
    assert_eq!((h.seq, h.ack.map(|a| a.cumulative)), (Some(0), Some(1)));
    let io = recv(&mut a, now + ms(2), &reply[0]);
    assert_eq!(io.up, [Bytes::from_static(b"pong")]);
    assert_eq!(a.in_flight(), 0);
}

#[test]
fn full_window_pushes_back_and_reopens_on_ack() {
    let spec: StackSpec = "mem / delivery(send_window=2, send_queue=2)"
        .parse()
        .expect("valid");
    let mut sim = Pair::new(&spec, LinkModel::default(), 4, Instant::now());
    let mut accepted = 0;
    let refused = loop {
        match sim.send_a(Bytes::from_static(b"x")) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(accepted, 4, "2 in flight + 2 queued");
    assert!(matches!(refused, StackSendError::WouldBlock(_)));
    assert_eq!(refused.into_frame().len(), 1, "the message is handed back");
    sim.run_for(ms(50));
    assert!(sim.a.events.contains(&LinkEvent::SendReady));
    assert_eq!(sim.b.received.len(), 4);
    assert!(sim.send_a(Bytes::from_static(b"y")).is_ok());
}

#[test]
fn ack_for_data_never_sent_is_rejected_without_state_change() {
    let (mut a, _, now) = pair();
    let mut bogus = Ack::new(5);
    assert!(bogus.push_range(SackRange { start: 7, end: 9 }));
    let mut buf = [0; MAX_HEADER_LEN];
    let n = DeliveryHeader {
        seq: None,
        ack: Some(bogus),
    }
    .emit(&mut buf);
    let io = recv(
        &mut a,
        now,
        &Frame::from_payload(Bytes::copy_from_slice(&buf[..n])),
    );
    assert_eq!(
        io.result,
        Err(ReceiveError::Delivery(DeliveryError::AckForUnsent {
            acked: 9,
            sent: 0
        }))
    );
    assert!(io.down.is_empty() && io.up.is_empty());
}

#[test]
fn data_beyond_the_receive_window_is_dropped() {
    let now = Instant::now();
    let mut b = Delivery::new(
        DeliveryConfig {
            recv_window: 4,
            ..DeliveryConfig::default()
        },
        now,
    );
    let mut buf = [0; MAX_HEADER_LEN];
    let n = DeliveryHeader {
        seq: Some(4),
        ack: None,
    }
    .emit(&mut buf);
    let io = recv(
        &mut b,
        now,
        &Frame::from_payload(Bytes::copy_from_slice(&buf[..n])),
    );
    assert_eq!(
        io.result,
        Err(ReceiveError::Delivery(DeliveryError::BeyondWindow {
            seq: 4
        }))
    );
    assert!(io.up.is_empty());
    let n = DeliveryHeader {
        seq: Some(u64::MAX),
        ack: None,
    }
    .emit(&mut buf);
    let io = recv(
        &mut b,
        now,
        &Frame::from_payload(Bytes::copy_from_slice(&buf[..n])),
    );
    assert!(io.result.is_err());
}

#[test]
fn garbage_headers_are_rejected_without_panicking() {
    let cases: &[&[u8]] = &[
        &[],
        &[0],
        &[0x04],
        &[0x01, 1, 2],
        &[0x02, 0, 0, 0, 0, 0, 0, 0, 0, 5],
        // Range with start 0 (must be above cum).
        &[0x02, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1],
        // Range overflowing u64.
        &[
            0x02, 255, 255, 255, 255, 255, 255, 255, 255, 1, 0, 0, 0, 1, 0, 0, 0, 2,
        ],
    ];
    for case in cases {
        assert!(DeliveryHeader::parse(case).is_err(), "{case:?}");
    }
}

#[test]
fn header_round_trips() {
    let mut ack = Ack::new(1 << 40);
    for k in 0..MAX_SACK_RANGES as u64 {
        assert!(ack.push_range(SackRange {
            start: (1 << 40) + 10 * k + 2,
            end: (1 << 40) + 10 * k + 3 + k % 5
        }));
    }
    // Full: a further range is refused, as is one beyond u32 offsets.
    assert!(!ack.push_range(SackRange {
        start: (1 << 40) + 1000,
        end: (1 << 40) + 1001
    }));
    assert!(!Ack::new(1 << 40).push_range(SackRange {
        start: u64::MAX - 1,
        end: u64::MAX
    }));
    let h = DeliveryHeader {
        seq: Some(77),
        ack: Some(ack),
    };
    let mut buf = [0; MAX_HEADER_LEN];
    let n = h.emit(&mut buf);
    assert_eq!(n, h.buffer_len());
    assert_eq!(n, MAX_HEADER_LEN);
    assert_eq!(DeliveryHeader::parse(&buf[..n]), Ok((h, n)));
}

/// Sends `n` messages of 100 bytes from `d` in one batch; returns the frames.
fn send_many(d: &mut Delivery, now: Instant, n: usize) -> Vec<Frame> {
    let mut out = Output::new();
    for _ in 0..n {
        d.handle_send(
            now,
            Frame::from_payload(Bytes::from(vec![7; 100])),
            &mut out,
        )
        .expect("room");
    }
    drain(&mut out, Ok(())).down
}

#[test]
fn congestion_window_bounds_the_bytes_in_flight_and_halves_on_fast_retransmit() {
    let (mut a, mut b, now) = pair();
    // 16 KiB initial window, 100 + 32 bytes charged per message.
    let sent = send_many(&mut a, now, 200);
    let first_window = (16 << 10) / (100 + MESSAGE_CHARGE);
    assert_eq!(sent.len(), first_window);
    assert_eq!(
        (a.in_flight(), a.queued()),
        (first_window, 200 - first_window)
    );
    // Message 0 is lost; 1..=10 arrive: B's SACKs show 0 missing.
    let mut acks = Vec::new();
    for frame in &sent[1..=10] {
        acks.extend(recv(&mut b, now + ms(5), frame).down);
    }
    assert!(!acks.is_empty());
    let before = a.congestion_control().window();
    let mut retransmitted = Vec::new();
    for ack in &acks {
        retransmitted.extend(recv(&mut a, now + ms(10), ack).down);
    }
    let cwnd = a.congestion_control();
    assert!(cwnd.in_recovery());
    // SACKed messages left the network (RFC 6675's pipe): the first SACKs
    // let new messages in before the third one showed the hole.
    let at_loss = a.in_flight();
    assert!(at_loss > first_window && at_loss < first_window + 10);
    assert_eq!(cwnd.window(), at_loss * (100 + MESSAGE_CHARGE) / 2);
    assert!(cwnd.window() < before);
    let fresh: Vec<_> = retransmitted.iter().filter_map(|f| header(f).seq).collect();
    assert_eq!(fresh[fresh.len() - 1], 0, "fast retransmit after them");
    // Nothing new enters the halved window until acks free room.
    assert_eq!(a.in_flight(), at_loss);
}

#[test]
fn congestion_window_grows_in_slow_start_and_collapses_on_timeout() {
    let (mut a, mut b, now) = pair();
    let sent = send_many(&mut a, now, 400);
    let initial = a.congestion_control().window();
    let mut acks = Vec::new();
    for frame in &sent {
        acks.extend(recv(&mut b, now + ms(5), frame).down);
    }
    let mut more = Vec::new();
    for ack in &acks {
        more.extend(recv(&mut a, now + ms(10), ack).down);
    }
    // Every byte acked grows the window by as much (slow start).
    assert_eq!(a.in_flight(), more.len());
    assert!(a.congestion_control().window() >= 2 * initial - 2 * MESSAGE_CHARGE);
    assert!(more.len() > sent.len(), "the doubled window sends more");
    // Nothing acked: the RTO resends and restarts from the minimum.
    let rto = a.rto();
    let resent = timeout(&mut a, now + ms(10) + rto).down;
    assert!(!resent.is_empty());
    assert_eq!(a.congestion_control().window(), MIN_WINDOW);
}

#[test]
fn one_message_larger_than_the_window_is_still_sent() {
    let now = Instant::now();
    let mut a = Delivery::new(
        DeliveryConfig {
            initial_window: 0,
            ..DeliveryConfig::default()
        },
        now,
    );
    let mut out = Output::new();
    a.handle_send(
        now,
        Frame::from_payload(Bytes::from(vec![1; 64 << 10])),
        &mut out,
    )
    .expect("room");
    assert_eq!(drain(&mut out, Ok(())).down.len(), 1);
    assert_eq!(a.congestion_control().window(), MIN_WINDOW);
}

#[test]
fn acks_of_one_batch_are_coalesced_into_one_at_the_flush() {
    let (mut a, mut b, now) = pair();
    let sent = send_many(&mut a, now, 20);
    let mut out = Output::new();
    // Out of order: each arrival asks for an ack "at once".
    for frame in sent.iter().rev() {
        b.handle_receive(now, Frame::from_payload(frame.to_bytes()), &mut out)
            .expect("fresh");
    }
    assert!(out.pop_down().is_none(), "acks wait for the flush");
    b.handle_flush(now, &mut out);
    let io = drain(&mut out, Ok(()));
    assert_eq!(io.up.len(), 20);
    assert_eq!(io.down.len(), 1);
    let ack = header(&io.down[0]).ack.expect("an ack");
    assert_eq!(ack.cumulative, 20);
}

/// RFC 6298 sec. 5.4: on a retransmission timeout only the earliest
/// unacknowledged message is resent; the others follow as acks open the
/// collapsed window again (RFC 5681 sec. 3.1, slow start), not in a burst.
#[test]
fn rto_retransmits_only_the_earliest_unacked_message() {
    let (mut a, mut b, now) = pair();
    let sent = send_many(&mut a, now, 20);
    assert_eq!(sent.len(), 20, "all in the initial window");
    let rto = a.rto();
    let resent = timeout(&mut a, now + rto).down;
    let seqs: Vec<_> = resent.iter().filter_map(|f| header(f).seq).collect();
    assert_eq!(seqs, [0], "only the earliest goes again");
    // Its ack opens the window: the next lost ones follow, in order.
    let ack = recv(&mut b, now + rto + ms(1), &resent[0]);
    assert_eq!(ack.up.len(), 1);
    let t = now + rto + ms(2);
    let mut delivered = 1;
    let mut acks = timeout(&mut b, t + ms(50)).down;
    acks.extend(ack.down);
    let mut rounds = 0;
    let mut expected_seq = 1;
    while delivered < 20 {
        rounds += 1;
        assert!(rounds < 20, "the window reopens");
        let mut data = Vec::new();
        for ack in &acks {
            data.extend(recv(&mut a, t, ack).down);
        }
        let data_seqs: Vec<_> = data.iter().filter_map(|f| header(f).seq).collect();
        assert!(!data_seqs.is_empty(), "acks release retransmissions");
        for seq in &data_seqs {
            assert_eq!(*seq, expected_seq, "resent in order, once each");
            expected_seq += 1;
        }
        acks.clear();
        for frame in &data {
            let io = recv(&mut b, t, frame);
            delivered += io.up.len();
            acks.extend(io.down);
        }
        acks.extend(timeout(&mut b, t + ms(50)).down);
    }
    for ack in &acks {
        recv(&mut a, t, ack);
    }
    assert_eq!(a.in_flight(), 0);
}

/// RFC 8985 sec. 7: a lost tail (nothing sent after it to be SACKed) is
/// found by a probe about two round trips after the last ack, and the
/// probe's SACK lets the time rule (sec. 6.2) resend the rest of the tail,
/// all before the retransmission timeout.
#[test]
fn lost_tail_is_found_by_a_probe_before_the_rto() {
    let (mut a, mut b, t0) = pair();
    // A round trip of 4 ms: SRTT and the minimum RTT become 4 ms.
    for frame in send_many(&mut a, t0, 2) {
        for ack in recv(&mut b, t0 + ms(2), &frame).down {
            recv(&mut a, t0 + ms(4), &ack);
        }
    }
    assert_eq!(a.rtt().srtt(), Some(ms(4)));
    let t1 = t0 + ms(4);
    let sent = send_many(&mut a, t1, 10);
    // The first six arrive and are acked; the last four are lost.
    for frame in &sent[..6] {
        for ack in recv(&mut b, t1 + ms(2), frame).down {
            recv(&mut a, t1 + ms(4), &ack);
        }
    }
    assert_eq!(a.in_flight(), 4);
    let probe_at = a.poll_timeout().expect("a timer");
    assert_eq!(probe_at, t1 + ms(12), "two SRTT after the last ack");
    assert!(probe_at < t1 + ms(4) + a.rto(), "before the RTO");
    let probe = timeout(&mut a, probe_at).down;
    assert_eq!(probe.len(), 1);
    assert_eq!(header(&probe[0]).seq, Some(11), "the last message again");
    let acks = recv(&mut b, probe_at + ms(2), &probe[0]).down;
    let resent: Vec<_> = acks
        .iter()
        .flat_map(|ack| recv(&mut a, probe_at + ms(4), ack).down)
        .filter_map(|f| header(&f).seq)
        .collect();
    assert_eq!(resent, [10, 9, 8], "the rest of the tail, found by time");
    let stats = a.stats();
    assert_eq!((stats.probes, stats.timeouts), (1, 0));
    assert_eq!(stats.fast_retransmits, 3);
}

/// Only a transmission that left a quarter of the minimum RTT before one
/// that arrived counts as lost by time; messages above the highest one an
/// ack reported may have arrived unreported and are left alone.
#[test]
fn the_time_rule_spares_messages_the_ack_did_not_cover() {
    let (mut a, mut b, t0) = pair();
    for frame in send_many(&mut a, t0, 2) {
        for ack in recv(&mut b, t0 + ms(5), &frame).down {
            recv(&mut a, t0 + ms(10), &ack);
        }
    }
    let t1 = t0 + ms(10);
    send_many(&mut a, t1, 3); // 2, 3, 4: lost
    let late = send_many(&mut a, t1 + ms(5), 3); // 5, 6, 7
                                                 // 5 arrives alone: 2, 3 and 4 left 5 ms (> 10 ms / 4) before it and
                                                 // are lost; 6 and 7 are above what the ack reports.
    let acks = recv(&mut b, t1 + ms(10), &late[0]).down;
    let resent: Vec<_> = acks
        .iter()
        .flat_map(|ack| recv(&mut a, t1 + ms(15), ack).down)
        .filter_map(|f| header(&f).seq)
        .collect();
    assert_eq!(resent, [4, 3, 2]);
}

/// A stand-alone ack reports up to [`MAX_SACK_RANGES`] ranges; an ack
/// riding on data at most [`PIGGYBACK_SACK_RANGES`], and then a full one
/// follows at the flush.
#[test]
fn many_holes_are_reported_and_a_piggybacked_ack_is_completed_at_the_flush() {
    let (mut a, mut b, now) = pair();
    let sent = send_many(&mut a, now, 24);
    let mut out = Output::new();
    // Every other message arrives: ten holes above the cumulative ack.
    for frame in sent.iter().step_by(2) {
        b.handle_receive(now, Frame::from_payload(frame.to_bytes()), &mut out)
            .expect("fresh");
    }
    let data = send(&mut b, now, b"reply");
    let on_data = header(&data[0]).ack.expect("piggy-backed");
    assert_eq!(on_data.ranges().len(), PIGGYBACK_SACK_RANGES);
    b.handle_flush(now, &mut out);
    let io = drain(&mut out, Ok(()));
    assert_eq!(io.down.len(), 1, "a full ack follows");
    let full = header(&io.down[0]).ack.expect("an ack");
    assert_eq!((full.cumulative, full.ranges().len()), (1, 11));
    // The sender learns of every message that arrived.
    recv(&mut a, now, &io.down[0]);
    assert_eq!(a.in_flight(), 23);
    assert_eq!(a.sacked, 11);
}
