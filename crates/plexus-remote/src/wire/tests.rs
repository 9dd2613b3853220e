use super::*;
use proptest::prelude::*;

fn id(n: u64, s: u64) -> ActorId {
    ActorId::new(NodeId::from_u64(n), s)
}

fn samples() -> Vec<WireFrame> {
    vec![
        WireFrame::Hello(Hello {
            version: PROTOCOL_VERSION,
            node: NodeId::from_u64(0xdead_beef),
            nonce: [7; 16],
            capabilities: capabilities::ALL,
            listen: vec!["tcp://127.0.0.1:4000".into(), "udp://127.0.0.1:4001".into()],
        }),
        WireFrame::Auth { proof: [9; 32] },
        WireFrame::Reject {
            code: RejectCode::Cookie,
            detail: "cluster cookie mismatch".into(),
        },
        WireFrame::Message {
            to: 300,
            type_id: u64::MAX,
            receipt: 0,
            payload: Bytes::from_static(b"hello"),
        },
        WireFrame::Named {
            name: "pong".into(),
            type_id: 3,
            receipt: 9,
            payload: Bytes::from_static(b"x"),
        },
        WireFrame::Receipt {
            id: 5,
            status: ReceiptStatus::NoSuchActor,
        },
        WireFrame::Reply {
            id: 1 << 40,
            payload: Bytes::new(),
        },
        WireFrame::Resolve {
            request: 1,
            type_id: 42,
            type_name: "bench.Ping".into(),
            name: "pong".into(),
        },
        WireFrame::Resolved {
            request: 1,
            resolution: Resolution::WrongType {
                actual: "bench.Other".into(),
            },
        },
        WireFrame::Resolved {
            request: 2,
            resolution: Resolution::Found(17),
        },
        WireFrame::Monitor {
            target: 1,
            token: 2,
        },
        WireFrame::Demonitor {
            target: 1,
            token: 2,
        },
        WireFrame::Down {
            token: 2,
            reason: ExitReason::Linked {
                from: id(3, 4),
                reason: Box::new(ExitReason::Panicked("boom".into())),
            },
        },
        WireFrame::Link { from: 1, to: 2 },
        WireFrame::Unlink { from: 1, to: 2 },
        WireFrame::Exit {
            from: 1,
            to: 2,
            reason: ExitReason::NodeDown {
                node: NodeId::from_u64(9),
                cause: "link closed".into(),
            },
        },
        WireFrame::Stop {
            target: 8,
            kill: true,
        },
        WireFrame::Goodbye {
            code: GoodbyeCode::Shutdown,
        },
        WireFrame::Traced {
            context: trace(),
            frame: WireFrame::Message {
                to: 7,
                type_id: 0xfeed,
                receipt: 0,
                payload: Bytes::from_static(b"hello"),
            }
            .encode(),
        },
        WireFrame::Traced {
            context: trace(),
            frame: WireFrame::Named {
                name: "pong".into(),
                type_id: 0xfeed,
                receipt: 3,
                payload: Bytes::from_static(b"hi"),
            }
            .encode(),
        },
    ]
}

fn trace() -> TraceContext {
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        .parse()
        .expect("a valid traceparent")
}

#[test]
fn a_trace_frame_carries_only_a_valid_context_around_a_message() {
    let around = |frame: WireFrame| {
        let mut b = BytesMut::new();
        put_trace_header(&mut b, &trace());
        frame.encode_into(&mut b);
        b.freeze()
    };
    // Only MESSAGE and NAMED frames travel with a context.
    assert_eq!(
        WireFrame::decode(around(WireFrame::Reply {
            id: 1,
            payload: Bytes::new()
        })),
        Err(WireError::Invalid {
            field: "traced frame kind",
            value: kind::REPLY.into()
        })
    );
    let traced = around(WireFrame::Message {
        to: 1,
        type_id: 2,
        receipt: 0,
        payload: Bytes::new(),
    });
    assert_eq!(
        WireFrame::decode(around(WireFrame::decode(traced.clone()).unwrap())),
        Err(WireError::Invalid {
            field: "traced frame kind",
            value: kind::TRACE.into()
        })
    );
    // W3C's invalid contexts: all-zero ids; and versions other than 00.
    let mut zero_trace = traced.to_vec();
    zero_trace[2..18].fill(0);
    let mut zero_span = traced.to_vec();
    zero_span[18..26].fill(0);
    for bad in [zero_trace, zero_span] {
        assert!(matches!(
            WireFrame::decode(Bytes::from(bad)),
            Err(WireError::Invalid { .. })
        ));
    }
    let mut version = traced.to_vec();
    version[1] = 1;
    assert_eq!(
        WireFrame::decode(Bytes::from(version)),
        Err(WireError::Invalid {
            field: "trace context version",
            value: 1
        })
    );
    assert_eq!(traced.len(), TRACE_HEADER_LEN + 1 + 1 + 8 + 1);
}

#[test]
fn every_frame_kind_round_trips() {
    for f in samples() {
        assert_eq!(WireFrame::decode(f.encode()), Ok(f.clone()), "{f:?}");
    }
}

#[test]
fn every_truncation_is_a_typed_error() {
    for f in samples() {
        let bytes = f.encode();
        for cut in 0..bytes.len() {
            let r = WireFrame::decode(bytes.slice(..cut));
            // Frames ending in a payload decode at every cut past their
            // header; all others must fail.
            if let Ok(g) = &r {
                assert!(
                    matches!(
                        g,
                        WireFrame::Message { .. }
                            | WireFrame::Reply { .. }
                            | WireFrame::Named { .. }
                            | WireFrame::Traced { .. }
                    ),
                    "{f:?} cut at {cut} decoded as {g:?}"
                );
            }
        }
    }
}

