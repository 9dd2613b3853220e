//! The incoming half frame by frame: runs gathered and cut where they
//! must be, traced and named messages, numbered and control frames handed
//! on, malformed frames refused, the flood fence's rhythm; and, as a
//! property, that sorting any stream of messages delivers each payload
//! once, in the order read.

use std::collections::VecDeque;

use bytes::Bytes;
use plexus_core::trace::TraceContext;
use plexus_transport::Received;
use proptest::prelude::*;

use super::{Arrival, Incoming, FLOOD_CHECK_EVERY, RUN_MAX};
use crate::close::ProtocolError;
use crate::wire::{GoodbyeCode, WireFrame};

fn message(to: u64, type_id: u64, receipt: u64, payload: &'static [u8]) -> Bytes {
    WireFrame::Message {
        to,
        type_id,
        receipt,
        payload: Bytes::from_static(payload),
    }
    .encode()
}

fn queue(frames: impl IntoIterator<Item = Bytes>) -> VecDeque<Received> {
    frames.into_iter().map(Received::Message).collect()
}

/// The payload of each queued message frame, in order.
fn queued_payloads(q: &VecDeque<Received>) -> Vec<Bytes> {
    q.iter()
        .map(|r| match r {
            Received::Message(b) => match WireFrame::decode(b.clone()) {
                Ok(WireFrame::Message { payload, .. }) => payload,
                other => panic!("not a message: {other:?}"),
            },
            Received::Event(e) => panic!("an event: {e:?}"),
        })
        .collect()
}

fn trace() -> TraceContext {
    TraceContext::new([7; 16], [9; 8], 1).expect("a valid context")
}

