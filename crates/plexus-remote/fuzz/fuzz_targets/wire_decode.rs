//! The wire decoder on arbitrary bytes: never panics, whatever decodes
//! encodes back to a frame that decodes to the same value, and the receive
//! path's `MESSAGE` fast path agrees with the full decoder.
#![no_main]

use bytes::{Buf, Bytes};
use libfuzzer_sys::fuzz_target;
use plexus_remote::wire::{WireFrame, MessageHeader};

fuzz_target!(|data: &[u8]| {
    let decoded = WireFrame::decode(Bytes::copy_from_slice(data));
    if let Some(header) = MessageHeader::parse(data) {
        match (header, &decoded) {
            (
                Ok(h),
                Ok(WireFrame::Message {
                    to,
                    type_id,
                    receipt,
                    payload,
                }),
            ) => {
                assert_eq!((h.to, h.type_id, h.receipt), (*to, *type_id, *receipt));
                let mut rest = Bytes::copy_from_slice(data);
                rest.advance(h.len);
                assert_eq!(&rest, payload);
            }
            (Err(_), Err(_)) => {}
            (h, d) => panic!("fast path {h:?} disagrees with decode {d:?}"),
        }
    }
    if let Ok(frame) = decoded {
        let again = WireFrame::decode(frame.encode()).expect("a decoded frame re-encodes validly");
        assert_eq!(again, frame);
    }
});
