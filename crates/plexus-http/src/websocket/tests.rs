use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::frame::{put_frame, Opcode};
use super::handshake::{
    accept_key, check_server_response, client_request, server_response, Extensions,
};
use super::*;
use crate::decoder::{Decoded, RequestDecoder};

mod deflate;

/// A client frame (masked).
fn client_frame(fin: bool, opcode: Opcode, payload: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    put_frame(&mut b, fin, opcode, Some([1, 2, 3, 4]), payload);
    b
}

fn server() -> WebSocket {
    WebSocket::new(Role::Server, WsConfig::default(), 0)
}

fn events(ws: &mut WebSocket, mut input: BytesMut) -> Vec<WsEvent> {
    let now = Instant::now();
    std::iter::from_fn(|| ws.handle_receive(now, &mut input)).collect()
}

fn closed_with(ev: &[WsEvent]) -> Option<u16> {
    ev.iter().find_map(|e| match e {
        WsEvent::Closed { code, .. } => Some(code.map_or(0, |c| c.0)),
        _ => None,
    })
}

#[test]
fn messages_fragments_and_a_client_server_round_trip() {
    let mut client = WebSocket::new(Role::Client, WsConfig::default(), 42);
    let mut srv = server();
    client.send(&WsMessage::Text("héllo".into())).unwrap();
    client
        .send(&WsMessage::Binary(Bytes::from(vec![7u8; 70_000])))
        .unwrap();
    let wire = client.poll_transmit().unwrap();
    let got = events(&mut srv, BytesMut::from(&wire[..]));
    assert_eq!(got[0], WsEvent::Message(WsMessage::Text("héllo".into())));
    assert!(matches!(&got[1], WsEvent::Message(WsMessage::Binary(b)) if b.len() == 70_000));

    // A text message in three fragments, a ping between them.
    let mut input = client_frame(false, Opcode::Text, "ab\u{e9}".as_bytes().split_at(3).0);
    input.extend_from_slice(&client_frame(true, Opcode::Ping, b"p"));
    input.extend_from_slice(&client_frame(
        false,
        Opcode::Continuation,
        &"\u{e9}".as_bytes()[1..],
    ));
    input.extend_from_slice(&client_frame(true, Opcode::Continuation, b"cd"));
    let got = events(&mut srv, input);
    assert_eq!(got, [WsEvent::Message(WsMessage::Text("abécd".into()))]);
    // The pong answers the ping (server frames are unmasked).
    let pong = srv.poll_transmit().unwrap();
    assert_eq!(&pong[..], &[0x8A, 1, b'p']);
}

#[test]
fn violations_close_with_their_codes() {
    let cases: Vec<(BytesMut, u16)> = vec![
        // Unmasked client frame.
        (
            {
                let mut b = BytesMut::new();
                put_frame(&mut b, true, Opcode::Text, None, b"x");
                b
            },
            1002,
        ),
        // Reserved bits.
        (BytesMut::from(&[0xF1u8, 0x80, 0, 0, 0, 0][..]), 1002),
        // Unknown opcode.
        (BytesMut::from(&[0x83u8, 0x80, 0, 0, 0, 0][..]), 1002),
        // Fragmented ping.
        (client_frame(false, Opcode::Ping, b"x"), 1002),
        // A control frame over 125 bytes.
        (client_frame(true, Opcode::Ping, &[0u8; 126]), 1002),
        // A continuation without a message.
        (client_frame(true, Opcode::Continuation, b"x"), 1002),
        // Invalid UTF-8, found in the first fragment already.
        (client_frame(false, Opcode::Text, &[0xC0, 0xAF]), 1007),
        // An invalid close code, a one-byte close, a bad close reason.
        (
            client_frame(true, Opcode::Close, &1005u16.to_be_bytes()),
            1002,
        ),
        (client_frame(true, Opcode::Close, &[3]), 1002),
        (client_frame(true, Opcode::Close, &[0x03, 0xE8, 0xFF]), 1007),
    ];
    for (i, (input, code)) in cases.into_iter().enumerate() {
        let mut srv = server();
        let got = events(&mut srv, input);
        assert_eq!(closed_with(&got), Some(code), "case {i}: {got:?}");
        let close = srv.poll_transmit().unwrap();
        assert_eq!(
            &close[2..4],
            &code.to_be_bytes(),
            "case {i}: the close frame says why"
        );
        assert!(srv.is_closed());
        assert!(srv.send(&WsMessage::Text("late".into())).is_err());
    }
    // A new message inside a fragmented one.
    let mut srv = server();
    let mut input = client_frame(false, Opcode::Binary, b"a");
    input.extend_from_slice(&client_frame(true, Opcode::Binary, b"b"));
    assert_eq!(closed_with(&events(&mut srv, input)), Some(1002));
}

