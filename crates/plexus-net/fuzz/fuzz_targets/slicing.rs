//! Arbitrary datagrams into the slicing header parser and layer: never
//! panics, never holds more than its budget. Then the same pieces, sent as
//! one batch of messages (bundled where small), come out whole and in order.
#![no_main]
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::slicing::{FragmentHeader, Slicing, SlicingConfig};
use plexus_net::{Frame, Layer, Output};

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = FragmentHeader::parse(data, u32::MAX);
    let _ = FragmentHeader::parse_record(data, u32::MAX);
    let config = SlicingConfig {
        mtu: 256,
        max_message: 64 << 10,
        max_partials: 4,
        max_partial_bytes: 128 << 10,
        ..SlicingConfig::default()
    };
    let mut layer = Slicing::new(config.clone());
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

    // Round trip of a batch: bundling must not lose, merge or reorder.
    let (mut tx, mut rx) = (Slicing::new(config.clone()), Slicing::new(config));
    let mut out = Output::new();
    let sent: Vec<&[u8]> = common::pieces(data).collect();
    for piece in &sent {
        tx.handle_send(now, Frame::from_payload(Bytes::copy_from_slice(piece)), &mut out)
            .expect("pieces are below max_message");
    }
    tx.handle_flush(now, &mut out);
    let mut back = Output::new();
    while let Some(datagram) = out.pop_down() {
        assert!(datagram.len() <= 256);
        rx.handle_receive(now, Frame::from_payload(datagram.to_bytes()), &mut back)
            .expect("own datagrams decode");
    }
    let got: Vec<Bytes> = std::iter::from_fn(|| back.pop_up().map(Frame::into_bytes)).collect();
    assert_eq!(got.len(), sent.len());
    for (g, s) in got.iter().zip(&sent) {
        assert_eq!(&g[..], *s);
    }
});
