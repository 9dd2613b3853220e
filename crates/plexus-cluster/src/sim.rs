//! Cluster members in the simulator (`plexus-sim`): the adapter that makes a
//! [`Membership`] a simulated process ([`Protocol`]), and [`ClusterSim`], a cluster of
//! them with the helpers tests and the `cluster-sim` benchmark share.
//!
//! Member `i` has the address `sim:i`.
//!
//! ```
//! use std::time::Duration;
//! use plexus_cluster::sim::ClusterSim;
//! use plexus_cluster::ClusterConfig;
//!
//! let mut sim = ClusterSim::new(5, ClusterConfig::default(), 7, Default::default());
//! assert!(sim.run_until_converged(Duration::from_secs(30)));
//! sim.crash(3);
//! sim.run_for(Duration::from_secs(30));
//! assert!(sim.everyone_sees_down(3));
//! ```

use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_sim::{Address, LinkModel, Protocol, Sim};

use crate::config::ClusterConfig;
use crate::event::ClusterEvent;
use crate::member::MemberState;
use crate::membership::Membership;

/// The address of simulated member `i`.
pub fn address(i: Address) -> String {
    format!("sim:{i}")
}

/// The simulator index of a member address (`None` for one that is not
/// `sim:<n>`).
pub fn index(address: &str) -> Option<Address> {
    address.strip_prefix("sim:")?.parse().ok()
}

/// A [`Membership`] as a simulated process.
#[derive(Debug)]
pub struct SimMember {
    /// The member's state machine (its `stats()` count refused packets).
    pub membership: Membership,
}

impl Protocol for SimMember {
    type Address = Address;
    type Event = ClusterEvent;

    fn handle_packet(&mut self, now: Instant, _from: Address, packet: Bytes) {
        // A refused packet is counted in the membership's stats.
        let _ = self.membership.handle_packet(now, &packet);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.membership.handle_timeout(now);
    }

    fn poll_transmit(&mut self) -> Option<(Address, Bytes)> {
        let t = self.membership.poll_transmit()?;
        // An address that is no simulated member goes nowhere (the
        // simulator drops packets to unknown addresses).
        Some((index(&t.to).unwrap_or(usize::MAX), t.packet))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.membership.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<ClusterEvent> {
        self.membership.poll_event()
    }
}

/// A simulated cluster: member 0 forms it, the others join through it.
#[derive(Debug)]
pub struct ClusterSim {
    /// The simulator.
    pub sim: Sim<SimMember>,
    config: ClusterConfig,
    /// Incarnations handed out so far (a restarted member gets a higher one).
    lives: Vec<u64>,
    /// The member whose view was not converged at the last check.
    last_unconverged: std::cell::Cell<Address>,
}

impl ClusterSim {
    /// `n` members with `config` (seeds replaced by member 0), the network
    /// `model`, randomness from `seed`. All start at once.
    pub fn new(n: usize, config: ClusterConfig, seed: u64, model: LinkModel) -> Self {
        let mut sim = Sim::new(seed, model);
        let mut lives = Vec::with_capacity(n);
        for i in 0..n {
            let seeds = if i == 0 { None } else { Some(0) };
            let member = Self::member(&config, i, 1, seed, seeds, sim.now());
            sim.add(member);
            lives.push(1);
        }
        Self {
            sim,
            config,
            lives,
            last_unconverged: std::cell::Cell::new(0),
        }
    }

    /// Member `i` joining through `seed` (forming a cluster without one).
    fn member(
        config: &ClusterConfig,
        i: Address,
        incarnation: u64,
        seed: u64,
        join_through: Option<Address>,
        now: Instant,
    ) -> SimMember {
        let mut config = config.clone();
        config.seeds = join_through.map(address).into_iter().collect();
        config.rng_seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ incarnation;
        SimMember {
            // The address and settings are valid by construction.
            membership: Membership::new(config, address(i), incarnation, now)
                .expect("simulated member settings are valid"),
        }
    }

    /// Number of addresses (crashed members included).
    pub fn len(&self) -> usize {
        self.sim.len()
    }

    /// Whether the cluster has no members.
    pub fn is_empty(&self) -> bool {
        self.sim.is_empty()
    }

