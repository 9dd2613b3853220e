//! Harnesses for the fuzz targets (`crates/plexus-remote/fuzz`) and the
//! property tests: not API, no stability promised.
//!
//! [`session_frames`] runs a peer's session, up and waiting on requests of
//! every kind, through any sequence of frames a peer could send, with the
//! shell's side played by plain values, and checks what the session
//! promises whatever arrives: no panic; each request this node made is
//! answered at most once, by its answer or by the loss of the link; every
//! answer frame is either told to its waiter or counted as a stray; only
//! messages come back for delivery, unchanged; the link ends only on a
//! frame that ends it (`GOODBYE`, a late handshake frame).
//!
//! [`incoming_bytes`] runs the session's incoming half on one link over
//! any bytes a peer could send, as frames queued behind each other, and
//! checks: no panic; each arrival takes the frame read and, for a run,
//! exactly the frames of the run after it (2 to `RUN_MAX` messages to one
//! actor under one type without receipts), leaving the rest queued in
//! order; a message kind never goes to the session as a control frame; a
//! frame is refused only if it does not decode (or is a `TRACE` carrying
//! no message).

use std::collections::{HashSet, VecDeque};

use bytes::Bytes;
use plexus_core::{ActorId, ExitReason, NodeId};
use plexus_transport::Received;

use crate::close::CloseCause;
use crate::peer::session::incoming::{Arrival, Incoming, RUN_MAX};
use crate::peer::session::{Attached, Backoff, Handles, Session, SessionEvent};
use crate::wire::{MessageHeader, Resolution, WireFrame};
use plexus_net::protocol::Protocol as _;

/// Plain values for the session's handles: requests and watchers are
/// numbered by their id.
struct Plain;

impl Handles for Plain {
    type Sender = u64;
    type Held = u64;
    type Waiter = u64;
    type Resolve = u64;
    type Receipt = u64;
    type Watcher = u64;
    type Local = u64;
}

/// Requests of each kind waiting when the frames start (ids 1 to this).
const WAITING: u64 = 8;

/// What a request was answered by.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Request {
    Receipt(u64),
    Resolve(u64),
    Watch(u64),
}

/// Splits `data` at `0xff` bytes, decodes each piece as a frame (pieces
/// that do not decode are skipped, as the shell's decode would close the
/// link with a typed error before the session sees them) and runs
/// [`session_frames`] on them.
pub fn session_bytes(data: &[u8]) {
    let frames = data
        .split(|b| *b == 0xff)
        .filter_map(|piece| WireFrame::decode(Bytes::copy_from_slice(piece)).ok());
    session_frames(frames);
}

/// Splits `data` at `0xff` bytes into frames queued on one link and sorts
/// them all with the session's incoming half, checking its promises (see
/// the module docs); panics if one is broken.
pub fn incoming_bytes(data: &[u8]) {
    let mut queue: VecDeque<Received> = data
        .split(|b| *b == 0xff)
        .map(|piece| Received::Message(Bytes::copy_from_slice(piece)))
        .collect();
    let mut incoming = Incoming::default();
    while let Some(Received::Message(first)) = queue.pop_front() {
        let header = MessageHeader::parse(&first).and_then(Result::ok);
        let left = queue.len();
        let arrival = match incoming.arrive(first.clone(), &mut queue) {
            Ok(arrival) => arrival,
            Err(_) => {
                let decoded = WireFrame::decode(first);
                assert!(
                    decoded.is_err() || matches!(decoded, Ok(WireFrame::Traced { .. })),
                    "a well-formed frame refused"
                );
                continue;
            }
        };
        match arrival {
            Arrival::Run {
                to,
                type_id,
                payloads,
            } => {
                let header = header.expect("a run starts with a message");
                assert_eq!(
                    (header.to, header.type_id, header.receipt),
                    (to, type_id, 0)
                );
                assert!((2..=RUN_MAX).contains(&payloads.len()), "a run's length");
                assert_eq!(
                    left - queue.len(),
                    payloads.len() - 1,
                    "a run takes its frames"
                );
                payloads.clear();
            }
            Arrival::Control(frame) => {
                assert_eq!(queue.len(), left, "a control frame takes only itself");
                assert!(
                    !matches!(
                        frame,
                        WireFrame::Message { .. }
                            | WireFrame::Named { .. }
                            | WireFrame::Traced { .. }
                            | WireFrame::Sequenced { .. }
                    ),
                    "a message kind went to the session"
                );
            }
            Arrival::Message { .. } | Arrival::Named { .. } | Arrival::Sequenced { .. } => {
                assert_eq!(queue.len(), left, "a lone frame takes only itself");
            }
        }
    }
}

