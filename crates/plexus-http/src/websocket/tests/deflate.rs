//! permessage-deflate: negotiation, round trips, window bits, context
//! takeover, hostile input.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use flate2::{Compress, Compression, FlushCompress};
use proptest::prelude::*;

use super::{closed_with, events};
use crate::decoder::{Decoded, RequestDecoder};
use crate::message::Request;
use crate::websocket::deflate::{Codec, InflateError};
use crate::websocket::frame::{put_frame, put_frame_rsv1, Opcode};
use crate::websocket::handshake::{
    check_server_response, client_request, server_response, ClientOffer, ExtensionError,
    Extensions, HandshakeError,
};
use crate::websocket::{
    CloseCode, DeflateConfig, DeflateParams, Role, WebSocket, WsConfig, WsEvent, WsMessage,
};

fn with_deflate(deflate: DeflateConfig) -> WsConfig {
    WsConfig {
        deflate: Some(deflate),
        ..WsConfig::default()
    }
}

/// A client and a server that went through the opening handshake with
/// these configs, and what they agreed on (the same for both).
fn pair(client: WsConfig, server: WsConfig) -> (WebSocket, WebSocket, Extensions) {
    let (request, offer) = client_request("h", "/", [7; 16], &client);
    let mut buf = BytesMut::from(&request[..]);
    let Ok(Some(Decoded::Request(req))) = RequestDecoder::default().decode(&mut buf) else {
        panic!("the client's request decodes");
    };
    let (response, agreed) = server_response(&req, &server).unwrap();
    let mut wire = BytesMut::new();
    crate::encode_response(&mut wire, &response, true, false).unwrap();
    let client_agreed = check_server_response(&mut wire, &offer).unwrap().unwrap();
    assert_eq!(client_agreed, agreed, "both ends agree");
    (
        WebSocket::new(Role::Client, client, 1).with_extensions(agreed),
        WebSocket::new(Role::Server, server, 0).with_extensions(agreed),
        agreed,
    )
}

/// `message` sent by `from`: what `to` made of it, and the wire bytes.
fn carry(from: &mut WebSocket, to: &mut WebSocket, message: &WsMessage) -> (Vec<WsEvent>, Bytes) {
    from.send(message).unwrap();
    let wire = from.poll_transmit().unwrap();
    (events(to, BytesMut::from(&wire[..])), wire)
}

/// An upgrade request with a `Sec-WebSocket-Extensions` line per offer.
fn upgrade_with(offers: &[&str]) -> Request {
    let mut text = String::from(
        "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n",
    );
    for offer in offers {
        text.push_str(&format!("Sec-WebSocket-Extensions: {offer}\r\n"));
    }
    text.push_str("\r\n");
    let mut buf = BytesMut::from(text.as_bytes());
    let Ok(Some(Decoded::Request(request))) = RequestDecoder::default().decode(&mut buf) else {
        panic!("the request decodes");
    };
    request
}

/// A server's answer to `offers`: its extensions header and what it agreed.
fn server_answer(offers: &[&str], config: WsConfig) -> (Option<String>, Extensions) {
    let (response, agreed) = server_response(&upgrade_with(offers), &config).unwrap();
    assert_eq!(response.status, 101, "offers never refuse the upgrade");
    let header = response
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-extensions"))
        .map(|(_, v)| String::from_utf8(v.to_vec()).unwrap());
    (header, agreed)
}

/// A client's check of a `101` whose extensions header is `answer`.
fn client_check(offer: &ClientOffer, answer: &str) -> Result<Option<Extensions>, HandshakeError> {
    let mut wire = BytesMut::from(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Extensions: {answer}\r\n\r\n",
            offer.accept()
        )
        .as_bytes(),
    );
    check_server_response(&mut wire, offer)
}

/// Deterministic bytes that do not compress (xorshift).
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

fn params(
    server_bits: u8,
    client_bits: u8,
    server_reset: bool,
    client_reset: bool,
) -> DeflateParams {
    DeflateParams {
        server_no_context_takeover: server_reset,
        client_no_context_takeover: client_reset,
        server_max_window_bits: server_bits,
        client_max_window_bits: client_bits,
    }
}

