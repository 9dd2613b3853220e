//! Arbitrary datagrams into the slicing header parser and layer: never
//! panics, never holds more than its budget.
#![no_main]
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::slicing::{FragmentHeader, Slicing, SlicingConfig};
use plexus_net::{Frame, Layer, Output};

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = FragmentHeader::parse(data, u32::MAX);
    let config = SlicingConfig {
        max_message: 64 << 10,
        max_partials: 4,
        max_partial_bytes: 128 << 10,
        ..SlicingConfig::default()
    };
    let mut layer = Slicing::new(config);
    let mut out = Output::new();
    let mut now = Instant::now();
    for piece in common::pieces(data) {
        let _ = layer.handle_receive(
            now,
            Frame::from_payload(Bytes::copy_from_slice(piece)),
            &mut out,
        );
        assert!(layer.held_bytes() <= 128 << 10);
        assert!(layer.partials() <= 4);
        while let Some(m) = out.pop_up() {
            assert!(m.len() <= 64 << 10);
        }
        now += Duration::from_millis(100);
        layer.handle_timeout(now, &mut out);
    }
});
