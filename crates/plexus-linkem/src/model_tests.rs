//! Tests of [`LinkModel`] on a fake clock: `t0` plus offsets, never the
//! real time.

use super::*;
use proptest::prelude::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn cfg(f: impl FnOnce(&mut DirectionConfig)) -> DirectionConfig {
    let mut c = DirectionConfig::default();
    f(&mut c);
    c
}

/// A packet whose first 4 bytes are its id, padded to `len`.
fn pkt(id: u32, len: usize) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.resize(len.max(4), 0);
    p
}

fn id(p: &[u8]) -> u32 {
    // Every test packet starts with a 4-byte id (see `pkt`).
    u32::from_be_bytes(p[..4].try_into().expect("4 bytes"))
}

/// Drives the model on virtual time: packets `(arrival offset, len)` go in
/// at their times, and every packet out is recorded with the virtual time
/// it left. Returns `(id, left)` in the order they left.
fn drive(
    model: &mut LinkModel,
    t0: Instant,
    arrivals: &[(Duration, usize)],
) -> Vec<(u32, Instant)> {
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let arrival = arrivals.get(next).map(|&(off, _)| t0 + off);
        let now = match (arrival, model.poll_timeout()) {
            (Some(a), Some(t)) => a.min(t),
            (Some(a), None) => a,
            (None, Some(t)) => t,
            (None, None) => return out,
        };
        while let Some(p) = model.poll_transmit(now) {
            out.push((id(&p), now));
        }
        if arrival == Some(now) {
            model.handle_packet(now, pkt(next as u32, arrivals[next].1));
            next += 1;
        }
    }
}

#[test]
fn a_new_config_applies_to_later_packets_and_spares_those_in_flight() {
    let t0 = Instant::now();
    let mut m = LinkModel::new(cfg(|c| drop(c.set_delay_ms(10.0))), 1);
    assert!(matches!(
        m.handle_packet(t0, pkt(0, 64)),
        Verdict::Scheduled { .. }
    ));
    m.set_config(cfg(|c| drop(c.set_loss_percent(100.0))));
    assert_eq!(m.handle_packet(t0 + ms(1), pkt(1, 64)), Verdict::Lost);
    // The packet sent before the cut still arrives, at its time.
    assert_eq!(m.poll_transmit(t0 + ms(9)), None);
    assert_eq!(m.poll_transmit(t0 + ms(10)).map(|p| id(&p)), Some(0));
    m.set_config(DirectionConfig::default());
    assert_eq!(
        m.handle_packet(t0 + ms(20), pkt(2, 64)),
        Verdict::Scheduled {
            at: t0 + ms(20),
            duplicate_at: None,
            reordered: false
        }
    );
    assert_eq!(m.poll_transmit(t0 + ms(20)).map(|p| id(&p)), Some(2));
}

#[test]
fn delay_holds_each_packet_for_exactly_the_delay() {
    let t0 = Instant::now();
    let mut m = LinkModel::new(cfg(|c| drop(c.set_delay_ms(10.0))), 1);
    let out = drive(&mut m, t0, &[(ms(0), 100), (ms(3), 100)]);
    assert_eq!(out, vec![(0, t0 + ms(10)), (1, t0 + ms(13))]);
}

#[test]
fn nothing_is_handed_out_before_its_time() {
    let t0 = Instant::now();
    let mut m = LinkModel::new(cfg(|c| drop(c.set_delay_ms(10.0))), 1);
    m.handle_packet(t0, pkt(7, 64));
    assert_eq!(m.poll_timeout(), Some(t0 + ms(10)));
    assert_eq!(m.poll_transmit(t0 + ms(10) - Duration::from_nanos(1)), None);
    assert_eq!(m.poll_transmit(t0 + ms(10)).map(|p| id(&p)), Some(7));
    assert_eq!(m.poll_timeout(), None);
}