#[test]
fn deflate_is_neither_offered_nor_accepted_by_default() {
    let (request, _) = client_request("h", "/", [1; 16], &WsConfig::default());
    let request = String::from_utf8(request).unwrap();
    assert!(!request
        .to_ascii_lowercase()
        .contains("sec-websocket-extensions"));
    let (header, agreed) = server_answer(&["permessage-deflate"], WsConfig::default());
    assert_eq!((header, agreed), (None, Extensions::default()));
    let (_, _, agreed) = pair(WsConfig::default(), with_deflate(DeflateConfig::default()));
    assert_eq!(agreed, Extensions::default());
}

#[test]
fn a_server_answers_the_first_acceptable_offer_with_the_parameters_both_use() {
    let default = DeflateConfig::default();
    let peer_10 = DeflateConfig {
        peer_max_window_bits: 10,
        ..default
    };
    let own_10 = DeflateConfig {
        max_window_bits: 10,
        ..default
    };
    let quiet = DeflateConfig {
        no_context_takeover: true,
        peer_no_context_takeover: true,
        ..default
    };
    let cases: Vec<(Vec<&str>, DeflateConfig, &str, DeflateParams)> = vec![
        (
            vec!["permessage-deflate"],
            default,
            "permessage-deflate",
            params(15, 15, false, false),
        ),
        // What browsers offer.
        (
            vec!["permessage-deflate; client_max_window_bits"],
            default,
            "permessage-deflate",
            params(15, 15, false, false),
        ),
        (
            vec!["permessage-deflate; client_max_window_bits"],
            peer_10,
            "permessage-deflate; client_max_window_bits=10",
            params(15, 10, false, false),
        ),
        // Not offered: the client's window cannot be bounded.
        (
            vec!["permessage-deflate"],
            peer_10,
            "permessage-deflate",
            params(15, 15, false, false),
        ),
        (
            vec!["permessage-deflate; server_no_context_takeover; server_max_window_bits=9"],
            default,
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=9",
            params(9, 15, true, false),
        ),
        (
            vec!["permessage-deflate; client_no_context_takeover; client_max_window_bits=12"],
            default,
            "permessage-deflate; client_no_context_takeover; client_max_window_bits=12",
            params(15, 12, false, true),
        ),
        (
            vec!["permessage-deflate; server_max_window_bits=8"],
            default,
            "permessage-deflate; server_max_window_bits=8",
            params(8, 15, false, false),
        ),
        (
            vec!["permessage-deflate; server_max_window_bits=12"],
            own_10,
            "permessage-deflate; server_max_window_bits=10",
            params(10, 15, false, false),
        ),
        (
            vec!["permessage-deflate; client_max_window_bits"],
            quiet,
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
            params(15, 15, true, true),
        ),
        // Invalid offers are declined, and the next one is tried: a window
        // out of range, an unknown parameter, a leading zero, a value where
        // none is allowed, none where one is needed, a repeated parameter,
        // another extension, an unterminated quote; then a quoted value,
        // which is valid.
        (
            vec![
                "permessage-deflate; server_max_window_bits=7, permessage-deflate; bogus, \
                 permessage-deflate; client_max_window_bits=08, \
                 permessage-deflate; server_no_context_takeover=yes, \
                 permessage-deflate; server_max_window_bits, \
                 permessage-deflate; client_no_context_takeover; client_no_context_takeover, \
                 x-webkit-deflate-frame",
                "permessage-deflate; x=\"unterminated",
                "permessage-deflate; server_max_window_bits=\"10\"",
            ],
            default,
            "permessage-deflate; server_max_window_bits=10",
            params(10, 15, false, false),
        ),
    ];
    for (i, (offers, config, answer, want)) in cases.into_iter().enumerate() {
        let (header, agreed) = server_answer(&offers, with_deflate(config));
        assert_eq!(header.as_deref(), Some(answer), "case {i}");
        assert_eq!(agreed.deflate, Some(want), "case {i}");
    }
    // Nothing acceptable: the upgrade goes on without the extension.
    let (header, agreed) = server_answer(
        &[
            "permessage-deflate; server_max_window_bits=16",
            "foo, bar; baz=1",
        ],
        with_deflate(default),
    );
    assert_eq!((header, agreed), (None, Extensions::default()));
}

