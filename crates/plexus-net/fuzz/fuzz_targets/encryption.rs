//! Arbitrary datagrams into the encryption layer: a fresh responder (the
//! handshake path) and an established session (the data path), mixed with
//! genuine, replayed and bit-flipped datagrams of a real peer. Never panics;
//! nothing forged, tampered or replayed is ever handed up; each genuine
//! datagram is handed up at most once.
#![no_main]
use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::encryption::{Encryption, EncryptionConfig};
use plexus_net::{Frame, Layer, LinkContext, Output};

mod common;

fn layer(link_id: u64, now: Instant) -> Encryption {
    let mut config = EncryptionConfig::with_psk([7; 32]);
    config.danger_seed = Some(1);
    Encryption::new(config, &LinkContext { now, link_id })
}

fn down(out: &mut Output) -> Vec<Bytes> {
    std::iter::from_fn(|| out.pop_down().map(|f| f.to_bytes())).collect()
}

fuzz_target!(|data: &[u8]| {
    let mut now = Instant::now();
    let mut out = Output::new();
    // A responder that has seen nothing: every piece is raw input.
    let mut fresh = layer(9, now);
    // An established pair a -> b.
    let mut a = layer(0, now);
    let mut b = layer(1, now);
    let _ = a.handle_send(now, Frame::from_payload(Bytes::from_static(b"\xff\xff")), &mut out);
    let init = down(&mut out);
    let _ = b.handle_receive(now, Frame::from_payload(init[0].clone()), &mut out);
    let answer = down(&mut out);
    let _ = a.handle_receive(now, Frame::from_payload(answer[0].clone()), &mut out);
    let first = down(&mut out);
    let _ = b.handle_receive(now, Frame::from_payload(first[0].clone()), &mut out);
    assert!(out.pop_up().is_some(), "the genuine first message opens");

    let mut genuine: Vec<Bytes> = Vec::new();
    let mut seen = HashSet::new();
    for piece in common::pieces(data) {
        let _ = fresh.handle_receive(now, Frame::from_payload(Bytes::copy_from_slice(piece)), &mut out);
        assert!(out.pop_up().is_none(), "a fresh responder handed up data");
        out = Output::new();
        fresh.handle_timeout(now, &mut out);
        let (sel, rest) = piece.split_first().unwrap_or((&0, &[]));
        let (datagram, authentic) = match sel % 4 {
            0 => {
                let index = genuine.len() as u16;
                let _ = a.handle_send(now, Frame::from_payload(Bytes::copy_from_slice(&index.to_be_bytes())), &mut out);
                let d = down(&mut out).pop().unwrap_or_default();
                genuine.push(d.clone());
                (d, true)
            }
            1 if !genuine.is_empty() => {
                // A replay of an earlier genuine datagram.
                let i = rest.first().copied().unwrap_or(0) as usize % genuine.len();
                (genuine[i].clone(), true)
            }
            2 if !genuine.is_empty() => {
                // A genuine datagram with one bit flipped: must not open.
                let i = rest.first().copied().unwrap_or(0) as usize % genuine.len();
                let mut bad = genuine[i].to_vec();
                let at = rest.get(1).copied().unwrap_or(0) as usize % bad.len();
                bad[at] ^= 1 << (rest.get(2).copied().unwrap_or(0) % 8);
                (Bytes::from(bad), false)
            }
            _ => (Bytes::copy_from_slice(rest), false),
        };
        let _ = b.handle_receive(now, Frame::from_payload(datagram), &mut out);
        while let Some(up) = out.pop_up() {
            assert!(authentic, "forged or tampered datagram handed up");
            let up = up.to_bytes();
            assert!(seen.insert(up.clone()), "handed up twice: {up:?}");
        }
        while out.pop_down().is_some() {}
        now += Duration::from_millis(13);
    }
});
