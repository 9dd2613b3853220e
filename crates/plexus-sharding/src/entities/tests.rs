use super::*;
use proptest::prelude::*;

fn id(n: u32) -> EntityId {
    EntityId::new(&n.to_string()).unwrap()
}

const IDLE: Duration = Duration::from_secs(120);

#[test]
fn the_least_recently_used_makes_room() {
    let t0 = Instant::now();
    let mut e = Entities::new(2, IDLE);
    assert_eq!(e.touch(&id(1), t0), Touch::Activate { evict: None });
    assert_eq!(e.touch(&id(2), t0), Touch::Activate { evict: None });
    assert_eq!(e.touch(&id(1), t0), Touch::Active);
    // 2 is now the least recently used, though both were used at t0.
    assert_eq!(e.touch(&id(3), t0), Touch::Activate { evict: Some(id(2)) });
    assert_eq!(e.touch(&id(2), t0), Touch::Stopping);
    assert_eq!((e.running(), e.active()), (2, 3));
    e.stopped(&id(2));
    assert_eq!(e.active(), 2);
    assert_eq!(e.touch(&id(2), t0), Touch::Activate { evict: Some(id(1)) });
}

#[test]
fn idle_entities_are_passivated_once_at_their_deadline() {
    let t0 = Instant::now();
    let mut e = Entities::new(10, IDLE);
    e.touch(&id(1), t0);
    e.touch(&id(2), t0 + Duration::from_secs(30));
    assert_eq!(e.poll_timeout(), Some(t0 + IDLE));
    assert!(e
        .handle_timeout(t0 + IDLE - Duration::from_millis(1))
        .is_empty());
    assert_eq!(e.handle_timeout(t0 + IDLE), [id(1)]);
    assert!(e.handle_timeout(t0 + IDLE).is_empty(), "named once");
    assert_eq!(e.poll_timeout(), Some(t0 + Duration::from_secs(30) + IDLE));
    // A message keeps it alive.
    e.touch(&id(2), t0 + IDLE);
    assert!(e
        .handle_timeout(t0 + Duration::from_secs(30) + IDLE)
        .is_empty());
}

proptest! {
    /// Whatever the traffic: never more than `max_active` run, a touched
    /// entity is active, and an eviction takes the least recently used.
    #[test]
    fn running_entities_stay_bounded(
        max in 1usize..6,
        ops in proptest::collection::vec((0u32..12, 0u64..50, any::<bool>()), 0..300),
    ) {
        let t0 = Instant::now();
        let mut e = Entities::new(max, Duration::from_secs(100));
        let mut now = t0;
        // The model: last use of each running entity, in touch order.
        let mut model: Vec<EntityId> = Vec::new();
        for (n, advance, stop) in ops {
            now += Duration::from_secs(advance);
            for idle in e.handle_timeout(now) {
                prop_assert_eq!(Some(&idle), model.first());
                model.remove(0);
                if stop {
                    e.stopped(&idle);
                }
            }
            let who = id(n);
            match e.touch(&who, now) {
                Touch::Active => {
                    let at = model.iter().position(|m| *m == who);
                    prop_assert!(at.is_some());
                    model.remove(at.unwrap());
                    model.push(who);
                }
                Touch::Activate { evict } => {
                    prop_assert!(!model.contains(&who));
                    if let Some(lru) = evict {
                        prop_assert_eq!(Some(&lru), model.first());
                        model.remove(0);
                        e.stopped(&lru);
                    }
                    model.push(who);
                }
                Touch::Stopping => {
                    prop_assert!(!model.contains(&who));
                    e.stopped(&who);
                }
            }
            prop_assert!(e.running() <= max);
            prop_assert_eq!(e.running(), model.len());
        }
    }
}
