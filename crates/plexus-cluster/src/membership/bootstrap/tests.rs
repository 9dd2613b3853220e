//! The bootstrap rule on the simulator: members that discover each other
//! form exactly one cluster; a member that discovers nothing useful keeps
//! trying. Virtual time; each seed runs in milliseconds.

use std::sync::Arc;
use std::time::Duration;

use plexus_sim::{check_seeds, LinkModel, Sim};
use rand::seq::SliceRandom;
use rand::Rng;

use crate::config::ClusterConfig;
use crate::event::ClusterEvent;
use crate::member::MemberState;
use crate::membership::Membership;
use crate::sim::{address, SimMember};

fn lan() -> LinkModel {
    LinkModel {
        latency: Duration::from_micros(500),
        jitter: Duration::from_micros(200),
        ..LinkModel::default()
    }
}

fn member(config: &ClusterConfig, i: usize, seed: u64, sim: &Sim<SimMember>) -> SimMember {
    let mut config = config.clone();
    config.rng_seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64;
    SimMember {
        // The address and settings are valid by construction.
        membership: Membership::with_discovery(config, address(i), 1, sim.now())
            .expect("simulated member settings are valid"),
    }
}

/// Hands member `i` the discovered seeds `seeds` (member indices).
fn discover(sim: &mut Sim<SimMember>, i: usize, seeds: &[usize]) {
    let now = sim.now();
    let list: Vec<Arc<str>> = seeds.iter().map(|&j| Arc::from(address(j))).collect();
    if let Some(p) = sim.process_mut(i) {
        p.membership.set_seeds(now, list);
    }
    sim.wake(i);
}

/// Whether each of members `0..n` sees all of them up.
fn converged(sim: &Sim<SimMember>, n: usize) -> bool {
    (0..n).all(|i| {
        sim.process(i).is_some_and(|p| {
            (0..n).all(|j| {
                p.membership
                    .member(&address(j))
                    .is_some_and(|m| m.state == MemberState::Up)
            })
        })
    })
}

/// The members that formed a cluster.
fn formers(sim: &Sim<SimMember>) -> Vec<usize> {
    sim.events()
        .iter()
        .filter(|r| matches!(r.event, ClusterEvent::Formed { .. }))
        .map(|r| r.process)
        .collect()
}

fn print_events(sim: &Sim<SimMember>) {
    for r in sim.events() {
        eprintln!("{:?} {} {:?}", r.at, r.process, r.event);
    }
}

#[test]
fn every_member_given_every_address_forms_exactly_one_cluster() {
    check_seeds(0..20, |seed| {
        let n = 5;
        let config = ClusterConfig::default();
        let mut sim: Sim<SimMember> = Sim::new(seed, lan());
        // Members start over 3 s in the simulation's random order, each
        // discovering all five addresses (in its own order) up to 2 s
        // after it started.
        let mut plan: Vec<(Duration, usize, bool)> = Vec::new();
        for i in 0..n {
            let start = Duration::from_millis(sim.rng().gen_range(0..3_000));
            let found = start + Duration::from_millis(sim.rng().gen_range(0..2_000));
            plan.push((start, i, false));
            plan.push((found, i, true));
        }
        // Starts before discoveries at one instant; members in index order.
        plan.sort_by_key(|&(at, i, found)| (at, found, i));
        let mut added = 0;
        for (at, i, found) in plan {
            let wait = at.saturating_sub(sim.elapsed());
            sim.run_for(wait);
            if found {
                let mut all: Vec<usize> = (0..n).collect();
                all.shuffle(sim.rng());
                discover(&mut sim, i, &all);
            } else {
                // Processes are added in index order, so member `i` is at
                // address `i`: add the ones not added yet up to `i`.
                while added <= i {
                    let m = member(&config, added, seed, &sim);
                    sim.add(m);
                    added += 1;
                }
            }
        }
        let done = sim.run_until(Duration::from_secs(60), |s| converged(s, n));
        if !done || formers(&sim) != [0] {
            print_events(&sim);
        }
        assert!(done, "seed {seed}: did not converge");
        assert_eq!(formers(&sim), [0], "seed {seed}: exactly the lowest forms");
        let mut ups: Vec<u64> = (0..n)
            .filter_map(|i| sim.process(0)?.membership.member(&address(i)))
            .map(|m| m.up_number)
            .collect();
        ups.sort_unstable();
        ups.dedup();
        assert_eq!(ups.len(), n, "each member went up once");
    });
}

