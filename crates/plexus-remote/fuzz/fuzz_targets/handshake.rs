//! The handshake fed arbitrary frames (split from the input at 0xff bytes):
//! never panics, and never completes without a valid cookie proof (with or
//! without a certified peer id).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_core::NodeId;
use plexus_remote::handshake::Handshake;
use plexus_remote::wire::WireFrame;

fuzz_target!(|data: &[u8]| {
    let mut hs = Handshake::new(NodeId::from_u64(1), "fuzz-cookie", [3; 16], vec![]);
    // Half the inputs run as on a TLS link, with a certified peer id.
    if data.first().is_some_and(|b| b & 1 == 1) {
        hs = hs.certified_peer(NodeId::from_u64(2));
    }
    for chunk in data.split(|b| *b == 0xff) {
        let Ok(frame) = WireFrame::decode(Bytes::copy_from_slice(chunk)) else {
            continue;
        };
        match hs.handle_frame(frame) {
            // A random input cannot forge the keyed proof for our nonce.
            Ok((_, Some(_peer))) => panic!("handshake completed without the cookie"),
            Ok(_) => {}
            Err(_) => break,
        }
    }
});
