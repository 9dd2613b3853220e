//! A WebSocket server connection on arbitrary bytes, fed in pieces the
//! first byte sizes: never panics, closes at most once with a code it may
//! send, and buffers no more than a frame and a message.
#![no_main]

use std::time::Instant;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use plexus_http::websocket::{Role, WebSocket, WsConfig, WsEvent};

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let config = WsConfig {
        max_frame: 1024,
        max_message: 4096,
        max_pings_per_second: 50,
    };
    let mut ws = WebSocket::new(Role::Server, config, u64::from(first));
    let mut buf = BytesMut::new();
    let mut closes = 0;
    let now = Instant::now();
    for piece in input.chunks(usize::from(first % 64) + 1) {
        buf.extend_from_slice(piece);
        while let Some(event) = ws.handle_receive(now, &mut buf) {
            if let WsEvent::Closed { code, by_us, .. } = event {
                closes += 1;
                if by_us {
                    assert!(code.is_some_and(|c| c.is_sendable()));
                }
            }
        }
        // A frame header is at most 14 bytes.
        assert!(buf.len() <= config.max_frame + 14 + piece.len());
        while ws.poll_transmit().is_some() {}
    }
    assert!(closes <= 1);
});
