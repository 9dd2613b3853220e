use super::*;
use proptest::prelude::*;

fn region(n: u8) -> Arc<str> {
    format!("tcp://198.51.100.{n}:4000").into()
}

/// Every home is in its region's set and every region's shard has that
/// home: one home per shard.
fn consistent(a: &Allocation) {
    let mut seen = 0;
    for (address, hosted) in a.regions() {
        for shard in hosted {
            assert_eq!(a.home(*shard), Some(address), "{shard}");
            seen += 1;
        }
    }
    assert_eq!(seen, a.homes.len());
}

fn spread(a: &Allocation) -> (usize, usize) {
    let counts: Vec<usize> = a.regions().map(|(_, h)| h.len()).collect();
    (
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().copied().max().unwrap_or(0),
    )
}

/// Plans and applies rebalances until nothing is left to move; returns
/// every move made.
fn settle(a: &mut Allocation, rule: Rebalance) -> Vec<Move> {
    let mut all = Vec::new();
    loop {
        let moves = a.rebalance(rule, &BTreeSet::new());
        if moves.is_empty() {
            return all;
        }
        for m in &moves {
            assert!(a.apply(m.shard, &m.to));
        }
        all.extend(moves);
    }
}

fn filled(regions: u8, shards: u32) -> Allocation {
    let mut a = Allocation::new(shards);
    for r in 0..regions {
        a.add_region(region(r));
    }
    for s in 0..shards {
        a.allocate(ShardId(s)).unwrap();
    }
    a
}

#[test]
fn no_region_and_no_such_shard_are_errors() {
    let mut a = Allocation::new(10);
    assert_eq!(a.allocate(ShardId(0)), Err(AllocateError::NoRegions));
    a.add_region(region(1));
    assert_eq!(
        a.allocate(ShardId(10)),
        Err(AllocateError::NoSuchShard {
            shard: ShardId(10),
            shards: 10
        })
    );
    assert_eq!(a.allocate(ShardId(9)), Ok(region(1)));
}

#[test]
fn a_shard_keeps_its_home_and_new_ones_go_to_the_least_loaded() {
    let mut a = Allocation::new(6);
    a.add_region(region(2));
    a.add_region(region(1));
    // Ties by address.
    assert_eq!(a.allocate(ShardId(0)).unwrap(), region(1));
    assert_eq!(a.allocate(ShardId(1)).unwrap(), region(2));
    assert_eq!(a.allocate(ShardId(0)).unwrap(), region(1));
    assert_eq!(a.allocate(ShardId(2)).unwrap(), region(1));
    a.add_region(region(3));
    assert_eq!(a.allocate(ShardId(3)).unwrap(), region(3));
    consistent(&a);
}

#[test]
fn a_report_does_not_take_a_shard_from_its_home() {
    let mut a = Allocation::new(4);
    assert_eq!(a.adopt(region(1), ShardId(2)), Ok(true));
    assert_eq!(a.adopt(region(2), ShardId(2)), Ok(false));
    assert_eq!(a.adopt(region(1), ShardId(2)), Ok(true));
    assert_eq!(a.home(ShardId(2)), Some(&region(1)));
    assert!(a.adopt(region(1), ShardId(4)).is_err());
    consistent(&a);
}

#[test]
fn moves_under_way_are_neither_repeated_nor_over_the_budget() {
    let mut a = Allocation::new(20);
    a.add_region(region(1));
    for s in 0..20 {
        a.allocate(ShardId(s)).unwrap();
    }
    a.add_region(region(2));
    let rule = Rebalance {
        threshold: 2,
        max_moves: 4,
    };
    let first = a.rebalance(rule, &BTreeSet::new());
    assert_eq!(first.len(), 4);
    let moving: BTreeSet<ShardId> = first[..3].iter().map(|m| m.shard).collect();
    let next = a.rebalance(rule, &moving);
    assert_eq!(next.len(), 1, "the budget less the three under way");
    assert!(!moving.contains(&next[0].shard));
}

#[test]
fn a_hand_off_to_a_region_that_left_leaves_the_shard_homeless() {
    let mut a = filled(2, 4);
    let shard = ShardId(0);
    let to = region(9);
    assert!(!a.apply(shard, &to));
    assert_eq!(a.home(shard), None);
    consistent(&a);
}

