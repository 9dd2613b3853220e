//! The wire decoder on arbitrary bytes: never panics, and whatever decodes
//! encodes back to a frame that decodes to the same value.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_remote::wire::Frame;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = Frame::decode(Bytes::copy_from_slice(data)) {
        let again = Frame::decode(frame.encode()).expect("a decoded frame re-encodes validly");
        assert_eq!(again, frame);
    }
});
