//! The control protocol frame by frame, on the session alone: each frame
//! kind's events and replies, answers reaching their waiter once (strays
//! counted), a lost link in the middle of requests, and the frames that
//! end a link. Every frame goes through its wire encoding first, as from a
//! peer.

use bytes::Bytes;
use plexus_core::remote::ReceiptError;
use plexus_core::{ActorId, ExitReason};

use super::super::tests::{fresh, gone, node, up, FakeSession};
use super::SessionEvent;
use crate::close::{CloseCause, ProtocolError};
use crate::wire::{GoodbyeCode, ReceiptStatus, RejectCode, Resolution, WireFrame};
use plexus_net::protocol::Protocol as _;

/// This node (1) and the peer's (2).
const HERE: u64 = 1;
const PEER: u64 = 2;

/// `frame` as it arrives: encoded by the peer, decoded here.
fn handle(st: &mut FakeSession, frame: WireFrame) -> Result<Option<WireFrame>, CloseCause> {
    let frame = WireFrame::decode(frame.encode()).expect("a well-formed frame");
    st.handle_frame(node(HERE), node(PEER), frame)
}

fn control(st: &mut FakeSession, frame: WireFrame) {
    assert!(
        handle(st, frame)
            .expect("a control frame keeps the link")
            .is_none(),
        "a control frame is the session's"
    );
}

fn events(st: &mut FakeSession) -> Vec<SessionEvent<super::super::tests::Fake>> {
    std::iter::from_fn(|| st.poll_event()).collect()
}

fn transmits(st: &mut FakeSession) -> Vec<WireFrame> {
    std::iter::from_fn(|| st.poll_reply()).collect()
}

#[test]
fn each_receipt_status_reaches_its_waiter_once_and_strays_are_counted() {
    let cases = [
        (ReceiptStatus::Delivered, Ok(())),
        (ReceiptStatus::NoSuchActor, Err(ReceiptError::NoSuchActor)),
        (ReceiptStatus::Stopped, Err(ReceiptError::Stopped)),
        (ReceiptStatus::MailboxFull, Err(ReceiptError::MailboxFull)),
    ];
    let mut st = fresh();
    up(&mut st, "l1", 1);
    for (id, (status, want)) in (1..).zip(cases) {
        st.expect_receipt(id, 100 + id);
        control(&mut st, WireFrame::Receipt { id, status });
        match events(&mut st).as_slice() {
            [SessionEvent::Receipt { waiter, outcome }] => {
                assert_eq!(*waiter, 100 + id);
                assert_eq!(*outcome, want, "{status:?}");
            }
            _ => panic!("{status:?}: one receipt event"),
        }
    }
    st.expect_receipt(9, 109);
    control(
        &mut st,
        WireFrame::Receipt {
            id: 9,
            status: ReceiptStatus::Undecodable,
        },
    );
    assert!(matches!(
        events(&mut st).as_slice(),
        [SessionEvent::Receipt {
            waiter: 109,
            outcome: Err(ReceiptError::Decode(_))
        }]
    ));
    assert_eq!(st.stray_answers(), 0);
    // Answered already, and never asked: dropped, counted.
    for id in [1, 77] {
        control(
            &mut st,
            WireFrame::Receipt {
                id,
                status: ReceiptStatus::Delivered,
            },
        );
    }
    assert!(events(&mut st).is_empty());
    assert_eq!(st.stray_answers(), 2);
    assert!(transmits(&mut st).is_empty(), "a receipt is not answered");
}

#[test]
fn a_resolve_is_answered_through_poll_transmit_and_resolved_reaches_its_waiter() {
    let mut st = fresh();
    up(&mut st, "l1", 1);
    control(
        &mut st,
        WireFrame::Resolve {
            request: 9,
            type_id: 3,
            type_name: "pong::Ping".into(),
            name: "pong".into(),
        },
    );
    match events(&mut st).as_slice() {
        [SessionEvent::Resolve {
            request: 9,
            type_id: 3,
            name,
        }] => assert_eq!(name, "pong"),
        _ => panic!("one resolve event"),
    }
    assert!(transmits(&mut st).is_empty(), "answered by the shell");
    st.answer_resolve(9, Resolution::Found(4));
    assert_eq!(
        transmits(&mut st),
        [WireFrame::Resolved {
            request: 9,
            resolution: Resolution::Found(4)
        }]
    );

    st.expect_resolved(5, 500);
    let answer = WireFrame::Resolved {
        request: 5,
        resolution: Resolution::NoSuchName,
    };
    control(&mut st, answer.clone());
    assert!(matches!(
        events(&mut st).as_slice(),
        [SessionEvent::Resolved {
            waiter: 500,
            resolution: Resolution::NoSuchName
        }]
    ));
    control(&mut st, answer);
    assert!(events(&mut st).is_empty());
    assert_eq!(st.stray_answers(), 1, "answered once");
}