#[test]
fn sizes_over_the_limits_close_with_1009_before_they_are_buffered() {
    let config = WsConfig {
        max_frame: 1000,
        max_message: 1500,
        ..WsConfig::default()
    };
    let mut srv = WebSocket::new(Role::Server, config, 0);
    // Only the header of an announced 1 MiB frame: refused at once.
    let mut header = BytesMut::new();
    header.extend_from_slice(&[0x82, 0xFF]);
    header.extend_from_slice(&(1u64 << 20).to_be_bytes());
    assert_eq!(closed_with(&events(&mut srv, header)), Some(1009));
    // A continuation that takes the message over its bound: refused from
    // its header, before its payload comes.
    let mut srv = WebSocket::new(Role::Server, config, 0);
    let mut input = client_frame(false, Opcode::Binary, &[0u8; 1000]);
    let continuation = client_frame(true, Opcode::Continuation, &[0u8; 1000]);
    input.extend_from_slice(&continuation[..8]);
    assert_eq!(closed_with(&events(&mut srv, input)), Some(1009));
}

#[test]
fn every_ping_is_answered_in_order() {
    // Autobahn 2.10: ten pings read at once get ten pongs, each with its
    // ping's payload (one coalesced pong for all of them failed the case).
    let mut srv = server();
    let mut input = BytesMut::new();
    for i in 0..10u8 {
        input.extend_from_slice(&client_frame(true, Opcode::Ping, &[b'p', i]));
    }
    assert_eq!(srv.handle_receive(Instant::now(), &mut input), None);
    let want: Vec<u8> = (0..10u8).flat_map(|i| [0x8A, 2, b'p', i]).collect();
    assert_eq!(&srv.poll_transmit().unwrap()[..], &want[..]);
    assert_eq!(srv.stats().pongs, 10);
    assert_eq!(srv.poll_transmit(), None);
}

#[test]
fn a_ping_flood_costs_bounded_pending_pongs_then_closes_with_1008() {
    let config = WsConfig {
        max_pings_per_second: 100,
        ..WsConfig::default()
    };
    let mut srv = WebSocket::new(Role::Server, config, 0);
    let mut now = Instant::now();
    let mut input = BytesMut::new();
    for i in 0..100u8 {
        input.extend_from_slice(&client_frame(true, Opcode::Ping, &[i]));
    }
    assert_eq!(srv.handle_receive(now, &mut input), None);
    let pongs = srv.poll_transmit().unwrap();
    let last = 100 - MAX_PENDING_PONGS as u8;
    let want: Vec<u8> = (last..100).flat_map(|i| [0x8A, 1, i]).collect();
    assert_eq!(&pongs[..], &want[..], "the most recent pings are answered");
    assert_eq!(srv.poll_transmit(), None);
    // A second later the window starts again.
    now += Duration::from_secs(1);
    let mut more = client_frame(true, Opcode::Ping, b"x");
    assert_eq!(srv.handle_receive(now, &mut more), None);
    // 101 in one second: closed.
    let mut flood = BytesMut::new();
    for _ in 0..100 {
        flood.extend_from_slice(&client_frame(true, Opcode::Ping, b"y"));
    }
    let ev = srv.handle_receive(now, &mut flood);
    assert!(matches!(
        ev,
        Some(WsEvent::Closed {
            code: Some(CloseCode::POLICY),
            by_us: true,
            ..
        })
    ));
}

#[test]
fn invalid_utf8_fails_fast_inside_a_frame() {
    // Autobahn 6.4.3: one text frame whose payload comes in three pieces,
    // the second holding a code point over U+10FFFF (f4 90 80 80). The
    // connection fails at that byte, before the frame is whole.
    let (part1, part2, part3): (&[u8], &[u8], &[u8]) = (
        b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5",
        b"\xf4\x90\x80\x80",
        b"edited",
    );
    let wire = client_frame(true, Opcode::Text, &[part1, part2, part3].concat());
    let first = wire.len() - part2.len() - part3.len();
    let mut srv = server();
    let mut buf = BytesMut::from(&wire[..first]);
    assert_eq!(srv.handle_receive(Instant::now(), &mut buf), None);
    assert!(buf.is_empty(), "the payload so far is read and checked");
    // f4 90: no code point starts so.
    buf.extend_from_slice(&wire[first..first + 2]);
    let ev = srv.handle_receive(Instant::now(), &mut buf);
    assert!(
        matches!(
            ev,
            Some(WsEvent::Closed {
                code: Some(CloseCode::INVALID_PAYLOAD),
                by_us: true,
                ..
            })
        ),
        "{ev:?}"
    );
    assert_eq!(&srv.poll_transmit().unwrap()[2..4], &1007u16.to_be_bytes());
}

