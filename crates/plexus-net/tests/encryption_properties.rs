//! Property tests of the `encryption` layer in whole stacks over a hostile
//! simulated link: with `delivery` and `ordering` above it, every message
//! arrives exactly once and in order, whatever the loss (handshake messages
//! included), duplication and reordering.

use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_net::sim::{LinkModel, Pair};
use plexus_net::{LinkEvent, StackSendError, StackSpec};
use proptest::prelude::*;

const PSK: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

fn message(index: u32, len: usize) -> Bytes {
    let mut m = index.to_be_bytes().to_vec();
    m.extend((4..len.max(4)).map(|i| (i as u32).wrapping_mul(31).wrapping_add(index) as u8));
    Bytes::from(m)
}

fn link() -> impl Strategy<Value = LinkModel> {
    (0.0..0.25f64, 0.0..0.2f64, 0.0..0.3f64, 0u64..20).prop_map(
        |(loss, duplicate, reorder, jitter)| LinkModel {
            loss,
            duplicate,
            reorder,
            latency: Duration::from_millis(5),
            jitter: Duration::from_millis(jitter),
        },
    )
}

/// Sends every message from A (waiting for `SendReady` on back-pressure)
/// and runs until quiet; returns what B handed up.
fn transfer(spec: &StackSpec, link: LinkModel, seed: u64, sizes: &[usize]) -> Vec<Bytes> {
    let mut sim = Pair::new(spec, link, seed, Instant::now());
    for (i, len) in sizes.iter().enumerate() {
        let mut msg = message(i as u32, *len);
        loop {
            match sim.send_a(msg) {
                Ok(()) => break,
                Err(StackSendError::WouldBlock(frame)) => {
                    msg = frame.into_bytes();
                    let seen = sim.a.events.len();
                    while !sim.a.events[seen..].contains(&LinkEvent::SendReady) {
                        assert!(sim.step(), "stalled while blocked");
                    }
                }
                Err(e) => panic!("unexpected send error {e}"),
            }
        }
    }
    sim.run_until_quiet(Duration::from_secs(6), Duration::from_secs(300));
    assert!(sim.a.closed.is_none(), "A closed: {:?}", sim.a.closed);
    assert!(sim.b.closed.is_none(), "B closed: {:?}", sim.b.closed);
    sim.b.received
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn encrypted_reliable_stack_delivers_every_message_exactly_once_in_order(
        link in link(),
        seed in any::<u64>(),
        sizes in proptest::collection::vec(4usize..1100, 1..80),
    ) {
        let spec: StackSpec = format!(
            "udp / slicing / encryption(psk={PSK}, danger_seed={}) / delivery / ordering",
            seed % 1000
        )
        .parse()
        .expect("valid spec");
        let got = transfer(&spec, link, seed, &sizes);
        let want: Vec<Bytes> = sizes.iter().enumerate().map(|(i, n)| message(i as u32, *n)).collect();
        prop_assert_eq!(got.len(), want.len());
        prop_assert!(got == want, "content or order differs");
    }

    #[test]
    fn encrypted_stack_without_delivery_never_hands_a_message_up_twice(
        link in link(),
        seed in any::<u64>(),
        count in 1usize..200,
    ) {
        let spec: StackSpec = format!("mem / encryption(psk={PSK}, danger_seed=3)")
            .parse()
            .expect("valid spec");
        let sizes = vec![16; count];
        let lossy = link.loss > 0.0;
        let mut sim = Pair::new(&spec, link, seed, Instant::now());
        for (i, len) in sizes.iter().enumerate() {
            // Queued behind the handshake or sealed at once; never refused
            // below the pending bound.
            sim.send_a(message(i as u32, *len)).expect("accepted");
        }
        sim.run_for(Duration::from_secs(30));
        let mut got: Vec<u32> = sim.b.received.iter()
            .map(|m| u32::from_be_bytes([m[0], m[1], m[2], m[3]]))
            .collect();
        let before = got.len();
        got.sort_unstable();
        got.dedup();
        prop_assert_eq!(got.len(), before, "a message was handed up twice");
        if !lossy {
            prop_assert_eq!(got.len(), count);
        }
    }
}