#[test]
fn payload_is_a_slice_of_the_input() {
    let frame = WireFrame::Message {
        to: 1,
        type_id: 2,
        receipt: 0,
        payload: Bytes::from(vec![1u8; 1000]),
    }
    .encode();
    let base = frame.as_ptr() as usize;
    match WireFrame::decode(frame.clone()) {
        Ok(WireFrame::Message { payload, .. }) => {
            let p = payload.as_ptr() as usize;
            assert!(p > base && p < base + frame.len());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn oversized_strings_and_lists_are_refused_before_allocation() {
    let mut b = BytesMut::new();
    b.put_u8(kind::RESOLVE);
    put_varint(&mut b, 1);
    b.put_u64_le(2);
    put_varint(&mut b, u64::MAX / 2);
    assert!(matches!(
        WireFrame::decode(b.freeze()),
        Err(WireError::TooLong { .. })
    ));
    let mut b = BytesMut::new();
    b.put_u8(kind::HELLO);
    b.put_slice(&MAGIC);
    b.put_u16_le(1);
    b.put_u64_le(1);
    b.put_slice(&[0; 16]);
    b.put_u64_le(0);
    put_varint(&mut b, 1_000_000);
    assert!(matches!(
        WireFrame::decode(b.freeze()),
        Err(WireError::TooLong {
            field: "listen addresses",
            ..
        })
    ));
}

#[test]
fn deeply_nested_exit_reasons_are_refused_and_never_encoded() {
    let mut reason = ExitReason::Killed;
    for i in 0..100 {
        reason = ExitReason::Linked {
            from: id(1, i),
            reason: Box::new(reason),
        };
    }
    // Encoding cuts the chain; the result decodes within the bound.
    let f = WireFrame::Down { token: 1, reason };
    assert!(WireFrame::decode(f.encode()).is_ok());
    // A hand-made frame nesting past the bound is refused.
    let mut b = BytesMut::new();
    b.put_u8(kind::DOWN);
    put_varint(&mut b, 1);
    for _ in 0..MAX_REASON_DEPTH + 1 {
        b.put_u8(reason_kind::LINKED);
        b.put_u64_le(1);
        put_varint(&mut b, 1);
    }
    b.put_u8(reason_kind::KILLED);
    assert!(matches!(
        WireFrame::decode(b.freeze()),
        Err(WireError::TooLong {
            field: "exit reason nesting",
            ..
        })
    ));
}

#[test]
fn malformed_varints_bad_magic_and_trailing_bytes_are_refused() {
    let mut b = BytesMut::new();
    b.put_u8(kind::RECEIPT);
    b.put_slice(&[0xff; 11]);
    assert!(matches!(
        WireFrame::decode(b.freeze()),
        Err(WireError::BadVarint { .. })
    ));
    let mut hello = samples()[0].encode().to_vec();
    hello[1] = b'X';
    assert!(matches!(
        WireFrame::decode(Bytes::from(hello)),
        Err(WireError::Invalid { field: "magic", .. })
    ));
    let mut auth = WireFrame::Auth { proof: [0; 32] }.encode().to_vec();
    auth.push(0);
    assert_eq!(
        WireFrame::decode(Bytes::from(auth)),
        Err(WireError::Trailing(1))
    );
    assert_eq!(
        WireFrame::decode(Bytes::from_static(&[0xee])),
        Err(WireError::UnknownKind(0xee))
    );
    assert!(WireFrame::decode(Bytes::new()).is_err());
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = WireFrame::decode(Bytes::from(data));
    }

    #[test]
    fn messages_round_trip(to in any::<u64>(), type_id in any::<u64>(), receipt in any::<u64>(),
                           payload in proptest::collection::vec(any::<u8>(), 0..512)) {
        let f = WireFrame::Message { to, type_id, receipt, payload: Bytes::from(payload) };
        prop_assert_eq!(WireFrame::decode(f.encode()), Ok(f));
    }

    #[test]
    fn varints_round_trip(v in any::<u64>()) {
        let mut b = BytesMut::new();
        put_varint(&mut b, v);
        let mut r = Reader { b: b.freeze() };
        prop_assert_eq!(r.varint("v"), Ok(v));
    }
}

#[test]
fn the_message_fast_path_reads_what_decode_reads() {
    for (to, type_id, receipt) in [(1, 7, 0), (300, u64::MAX, 1 << 40), (u64::MAX, 0, u64::MAX)] {
        let mut b = BytesMut::new();
        put_message_header(&mut b, to, type_id, receipt);
        let header_len = b.len();
        b.extend_from_slice(b"payload");
        let frame = b.freeze();
        let h = MessageHeader::parse(&frame)
            .expect("a MESSAGE frame")
            .expect("valid");
        assert_eq!(
            (h.to, h.type_id, h.receipt, h.len),
            (to, type_id, receipt, header_len)
        );
        match WireFrame::decode(frame.clone()).expect("valid") {
            WireFrame::Message { payload, .. } => assert_eq!(&payload[..], b"payload"),
            f => panic!("decoded {f:?}"),
        }
        // Every truncation of the header is an error, never a panic.
        for cut in 0..header_len {
            if cut == 0 {
                assert!(MessageHeader::parse(&frame[..0]).is_none());
            } else {
                assert!(MessageHeader::parse(&frame[..cut])
                    .expect("MESSAGE")
                    .is_err());
            }
        }
    }
    assert!(MessageHeader::parse(
        &WireFrame::Goodbye {
            code: GoodbyeCode::Duplicate
        }
        .encode()
    )
    .is_none());
}
