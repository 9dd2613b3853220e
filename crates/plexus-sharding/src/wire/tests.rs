use super::*;
use proptest::prelude::*;

fn shard() -> impl Strategy<Value = ShardId> {
    any::<u32>().prop_map(ShardId)
}

fn name() -> impl Strategy<Value = Arc<str>> {
    "[a-z0-9:/.]{0,40}".prop_map(Arc::from)
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        shard().prop_map(Body::AskHome),
        (shard(), name()).prop_map(|(shard, home)| Body::Home { shard, home }),
        shard().prop_map(Body::BeginHandOff),
        shard().prop_map(Body::HandOffAck),
        (shard(), proptest::collection::vec(name(), 0..8))
            .prop_map(|(shard, regions)| Body::HandOff { shard, regions }),
        shard().prop_map(Body::Marker),
        shard().prop_map(Body::ShardStopped),
        any::<u64>().prop_map(Body::Renew),
        any::<u64>().prop_map(Body::Renewed),
        proptest::collection::vec(shard(), 0..20).prop_map(Body::Hosted),
        (
            "[a-z0-9-]{1,40}",
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(id, p)| {
                Body::Envelope {
                    id: EntityId::new(&id).unwrap(),
                    payload: Bytes::from(p),
                }
            }),
    ]
}

proptest! {
    #[test]
    fn every_message_decodes_to_itself(entity_type in name(), body in body()) {
        let message = Message { entity_type, body };
        prop_assert_eq!(Message::decode(&message.encode()), Ok(message));
    }

    /// Any prefix of a message is refused, never mistaken for one (an
    /// envelope's payload is the rest, so only its header is checked).
    #[test]
    fn a_cut_message_is_refused(entity_type in name(), body in body(), cut in any::<prop::sample::Index>()) {
        let envelope = matches!(body, Body::Envelope { .. });
        let bytes = Message { entity_type, body }.encode();
        let at = cut.index(bytes.len());
        let decoded = Message::decode(&bytes.slice(..at));
        if !envelope {
            prop_assert!(decoded.is_err(), "{at} of {} bytes decoded", bytes.len());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzz_decode(&data);
    }
}

#[test]
fn bad_input_gets_a_typed_error() {
    let ok = Message {
        entity_type: "cart".into(),
        body: Body::Marker(ShardId(1)),
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
    // A hosted report claiming more shards than it carries.
    let mut v = vec![VERSION, 9, 0];
    v.extend_from_slice(&(MAX_SHARDS as u32 + 1).to_be_bytes());
    assert!(matches!(
        Message::decode(&Bytes::from(v)),
        Err(WireError::TooMany { what: "shards", .. })
    ));
    let mut v = vec![VERSION, 9, 0];
    v.extend_from_slice(&1000u32.to_be_bytes());
    assert_eq!(Message::decode(&Bytes::from(v)), Err(WireError::Truncated));
    // An envelope with an empty id.
    let v = vec![VERSION, 10, 0, 0, 0];
    assert_eq!(
        Message::decode(&Bytes::from(v)),
        Err(WireError::Id(EntityIdError::Empty))
    );
}
