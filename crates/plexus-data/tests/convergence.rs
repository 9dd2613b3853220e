//! Replicators converge in the deterministic simulator under loss,
//! duplication, reordering, partitions, crashes and restarts; rounds (as
//! virtual time) and bytes are printed for the record (`--nocapture`).

use std::time::Duration;

use plexus_data::crdt::{GCounter, ORSet};
use plexus_data::sim::DataSim;
use plexus_data::{Consistency, Crdt, Event, Key, ReplicatorConfig, UpdateError};
use plexus_sim::{check_seeds, LinkModel};
use rand::Rng;

fn lossy() -> LinkModel {
    LinkModel {
        loss: 0.2,
        duplicate: 0.1,
        reorder: 0.1,
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(5),
    }
}

fn lan() -> LinkModel {
    LinkModel {
        latency: Duration::from_millis(1),
        ..LinkModel::default()
    }
}

/// The update events that ended, as `(request, result)`.
fn finished(sim: &mut DataSim) -> Vec<(u64, Result<(), UpdateError>)> {
    sim.sim
        .take_events()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::UpdateDone {
                request, result, ..
            } => Some((request, result)),
            _ => None,
        })
        .collect()
}

#[test]
fn counters_converge_under_loss_duplication_and_reordering() {
    check_seeds(0..20, |seed| {
        let mut sim = DataSim::new(5, ReplicatorConfig::default(), seed, lossy());
        let key = Key::<GCounter>::new("hits");
        let mut total = 0u128;
        for _ in 0..200 {
            let i = sim.sim.rng().gen_range(0..5);
            let n = sim.sim.rng().gen_range(1..10u64);
            total += u128::from(n);
            sim.update(i, &key, Consistency::Local, |c, me| c.increment(me, n))
                .unwrap();
            let pause = Duration::from_millis(sim.sim.rng().gen_range(0..20));
            sim.run_for(pause);
        }
        assert!(
            sim.run_until_converged(&key, Duration::from_secs(60)),
            "not converged"
        );
        for i in 0..5 {
            assert_eq!(sim.value(i, &key).unwrap().value(), total, "replica {i}");
        }
        if seed == 0 {
            println!(
                "5 replicas, 200 updates, 20 % loss: converged {:?} after the last update, {} bytes in all",
                sim.sim.elapsed(),
                sim.bytes_sent()
            );
        }
    });
}

#[test]
fn an_orset_converges_across_a_healed_partition_and_adds_win() {
    check_seeds(0..20, |seed| {
        let mut sim = DataSim::new(4, ReplicatorConfig::default(), seed, lossy());
        sim.register::<ORSet<String>>();
        let key = Key::<ORSet<String>>::new("tags");
        sim.update(0, &key, Consistency::Local, |s, me| s.add(me, "x".into()))
            .unwrap();
        assert!(sim.run_until_converged(&key, Duration::from_secs(30)));
        sim.sim.partition(&[0, 1], &[2, 3]);
        sim.update(1, &key, Consistency::Local, |s, _| {
            s.remove(&"x".to_string())
        })
        .unwrap();
        sim.update(2, &key, Consistency::Local, |s, me| s.add(me, "x".into()))
            .unwrap();
        sim.update(0, &key, Consistency::Local, |s, me| s.add(me, "a".into()))
            .unwrap();
        sim.update(3, &key, Consistency::Local, |s, me| s.add(me, "b".into()))
            .unwrap();
        sim.update(3, &key, Consistency::Local, |s, me| {
            s.add(me, "gone".into())
        })
        .unwrap();
        let seen = sim.sim.run_until(Duration::from_secs(30), |s| {
            s.process(2).is_some_and(|p| {
                p.replicator
                    .value(&key)
                    .is_ok_and(|v| v.is_some_and(|v| v.contains(&"gone".to_string())))
            })
        });
        assert!(seen);
        sim.update(2, &key, Consistency::Local, |s, _| {
            s.remove(&"gone".to_string())
        })
        .unwrap();
        sim.run_for(Duration::from_secs(5));
        assert!(!sim.converged(&key), "the partition let something through");
        sim.sim.heal();
        assert!(sim.run_until_converged(&key, Duration::from_secs(60)));
        let set = sim.value(0, &key).unwrap();
        let mut elements: Vec<&String> = set.iter().collect();
        elements.sort();
        assert_eq!(elements, ["a", "b", "x"]);
    });
}