    /// The membership of member `i`, unless it crashed.
    pub fn member_view(&self, i: Address) -> Option<&Membership> {
        self.sim.process(i).map(|p| &p.membership)
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.sim.run_for(d);
    }

    /// Crashes member `i`.
    pub fn crash(&mut self, i: Address) {
        self.sim.crash(i);
    }

    /// Restarts member `i` as a new life (a higher incarnation), joining
    /// through `seed`, or member 0 (member 0 without a seed forms a new
    /// cluster).
    pub fn restart(&mut self, i: Address, seed: Option<Address>) {
        self.lives[i] += 1_000;
        let now = self.sim.now();
        let through = seed.or((i != 0).then_some(0));
        let m = Self::member(
            &self.config,
            i,
            self.lives[i],
            self.sim.seed(),
            through,
            now,
        );
        self.sim.restart(i, m);
    }

    /// Adds a new member that joins through `through`; returns its index.
    pub fn join(&mut self, through: Address) -> Address {
        let i = self.sim.len();
        let now = self.sim.now();
        let m = Self::member(&self.config, i, 1, self.sim.seed(), Some(through), now);
        self.lives.push(1);
        let added = self.sim.add(m);
        debug_assert_eq!(added, i);
        added
    }

    /// Whether every live member other than `i` sees member `i` up.
    pub fn everyone_sees_up(&self, i: Address) -> bool {
        let a = address(i);
        self.live().iter().filter(|&&j| j != i).all(|&j| {
            self.member_view(j)
                .and_then(|v| v.member(&a))
                .is_some_and(|m| m.state == MemberState::Up)
        })
    }

    /// Live (not crashed) member indices.
    pub fn live(&self) -> Vec<Address> {
        self.sim.live().collect()
    }

    /// Whether every live member sees every live member (itself included)
    /// `Up`, and every crashed one as not live (or not at all).
    pub fn converged(&self) -> bool {
        let n = self.sim.len();
        let addresses: Vec<String> = (0..n).map(address).collect();
        let live: Vec<bool> = (0..n).map(|i| self.sim.process(i).is_some()).collect();
        // Views converge at different times: start with the one that failed
        // last time, so a check that fails costs one view, not all.
        let start = self.last_unconverged.get();
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| live[i])
            .all(|i| {
                let Some(view) = self.member_view(i) else {
                    return false;
                };
                let agrees = (0..n).all(|j| {
                    let m = view.member(&addresses[j]);
                    if live[j] {
                        m.is_some_and(|m| m.state == MemberState::Up)
                    } else {
                        m.is_none_or(|m| !m.state.is_live())
                    }
                });
                if !agrees {
                    self.last_unconverged.set(i);
                }
                agrees
            })
    }

    /// Runs until [`ClusterSim::converged`] or `limit` passed.
    pub fn run_until_converged(&mut self, limit: Duration) -> bool {
        let start = self.sim.now();
        let deadline = start + limit;
        // Checking after every event costs O(n²); check every 100 ms of
        // virtual time instead.
        while self.sim.now() < deadline {
            if self.converged() {
                return true;
            }
            self.sim.run_for(Duration::from_millis(100));
        }
        self.converged()
    }

    /// Whether every live member holds member `i` as down or removed (or
    /// forgot it).
    pub fn everyone_sees_down(&self, i: Address) -> bool {
        let a = address(i);
        self.live().iter().filter(|&&j| j != i).all(|&j| {
            self.member_view(j)
                .and_then(|v| v.member(&a))
                .is_none_or(|m| matches!(m.state, MemberState::Down | MemberState::Removed))
        })
    }

    /// Members that consider themselves up.
    pub fn self_up(&self) -> Vec<Address> {
        self.live()
            .into_iter()
            .filter(|&i| {
                self.member_view(i)
                    .is_some_and(|v| v.local().state == MemberState::Up)
            })
            .collect()
    }

    /// The events raised so far with their times, as recorded by the
    /// simulator.
    pub fn events(&self) -> &[plexus_sim::Recorded<ClusterEvent>] {
        self.sim.events()
    }
}
