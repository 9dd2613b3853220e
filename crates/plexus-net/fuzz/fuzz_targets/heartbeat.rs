//! Arbitrary frames and timing into the heartbeat layer: never panics.
#![no_main]
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::heartbeat::{Heartbeat, HeartbeatConfig};
use plexus_net::{Frame, Layer, Output};

mod common;

fuzz_target!(|data: &[u8]| {
    let mut now = Instant::now();
    let mut layer = Heartbeat::new(HeartbeatConfig::default(), now);
    let mut out = Output::new();
    for piece in common::pieces(data) {
        let gap = piece.first().map_or(0, |b| u64::from(*b) * 37);
        now += Duration::from_millis(gap);
        let _ = layer.handle_receive(
            now,
            Frame::from_payload(Bytes::copy_from_slice(piece)),
            &mut out,
        );
        if let Some(t) = layer.poll_timeout() {
            now = now.max(t);
            layer.handle_timeout(now, &mut out);
        }
        assert!(layer
            .poll_timeout()
            .is_none_or(|t| t > now - Duration::from_millis(1)));
    }
});
