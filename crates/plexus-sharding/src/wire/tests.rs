use super::*;
use crate::allocation::Placement;
use crate::lease::Stamp;
use proptest::prelude::*;

fn shard() -> impl Strategy<Value = ShardId> {
    any::<u32>().prop_map(ShardId)
}

fn handoff() -> impl Strategy<Value = HandOffId> {
    any::<u64>().prop_map(HandOffId)
}

fn name() -> impl Strategy<Value = Arc<str>> {
    "[a-z0-9:/.]{0,40}".prop_map(Arc::from)
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        shard().prop_map(Body::AskHome),
        (shard(), name()).prop_map(|(shard, home)| Body::Home { shard, home }),
        (shard(), handoff(), name()).prop_map(|(shard, handoff, from)| Body::BeginHandOff {
            shard,
            handoff,
            from
        }),
        (shard(), handoff()).prop_map(|(s, h)| Body::HandOffAck(s, h)),
        (shard(), handoff(), proptest::collection::vec(name(), 0..8)).prop_map(
            |(shard, handoff, regions)| Body::HandOff {
                shard,
                handoff,
                regions
            }
        ),
        (shard(), handoff()).prop_map(|(s, h)| Body::ShardStopped(s, h)),
        (
            any::<u64>(),
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec(shard(), 0..20)
        )
            .prop_map(|(seq, leased, oldest, hosted)| Body::Renew {
                seq,
                leased,
                placement: if oldest {
                    Placement::Oldest
                } else {
                    Placement::Spread
                },
                hosted,
                echo: Stamp {
                    epoch: (seq >> 32) as u32,
                    nanos: seq.rotate_left(7),
                },
            }),
        (any::<u64>(), proptest::collection::vec(shard(), 0..20)).prop_map(|(seq, revoked)| {
            Body::Renewed {
                seq,
                revoked,
                stamp: Stamp {
                    epoch: seq as u32,
                    nanos: seq,
                },
            }
        }),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(seq, epoch, nanos)| {
            Body::NotRenewed {
                seq,
                stamp: Stamp { epoch, nanos },
            }
        }),
        Just(Body::Leaving),
        Just(Body::Follow),
        any::<u64>().prop_map(Body::Delivered),
        shard().prop_map(Body::NoHome),
        Just(Body::Drained),
        (any::<u64>(), prop::option::of((shard(), any::<u32>()))).prop_map(|(request, full)| {
            Body::Refused {
                request,
                error: match full {
                    None => EntityError::Unavailable,
                    Some((shard, limit)) => EntityError::Route(RouteError::HandOffBufferFull {
                        shard,
                        limit: limit as usize,
                    }),
                },
            }
        }),
    ]
}

proptest! {
    #[test]
    fn every_message_decodes_to_itself(from in name(), entity_type in name(), body in body()) {
        let message = Message { from, entity_type, body };
        prop_assert_eq!(Message::decode(&message.encode()), Ok(message));
    }

    /// Any prefix of a message is refused, never mistaken for one.
    #[test]
    fn a_cut_message_is_refused(from in name(), entity_type in name(), body in body(), cut in any::<prop::sample::Index>()) {
        let bytes = Message { from, entity_type, body }.encode();
        let at = cut.index(bytes.len());
        let decoded = Message::decode(&bytes.slice(..at));
        prop_assert!(decoded.is_err(), "{at} of {} bytes decoded", bytes.len());
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzz_decode(&data);
    }
}

#[test]
fn bad_input_gets_a_typed_error() {
    let ok = Message {
        from: "tcp://198.51.100.1:4000".into(),
        entity_type: "cart".into(),
        body: Body::ShardStopped(ShardId(1), HandOffId(9)),
    }
    .encode();
    let mut v = ok.to_vec();
    v[0] = 9;
    assert_eq!(Message::decode(&Bytes::from(v)), Err(WireError::Version(9)));
    let mut v = ok.to_vec();
    v[1] = 42;
    assert_eq!(Message::decode(&Bytes::from(v)), Err(WireError::Kind(42)));
    let mut v = ok.to_vec();
    v.push(0);
    assert_eq!(
        Message::decode(&Bytes::from(v)),
        Err(WireError::Trailing(1))
    );
    // A renewal claiming more shards than it carries (empty `from` and
    // type).
    let mut v = vec![VERSION, 6, 0, 0];
    v.extend_from_slice(&7u64.to_be_bytes());
    v.push(1);
    v.extend_from_slice(&(MAX_SHARDS as u32 + 1).to_be_bytes());
    assert!(matches!(
        Message::decode(&Bytes::from(v)),
        Err(WireError::TooMany { what: "shards", .. })
    ));
    let mut v = vec![VERSION, 6, 0, 0];
    v.extend_from_slice(&7u64.to_be_bytes());
    v.push(1);
    v.extend_from_slice(&1000u32.to_be_bytes());
    assert_eq!(Message::decode(&Bytes::from(v)), Err(WireError::Truncated));
    // A refusal with an unknown code.
    let mut v = vec![VERSION, 11, 0, 0];
    v.extend_from_slice(&7u64.to_be_bytes());
    v.push(9);
    assert_eq!(Message::decode(&Bytes::from(v)), Err(WireError::Refusal(9)));
}