#[test]
fn a_majority_write_completes_with_a_member_down_and_all_times_out() {
    let mut sim = DataSim::new(3, ReplicatorConfig::default(), 1, lan());
    let key = Key::<GCounter>::new("orders");
    sim.crash(2);
    let majority = sim
        .update(0, &key, Consistency::Majority, |c, me| c.increment(me, 1))
        .unwrap();
    let all = sim
        .update_with_timeout(
            0,
            &key,
            Consistency::All,
            Duration::from_secs(2),
            |c, me| c.increment(me, 1),
        )
        .unwrap();
    sim.run_for(Duration::from_secs(3));
    let done = finished(&mut sim);
    assert!(done.contains(&(majority, Ok(()))), "{done:?}");
    let timed_out = done.iter().find(|(r, _)| *r == all).expect("ended");
    assert!(
        matches!(
            &timed_out.1,
            Err(UpdateError::Timeout {
                acked: 2,
                needed: 3,
                ..
            })
        ),
        "{timed_out:?}"
    );
    // The update was acknowledged by replica 1 before it completed.
    assert!(sim.value(1, &key).unwrap().value() >= 1);
    assert_eq!(
        sim.update(0, &key, Consistency::Count(4), |c, me| c.increment(me, 1)),
        Err(UpdateError::NotEnoughMembers {
            key: "orders".into(),
            needed: 4,
            members: 3
        })
    );
}

#[test]
fn durable_keys_survive_a_whole_cluster_restart() {
    check_seeds(0..5, |seed| {
        let config = ReplicatorConfig {
            durable: vec!["durable/*".into()],
            ..ReplicatorConfig::default()
        };
        let mut sim = DataSim::new(3, config, seed, lossy());
        sim.register::<GCounter>();
        let durable = Key::<GCounter>::new("durable/visits");
        let volatile = Key::<GCounter>::new("visits");
        let mut requests = Vec::new();
        for i in 0..3 {
            for _ in 0..5 {
                requests.push(
                    sim.update(i, &durable, Consistency::Local, |c, me| c.increment(me, 2))
                        .unwrap(),
                );
                sim.update(i, &volatile, Consistency::Local, |c, me| c.increment(me, 1))
                    .unwrap();
            }
        }
        // Every update of a durable key completed only once its disk held
        // it: the events are already there, no time passed.
        let done = finished(&mut sim);
        for r in &requests {
            assert!(done.contains(&(*r, Ok(()))), "{r}: {done:?}");
        }
        for i in 0..3 {
            sim.restart(i);
        }
        // Each recovered its own updates from its disk.
        for i in 0..3 {
            assert!(sim.value(i, &durable).unwrap().value() >= 10, "replica {i}");
            assert_eq!(sim.value(i, &volatile), None);
        }
        assert!(sim.run_until_converged(&durable, Duration::from_secs(60)));
        assert_eq!(sim.value(0, &durable).unwrap().value(), 30);
    });
}

#[test]
fn a_removed_members_share_is_pruned_and_the_value_kept() {
    check_seeds(0..10, |seed| {
        let mut sim = DataSim::new(4, ReplicatorConfig::default(), seed, lossy());
        sim.register::<ORSet<u32>>();
        let key = Key::<GCounter>::new("hits");
        let set = Key::<ORSet<u32>>::new("seen");
        for i in 0..4 {
            sim.update(i, &key, Consistency::Local, |c, me| c.increment(me, 5))
                .unwrap();
            sim.update(i, &set, Consistency::Local, |s, me| s.add(me, i as u32))
                .unwrap();
        }
        assert!(sim.run_until_converged(&key, Duration::from_secs(30)));
        assert!(sim.run_until_converged(&set, Duration::from_secs(30)));
        let gone = sim.replica(3);
        sim.remove(3);
        let pruned = sim.sim.run_until(Duration::from_secs(120), |s| {
            (0..3).all(|i| {
                s.process(i).is_some_and(|p| {
                    let r = &p.replicator;
                    let c = r.value(&key).unwrap().unwrap();
                    let o = r.value(&set).unwrap().unwrap();
                    !c.needs_pruning_from(gone) && !o.needs_pruning_from(gone)
                })
            })
        });
        assert!(pruned, "replica 3's entries were not pruned");
        assert!(sim.run_until_converged(&key, Duration::from_secs(30)));
        assert!(sim.run_until_converged(&set, Duration::from_secs(30)));
        for i in 0..3 {
            assert_eq!(sim.value(i, &key).unwrap().value(), 20, "replica {i}");
            assert_eq!(sim.value(i, &set).unwrap().len(), 4, "replica {i}");
        }
        // Later increments still add up.
        sim.update(1, &key, Consistency::Local, |c, me| c.increment(me, 1))
            .unwrap();
        assert!(sim.run_until_converged(&key, Duration::from_secs(30)));
        assert_eq!(sim.value(0, &key).unwrap().value(), 21);
    });
}