proptest! {
    #[test]
    fn allocating_keeps_the_counts_within_one(regions in 1u8..12, shards in 1u32..400) {
        let a = filled(regions, shards);
        consistent(&a);
        let (low, high) = spread(&a);
        prop_assert!(high - low <= 1, "{low}..{high}");
    }

    #[test]
    fn a_join_moves_shards_only_to_the_newcomer(regions in 1u8..12, shards in 1u32..400) {
        let mut a = filled(regions, shards);
        let newcomer = region(200);
        a.add_region(newcomer.clone());
        let moves = settle(&mut a, Rebalance::for_shards(shards));
        prop_assert!(moves.iter().all(|m| m.to == newcomer), "{moves:?}");
        // Each shard moved at most once: no shard goes anywhere twice.
        let distinct: BTreeSet<ShardId> = moves.iter().map(|m| m.shard).collect();
        prop_assert_eq!(distinct.len(), moves.len());
        consistent(&a);
        let (low, high) = spread(&a);
        prop_assert!(high - low <= 1, "{low}..{high}");
    }

    #[test]
    fn a_leave_moves_only_the_leavers_shards(regions in 2u8..12, shards in 1u32..400, leaver in 0u8..12) {
        let mut a = filled(regions, shards);
        let before: BTreeMap<ShardId, Arc<str>> = a.homes.clone();
        let leaver = region(leaver % regions);
        let homeless = a.remove_region(&leaver);
        for shard in &homeless {
            a.allocate(*shard).unwrap();
        }
        prop_assert!(settle(&mut a, Rebalance::for_shards(shards)).is_empty());
        for (shard, home) in &before {
            if *home != leaver {
                prop_assert_eq!(a.home(*shard), Some(home));
            }
        }
        consistent(&a);
        let (low, high) = spread(&a);
        prop_assert!(high - low <= 1, "{low}..{high}");
    }

    /// A graceful leave hands over every shard of the leaver in one
    /// rebalance, only those, to regions that stay, evenly; the leaver gets
    /// no new shard meanwhile.
    #[test]
    fn a_drained_region_hands_over_only_its_shards(regions in 2u8..12, shards in 1u32..400, leaver in 0u8..12) {
        let mut a = filled(regions, shards);
        let before: BTreeMap<ShardId, Arc<str>> = a.homes.clone();
        let leaver = region(leaver % regions);
        let theirs = before.values().filter(|h| **h == leaver).count();
        prop_assert!(a.drain(&leaver));
        let rule = Rebalance::for_shards(shards);
        let first = a.rebalance(rule, &BTreeSet::new());
        prop_assert!(first.len() >= theirs, "{} moves for {theirs} shards", first.len());
        prop_assert!(first.iter().take(theirs).all(|m| m.from == leaver && m.to != leaver));
        for m in &first {
            prop_assert!(a.apply(m.shard, &m.to));
        }
        settle(&mut a, rule);
        prop_assert_eq!(a.regions().find(|(r, _)| **r == leaver).map(|(_, h)| h.len()), Some(0));
        for (shard, home) in &before {
            if *home != leaver {
                prop_assert_eq!(a.home(*shard), Some(home));
            }
        }
        let homeless = a.remove_region(&leaver);
        prop_assert!(homeless.is_empty());
        consistent(&a);
        let (low, high) = spread(&a);
        prop_assert!(high - low <= 1, "{low}..{high}");
    }

    /// Any sequence of joins, leaves, allocations and completed hand-offs
    /// keeps one home per shard, and a rebalance run to its end leaves the
    /// load under the threshold.
    #[test]
    fn any_history_stays_consistent(ops in proptest::collection::vec((0u8..4, 0u8..8, 0u32..64), 1..200), threshold in 2u32..5) {
        let mut a = Allocation::new(64);
        let rule = Rebalance { threshold, max_moves: 3 };
        for (op, r, s) in ops {
            match op {
                0 => { a.add_region(region(r)); }
                1 => { a.remove_region(&region(r)); }
                2 => { let _ = a.allocate(ShardId(s)); }
                _ => {
                    for m in a.rebalance(rule, &BTreeSet::new()) {
                        a.apply(m.shard, &m.to);
                    }
                }
            }
            consistent(&a);
        }
        settle(&mut a, rule);
        let (low, high) = spread(&a);
        prop_assert!(high < low + threshold as usize, "{low}..{high}");
    }
}

#[test]
fn a_pin_takes_every_shard_and_a_leaving_pin_takes_none() {
    let mut a = filled(3, 12);
    let rule = Rebalance::for_shards(12);
    assert!(a.pin(Some(region(2))));
    assert!(!a.pin(Some(region(2))), "the same pin is no change");
    let moves = settle(&mut a, rule);
    assert_eq!(moves.len(), 8, "the shards of the two other regions");
    assert!((0..12).all(|s| a.home(ShardId(s)) == Some(&region(2))));
    consistent(&a);
    // A new shard goes to the pin, not to the least loaded.
    let mut b = Allocation::new(4);
    b.add_region(region(0));
    b.add_region(region(1));
    b.pin(Some(region(1)));
    assert_eq!(b.allocate(ShardId(0)), Ok(region(1)));
    assert_eq!(b.allocate(ShardId(1)), Ok(region(1)));
    // A pin that leaves, or is not a region, pins nothing.
    b.drain(&region(1));
    assert_eq!(b.allocate(ShardId(2)), Ok(region(0)));
    b.pin(Some(region(9)));
    assert_eq!(b.allocate(ShardId(3)), Ok(region(0)));
    // Shards already moving are left to their hand-off.
    let moving: BTreeSet<ShardId> = [ShardId(0)].into();
    b.pin(Some(region(0)));
    let moves = b.rebalance(rule, &moving);
    assert_eq!(
        moves,
        [Move {
            shard: ShardId(1),
            from: region(1),
            to: region(0)
        }]
    );
}