#[test]
fn a_client_fails_a_malformed_or_unrequested_answer() {
    let config = |deflate: DeflateConfig| with_deflate(deflate);
    let (_, offer) = client_request("h", "/", [1; 16], &config(DeflateConfig::default()));
    let agreed = |answer: &str| client_check(&offer, answer).unwrap().unwrap().deflate;
    assert_eq!(agreed(""), None, "declined");
    assert_eq!(
        agreed("permessage-deflate"),
        Some(params(15, 15, false, false))
    );
    assert_eq!(
        agreed("permessage-deflate; client_max_window_bits=9; server_no_context_takeover"),
        Some(params(15, 9, true, false)),
        "a server may reset its window unasked"
    );
    let unrequested = |name: &str| {
        Err(HandshakeError::Extension(ExtensionError::Unrequested(
            name.into(),
        )))
    };
    assert_eq!(client_check(&offer, "x-foo"), unrequested("x-foo"));
    assert_eq!(
        client_check(&offer, "permessage-deflate, permessage-deflate"),
        unrequested("permessage-deflate")
    );
    for bad in [
        "permessage-deflate; client_max_window_bits",
        "permessage-deflate; server_max_window_bits",
        "permessage-deflate; server_max_window_bits=16",
        "permessage-deflate; server_no_context_takeover=1",
        "permessage-deflate; mystery",
        "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
    ] {
        assert!(
            matches!(
                client_check(&offer, bad),
                Err(HandshakeError::Extension(ExtensionError::Parameter { .. }))
            ),
            "{bad}"
        );
    }
    for bad in [
        "permessage-deflate; a=\"b",
        "permessage-deflate;; ",
        "perm essage",
    ] {
        assert!(
            matches!(
                client_check(&offer, bad),
                Err(HandshakeError::Extension(ExtensionError::Malformed(_)))
            ),
            "{bad}"
        );
    }
    // Windows beyond what was offered.
    let (_, narrow) = client_request(
        "h",
        "/",
        [1; 16],
        &config(DeflateConfig {
            max_window_bits: 10,
            peer_max_window_bits: 10,
            ..DeflateConfig::default()
        }),
    );
    for bad in [
        "permessage-deflate; server_max_window_bits=12",
        "permessage-deflate; client_max_window_bits=12",
    ] {
        assert!(client_check(&narrow, bad).is_err(), "{bad}");
    }
    // An unanswered client window keeps to the offer's value.
    let narrow_agreed = client_check(&narrow, "permessage-deflate")
        .unwrap()
        .unwrap();
    assert_eq!(narrow_agreed.deflate, Some(params(15, 10, false, false)));
    // No offer, no extension.
    let (_, plain) = client_request("h", "/", [1; 16], &WsConfig::default());
    assert_eq!(
        client_check(&plain, "permessage-deflate"),
        unrequested("permessage-deflate")
    );
}

