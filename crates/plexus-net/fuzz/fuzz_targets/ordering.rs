//! Arbitrary datagrams into both ordering modes: never panics; lossy mode
//! hands up strictly increasing sequence numbers.
#![no_main]
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::ordering::{Ordering, OrderingConfig, OrderingHeader};
use plexus_net::{Frame, Layer, Output};

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = OrderingHeader::parse(data);
    for config in [OrderingConfig::strict(), OrderingConfig::lossy()] {
        let lossy = config == OrderingConfig::lossy();
        let config = OrderingConfig {
            max_pending: 8,
            max_pending_bytes: 4096,
            ..config
        };
        let mut layer = Ordering::new(config);
        let mut out = Output::new();
        let mut now = Instant::now();
        let mut last: Option<u64> = None;
        for piece in common::pieces(data) {
            let frame = Frame::from_payload(Bytes::copy_from_slice(piece));
            if layer
                .handle_receive(now, frame, &mut out)
                .is_err_and(|e| e.is_fatal())
            {
                break;
            }
            now += Duration::from_millis(30);
            layer.handle_timeout(now, &mut out);
            assert!(layer.pending() <= 8);
            if lossy {
                let next = layer.next_expected();
                while out.pop_up().is_some() {}
                if let Some(l) = last {
                    assert!(next >= l);
                }
                last = Some(next);
            }
        }
    }
});
