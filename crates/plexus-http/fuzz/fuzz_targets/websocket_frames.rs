//! A WebSocket server connection on arbitrary bytes, fed in pieces the
//! first byte sizes: never panics, closes at most once with a code it may
//! send, buffers no more than a frame and a message, and delivers no
//! message over its bound.
//!
//! The first byte's top bit says permessage-deflate was agreed, with the
//! windows and context takeover the next byte gives: then RSV1 frames are
//! inflated, corrupt deflate data and inflated sizes (zip bombs) are
//! exercised too.
#![no_main]

use std::time::Instant;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use plexus_http::websocket::handshake::Extensions;
use plexus_http::websocket::{
    DeflateConfig, DeflateParams, Role, WebSocket, WsConfig, WsEvent, WsMessage,
};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let (extensions, input) = match rest.split_first() {
        Some((&p, input)) if first & 0x80 != 0 => {
            let deflate = DeflateParams {
                server_no_context_takeover: p & 1 != 0,
                client_no_context_takeover: p & 2 != 0,
                server_max_window_bits: 8 + (p >> 2 & 7),
                client_max_window_bits: 8 + (p >> 5 & 7),
            };
            let extensions = Extensions {
                deflate: Some(deflate),
            };
            (extensions, input)
        }
        _ => (Extensions::default(), rest),
    };
    let config = WsConfig {
        max_frame: 1024,
        max_message: 4096,
        max_pings_per_second: 50,
        deflate: extensions.deflate.map(|_| DeflateConfig::default()),
    };
    let mut ws = WebSocket::new(Role::Server, config, u64::from(first)).with_extensions(extensions);
    let mut buf = BytesMut::new();
    let mut closes = 0;
    let now = Instant::now();
    for piece in input.chunks(usize::from(first % 64) + 1) {
        buf.extend_from_slice(piece);
        while let Some(event) = ws.handle_receive(now, &mut buf) {
            match event {
                WsEvent::Closed { code, by_us, .. } => {
                    closes += 1;
                    if by_us {
                        assert!(code.is_some_and(|c| c.is_sendable()));
                    }
                }
                WsEvent::Message(WsMessage::Text(t)) => assert!(t.len() <= config.max_message),
                WsEvent::Message(WsMessage::Binary(b)) => {
                    assert!(b.len() <= config.max_message)
                }
            }
        }
        // A frame header is at most 14 bytes.
        assert!(buf.len() <= config.max_frame + 14 + piece.len());
        while ws.poll_transmit().is_some() {}
    }
    assert!(closes <= 1);
});
