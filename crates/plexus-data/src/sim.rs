//! Replicators in the simulator (`plexus-sim`): [`SimReplica`] makes a
//! [`Replicator`] a simulated process with a disk that survives its crashes,
//! and [`DataSim`] is a cluster of them with the helpers tests and the
//! `data-sim` benchmark share.
//!
//! Replica `i` has the address `sim:i`. Membership is given, not run: every
//! replica knows every live one (the cluster's membership has its own
//! simulation); [`DataSim::remove`] takes a replica out for good, which is
//! what starts pruning.
//!
//! ```
//! use std::time::Duration;
//! use plexus_data::crdt::GCounter;
//! use plexus_data::sim::DataSim;
//! use plexus_data::{Consistency, Key, ReplicatorConfig};
//!
//! let mut sim = DataSim::new(3, ReplicatorConfig::default(), 7, Default::default());
//! let key = Key::<GCounter>::new("hits");
//! for i in 0..3 {
//!     sim.update(i, &key, Consistency::Local, |c, me| c.increment(me, 1)).unwrap();
//! }
//! assert!(sim.run_until_converged(&key, Duration::from_secs(10)));
//! assert_eq!(sim.value(0, &key).unwrap().value(), 3);
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_sim::{Address, LinkModel, Protocol, Sim};

use crate::crdt::{Crdt, ReplicaId};
use crate::replicator::{
    Consistency, Event, Key, Replicator, ReplicatorConfig, ReplicatorStats, RequestId, UpdateError,
};

/// The address of simulated replica `i`.
pub fn address(i: Address) -> Arc<str> {
    format!("sim:{i}").into()
}

fn index(address: &str) -> Option<Address> {
    address.strip_prefix("sim:")?.parse().ok()
}

/// A simulated disk: durable records by key, kept across crashes.
pub type Disk = Rc<RefCell<BTreeMap<String, Vec<u8>>>>;

/// A [`Replicator`] as a simulated process, writing its store batches to a
/// [`Disk`] at once (a store whose writes take no time).
#[derive(Debug)]
pub struct SimReplica {
    /// The state machine.
    pub replicator: Replicator,
    disk: Disk,
}

impl SimReplica {
    /// A replica over `disk`.
    pub fn new(replicator: Replicator, disk: Disk) -> Self {
        Self { replicator, disk }
    }

    fn store(&mut self, now: Instant) {
        while let Some(batch) = self.replicator.poll_store() {
            let mut disk = self.disk.borrow_mut();
            for (key, record) in &batch.records {
                disk.insert(key.to_string(), record.to_vec());
            }
            drop(disk);
            self.replicator.handle_stored(now, batch.id);
        }
    }
}

impl Protocol for SimReplica {
    type Address = Address;
    type Event = Event;

    fn handle_packet(&mut self, now: Instant, _from: Address, packet: Bytes) {
        // Refusals are counted in the replicator's stats.
        let _ = self.replicator.handle_packet(now, &packet);
        self.store(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.replicator.handle_timeout(now);
        self.store(now);
    }

    fn poll_transmit(&mut self) -> Option<(Address, Bytes)> {
        let t = self.replicator.poll_transmit()?;
        Some((index(&t.to).unwrap_or(usize::MAX), t.packet))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.replicator.poll_timeout()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.replicator.poll_event()
    }
}

/// A simulated cluster of replicators. See the [module docs](self).
#[derive(Debug)]
pub struct DataSim {
    /// The simulator.
    pub sim: Sim<SimReplica>,
    config: ReplicatorConfig,
    incarnations: Vec<u64>,
    disks: Vec<Disk>,
    /// Replicas taken out for good.
    removed: Vec<bool>,
    /// Registers the test's types on a restarted replica.
    registrations: Vec<fn(&mut Replicator)>,
}

impl DataSim {
    /// `n` replicas that all know each other, with `model` on every link.
    pub fn new(n: usize, config: ReplicatorConfig, seed: u64, model: LinkModel) -> Self {
        let mut this = Self {
            sim: Sim::new(seed, model),
            config,
            incarnations: vec![1; n],
            disks: (0..n).map(|_| Disk::default()).collect(),
            removed: vec![false; n],
            registrations: Vec::new(),
        };
        let now = this.sim.now();
        for i in 0..n {
            let r = this.replicator_for(i, now);
            this.sim.add(SimReplica::new(r, Rc::clone(&this.disks[i])));
        }
        this.publish_members();
        this
    }

    fn replicator_for(&self, i: Address, now: Instant) -> Replicator {
        let config = ReplicatorConfig {
            rng_seed: self.sim.seed() ^ (i as u64) << 32 ^ self.incarnations[i],
            ..self.config.clone()
        };
        Replicator::new(config, address(i), self.incarnations[i], now)
    }

    fn members(&self) -> Vec<Arc<str>> {
        (0..self.incarnations.len())
            .filter(|&i| !self.removed[i])
            .map(address)
            .collect()
    }

    fn publish_members(&mut self) {
        let members = self.members();
        let now = self.sim.now();
        let live: Vec<Address> = self.sim.live().collect();
        for i in live {
            if let Some(p) = self.sim.process_mut(i) {
                p.replicator.set_members(now, &members);
            }
            self.sim.wake(i);
        }
    }

