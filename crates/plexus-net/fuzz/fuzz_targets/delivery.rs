//! Arbitrary bytes into the delivery header parser (valid headers must
//! round-trip) and arbitrary datagrams into a delivery layer that has sent a
//! few messages: never panics, never hands up a sequence number twice.
#![no_main]
use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::delivery::{Delivery, DeliveryConfig, DeliveryHeader, MAX_HEADER_LEN};
use plexus_net::{Frame, Layer, Output};

mod common;

fuzz_target!(|data: &[u8]| {
    if let Ok((h, n)) = DeliveryHeader::parse(data) {
        let mut buf = [0; MAX_HEADER_LEN];
        let m = h.emit(&mut buf);
        assert_eq!(m, n);
        assert_eq!(DeliveryHeader::parse(&buf[..m]), Ok((h, n)));
    }
    let mut now = Instant::now();
    let mut layer = Delivery::new(DeliveryConfig::default(), now);
    let mut out = Output::new();
    for i in 0..5u8 {
        let _ = layer.handle_send(now, Frame::from_payload(Bytes::from(vec![i])), &mut out);
    }
    let mut seen = HashSet::new();
    for piece in common::pieces(data) {
        let seq = DeliveryHeader::parse(piece).ok().and_then(|(h, _)| h.seq);
        let _ = layer.handle_receive(
            now,
            Frame::from_payload(Bytes::copy_from_slice(piece)),
            &mut out,
        );
        if out.pop_up().is_some() {
            assert!(seen.insert(seq), "handed up twice: {seq:?}");
        }
        now += Duration::from_millis(7);
        layer.handle_timeout(now, &mut out);
        while out.pop_down().is_some() {}
    }
});