/// Runs a session through `frames` and checks its promises (see the module
/// docs); panics if one is broken.
pub fn session_frames(frames: impl IntoIterator<Item = WireFrame>) {
    let (here, remote) = (NodeId::from_u64(1), NodeId::from_u64(2));
    let backoff = Backoff {
        min: std::time::Duration::from_millis(100),
        max: std::time::Duration::from_secs(5),
    };
    let mut session = Session::<Plain>::new(here, backoff);
    let mut link = 0;
    let mut epoch = up(&mut session, &mut link, remote);
    for id in 1..=WAITING {
        session.expect_receipt(id, id);
        session.expect_resolved(id, id);
        session
            .watch(id, ActorId::new(remote, id), id)
            .unwrap_or_else(|_| panic!("a watch while up is accepted"));
        session.monitored(id, id, Some(id));
        session.linked(ActorId::new(here, id), id, ActorId::new(remote, id));
    }
    let mut answered: HashSet<Request> = HashSet::new();
    let mut once = |request: Request| {
        assert!(answered.insert(request), "a request answered twice");
    };
    let (mut answers, mut told) = (0u64, 0u64);
    for frame in frames {
        let is_answer = matches!(
            frame,
            WireFrame::Receipt { .. } | WireFrame::Resolved { .. } | WireFrame::Down { .. }
        );
        let is_message = matches!(
            frame,
            WireFrame::Message { .. }
                | WireFrame::Named { .. }
                | WireFrame::Traced { .. }
                | WireFrame::Sequenced { .. }
        );
        let ends = matches!(
            frame,
            WireFrame::Goodbye { .. }
                | WireFrame::Hello(_)
                | WireFrame::Auth { .. }
                | WireFrame::Reject { .. }
                | WireFrame::Bind { .. }
                | WireFrame::Lanes { .. }
        );
        answers += u64::from(is_answer);
        match session.handle_frame(here, remote, frame.clone()) {
            Ok(Some(back)) => {
                assert!(is_message, "only messages come back");
                assert_eq!(back, frame, "a message comes back unchanged");
            }
            Ok(None) => assert!(!is_message && !ends, "a message or an ending frame kept"),
            Err(_) => {
                assert!(ends, "the link ended on a frame that does not end it");
                let lost = session
                    .link_lost(
                        epoch,
                        &CloseCause::Goodbye(crate::wire::GoodbyeCode::Shutdown),
                    )
                    .expect("the link that ended was up");
                lost.receipts
                    .into_keys()
                    .for_each(|id| once(Request::Receipt(id)));
                lost.resolves
                    .into_keys()
                    .for_each(|id| once(Request::Resolve(id)));
                lost.watchers
                    .into_keys()
                    .for_each(|id| once(Request::Watch(id)));
                epoch = up(&mut session, &mut link, remote);
            }
        }
        while let Some(event) = session.poll_event() {
            match event {
                SessionEvent::Receipt { waiter, .. } => {
                    told += 1;
                    once(Request::Receipt(waiter));
                }
                SessionEvent::Resolved { waiter, .. } => {
                    told += 1;
                    once(Request::Resolve(waiter));
                }
                SessionEvent::Down { watcher, .. } => {
                    told += 1;
                    once(Request::Watch(watcher));
                }
                // The shell's answers, as a node without those actors.
                SessionEvent::Resolve { request, .. } => {
                    session.answer_resolve(request, Resolution::NoSuchName);
                }
                SessionEvent::Monitor { token, .. } => {
                    session.refuse_monitor(token, ExitReason::Stopped);
                }
                SessionEvent::Link { remote, local } => {
                    session.refuse_link(remote, local, ExitReason::Stopped);
                }
                SessionEvent::Message(_) | SessionEvent::Closed(_) | SessionEvent::GaveUp(_) => {
                    panic!("handle_frame raised an event of handle_packet or a timeout")
                }
                SessionEvent::Reply { .. }
                | SessionEvent::Unwatch { .. }
                | SessionEvent::Unlink { .. }
                | SessionEvent::Exit { .. }
                | SessionEvent::Stop { .. } => {}
            }
        }
        while let Some(reply) = session.poll_reply() {
            assert!(
                matches!(
                    reply,
                    WireFrame::Resolved { .. } | WireFrame::Down { .. } | WireFrame::Exit { .. }
                ),
                "the session replies with RESOLVED, DOWN or EXIT only"
            );
        }
    }
    assert_eq!(
        told + session.stray_answers(),
        answers,
        "every answer told or counted as a stray"
    );
}

/// A new link up (dialled by this node, so it is kept); its epoch.
fn up(session: &mut Session<Plain>, link: &mut u64, remote: NodeId) -> u64 {
    *link += 1;
    match session.attach(*link, remote, NodeId::from_u64(1)) {
        Attached::Up { epoch, .. } => epoch,
        Attached::Duplicate { .. } => panic!("the only link is refused"),
    }
}