#[test]
fn messages_round_trip_compressed_with_and_without_context_takeover() {
    // Letters in no order: a message that compresses some on its own, and
    // to almost nothing when a copy of it is in the window.
    let text: String = noise(2000, 5)
        .into_iter()
        .map(|b| char::from(b'a' + b % 26))
        .collect();
    for (takeover, deflate) in [
        (true, DeflateConfig::default()),
        (
            false,
            DeflateConfig {
                no_context_takeover: true,
                peer_no_context_takeover: true,
                ..DeflateConfig::default()
            },
        ),
    ] {
        let (mut client, mut server, agreed) = pair(with_deflate(deflate), with_deflate(deflate));
        assert_eq!(
            agreed.deflate.unwrap().server_no_context_takeover,
            !takeover
        );
        let messages = [
            WsMessage::Text(text.clone()),
            WsMessage::Text(text.clone()),
            WsMessage::Binary(Bytes::new()),
            WsMessage::Text(String::new()),
            WsMessage::Binary(Bytes::from(noise(70_000, 3))),
            WsMessage::Text(text.clone()),
        ];
        let mut sizes = Vec::new();
        for message in &messages {
            let (got, wire) = carry(&mut client, &mut server, message);
            assert_eq!(got, [WsEvent::Message(message.clone())], "client to server");
            assert_eq!(wire[0] & 0x40, 0x40, "RSV1 marks a compressed message");
            sizes.push(wire.len());
            let (got, wire) = carry(&mut server, &mut client, message);
            assert_eq!(got, [WsEvent::Message(message.clone())], "server to client");
            assert_eq!(wire[0] & 0x40, 0x40);
        }
        assert!(sizes[0] < text.len() * 3 / 4, "{sizes:?}");
        if takeover {
            // The second copy refers back to the first.
            assert!(sizes[1] < sizes[0] / 10, "{sizes:?}");
        } else {
            assert_eq!(sizes[1], sizes[0], "every message starts afresh");
        }
    }
}

#[test]
fn window_bits_bound_how_far_back_a_message_refers() {
    // A block of noise twice, 1000 bytes apart: a 15-bit window sends the
    // second copy as a reference, a 9-bit one (512 bytes) cannot.
    let block = noise(1000, 9);
    let message = WsMessage::Binary(Bytes::from([&block[..], &block[..]].concat()));
    for (bits, small) in [(15, true), (10, false), (9, false), (8, false)] {
        let deflate = DeflateConfig {
            max_window_bits: bits,
            peer_max_window_bits: bits,
            ..DeflateConfig::default()
        };
        let (mut client, mut server, agreed) = pair(with_deflate(deflate), with_deflate(deflate));
        assert_eq!(agreed.deflate, Some(params(bits, bits, false, false)));
        for server_sends in [false, true] {
            let (got, wire) = if server_sends {
                carry(&mut server, &mut client, &message)
            } else {
                carry(&mut client, &mut server, &message)
            };
            assert_eq!(got, [WsEvent::Message(message.clone())], "{bits} bits");
            assert_eq!(
                wire.len() < 1500,
                small,
                "{bits} bits: {} bytes",
                wire.len()
            );
        }
    }
}

/// A bomb: one frame that inflates to `mib` MiB of zeros, sent by a
/// client. A first block of zeros, then the same block of back
/// references over and over (each refers to zeros only), a few hundred
/// bytes per MiB.
fn bomb(mib: usize) -> BytesMut {
    let mut compress = Compress::new(Compression::best(), false);
    let zeros = vec![0u8; 1 << 20];
    let block = |compress: &mut Compress| {
        let mut out = Vec::with_capacity(64 << 10);
        compress
            .compress_vec(&zeros, &mut out, FlushCompress::Sync)
            .unwrap();
        assert_eq!(compress.total_in() % (1 << 20), 0, "all of it taken");
        out
    };
    let first = block(&mut compress);
    let again = block(&mut compress);
    let mut payload = first;
    for _ in 1..mib {
        payload.extend_from_slice(&again);
    }
    payload.truncate(payload.len() - 4);
    let mut frame = BytesMut::new();
    put_frame_rsv1(
        &mut frame,
        true,
        true,
        Opcode::Binary,
        Some([1, 2, 3, 4]),
        &payload,
    );
    frame
}