#[test]
fn a_joiner_catches_up_on_many_keys_through_digests() {
    let config = ReplicatorConfig {
        durable: vec!["*".into()],
        ..ReplicatorConfig::default()
    };
    let mut sim = DataSim::new(3, config, 3, lan());
    sim.register::<GCounter>();
    let keys: Vec<Key<GCounter>> = (0..5_000).map(|k| Key::new(format!("k{k}"))).collect();
    for key in &keys {
        sim.update(0, key, Consistency::Local, |c, me| c.increment(me, 1))
            .unwrap();
    }
    sim.run_for(Duration::from_secs(20));
    assert!(keys.iter().all(|k| sim.converged(k)));

    // Replica 2 goes down; 50 keys change meanwhile; it comes back with
    // its disk, holding 99 % of the state.
    sim.crash(2);
    for key in keys.iter().take(50) {
        sim.update(1, key, Consistency::Local, |c, me| c.increment(me, 1))
            .unwrap();
    }
    sim.run_for(Duration::from_secs(2));
    let before = sim.stats(0).anti_entropy_bytes_sent + sim.stats(1).anti_entropy_bytes_sent;
    let start = sim.sim.elapsed();
    sim.restart(2);
    let caught_up = sim.sim.run_until(Duration::from_secs(60), |s| {
        keys.iter().all(|k| {
            let v = |i| {
                s.process(i)
                    .and_then(|p| p.replicator.value(k).ok().flatten().cloned())
            };
            v(2).is_some() && v(2) == v(1)
        })
    });
    assert!(caught_up);
    let sent = sim.stats(0).anti_entropy_bytes_sent + sim.stats(1).anti_entropy_bytes_sent - before;
    let full: u64 = keys
        .iter()
        .map(|k| (k.name().len() + 20) as u64)
        .sum::<u64>();
    println!(
        "joiner with 99 % of 5,000 keys: caught up in {:?}, {sent} bytes of anti-entropy (full state is about {full})",
        sim.sim.elapsed() - start
    );
    assert!(
        sent * 4 < full,
        "{sent} bytes for a joiner that had most of {full}"
    );
}

#[test]
fn a_chaos_run_loses_no_acknowledged_update() {
    check_seeds(0..20, |seed| {
        let config = ReplicatorConfig {
            durable: vec!["*".into()],
            ..ReplicatorConfig::default()
        };
        let mut sim = DataSim::new(5, config, seed, lossy());
        sim.register::<ORSet<u32>>();
        let counter = Key::<GCounter>::new("counter");
        let set = Key::<ORSet<u32>>::new("set");
        let mut total = 0u128;
        let mut added = Vec::new();
        for step in 0..300u32 {
            let roll = sim.sim.rng().gen_range(0..100);
            let i = sim.sim.rng().gen_range(0..5);
            match roll {
                0..=59 => {
                    let n = sim.sim.rng().gen_range(1..5u64);
                    if sim
                        .update(i, &counter, Consistency::Local, |c, me| c.increment(me, n))
                        .is_ok()
                    {
                        total += u128::from(n);
                    }
                }
                60..=84 => {
                    if sim
                        .update(i, &set, Consistency::Local, |s, me| s.add(me, step))
                        .is_ok()
                    {
                        added.push(step);
                    }
                }
                85..=91 => sim.restart(i),
                92..=96 => {
                    let j = (i + 1 + sim.sim.rng().gen_range(0..4)) % 5;
                    sim.sim
                        .partition(&[i, j], &[(i + 2) % 5, (i + 3) % 5, (i + 4) % 5]);
                }
                _ => sim.sim.heal(),
            }
            let pause = Duration::from_millis(sim.sim.rng().gen_range(0..50));
            sim.run_for(pause);
        }
        // Updates acknowledged at Local on a durable key were on disk: even
        // the restarted replicas' updates are all there in the end.
        let updates = finished(&mut sim);
        assert!(updates.iter().all(|(_, r)| r.is_ok()), "{updates:?}");
        sim.sim.heal();
        assert!(sim.run_until_converged(&counter, Duration::from_secs(120)));
        assert!(sim.run_until_converged(&set, Duration::from_secs(120)));
        assert_eq!(sim.value(0, &counter).unwrap().value(), total);
        let mut elements: Vec<u32> = sim.value(0, &set).unwrap().iter().copied().collect();
        elements.sort_unstable();
        assert_eq!(elements, added);
    });
}
