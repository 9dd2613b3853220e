//! The session's promises over any sequence of frames a peer can send
//! (issue 32): each request answered at most once (by its answer or by the
//! lost link), every answer told or counted as a stray, only messages
//! handed back for delivery, the link ended only by a frame that ends it.
//! The checks live in `plexus_remote::fuzzing::session_frames`, which the
//! `session` fuzz target runs on arbitrary bytes; here proptest builds
//! well-formed frames, so every run exercises the session, not the decoder.
//! The same for the session's incoming half (`fuzzing::incoming_bytes`,
//! fuzz target `incoming`): each arrival takes exactly its frames.

use bytes::Bytes;
use plexus_core::ExitReason;
use plexus_remote::fuzzing::session_frames;
use plexus_remote::wire::{GoodbyeCode, ReceiptStatus, RejectCode, Resolution, WireFrame};
use proptest::prelude::*;

/// Ids around the session's waiting requests (1 to 8): some answer one,
/// some nothing.
fn id() -> impl Strategy<Value = u64> {
    0u64..=10
}

fn frame() -> impl Strategy<Value = WireFrame> {
    let status = prop_oneof![
        Just(ReceiptStatus::Delivered),
        Just(ReceiptStatus::NoSuchActor),
        Just(ReceiptStatus::Stopped),
        Just(ReceiptStatus::MailboxFull),
        Just(ReceiptStatus::Undecodable),
    ];
    let answers = prop_oneof![
        (id(), status).prop_map(|(id, status)| WireFrame::Receipt { id, status }),
        (id(), any::<bool>()).prop_map(|(request, found)| WireFrame::Resolved {
            request,
            resolution: if found {
                Resolution::Found(request)
            } else {
                Resolution::NoSuchName
            },
        }),
        id().prop_map(|token| WireFrame::Down {
            token,
            reason: ExitReason::Normal,
        }),
    ];
    let requests = prop_oneof![
        id().prop_map(|request| WireFrame::Resolve {
            request,
            type_id: 1,
            type_name: "t".into(),
            name: "n".into(),
        }),
        (id(), id()).prop_map(|(target, token)| WireFrame::Monitor { target, token }),
        (id(), id()).prop_map(|(target, token)| WireFrame::Demonitor { target, token }),
        (id(), id()).prop_map(|(from, to)| WireFrame::Link { from, to }),
        (id(), id()).prop_map(|(from, to)| WireFrame::Unlink { from, to }),
        (id(), id()).prop_map(|(from, to)| WireFrame::Exit {
            from,
            to,
            reason: ExitReason::Killed,
        }),
        (id(), any::<bool>()).prop_map(|(target, kill)| WireFrame::Stop { target, kill }),
        id().prop_map(|id| WireFrame::Reply {
            id,
            payload: Bytes::from_static(b"r"),
        }),
    ];
    let messages = prop_oneof![
        (id(), id()).prop_map(|(to, receipt)| WireFrame::Message {
            to,
            type_id: 1,
            receipt,
            payload: Bytes::from_static(b"m"),
        }),
        id().prop_map(|receipt| WireFrame::Named {
            name: "n".into(),
            type_id: 1,
            receipt,
            payload: Bytes::new(),
        }),
    ];
    let endings = prop_oneof![
        Just(WireFrame::Goodbye {
            code: GoodbyeCode::Shutdown
        }),
        Just(WireFrame::Goodbye {
            code: GoodbyeCode::Duplicate
        }),
        Just(WireFrame::Auth { proof: [7; 32] }),
        Just(WireFrame::Reject {
            code: RejectCode::Cookie,
            detail: "late".into(),
        }),
    ];
    prop_oneof![8 => answers, 8 => requests, 3 => messages, 1 => endings]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_session_keeps_its_promises_over_any_frames(
        frames in proptest::collection::vec(frame(), 0..64)
    ) {
        // Through the wire encoding and back, as from a peer.
        let decoded: Vec<WireFrame> = frames
            .iter()
            .map(|f| WireFrame::decode(f.encode()).expect("a well-formed frame decodes"))
            .collect();
        session_frames(decoded);
    }

    /// The incoming half over the same frames, encoded and queued on one
    /// link (runs of messages among them), as the reader meets them.
    #[test]
    fn the_incoming_half_takes_exactly_each_arrivals_frames(
        frames in proptest::collection::vec(frame(), 0..64)
    ) {
        let mut data = Vec::new();
        for f in &frames {
            let encoded = f.encode();
            // 0xff splits frames; a frame holding one is left out.
            if !encoded.contains(&0xff) {
                data.extend_from_slice(&encoded);
                data.push(0xff);
            }
        }
        plexus_remote::fuzzing::incoming_bytes(&data);
    }
}

/// Arbitrary bytes, as the fuzz target feeds them (a few fixed inputs:
/// the target itself runs in CI's short fuzz pass).
#[test]
fn arbitrary_bytes_are_refused_or_handled_without_panic() {
    for data in [
        &b""[..],
        &[0xff; 16],
        &[0, 1, 2, 3, 0xff, 9, 9, 9],
        &[1; 64],
    ] {
        plexus_remote::fuzzing::session_bytes(data);
        plexus_remote::fuzzing::incoming_bytes(data);
    }
}