#[test]
fn a_zip_bomb_is_refused_with_1009_within_the_message_bound() {
    let config = WsConfig {
        max_message: 1 << 20,
        ..with_deflate(DeflateConfig::default())
    };
    let extensions = Extensions {
        deflate: Some(DeflateParams::default()),
    };
    // 1 GiB inflated, about 1 MB on the wire.
    let wire = bomb(1024);
    assert!(wire.len() < 4 << 20, "{}", wire.len());
    let mut server = WebSocket::new(Role::Server, config, 0).with_extensions(extensions);
    let mut buf = wire.clone();
    let event = server.handle_receive(Instant::now(), &mut buf);
    assert!(
        matches!(
            event,
            Some(WsEvent::Closed {
                code: Some(CloseCode::MESSAGE_TOO_BIG),
                by_us: true,
                ..
            })
        ),
        "{event:?}"
    );
    assert_eq!(
        &server.poll_transmit().unwrap()[2..4],
        &1009u16.to_be_bytes()
    );

    // The decompressor itself: the inflated bytes never take more than the
    // bound plus one byte, however much the input holds.
    let mut codec = Codec::new(Role::Server, &DeflateParams::default(), 6);
    let mut out = Vec::new();
    let payload = &wire[14..];
    let mut at = 0;
    let result = loop {
        let chunk = &payload[at..(at + 4096).min(payload.len())];
        at += chunk.len();
        let mut unmasked = chunk.to_vec();
        crate::websocket::frame::apply_mask(&mut unmasked, [1, 2, 3, 4], at - chunk.len());
        match codec.decompress(&unmasked, at == payload.len(), &mut out, 1 << 20) {
            Ok(()) if at < payload.len() => {}
            other => break other,
        }
    };
    assert_eq!(result, Err(InflateError::TooBig));
    assert!(out.capacity() <= (1 << 20) + 1, "{}", out.capacity());
    assert!(at < payload.len() / 100, "refused near its start: {at}");
}

#[test]
fn rsv1_misuse_closes_with_1002() {
    let deflate = Extensions {
        deflate: Some(DeflateParams::default()),
    };
    let frame = |fin: bool, rsv: u8, opcode: u8, payload: &[u8]| {
        let mut b = BytesMut::new();
        put_frame(&mut b, fin, Opcode::Binary, Some([0; 4]), payload);
        b[0] = u8::from(fin) << 7 | rsv | opcode;
        b
    };
    let cases: Vec<(bool, BytesMut)> = vec![
        // RSV1 without the extension.
        (false, frame(true, 0x40, 0x1, &[0x00])),
        // RSV1 on a control frame, on a continuation; RSV2 and RSV3.
        (true, frame(true, 0x40, 0x9, b"p")),
        (true, {
            let mut b = frame(false, 0x00, 0x2, b"a");
            b.extend_from_slice(&frame(true, 0x40, 0x0, b"b"));
            b
        }),
        (true, frame(true, 0x20, 0x2, b"x")),
        (true, frame(true, 0x10, 0x2, b"x")),
    ];
    for (i, (negotiated, input)) in cases.into_iter().enumerate() {
        let mut server = WebSocket::new(Role::Server, WsConfig::default(), 0);
        if negotiated {
            server = server.with_extensions(deflate);
        }
        assert_eq!(
            closed_with(&events(&mut server, input)),
            Some(1002),
            "case {i}"
        );
    }
}

#[test]
fn bad_compressed_data_closes_with_1007() {
    let deflate = Extensions {
        deflate: Some(DeflateParams::default()),
    };
    let mut client = Codec::new(Role::Client, &DeflateParams::default(), 6);
    let cases = [
        // A block of the reserved type 3.
        vec![0xFF, 0xFF, 0xFF],
        // A back reference before the start of the stream (a fixed block:
        // length 3 at distance 1, nothing written yet).
        vec![0x02, 0x02, 0x00],
        // A stored block whose length and its complement disagree.
        vec![0x00, 0x01, 0x00, 0x00, 0x00],
        // Text that inflates to invalid UTF-8.
        client.compress(&[b'o', b'k', 0xC0, 0xAF]).unwrap(),
    ];
    for (i, payload) in cases.into_iter().enumerate() {
        let mut server =
            WebSocket::new(Role::Server, WsConfig::default(), 0).with_extensions(deflate);
        let mut input = BytesMut::new();
        put_frame_rsv1(&mut input, true, true, Opcode::Text, Some([5; 4]), &payload);
        assert_eq!(
            closed_with(&events(&mut server, input)),
            Some(1007),
            "case {i}"
        );
    }
}

