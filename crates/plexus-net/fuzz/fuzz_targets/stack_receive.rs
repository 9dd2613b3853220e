//! Arbitrary datagrams into the receive path of a full
//! `udp / slicing / delivery / ordering` stack (and a lossy-ordering and a
//! compression stack), with timers firing: never panics, link closes only
//! with a typed error.
#![no_main]
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_net::StackSpec;

mod common;

const SPECS: [&str; 3] = [
    "udp / slicing(max_message=64KiB, max_partial_bytes=256KiB) / delivery / ordering",
    "mem / heartbeat / delivery / ordering(mode=lossy, max_pending=8)",
    "mem / faults(drop=0.1, reorder=0.2, seed=3, direction=both) / compression / ordering",
];

fuzz_target!(|data: &[u8]| {
    for spec in SPECS {
        let spec: StackSpec = spec.parse().expect("valid spec");
        let mut now = Instant::now();
        let mut stack = spec.build(now);
        let _ = stack.handle_send(now, Bytes::from_static(b"hello"));
        for piece in common::pieces(data) {
            if stack
                .handle_receive(now, Bytes::copy_from_slice(piece))
                .is_err()
            {
                break;
            }
            now += Duration::from_millis(u64::from(piece.len() as u8));
            let _ = stack.handle_timeout(now);
            while stack.poll_transmit().is_some() {}
            while stack.poll_receive().is_some() {}
            while stack.poll_event().is_some() {}
        }
    }
});