#[test]
fn consecutive_messages_to_one_actor_make_one_run_cut_at_another_target() {
    let mut incoming = Incoming::default();
    let mut q = queue([
        message(5, 1, 0, b"b"),
        message(5, 1, 0, b"c"),
        message(6, 1, 0, b"d"),
        message(5, 1, 0, b"e"),
    ]);
    match incoming.arrive(message(5, 1, 0, b"a"), &mut q).unwrap() {
        Arrival::Run {
            to,
            type_id,
            payloads,
        } => {
            assert_eq!((to, type_id), (5, 1));
            assert_eq!(payloads.as_slice(), [&b"a"[..], b"b", b"c"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        queued_payloads(&q),
        [&b"d"[..], b"e"],
        "the rest stays, in order"
    );
}

#[test]
fn another_type_or_a_receipt_ends_a_run_and_a_receipt_is_never_in_one() {
    let mut incoming = Incoming::default();
    // Another type id for the same actor.
    let mut q = queue([message(5, 2, 0, b"b")]);
    assert!(matches!(
        incoming.arrive(message(5, 1, 0, b"a"), &mut q).unwrap(),
        Arrival::Message { header, trace: None, .. } if (header.to, header.type_id) == (5, 1)
    ));
    assert_eq!(q.len(), 1);
    // A message asking for a receipt goes alone, and cuts a run before it.
    let mut q = queue([message(5, 1, 0, b"b"), message(5, 1, 9, b"c")]);
    assert!(matches!(
        incoming.arrive(message(5, 1, 0, b"a"), &mut q).unwrap(),
        Arrival::Run { payloads, .. } if payloads.len() == 2
    ));
    let Some(Received::Message(next)) = q.pop_front() else {
        panic!("the receipt's message stays queued")
    };
    assert!(matches!(
        incoming.arrive(next, &mut q).unwrap(),
        Arrival::Message { header, payload, .. } if header.receipt == 9 && payload == b"c"[..]
    ));
    let mut q = queue([message(5, 1, 0, b"b")]);
    assert!(matches!(
        incoming.arrive(message(5, 1, 3, b"a"), &mut q).unwrap(),
        Arrival::Message { header, .. } if header.receipt == 3
    ));
    assert_eq!(q.len(), 1, "a message with a receipt starts no run");
}

#[test]
fn a_run_holds_at_most_run_max_messages() {
    let mut incoming = Incoming::default();
    let mut q = queue((0..RUN_MAX + 10).map(|_| message(5, 1, 0, b"x")));
    match incoming.arrive(message(5, 1, 0, b"x"), &mut q).unwrap() {
        Arrival::Run { payloads, .. } => assert_eq!(payloads.len(), RUN_MAX),
        other => panic!("{other:?}"),
    }
    assert_eq!(q.len(), 11);
}

#[test]
fn traced_and_named_messages_come_with_their_context() {
    let mut incoming = Incoming::default();
    let mut none = VecDeque::new();
    let traced = WireFrame::Traced {
        context: trace(),
        frame: message(5, 1, 4, b"t"),
    }
    .encode();
    assert!(matches!(
        incoming.arrive(traced, &mut none).unwrap(),
        Arrival::Message { header, payload, trace: Some(t) }
            if header.to == 5 && header.receipt == 4 && payload == b"t"[..] && t == trace()
    ));
    let named = WireFrame::Named {
        name: "pong".into(),
        type_id: 1,
        receipt: 0,
        payload: Bytes::from_static(b"n"),
    };
    assert!(matches!(
        incoming.arrive(named.encode(), &mut none).unwrap(),
        Arrival::Named { name, trace: None, .. } if name == "pong"
    ));
    let traced_named = WireFrame::Traced {
        context: trace(),
        frame: named.encode(),
    };
    assert!(matches!(
        incoming.arrive(traced_named.encode(), &mut none).unwrap(),
        Arrival::Named { name, payload, trace: Some(_), .. } if name == "pong" && payload == b"n"[..]
    ));
}

#[test]
fn numbered_and_control_frames_are_handed_on() {
    let mut incoming = Incoming::default();
    let mut none = VecDeque::new();
    let sequenced = WireFrame::Sequenced {
        lane: 2,
        seq: 7,
        frame: message(5, 1, 0, b"s"),
    };
    assert!(matches!(
        incoming.arrive(sequenced.encode(), &mut none).unwrap(),
        Arrival::Sequenced {
            lane: 2,
            seq: 7,
            ..
        }
    ));
    let goodbye = WireFrame::Goodbye {
        code: GoodbyeCode::Shutdown,
    };
    assert!(matches!(
        incoming.arrive(goodbye.encode(), &mut none).unwrap(),
        Arrival::Control(WireFrame::Goodbye {
            code: GoodbyeCode::Shutdown
        })
    ));
}

#[test]
fn malformed_frames_end_the_link_with_a_typed_error() {
    let mut incoming = Incoming::default();
    let mut none = VecDeque::new();
    let mut truncated = message(5, 1, 0, b"").to_vec();
    truncated.truncate(3);
    assert!(matches!(
        incoming.arrive(Bytes::from(truncated), &mut none),
        Err(ProtocolError::Malformed(_))
    ));
    assert!(matches!(
        incoming.arrive(Bytes::from_static(&[0xee, 1, 2]), &mut none),
        Err(ProtocolError::Malformed(_))
    ));
}

#[test]
fn the_fence_is_asked_for_once_per_check_interval() {
    let mut incoming = Incoming::default();
    let asked: Vec<usize> = (1..=3 * FLOOD_CHECK_EVERY)
        .filter(|_| incoming.delivered(1))
        .collect();
    assert_eq!(asked.len(), 3);
    // A run counts all its messages: a large one asks at once.
    assert!(incoming.delivered(FLOOD_CHECK_EVERY));
}

proptest! {
    /// Whatever the targets, types and receipts, sorting a link's stream of
    /// messages hands every payload on exactly once, in the order read,
    /// and every run is consecutive frames to one actor under one type
    /// without receipts.
    #[test]
    fn every_message_is_handed_on_once_in_order(
        frames in prop::collection::vec((0u64..3, 0u64..2, prop::bool::weighted(0.2)), 1..600),
    ) {
        let encoded: Vec<Bytes> = frames
            .iter()
            .enumerate()
            .map(|(i, &(to, type_id, receipt))| {
                WireFrame::Message {
                    to,
                    type_id,
                    receipt: u64::from(receipt) * (i as u64 + 1),
                    payload: Bytes::from((i as u32).to_le_bytes().to_vec()),
                }
                .encode()
            })
            .collect();
        let mut q = queue(encoded);
        let mut incoming = Incoming::default();
        let mut seen: Vec<u32> = Vec::new();
        let index = |p: &Bytes| u32::from_le_bytes(p[..4].try_into().unwrap());
        while let Some(Received::Message(first)) = q.pop_front() {
            match incoming.arrive(first, &mut q).unwrap() {
                Arrival::Message { header, payload, .. } => {
                    let i = index(&payload) as usize;
                    prop_assert_eq!((header.to, header.type_id), (frames[i].0, frames[i].1));
                    seen.push(index(&payload));
                }
                Arrival::Run { to, type_id, payloads } => {
                    prop_assert!(payloads.len() >= 2 && payloads.len() <= RUN_MAX);
                    for p in payloads.drain(..) {
                        let i = index(&p) as usize;
                        prop_assert_eq!((to, type_id, false), frames[i]);
                        seen.push(index(&p));
                    }
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
        let expected: Vec<u32> = (0..frames.len() as u32).collect();
        prop_assert_eq!(seen, expected);
    }
}