#[test]
fn fragmented_final_block_and_plain_messages_inflate() {
    let deflate = Extensions {
        deflate: Some(DeflateParams::default()),
    };
    let mut server = WebSocket::new(Role::Server, WsConfig::default(), 0).with_extensions(deflate);
    let mut client = Codec::new(Role::Client, &DeflateParams::default(), 6);
    let text = "fragmented ".repeat(100);
    let payload = client.compress(text.as_bytes()).unwrap();
    // Fragments: RSV1 on the first only, an empty one among them.
    let mut input = BytesMut::new();
    let (a, rest) = payload.split_at(payload.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);
    put_frame_rsv1(&mut input, false, true, Opcode::Text, Some([1; 4]), a);
    put_frame(&mut input, false, Opcode::Continuation, Some([2; 4]), b);
    put_frame(&mut input, false, Opcode::Continuation, Some([3; 4]), &[]);
    put_frame(&mut input, true, Opcode::Continuation, Some([4; 4]), c);
    // A message whose stream ends (BFINAL), then one from a new stream.
    let mut finished = Compress::new(Compression::default(), false);
    let mut last = Vec::with_capacity(256);
    finished
        .compress_vec(b"the end", &mut last, FlushCompress::Finish)
        .unwrap();
    put_frame_rsv1(&mut input, true, true, Opcode::Binary, Some([5; 4]), &last);
    let mut fresh = Codec::new(Role::Client, &DeflateParams::default(), 6);
    let again = fresh.compress(b"a new stream").unwrap();
    put_frame_rsv1(&mut input, true, true, Opcode::Binary, Some([6; 4]), &again);
    // An uncompressed message (RSV1 clear) is taken as it is.
    put_frame(&mut input, true, Opcode::Text, Some([7; 4]), b"plain");
    assert_eq!(
        events(&mut server, input),
        [
            WsEvent::Message(WsMessage::Text(text)),
            WsEvent::Message(WsMessage::Binary(Bytes::from_static(b"the end"))),
            WsEvent::Message(WsMessage::Binary(Bytes::from_static(b"a new stream"))),
            WsEvent::Message(WsMessage::Text("plain".into())),
        ]
    );
}

proptest! {
    /// Messages compressed by a client, cut into fragments anywhere and
    /// the wire cut anywhere, come out whole and in order at the server,
    /// for any windows and context takeover.
    #[test]
    fn compressed_messages_round_trip_across_fragmentations(
        messages in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(0u8..4, 0..2000),
                proptest::collection::vec(any::<u8>(), 0..600),
            ],
            1..8,
        ),
        cuts in proptest::collection::vec(1usize..300, 1..20),
        (server_bits, client_bits) in (8u8..=15, 8u8..=15),
        (server_reset, client_reset) in (any::<bool>(), any::<bool>()),
    ) {
        let agreed = params(server_bits, client_bits, server_reset, client_reset);
        let mut client = Codec::new(Role::Client, &agreed, 6);
        let mut server = WebSocket::new(Role::Server, WsConfig::default(), 0)
            .with_extensions(Extensions { deflate: Some(agreed) });
        let mut wire = BytesMut::new();
        let mut cut = cuts.iter().cycle();
        for message in &messages {
            let payload = client.compress(message).unwrap();
            let mut rest = &payload[..];
            let mut first = true;
            loop {
                let n = (*cut.next().unwrap() % 64).max(1).min(rest.len());
                let (fragment, tail) = rest.split_at(n);
                rest = tail;
                let opcode = if first { Opcode::Binary } else { Opcode::Continuation };
                put_frame_rsv1(&mut wire, rest.is_empty(), first, opcode, Some([9; 4]), fragment);
                first = false;
                if rest.is_empty() {
                    break;
                }
            }
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        while at < wire.len() {
            let to = (at + cut.next().unwrap()).min(wire.len());
            buf.extend_from_slice(&wire[at..to]);
            at = to;
            while let Some(event) = server.handle_receive(Instant::now(), &mut buf) {
                got.push(event);
            }
        }
        let want: Vec<WsEvent> = messages
            .into_iter()
            .map(|m| WsEvent::Message(WsMessage::Binary(Bytes::from(m))))
            .collect();
        prop_assert_eq!(got, want);
    }
}
