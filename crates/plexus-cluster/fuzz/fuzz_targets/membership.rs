//! A member fed arbitrary packets and deadlines never panics and keeps its
//! bounds: the input is split into packets (a length byte, then the bytes;
//! a zero length advances the clock by a second and handles the deadline).
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use plexus_cluster::{ClusterConfig, Membership};

fuzz_target!(|data: &[u8]| {
    let mut now = Instant::now();
    let mut config = ClusterConfig::default();
    config.max_members = 64;
    let mut m = Membership::new(config, "sim:0", 1, now).expect("valid settings");
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let (packet, tail) = tail.split_at(len);
        rest = tail;
        if len == 0 {
            now += Duration::from_secs(1);
            m.handle_timeout(now);
        } else {
            let _ = m.handle_packet(now, packet);
        }
        while m.poll_transmit().is_some() {}
        while m.poll_event().is_some() {}
        assert!(m.members().len() <= 65);
    }
});