#[test]
fn frames_cut_anywhere_come_out_whole() {
    // A text frame (a code point split at every place), a ping and a close,
    // fed in two pieces cut at every byte: the payload is read (and
    // unmasked) as it arrives, and the same events come out.
    let mut wire = client_frame(true, Opcode::Text, "añ€😀z".as_bytes());
    wire.extend_from_slice(&client_frame(true, Opcode::Ping, b"ping"));
    wire.extend_from_slice(&client_frame(
        true,
        Opcode::Close,
        &[0x03, 0xE8, b'o', b'k'],
    ));
    let want = [
        WsEvent::Message(WsMessage::Text("añ€😀z".into())),
        WsEvent::Closed {
            code: Some(CloseCode::NORMAL),
            reason: "ok".into(),
            by_us: false,
        },
    ];
    for cut in 0..=wire.len() {
        let mut srv = server();
        let mut buf = BytesMut::from(&wire[..cut]);
        let mut got: Vec<WsEvent> =
            std::iter::from_fn(|| srv.handle_receive(Instant::now(), &mut buf)).collect();
        buf.extend_from_slice(&wire[cut..]);
        got.extend(std::iter::from_fn(|| {
            srv.handle_receive(Instant::now(), &mut buf)
        }));
        assert_eq!(got, want, "cut at {cut}");
        // The ping's pong, not sent yet when the close came, gives way to
        // the close frame.
        let out = srv.poll_transmit().unwrap();
        assert_eq!(
            &out[out.len() - 4..],
            &[0x88, 2, 0x03, 0xE8],
            "cut at {cut}"
        );
    }
}

#[test]
fn the_closing_handshake_echoes_the_code() {
    let mut srv = server();
    let mut payload = 1001u16.to_be_bytes().to_vec();
    payload.extend_from_slice(b"bye");
    let got = events(&mut srv, client_frame(true, Opcode::Close, &payload));
    assert_eq!(
        got,
        [WsEvent::Closed {
            code: Some(CloseCode::GOING_AWAY),
            reason: "bye".into(),
            by_us: false
        }]
    );
    assert_eq!(&srv.poll_transmit().unwrap()[..], &[0x88, 2, 0x03, 0xE9]);
    assert!(srv.is_closed());
}

#[test]
fn the_opening_handshake_follows_rfc_6455() {
    // The example of RFC 6455, section 1.3.
    assert_eq!(
        accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
    let (request, offer) = client_request("h", "/ws", [9; 16], &WsConfig::default());
    let mut buf = BytesMut::from(&request[..]);
    let Ok(Some(Decoded::Request(req))) = RequestDecoder::default().decode(&mut buf) else {
        panic!("the client's request decodes");
    };
    assert!(handshake::is_upgrade(&req));
    let (response, extensions) = server_response(&req, &WsConfig::default()).unwrap();
    assert_eq!(response.status, 101);
    assert_eq!(extensions, Extensions::default());
    let mut wire = BytesMut::new();
    crate::encode_response(&mut wire, &response, true, false).unwrap();
    wire.extend_from_slice(b"\x81\x00");
    assert_eq!(
        check_server_response(&mut wire, &offer),
        Ok(Some(Extensions::default()))
    );
    assert_eq!(&wire[..], b"\x81\x00", "frames after the head stay");
    let mut wrong = BytesMut::from(
        &b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: nope\r\n\r\n"[..],
    );
    assert!(check_server_response(&mut wrong, &offer).is_err());

    let mut old = req.clone();
    old.headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("sec-websocket-version"));
    old.headers
        .push(("Sec-WebSocket-Version".into(), Bytes::from_static(b"8")));
    let config = WsConfig::default();
    assert_eq!(
        server_response(&old, &config)
            .unwrap_err()
            .response()
            .status,
        426
    );
    let mut plain = req;
    plain
        .headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("upgrade"));
    assert_eq!(
        server_response(&plain, &config)
            .unwrap_err()
            .response()
            .status,
        400
    );
}

proptest! {
    /// Messages sent by a client, cut anywhere on the way, come out whole
    /// and in order at the server.
    #[test]
    fn messages_survive_any_cuts(
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..8),
        cuts in proptest::collection::vec(1usize..200, 1..20),
    ) {
        let mut client = WebSocket::new(Role::Client, WsConfig::default(), 7);
        for m in &messages {
            client.send(&WsMessage::Binary(Bytes::from(m.clone()))).unwrap();
        }
        let wire = client.poll_transmit().unwrap();
        let mut srv = server();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        for cut in cuts.iter().cycle() {
            if at >= wire.len() {
                break;
            }
            let to = (at + cut).min(wire.len());
            buf.extend_from_slice(&wire[at..to]);
            at = to;
            while let Some(ev) = srv.handle_receive(Instant::now(), &mut buf) {
                got.push(ev);
            }
        }
        let want: Vec<WsEvent> = messages
            .into_iter()
            .map(|m| WsEvent::Message(WsMessage::Binary(Bytes::from(m))))
            .collect();
        prop_assert_eq!(got, want);
    }

    /// Any bytes: no panic, and at most one close.
    #[test]
    fn arbitrary_input_never_panics(input in proptest::collection::vec(any::<u8>(), 0..600)) {
        let config = WsConfig {
            max_frame: 256,
            max_message: 512,
            max_pings_per_second: 10,
            deflate: None,
        };
        let mut srv = WebSocket::new(Role::Server, config, 0);
        let mut buf = BytesMut::from(&input[..]);
        let mut closes = 0;
        while let Some(ev) = srv.handle_receive(Instant::now(), &mut buf) {
            if matches!(ev, WsEvent::Closed { .. }) {
                closes += 1;
            }
        }
        prop_assert!(closes <= 1);
    }
}
