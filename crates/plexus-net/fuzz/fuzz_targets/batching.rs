//! Arbitrary bytes into the batching decoder, and into the layer: never
//! panics; the message ranges it reports lie inside the frame, in order,
//! without overlap, and cover it to its end; a malformed frame reports none.
#![no_main]
use std::time::Instant;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::batching::{self, Batching, BatchingConfig, BATCH};
use plexus_net::{Frame, Layer, Output};

fuzz_target!(|data: &[u8]| {
    let mut ranges = Vec::new();
    if batching::decode(data, |start, end| ranges.push((start, end))).is_ok() {
        let mut at = 1;
        for &(start, end) in &ranges {
            assert!(at <= start && start <= end && end <= data.len());
            at = end;
        }
        assert_eq!(at, data.len());
        if data[0] == BATCH {
            assert!(ranges.iter().all(|&(s, e)| s < e));
        }
    } else {
        assert!(ranges.is_empty(), "a malformed frame reported messages");
    }
    let mut layer = Batching::new(BatchingConfig::default());
    let mut out = Output::new();
    let r = layer.handle_receive(
        Instant::now(),
        Frame::from_payload(Bytes::copy_from_slice(data)),
        &mut out,
    );
    let mut n = 0;
    while out.pop_up().is_some() {
        n += 1;
    }
    assert_eq!(n, if r.is_ok() { ranges.len() } else { 0 });
});