#[test]
fn members_that_discover_each_other_gradually_form_one_cluster() {
    // DNS answers grow as pods get addresses, and some members' answers
    // lag behind (caches). With bootstrap_min_seeds at the number of
    // members, only the full list lets anyone form.
    check_seeds(0..20, |seed| {
        let n = 5;
        let config = ClusterConfig {
            bootstrap_min_seeds: n,
            ..ClusterConfig::default()
        };
        let mut sim: Sim<SimMember> = Sim::new(seed, lan());
        for i in 0..n {
            let m = member(&config, i, seed, &sim);
            sim.add(m);
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(sim.rng());
        // Step k: the first k members of `order` are in DNS; each of them
        // sees a prefix that holds itself, possibly a stale one.
        for k in 1..=n {
            for (pos, &i) in order.iter().enumerate().take(k) {
                let seen = sim.rng().gen_range(pos + 1..=k);
                let prefix = order[..seen].to_vec();
                discover(&mut sim, i, &prefix);
            }
            let step = Duration::from_millis(sim.rng().gen_range(200..1_500));
            sim.run_for(step);
        }
        for &i in &order {
            discover(&mut sim, i, &order);
        }
        let done = sim.run_until(Duration::from_secs(60), |s| converged(s, n));
        if !done || formers(&sim).len() != 1 {
            print_events(&sim);
        }
        assert!(done, "seed {seed}: did not converge");
        assert_eq!(formers(&sim), [0], "seed {seed}: exactly the lowest forms");
    });
}

#[test]
fn a_member_that_discovers_only_itself_forms_only_with_min_seeds_1() {
    for (min, forms) in [(2, false), (1, true)] {
        let config = ClusterConfig {
            bootstrap_min_seeds: min,
            ..ClusterConfig::default()
        };
        let mut sim: Sim<SimMember> = Sim::new(1, lan());
        let m = member(&config, 0, 1, &sim);
        sim.add(m);
        discover(&mut sim, 0, &[0]);
        sim.run_for(Duration::from_secs(600));
        let view = &sim.process(0).expect("no crash here").membership;
        assert_eq!(view.local().state == MemberState::Up, forms, "min {min}");
        assert_eq!(formers(&sim).len(), usize::from(forms), "min {min}");
    }
}

#[test]
fn a_member_whose_seeds_point_at_nothing_keeps_trying_in_bounded_memory() {
    let config = ClusterConfig {
        max_members: 100,
        ..ClusterConfig::default()
    };
    let mut sim: Sim<SimMember> = Sim::new(3, lan());
    // One process, at simulator address 0, calling itself `sim:5`: every
    // seed below names nobody, and `sim:1` is lower than it, so the
    // bootstrap rule never lets it form.
    let membership =
        Membership::with_discovery(config, "sim:5", 1, sim.now()).expect("valid settings");
    sim.add(SimMember { membership });
    let mut seeds: Vec<Arc<str>> = vec![
        Arc::from("sim:1"),
        Arc::from("sim:5"),
        Arc::from(""),
        Arc::from("x".repeat(300)),
    ];
    seeds.extend((1_000..11_000).map(|i| Arc::from(address(i))));
    let now = sim.now();
    if let Some(p) = sim.process_mut(0) {
        p.membership.set_seeds(now, seeds);
    }
    sim.wake(0);
    sim.run_for(Duration::from_secs(3_600));
    let view = &sim.process(0).expect("no crash here").membership;
    assert_eq!(view.local().state, MemberState::Joining);
    assert!(formers(&sim).is_empty());
    assert!(
        view.seeds().len() <= 100,
        "{} seeds kept",
        view.seeds().len()
    );
    assert!(view.seeds().iter().all(|s| !s.is_empty() && s.len() <= 255));
    assert_eq!(view.members().len(), 1, "knows only itself");
    // One join per join_retry (1 s), nothing else.
    let sent = view.stats().packets_sent;
    assert!((3_600..=3_601).contains(&sent), "{sent} packets in an hour");
}

#[test]
fn a_changed_seed_list_restarts_the_count_of_tried_seeds() {
    let config = ClusterConfig::default();
    let mut sim: Sim<SimMember> = Sim::new(4, lan());
    let m = member(&config, 0, 4, &sim);
    sim.add(m);
    // sim:0 is the lowest of {0, 7, 8}; nobody answers at 7 or 8. Each
    // new list (every 1.5 s, before both were tried) restarts the count.
    for k in 0..20u64 {
        let other = 7 + (k % 2) as usize;
        discover(&mut sim, 0, &[0, other, 9]);
        sim.run_for(Duration::from_millis(1_500));
    }
    assert!(formers(&sim).is_empty(), "the list never held still");
    // Held still: tried 7 and 9 (two rounds), then forms at the third.
    discover(&mut sim, 0, &[0, 7, 9]);
    sim.run_for(Duration::from_millis(2_500));
    assert_eq!(formers(&sim), [0]);
}