#[test]
fn jitter_spreads_the_delay_within_its_bounds_but_keeps_fifo_order() {
    let t0 = Instant::now();
    let c = cfg(|c| drop(c.set_delay_ms(20.0).and_then(|c| c.set_jitter_ms(5.0))));
    let mut m = LinkModel::new(c, 42);
    let arrivals: Vec<_> = (0..2000).map(|i| (ms(i * 7), 64)).collect();
    let out = drive(&mut m, t0, &arrivals);
    assert_eq!(out.len(), 2000);
    let mut spread = (Duration::MAX, Duration::ZERO);
    for (k, &(i, left)) in out.iter().enumerate() {
        assert_eq!(i as usize, k, "jitter must not reorder");
        let d = left - (t0 + arrivals[k].0);
        assert!(d >= ms(15) && d <= ms(25), "delay {d:?} outside 20 ± 5 ms");
        spread = (spread.0.min(d), spread.1.max(d));
    }
    assert!(
        spread.0 < ms(16) && spread.1 > ms(24),
        "jitter used its range: {spread:?}"
    );
}

#[test]
fn loss_rate_with_a_seed_is_close_to_the_setting() {
    let t0 = Instant::now();
    let mut m = LinkModel::new(cfg(|c| drop(c.set_loss_percent(5.0))), 7);
    let n = 20_000;
    let lost = (0..n)
        .filter(|&i| m.handle_packet(t0 + ms(i), pkt(i as u32, 64)) == Verdict::Lost)
        .count();
    let rate = lost as f64 / n as f64;
    // σ = sqrt(0.05·0.95/20000) ≈ 0.15 %; 4σ ≈ 0.6 %.
    assert!((rate - 0.05).abs() < 0.006, "loss rate {rate}");
    assert_eq!(m.stats().lost, lost as u64);
}

#[test]
fn rate_cap_paces_packets_by_their_serialization_time() {
    let t0 = Instant::now();
    // 1 Mbit/s: a 1250-byte packet takes 10 ms on the wire.
    let mut m = LinkModel::new(cfg(|c| drop(c.set_rate_mbit(Some(1.0)))), 1);
    let arrivals: Vec<_> = (0..5).map(|_| (ms(0), 1250)).collect();
    let out = drive(&mut m, t0, &arrivals);
    let left: Vec<_> = out.iter().map(|&(_, t)| t - t0).collect();
    assert_eq!(left, vec![ms(10), ms(20), ms(30), ms(40), ms(50)]);
}

#[test]
fn rate_cap_adds_the_delay_after_serialization() {
    let t0 = Instant::now();
    let c = cfg(|c| drop(c.set_rate_mbit(Some(1.0)).and_then(|c| c.set_delay_ms(5.0))));
    let mut m = LinkModel::new(c, 1);
    let out = drive(&mut m, t0, &[(ms(0), 1250), (ms(0), 1250)]);
    assert_eq!(out, vec![(0, t0 + ms(15)), (1, t0 + ms(25))]);
}

#[test]
fn full_rate_queue_drops_the_tail_until_it_drains() {
    let t0 = Instant::now();
    let c = cfg(|c| {
        drop(
            c.set_rate_mbit(Some(1.0))
                .and_then(|c| c.set_queue_packets(3)),
        )
    });
    let mut m = LinkModel::new(c, 1);
    let verdicts: Vec<_> = (0..5).map(|i| m.handle_packet(t0, pkt(i, 1250))).collect();
    assert!(matches!(verdicts[2], Verdict::Scheduled { .. }));
    assert_eq!(&verdicts[3..], &[Verdict::QueueFull, Verdict::QueueFull]);
    assert_eq!(m.stats().queue_dropped, 2);
    // After the first packet is on the wire (10 ms) there is room for one.
    assert!(
        matches!(m.handle_packet(t0 + ms(10), pkt(5, 1250)), Verdict::Scheduled { at, .. } if at == t0 + ms(40))
    );
    assert_eq!(
        m.handle_packet(t0 + ms(10), pkt(6, 1250)),
        Verdict::QueueFull
    );
}

#[test]
fn reordered_packets_are_overtaken_by_later_ones() {
    let t0 = Instant::now();
    let c = cfg(|c| {
        drop(
            c.set_reorder_percent(100.0)
                .and_then(|c| c.set_reorder_gap_ms(5.0)),
        )
    });
    let mut m = LinkModel::new(c, 1);
    assert!(
        matches!(m.handle_packet(t0, pkt(0, 64)), Verdict::Scheduled { reordered: true, at, .. } if at == t0 + ms(5))
    );
    m.config
        .set_reorder_percent(0.0)
        .expect("0 is a valid probability");
    m.handle_packet(t0 + ms(1), pkt(1, 64));
    let out = drive(&mut m, t0 + ms(1), &[]);
    assert_eq!(out, vec![(1, t0 + ms(1)), (0, t0 + ms(5))]);
    assert_eq!(m.stats().reordered, 1);
}