#[test]
fn the_peers_monitor_is_watched_refused_ended_or_told_down() {
    let mut st = fresh();
    up(&mut st, "l1", 1);
    control(
        &mut st,
        WireFrame::Monitor {
            target: 3,
            token: 7,
        },
    );
    assert!(matches!(
        events(&mut st).as_slice(),
        [SessionEvent::Monitor {
            target: 3,
            token: 7
        }]
    ));
    // No such actor here: the peer is told at once.
    st.refuse_monitor(7, ExitReason::Stopped);
    assert_eq!(
        transmits(&mut st),
        [WireFrame::Down {
            token: 7,
            reason: ExitReason::Stopped
        }]
    );
    // Watched, then the peer stops watching: the local watch goes.
    st.monitored(8, "local", Some(80));
    control(
        &mut st,
        WireFrame::Demonitor {
            target: 3,
            token: 8,
        },
    );
    assert!(matches!(
        events(&mut st).as_slice(),
        [SessionEvent::Unwatch {
            local: "local",
            watch: 80
        }]
    ));
    control(
        &mut st,
        WireFrame::Demonitor {
            target: 3,
            token: 8,
        },
    );
    assert!(events(&mut st).is_empty(), "ended once");
    assert_eq!(st.stray_answers(), 0, "a demonitor is not an answer");
    // Watched, then the actor stops: the monitor ends and the peer is told.
    st.monitored(9, "local", Some(90));
    st.actor_down(9, ExitReason::Normal);
    assert_eq!(
        transmits(&mut st),
        [WireFrame::Down {
            token: 9,
            reason: ExitReason::Normal
        }]
    );
    control(
        &mut st,
        WireFrame::Demonitor {
            target: 3,
            token: 9,
        },
    );
    assert!(events(&mut st).is_empty(), "nothing left to unwatch");
}

#[test]
fn down_reaches_the_local_watcher_once() {
    let target = ActorId::new(node(PEER), 5);
    let mut st = fresh();
    up(&mut st, "l1", 1);
    st.watch(30, target, "watcher").expect("watching");
    let down = WireFrame::Down {
        token: 30,
        reason: ExitReason::Stopped,
    };
    control(&mut st, down.clone());
    match events(&mut st).as_slice() {
        [SessionEvent::Down {
            watcher: "watcher",
            id,
            reason: ExitReason::Stopped,
        }] => assert_eq!(*id, target),
        _ => panic!("one down event"),
    }
    control(&mut st, down);
    assert!(events(&mut st).is_empty());
    assert_eq!(st.stray_answers(), 1);
}

#[test]
fn actor_links_are_kept_refused_and_ended_by_unlink_and_exit() {
    let remote = ActorId::new(node(PEER), 6);
    let mut st = fresh();
    let epoch = up(&mut st, "l1", 1);
    control(&mut st, WireFrame::Link { from: 6, to: 3 });
    match events(&mut st).as_slice() {
        [SessionEvent::Link {
            remote: r,
            local: 3,
        }] => assert_eq!(*r, remote),
        _ => panic!("one link event"),
    }
    // Linking to an actor that is gone: the peer's actor gets EXIT.
    st.refuse_link(remote, 4, ExitReason::Stopped);
    assert_eq!(
        transmits(&mut st),
        [WireFrame::Exit {
            from: 4,
            to: 6,
            reason: ExitReason::Stopped
        }]
    );
    let (three, five) = (ActorId::new(node(HERE), 3), ActorId::new(node(HERE), 5));
    st.linked(three, "three", remote);
    st.linked(five, "five", remote);
    control(&mut st, WireFrame::Unlink { from: 6, to: 3 });
    assert!(matches!(
        events(&mut st).as_slice(),
        [SessionEvent::Unlink { local: 3, .. }]
    ));
    control(
        &mut st,
        WireFrame::Exit {
            from: 6,
            to: 5,
            reason: ExitReason::Killed,
        },
    );
    assert!(matches!(
        events(&mut st).as_slice(),
        [SessionEvent::Exit {
            local: 5,
            reason: ExitReason::Killed,
            ..
        }]
    ));
    let lost = st.link_lost(epoch, &gone()).expect("lost");
    assert!(lost.links.is_empty(), "unlink and exit ended both links");
}

#[test]
fn stop_reply_and_messages_go_to_the_shell() {
    let mut st = fresh();
    up(&mut st, "l1", 1);
    control(
        &mut st,
        WireFrame::Stop {
            target: 3,
            kill: true,
        },
    );
    control(
        &mut st,
        WireFrame::Reply {
            id: 4,
            payload: Bytes::from_static(b"v"),
        },
    );
    match events(&mut st).as_slice() {
        [SessionEvent::Stop {
            target: 3,
            kill: true,
        }, SessionEvent::Reply { id: 4, payload }] => assert_eq!(&payload[..], b"v"),
        _ => panic!("stop, then reply, in order"),
    }
    let message = WireFrame::Message {
        to: 3,
        type_id: 1,
        receipt: 0,
        payload: Bytes::from_static(b"m"),
    };
    assert_eq!(handle(&mut st, message.clone()).unwrap(), Some(message));
    let named = WireFrame::Named {
        name: "pong".into(),
        type_id: 1,
        receipt: 2,
        payload: Bytes::new(),
    };
    assert_eq!(handle(&mut st, named.clone()).unwrap(), Some(named));
    assert!(events(&mut st).is_empty() && transmits(&mut st).is_empty());
}

