//! Views on the simulator: members join at once, each member's events are
//! replayed onto its view batch by batch, as the node driver does.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_sim::{check_seeds, Address, LinkModel, Protocol, Sim};

use super::*;
use crate::config::ClusterConfig;
use crate::membership::Membership;
use crate::sim::{address, index};

/// An event with the member list reported with it, and the list the
/// membership itself held when the event was drained.
struct Seen {
    event: ClusterEvent,
    reported: Vec<Member>,
    batch_end: Vec<Member>,
}

/// A membership whose events are replayed onto a [`View`] after every
/// input, like the node driver's flush.
struct Viewed {
    membership: Membership,
    view: View,
    seen: Vec<Seen>,
}

impl Viewed {
    fn new(i: Address, seed: u64, now: Instant) -> Self {
        let config = ClusterConfig {
            seeds: if i == 0 { Vec::new() } else { vec![address(0)] },
            rng_seed: seed ^ (i as u64 + 1),
            ..ClusterConfig::default()
        };
        // The address and settings are valid by construction.
        let mut membership = Membership::new(config, address(i), 1, now).expect("valid settings");
        let ring = Arc::clone(membership.ring());
        let view = View::new(
            membership.local().clone(),
            Vec::new(),
            ring,
            membership.config().vnodes_per_weight,
            membership.config().lookup_probes,
        );
        let mut v = Self {
            membership,
            view,
            seen: Vec::new(),
        };
        v.drain();
        v
    }

    fn drain(&mut self) {
        let batch_end = self.membership.members();
        let mut any = false;
        while let Some(event) = self.membership.poll_event() {
            any = true;
            self.view.apply(&event);
            self.seen.push(Seen {
                event,
                reported: self.view.members().to_vec(),
                batch_end: batch_end.clone(),
            });
        }
        if any {
            // The replay reaches what the membership holds.
            assert_eq!(lives(self.view.members()), lives(&batch_end));
            assert_eq!(self.view.ring().members(), self.membership.ring().members());
        }
        let ring = Arc::clone(self.membership.ring());
        self.view
            .reset(self.membership.local().clone(), batch_end, ring);
    }
}

impl Protocol for Viewed {
    type Address = Address;
    type Event = ();

    fn handle_packet(&mut self, now: Instant, _from: Address, packet: Bytes) {
        let _ = self.membership.handle_packet(now, &packet);
        self.drain();
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.membership.handle_timeout(now);
        self.drain();
    }

    fn poll_transmit(&mut self) -> Option<(Address, Bytes)> {
        let t = self.membership.poll_transmit()?;
        Some((index(&t.to).unwrap_or(usize::MAX), t.packet))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.membership.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<()> {
        None
    }
}

fn lives(members: &[Member]) -> Vec<(Arc<str>, u64, MemberState)> {
    members
        .iter()
        .map(|m| (Arc::clone(&m.address), m.incarnation, m.state))
        .collect()
}

/// Members shown up (or suspect) in a list whose `MemberUp` (or, for the
/// member that formed the cluster, `Formed`) was not reported by then.
fn up_before_event(seen: &[Seen], list: impl Fn(&Seen) -> &[Member]) -> usize {
    let mut reported: HashSet<(Arc<str>, u64)> = HashSet::new();
    let mut early = 0;
    for s in seen {
        match &s.event {
            ClusterEvent::MemberUp(m) | ClusterEvent::Formed { local: m } => {
                reported.insert((Arc::clone(&m.address), m.life));
            }
            _ => {}
        }
        early += list(s)
            .iter()
            .filter(|m| matches!(m.state, MemberState::Up | MemberState::Suspect))
            .filter(|m| !reported.contains(&(Arc::clone(&m.address), m.life)))
            .count();
    }
    early
}

fn lan() -> LinkModel {
    LinkModel {
        latency: Duration::from_micros(500),
        jitter: Duration::from_micros(200),
        ..LinkModel::default()
    }
}

#[test]
fn a_joiner_lists_no_member_up_before_that_member_up_event() {
    let batches_ahead = std::cell::Cell::new(0);
    check_seeds(0..20, |seed| {
        let mut sim = Sim::new(seed, lan());
        for i in 0..5 {
            let now = sim.now();
            sim.add(Viewed::new(i, seed, now));
        }
        sim.run_for(Duration::from_secs(20));
        for i in 0..5 {
            // Every member is simulated to the end (none crashes).
            let p = sim.process(i).expect("member is live");
            assert_eq!(p.membership.local().state, MemberState::Up);
            let ups = p
                .seen
                .iter()
                .filter(|s| matches!(s.event, ClusterEvent::MemberUp(_)))
                .count();
            assert!(ups >= 4, "seed {seed}: member {i} saw {ups} members up");
            assert_eq!(
                up_before_event(&p.seen, |s| &s.reported),
                0,
                "seed {seed}: member {i} listed a member up before its event"
            );
            batches_ahead.set(batches_ahead.get() + up_before_event(&p.seen, |s| &s.batch_end));
        }
    });
    // The runs had batches whose last state runs ahead of their first
    // events (what a list as of the batch's end would have shown).
    assert!(batches_ahead.get() > 0);
}