    /// Registers `T` on every replica, now and after restarts (so a
    /// restarted replica recovers its durable keys of `T`).
    pub fn register<T: Crdt>(&mut self) {
        self.registrations.push(|r| r.register::<T>());
        let live: Vec<Address> = self.sim.live().collect();
        for i in live {
            if let Some(p) = self.sim.process_mut(i) {
                p.replicator.register::<T>();
            }
        }
    }

    /// The replica id of replica `i` in its current life.
    pub fn replica(&self, i: Address) -> ReplicaId {
        ReplicaId::of_member(&address(i), self.incarnations[i])
    }

    /// Updates `key` at replica `i`; `modify` gets the state and the
    /// replica's id and returns the delta.
    ///
    /// # Errors
    ///
    /// What [`Replicator::update`] returns; a crashed replica's update is
    /// refused as [`UpdateError::NotEnoughMembers`] with 0 members.
    pub fn update<T: Crdt>(
        &mut self,
        i: Address,
        key: &Key<T>,
        level: Consistency,
        modify: impl FnOnce(&mut T, ReplicaId) -> T,
    ) -> Result<RequestId, UpdateError> {
        self.update_with_timeout(i, key, level, Duration::from_secs(5), modify)
    }

    /// [`DataSim::update`] with a timeout.
    ///
    /// # Errors
    ///
    /// See [`DataSim::update`].
    pub fn update_with_timeout<T: Crdt>(
        &mut self,
        i: Address,
        key: &Key<T>,
        level: Consistency,
        timeout: Duration,
        modify: impl FnOnce(&mut T, ReplicaId) -> T,
    ) -> Result<RequestId, UpdateError> {
        let now = self.sim.now();
        let Some(p) = self.sim.process_mut(i) else {
            return Err(UpdateError::NotEnoughMembers {
                key: key.name().to_string(),
                needed: 1,
                members: 0,
            });
        };
        let me = p.replicator.replica();
        let r = p
            .replicator
            .update(now, key, level, timeout, |s| modify(s, me));
        p.store(now);
        self.sim.wake(i);
        r
    }

    /// The state of `key` at replica `i` (`None`: crashed, or no such key).
    pub fn value<T: Crdt>(&self, i: Address, key: &Key<T>) -> Option<T> {
        self.sim
            .process(i)?
            .replicator
            .value(key)
            .ok()
            .flatten()
            .cloned()
    }

    /// Whether every live replica holds the same state of `key`.
    pub fn converged<T: Crdt>(&self, key: &Key<T>) -> bool {
        let mut states = self.sim.live().map(|i| {
            self.sim
                .process(i)
                .and_then(|p| p.replicator.value(key).ok().flatten())
        });
        let Some(first) = states.next() else {
            return true;
        };
        states.all(|s| s == first)
    }

    /// Runs until [`DataSim::converged`] holds for `key` or `limit` passed.
    pub fn run_until_converged<T: Crdt>(&mut self, key: &Key<T>, limit: Duration) -> bool {
        let key = key.clone();
        let mut done = false;
        let this = &mut *self;
        let ok = this.sim.run_until(limit, |sim| {
            let mut states = sim.live().map(|i| {
                sim.process(i)
                    .and_then(|p| p.replicator.value(&key).ok().flatten())
            });
            done = match states.next() {
                None => true,
                Some(first) => first.is_some() && states.all(|s| s == first),
            };
            done
        });
        ok && done
    }

    /// Runs for `duration` of virtual time.
    pub fn run_for(&mut self, duration: Duration) {
        self.sim.run_for(duration);
    }

    /// Crashes replica `i` (its disk stays).
    pub fn crash(&mut self, i: Address) {
        self.sim.crash(i);
    }

    /// Restarts replica `i` as a new life: a new incarnation (so a new
    /// replica id), its durable keys recovered from its disk; the others
    /// learn the new incarnation.
    pub fn restart(&mut self, i: Address) {
        self.sim.crash(i);
        self.incarnations[i] += 1;
        let now = self.sim.now();
        let mut r = self.replicator_for(i, now);
        for register in &self.registrations {
            register(&mut r);
        }
        let records: Vec<(String, Vec<u8>)> = self.disks[i]
            .borrow()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for error in r.recover(records) {
            tracing::warn!(target: "plexus::data", %error, "simulated replica: record not recovered");
        }
        self.sim
            .restart(i, SimReplica::new(r, Rc::clone(&self.disks[i])));
        self.publish_members();
    }

    /// Takes replica `i` out of the cluster for good (crashed, and no
    /// longer a member anywhere): its entries get pruned.
    pub fn remove(&mut self, i: Address) {
        self.sim.crash(i);
        self.removed[i] = true;
        self.publish_members();
    }

    /// The disk of replica `i`.
    pub fn disk(&self, i: Address) -> &Disk {
        &self.disks[i]
    }

    /// The counters of replica `i` (default if crashed).
    pub fn stats(&self, i: Address) -> ReplicatorStats {
        self.sim
            .process(i)
            .map(|p| p.replicator.stats())
            .unwrap_or_default()
    }

    /// Bytes every replica put on the network so far.
    pub fn bytes_sent(&self) -> u64 {
        (0..self.incarnations.len())
            .map(|i| self.sim.traffic(i).bytes)
            .sum()
    }
}