#[test]
fn goodbye_with_each_code_and_a_late_handshake_frame_end_the_link() {
    let mut st = fresh();
    up(&mut st, "l1", 1);
    for code in [GoodbyeCode::Shutdown, GoodbyeCode::Duplicate] {
        let end = handle(&mut st, WireFrame::Goodbye { code });
        assert!(
            matches!(end, Err(CloseCause::Goodbye(c)) if c == code),
            "{code:?}"
        );
    }
    let late = [
        WireFrame::Auth { proof: [0; 32] },
        WireFrame::Reject {
            code: RejectCode::Cookie,
            detail: "no".into(),
        },
    ];
    for frame in late {
        let end = handle(&mut st, frame);
        assert!(matches!(
            end,
            Err(CloseCause::Protocol(ProtocolError::HandshakeFrame { .. }))
        ));
    }
    assert!(events(&mut st).is_empty());
}

#[test]
fn a_lost_link_fails_the_requests_and_their_late_answers_are_strays() {
    let mut st = fresh();
    let epoch = up(&mut st, "l1", 1);
    st.expect_receipt(1, 101);
    st.expect_resolved(2, 102);
    st.watch(3, ActorId::new(node(PEER), 9), "w")
        .expect("watching");
    let lost = st.link_lost(epoch, &gone()).expect("lost");
    assert_eq!(
        lost.receipts.len() + lost.resolves.len() + lost.watchers.len(),
        3
    );
    up(&mut st, "l2", 1);
    control(
        &mut st,
        WireFrame::Receipt {
            id: 1,
            status: ReceiptStatus::Delivered,
        },
    );
    control(
        &mut st,
        WireFrame::Resolved {
            request: 2,
            resolution: Resolution::Found(1),
        },
    );
    control(
        &mut st,
        WireFrame::Down {
            token: 3,
            reason: ExitReason::Normal,
        },
    );
    assert!(
        events(&mut st).is_empty(),
        "each failed once, with the link"
    );
    assert_eq!(st.stray_answers(), 3);
}

#[test]
fn as_a_protocol_it_takes_bytes_closes_on_an_ending_or_malformed_packet_and_routes_its_replies() {
    use crate::peer::links::Carrier;
    use crate::peer::session::Route;
    use crate::peer::strands::strand_of;
    use plexus_core::Lane;
    use std::time::Instant;

    let now = Instant::now();
    let from = Route {
        carrier: Carrier::Primary,
        strand: plexus_transport::Strand::ZERO,
    };
    let mut st = fresh();
    up(&mut st, "l1", 1);

    // A request: an event to carry out, whose answer goes out routed on
    // the control lane and the frame's strand, encoded.
    let resolve = WireFrame::Resolve {
        request: 4,
        type_id: 9,
        type_name: "t".into(),
        name: "pong".into(),
    };
    st.handle_packet(now, from, resolve.encode());
    let Some(SessionEvent::Resolve { request: 4, .. }) = st.poll_event() else {
        panic!("RESOLVE raises Resolve");
    };
    st.answer_resolve(4, Resolution::NoSuchName);
    let (route, bytes) = st.poll_transmit().expect("the answer");
    let answer = WireFrame::Resolved {
        request: 4,
        resolution: Resolution::NoSuchName,
    };
    assert_eq!(route.carrier, Carrier::Lane(Lane::Control));
    assert_eq!(route.strand, strand_of(&answer));
    assert_eq!(WireFrame::decode(bytes).expect("decodes"), answer);

    // A message is handed back whole for delivery.
    let message = WireFrame::Message {
        to: 3,
        type_id: 9,
        receipt: 0,
        payload: Bytes::from_static(b"hi"),
    };
    st.handle_packet(now, from, message.encode());
    assert!(matches!(st.poll_event(), Some(SessionEvent::Message(m)) if m == message));

    // Ending frames and undecodable bytes close the link, typed.
    let goodbye = WireFrame::Goodbye {
        code: GoodbyeCode::Shutdown,
    };
    st.handle_packet(now, from, goodbye.encode());
    assert!(matches!(
        st.poll_event(),
        Some(SessionEvent::Closed(CloseCause::Goodbye(
            GoodbyeCode::Shutdown
        )))
    ));
    st.handle_packet(now, from, Bytes::from_static(&[0xff, 0, 1]));
    assert!(matches!(
        st.poll_event(),
        Some(SessionEvent::Closed(CloseCause::Protocol(
            ProtocolError::Malformed(_)
        )))
    ));
    assert!(st.poll_event().is_none() && st.poll_transmit().is_none());
}