#[test]
fn some_packets_are_reordered_at_a_partial_probability() {
    let t0 = Instant::now();
    let mut m = LinkModel::new(cfg(|c| drop(c.set_reorder_percent(10.0))), 3);
    let arrivals: Vec<_> = (0..1000).map(|i| (ms(i), 64)).collect();
    let out = drive(&mut m, t0, &arrivals);
    assert_eq!(out.len(), 1000);
    let inversions = out.windows(2).filter(|w| w[1].0 < w[0].0).count();
    assert!((50..150).contains(&inversions), "{inversions} inversions");
}

#[test]
fn duplicated_packets_leave_twice_one_after_the_other() {
    let t0 = Instant::now();
    let c = cfg(|c| {
        drop(
            c.set_duplicate_percent(100.0)
                .and_then(|c| c.set_delay_ms(2.0)),
        )
    });
    let mut m = LinkModel::new(c, 1);
    let v = m.handle_packet(t0, pkt(9, 64));
    assert!(matches!(v, Verdict::Scheduled { duplicate_at: Some(d), at, .. } if d == at));
    let out = drive(&mut m, t0, &[]);
    assert_eq!(out, vec![(9, t0 + ms(2)), (9, t0 + ms(2))]);
    assert_eq!(m.stats().duplicated, 1);
    assert_eq!(m.stats().delivered, 2);
}

fn busy_config() -> DirectionConfig {
    cfg(|c| {
        drop(
            c.set_loss_percent(10.0)
                .and_then(|c| c.set_delay_ms(3.0))
                .and_then(|c| c.set_jitter_ms(2.0))
                .and_then(|c| c.set_rate_mbit(Some(2.0)))
                .and_then(|c| c.set_queue_packets(4))
                .and_then(|c| c.set_reorder_percent(5.0))
                .and_then(|c| c.set_duplicate_percent(5.0)),
        )
    })
}

#[test]
fn same_seed_gives_the_same_schedule_and_another_seed_does_not() {
    let t0 = Instant::now();
    let arrivals: Vec<_> = (0..500)
        .map(|i| (Duration::from_micros(i * 700), 200 + (i as usize % 900)))
        .collect();
    let run = |seed| {
        let mut m = LinkModel::new(busy_config(), seed);
        let out: Vec<_> = drive(&mut m, t0, &arrivals)
            .into_iter()
            .map(|(i, t)| (i, t - t0))
            .collect();
        (out, m.stats())
    };
    assert_eq!(run(11), run(11));
    assert_ne!(run(11).0, run(12).0);
}

proptest! {
    #[test]
    fn without_loss_or_reorder_packets_leave_in_fifo_order_and_never_before_their_delay(
        gaps_us in proptest::collection::vec((0u64..5_000, 20usize..1500), 1..200),
        delay_ms in 0u64..50,
        jitter_ms in 0u64..10,
        rate in proptest::option::of(1u32..100),
        seed in any::<u64>(),
    ) {
        let c = cfg(|c| drop(
            c.set_delay_ms(delay_ms as f64)
                .and_then(|c| c.set_jitter_ms(jitter_ms as f64))
                .and_then(|c| c.set_rate_mbit(rate.map(f64::from)))
                .and_then(|c| c.set_queue_packets(usize::MAX)),
        ));
        let t0 = Instant::now();
        let mut at = Duration::ZERO;
        let arrivals: Vec<_> = gaps_us.iter().map(|&(g, len)| { at += Duration::from_micros(g); (at, len) }).collect();
        let mut m = LinkModel::new(c, seed);
        let out = drive(&mut m, t0, &arrivals);
        prop_assert_eq!(out.len(), arrivals.len());
        let earliest = Duration::from_millis(delay_ms.saturating_sub(jitter_ms));
        for (k, &(i, left)) in out.iter().enumerate() {
            prop_assert_eq!(i as usize, k);
            prop_assert!(left >= t0 + arrivals[k].0 + earliest);
        }
    }
}
