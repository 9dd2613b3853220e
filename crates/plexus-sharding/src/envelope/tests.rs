use super::*;
use proptest::prelude::*;

fn header() -> impl Strategy<Value = Header> {
    prop_oneof![
        (
            "[a-z0-9-]{1,40}",
            prop::option::of(("[a-z0-9:/.]{0,40}", any::<u64>(), any::<bool>()))
        )
            .prop_map(|(id, origin)| Header::Entity {
                id: EntityId::new(&id).unwrap(),
                origin: origin.map(|(node, request, confirm)| Origin {
                    node: node.into(),
                    request,
                    confirm,
                }),
            }),
        ("[a-z0-9:/.]{0,40}", any::<u32>(), any::<u64>()).prop_map(|(from, shard, h)| {
            Header::Marker {
                from: from.into(),
                shard: ShardId(shard),
                handoff: HandOffId(h),
            }
        }),
    ]
}

proptest! {
    #[test]
    fn a_header_decodes_to_itself_with_its_payload(h in header(), payload in proptest::collection::vec(any::<u8>(), 0..32)) {
        let mut b = BytesMut::new();
        h.encode(&mut b);
        let marker = matches!(h, Header::Marker { .. });
        if !marker {
            b.extend_from_slice(&payload);
        }
        let (back, rest) = Header::decode(&b.freeze()).unwrap();
        prop_assert_eq!(back, h);
        prop_assert_eq!(&rest[..], if marker { &[][..] } else { &payload[..] });
    }

    /// A header cut short is refused, never mistaken for one.
    #[test]
    fn a_cut_header_is_refused(h in header(), cut in any::<prop::sample::Index>()) {
        let bytes = h.to_bytes();
        let at = cut.index(bytes.len());
        prop_assert!(Header::decode(&bytes.slice(..at)).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzz_decode(&data);
    }
}

#[test]
fn bad_headers_get_typed_errors() {
    let empty_id = Bytes::from_static(&[VERSION, 0, 0, 0, 0]);
    assert!(matches!(Header::decode(&empty_id), Err(WireError::Id(_))));
    let bad_kind = Bytes::from_static(&[VERSION, 7]);
    assert_eq!(Header::decode(&bad_kind), Err(WireError::Kind(7)));
    let marker_and_more =
        Bytes::from_static(&[VERSION, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 9]);
    assert_eq!(
        Header::decode(&marker_and_more),
        Err(WireError::Trailing(1))
    );
}
