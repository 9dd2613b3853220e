//! Arbitrary byte-stream chunks into the framing decoder and the `tcp /
//! framing` stack: never panics, holds at most max_frame + 4 bytes.
#![no_main]
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::framing;
use plexus_net::StackSpec;

mod common;

fuzz_target!(|data: &[u8]| {
    let mut src = BytesMut::from(data);
    while let Ok(Some(_)) = framing::decode(&mut src, 1024) {}

    let spec: StackSpec = "tcp / framing(max_frame=1KiB)".parse().expect("valid spec");
    let now = Instant::now();
    let mut stack = spec.build(now);
    for chunk in common::pieces(data) {
        if stack
            .handle_receive(now, Bytes::copy_from_slice(chunk))
            .is_err()
        {
            break;
        }
        while let Some(m) = stack.poll_receive() {
            assert!(m.len() <= 1024);
        }
    }
});
